"""`python -m easylemur.generate --checkpoint PATH (--prompt TEXT | --chat) ...`: see
easylemur.generate.cli."""

import sys

from easylemur.errors import run_cli
from easylemur.generate.cli import main

sys.exit(run_cli(main))
