"""Java, sealed: the candidate's code and MultiPL-E's tests are compiled and run apart, so no class
of the completion's (a nested `ArrayList` that shadows java.util's in the tests' expected values
too, an `ArrayList` subclass whose `equals` is always true, a `Pair` shadowing javatuples'),
static initializer, `System.exit`/`Runtime.halt`, shutdown hook, `System.setOut`, or write
through `sun.misc.Unsafe` (to the tests' `$assertionsDisabled`) reaches the tests' `assert`s.

Program stage (untrusted): prompt + completion + "\\n" + a driver: the tests' own head (the
closing brace of the function and `public static void main(String[] args) {`), then
`EasylemurSeal.out(f(ARGS));` for each call the tests make (`scan.calls`; same argument text,
same order), then `EasylemurSeal.write(...)`, which writes the values file and prints the
program's end marker. No expected value is in it. It runs with `-ea`, as the reference does (an
`assert` of the completion's own still counts).

Judge stage (trusted, every process of the program gone): prompt + `return
EasylemurSeal.next();` + "\\n" + MultiPL-E's tests unchanged, their last statement checking that
every value was used and printing the judge's end marker: the tests' own `assert(f(...) == ...)`
/ `.equals(...)` under `-ea` compare the values the function returned, rebuilt.
`EasylemurSeal.next()` is generic, so javac infers its type from the declared return type (a
`long` unboxes a Long, an `ArrayList<Long>` is cast to ArrayList) and a value of another class
fails the cast.

`support/EasylemurSeal.java` (a name no honest completion's class takes) holds both sides' code:
a value crosses as its own class (Long, Integer, Float and Double bit-exact, Boolean, Character,
String) or as a JDK container the judge rebuilds (any java.util List as an ArrayList, any Map as
a HashMap, Optional, org.javatuples' tuples), so each element keeps the runtime class the
reference's `equals` would have seen (a Long stays a Long, an Integer smuggled into an
ArrayList<Long> stays an Integer). Anything else (a class of the completion's, a Set, an array)
cannot be recorded: the program stage fails. The judge parses the file (never deserializes,
never loads a class a value names) and fails on anything malformed, short or long.

Speed (bench/multipl_e_seal.py): javac is most of a Java program's time and the seal runs it
twice. The support class is compiled once per machine outside the sandbox (`support_folder`,
`prebuilt.py`; trusted code) and bound read-only, so neither javac compiles it again; beside it a
class-data-sharing archive of javac's own classes (dumped by `-XX:ArchiveClassesAtExit` from a
javac run on that machine's JDK) makes both javacs start faster (`-XX:SharedArchiveFile`). The
JVM maps the archive only when it was made by the same JDK with the same options, and otherwise
loads the classes from the JDK as usual: the same compiler either way. Where no cache folder can
be made, the support source goes along and no archive is used: slower, the same verdicts."""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import subprocess
import tempfile
from pathlib import Path

from easylemur.eval.api import EvalDataError
from easylemur.eval.benchmarks.multipl_e.languages import (JAVATUPLES, JVM_FLAGS, Language, find_jdk, java_etc,
                                                           resolve, with_marker)
from easylemur.eval.benchmarks.multipl_e.seals import scan
from easylemur.eval.benchmarks.multipl_e.seals.prebuilt import prebuilt
from easylemur.eval.sandbox import Judge, Program, new_marker

# Java's literals: "...", '...' with escapes, and text blocks """...""".
SYNTAX = scan.Syntax(quotes="\"'", raw=r'"""(?:[^"\\]|\\.|"(?!""))*"""')
CLASS = "EasylemurSeal"  # the support class: its source is support/<CLASS>.java
SUPPORT = Path(__file__).resolve().parent / "support" / f"{CLASS}.java"
ARCHIVE = "javac.jsa"  # in the support folder: the class-data-sharing archive of javac's classes
CLASSES = "classes"  # in the support folder: the support class compiled
# The prompt's last line: `public static <return type> <name>(<parameters>) {`.
SIGNATURE = re.compile(r"\bstatic\s[^;{}()=]*?\b(?P<name>[A-Za-z_$][\w$]*)\s*\([^;{}]*\)\s*(?:throws\s[^;{}]*)?\{\s*\Z")


def program(lang: Language, prompt: str, completion: str, tests: str, where: str = "") -> Program:
    """The sealed Program that judges `completion` of a MultiPL-E Java problem (module docstring)."""
    where = where or lang.name
    m = SIGNATURE.search(prompt)
    if m is None:
        raise EvalDataError(f"{where}: the Java prompt does not end with a static method's signature "
                            "(`public static <type> <name>(<parameters>) {`)")
    # `x.name(...)` is a method of another object, not a call of the function under test
    calls = [c for c in scan.calls(tests, (m.group("name"),), SYNTAX, where) if not tests[:c.start].rstrip().endswith(".")]
    if not calls:
        raise EvalDataError(f"{where}: no call of {m.group('name')} found in the Java tests")
    head = tests[:tests.rfind("\n", 0, calls[0].start) + 1]
    program_marker, judge_marker = new_marker(), new_marker()
    records = "".join(f"        {CLASS}.out({tests[c.start:c.end]});\n" for c in calls)
    driver = prompt + completion + "\n" + head + records + f'        {CLASS}.write("{program_marker}");\n    }}\n}}\n'
    judge_lang = _with_print(lang, f'        {CLASS}.done("{{m}}");')
    judge = with_marker(judge_lang, prompt, f"        return {CLASS}.next();", tests, judge_marker, where)
    folder = support_folder()
    steps = _steps(lang, folder)
    # without the prebuilt class its source goes along and both javacs compile it
    extra = () if folder else ((SUPPORT.name, SUPPORT.read_text()),)
    return Program(files=(("Problem.java", driver), *extra), steps=steps, end_marker=program_marker, env=lang.env,
                   output_bytes=4096, timeout=lang.timeout, ro_paths=java_etc() + ((folder,) if folder else ()),
                   judge=Judge(files=(("Problem.java", judge), *extra), steps=steps, end_marker=judge_marker,
                               env=lang.env))


def _with_print(lang: Language, print_marker: str) -> Language:
    return dataclasses.replace(lang, print_marker=print_marker)


def _steps(lang: Language, folder: str) -> tuple:
    """Today's javac and java commands (`lang.compile`, `lang.run`) with the support class on the
    class path: prebuilt in `folder` with javac's archive, else its source compiled beside Problem.java."""
    javac, java = resolve(lang.compile[0]), resolve(lang.run)
    if not folder:
        return (*javac, SUPPORT.name), java
    support, archive = os.path.join(folder, CLASSES), os.path.join(folder, ARCHIVE)
    cds = (f"-J-XX:SharedArchiveFile={archive}",) if os.path.isfile(archive) else ()
    javac = (javac[0], *cds, *(f"{support}:{a}" if a == JAVATUPLES else a for a in javac[1:]))
    java = tuple(a.replace(f":{JAVATUPLES}", f":{support}:{JAVATUPLES}") if a.endswith(f":{JAVATUPLES}") else a
                 for a in java)
    return javac, java


# A program like MultiPL-E's (generics, boxing, lambdas and streams, the prompt's imports) that
# javac compiles once while its classes are archived: the classes a real compile loads.
WARM_UP = """import java.util.*;
import java.lang.reflect.*;
import org.javatuples.*;
import java.security.*;
import java.math.*;
import java.io.*;
import java.util.stream.*;
class Problem {
    public static Pair<Long, Optional<String>> f(ArrayList<Long> xs, HashMap<String, Long> m, float t) {
        long s = xs.stream().filter(x -> x % 2 == 0).mapToLong(Long::longValue).sum();
        String w = m.keySet().stream().sorted(Comparator.reverseOrder()).collect(Collectors.joining(","));
        for (int i = 0; i < xs.size(); i++) { if (Math.abs(xs.get(i) - t) < 0.5f) s += i; }
        return Pair.with(s, w.isEmpty() ? Optional.empty() : Optional.of(w.toUpperCase()));
    }
    public static void main(String[] args) {
        EasylemurSeal.out(f((new ArrayList<Long>(Arrays.asList((long)1l, (long)2l))),
            (new HashMap<String,Long>(Map.of("a", 1l))), (0.5f)));
        assert(f((new ArrayList<Long>(Arrays.asList())), (new HashMap<String,Long>()), (1.0f))
            .equals((Pair.with(0l, Optional.empty()))));
        EasylemurSeal.write("done");
    }
}
"""


@functools.lru_cache(maxsize=None)
def support_folder() -> str:
    """A folder holding the support class compiled (`CLASSES`) and the class-data-sharing archive
    of javac's classes (`ARCHIVE`) for this machine's JDK and `JVM_FLAGS` (`prebuilt`), named for
    the JDK (its path, release file, libjvm and module image), the flags, the support source, the
    warm-up program and javatuples' jar; "" when it cannot be made (no JDK, no cache folder)."""
    home = find_jdk()
    if home is None or not os.path.isfile(JAVATUPLES):
        return ""
    source = SUPPORT.read_text()
    try:
        stats = [(p, os.stat(p).st_size, os.stat(p).st_mtime_ns)
                 for p in (os.path.join(home, "lib", "server", "libjvm.so"), os.path.join(home, "lib", "modules"),
                           JAVATUPLES)]
        release = Path(home, "release").read_text() if os.path.isfile(os.path.join(home, "release")) else ""
    except OSError:
        return ""
    javac = [os.path.join(home, "bin", "javac"), *(f"-J{f}" for f in JVM_FLAGS), "-encoding", "UTF8"]

    def build(folder: Path) -> None:
        with tempfile.TemporaryDirectory(prefix="easylemur-java-") as d:
            Path(d, SUPPORT.name).write_text(source)
            Path(d, "Problem.java").write_text(WARM_UP)
            subprocess.run([*javac, "-d", str(folder / CLASSES), "-cp", JAVATUPLES, SUPPORT.name], cwd=d,
                           capture_output=True, check=True, timeout=300)
            subprocess.run([*javac, f"-J-XX:ArchiveClassesAtExit={folder / ARCHIVE}", "-d", "classes",
                            "-cp", f"{folder / CLASSES}:{JAVATUPLES}", "Problem.java"], cwd=d,
                           capture_output=True, check=True, timeout=300)

    return prebuilt("java-support", (os.path.realpath(home), release, stats, JVM_FLAGS, source, WARM_UP), build)
