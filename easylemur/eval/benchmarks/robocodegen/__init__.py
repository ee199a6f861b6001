"""RoboCodeGen (Code as Policies, Liang et al. 2023): its published notebook's prompts, problems
and tests (`files.py`, `notebook.py`), the single-turn task and the agent with execution
feedback (`task.py`), and the sealed sandbox program that judges a completion (`seal/`)."""
