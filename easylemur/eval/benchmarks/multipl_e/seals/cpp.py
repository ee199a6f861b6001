"""C++, sealed: the candidate's code and MultiPL-E's tests are compiled as two translation units
in two stages, so no macro (`#define assert`), operator (a global `operator==`), specialization,
pragma, interposed libc function (`__assert_fail`, `abort`, `exit`) or static initializer of the
completion's reaches the tests' comparison.

Program stage (untrusted; `compiled.py` has the layout): prompt + completion + "\\n" + a
driver: the tests' own head (the `int main() {` line and the `auto candidate = f;` alias), then
`easylemur_seal::record(candidate(ARGS));` for each call the tests make (same argument text,
same order), then the statement that writes the values file and prints the program's end marker,
then the tests' own closing brace. No expected value is in it.

Judge stage (trusted, every process of the program gone): prompt + `return
easylemur_seal::next_for(f);` + "\\n" + MultiPL-E's tests unchanged, their last statement checking
that every value was used and printing the judge's end marker: the tests' own `assert(... == ...)`
compares the values the function returned, rebuilt with its declared return type.

`support/el.hpp` (namespace `easylemur_seal`, forced first with `-include`) holds both sides'
code: a serializer per type (integers, bool, float and double bit-exact, std::string, vector,
map, unordered_map, set, optional, tuple, pair, variant) and its strict parser. A union of
MultiPL-E's prompts (`Union_std_string_long`, no discriminant of its own) crosses as the
alternative it was built from: in the driver the union's constructors record it (a copy of the
prompt whose constructors say `made(this, k)`), the judge builds the union from that
alternative's constructor; a test that compares another member reads an inactive member, the
undefined behaviour the reference has too.

Both compiles run today's g++ command plus `-include easylemur_seal.h`, the support header
precompiled (it includes <bits/stdc++.h>, which every MultiPL-E C++ prompt includes, so each
compile skips parsing it: 0.3 s instead of 1.6 CPU-s): built once per compiler and header
outside the sandbox (`pch_dir`, `prebuilt.py`), bound read-only, found through `-I`. GCC uses it
only when it was made by the same compiler with the same options (`-Winvalid-pch` says when it
is not) and otherwise reads the header as text beside it: slower, the same program. Forced
first, the header changes nothing of the prompt's own `#include<assert.h>` and
`#include<bits/stdc++.h>` (the standard headers' guards make them no-ops; `<assert.h>` has none
and defines `assert` again, the same way). Timings: BENCHMARKS.md, "MultiPL-E's seals"."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from easylemur.eval.api import EvalDataError
from easylemur.eval.benchmarks.multipl_e.languages import Language
from easylemur.eval.benchmarks.multipl_e.seals import compiled, scan
from easylemur.eval.benchmarks.multipl_e.seals.prebuilt import BUILD_ENV, prebuilt
from easylemur.eval.sandbox import SANDBOX_PATH, Program

LAYOUT = compiled.Layout(
    syntax=scan.Syntax(quotes="\"'", raw=r'(?:u8|[uUL])?R"([^()\\ \t\n]{0,16})\(.*?\)\1"'),
    comparison=re.compile(r"[ \t]*assert\([ \t]*"),  # MultiPL-E's `assert(candidate(...) == ...);`
    record="easylemur_seal::record({call});", flush='easylemur_seal::flush("{m}");',
    done='    easylemur_seal::done("{m}");')
SUPPORT = Path(__file__).resolve().parent / "support" / "el.hpp"
HEADER = "easylemur_seal.h"  # the support header's name on the include path (and the .gch's stem)
STD = "-std=c++17"  # MultiPL-E's; the precompiled header must be made with the same options
# The signature: the prompt's last line, `<return type> <name>(<parameters>) {`.
SIGNATURE = re.compile(r"^(?P<ret>[^()]*?)\s*\b(?P<name>[A-Za-z_]\w*)\s*\((?P<params>.*)\)\s*\{\s*$")


def program(lang: Language, prompt: str, completion: str, tests: str, where: str = "") -> Program:
    """The sealed Program that judges `completion` of a MultiPL-E C++ problem (module docstring)."""
    where = where or lang.name
    name, ret = _signature(prompt, where)
    driver_prompt, stub = prompt, f"    return easylemur_seal::next_for({name});\n"
    union = _union(prompt, ret)
    if union is not None:
        driver_prompt, stub = _sealed_union(prompt, ret, union, where)
    include = pch_dir()
    if include and not os.path.isdir(include):  # removed since it was built (a /var/tmp cleaner): again
        pch_dir.cache_clear()
        include = pch_dir()
    # without a precompiled header the header itself goes along, found first in the working dir
    files = () if include else ((HEADER, SUPPORT.read_text()),)
    flags = (*(("-I", include, "-Winvalid-pch") if include else ()), "-include", HEADER)
    return compiled.program(LAYOUT, lang, prompt, completion, tests, where, stub=stub, driver_prompt=driver_prompt,
                            files=files, flags=flags, ro_paths=(include,) if include else ())


def _signature(prompt: str, where: str) -> tuple[str, str]:
    """(name, return type text) of the function the prompt's last line opens."""
    lines = [x for x in prompt.rstrip().split("\n") if x.strip()]
    m = SIGNATURE.match(lines[-1].strip()) if lines else None
    if m is None or not m.group("ret").strip():
        raise EvalDataError(f"{where}: the C++ prompt does not end with a function's signature "
                            f"(`<type> <name>(<parameters>) {{`)")
    return m.group("name"), m.group("ret").strip()


# MultiPL-E's unions (humaneval_to_cpp.py, `translate_prompt`): `union U{`, a member `T fK;` per
# alternative, a constructor `U(T _fK) : fK(_fK) {}` per alternative, `operator==(T f)` per alternative.
def _union(prompt: str, ret: str) -> list[tuple[int, str, re.Match]] | None:
    """[(k, type, the constructor's match), ...] of the union the function returns; None when it
    returns no union the prompt defines."""
    if not re.fullmatch(r"[A-Za-z_]\w*", ret) or not re.search(rf"\bunion\s+{re.escape(ret)}\s*\{{", prompt):
        return None
    ctor = re.compile(rf"\b{re.escape(ret)}\((?P<type>[^()]*?) _f(?P<k>\d+)\) : f(?P=k)\(_f(?P=k)\) \{{\}}")
    found = [(int(m.group("k")), m.group("type").strip(), m) for m in ctor.finditer(prompt)]
    return found or None


def _sealed_union(prompt: str, ret: str, union: list, where: str) -> tuple[str, str]:
    """(the driver's copy of the prompt, the judge's stub) for a function that returns union
    `ret`: the driver's constructors record which alternative built each union, and a Codec for
    it writes that alternative's index and member; the stub builds the union from the index and
    value it reads."""
    driver = prompt
    for k, _, m in sorted(union, key=lambda u: -u[2].start()):  # from the end: earlier offsets stay valid
        body = m.group(0)[:-2] + f"{{ ::easylemur_seal::made(this, {k}); }}"
        driver = driver[:m.start()] + body + driver[m.end():]
    cases = "".join(f"        case {k}: word(\"{k}\"); Codec<{t}>::put(u.f{k}); return;\n" for k, t, _ in union)
    codec = (f"namespace easylemur_seal {{\ntemplate <> struct Codec<{ret}> {{\n"
             f"    static void put(const {ret}& u) {{\n        switch (made_as(&u)) {{\n{cases}        }}\n"
             "        word(\"-\");  // built by no constructor of the prompt's: the judge refuses it\n"
             "    }\n};\n}  // namespace easylemur_seal\n")
    end = re.compile(r"\n\};\n").search(driver, re.search(rf"\bunion\s+{re.escape(ret)}\s*\{{", driver).end())
    if end is None:
        raise EvalDataError(f"{where}: the C++ prompt's union {ret} does not end with a line `}};`")
    driver = driver[:end.end()] + codec + driver[end.end():]
    n = max(k for k, _, _ in union) + 1
    stub = ("    switch (easylemur_seal::alternative(%d)) {\n" % n
            + "".join(f"    case {k}: return {ret}(easylemur_seal::next<{t}>());\n" for k, t, _ in union)
            + "    }\n    easylemur_seal::bad(\"an alternative the union lacks\");\n")
    return driver, stub


# ------------------------------------------------------------------------------- the precompiled header

@functools.lru_cache(maxsize=None)
def pch_dir() -> str:
    """A folder holding the support header (`HEADER`) and its precompiled form for this machine's
    g++ and MultiPL-E's options (`prebuilt`), named for the compiler, the options, the header
    and every system header it includes (path, size, mtime); "" when it cannot be made (no g++,
    no cache folder): then each compile reads the header as text."""
    gxx = shutil.which("g++", path=SANDBOX_PATH)
    if gxx is None:
        return ""
    source = SUPPORT.read_text()
    try:
        with tempfile.TemporaryDirectory(prefix="easylemur-pch-") as d:
            (Path(d) / HEADER).write_text(source)
            version = subprocess.run([gxx, "-dumpfullversion", "-dumpmachine"], capture_output=True, text=True,
                                     check=True, timeout=60, env=BUILD_ENV).stdout
            deps = subprocess.run([gxx, STD, "-M", "-x", "c++-header", HEADER], capture_output=True, text=True,
                                  check=True, timeout=60, cwd=d, env=BUILD_ENV).stdout
        headers = sorted(p for p in deps.replace("\\\n", " ").split()[1:] if p != HEADER)
        key = (version, os.path.realpath(gxx), STD, source, [(p, os.stat(p).st_size, os.stat(p).st_mtime_ns)
                                                             for p in headers])
    except (OSError, subprocess.SubprocessError):
        return ""

    def build(folder: Path) -> None:
        (folder / HEADER).write_text(source)
        subprocess.run([gxx, STD, "-x", "c++-header", "-o", HEADER + ".gch", HEADER], cwd=folder,
                       capture_output=True, check=True, timeout=600, env=BUILD_ENV)

    return prebuilt("cpp-pch-" + version.split()[0], key, build)
