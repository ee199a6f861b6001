"""Evaluation: `tasks.py` (HumanEval, MBPP), `multipl_e.py` + `languages.py`, `ds1000.py`,
`sql.py` (Spider), `agent.py` + `sql_agent.py` (multi-turn with environment feedback), the
one table of their names (`benchmarks.py`), `passk.py`, `sandbox.py` (bubblewrap, the trusted
checker and runner), `samples.py` (prompts -> completions), `client.py` (any OpenAI-compatible
endpoint), `suite.py` (Lemur's table), `harness.py` (lm-evaluation-harness's `--model
easylemur`), `cli.py` (`python -m easylemur.eval`). Only `samples.py`, `local_chat.py`,
`harness.py`, `suite.py` and `cli.py` import the model side."""
