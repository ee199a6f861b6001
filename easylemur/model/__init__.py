"""The Llama family in Flax: `llama.py` (config, presets, modules, parameter specs and
shardings, init, KV cache), `attention.py`, `stacking.py` (scan/unscan), `vocab.py` (growing
the vocabulary). Imports only `sharding`, `errors` and `ops`: no data, checkpoint or run."""

from easylemur.model.llama import PRESETS, Llama, LlamaConfig

__all__ = ["PRESETS", "Llama", "LlamaConfig"]
