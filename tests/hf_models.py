"""Random tiny transformers Llama models, the judges of easylemur's numerics."""

from __future__ import annotations

import torch
from transformers import LlamaConfig as HFLlamaConfig
from transformers import LlamaForCausalLM


def make_hf_model(seed: int = 0, **overrides) -> LlamaForCausalLM:
    """A randomly initialised LlamaForCausalLM whose weights are large enough that a wrong
    convention changes the logits visibly (HF's 0.02 init would hide it)."""
    kw = dict(
        vocab_size=1013,  # odd on purpose
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
    )
    kw.update(overrides)
    config = HFLlamaConfig(**kw)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.5 * torch.randn_like(p))
            elif p.ndim == 2:
                p.copy_(torch.randn_like(p) * (1.0 / p.shape[1] ** 0.5))
    return model


def hf_logits(model: LlamaForCausalLM, ids) -> "torch.Tensor":
    with torch.no_grad():
        return model(torch.as_tensor(ids, dtype=torch.long)).logits.float().numpy()
