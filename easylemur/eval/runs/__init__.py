"""The runs of evaluations: the one scoring loop (`scoring.py`), suites and their tables
(`suite.py`, `table.py`, `suites/*.json`), training's evals (`training.py`) and `watch.py`.
Training imports this floor only."""
