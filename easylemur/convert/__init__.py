"""Hugging Face format both ways: `hf.py` (names, layouts, config mapping, reading an HF dir),
`safetensors_io.py` (tensor files one tensor at a time), `cli.py` (`python -m
easylemur.convert from-hf / to-hf`, streaming). Imports the model and checkpoints, never the run."""
