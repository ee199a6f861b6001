"""The agent engine: episodes of turns with environment feedback (`episode.py`), a reply read as
an action (`actions.py`), the contract a multi-turn benchmark implements (`task.py`), and the
tools an action runs (`tools.py`). It judges proposals through the benchmark's own checker and
never imports a benchmark, a model or JAX."""
