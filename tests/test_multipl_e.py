"""MultiPL-E judged in the sandbox: rows in MultiPL-E's own format (HumanEval/0, /2, /13, /23 as
its dataset builder renders them), a known-good and a known-wrong completion per language, with
the same verdicts as MultiPL-E's reference rule (the same commands run outside any sandbox; a
pass when they exit 0 in time); early-exit cheats that the reference passes and the sandbox
fails; compile errors; and the loader."""

import concurrent.futures
import json
import os
import shutil
import subprocess
import tempfile

import pytest

from easylemur.eval.benchmarks.multipl_e.languages import LANGUAGES, Language, resolve, unavailable, with_marker
from easylemur.eval.benchmarks.multipl_e.task import MultiPLE, load_multipl_e
from easylemur.eval.sandbox import PASSED, SANDBOX_PATH, Sandbox, run_programs
from easylemur.eval.api import EvalDataError

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")

JAVA_IMPORTS = ("import java.util.*;\nimport java.lang.reflect.*;\nimport org.javatuples.*;\nimport java.security.*;\n"
                "import java.math.*;\nimport java.io.*;\nimport java.util.stream.*;\n")
GO_TEST_LOOP = ("   }\n\n\tfor i, tc := range tests {\n\t\tt.Run(fmt.Sprintf(\"test num % d\", i), func(t *testing.T) {\n"
                "\t\t\tif fmt.Sprintf(\"%v\", tc.actual) != fmt.Sprintf(\"%v\", tc.expected) {\n"
                "\t\t\t\tt.Errorf(\"expected '%s', got '%s'\", tc.expected, tc.actual)\n\t\t\t}\n\t\t})\n\t}\n}\n")
GO_TEST_HEAD = ("func Test{T}(t *testing.T) {{\n  candidate := {f}\n\ttype test struct {{\n\t\tactual   interface{{}}\n"
                "\t\texpected interface{{}}\n\t}}\n   tests := []test{{\n")
PERL_CHECK = "        if(eq_deeply($candidate->({a}),{e})) {{\n        print \"ok!\" }}else{{\n        exit 1;\n        }}\n"
H0_DOC = ["Check if in given {list} of numbers, are any two numbers closer to each other than", "given threshold."]
H0_CASES = [("[1.0, 2.0, 3.9, 4.0, 5.0, 2.2]", "0.3", True), ("[1.0, 2.0, 3.9, 4.0, 5.0, 2.2]", "0.05", False),
            ("[1.0, 2.0, 5.9, 4.0, 5.0]", "0.95", True), ("[1.0, 2.0, 5.9, 4.0, 5.0]", "0.8", False),
            ("[1.0, 2.0, 3.0, 4.0, 5.0, 2.0]", "0.1", True), ("[1.1, 2.2, 3.1, 4.1, 5.1]", "1.0", True),
            ("[1.1, 2.2, 3.1, 4.1, 5.1]", "0.5", False)]
H2_DOC = ["Given a positive floating point number, it can be decomposed into",
          "and integer part (largest integer smaller than given number) and decimals",
          "(leftover part always smaller than 1).", "Return the decimal part of the number."]
H2_CASES = [("3.5", "0.5"), ("1.25", "0.25"), ("123.0", "0.0")]


def _doc(lines, prefix, first=None):
    first = prefix if first is None else first
    return first + lines[0] + "\n" + "".join(f"{prefix}{x}\n" for x in lines[1:])


def _row(name, lang, prompt, tests, stops):
    return {"name": name, "language": lang, "prompt": prompt, "tests": tests, "stop_tokens": stops,
            "doctests": "transform", "original": f"HumanEval/{name.split('_')[1]}.py", "prompt_terminology": "reworded"}


def _rows():
    """{lang: [(row, good completion, wrong completion), ...]} in MultiPL-E's published format."""
    d0, d2 = H0_DOC, H2_DOC
    tf = {True: "true", False: "false"}
    rows = {}
    # JavaScript: the completion closes the function; the tests are top-level code.
    js_stops = ["\nfunction ", "\n/*", "\n//", "\nconsole.log"]
    rows["js"] = [
        (_row("HumanEval_0_has_close_elements", "js",
              _doc([d0[0].format(list="array"), d0[1], ">>> has_close_elements([1.0, 2.0, 3.0], 0.5)", "false"], "// ", "//")
              + "function has_close_elements(numbers, threshold){\n",
              "const assert = require('node:assert');\n\n\nfunction test() {\n  let candidate = has_close_elements;\n"
              + "".join(f"  assert.deepEqual(candidate({a}, {t}),{tf[e]});\n" for a, t, e in H0_CASES) + "}\n\ntest();",
              js_stops),
         "  for (let i = 0; i < numbers.length; i++)\n    for (let j = i + 1; j < numbers.length; j++)\n"
         "      if (Math.abs(numbers[i] - numbers[j]) < threshold) return true;\n  return false;\n}\n",
         "  for (let i = 0; i + 1 < numbers.length; i++)\n"
         "    if (Math.abs(numbers[i] - numbers[i + 1]) < threshold) return true;\n  return false;\n}\n"),
        (_row("HumanEval_2_truncate_number", "js",
              _doc(d2 + [">>> truncate_number(3.5)", "0.5"], "// ", "//") + "function truncate_number(number){\n",
              "const assert = require('node:assert');\n\n\nfunction test() {\n  let candidate = truncate_number;\n"
              + "".join(f"  assert.deepEqual(candidate({a}),{e});\n" for a, e in H2_CASES) + "}\n\ntest();", js_stops),
         "  return number % 1.0;\n}\n", "  return Math.round(number);\n}\n"),
    ]
    # C++: the tests close the function, then `int main()` asserts.
    vec = lambda xs: "(std::vector<float>({" + ", ".join(f"(float){x}f" for x in xs.strip("[]").split(", ")) + "}))"  # noqa: E731
    cpp_head = "#include<assert.h>\n#include<bits/stdc++.h>\n"
    rows["cpp"] = [
        (_row("HumanEval_0_has_close_elements", "cpp",
              cpp_head + _doc([d0[0].format(list="vector"), d0[1], f">>> has_close_elements({vec('[1.0, 2.0, 3.0]')}, (0.5f))",
                               "(false)"], "// ") + "bool has_close_elements(std::vector<float> numbers, float threshold) {\n",
              "}\nint main() {\n    auto candidate = has_close_elements;\n"
              + "".join(f"    assert(candidate({vec(a)}, ({t}f)) == ({tf[e]}));\n" for a, t, e in H0_CASES) + "}\n", ["\n}"]),
         "    for (size_t i = 0; i < numbers.size(); i++)\n        for (size_t j = i + 1; j < numbers.size(); j++)\n"
         "            if (std::abs(numbers[i] - numbers[j]) < threshold) return true;\n    return false;",
         "    for (size_t i = 0; i + 1 < numbers.size(); i++)\n"
         "        if (std::abs(numbers[i] - numbers[i + 1]) < threshold) return true;\n    return false;"),
        (_row("HumanEval_2_truncate_number", "cpp",
              cpp_head + _doc(d2 + [">>> truncate_number((3.5f))", "(0.5f)"], "// ") + "float truncate_number(float number) {\n",
              "}\nint main() {\n    auto candidate = truncate_number;\n"
              + "".join(f"    assert(candidate(({a}f)) == ({e}f));\n" for a, e in H2_CASES) + "}\n", ["\n}"]),
         "    return number - (long)number;", "    return std::round(number);"),
    ]
    # Java: class Problem; the tests close the method, then main asserts (run with -ea).
    jlist = lambda xs: ("(new ArrayList<Float>(Arrays.asList(" + ", ".join(f"(float){x}f" for x in xs.strip("[]").split(", "))  # noqa: E731
                        + ")))")
    java_tail = "    }\n\n}\n"
    rows["java"] = [
        (_row("HumanEval_0_has_close_elements", "java",
              JAVA_IMPORTS + "class Problem {\n"
              + _doc([d0[0].format(list="array list"), d0[1], f">>> hasCloseElements({jlist('[1.0, 2.0, 3.0]')}, (0.5f))",
                      "(false)"], "    // ")
              + "    public static boolean hasCloseElements(ArrayList<Float> numbers, float threshold) {\n",
              "    }\n    public static void main(String[] args) {\n"
              + "".join(f"    assert(hasCloseElements({jlist(a)}, ({t}f)) == ({tf[e]}));\n" for a, t, e in H0_CASES)
              + java_tail, ["\n    }\n"]),
         "        for (int i = 0; i < numbers.size(); i++)\n            for (int j = i + 1; j < numbers.size(); j++)\n"
         "                if (Math.abs(numbers.get(i) - numbers.get(j)) < threshold) return true;\n        return false;",
         "        for (int i = 0; i + 1 < numbers.size(); i++)\n"
         "            if (Math.abs(numbers.get(i) - numbers.get(i + 1)) < threshold) return true;\n        return false;"),
        (_row("HumanEval_2_truncate_number", "java",
              JAVA_IMPORTS + "class Problem {\n" + _doc(d2 + [">>> truncateNumber((3.5f))", "(0.5f)"], "    // ")
              + "    public static float truncateNumber(float number) {\n",
              "    }\n    public static void main(String[] args) {\n"
              + "".join(f"    assert(truncateNumber(({a}f)) == ({e}f));\n" for a, e in H2_CASES) + java_tail, ["\n    }\n"]),
         "        return number % 1.0f;", "        return (float) Math.floor(number);"),
    ]
    # Go: a _test.go file; the completion closes the function; the tests are a Test function.
    go_head = 'package {f}_test\n\nimport (\n    "testing"\n    "fmt"\n)\n\n'
    gl = lambda xs: "[]float64{" + xs.strip("[]") + "}"  # noqa: E731
    rows["go"] = [
        (_row("HumanEval_0_has_close_elements", "go",
              go_head.format(f="has_close_elements")
              + _doc([d0[0].format(list="list"), d0[1], f">>> has_close_elements({gl('[1.0, 2.0, 3.0]')}, 0.5)", "false"], "// ")
              + "func has_close_elements(numbers []float64, threshold float64) bool {\n",
              GO_TEST_HEAD.format(T="Has_Close_Elements", f="has_close_elements")
              + "".join(f"     {{ actual: candidate({gl(a)}, {t}), expected: {tf[e]} }},\n" for a, t, e in H0_CASES)
              + GO_TEST_LOOP, ["\nfunc", "struct", "\n// "]),
         "    for i := range numbers {\n        for j := i + 1; j < len(numbers); j++ {\n"
         "            d := numbers[i] - numbers[j]\n            if d < 0 {\n                d = -d\n            }\n"
         "            if d < threshold {\n                return true\n            }\n        }\n    }\n    return false\n}\n",
         "    for i := 0; i+1 < len(numbers); i++ {\n        d := numbers[i] - numbers[i+1]\n"
         "        if d < threshold && d > -threshold {\n            return true\n        }\n    }\n    return false\n}\n"),
        (_row("HumanEval_2_truncate_number", "go",
              go_head.format(f="truncate_number") + _doc(d2 + [">>> truncate_number(3.5)", "0.5"], "// ")
              + "func truncate_number(number float64) float64 {\n",
              GO_TEST_HEAD.format(T="Truncate_Number", f="truncate_number")
              + "".join(f"     {{ actual: candidate({a}), expected: {e} }},\n" for a, e in H2_CASES) + GO_TEST_LOOP,
              ["\nfunc", "struct", "\n// "]),
         "    return number - float64(int(number))\n}\n", "    return float64(int(number + 0.5))\n}\n"),
    ]
    # Rust: the tests close the function, then `fn main()` asserts.
    rv = lambda xs: "vec!" + xs  # noqa: E731
    rows["rs"] = [
        (_row("HumanEval_0_has_close_elements", "rs",
              _doc([d0[0].format(list="list"), d0[1], f">>> has_close_elements({rv('[1.0, 2.0, 3.0]')}, 0.5)", "false"], "/// ")
              + "fn has_close_elements(numbers: Vec<f64>, threshold: f64) -> bool {\n",
              "}\n\nfn main() {\n    let candidate = has_close_elements;\n"
              + "".join(f"    assert_eq!(candidate({rv(a)}, {t}), {tf[e]});\n" for a, t, e in H0_CASES) + "}\n", ["\n}"]),
         "    for i in 0..numbers.len() {\n        for j in i + 1..numbers.len() {\n"
         "            if (numbers[i] - numbers[j]).abs() < threshold {\n                return true;\n            }\n"
         "        }\n    }\n    false",
         "    numbers.windows(2).any(|w| (w[0] - w[1]).abs() < threshold)"),
        (_row("HumanEval_2_truncate_number", "rs",
              _doc(d2 + [">>> truncate_number(3.5)", "0.5"], "/// ") + "fn truncate_number(number: f64) -> f64 {\n",
              "}\n\nfn main() {\n    let candidate = truncate_number;\n"
              + "".join(f"    assert_eq!(candidate({a}), {e});\n" for a, e in H2_CASES) + "}\n", ["\n}"]),
         "    number.fract()", "    number.round()"),
    ]
    # Bash: the tests close the function; `set -e` and `[[ ... ]]` per case (integer problems:
    # awk, bc are not guaranteed, and `awk` is an /etc/alternatives link the sandbox lacks).
    sh_tests = ("}}\n\ncandidate() {{\n    {f} \"$@\"\n}}\n\nset -e\nrun_test() {{\n{cases}}}\n\nrun_test")
    rows["sh"] = [
        (_row("HumanEval_13_greatest_common_divisor", "sh",
              "#!/bin/bash\n# Return a greatest common divisor of two integers a and b\n"
              "# >>> $(greatest_common_divisor \"3\" \"5\")\n# \"1\"\n#\n# $1 is an integer\n# $2 is an integer\n"
              "greatest_common_divisor() {\n",
              sh_tests.format(f="greatest_common_divisor", cases="".join(
                  f"    [[ $(candidate \"{a}\" \"{b}\") = \"{c}\" ]]\n" for a, b, c in ((3, 7, 1), (10, 15, 5), (49, 14, 7),
                                                                                     (144, 60, 12)))), ["\n}"]),
         "    local a=$1 b=$2 t\n    while (( b != 0 )); do t=$b; b=$(( a % b )); a=$t; done\n    echo $a",
         "    if (( $1 < $2 )); then echo $1; else echo $2; fi"),
        (_row("HumanEval_23_strlen", "sh",
              "#!/bin/bash\n# Return length of given string\n# >>> $(strlen \"\")\n# \"0\"\n# >>> $(strlen \"abc\")\n# \"3\"\n"
              "#\n# $1 is a string\nstrlen() {\n",
              sh_tests.format(f="strlen", cases="".join(f"    [[ $(candidate \"{a}\") = \"{c}\" ]]\n"
                                                         for a, c in (("", 0), ("x", 1), ("asdasnakj", 9)))), ["\n}"]),
         "    echo ${#1}", "    echo $(( ${#1} + 1 ))"),
    ]
    # Perl: the completion closes the sub; Test::Deep's eq_deeply per case, `exit 1` on a miss.
    perl_head = "use Test::Deep;\n\n\nsub testhumaneval {{\n    my $candidate = \\&{f};\n"
    pb = {True: "1", False: '""'}
    rows["pl"] = [
        (_row("HumanEval_0_has_close_elements", "pl",
              _doc([d0[0].format(list="list"), d0[1], ">>> has_close_elements([1.0, 2.0, 3.0], 0.5)", '""'], "# ")
              + "sub has_close_elements {\n    my($numbers, $threshold) = @_;\n",
              perl_head.format(f="has_close_elements")
              + "".join(PERL_CHECK.format(a=f"{a}, {t}", e=pb[e]) for a, t, e in H0_CASES) + "}\n\ntesthumaneval();",
              ["\nsub", "\n#", "\n\n"]),
         "    for my $i (0..$#$numbers) {\n        for my $j ($i + 1..$#$numbers) {\n"
         "            return 1 if abs($numbers->[$i] - $numbers->[$j]) < $threshold;\n        }\n    }\n    return \"\";\n}\n",
         "    for my $i (0..$#$numbers - 1) {\n"
         "        return 1 if abs($numbers->[$i] - $numbers->[$i + 1]) < $threshold;\n    }\n    return \"\";\n}\n"),
        (_row("HumanEval_2_truncate_number", "pl",
              _doc(d2 + [">>> truncate_number(3.5)", "0.5"], "# ") + "sub truncate_number {\n    my($number) = @_;\n",
              perl_head.format(f="truncate_number") + "".join(PERL_CHECK.format(a=a, e=e) for a, e in H2_CASES)
              + "}\n\ntesthumaneval();", ["\nsub", "\n#", "\n\n"]),
         "    return $number - int($number);\n}\n", "    return int($number + 0.5);\n}\n"),
    ]
    return rows


ROWS = _rows()

# An early exit with status 0 before the tests ran, per language, on the first problem's prompt.
CHEATS = {
    "js": "  process.exit(0);\n}\n",
    "cpp": "    exit(0);",
    "java": "        System.exit(0);\n        return true;",
    "rs": "    std::process::exit(0)",
    "sh": "    echo 1; }\nexit 0\nunused() {",
    "pl": "    exit 0;\n}\n",
}
# Go's prompts import only "testing" and "fmt", so no completion can name os.Exit; to show
# both sides anyway, a prompt that also imports "os" (not MultiPL-E's): an exit during the test
# fails under `go test` too; an exit while the package initializes passes there.
GO_OS_CHEATS = {
    "in the test": ("    os.Exit(0)\n    return true\n}\n", False),
    "at package init": ("    return true\n}\n\nvar _ = func() int { os.Exit(0); return 0 }()\n", True),
}
COMPILE_ERRORS = {"cpp": "    return not_declared;", "java": "        return notDeclared;", "go": "    return notDeclared\n}\n",
                  "rs": "    not_declared"}


def _go_os_row() -> dict:
    row = dict(ROWS["go"][0][0])
    row["prompt"] = row["prompt"].replace('    "fmt"\n', '    "fmt"\n    "os"\n')
    return row


def _available(lang: str) -> bool:
    return not unavailable(LANGUAGES[lang])


def reference_verdict(lang: Language, row: dict, completion: str, gocache: str) -> bool:
    """MultiPL-E's reference rule: its commands on prompt + completion + "\\n" + tests, outside
    any sandbox, each within its time limit; a pass when they all exit 0 (Go: `go test`'s
    output has no FAIL or build failure; Perl: also no "ERROR" printed). `gocache`: one Go build
    cache for the reference side's runs, as a harness's container keeps one (a cold one rebuilds
    the standard library's test packages each time: 1.7 against 0.2 CPU-s a run here)."""
    with tempfile.TemporaryDirectory(prefix="multipl-e-ref-") as d:
        with open(os.path.join(d, lang.file), "w") as f:
            f.write(row["prompt"] + completion + "\n" + row["tests"])
        env = {"PATH": SANDBOX_PATH, "HOME": d, "LANG": "C.UTF-8", **dict(lang.env),
               "GOCACHE": gocache, "GOPATH": os.path.join(d, "go")}
        for argv in lang.reference:
            try:
                # MultiPL-E's limits are 15 s (30 s for Go); none of the fixtures loops, so the limit
                # here only has to outlast a compile on a loaded 2-core machine (a C++ compile of
                # <bits/stdc++.h> passed 15 s there), never change a verdict
                p = subprocess.run(resolve(argv), cwd=d, env=env, capture_output=True, text=True, timeout=120)
            except subprocess.TimeoutExpired:
                return False
            if lang.reference_rule == "go":
                return not any(s in p.stdout for s in ("[setup failed]", "[build failed]", "FAIL"))
            if p.returncode != 0:
                return False
            if lang.reference_rule == "perl" and ("ERROR" in p.stdout or "ERROR" in p.stderr):
                return False
        return True


def _judge_all(out) -> None:
    """Every case of every language whose toolchain is here, judged two at a time on each side:
    out/verdicts.json holds [[key], sandbox result, reference pass] per case (null: no toolchain)."""
    cases = []
    for lang, problems in ROWS.items():
        if not _available(lang):
            continue
        for row, good, wrong in problems:
            cases += [((lang, row["name"], "good"), row, good), ((lang, row["name"], "wrong"), row, wrong)]
        if lang in CHEATS:
            cases.append(((lang, "cheat"), problems[0][0], CHEATS[lang]))
        if lang in COMPILE_ERRORS:
            cases.append(((lang, "compile error"), problems[0][0], COMPILE_ERRORS[lang]))
        if lang == "go":
            cases += [(("go", "cheat", k), _go_os_row(), c) for k, (c, _) in GO_OS_CHEATS.items()]
    if not cases:
        (out / "verdicts.json").write_text("null")
        return
    task = MultiPLE(load_rows([row for _, row, _ in cases]))
    sandbox = Sandbox(timeout=10)  # each Program brings its language's own wall clock
    programs = [task.program(p, code) for p, (_, _, code) in zip(task.problems, cases)]
    # The reference runs beside the sandbox, two at a time too: the compilers are the cost.
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool, \
            tempfile.TemporaryDirectory(prefix="multipl-e-gocache-") as gocache:
        refs = [pool.submit(reference_verdict, LANGUAGES[key[0]], row, code, gocache) for key, row, code in cases]
        results = run_programs(programs, sandbox, workers=2)
        refs = [f.result() for f in refs]
    (out / "verdicts.json").write_text(json.dumps([[list(key), result, passed]
                                                   for (key, _, _), result, passed in zip(cases, results, refs)]))


@pytest.fixture(scope="module")
def verdicts(built_once):
    """{(lang, case): (sandbox result, reference pass)}, judged once per test run (the compilers
    are the cost: the worker that asks first judges, the other reads its file)."""
    rows = json.loads((built_once("multipl_e_verdicts", _judge_all) / "verdicts.json").read_text())
    if rows is None:
        pytest.skip("no MultiPL-E language's toolchain is installed (scripts/setup_eval.sh)")
    return {tuple(key): (result, passed) for key, result, passed in rows}


def load_rows(rows: list) -> list:
    d = tempfile.mkdtemp(prefix="multipl-e-rows-")
    try:
        path = os.path.join(d, "rows.jsonl")
        with open(path, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        return load_multipl_e(path)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _need(lang: str) -> None:
    why = unavailable(LANGUAGES[lang])
    if why:
        pytest.skip(why)


@pytest.mark.slow
@pytest.mark.parametrize("lang", list(ROWS))
def test_good_passes_wrong_fails_as_the_reference_judges(lang, verdicts):
    _need(lang)
    for row, _, _ in ROWS[lang]:
        good, good_ref = verdicts[(lang, row["name"], "good")]
        wrong, wrong_ref = verdicts[(lang, row["name"], "wrong")]
        assert (good, good_ref) == (PASSED, True), (lang, row["name"])
        assert wrong.startswith("failed: ") and wrong_ref is False, (lang, row["name"], wrong)


@pytest.mark.parametrize("lang", list(CHEATS))
def test_early_exit_fails_in_the_sandbox_where_the_reference_passes_it(lang, verdicts):
    _need(lang)
    result, reference = verdicts[(lang, "cheat")]
    assert reference is True, f"{lang}: the reference rule should pass an early exit with status 0"
    assert result == "failed: exited before the tests finished", (lang, result)


def test_go_exit_during_a_test_fails_both_and_at_init_only_the_sandbox(verdicts):
    _need("go")
    for what, (_, reference_passes) in GO_OS_CHEATS.items():
        result, reference = verdicts[("go", "cheat", what)]
        assert reference is reference_passes, what
        assert result.startswith("failed: "), (what, result)
    assert verdicts[("go", "cheat", "at package init")][0] == "failed: exited before the tests finished"


@pytest.mark.parametrize("lang", list(COMPILE_ERRORS))
def test_a_compile_error_fails_with_its_step(lang, verdicts):
    _need(lang)
    result, reference = verdicts[(lang, "compile error")]
    assert reference is False
    assert result.startswith("failed: step 1 (") and "exited with status" in result, result


# ----------------------------------------------------------------------------- program text and task


def test_program_is_multipl_e_text_with_the_marker_as_the_tests_last_statement():
    for lang, problems in ROWS.items():
        row, good, _ = problems[0]
        text = with_marker(LANGUAGES[lang], row["prompt"], good, row["tests"], "MARK")
        reference = row["prompt"] + good + "\n" + row["tests"]
        assert text.replace(LANGUAGES[lang].print_marker.format(m="MARK") + "\n", "") == reference.rstrip() + "\n"
        lines = text.rstrip().split("\n")
        at = [i for i, x in enumerate(lines) if "MARK" in x]
        assert len(at) == 1
        after = lines[at[0] + 1:]
        if LANGUAGES[lang].marker == "end":
            assert after == [], lang
        else:  # only the closing braces of the tests' function (and Java's class) follow it
            assert [x.strip() for x in after if x.strip()] == ["}"] * LANGUAGES[lang].braces, lang


def test_task_prompts_stops_extract():
    problems = load_rows([ROWS["cpp"][0][0], ROWS["cpp"][1][0]])
    base, chat = MultiPLE(problems), MultiPLE(problems, "chatml")
    p = problems[0]
    assert base.name == "multipl-e-cpp" and base.timeout == LANGUAGES["cpp"].timeout
    assert base.prompt(p).text == p.text and base.program(p, "").timeout == LANGUAGES["cpp"].timeout
    prompt = chat.prompt(p)
    assert prompt.messages[0]["content"] == f"Complete the following C++ function.\n\n\n{p.text}"
    assert prompt.assistant_prefix == f"Here is the completed function:\n\n\n{p.text}"
    assert base.stops() == ("\n}",) and chat.stops() == ("\n}", "\n```")
    assert base.extract(p, "    return true;\n}\nint main() {}") == "    return true;"
    js = load_rows([ROWS["js"][0][0]])
    assert MultiPLE(js).extract(js[0], "  return 1;\n}\n// trailing\nfunction x() {}") == "  return 1;\n}"
    with pytest.raises(Exception, match="language 'lua'"):
        MultiPLE(load_rows([{**ROWS["js"][0][0], "language": "lua"}]))


def test_tests_without_the_closing_brace_are_a_data_error():
    row = dict(ROWS["rs"][0][0])
    row["tests"] = row["tests"].rstrip().rstrip("}")
    task = MultiPLE(load_rows([row]))
    with pytest.raises(EvalDataError, match=r"rows\.jsonl:1: the Rust tests do not end with 1 closing brace"):
        task.program(task.problems[0], "    true")


# ----------------------------------------------------------------------------- loader


def test_loader_jsonl_json_and_a_directory_per_language(tmp_path):
    js, cpp = [r for r, _, _ in ROWS["js"]], [r for r, _, _ in ROWS["cpp"]]
    (tmp_path / "humaneval-js.jsonl").write_text("".join(json.dumps(r) + "\n" for r in js))
    (tmp_path / "humaneval-cpp.json").write_text(json.dumps(cpp, indent=2))
    one = load_multipl_e(tmp_path / "humaneval-js.jsonl")
    assert [p.task_id for p in one] == [r["name"] for r in js]
    assert one[0].stop_tokens == tuple(js[0]["stop_tokens"]) and one[0].language == "js"
    assert one[0].doctests == "transform" and one[0].prompt_terminology == "reworded"
    assert one[0].original == "HumanEval/0.py" and one[0].tests == js[0]["tests"]
    listed = load_multipl_e(tmp_path / "humaneval-cpp.json")
    assert [p.text for p in listed] == [r["prompt"] for r in cpp]
    assert listed[1].where.endswith("humaneval-cpp.json:" + str(2 + json.dumps(cpp[0], indent=2).count("\n") + 1))
    both = load_multipl_e(tmp_path)
    assert sorted({p.language for p in both}) == ["cpp", "js"] and len(both) == 4
    assert [p.language for p in load_multipl_e(tmp_path, language_name="cpp")] == ["cpp", "cpp"]


def test_loader_errors_name_the_file_line_and_key(tmp_path, monkeypatch):
    rows = [r for r, _, _ in ROWS["js"]]
    bad = dict(rows[1])
    del bad["tests"]
    path = tmp_path / "humaneval-js.jsonl"
    path.write_text(json.dumps(rows[0]) + "\n\n" + json.dumps(bad) + "\n")
    with pytest.raises(EvalDataError, match=rf"^{path}:3: MultiPL-E row lacks 'tests' \(needs name, language"):
        load_multipl_e(path)
    listed = tmp_path / "rows.json"
    listed.write_text("[\n" + json.dumps(rows[0]) + ",\n" + json.dumps(bad) + "\n]\n")
    with pytest.raises(EvalDataError, match=rf"^{listed}:3: MultiPL-E row lacks 'tests'"):
        load_multipl_e(listed)
    path.write_text(json.dumps({**rows[0], "stop_tokens": "\n}"}) + "\n")
    with pytest.raises(EvalDataError, match=r":1: MultiPL-E row's 'stop_tokens' must be a list"):
        load_multipl_e(path)
    with pytest.raises(EvalDataError, match="no such file or directory; pass a .jsonl/.json file"):
        load_multipl_e(tmp_path / "missing.jsonl")
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(EvalDataError, match="could not be loaded .*pass a local copy instead"):
        load_multipl_e("nuprl/MultiPL-E", config="humaneval-cpp")


def test_the_eval_cli_scores_a_samples_file(tmp_path):
    """`python -m easylemur.eval multipl_e:js --samples FILE --data DIR`: the single-turn CLI
    scores MultiPL-E completions as it does HumanEval's."""
    import sys
    from pathlib import Path

    _need("js")
    (tmp_path / "data").mkdir()
    rows = ROWS["js"]
    (tmp_path / "data" / "humaneval-js.jsonl").write_text("".join(json.dumps(r) + "\n" for r, _, _ in rows))
    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps({"task_id": rows[0][0]["name"], "completion": rows[0][1]}) + "\n"
                       + json.dumps({"task_id": rows[1][0]["name"], "completion": rows[1][2]}) + "\n")
    p = subprocess.run([sys.executable, "-m", "easylemur.eval", "multipl_e:js", "--samples", str(samples),
                        "--data", str(tmp_path / "data"), "--out", str(tmp_path / "out")],
                       capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1], timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout.strip().splitlines()[-1]) == {"pass@1": 0.5, "n": 1, "problems": 2}
