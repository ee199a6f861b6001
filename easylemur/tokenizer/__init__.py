"""Tokenizers: `spm.py` (sentencepiece, as Llama-2 ships it; ChatML pieces; HF tokenizer files;
the CLI). Imports only `errors` and the ChatML renderer (`data.chat`)."""
