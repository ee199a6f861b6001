"""Evaluation: `tasks.py` (HumanEval, MBPP), `passk.py`, `sandbox.py` (bubblewrap and the
trusted checker), `samples.py` (prompts -> completions), `harness.py` (lm-evaluation-harness's
`--model easylemur`), `cli.py` (`python -m easylemur.eval`). Only `samples.py`, `harness.py`
and `cli.py` import the model side."""
