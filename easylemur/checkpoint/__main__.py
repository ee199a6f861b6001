"""`python -m easylemur.checkpoint verify PATH [--step N]`: reads every array of every step
back from disk and checks it against the checksums recorded at save time."""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from easylemur.checkpoint.paths import as_path
from easylemur.checkpoint.store import CheckpointError, is_complete, verify_step
from easylemur.errors import add_debug_flag, run_cli


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m easylemur.checkpoint",
                                 description="Checks the checkpoints of an easylemur workdir.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("verify", help="read every array of every step and check it against its recorded checksum")
    v.add_argument("path", help="an easylemur workdir, its checkpoints/ directory, or one step directory")
    v.add_argument("--step", type=int, default=None, help="only this step")
    add_debug_flag(v)
    args = ap.parse_args(argv)
    path = as_path(args.path)
    named = path.name.isdigit() and (path / "meta").exists()  # one step directory
    if named:
        directory, steps = path.parent, [int(path.name)]
    else:
        directory = path / "checkpoints" if (path / "checkpoints").is_dir() else path
        if not directory.is_dir():
            raise CheckpointError(f"{path}: not an easylemur workdir or checkpoints directory")
        steps = sorted((int(p.name) for p in directory.iterdir() if p.name.isdigit()), reverse=True)
        if args.step is not None:
            steps = [s for s in steps if s == args.step]
        if not steps:
            raise CheckpointError(f"{directory}: no checkpoint steps" + (f" (step {args.step})" if args.step is not None else ""))
    # on a bucket, a save that was cut off leaves a step folder under its final name (on a local
    # disk, under orbax's temporary name, which is not listed here): not a checkpoint, and not
    # damage either, since resume and init.from skip it; a step asked for by name is verified
    incomplete = set() if named or args.step is not None else {s for s in steps if not is_complete(directory / str(s))}
    bad = 0
    for step in steps:
        if step in incomplete:
            print(f"step {step}: incomplete (its save did not finish: no commit_success.txt); not a checkpoint, "
                  "resume and init.from skip it", flush=True)
            continue
        try:
            print(f"step {step}: {verify_step(directory, step)}", flush=True)
        except CheckpointError as e:
            bad += 1
            print(f"step {step}: DAMAGED: {e}", flush=True)
    if bad:
        print(f"error: {bad} of {len(steps) - len(incomplete)} steps in {directory} are damaged", file=sys.stderr)
        return 1
    if len(incomplete) == len(steps):
        print(f"error: {directory}: no complete checkpoint step", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
