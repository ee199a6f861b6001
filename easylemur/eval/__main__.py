"""`python -m easylemur.eval {humaneval,mbpp} ...`: see easylemur.eval.cli."""

import sys

from easylemur.errors import run_cli
from easylemur.eval.cli import main

sys.exit(run_cli(main))
