"""The miniature of InterCode's repository in tests/intercode_fixture/ (its README says what it
holds), written out as a copy of the repository for tests/test_intercode_bash.py and
tests/test_intercode_ctf.py."""

from __future__ import annotations

import shutil
from pathlib import Path

FIXTURE = Path(__file__).parent / "intercode_fixture"


def write_copy(dest: Path) -> Path:
    """The miniature at `dest`: NAME.py.txt back to NAME.py, README.md left out, and data/sql/."""
    shutil.copytree(FIXTURE, dest, ignore=lambda d, names: ["README.md"] if Path(d) == FIXTURE else [])
    for p in list(dest.rglob("*.py.txt")):
        p.rename(p.with_suffix(""))
    (dest / "data" / "sql").mkdir(parents=True)
    return dest
