"""ruff with the project's config (ruff.toml: pyflakes, syntax, line length) is clean."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_is_clean():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff, "ruff is not installed (it is in the test extras: pip install -e '.[test]')"
    p = subprocess.run([ruff, "check", "easylemur", "tests", "bench", "docs"], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
