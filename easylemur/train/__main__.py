"""`python -m easylemur.train --config configs/X.py [--config.KEY=VALUE ...]`.

A CPU run first restarts itself once with glibc's huge-page malloc tunable (a CPU speed
setting of this command, not of the library: docs/design.md, "Performance";
`EASYLEMUR_MALLOC=default` turns it off), before any heavy import or thread."""

from easylemur.host import restart_with_cpu_malloc

restart_with_cpu_malloc()

import sys  # noqa: E402

from easylemur.errors import run_cli  # noqa: E402
from easylemur.train.loop import main  # noqa: E402

sys.exit(run_cli(main))
