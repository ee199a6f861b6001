"""Serving a model over HTTP: `server.py` (an OpenAI-compatible endpoint with a
continuous-batching scheduler over `easylemur.generate.slots`), `cli.py` (`python -m
easylemur.serve`). Imports generate (the model loader, its chat renderer and the slot engine);
nothing imports it."""

# max_tokens of a request that sets none, at most the context left after its prompt (here, not
# in server.py, so that `--help` states them without importing JAX): /v1/completions as
# OpenAI's legacy API and vLLM (16); chat replies capped, where vLLM leaves them the whole
# context (one reply could hold a slot for a whole cache row)
COMPLETION_MAX_TOKENS = 16
CHAT_MAX_TOKENS = 1024
