"""Serving a model over HTTP: `server.py` (an OpenAI-compatible endpoint with a
continuous-batching scheduler over `easylemur.generate.slots`), `cli.py` (`python -m
easylemur.serve`). Imports generate (the model loader and the slot engine) and data (the ChatML
renderer); nothing imports it."""
