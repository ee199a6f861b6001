"""Hugging Face format both ways: `hf.py` (names, layouts, config mapping, reading an HF dir), `families.py`
(llama, qwen2, mistral: what each adds or refuses),
`safetensors_io.py` (tensor files one tensor at a time), `source.py` (init.from resolved: the source and the
run's tokenizer), `cli.py` (`python -m
easylemur.convert from-hf / to-hf`, streaming). Imports the model and checkpoints, never the run."""
