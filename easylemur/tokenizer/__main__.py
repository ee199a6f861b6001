"""`python -m easylemur.tokenizer ...`: see easylemur.tokenizer.cli."""

import sys

from easylemur.tokenizer.cli import main

sys.exit(main())
