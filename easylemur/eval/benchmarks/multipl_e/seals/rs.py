"""Rust, sealed: the candidate's code and MultiPL-E's tests are compiled as two crates in two
stages, so no macro of the completion's (`macro_rules! assert_eq`), item that shadows a prelude
name (a local `struct bool` whose `PartialEq` is always true), `#[no_mangle]` symbol, static
constructor (`.init_array`) or exit reaches the tests' comparison.

Program stage (untrusted; `compiled.py` has the layout): prompt + completion + "\\n" + a
driver: the tests' own head (`fn main() {` and `let candidate = f;`), then
`easylemur_seal::record(&candidate(ARGS));` for each call the tests make (same argument text,
same order), then the statement that writes the values file and prints the program's end marker,
then the tests' own closing brace. No expected value is in it.

Judge stage (trusted, every process of the program gone): prompt + `easylemur_seal::next()` (its
type inferred from the function's declared return type) + "\\n" + MultiPL-E's tests unchanged,
their last statement checking that every value was used and printing the judge's end marker: the
tests' own `assert_eq!` compares the values the function returned, rebuilt.

`support/el.rs` (the crate `easylemur_seal`) holds both sides' code: a trait with an impl per type
(integers, bool, char, f32/f64 bit-exact, String, Vec, Option, tuples, HashMap, BTreeMap,
HashSet, BTreeSet) that writes it and strictly parses it back, built once per rustc as an rlib
outside the sandbox (`support_flags`, `prebuilt.py`) and bound read-only (pasted into both
programs as `mod easylemur_seal` where it cannot be built).

Both compiles run today's rustc command (the same -C options: no optimization added, debug
assertions as they were) plus `-C prefer-dynamic`, which links the standard library as the
shared object of the same rustc build (found by an rpath to its target libdir) rather than
statically: the same code runs, and each link takes 0.1 s less, most of the second compile's
cost. Timings: BENCHMARKS.md, "MultiPL-E's seals"."""

from __future__ import annotations

import functools
import glob
import os
import re
import shutil
import subprocess
from pathlib import Path

from easylemur.eval.api import EvalDataError
from easylemur.eval.benchmarks.multipl_e.languages import Language
from easylemur.eval.benchmarks.multipl_e.seals import compiled, scan
from easylemur.eval.benchmarks.multipl_e.seals.prebuilt import BUILD_ENV, prebuilt
from easylemur.eval.sandbox import SANDBOX_PATH, Program

LAYOUT = compiled.Layout(
    # Rust's literals: "..." with escapes, raw strings r"..." / r#"..."# (and b-prefixed), and char
    # literals, told from lifetimes ('a) by their closing quote.
    syntax=scan.Syntax(quotes='"', raw=r"""b?r(#*)".*?"\1|b?'(?:\\(?:u\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|.)|[^\\'])'"""),
    comparison=re.compile(r"[ \t]*assert_eq!\([ \t]*"),  # MultiPL-E's `assert_eq!(candidate(...), ...);`
    record="easylemur_seal::record(&{call});", flush='easylemur_seal::flush("{m}");',
    done='    easylemur_seal::done("{m}");')
SUPPORT = Path(__file__).resolve().parent / "support" / "el.rs"
RLIB = "libeasylemur_seal.rlib"
SIGNATURE = re.compile(r"^\s*(?:pub\s+)?fn\s+(?P<name>[A-Za-z_]\w*)\s*(?:<[^{]*>)?\s*\(.*\)\s*(?:->\s*.+?)?\s*\{\s*$")


def program(lang: Language, prompt: str, completion: str, tests: str, where: str = "") -> Program:
    """The sealed Program that judges `completion` of a MultiPL-E Rust problem (module docstring)."""
    where = where or lang.name
    lines = [x for x in prompt.rstrip().split("\n") if x.strip()]
    if not lines or not SIGNATURE.match(lines[-1]):
        raise EvalDataError(f"{where}: the Rust prompt does not end with a function's signature (`fn <name>(...) {{`)")
    flags, folder = support_flags()
    if folder and not os.path.isdir(folder):  # removed since it was built (a /var/tmp cleaner): again
        support_flags.cache_clear()
        flags, folder = support_flags()
    # without a prebuilt crate the module itself goes along, after the tests
    tail = "" if folder else "\n#[allow(dead_code)]\nmod easylemur_seal {\n" + SUPPORT.read_text() + "}\n"
    return compiled.program(LAYOUT, lang, prompt, completion, tests, where, stub="    easylemur_seal::next()\n",
                            tail=tail, flags=flags, ro_paths=(folder,) if folder else ())


@functools.lru_cache(maxsize=None)
def support_flags() -> tuple[tuple[str, ...], str]:
    """(the options both compiles add to today's rustc command, the prebuilt folder to bind or
    ""): `--extern easylemur_seal=<rlib>` when the support crate could be built once (`prebuilt`,
    named for `rustc -vV`, the rustc binary and the source), and `-C prefer-dynamic` with an
    rpath where the rustc's target libdir holds its standard library as a shared object."""
    rustc = shutil.which("rustc", path=SANDBOX_PATH)
    if rustc is None:
        return (), ""
    source = SUPPORT.read_text()
    try:
        version = subprocess.run([rustc, "-vV"], capture_output=True, text=True, check=True, timeout=60,
                                 env=BUILD_ENV).stdout
        libdir = subprocess.run([rustc, "--print", "target-libdir"], capture_output=True, text=True, check=True,
                                timeout=60, env=BUILD_ENV).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return (), ""
    flags: tuple[str, ...] = ()
    if glob.glob(os.path.join(glob.escape(libdir), "libstd-*.so")):
        flags = ("-C", "prefer-dynamic", "-C", f"link-arg=-Wl,-rpath,{libdir}")

    def build(folder: Path) -> None:
        (folder / "easylemur_seal.rs").write_text(source)
        subprocess.run([rustc, "--crate-type=rlib", "--crate-name", "easylemur_seal", "-o", RLIB, "easylemur_seal.rs"],
                       cwd=folder, capture_output=True, check=True, timeout=600, env=BUILD_ENV)

    folder = prebuilt("rs-support", (version, os.path.realpath(rustc), source), build)
    if folder:
        flags += ("--extern", f"easylemur_seal={folder}/{RLIB}")
    return flags, folder
