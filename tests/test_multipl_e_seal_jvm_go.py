"""MultiPL-E's Java and Go sealed (`multipl_e/seals/{java,go}.py`): a corpus of cheats in MultiPL-E's
own row format, each of which scores 0 here; MultiPL-E's reference harness passes each (its
commands outside any sandbox: `reference_verdict`), and today's single-process layout all but the
three that end the program first (checked here for the probe's). The cheats reach for the comparison from the candidate's code: a
subclass or a shadowing class whose `equals` is always true (in the tests' expected values too),
elements smuggled past the generic type, static initializers that halt, `sun.misc.Unsafe` turning
the tests' asserts off, a shutdown hook printing the end marker read from the source, and in Go
(whose prompts leave a completion no `os`, `unsafe` or `reflect`) a package-level `const false =
true` that the tests' expected values then mean, a `TestMain` and an `init` that end the test
binary first. Sealed, each can only produce values, and those are wrong.

Also: values cross as the reference compares them (a Java value keeps its runtime class, a Go
value its `%v` text), more of MultiPL-E's published rows keep the reference verdict, the codecs
round-trip every value exactly (outside the sandbox), the judge refuses a malformed values file,
the program stage holds no expected value, and the compiles find the prebuilt support."""

import concurrent.futures
import dataclasses
import json
import re
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from easylemur.eval.api import EvalDataError
from easylemur.eval.benchmarks.multipl_e.languages import (JAVATUPLES, JVM_FLAGS, LANGUAGES, build_program,
                                                           find_jdk, java_etc, single_process_program, unavailable)
from easylemur.eval.benchmarks.multipl_e.seals import go, java
from easylemur.eval.sandbox import PASSED, SANDBOX_PATH, Program, Sandbox, run_programs
from multipl_e_seal_common import assert_cheats_fail, judge_loop, load_verdicts, need
from test_multipl_e import GO_TEST_HEAD, GO_TEST_LOOP, JAVA_IMPORTS, ROWS, reference_verdict

# seconds of compiles and sandbox runs per language: the full suite's, not the fast tier's
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")]


def _row(name: str, lang: str, prompt: str, tests: str, stops: list) -> dict:
    return {"name": name, "language": lang, "prompt": prompt, "tests": tests, "stop_tokens": stops}


def _jlist(xs: list) -> str:
    return f"(new ArrayList<Long>(Arrays.asList({', '.join(f'(long){x}l' for x in xs)})))"


INCR = [([], []), ([3, 2, 1], [4, 3, 2]), ([5, 2, 5, 2, 3, 3, 9, 0, 123], [6, 3, 6, 3, 4, 4, 10, 1, 124])]
PALINDROMES = [(123, 8, 13), (12, 4, 6), (3, 1, 2), (63, 6, 8), (25, 5, 6), (19, 4, 6), (9, 4, 5), (1, 0, 1)]
PALINDROME_DOC = ["Given a positive integer n, return a {what} that has the number of even and odd",
                  "integer palindromes that fall within the range(1, n), inclusive."]
JAVA_TAIL = "    }\n\n}\n"
# More of MultiPL-E's published rows (HumanEval_42 incr_list, HumanEval_107 even_odd_palindrome):
# a list, a javatuples Pair and Go's tuple ([]interface{}) as return types. (row, good, wrong)
EXTRA = {
    "java": {
        "incr": (_row("HumanEval_42_incr_list", "java",
                      JAVA_IMPORTS + "class Problem {\n    // Return array list with elements incremented by 1.\n"
                      f"    // >>> incrList({_jlist([1, 2, 3])})\n    // {_jlist([2, 3, 4])}\n"
                      "    public static ArrayList<Long> incrList(ArrayList<Long> l) {\n",
                      "    }\n    public static void main(String[] args) {\n"
                      + "".join(f"    assert(incrList({_jlist(a)}).equals({_jlist(e)}));\n" for a, e in INCR) + JAVA_TAIL,
                      ["\n    }\n"]),
                 "        ArrayList<Long> r = new ArrayList<>();\n        for (long x : l) r.add(x + 1);\n        return r;",
                 "        return l;"),
        "palindromes": (_row("HumanEval_107_even_odd_palindrome", "java",
                             JAVA_IMPORTS + "class Problem {\n" + "".join(f"    // {x}\n" for x in PALINDROME_DOC).format(
                                 what="pair") + "    // >>> evenOddPalindrome((3l))\n    // (Pair.with(1l, 2l))\n"
                             "    public static Pair<Long, Long> evenOddPalindrome(long n) {\n",
                             "    }\n    public static void main(String[] args) {\n"
                             + "".join(f"    assert(evenOddPalindrome(({n}l)).equals((Pair.with({e}l, {o}l))));\n"
                                       for n, e, o in PALINDROMES) + JAVA_TAIL, ["\n    }\n"]),
                        "        long e = 0, o = 0;\n        for (long i = 1; i <= n; i++) {\n"
                        "            String s = Long.toString(i);\n"
                        "            if (s.equals(new StringBuilder(s).reverse().toString())) {\n"
                        "                if (i % 2 == 0) e++; else o++;\n            }\n"
                        "        }\n        return Pair.with(e, o);",
                        "        return Pair.with(n / 2, n - n / 2);"),
    },
    "go": {
        "palindromes": (_row("HumanEval_107_even_odd_palindrome", "go",
                             'package even_odd_palindrome_test\n\nimport (\n    "testing"\n    "fmt"\n)\n\n'
                             + "".join(f"// {x}\n" for x in PALINDROME_DOC).format(what="tuple")
                             + "// Example 1:\n// Input: 3\n// Output: (1, 2)\nfunc even_odd_palindrome(n int) []interface{} {\n",
                             GO_TEST_HEAD.format(T="Even_Odd_Palindrome", f="even_odd_palindrome")
                             + "".join(f"     {{ actual: candidate({n}), expected: []interface{{}}{{{e}, {o}}} }},\n"
                                       for n, e, o in PALINDROMES) + GO_TEST_LOOP, ["\nfunc", "struct", "\n// "]),
                        "    even, odd := 0, 0\n    for i := 1; i <= n; i++ {\n        s := fmt.Sprint(i)\n"
                        "        r := []byte(s)\n        for a, b := 0, len(r)-1; a < b; a, b = a+1, b-1 {\n"
                        "            r[a], r[b] = r[b], r[a]\n        }\n"
                        "        if string(r) == s {\n            if i%2 == 0 {\n                even++\n            } else {\n"
                        "                odd++\n            }\n        }\n    }\n    return []interface{}{even, odd}\n}\n",
                        "    return []interface{}{n / 2, n - n/2}\n}\n"),
    },
}

# The extra rows' completions judged here (Java's list row is judged through FIDELITY's completions
# of it instead: each Java case costs ~2 CPU-s with its reference).
JUDGED = {"java": (("palindromes", "good"),), "go": (("palindromes", "good"), ("palindromes", "wrong"))}

OPEN = "    static void unused_() {"  # the tests' first "}" closes it
# A helper of the completion's: the end marker, read from the program's own source.
SOURCE_MARKER = """    static String marker_() {
        try {
            String src = new String(java.nio.file.Files.readAllBytes(java.nio.file.Paths.get("Problem.java")));
            java.util.regex.Matcher m = java.util.regex.Pattern.compile("easylemur-tests-done-[0-9a-f]+").matcher(src);
            return m.find() ? m.group() : "";
        } catch (java.io.IOException e) {
            return "";
        }
    }
"""
# {lang: {name: (problem: an index of ROWS[lang] or a key of EXTRA[lang], completion, today's
# single-process layout passes it (None: not run here; it passes all but the three that end the
# program first, checked once by hand: each run costs a compile))}}; MultiPL-E's reference passes
# every one.
CHEATS = {
    "java": {
        "an ArrayList subclass whose equals is always true (the probe's)": (
            "incr", "        return new ArrayList<Long>() { public boolean equals(Object o) { return true; } };", True),
        "a nested class ArrayList shadows java.util's, in the tests' expected values too": (
            "incr", "        return l;\n    }\n    static class ArrayList<T> extends java.util.ArrayList<T> {\n"
                    "        ArrayList(java.util.Collection<? extends T> c) { super(c); }\n"
                    "        public boolean equals(Object o) { return true; }\n    }\n" + OPEN, None),
        "elements whose equals is always true, past ArrayList<Long>'s type": (
            "incr", "        ArrayList r = new ArrayList();\n        for (Object x : l) r.add(new Object() {\n"
                    "            public boolean equals(Object o) { return true; }\n"
                    "            public int hashCode() { return 0; }\n        });\n        return r;", None),
        "a static initializer halts with status 0": (
            0, "        return true;\n    }\n    static { Runtime.getRuntime().halt(0); }\n" + OPEN, None),
        "sun.misc.Unsafe sets the tests' $assertionsDisabled": (
            0, "        return true;\n    }\n    static {\n        try {\n"
               "            java.lang.reflect.Field f = sun.misc.Unsafe.class.getDeclaredField(\"theUnsafe\");\n"
               "            f.setAccessible(true);\n            sun.misc.Unsafe u = (sun.misc.Unsafe) f.get(null);\n"
               "            java.lang.reflect.Field a = Problem.class.getDeclaredField(\"$assertionsDisabled\");\n"
               "            u.putBoolean(u.staticFieldBase(a), u.staticFieldOffset(a), true);\n"
               "        } catch (ReflectiveOperationException e) {\n            throw new RuntimeException(e);\n"
               "        }\n    }\n" + OPEN, None),
        "System.setOut swallows the failure; a shutdown hook prints the marker and halts with 0": (
            0, "        return false;\n    }\n" + SOURCE_MARKER
               + "    static {\n        final java.io.PrintStream out = System.out;\n"
               "        System.setOut(new java.io.PrintStream(new java.io.ByteArrayOutputStream()));\n"
               "        System.setErr(new java.io.PrintStream(new java.io.ByteArrayOutputStream()));\n"
               "        Runtime.getRuntime().addShutdownHook(new Thread(() -> {\n"
               "            out.println(\"\\n\" + marker_());\n            out.flush();\n"
               "            Runtime.getRuntime().halt(0);\n        }));\n    }\n" + OPEN, None),
    },
    "go": {
        "const false = true: every expected false is true": (0, "    return true\n}\n\nconst false = true\n", None),
        "a TestMain that runs no test": (0, "    return true\n}\n\nfunc TestMain(m *testing.M) {}\n", None),
        "init runs testing.Main with no tests, which exits 0": (
            0, "    return true\n}\n\nfunc init() {\n"
               "    testing.Main(func(pat, str string) (bool, error) { return true, nil }, nil, nil, nil)\n}\n", None),
    },
}

# Completions an honest program could be, judged as the reference judges them: (problem,
# completion, the reference passes it).
FIDELITY = {
    "java": {
        "an anonymous ArrayList subclass (double braces) of the right values": (
            "incr", "        return new ArrayList<Long>() {{ for (long x : l) add(x + 1); }};", True),
        "Integers in an ArrayList<Long>: equals to no Long": (
            "incr", "        ArrayList r = new ArrayList();\n        for (long x : l) r.add((int) x + 1);\n"
                    "        return r;", False),
    },
    "go": {
        "a type of its own whose String prints the right numbers": (
            "palindromes", EXTRA["go"]["palindromes"][1].replace(
                "return []interface{}{even, odd}\n}\n",
                "return []interface{}{count(even), count(odd)}\n}\n\ntype count int\n\n"
                "func (c count) String() string { return fmt.Sprint(int(c)) }\n"), True),
    },
}

# The judge alone on values files (the truncate_number problem: 0.5, 0.25, 0.0), all in one sandbox
# (`judge_loop`): {lang: {name: (bytes, the tests pass)}}. Only well-formed values of the right
# count and types pass, and nothing in them runs. (More, outside the sandbox: the round trips below.)
JAVA_RIGHT = b"f3f000000;f3e800000;f0;"
GO_RIGHT = b'["0.5","0.25","0"]'
VALUES = {
    "java": {"right": (JAVA_RIGHT, True), "empty": (b"", False), "one short": (JAVA_RIGHT[:-3], False),
             "one more": (JAVA_RIGHT + b"f0;", False), "a Double for a float": (b"d3fe0000000000000;" + JAVA_RIGHT[10:], False),
             "a class's name": (JAVA_RIGHT[:-3] + b"Tjava.lang.Runtime;0;", False),
             "nested past the depth limit": (JAVA_RIGHT[:-3] + b"L1;" * 5000 + b"n", False),
             "not ASCII": (JAVA_RIGHT[:-3] + b"S1;\xe9", False)},
    "go": {"right": (GO_RIGHT, True), "empty": (b"", False), "one short": (b'["0.5","0.25"]', False),
           "one more": (b'["0.5","0.25","0","0"]', False), "a JSON number for a float": (b'[0.5,"0.25","0"]', False),
           "trailing data": (GO_RIGHT + b" []", False)},
}
HERE = Path(__file__).resolve().parent / "multipl_e_seal"


def _problem(lang: str, which) -> tuple:
    return ROWS[lang][which] if isinstance(which, int) else EXTRA[lang][which]


def _values_loop(lang: str) -> Program:
    """The judge of the truncate_number problem, compiled once, then run on each values file of VALUES[lang]."""
    row, good, _ = ROWS[lang][1]
    sealed = build_program(LANGUAGES[lang], row["prompt"], good, row["tests"], row["name"])
    loop = judge_loop(sealed, [data for data, _ in VALUES[lang].values()])
    return dataclasses.replace(loop, steps=(sealed.judge.steps[0], *loop.steps), ro_paths=sealed.ro_paths)


def _prebuilt_probe(lang: str) -> Program:
    """The program stage of a good Java or Go program, compiling only, made to print what shows that
    the prebuilt support works in the sandbox: "mapped" when javac ran with its class-data-sharing
    archive required (`-Xshare:on` fails where it cannot map it), or how many standard library
    packages `go test -c -x` built or vetted (0 when the prefilled cache served them all)."""
    row, good, _ = ROWS[lang][0]
    sealed = build_program(LANGUAGES[lang], row["prompt"], good, row["tests"], row["name"])
    compile_ = sealed.steps[0]
    if lang == "java":
        script = shlex.join((compile_[0], "-J-Xshare:on", *compile_[1:])) + " && echo mapped"
    else:
        script = shlex.join((*compile_[:3], "-x", *compile_[3:])) + ' 2>&1 | grep -c "$(go env GOROOT)/src/" || true'
    return dataclasses.replace(sealed, steps=(("bash", "-c", script),), judge=None, end_marker="")


def _judge_all(out) -> None:
    """Every case of the languages whose toolchain is here, the sandbox two at a time and the
    reference beside it (one Go build cache for the reference's runs): out/verdicts.json holds
    [[lang, "values files"] and [lang, "prebuilt"], that Program's output, null, null] per language,
    then [[key], sealed result, reference pass or null, today's result or null] per case."""
    cases = []  # (key, sealed Program, (lang, row, completion) for the reference or None, today's Program or None)
    langs = [x for x in CHEATS if not unavailable(LANGUAGES[x])]
    for lang in langs:
        judged = [("cheat", name, which, code, today) for name, (which, code, today) in CHEATS[lang].items()]
        judged += [("fidelity", name, which, code, None) for name, (which, code, _) in FIDELITY[lang].items()]
        judged += [("extra", f"{which} {side}", which, EXTRA[lang][which][1 if side == "good" else 2], None)
                   for which, side in JUDGED[lang]]
        for kind, name, which, code, today in judged:
            row = _problem(lang, which)[0]
            args = (LANGUAGES[lang], row["prompt"], code, row["tests"], row["name"])
            # the reference passes every cheat (checked by hand); here only the probe's and Go's are
            # shown again, a Java reference run being 0.7 CPU-s
            shown = kind != "cheat" or lang == "go" or "(the probe's)" in name
            cases.append(((lang, kind, name), build_program(*args), (lang, row, code) if shown else None,
                          single_process_program(*args) if today else None))
    programs = [p for _, sealed, _, today in cases for p in (sealed, today) if p is not None]
    sandbox = Sandbox(timeout=10)  # each Program brings its language's own wall clock
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool, \
            tempfile.TemporaryDirectory(prefix="multipl-e-gocache-") as gocache:
        refs = [pool.submit(reference_verdict, LANGUAGES[ref[0]], ref[1], ref[2], gocache) if ref else None
                for _, _, ref, _ in cases]
        rows = [[[lang, what], sandbox.run_program(build(lang)).output, None, None]
                for lang in langs for what, build in (("values files", _values_loop), ("prebuilt", _prebuilt_probe))]
        results = iter(run_programs(programs, sandbox, workers=2))
        for (key, _, _, today), ref in zip(cases, refs):
            sealed = next(results)
            rows.append([list(key), sealed, ref.result() if ref else None, next(results) if today else None])
    (out / "verdicts.json").write_text(json.dumps(rows))


@pytest.fixture(scope="module")
def verdicts(built_once):
    """{key: (sealed result, reference pass, today's result)}, judged once per test run."""
    return load_verdicts(built_once, "multipl_e_seal_jvm_go", _judge_all)


@pytest.mark.parametrize("lang", list(CHEATS))
def test_every_cheat_scores_zero_sealed(lang, verdicts):
    assert_cheats_fail(lang, {name: (True if lang == "go" or "(the probe's)" in name else None, True if today else None)
                           for name, (_, _, today) in CHEATS[lang].items()}, verdicts)


@pytest.mark.parametrize("lang", list(FIDELITY))
def test_honest_completions_keep_the_reference_verdict(lang, verdicts):
    need(lang)
    expected = {name: passes for name, (_, _, passes) in FIDELITY[lang].items()}
    expected.update({f"{which} {side}": side == "good" for which, side in JUDGED[lang]})
    for name, passes in expected.items():
        sealed, reference, _ = verdicts[(lang, "fidelity" if name in FIDELITY[lang] else "extra", name)]
        assert reference is passes, (lang, name, "the reference's verdict is not the one listed here")
        assert (sealed == PASSED) is passes, (lang, name, sealed)
        assert passes or sealed.startswith("failed: the tests "), (lang, name, sealed)


@pytest.mark.parametrize("lang", list(VALUES))
def test_only_well_formed_values_of_the_right_count_pass(lang, verdicts):
    need(lang)
    output, _, _ = verdicts[(lang, "values files")]
    ran = dict(x.split(" ", 1) for x in output.splitlines() if re.fullmatch(r"\d+ \d+ [01]", x))  # "<i> <status> <marker>"
    for i, (name, (_, passes)) in enumerate(VALUES[lang].items()):
        assert str(i) in ran, (lang, name, output[-2000:])
        assert (ran[str(i)] == "0 1") is passes, (lang, name, ran[str(i)])
        assert passes or not ran[str(i)].startswith("0 "), (lang, name, "a judge that exits 0 without its marker")


@pytest.mark.parametrize("lang", list(CHEATS))
def test_the_compiles_use_the_prebuilt_support_in_the_sandbox(lang, verdicts):
    """What keeps the seal within its time (bench/multipl_e_seal.py): javac maps its class-data-sharing
    archive; go finds every standard library package's vet facts and export data in its copy of
    the prefilled build cache."""
    need(lang)
    if lang == "java" and not java.support_folder() or lang == "go" and not go.warm_cache():
        pytest.skip("no cache folder for the prebuilt support here: the seal runs without it, slower")
    output, _, _ = verdicts[(lang, "prebuilt")]
    assert output.split()[-1:] == (["mapped"] if lang == "java" else ["0"]), output[-2000:]


def test_the_program_stage_holds_no_expected_value_and_the_judge_the_tests_unchanged():
    for lang in CHEATS:
        for row, good, _ in [*ROWS[lang], *EXTRA[lang].values()]:
            sealed = build_program(LANGUAGES[lang], row["prompt"], good, row["tests"], row["name"])
            driver, judge = sealed.files[0][1], sealed.judge.files[0][1]
            assert sealed.files[0][0] == sealed.judge.files[0][0] == LANGUAGES[lang].file
            # the judge is prompt + stub + "\n" + the tests, with one line added: the one that prints its marker
            unmarked = "".join(x for x in judge.splitlines(True) if sealed.judge.end_marker not in x)
            assert unmarked.startswith(row["prompt"]) and unmarked.rstrip().endswith(row["tests"].rstrip())
            assert driver.startswith(row["prompt"] + good + "\n")
            assert sealed.judge.end_marker in judge and sealed.judge.end_marker not in driver
            assert sealed.end_marker in driver and sealed.end_marker != sealed.judge.end_marker
            assert sealed.timeout == LANGUAGES[lang].timeout
            # every comparison of the tests, and so every expected value, is left out of the driver
            tail = driver[len(row["prompt"] + good):]
            assert not any(word in tail for word in ("assert", ".equals(", "==", "expected")), (lang, tail)


def test_without_the_prebuilt_support_the_stages_carry_their_sources(monkeypatch):
    """Where no cache folder can be made, Java's support class goes along as source, compiled with
    Problem.java in each stage, and the Go stages start with no build cache: slower, the same
    programs (checked once by hand in the sandbox: the rows' good pass, the wrong fail)."""
    monkeypatch.setattr(java, "support_folder", lambda: "")
    monkeypatch.setattr(go, "warm_cache", lambda: ())
    row, good, _ = ROWS["java"][0]
    sealed = build_program(LANGUAGES["java"], row["prompt"], good, row["tests"], row["name"])
    for files, steps in ((sealed.files, sealed.steps), (sealed.judge.files, sealed.judge.steps)):
        assert [name for name, _ in files] == ["Problem.java", java.SUPPORT.name]
        assert steps[0][-2:] == ("Problem.java", java.SUPPORT.name) and not any("SharedArchiveFile" in a for a in steps[0])
    assert sealed.ro_paths == java_etc()
    row, good, _ = ROWS["go"][0]
    sealed = build_program(LANGUAGES["go"], row["prompt"], good, row["tests"], row["name"])
    assert [name for name, _ in sealed.files] == [LANGUAGES["go"].file, go.OUT]
    assert [name for name, _ in sealed.judge.files] == [LANGUAGES["go"].file, go.IN]


def test_prompts_and_tests_outside_multipl_e_s_layout_are_a_data_error():
    java, go = ROWS["java"][0][0], ROWS["go"][0][0]
    with pytest.raises(EvalDataError, match="j-row: the Java prompt does not end with a static method's signature"):
        build_program(LANGUAGES["java"], java["prompt"] + "    int x;\n", "", java["tests"], "j-row")
    with pytest.raises(EvalDataError, match="j-row: no call of hasCloseElements found in the Java tests"):
        build_program(LANGUAGES["java"], java["prompt"], "", java["tests"].replace("hasCloseElements(", "other("), "j-row")
    with pytest.raises(EvalDataError, match="g-row: the Go prompt does not end with a function that returns one value"):
        build_program(LANGUAGES["go"], go["prompt"].replace(") bool {", ") (bool, int) {"), "", go["tests"], "g-row")
    with pytest.raises(EvalDataError, match="g-row: the Go tests do not start with `candidate := <function>`"):
        build_program(LANGUAGES["go"], go["prompt"], "", go["tests"].replace("candidate := ", "candidate = "), "g-row")


def _run_trusted(argv: list, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={"PATH": SANDBOX_PATH, "LANG": "C.UTF-8", "HOME": str(cwd), **env})


def test_the_java_codec_round_trips_every_value_exactly(tmp_path):
    """Our own EasylemurSeal and values (no candidate code, outside the sandbox): every value MultiPL-E's Java
    prompts return, and more, is recorded and read back equal and of the same classes (a List as
    an ArrayList, a Map as a HashMap), floats bit for bit (-0.0, a NaN's payload), strings with
    lone surrogates; a value of another class cannot be recorded; a malformed file is refused."""
    need("java")
    for f in (java.SUPPORT, HERE / "RoundTrip.java"):
        shutil.copy(f, tmp_path)
    jdk, flags = find_jdk(), [f"-J{f}" for f in JVM_FLAGS]
    built = _run_trusted([f"{jdk}/bin/javac", *flags, "-encoding", "UTF8", "-d", "classes", "-cp", JAVATUPLES,
                          java.SUPPORT.name, "RoundTrip.java"], tmp_path)
    assert built.returncode == 0, built.stderr[-3000:]
    ran = _run_trusted([f"{jdk}/bin/java", *JVM_FLAGS, "-cp", f"classes:{JAVATUPLES}", "RoundTrip"], tmp_path)
    assert ran.returncode == 0 and ran.stdout.split() == ["written", "read", "round", "trip", "ok"], (ran.stdout, ran.stderr)


def test_the_go_codec_round_trips_what_the_comparison_sees(tmp_path):
    """Our own el_out.go and el_in.go (outside the sandbox): each value is recorded with its static
    type and read back as it, its `%v` text the same (an interface value comes back as that text),
    and a malformed file panics. Built with a copy of the seal's prefilled build cache."""
    need("go")
    (tmp_path / "roundtrip_test.go").write_text((HERE / "roundtrip_test.go").read_text())
    for name, helper in ((go.OUT, "el_out.go"), (go.IN, "el_in.go")):
        (tmp_path / name).write_text(go.helper(helper, "easylemur_rt_test"))
    for path, data in go.warm_cache():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes(data)
    env = {**dict(LANGUAGES["go"].env), "GOPATH": str(tmp_path / "go")}
    del env["GOCACHE"]  # $HOME/.cache/go-build: the copy
    ran = _run_trusted(["go", "test", "-v", "roundtrip_test.go", go.OUT, go.IN], tmp_path, **env)
    assert ran.returncode == 0 and "--- PASS: TestRoundTrip" in ran.stdout, ran.stdout[-3000:] + ran.stderr[-2000:]
