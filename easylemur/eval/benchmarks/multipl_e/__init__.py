"""MultiPL-E: `task.py` (the benchmark), `languages.py` (how each language runs in the sandbox)."""
