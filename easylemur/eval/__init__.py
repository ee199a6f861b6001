"""Evaluation: `tasks.py` (HumanEval, MBPP), `passk.py`, `sandbox.py` (bubblewrap and the
trusted checker), `cli.py` (`python -m easylemur.eval`). Only `cli.py` imports the model side."""
