"""Using a trained model: `api.py` (`easylemur.load` -> LoadedModel), `engine.py` (the compiled
batched decoder and `python -m easylemur.generate`). Imports the model, checkpoints, convert
(HF dirs) and the tokenizer; never the train loop."""
