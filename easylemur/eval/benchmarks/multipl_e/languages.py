"""The languages of MultiPL-E that easylemur judges in its sandbox: one row of data per language
(file name, Debian packages, compile and run commands, environment, time limit, where the end
marker goes), and the sandbox `Program` built from a row's prompt, a completion and its tests.

The program text is MultiPL-E's own: prompt + completion + "\\n" + tests (the tests start by
closing the prompt's function). MultiPL-E's reference harness writes it to a file, runs the
language's toolchain on it outside any sandbox and calls it a pass when every command exits 0
within its time limit (Go: `go test` on the `_test.go` file, a pass when its output says neither
FAIL nor "[build failed]"/"[setup failed]"; Perl: also no "ERROR" in the output).

Here the same commands run inside the sandbox (no network, no host files beyond /usr and the
libraries, RLIMIT_AS, RLIMIT_NPROC 64, a private 64 MiB /tmp, one wall clock for compiling and
running together) and a pass needs one thing more: the tests' last statement prints a fresh end
marker (`sandbox.new_marker()`), so a completion that ends the program early with status 0
(`process.exit(0)`, `exit(0)`, `System.exit(0)`, `std::process::exit(0)`, `exit 0`, `exit(0)` in
Perl) scores 0 where the reference counts it a pass. Where the marker is printed:
- `end`: a statement appended after the tests (JavaScript, Bash, Perl: the tests are top-level
  code that calls the test function last);
- `close`: the last statement inside the tests' final function, just before its closing brace:
  C++ and Rust (`int main() {...}`, `fn main() {...}`), Go (`func TestX(t *testing.T) {...}`),
  Java (`public static void main` inside `class Problem`: the brace before the class's). Adding
  the line inside that function rather than renaming `main` and wrapping it keeps the program
  byte-for-byte MultiPL-E's up to that line, cannot collide with a name of the completion's, and
  runs exactly when the tests' own last statement has run. A test that fails ends the program
  (assert/abort, panic, AssertionError) before the marker; Go's `t.Errorf` does not stop the
  function, but the test binary then exits 1.
Go runs `go test -c` (the same build and `go vet` checks as `go test`) and then the test binary
itself, so compile and run failures read apart and the binary's own output carries the marker.
Go's testing package already fails a test that calls os.Exit(0) (since Go 1.16: "unexpected call
to os.Exit(0) during test"), and MultiPL-E's Go prompts import only "testing" and "fmt", so a
completion cannot even name os.Exit; the marker still catches an exit before the tests start
(e.g. from an init function), which `go test` reports as "ok".

Other differences from the reference: the marker is in the program's text, so a program that
reads its own source could print it (the documented limit of judging a single process); a C++
completion that redefines `assert` neuters the tests of the single-process layout as it does the
reference's (the sealed C++ below is out of its reach). Java runs on a
JDK whose files lie under /usr (Debian's openjdk links its conf/ into /etc/java-N-openjdk,
which is bound read-only for Java alone; `find_jdk`), with the JVM's reservations cut to fit
RLIMIT_AS; Rust links with gcc (`cc` is an /etc/alternatives link). Perl's "ERROR" rule is not
applied: the sandbox never reads a program's output for the verdict.

JavaScript, Bash and Perl are sealed (`seals/script.py`, `js.py`, `sh.py`, `pl.py`): the program
stage runs prompt + completion + a driver cut from the tests (their head: `require('node:assert')`
and `function test()`, the `candidate` wrapper, `set -e` and `run_test()`, `use Test::Deep` and
`sub testhumaneval`; each `candidate(...)` call with the tests' argument text, in order, writing
its value; their tail), with no expected value in it; the judge runs the tests unchanged against a
stub of the prompt's function that hands back those values, parsed, never evaluated. Replacing
`deepEqual` or `eq_deeply`, `CORE::GLOBAL::exit`, `END { $? = 0 }`, a Bash function named `set`, an
exit hook printing the marker read from the program's own file, reading the expected values from
it: each can only change the values, so the single-process limit above no longer holds for them.
A value the encoding cannot carry (a function, a Map, a blessed reference) fails, as the
comparison against MultiPL-E's expected values would; a Perl function returning a list of two
values or more fails too (the reference flattens the list into `eq_deeply`'s arguments, so
`return (1, 1)` passes every test there).

C++ and Rust are sealed (`seals/compiled.py`, `cpp.py`, `rs.py`): the candidate's code and the
tests are two translation units (two crates) compiled in the two stages. The program stage
compiles prompt + completion + a driver (the tests' `main` head and `candidate` alias, a
`record(candidate(...))` per call with the tests' argument text, in order; no expected value);
the judge compiles the prompt with a stub body that returns the next value, typed by the declared
return type (`seals/support/el.hpp`, `el.rs`: integers, bool, floats bit-exact, strings as bytes,
vector/Vec, map, set, optional/Option, tuple, pair, variant; a C++ prompt's union as the
alternative its constructor built), and the tests unchanged, so `assert(... == ...)` and
`assert_eq!` compare exactly the values the function returned. `#define assert`, a global or
`std::` `operator==`, `#define main`, `#define candidate`, an interposed `__assert_fail` or
`abort`, static initializers, `atexit` and panic hooks, `macro_rules! assert_eq`, a local `struct
bool`, an `.init_array` constructor, reading the program's own source or binary: each can only
change the values. A return type the codecs do not carry (`std::any`) fails to compile in the
driver, as its `==` fails in the reference. The compiles are today's commands plus prebuilt,
trusted support bound read-only (`seals/prebuilt.py`): C++ `-include` of the support header
precompiled with <bits/stdc++.h>, Rust `--extern` of the support rlib and `-C prefer-dynamic`
(the standard library linked as the same build's shared object), so two compiles cost what one
did.

Java and Go are sealed (`seals/java.py`, `go.py`) in the same two stages: the program stage compiles
and runs prompt + completion + a driver (the tests' head: Java's `main` header, Go's `func TestX`
and `candidate := f`; a record per call of the function with the tests' argument text, in order;
no expected value), the judge the prompt with a stub body that returns the next value and the
tests unchanged (`-ea`; `go test -c` with its vet checks). A Java value crosses as its own runtime
class (`seals/support/EasylemurSeal.java`: boxed primitives, floats bit-exact, String; any List as
an ArrayList, any Map as a HashMap, Optional, javatuples' tuples; `EasylemurSeal.next()` is
generic, so javac casts it to the declared return type), so an `ArrayList` subclass or a nested
class `ArrayList` whose `equals` is always true (the nested one also rewrites the tests' expected
`new ArrayList<...>(...)` in one process), elements smuggled past the generic type, a static
initializer that halts, `sun.misc.Unsafe` setting the tests' `$assertionsDisabled`, a shutdown
hook that prints the marker read from the source and halts with 0: each can only change the
values. A value of a class the encoding does not carry (the completion's own, an array) fails the
program stage, as its `equals` against MultiPL-E's expected JDK values does in the reference. Go
needs the seal although a completion cannot import `os`, `unsafe` or `reflect`: Go lets a
package-level declaration shadow the universe's names, so a completion's `const false = true`
turns every `expected: false` of the tests true, and a function that always returns true passes
every bool problem under `go test` and in one process. Go values cross by the declared type
(`seals/support/el_out.go`, `el_in.go`: numbers exact, strings as bytes, slices and maps by
element; a value of an interface type, MultiPL-E's tuples and Any, as the `%v` text the tests'
`fmt.Sprintf` comparison sees of it). Speed: javac runs twice, with the support class and a
class-data-sharing archive of javac's own classes prebuilt once per machine and bound read-only
(`seals/prebuilt.py`); each Go stage gets a copy of a build cache prefilled once per machine with
the standard library's vet facts and export data (a cold cache costs `go test -c` ~1.7 CPU-s).
"""

from __future__ import annotations

import dataclasses
import glob
import importlib
import importlib.util
import os
import shutil
from typing import Optional

from easylemur.errors import InputError
from easylemur.eval.api import EvalDataError
from easylemur.eval.sandbox import SANDBOX_PATH, Program, new_marker, visible

JAVATUPLES = "/usr/share/java/javatuples.jar"  # Debian libjavatuples-java; MultiPL-E's Java prompts import org.javatuples
JDK = "{jdk}"  # in a row's argv: the JDK home `find_jdk` picked

# The JVM reserves address space for its heap, class space and code cache up front (1 GiB of
# compressed class space alone by default); under RLIMIT_AS of about 1.9 GiB it cannot start
# without these caps. SerialGC and C1 only (TieredStopAtLevel=1) keep it to ~12 threads under
# RLIMIT_NPROC 64 and start it fastest; -XX:-UsePerfData writes no hsperfdata file into /tmp.
JVM_FLAGS = ("-Xmx512m", "-Xss16m", "-XX:ReservedCodeCacheSize=64m", "-XX:CompressedClassSpaceSize=64m",
             "-XX:MaxMetaspaceSize=256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData")


@dataclasses.dataclass(frozen=True)
class Language:
    name: str  # MultiPL-E's code for it (the `language` field, the config's suffix)
    title: str  # in the chat prompt: "Complete the following {title} function."
    file: str  # the program's file name in the sandbox's /tmp
    packages: tuple  # Debian packages (scripts/setup_eval.sh installs them)
    tools: tuple  # commands that must be on the sandbox's PATH (or resolve under /usr) for it to run
    compile: tuple  # argv lists run before `run`; a non-zero exit is a compile error
    run: tuple  # the argv that runs the tests
    marker: str  # "end" or "close" (module docstring)
    print_marker: str  # the statement that prints "\n<marker>\n"; {m} is the marker
    timeout: float  # seconds for all steps together (compile time counts)
    env: tuple = ()  # ((name, value), ...) beside PATH, HOME and LANG
    reference: tuple = ()  # MultiPL-E's own commands for this file (outside any sandbox)
    # "exit": every command exits 0; "go": `go test`'s output has no FAIL; "perl": exit 0 and no "ERROR" printed
    reference_rule: str = "exit"
    braces: int = 1  # "close": how many closing braces from the end the print goes before


LANGUAGES: dict[str, Language] = {lang.name: lang for lang in (
    Language("js", "JavaScript", "program.js", ("nodejs",), ("node",),
             compile=(), run=("node", "program.js"), marker="end",
             print_marker='console.log("\\n{m}");', timeout=15.0,
             reference=(("node", "program.js"),)),
    Language("cpp", "C++", "program.cpp", ("g++",), ("g++",),
             compile=(("g++", "-std=c++17", "-o", "program", "program.cpp"),), run=("./program",), marker="close",
             print_marker='    std::printf("\\n%s\\n", "{m}"); std::fflush(stdout);', timeout=30.0,
             reference=(("g++", "program.cpp", "-o", "program", "-std=c++17"), ("./program",))),
    Language("java", "Java", "Problem.java", ("default-jdk-headless", "libjavatuples-java"), ("javac", "java"),
             compile=((f"{JDK}/bin/javac", *(f"-J{f}" for f in JVM_FLAGS), "-encoding", "UTF8", "-d", "classes",
                       "-cp", JAVATUPLES, "Problem.java"),),
             run=(f"{JDK}/bin/java", *JVM_FLAGS, "-ea", "-cp", f"classes:{JAVATUPLES}", "Problem"), marker="close",
             print_marker='        System.out.println("\\n{m}");', timeout=30.0, braces=2,
             reference=((f"{JDK}/bin/javac", "-encoding", "UTF8", "-d", "classes", "-cp", JAVATUPLES, "Problem.java"),
                        (f"{JDK}/bin/java", "-ea", "-cp", f"classes:{JAVATUPLES}", "Problem"))),
    # GO111MODULE=off: the file is built on its own, no go.mod and no module lookup; the build
    # cache in the private /tmp; GOMAXPROCS and -p cap the threads of the compiler, vet and the
    # linker under RLIMIT_NPROC on a machine with many cores.
    Language("go", "Go", "program_test.go", ("golang-go",), ("go",),
             compile=(("go", "test", "-c", "-o", "program.test", "program_test.go"),), run=("./program.test",),
             marker="close", print_marker='    fmt.Println("\\n{m}")', timeout=30.0,
             env=(("GOCACHE", "/tmp/.gocache"), ("GOPATH", "/tmp/go"), ("GO111MODULE", "off"), ("GOPROXY", "off"),
                  ("GOFLAGS", "-p=2"), ("GOMAXPROCS", "2"), ("CGO_ENABLED", "0")),
             reference=(("go", "test", "program_test.go"),), reference_rule="go"),
    # Debian's rustc (/usr/bin/rustc, not a rustup toolchain in a home directory); `-C linker=gcc`
    # because its default linker `cc` is an /etc/alternatives link the sandbox cannot see.
    Language("rs", "Rust", "program.rs", ("rustc",), ("rustc", "gcc"),
             compile=(("rustc", "-C", "linker=gcc", "-o", "program", "program.rs"),), run=("./program",),
             marker="close", print_marker='    println!("\\n{m}");', timeout=30.0,
             reference=(("rustc", "program.rs", "-o", "program"), ("./program",))),
    Language("sh", "Bash", "program.sh", ("bash",), ("bash",),
             compile=(), run=("bash", "program.sh"), marker="end", print_marker="printf '\\n%s\\n' '{m}'", timeout=15.0,
             reference=(("bash", "program.sh"),)),
    Language("pl", "Perl", "program.pl", ("perl", "libtest-deep-perl"), ("perl",),
             compile=(), run=("perl", "program.pl"), marker="end", print_marker='print "\\n{m}\\n";', timeout=15.0,
             reference=(("perl", "program.pl"),), reference_rule="perl"),
)}


def language(name: str) -> Language:
    """The row of MultiPL-E language `name`; InputError naming the supported ones."""
    if name not in LANGUAGES:
        raise InputError(f"MultiPL-E language {name!r}: not supported here; expected one of {', '.join(LANGUAGES)}")
    return LANGUAGES[name]


def java_etc() -> tuple[str, ...]:
    """Debian's JDK configuration folders (/etc/java-17-openjdk, ...): bound read-only into the
    sandbox for Java, since the JDK's conf/ links into them."""
    return tuple(sorted(glob.glob("/etc/java-*")))


def find_jdk() -> Optional[str]:
    """A JDK home whose java, javac and conf/security/java.security all resolve under /usr (or
    another path the sandbox binds: Debian's /etc/java-N-openjdk, which its conf/ links into, is
    bound for Java): $JAVA_HOME, the javac on PATH, then /usr/lib/jvm/*, newest name first.
    None when there is none."""
    homes = [os.environ.get("JAVA_HOME", "")]
    javac = shutil.which("javac", path=SANDBOX_PATH)
    if javac:
        homes.append(os.path.dirname(os.path.dirname(os.path.realpath(javac))))
    homes += sorted(glob.glob("/usr/lib/jvm/*"), reverse=True)
    for home in homes:
        needed = ("bin/java", "bin/javac", "conf/security/java.security")
        if home and all(visible(os.path.join(home, p), java_etc()) for p in needed):
            return os.path.realpath(home)
    return None


def unavailable(lang: Language) -> str:
    """Why `lang` cannot run in the sandbox here ("" when it can): a missing tool or package."""
    missing = [t for t in lang.tools if not shutil.which(t, path=SANDBOX_PATH)]
    if lang.name == "java":
        if find_jdk() is None:
            return ("no JDK whose files lie under /usr (or Debian's /etc/java-*); apt-get install -y "
                    "default-jdk-headless, or set JAVA_HOME to a self-contained JDK")
        missing = [] if os.path.isfile(JAVATUPLES) else [f"{JAVATUPLES} (apt-get install -y libjavatuples-java)"]
    if lang.name == "pl" and not missing and not glob.glob("/usr/share/perl5/Test/Deep.pm"):
        missing = ["Test::Deep (apt-get install -y libtest-deep-perl)"]
    if missing:
        return (f"{lang.title} needs {', '.join(missing)} on {SANDBOX_PATH}; "
                f"apt-get install -y {' '.join(lang.packages)} (scripts/setup_eval.sh)")
    return ""


def resolve(argv: tuple) -> tuple:
    """`argv` with the JDK placeholder replaced by `find_jdk()`'s home."""
    if not any(JDK in a for a in argv):
        return tuple(argv)
    home = find_jdk()
    if home is None:
        raise InputError(f"Java: {unavailable(LANGUAGES['java'])}")
    return tuple(a.replace(JDK, home) for a in argv)


def with_marker(lang: Language, prompt: str, completion: str, tests: str, marker: str, where: str = "") -> str:
    """MultiPL-E's program text (prompt + completion + "\\n" + tests) with the statement that
    prints `marker` after the tests (`end`) or before the tests' last `braces` closing braces
    (`close`). Tests that do not end that way are an EvalDataError naming `where`."""
    program = prompt + completion + "\n" + tests
    line = lang.print_marker.format(m=marker)
    if lang.marker == "end":
        return program.rstrip("\n") + "\n" + line + "\n"
    body, cut = program.rstrip(), None
    end = len(body)
    for _ in range(lang.braces):
        end = len(body[:end].rstrip())
        if not body[:end].endswith("}"):
            raise EvalDataError(f"{where or lang.name}: the {lang.title} tests do not end with "
                                f"{lang.braces} closing brace(s) of their test function")
        cut = end = end - 1
    assert cut is not None
    start = body.rfind("\n", 0, cut) + 1  # the print goes on a line of its own, before the brace's line
    if not body[start:cut].strip():
        cut = start
    return body[:cut] + line + "\n" + body[cut:] + "\n"


def build_program(lang: Language, prompt: str, completion: str, tests: str, where: str = "",
                  marker: str = "") -> Program:
    """The sandbox Program that judges `completion` of a MultiPL-E problem in `lang`: sealed
    (`seals/<lang>.py`: the candidate's calls in one process, the tests in a trusted judge)
    where the language has a seal, else `single_process_program`."""
    seal = _seal(lang)
    if seal is not None:
        return seal.program(lang, prompt, completion, tests, where)
    return single_process_program(lang, prompt, completion, tests, where, marker)


def _seal(lang: Language):
    name = f"easylemur.eval.benchmarks.multipl_e.seals.{lang.name}"
    return importlib.import_module(name) if importlib.util.find_spec(name) is not None else None


def single_process_program(lang: Language, prompt: str, completion: str, tests: str, where: str = "",
                           marker: str = "") -> Program:
    """MultiPL-E's program text with the end marker (`with_marker`), run as one process: how the
    reference harness runs it (bench/ times the seals against it)."""
    marker = marker or new_marker()
    text = with_marker(lang, prompt, completion, tests, marker, where)
    return Program(files=((lang.file, text),), steps=tuple(resolve(s) for s in (*lang.compile, lang.run)),
                   end_marker=marker, env=lang.env, output_bytes=4096, timeout=lang.timeout,
                   ro_paths=java_etc() if lang.name == "java" else ())
