"""`python -m easylemur.serve --checkpoint PATH [--host 127.0.0.1] [--port 8000] ...`: see
easylemur.serve.cli."""

import sys

from easylemur.errors import run_cli
from easylemur.serve.cli import main

sys.exit(run_cli(main))
