"""`python -m easylemur.convert {from-hf,to-hf} ...`: see easylemur.convert.cli."""

import sys

from easylemur.convert.cli import main

sys.exit(main())
