"""Numerical building blocks shared by the model and the train step: the one loss
(`loss.py`). Imports only `sharding` and `errors`: never the model, data, checkpoints or the run."""
