"""Hugging Face format both ways: `hf.py` (names, layouts, config mapping, reading an HF dir), `families.py`
(llama, qwen2, mistral: what each adds or refuses),
`safetensors_io.py` (tensor files one tensor at a time), `source.py` (init.from resolved: the source and the
run's tokenizer), `weights.py` (the one weights loader), `from_hf.py` (HF dir -> checkpoint, saved by
`streaming_save.py`, the streaming orbax writer), `to_hf.py` (checkpoint -> HF dir: tensors, stop ids, chat
template, fast tokenizer), `out_dir.py` (outputs that never destroy: staging, then a rename into place),
`dtypes.py` (`ConvertError`, stored dtypes, casts), `cli.py` (`python -m easylemur.convert from-hf / to-hf`).
Imports the model and checkpoints, never the run."""
