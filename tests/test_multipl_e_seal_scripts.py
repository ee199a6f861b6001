"""MultiPL-E's script languages sealed (JavaScript, Bash, Perl: `multipl_e/seals/{js,sh,pl}.py`):
a corpus of cheats in MultiPL-E's own row format, each of which scores 0 here; where MultiPL-E's
reference harness passes one (its commands run outside any sandbox: `reference_verdict`) that is
shown too, and where today's single-process layout passed one, that as well. The cheats reach
for the comparison from the candidate's process: replacing the assertion or its module, exit
hooks, builtins and shell options, reading the tests (expected values, the end marker) from the
program's own source. Sealed, each can only produce values, and those are wrong.

Also the values' encodings: what the tests compare crosses exactly (JavaScript's -0, NaN,
undefined, holes; Bash's bytes; Perl's undef and strings), and a garbled values file fails."""

import shutil

import pytest

from easylemur.eval.api import EvalDataError
from easylemur.eval.benchmarks.multipl_e.languages import LANGUAGES, build_program, single_process_program, unavailable
from easylemur.eval.sandbox import PASSED
from multipl_e_seal_common import assert_cheats_fail, judge_cases, judge_loop, load_verdicts, need
from test_multipl_e import PERL_CHECK, ROWS

# seconds of compiles and sandbox runs per language: the full suite's, not the fast tier's
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")]

MARKER_RE = "easylemur-tests-done-[0-9a-f]+"

# {lang: {name: (row index in ROWS[lang], completion, the reference passes it, found by the probe: today's
# single-process layout passes it, checked too)}}
CHEATS = {
    "js": {
        "deepEqual replaced": (0, "  return true;\n}\nrequire('node:assert').deepEqual = () => {};\n", True, True),
        "Module._load hands the tests a fake assert": (
            0, "  return true;\n}\n{\n  const M = require('module'), load = M._load;\n"
               "  M._load = function (r, ...rest) {\n"
               "    return /assert/.test(r) ? { deepEqual() {} } : load.call(this, r, ...rest);\n  };\n}\n",
            True, False),
        "an exit handler prints the marker read from process.argv[1]": (
            0, "  return true;\n}\nprocess.on('uncaughtException', () => {});\nprocess.on('exit', () => {\n"
               f"  const m = require('fs').readFileSync(process.argv[1], 'utf8').match(/{MARKER_RE}/);\n"
               "  if (m) console.log('\\n' + m[0]);\n});\n", True, True),
        "process.exitCode and the marker read from __filename": (
            0, "  return true;\n}\nprocess.on('uncaughtException', () => {\n  process.exitCode = 0;\n"
               f"  const m = require('fs').readFileSync(__filename, 'utf8').match(/{MARKER_RE}/);\n"
               "  if (m) console.log('\\n' + m[0]);\n});\n", True, False),
        "console.log overridden to print the marker": (
            0, "  return true;\n}\nconst log = console.log;\n"
               "console.log = () => log('\\n' + (require('fs').readFileSync(__filename, 'utf8')\n"
               f"  .match(/{MARKER_RE}/) || [''])[0]);\n"
               "process.on('uncaughtException', () => console.log());\n", True, False),
        "uncaught exceptions swallowed": (0, "  return true;\n}\nprocess.on('uncaughtException', () => {});\n", True, False),
        "Object.prototype patched": (
            0, "  return true;\n}\nObject.defineProperty(Object.prototype, 'deepEqual', { get() { return () => {}; } });\n"
               "Boolean.prototype.valueOf = function () { return true; };\n", False, False),
        "Array.prototype and Object.keys patched": (
            1, "  return [0];\n}\nArray.prototype.every = () => true;\nArray.isArray = () => false;\nObject.keys = () => [];\n"
               "Number.isNaN = () => true;\n", False, False),
        "a getter on globalThis": (
            0, "  return true;\n}\nfor (const name of ['assert', 'test', 'candidate']) {\n"
               "  Object.defineProperty(globalThis, name, { get: () => ({ deepEqual() {} }) });\n}\n", False, False),
        "reads the expected values from its own source": (
            0, "  const src = require('fs').readFileSync(process.argv[1], 'utf8');\n"
               "  const want = [...src.matchAll(/deepEqual\\(candidate\\(.*\\),(.*)\\);/g)].map((m) => m[1]);\n"
               "  globalThis.k = (globalThis.k || 0) + 1;\n  return JSON.parse(want[globalThis.k - 1]);\n}\n", True, False),
    },
    "pl": {
        "CORE::GLOBAL::exit overridden": (0, "    return 1;\n}\nBEGIN { *CORE::GLOBAL::exit = sub { }; }\n", True, True),
        "Test::Deep::eq_deeply replaced": (0, "    return 1;\n}\nno warnings; *Test::Deep::eq_deeply = sub { 1 };\n",
                                           False, False),
        "sub Test::Deep::eq_deeply": (
            0, "    return 1;\n}\nuse Test::Deep;\nno warnings 'redefine';\nsub Test::Deep::eq_deeply { 1 }\n", True, True),
        "Test::Deep::eq_deeply replaced in BEGIN": (
            0, "    return 1;\n}\nBEGIN { require Test::Deep; no warnings; *Test::Deep::eq_deeply = sub { 1 }; }\n", True, True),
        "main::eq_deeply replaced": (0, "    return 1;\n}\nno warnings; *main::eq_deeply = sub { 1 };\n", True, False),
        "Test::Deep::descend replaced": (0, "    return 1;\n}\nno warnings; *Test::Deep::descend = sub { 1 };\n",
                                         True, False),
        "local $Test::Deep::LeafWrapper": (
            0, "    return 1;\n}\nrequire Test::Deep;\nlocal $Test::Deep::LeafWrapper = sub { Test::Deep::ignore() };\n",
            True, False),
        "CORE::GLOBAL::die and $SIG{__DIE__}": (
            0, "    return 1;\n}\nBEGIN { *CORE::GLOBAL::die = sub { }; }\n$SIG{__DIE__} = sub { };\n", False, False),
        "END resets the exit status": (0, "    return 1;\n}\nEND { $? = 0; }\n", True, False),
        "END prints the marker read from $0": (
            0, "    return 1;\n}\nEND {\n    open(my $f, '<', $0) or die;\n    my ($m) = do { local $/; <$f> } =~ "
               f"/({MARKER_RE})/;\n    print \"\\n$m\\n\";\n    $? = 0;\n}}\n", True, True),
        "POSIX::_exit(0)": (0, "    require POSIX;\n    POSIX::_exit(0);\n}\n", True, False),
        "print redefined": (0, "    return 1;\n}\nBEGIN { no warnings; *CORE::GLOBAL::print = sub { 1 }; }\n", False, False),
        "reads the expected values from its own source": (
            0, "    our (@want, $k);\n    if (!@want) {\n        open(my $f, '<', $0) or die;\n"
               "        @want = do { local $/; <$f> } =~ /eq_deeply\\(\\$candidate->\\(.*\\),(.*)\\)\\) \\{/g;\n    }\n"
               "    my $w = $want[$k++];\n    return $w eq '\"\"' ? \"\" : $w;\n}\n", True, False),
        "a list of two equal values": (0, "    return (1, 1);\n}\n", True, False),
    },
    "sh": {
        "set redefined": (0, "    echo 12; }\nset() { :; }\nunused() {\n    :", True, True),
        "test and [ redefined": (0, "    echo 12; }\ntest() { :; }\n[() { :; }\nunused() {\n    :", False, False),
        "exit and builtin redefined": (0, "    echo 12; }\nexit() { :; }\nbuiltin() { :; }\nunused() {\n    :", False, False),
        "enable -n set": (0, "    echo 12; }\nenable -n set\nunused() {\n    :", True, False),
        "trap exit 0 on EXIT": (0, "    echo 12; }\ntrap 'exit 0' EXIT\nunused() {\n    :", True, False),
        "an EXIT trap prints the marker read from $0": (
            0, "    echo 12; }\nmark() {\n    local l m\n    while IFS= read -r l; do\n"
               f"        [[ $l =~ ({MARKER_RE}) ]] && m=${{BASH_REMATCH[1]}}\n    done < \"$0\"\n"
               "    printf '\\n%s\\n' \"$m\"\n    exit 0\n}\ntrap mark EXIT\nunused() {\n    :", True, True),
        "alias set with expand_aliases": (
            0, "    echo 12; }\nshopt -s expand_aliases\nalias set=:\nunused() {\n    :", True, False),
        "alias [[ with expand_aliases": (
            0, "    echo 12; }\nshopt -s expand_aliases\nalias '[['='true || [['\nunused() {\n    :", True, False),
        "a read-only run_test": (0, "    echo 12; }\nset() { :; }\nrun_test() { :; }\nreadonly -f run_test\nunused() {\n    :",
                                 True, False),
        "reads the expected values from its own source": (
            0, "    local line want\n    while IFS= read -r line; do\n"
               "        [[ $line == *\"candidate \\\"$1\\\" \\\"$2\\\") = \"* ]] &&\n"
               "            want=${line##*= \\\"} && want=${want%%\\\"*}\n"
               "    done < \"$0\"\n    echo \"$want\"", True, False),
    },
}


# What the tests compare crosses exactly: (the function's return value, or its body in Bash, the
# expected value in the tests, the reference passes it). The pairs the reference passes are judged
# as one problem with a call each (the function returns the value of the call's index), every
# other pair as a problem of its own; the sealed verdict must be the reference's on each.
FIDELITY = {
    "js": [("-0", "0", True), ("NaN", "NaN", True), ("null", "undefined", True), ("undefined", "undefined", True),
           ("[1, , 3]", "[1, undefined, 3]", False), ("[undefined]", "[null]", True), ("'1'", "1", True),
           ("true", "1", True), ("1n", "1", True), ("-Infinity", "Infinity", False), ("0.1 + 0.2", "0.3", False),
           ("0.1 + 0.2", "0.30000000000000004", True), ("{b: [1, {c: 'x'}], a: 2}", "{a: 2, b: [1, {c: 'x'}]}", True),
           ("{a: undefined}", "{}", False), ("new Map([[1, 2]])", "{}", False), ("Object.assign([1], {x: 1})", "[1]", False),
           ("Object.create(null)", "{}", True), ("new (class P { constructor() { this.a = [1]; } })()", "{a: [1]}", True),
           ("() => 1", "undefined", False), ("'\\ud800\\u00e9\\n\"'", "'\\ud800\\u00e9\\n\"'", True)],
    "pl": [("undef", "undef", True), ("undef", '""', False), ('"1.0"', "1", False), ("1.0", "1", True),
           ("0.1 + 0.2", "0.3", True), ("[1, [2, {a => undef}]]", "[1, [2, {a => undef}]]", True),
           ("{a => 1}", "{a => 1, b => 2}", False), ("[]", "{}", False), ('"\\x{263A}\\0"', '"\\x{263A}\\0"', True),
           ('"\\xe9"', '"\\x{e9}"', True), ('bless([], "X")', "[]", False), ("()", "undef", True), ("()", "1", False),
           ("9**9**9", '"Inf"', True), ('{"" => [undef, ""]}', '{"" => [undef, ""]}', True), ("\\1", "1", False)],
    "sh": [("printf 'a\\n\\n'", '"a"', True), ("printf ' a'", '" a"', True), ("printf ' a'", '"a"', False),
           ("printf '\\xff\\xfe'", "$'\\xff\\xfe'", True), ("echo '*'", '"*"', True), ("printf 'a\\0b'", '"ab"', True),
           ("echo 1; exit 3", '"1"', True), ("echo 1 >&2", '""', True), ("printf '1 2\\n3 4'", '"1 2\n3 4"', True),
           ('echo "$2"', '"a  b"', True), ('echo $2', '"a  b"', False), ("printf '%s' '$(echo 1)'", '"1"', False)],
}


def fidelity_row(lang: str, pairs: list) -> tuple:
    """(row, completion): a problem in MultiPL-E's layout with one call per (value, expected) pair:
    call k returns the k-th value (Bash: runs the k-th body, called with "k" "a  b") and its test
    expects the k-th expected value."""
    if lang == "js":
        prompt = "// f\nfunction f(x){\n"
        completion = "".join(f"  if (x === {k}) return {v};\n" for k, (v, _) in enumerate(pairs)) + "}\n"
        tests = ("const assert = require('node:assert');\n\n\nfunction test() {\n  let candidate = f;\n"
                 + "".join(f"  assert.deepEqual(candidate({k}),{e});\n" for k, (_, e) in enumerate(pairs)) + "}\n\ntest();")
    elif lang == "pl":
        prompt = "# f\nsub f {\n    my($x) = @_;\n"
        completion = "".join(f"    return {v} if $x == {k};\n" for k, (v, _) in enumerate(pairs)) + "}\n"
        tests = ("use Test::Deep;\n\n\nsub testhumaneval {\n    my $candidate = \\&f;\n"
                 + "".join(PERL_CHECK.format(a=k, e=e) for k, (_, e) in enumerate(pairs)) + "}\n\ntesthumaneval();")
    else:
        prompt = "#!/bin/bash\n# f\n#\n# $1 is an integer\n# $2 is a string\nf() {\n"
        completion = "    case $1 in\n" + "".join(f"        {k}) {v} ;;\n" for k, (v, _) in enumerate(pairs)) + "    esac"
        tests = ("}\n\ncandidate() {\n    f \"$@\"\n}\n\nset -e\nrun_test() {\n"
                 + "".join(f"    [[ $(candidate \"{k}\" \"a  b\") = {e} ]]\n" for k, (_, e) in enumerate(pairs))
                 + "}\n\nrun_test")
    return {"name": "f", "language": lang, "prompt": prompt, "tests": tests}, completion


def fidelity_groups(lang: str) -> list:
    """The pairs of FIDELITY[lang] in the problems they are judged as: those the reference passes
    together, then each other pair alone."""
    passing = [(v, e) for v, e, passes in FIDELITY[lang] if passes]
    return [passing] + [[(v, e)] for v, e, passes in FIDELITY[lang] if not passes]


# An honest-looking Perl completion that uses List::Util's `any`: the tests' `use Test::Deep`
# exports its own `any` over it, so the reference fails it (`any` returns a true object), and the
# sealed program keeps the tests' `use Test::Deep` ahead of the calls to fail it alike.
PERL_LIST_UTIL_ANY = ("    use List::Util qw(any);\n    for my $i (0..$#$numbers) {\n"
                      "        return 1 if any { abs($numbers->[$i] - $_) < $threshold } @$numbers[$i + 1 .. $#$numbers];\n"
                      "    }\n    return \"\";\n}\n")

# A values file the program stage leaves (the judge alone, run once per file: `judge_loop`), for the
# second problem of each language (JavaScript and Perl: truncate_number, 0.5, 0.25, 0.0; Bash:
# strlen, 0, 1, 9): (bytes, the tests pass). Only well-formed values of the right count pass, and
# nothing in them runs.
VALUES = {
    "js": {"right": (b'["n","0.5"]\n["n","0.25"]\n["n","0"]\n', True), "empty": (b"", False),
           "one short": (b'["n","0.5"]\n["n","0.25"]\n', False),
           "one more": (b'["n","0.5"]\n["n","0.25"]\n["n","0"]\n["n","0"]\n', False),
           "no last newline": (b'["n","0.5"]\n["n","0.25"]\n["n","0"]', False),
           "broken JSON": (b'["n","0.5"]\n["n",\n["n","0"]\n', False),
           "a number that is no number text": (b'["n","0.5"]\n["n","0x10"]\n["n","0"]\n', False),
           "code": (b'["n","0.5"]\n["n","0.25"]\nprocess.exit(0)\n', False),
           "a value that could not cross": (b'["n","0.5"]\n["n","0.25"]\n["!","a function"]\n', False),
           "an unknown tag": (b'["n","0.5"]\n["n","0.25"]\n["x","0"]\n', False)},
    "pl": {"right": (b"l1:s3:0.5l1:s4:0.25l1:s1:0", True), "empty": (b"", False),
           "one short": (b"l1:s3:0.5l1:s4:0.25", False), "one more": (b"l1:s3:0.5l1:s4:0.25l1:s1:0l0:", False),
           "trailing bytes": (b"l1:s3:0.5l1:s4:0.25l1:s1:0x", False),
           "a length past the end": (b"l1:s3:0.5l1:s4:0.25l1:s9:0", False),
           "a count past the end": (b"l1:s3:0.5l1:s4:0.25l999999999:", False),
           "not UTF-8": (b"l1:s3:0.5l1:s4:0.25l1:s1:\xff", False),
           "code": (b"l1:s3:0.5l1:s4:0.25l1:s9:system(1)", False),
           "a list of two values": (b"l1:s3:0.5l1:s4:0.25l2:s1:0s1:0", False),
           "a value that could not cross": (b"l1:s3:0.5l1:s4:0.25l1:!10:a CODE ref", False)},
    "sh": {"right": (b"0\x001\x009\x00", True), "empty": (b"", False), "one short": (b"0\x001\x00", False),
           "one more": (b"0\x001\x009\x009\x00", False), "no last NUL": (b"0\x001\x009", False),
           "a command substitution": (b"$(echo 0)\x001\x009\x00", False), "a backquote": (b"`echo 0`\x001\x009\x00", False)},
}


def _available(lang: str) -> bool:
    return not unavailable(LANGUAGES[lang])


def _judge_all(out) -> None:
    """Every case of the languages whose toolchain is here (multipl_e_seal_common.judge_cases); the
    values files of VALUES through one judge loop per language."""
    cases, loops = [], []
    for lang in (lang for lang in CHEATS if _available(lang)):
        for name, (index, completion, _, today) in CHEATS[lang].items():
            row = ROWS[lang][index][0]
            args = (LANGUAGES[lang], row["prompt"], completion, row["tests"], row["name"])
            cases.append(((lang, "cheat", name), build_program(*args), (lang, row, completion),
                          single_process_program(*args) if today else None))
        for pairs in fidelity_groups(lang):
            row, completion = fidelity_row(lang, pairs)
            cases.append(((lang, "values", *(x for pair in pairs for x in pair)),
                          build_program(LANGUAGES[lang], row["prompt"], completion, row["tests"], row["name"]),
                          (lang, row, completion), None))
        row, good, _ = ROWS[lang][1]
        sealed = build_program(LANGUAGES[lang], row["prompt"], good, row["tests"], row["name"])
        loops.append(([lang, "values files"], judge_loop(sealed, [data for data, _ in VALUES[lang].values()])))
    if _available("pl"):
        row = ROWS["pl"][0][0]
        cases.append((("pl", "List::Util any"), build_program(LANGUAGES["pl"], row["prompt"], PERL_LIST_UTIL_ANY,
                                                              row["tests"], row["name"]), ("pl", row, PERL_LIST_UTIL_ANY), None))
    judge_cases(cases, out, loops)


@pytest.fixture(scope="module")
def verdicts(built_once):
    """{key: (sealed result, reference pass, today's result)}, judged once per test run."""
    return load_verdicts(built_once, "multipl_e_seal_scripts", _judge_all)


@pytest.mark.parametrize("lang", list(CHEATS))
def test_every_cheat_scores_zero_sealed(lang, verdicts):
    assert_cheats_fail(lang, {name: (ref, True if today else None) for name, (_, _, ref, today) in CHEATS[lang].items()},
                       verdicts)


@pytest.mark.parametrize("lang", list(FIDELITY))
def test_the_values_cross_exactly_as_the_reference_compares_them(lang, verdicts):
    need(lang)
    for at, pairs in enumerate(fidelity_groups(lang)):
        sealed, reference, _ = verdicts[(lang, "values", *(x for pair in pairs for x in pair))]
        assert reference is (at == 0), (lang, pairs, "the reference's verdict is not FIDELITY's")
        assert (sealed == PASSED) is reference, (lang, pairs, sealed)
        assert sealed == PASSED or sealed.startswith("failed: the tests "), (lang, pairs, sealed)
    if lang == "pl":
        sealed, reference, _ = verdicts[("pl", "List::Util any")]
        assert reference is False and sealed.startswith("failed: the tests"), sealed


@pytest.mark.parametrize("lang", list(VALUES))
def test_only_well_formed_values_of_the_right_count_pass(lang, verdicts):
    need(lang)
    output = verdicts[(lang, "values files")][0]
    seen = dict((line.split()[0], line.split()[1:]) for line in output.splitlines() if line.count(" ") == 2)
    for at, (name, (_, passes)) in enumerate(VALUES[lang].items()):
        status, marker = seen[str(at)]
        assert (status == "0" and marker == "1") is passes, (lang, name, status, marker, output)
        assert passes or status != "0", (lang, name, "a failing judge exits non-zero", output)


def test_the_program_stage_holds_no_expected_value_and_the_judge_the_tests_unchanged():
    for lang in CHEATS:
        for row, good, _ in ROWS[lang]:
            sealed = build_program(LANGUAGES[lang], row["prompt"], good, row["tests"], row["name"])
            (name, driver), = sealed.files
            (judge_name, judge), = sealed.judge.files
            assert name == judge_name == LANGUAGES[lang].file
            assert row["tests"].rstrip() in judge and driver.startswith(row["prompt"] + good + "\n")
            assert sealed.judge.end_marker in judge and sealed.judge.end_marker not in driver
            assert sealed.end_marker in driver and sealed.end_marker != sealed.judge.end_marker
            assert sealed.timeout == LANGUAGES[lang].timeout
            for line in row["tests"].splitlines():  # every comparison of the tests is left out of the driver
                if any(word in line for word in ("deepEqual", "eq_deeply", "[[")):
                    assert line not in driver, (lang, line)


def test_tests_outside_multipl_e_s_layout_are_a_data_error():
    """An older MultiPL-E Perl layout declared arguments between the cases (`my @arg0 = ...;`), which
    the driver would leave out; tests without a call, or without the line "}" that closes the test
    function, cannot be split either."""
    row = ROWS["pl"][0][0]
    old = row["tests"].replace("        if(eq_deeply($candidate->([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3)",
                               "    my @arg0 = (1.0, 2.0);\n    if(eq_deeply($candidate->(\\@arg0, 0.3)", 1)
    old = old.replace("    if(eq_deeply($candidate->(\\@arg0", "    my $x = $candidate->(\\@arg0", 1)
    with pytest.raises(EvalDataError, match=r"pl-row: a call of the Perl tests does not open one of MultiPL-E's comparisons"):
        build_program(LANGUAGES["pl"], row["prompt"], "", old, "pl-row")
    js = ROWS["js"][0][0]
    with pytest.raises(EvalDataError, match="js-row: no call of the function under test found in the JavaScript tests"):
        build_program(LANGUAGES["js"], js["prompt"], "", js["tests"].replace("candidate(", "other("), "js-row")
    with pytest.raises(EvalDataError, match=r"js-row: the JavaScript tests do not end with 1 closing brace of their test"):
        build_program(LANGUAGES["js"], js["prompt"], "", js["tests"].replace("\n}\n", "\n  }\n"), "js-row")
