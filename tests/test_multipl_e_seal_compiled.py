"""MultiPL-E's compiled languages sealed (C++, Rust: `multipl_e/seals/{cpp,rs}.py`): a corpus of
cheats in MultiPL-E's own row format, each of which scores 0 here; where MultiPL-E's reference
harness passes one (its commands outside any sandbox: `reference_verdict`) that is shown too, and
for a few (the probe's), that today's single-process layout passed them. The cheats reach
for the comparison from the candidate's translation unit or crate: macros (`#define assert`,
`macro_rules! assert_eq`), operators and specializations, a shadowing `struct bool`, interposed C
functions, static constructors, exit and panic hooks, reading the tests (expected values, the
end marker) from the program's own source or binary. Sealed, each can only produce values.

Also: the values' codecs round-trip every type MultiPL-E's prompts return, exactly (one trusted
program per language, outside the sandbox); a union of MultiPL-E's C++ prompts crosses as its
active alternative; the judge refuses a malformed values file; the program stage holds no
expected value; the C++ compiles use the precompiled header inside the sandbox."""

import dataclasses
import shutil
import subprocess
from pathlib import Path

import pytest

from easylemur.eval.api import EvalDataError
from easylemur.eval.benchmarks.multipl_e.languages import LANGUAGES, build_program, single_process_program, unavailable
from easylemur.eval.benchmarks.multipl_e.seals import cpp, rs, scan
from easylemur.eval.sandbox import PASSED, SANDBOX_PATH, Program, Sandbox, run_programs
from multipl_e_seal_common import assert_cheats_fail, judge_cases, judge_loop, load_verdicts, need
from test_multipl_e import ROWS

# seconds of compiles and sandbox runs per language: the full suite's, not the fast tier's
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")]

CPP_HEAD = "#include<assert.h>\n#include<bits/stdc++.h>\n"
MODULES = {"cpp": cpp, "rs": rs}


def _row(name: str, lang: str, prompt: str, tests: str) -> dict:
    return {"name": name, "language": lang, "prompt": prompt, "tests": tests, "stop_tokens": ["\n}"]}


PILE_CASES = [(3, [3, 5, 7]), (4, [4, 6, 8, 10]), (5, [5, 7, 9, 11, 13]), (6, [6, 8, 10, 12, 14, 16]),
              (8, [8, 10, 12, 14, 16, 18, 20, 22])]
AVG_CASES = [(1, 5, '"0b11"'), (7, 13, '"0b1010"'), (964, 977, '"0b1111001010"'), (996, 997, '"0b1111100100"'),
             (7, 5, "-1"), (5, 1, "-1"), (5, 5, '"0b101"')]
# More of MultiPL-E's published rows (HumanEval_100 make_a_pile in both languages; C++'s HumanEval_103
# rounded_avg, whose return type is one of the prompt's unions): (row, good completion, wrong completion).
EXTRA = {
    "cpp": {
        "pile": (_row("HumanEval_100_make_a_pile", "cpp",
                      CPP_HEAD + "// Given a positive integer n, you have to make a pile of n levels of stones.\n"
                      "// >>> make_a_pile((3))\n// (std::vector<long>({(long)3, (long)5, (long)7}))\n"
                      "std::vector<long> make_a_pile(long n) {\n",
                      "}\nint main() {\n    auto candidate = make_a_pile;\n" + "".join(
                          f"    assert(candidate(({n})) == (std::vector<long>({{{', '.join(f'(long){x}' for x in v)}}})));\n"
                          for n, v in PILE_CASES) + "}\n"),
                 "    std::vector<long> v;\n    for (long i = 0; i < n; i++) v.push_back(n + 2 * i);\n    return v;",
                 "    std::vector<long> v;\n    for (long i = 0; i < n; i++) v.push_back(n + i);\n    return v;"),
        "avg": (_row("HumanEval_103_rounded_avg", "cpp",
                     CPP_HEAD + "union Union_std_string_long{\n    std::string f0;\n    long f1;"
                     "    Union_std_string_long(std::string _f0) : f0(_f0) {}\n    Union_std_string_long(long _f1) : f1(_f1) {}\n"
                     "    ~Union_std_string_long() {}\n    bool operator==(std::string f) {\n        return f0 == f ;\n"
                     "    }    bool operator==(long f) {\n        return f1 == f ;\n    }\n};\n"
                     "// You are given two positive integers n and m, and your task is to compute the\n"
                     "// average of the integers from n through m (including n and m).\n"
                     "// Round the answer to the nearest integer and convert that to binary.\n"
                     "// If n is greater than m, return -1.\nUnion_std_string_long rounded_avg(long n, long m) {\n",
                     "}\nint main() {\n    auto candidate = rounded_avg;\n"
                     + "".join(f"    assert(candidate(({n}), ({m})) == {e});\n" for n, m, e in AVG_CASES) + "}\n"),
                # Python's round() rounds half to even, as nearbyint does in the default rounding mode
                "    if (n > m) return -1;\n    long avg = (long)std::nearbyint((n + m) / 2.0);\n    std::string s;\n"
                "    do { s = char('0' + avg % 2) + s; avg /= 2; } while (avg > 0);\n    return \"0b\" + s;",
                "    if (n > m) return -1;\n    long avg = (long)std::round((n + m) / 2.0);\n    std::string s;\n"
                "    do { s = char('0' + avg % 2) + s; avg /= 2; } while (avg > 0);\n    return \"0b\" + s;"),
    },
    "rs": {
        "pile": (_row("HumanEval_100_make_a_pile", "rs",
                      "/// Given a positive integer n, you have to make a pile of n levels of stones.\n"
                      "/// >>> make_a_pile(3)\n/// vec![3, 5, 7]\nfn make_a_pile(n: isize) -> Vec<isize> {\n",
                      "}\n\nfn main() {\n    let candidate = make_a_pile;\n"
                      + "".join(f"    assert_eq!(candidate({n}), vec![{', '.join(map(str, v))}]);\n" for n, v in PILE_CASES)
                      + "}\n"),
                 "    (0..n).map(|i| n + 2 * i).collect()", "    (0..n).map(|i| n + i).collect()"),
    },
}

# What a cheat runs to find today's end marker in its own binary (pieced together at run time, so
# the cheat's own text is not found first).
FIND_MARKER_CPP = """static void print_marker_() {
    std::ifstream f("/proc/self/exe", std::ios::binary);
    std::string b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::string p = std::string("easylemur-tests") + "-done-";
    for (size_t i = b.find(p); i != std::string::npos; i = b.find(p, i + 1))
        if (b.size() >= i + 45 && std::all_of(b.begin() + i + 21, b.begin() + i + 45, ::isxdigit)) {
            std::printf("\\n%s\\n", b.substr(i, 45).c_str());
            break;
        }
    std::fflush(stdout);
}
"""
FIND_MARKER_RS = """fn print_marker_() {
    let b = std::fs::read("/proc/self/exe").unwrap_or_default();
    let p = format!("{}-done-", "easylemur-tests");
    for i in 0..b.len().saturating_sub(45) {
        if &b[i..i + 21] == p.as_bytes() && b[i + 21..i + 45].iter().all(|c| c.is_ascii_hexdigit()) {
            println!("\\n{}", String::from_utf8_lossy(&b[i..i + 45]));
            break;
        }
    }
}
"""
OPEN = "static void unused_() {"  # the tests' first "}" closes it
ROPEN = "fn _unused() {"

# {lang: {name: (problem: an index of ROWS[lang] or a key of EXTRA[lang], completion, the reference
# passes it, today's single-process layout passes it (None: not run))}}. The reference's pass is
# run here for the probe's cheats (SHOWN; a C++ reference compile is 1.6 CPU-s), the rest were run
# by hand when the corpus was written.
SHOWN = {"cpp": {"a global operator== template for vectors", "#define assert"}, "rs": {"macro_rules! assert_eq"}}
CHEATS = {
    "cpp": {
        "a global operator== template for vectors": (
            "pile", "    return {};\n}\ntemplate <class T> bool operator==(const std::vector<T>&, const std::vector<T>&) "
                    "{ return true; }\n" + OPEN, True, None),
        "a global operator== for the exact type": (
            "pile", "    return {};\n}\nbool operator==(const std::vector<long>&, const std::vector<long>&) { return true; }\n"
                    + OPEN, True, None),
        "std::operator== specialized": (
            "pile", "    return {};\n}\nnamespace std {\ntemplate <> bool operator==(const vector<long>&, const vector<long>&) "
                    "{ return true; }\n}\n" + OPEN, True, None),
        "#define assert": (0, "    return true;\n}\n#undef assert\n#define assert(x) ((void)0)\n" + OPEN, True, None),
        "#pragma push_macro and _Pragma": (
            0, "    return true;\n}\n#pragma push_macro(\"assert\")\n#undef assert\n"
               "#define assert(e) _Pragma(\"GCC diagnostic ignored \\\"-Wunused-value\\\"\") ((void)(e))\n" + OPEN, True, None),
        "#define main": (0, "    return true;\n}\nint main() { return 0; }\n#define main not_main_\n" + OPEN, True, None),
        "#define candidate": (
            0, "    return true;\n}\nstruct Anything_ { template <class T> bool operator==(const T&) const { return true; } };\n"
               "#define candidate(...) Anything_()\n" + OPEN, True, None),
        "a static initializer calls std::quick_exit(0)": (
            0, "    return true;\n}\nstatic int quit_ = (std::quick_exit(0), 0);\n" + OPEN, True, None),
        "__assert_fail interposed: prints the marker from /proc/self/exe": (
            0, "    return true;\n}\n" + FIND_MARKER_CPP + "extern \"C\" void __assert_fail(const char*, const char*, "
               "unsigned int, const char*) noexcept {\n    print_marker_();\n    std::_Exit(0);\n}\n" + OPEN, True, True),
        "an atexit handler prints the marker; a static initializer exits 0": (
            0, "    return true;\n}\n" + FIND_MARKER_CPP + "static int exit_ = (std::atexit(print_marker_), std::exit(0), 0);\n"
               + OPEN, True, None),
        "reads the expected values from its own source": (
            0, "    static std::vector<bool> want;\n    static size_t k = 0;\n    if (want.empty()) {\n"
               "        std::ifstream f(\"program.cpp\");\n        std::string line;\n        while (std::getline(f, line)) {\n"
               "            size_t at = line.rfind(\") == (\");\n"
               "            if (line.find(\"assert(candidate(\") != std::string::npos && at != std::string::npos)\n"
               "                want.push_back(line.compare(at + 6, 4, \"true\") == 0);\n        }\n    }\n"
               "    return k < want.size() ? bool(want[k++]) : false;", True, None),
        "#include of the judge's source": (0, "    return true;\n}\n#include \"/tmp/judge/program.cpp\"\n" + OPEN, False, None),
    },
    "rs": {
        "macro_rules! assert_eq": (
            0, "    true\n}\nmacro_rules! assert_eq {\n    ($($t:tt)*) => {};\n}\n" + ROPEN, True, True),
        "macro_rules! assert, and assert_eq through it": (
            0, "    true\n}\nmacro_rules! assert {\n    ($($t:tt)*) => {};\n}\nmacro_rules! assert_eq {\n"
               "    ($a:expr, $b:expr) => { assert!($a == $b) };\n}\n" + ROPEN, True, None),
        "a local struct bool whose PartialEq is always true": (
            0, "    bool\n}\n#[derive(Debug)]\n#[allow(non_camel_case_types)]\nstruct bool;\n"
               "impl PartialEq<core::primitive::bool> for bool {\n"
               "    fn eq(&self, _: &core::primitive::bool) -> core::primitive::bool { true }\n}\n" + ROPEN, True, None),
        "#[no_mangle] abort interposed, a panic hook that aborts": (
            0, "    std::panic::set_hook(Box::new(|_| std::process::abort()));\n    false\n}\n" + FIND_MARKER_RS
               + "#[no_mangle]\npub extern \"C\" fn abort() -> ! {\n    extern \"C\" { fn _exit(code: i32) -> !; }\n"
               "    print_marker_();\n    unsafe { _exit(0) }\n}\n" + ROPEN, True, None),
        "a static constructor in .init_array prints the marker and exits 0": (
            0, "    false\n}\n" + FIND_MARKER_RS + "extern \"C\" fn before_main_() {\n    print_marker_();\n"
               "    std::process::exit(0);\n}\n#[used]\n#[link_section = \".init_array\"]\n"
               "static INIT_: extern \"C\" fn() = before_main_;\n" + ROPEN, True, True),
        "a panic hook prints the marker and exits 0": (
            0, "    std::panic::set_hook(Box::new(|_| { print_marker_(); std::process::exit(0) }));\n    false\n}\n"
               + FIND_MARKER_RS + ROPEN, True, None),
        "std::process::exit(0)": (0, "    std::process::exit(0)", True, None),
        "include_str! of its own source: the expected values": (
            0, "    thread_local!(static K: std::cell::Cell<usize> = std::cell::Cell::new(0));\n"
               "    let want: Vec<bool> = include_str!(\"program.rs\").lines()\n"
               "        .filter(|l| l.trim_start().starts_with(\"assert_eq!(candidate(\"))\n"
               "        .map(|l| l.trim_end().ends_with(\"true);\")).collect();\n"
               "    let k = K.with(|k| { let v = k.get(); k.set(v + 1); v });\n    want.get(k).copied().unwrap_or(false)",
            True, None),
        "include_str! of the judge's source": (0, "    include_str!(\"/tmp/judge/program.rs\").is_empty()", False, None),
    },
}

# The judge alone on a values file (the make_a_pile problem: the program stage is `true`): (bytes,
# the tests pass). Only well-formed values of the right count and types pass, and nothing in them runs.
PILE_VALUES = "3 3 5 7 4 4 6 8 10 5 5 7 9 11 13 6 6 8 10 12 14 16 8 8 10 12 14 16 18 20 22 "
VALUES = {
    "right": (PILE_VALUES, True), "empty": ("", False), "one short": (PILE_VALUES[:-3], False),
    "one more": (PILE_VALUES + "0 ", False), "no last space": (PILE_VALUES[:-1], False),
    "a leading zero": ("03" + PILE_VALUES[1:], False), "a plus sign": ("+3" + PILE_VALUES[1:], False),
    "a tab for a space": ("3\t" + PILE_VALUES[2:], False), "a count past the end": ("99999999999 3 5 7 ", False),
    "a negative count": ("-3 " + PILE_VALUES[2:], False), "an integer out of range": ("1 99999999999999999999 ", False),
    "code": ("system(\"true\") ", False), "a float's text": ("3 3.0 5 7 " + PILE_VALUES[8:], False),
}


# The extra rows whose good completion's reference verdict is run here too (a C++ one costs 1.2 CPU-s:
# the union's only)
REFERENCED = {"cpp": ("avg",), "rs": ("pile",)}


def _problem(lang: str, which) -> tuple:
    return ROWS[lang][which] if isinstance(which, int) else EXTRA[lang][which]


def _available(lang: str) -> bool:
    return not unavailable(LANGUAGES[lang])


def _values_loop(lang: str) -> Program:
    """The judge of the sealed make_a_pile Program, compiled once, then run once per values file of
    VALUES (`judge_loop`: a line "<index> <status> <1 if it printed its marker>" per file)."""
    row, good, _ = EXTRA[lang]["pile"]
    sealed = build_program(LANGUAGES[lang], row["prompt"], good, row["tests"], row["name"])
    loop = judge_loop(sealed, [data.encode() for data, _ in VALUES.values()])
    return dataclasses.replace(loop, steps=(sealed.judge.steps[0], *loop.steps), ro_paths=sealed.ro_paths)


def _judge_all(out) -> None:
    """Every case of the languages whose toolchain is here (`judge_cases`), the reference run only
    for SHOWN's cheats, and the values-file loops."""
    cases, loops = [], []
    for lang in (lang for lang in CHEATS if _available(lang)):
        for name, (which, completion, ref_passes, today) in CHEATS[lang].items():
            row = _problem(lang, which)[0]
            args = (LANGUAGES[lang], row["prompt"], completion, row["tests"], row["name"])
            shown = ref_passes and name in SHOWN[lang]
            cases.append(((lang, "cheat", name), build_program(*args), (lang, row, completion) if shown else None,
                          single_process_program(*args) if today is not None else None))
        for key, (row, good, wrong) in EXTRA[lang].items():
            for what, completion in (("good", good), ("wrong", wrong)):
                cases.append(((lang, "extra", key, what),
                              build_program(LANGUAGES[lang], row["prompt"], completion, row["tests"], row["name"]),
                              (lang, row, completion) if key in REFERENCED[lang] and what == "good" else None, None))
        loops.append(([lang, "values files"], _values_loop(lang)))
    judge_cases(cases, out, loops)


@pytest.fixture(scope="module")
def verdicts(built_once):
    """{key: (sealed result or output, reference pass, today's result)}, judged once per test run."""
    return load_verdicts(built_once, "multipl_e_seal_compiled", _judge_all)


@pytest.mark.parametrize("lang", list(CHEATS))
def test_every_cheat_scores_zero_sealed(lang, verdicts):
    assert_cheats_fail(lang, {name: (True if ref and name in SHOWN[lang] else None, today)
                              for name, (_, _, ref, today) in CHEATS[lang].items()}, verdicts)


@pytest.mark.parametrize("lang", list(EXTRA))
def test_more_published_rows_good_passes_wrong_fails(lang, verdicts):
    """make_a_pile (a vector) in both languages, and C++'s rounded_avg, whose return type is one of
    the prompt's unions: it crosses as the alternative the function built (a string, or -1). The
    good completions pass, as MultiPL-E's reference passes them (shown for the union and for Rust);
    the wrong ones fail in the tests' own comparison."""
    need(lang)
    for key in EXTRA[lang]:
        for what in ("good", "wrong"):
            sealed, reference, _ = verdicts[(lang, "extra", key, what)]
            if what == "good" and key in REFERENCED[lang]:
                assert reference is True, (lang, key)
            assert (sealed == PASSED) is (what == "good"), (lang, key, what, sealed)
            assert sealed == PASSED or sealed.startswith("failed: the tests "), (lang, key, what, sealed)


@pytest.mark.parametrize("lang", list(CHEATS))
def test_only_well_formed_values_of_the_right_count_pass(lang, verdicts):
    need(lang)
    output, _, _ = verdicts[(lang, "values files")]
    seen = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0].isdigit():
            seen[int(parts[0])] = (parts[1], parts[2])
    for i, (name, (_, passes)) in enumerate(VALUES.items()):
        status, marker = seen[i]
        assert (status == "0" and marker == "1") is passes, (lang, name, status, marker)
        assert passes or status == "3", (lang, name, status)  # the parser's refusal, not the tests' assertion


def test_the_program_stage_holds_no_expected_value_and_the_judge_the_tests_unchanged():
    for lang in CHEATS:
        problems = [(r, g) for r, g, _ in ROWS[lang]] + [(r, g) for r, g, _ in EXTRA[lang].values()]
        for row, good in problems:
            sealed = build_program(LANGUAGES[lang], row["prompt"], good, row["tests"], row["name"])
            (name, driver), *extra = sealed.files
            (judge_name, judge), *judge_extra = sealed.judge.files
            assert name == judge_name == LANGUAGES[lang].file and extra == judge_extra
            assert row["tests"].rstrip().rsplit("\n", 1)[0] in judge and good not in judge
            assert sealed.judge.end_marker in judge and sealed.judge.end_marker not in driver
            assert sealed.end_marker in driver and sealed.timeout == LANGUAGES[lang].timeout
            tests = row["tests"]
            for call in scan.calls(tests, ("candidate",), MODULES[lang].LAYOUT.syntax):
                expected = tests[call.end:tests.find("\n", call.end)]  # `== (true));`, `, vec![3, 5, 7]);`
                assert expected.strip(" ;)") and expected not in driver, (lang, expected)


def test_tests_outside_multipl_e_layout_are_a_data_error():
    """The driver makes the calls the judge's stub answers only when each call opens its line's
    comparison and holds no other call: anything else would hand the tests misaligned values."""
    for lang, (first, nested) in {"cpp": ("    long x = candidate((1.5f));\n", "candidate(candidate((3.5f)))"),
                                   "rs": ("    let x = candidate(1.5);\n", "candidate(candidate(3.5))")}.items():
        row, good, _ = ROWS[lang][1]
        call = nested.replace("candidate(", "", 1)[:-1]
        head, rest = row["tests"].split("\n", 3)[:3], row["tests"].split("\n", 3)[3]
        for tests, match in (("\n".join(head) + "\n" + first + rest, "does not open one of MultiPL-E's comparisons"),
                             (row["tests"].replace(call, nested, 1), "holds another in its arguments")):
            with pytest.raises(EvalDataError, match=match):
                build_program(LANGUAGES[lang], row["prompt"], good, tests, "rows.jsonl:1")


def test_the_cpp_compiles_use_the_precompiled_header_in_the_sandbox():
    need("cpp")
    if not cpp.pch_dir():
        pytest.skip("no folder for the precompiled header here")
    row, good, _ = ROWS["cpp"][0]
    sealed = build_program(LANGUAGES["cpp"], row["prompt"], good, row["tests"], row["name"])
    compile_step = sealed.steps[0]
    probe = dataclasses.replace(sealed, judge=None, end_marker="",
                                steps=((*compile_step, "-H", "-fsyntax-only"),))
    result = Sandbox(timeout=30).run_program(probe)
    assert result.passed, result
    assert f"! {cpp.pch_dir()}/{cpp.HEADER}.gch" in result.output, result.output[:2000]


def test_without_the_prebuilt_support_the_seals_judge_alike(monkeypatch):
    """No folder for the prebuilt support (an unwritable cache): the C++ header goes along as text,
    the Rust module is pasted into both programs; the good completion still passes (and Rust's wrong
    one fails)."""
    monkeypatch.setattr(cpp, "pch_dir", lambda: "")
    monkeypatch.setattr(rs, "support_flags", lambda: ((), ""))
    programs, expected = [], []
    for lang in ("cpp", "rs"):
        if _available(lang):
            row, good, wrong = ROWS[lang][1]
            # C++ without the precompiled header costs 1.3 CPU-s a compile: the good completion alone
            for completion, passes in ((good, True), (wrong, False))[:1 if lang == "cpp" else 2]:
                programs.append(build_program(LANGUAGES[lang], row["prompt"], completion, row["tests"], row["name"]))
                expected.append((lang, passes))
    if not programs:
        pytest.skip("neither g++ nor rustc is installed (scripts/setup_eval.sh)")
    assert all(p.ro_paths == () for p in programs)
    results = run_programs(programs, Sandbox(timeout=10), workers=2)
    for (lang, passes), result in zip(expected, results):
        assert (result == PASSED) is passes, (lang, result)


# ----------------------------------------------------------------------------- the codecs, exactly

ROUNDTRIP = Path(__file__).resolve().parent / "multipl_e_seal"  # roundtrip.cpp, roundtrip.rs


def _run_trusted(argv: list, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={"PATH": SANDBOX_PATH, "LANG": "C.UTF-8", "HOME": str(cwd)})


def test_the_cpp_codec_round_trips_every_type_exactly(tmp_path):
    """Our own header and values (no candidate code): every type MultiPL-E's C++ prompts return
    is written and read back equal, floats bit for bit (-0.0, a NaN's payload), bytes as bytes."""
    need("cpp")
    shutil.copy(ROUNDTRIP / "roundtrip.cpp", tmp_path)
    include = cpp.pch_dir()
    if not include:
        shutil.copy(cpp.SUPPORT, tmp_path / cpp.HEADER)
    flags = ["-I", include] if include else []
    built = _run_trusted(["g++", cpp.STD, *flags, "-include", cpp.HEADER, "-o", "roundtrip", "roundtrip.cpp"], tmp_path)
    assert built.returncode == 0, built.stderr[-3000:]
    ran = _run_trusted(["./roundtrip"], tmp_path)
    assert ran.returncode == 0 and ran.stdout.split() == ["written", "read", "back"], (ran.stdout, ran.stderr)


def test_the_rust_codec_round_trips_every_type_exactly(tmp_path):
    need("rs")
    flags, folder = rs.support_flags()
    source = (ROUNDTRIP / "roundtrip.rs").read_text()
    if not folder:  # the support pasted in, as the seal does without its rlib
        source += "mod easylemur_seal {\n" + rs.SUPPORT.read_text() + "}\n"
    (tmp_path / "roundtrip.rs").write_text(source)
    built = _run_trusted(["rustc", "-C", "linker=gcc", *flags, "-o", "roundtrip", "roundtrip.rs"], tmp_path)
    assert built.returncode == 0, built.stderr[-3000:]
    ran = _run_trusted(["./roundtrip"], tmp_path)
    assert ran.returncode == 0 and ran.stdout.split() == ["written", "read", "back"], (ran.stdout, ran.stderr)
