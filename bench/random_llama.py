"""The random Llama both decode benches run: one transformers `LlamaForCausalLM` and the same
weights loaded by easylemur (float32 compute, like the torch model)."""

from __future__ import annotations

import argparse
import tempfile
from typing import Any


def add_model_args(ap: argparse.ArgumentParser, hidden: int, layers: int, heads: int, ff: int, vocab: int) -> None:
    """--hidden/--layers/--heads/--ff/--vocab with these defaults."""
    ap.add_argument("--hidden", type=int, default=hidden)
    ap.add_argument("--layers", type=int, default=layers)
    ap.add_argument("--heads", type=int, default=heads)
    ap.add_argument("--ff", type=int, default=ff)
    ap.add_argument("--vocab", type=int, default=vocab)


def random_llama(args: argparse.Namespace) -> tuple[Any, Any, int]:
    """(transformers model in eval mode, easylemur's LoadedModel of the same weights, parameter count)."""
    import torch
    from transformers import LlamaConfig as HFConfig
    from transformers import LlamaForCausalLM

    import easylemur

    torch.manual_seed(0)
    hf = LlamaForCausalLM(HFConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.ff, num_hidden_layers=args.layers,
        num_attention_heads=args.heads, num_key_value_heads=args.heads, max_position_embeddings=4096,
        tie_word_embeddings=False)).eval()
    params = sum(p.numel() for p in hf.parameters())
    with tempfile.TemporaryDirectory() as d:
        hf.save_pretrained(d)
        ours = easylemur.load(d)
    return hf, ours, params
