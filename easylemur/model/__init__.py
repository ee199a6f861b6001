"""The Llama family: `config.py` (`LlamaConfig`, the presets, the model family names: plain
data, no JAX), and in Flax `llama.py` (modules, parameter specs and shardings, init, KV cache),
`attention.py`, `stacking.py` (scan/unscan), `vocab.py` (growing the vocabulary). Imports only
`sharding`, `errors` and `ops`: no data, checkpoint or run.

This file imports nothing, so that `easylemur.model.config` loads without JAX or Flax: import
the names from their modules (`easylemur.model.config.LlamaConfig`, `easylemur.model.llama.Llama`)."""
