"""`python -m easylemur.eval`: one benchmark's pass@k (`benchmark.py`), Lemur's table (`suite`:
`suite.py`), a suite's data fetched ahead (`fetch`: `fetch.py`), the task evals on each new
checkpoint of a run (`watch`: `watch.py`), and lm-evaluation-harness on the JAX model (`lm-eval`, below).

    python -m easylemur.eval humaneval --checkpoint runs/tiny_chat --prompt-format chatml --out eval/he
    python -m easylemur.eval suite --endpoint URL --suite lemur --limit 20 --out DIR
    python -m easylemur.eval fetch --suite lemur
    python -m easylemur.eval watch --config CFG --config.eval.tasks=humaneval
    python -m easylemur.eval lm-eval --model easylemur --model_args path=CKPT --tasks hellaswag
"""

from __future__ import annotations

import sys
from typing import Optional, Sequence

from easylemur.errors import InputError


def lm_eval_main(args: Sequence[str]) -> int:
    """`python -m easylemur.eval lm-eval ARGS...`: lm-evaluation-harness's own CLI with
    `--model easylemur` registered. lm-eval 0.4.x finds models only in its own table or by an
    import that runs `@register_model` (no entry-point group), so this imports
    easylemur.eval.backends.harness first and then hands every argument to lm-eval's `cli_evaluate`."""
    try:
        import lm_eval  # noqa: F401
    except ImportError:
        raise InputError("lm-eval: lm-evaluation-harness is not installed; pip install -e '.[harness]'") from None
    import easylemur.eval.backends.harness  # noqa: F401 (registers --model easylemur)
    from lm_eval.__main__ import cli_evaluate

    if list(args) in (["--help"], ["-h"]):
        # the flags of an evaluation (lm-eval's own top-level help lists only its subcommands:
        # run, ls, validate, which `lm-eval ls tasks` etc. still reach)
        args = ["run", "--help"]
    saved = sys.argv
    sys.argv = ["lm-eval", *args]  # lm-eval's parser reads sys.argv itself
    try:
        cli_evaluate()
    finally:
        sys.argv = saved
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["lm-eval"]:
        return lm_eval_main(argv[1:])
    if argv[:1] == ["suite"]:
        from easylemur.eval.cli.suite import main as suite_main

        return suite_main(argv[1:])
    if argv[:1] == ["watch"]:
        from easylemur.eval.cli.watch import main as watch_main

        return watch_main(argv[1:])
    if argv[:1] == ["fetch"]:
        from easylemur.eval.cli.fetch import main as fetch_main

        return fetch_main(argv[1:])
    from easylemur.eval.cli.benchmark import main as benchmark_main

    return benchmark_main(argv)
