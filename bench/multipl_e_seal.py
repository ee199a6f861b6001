"""MultiPL-E sealed against single-process: the sandbox wall time per good program of each
language, the sealed Program (`languages.build_program`: the candidate's calls, then the trusted
judge) against today's one-process layout (`languages.single_process_program`), measured in the
same run, one program at a time, the two sides alternating.

    python bench/multipl_e_seal.py [--langs js,sh,pl,cpp,rs,java,go] [--repeats 10]

The programs are the good completions of tests/test_multipl_e.py's ROWS (MultiPL-E's own row
format). Per language: the median seconds per program on each side over every (problem, repeat)
and their ratio. A language whose toolchain is missing is skipped with its reason. Prints a table
and one JSON line. Not a test: timings go here, never into assertions. What a seal builds once per
machine outside the sandbox (C++'s precompiled header, Rust's support rlib, Java's support class
and javac archive, Go's prefilled build cache: seals/prebuilt.py) is
built by the first build_program, before any timing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the ROWS fixtures

LANGS = ("js", "sh", "pl", "cpp", "rs", "java", "go")  # languages with a seal this script times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--langs", default=",".join(LANGS))
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--without-prebuilt", action="store_true",
                    help="the seals without their prebuilt support (seals/prebuilt.py): C++'s header parsed as text, "
                         "the Rust module pasted in and std linked statically, Java's support class compiled in "
                         "both stages and no javac archive, Go's stages with a cold build cache; to show what the "
                         "prebuilt saves")
    args = ap.parse_args()
    if args.without_prebuilt:
        from easylemur.eval.benchmarks.multipl_e.seals import cpp, go, java, rs

        cpp.pch_dir = lambda: ""
        rs.support_flags = lambda: ((), "")
        java.support_folder = lambda: ""
        go.warm_cache = lambda: ()

    from easylemur.eval.benchmarks.multipl_e.languages import (LANGUAGES, build_program, single_process_program,
                                                              unavailable)
    from easylemur.eval.sandbox import PASSED, Sandbox
    from test_multipl_e import ROWS

    sandbox = Sandbox(timeout=60)
    sandbox.check()
    report = {}
    print(f"{'lang':6} {'sealed s':>9} {'single s':>9} {'ratio':>6}  programs")
    for name in args.langs.split(","):
        lang = LANGUAGES[name]
        why = unavailable(lang)
        if why:
            print(f"{name:6} skipped: {why}")
            continue
        sides = {"sealed": [], "single": []}
        for _ in range(args.repeats):
            for row, good, _ in ROWS[name]:
                for side, build in (("sealed", build_program), ("single", single_process_program)):
                    program = build(lang, row["prompt"], good, row["tests"], row["name"])
                    start = time.perf_counter()
                    result = sandbox.run_program(program)
                    sides[side].append(time.perf_counter() - start)
                    if result.result != PASSED:
                        raise SystemExit(f"{name} {row['name']} {side}: the good completion did not pass: {result.result}")
        sealed, single = statistics.median(sides["sealed"]), statistics.median(sides["single"])
        mean_sealed, mean_single = _trimmed_mean(sides["sealed"]), _trimmed_mean(sides["single"])
        report[name] = {"sealed_s": round(sealed, 4), "single_process_s": round(single, 4),
                        "ratio": round(sealed / single, 3), "programs": len(sides["sealed"]),
                        "sealed_mean_s": round(mean_sealed, 4), "single_process_mean_s": round(mean_single, 4),
                        "mean_ratio": round(mean_sealed / mean_single, 3)}
        print(f"{name:6} {sealed:9.3f} {single:9.3f} {sealed / single:6.2f}  {len(sides['sealed'])}"
              f"  (trimmed means {mean_sealed:.3f} {mean_single:.3f}: {mean_sealed / mean_single:.2f})")
    print(json.dumps(report))


def _trimmed_mean(times: list) -> float:
    """The mean of the middle 60% of `times`. The harness sees a sandbox end by polling with
    subprocess's wait (sleeps growing to 50 ms), so each time is the true one plus up to 50 ms:
    a median lands on that grid, a mean of many averages it out (load spikes trimmed)."""
    ordered = sorted(times)
    cut = len(ordered) // 5
    return statistics.mean(ordered[cut:len(ordered) - cut] or ordered)


if __name__ == "__main__":
    main()
