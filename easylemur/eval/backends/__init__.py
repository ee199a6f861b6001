"""How the evaluation reaches a model: any OpenAI-compatible endpoint (`client.py`), a checkpoint
behind easylemur's own server (`access.py`), a model in this process (`samples.py` for
completions, `local_chat.py` for agent turns), and lm-evaluation-harness (`harness.py`, its
`--model easylemur`; `lm_eval_tasks.py`, its task index and scores)."""
