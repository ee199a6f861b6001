"""The model's configuration as plain data: `LlamaConfig` (every field of the architecture, its
compute and its storage, checked when built), the named shapes (`PRESETS`), and the names a
field may take (`FAMILIES`, `SUPPORTED_ROPE_TYPES`, `REMAT_POLICIES`, `ATTENTION_IMPLS`).

Imports nothing but the standard library, so a run config is resolved (`easylemur.config`'s
`model_config`) without loading JAX or Flax; the modules that compute (llama.py, attention.py)
import their names from here. `FAMILIES` is the one list of HF model families: the converters'
table (convert/families.py) must have exactly these keys, checked when it is imported.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

SUPPORTED_ROPE_TYPES = ("default", "linear", "dynamic", "llama3")
# the HF families (model_type) the weights come from and go back to; convert/families.py has
# one entry for each, and only these (checked when it is imported)
FAMILIES = ("llama", "qwen2", "mistral")
REMAT_POLICIES = ("none", "full", "full_offload", "dots", "dots_no_batch", "save_attn_out")
# model.attention's values (attention.py implements each; docs/design.md, "Attention")
ATTENTION_IMPLS = ("auto", "dense", "blockwise", "splash", "flash", "cudnn")


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int = 32000  # embedding rows (the tokenizer's pieces, grown for ChatML tokens when added)
    hidden_size: int = 4096  # the residual stream's width (d_model)
    intermediate_size: int = 11008  # the SwiGLU MLP's inner width (gate/up_proj out, down_proj in)
    num_layers: int = 32  # decoder blocks (HF num_hidden_layers)
    num_heads: int = 32  # query heads (HF num_attention_heads)
    num_kv_heads: int = 32  # key/value heads: fewer than num_heads is grouped-query attention (HF num_key_value_heads)
    head_dim: Optional[int] = None  # None: hidden_size // num_heads
    rms_norm_eps: float = 1e-5  # RMSNorm's epsilon, added to the mean square before the root
    rope_theta: float = 10000.0  # RoPE's base: each pair of dimensions turns at theta^(-2i/head_dim) per position
    # HF rope_scaling as a tuple of (key, value) pairs (hashable), e.g.
    # (("rope_type", "llama3"), ("factor", 8.0), ...); None for plain RoPE.
    rope_scaling: Optional[tuple] = None
    max_position_embeddings: int = 4096  # the context: data.seq_len and prompt + generation must fit in it
    tie_word_embeddings: bool = False  # True: the logits use the embedding transposed (no lm_head)
    # the HF family the weights came from and go back to (convert/families.py): "llama",
    # "qwen2" or "mistral"; the model reads only what it changes, the two fields below
    family: str = "llama"
    qkv_bias: bool = False  # biases on q/k/v_proj (Qwen2); o_proj and the MLP never have one
    # HF's sliding_window (Mistral): None, or a window no row may exceed, so that it changes
    # nothing; easylemur does not implement windowed attention (Llama refuses longer rows)
    sliding_window: Optional[int] = None
    bos_token_id: Optional[int] = 1  # None: the source declares none (a BOS-less tokenizer)
    eos_token_id: int = 2  # the end-of-sequence id documents end with and generation stops at
    # compute / storage
    dtype: str = "float32"  # activations and matmul inputs; matmuls accumulate in float32
    param_dtype: str = "float32"  # how parameters and optimizer state are stored (float32 | bfloat16)
    scan_layers: bool = False  # True: the blocks as one jax.lax.scan (one compiled block; faster compiles of deep models)
    remat: str = "none"  # one of REMAT_POLICIES
    # one of ATTENTION_IMPLS (docs/design.md, "Attention"): "dense" (one [T, T] score matrix
    # per head), "blockwise" (query blocks of attn_block_size under remat), "splash" (the Pallas
    # TPU kernel, tiles of attn_block_size, rows a multiple of 128), "flash" (pure JAX, causal
    # tile skipping, tiles of at most 128), "cudnn" (cuDNN's flash attention, NVIDIA GPUs,
    # bf16/fp16), "auto" (splash on TPU, cudnn on GPU where it applies, flash on CPU, else
    # blockwise when attn_block_size splits the row, dense for a row of one block)
    attention: str = "auto"
    attn_block_size: int = 512  # blockwise / splash attention's tile of queries and keys

    def __post_init__(self):
        if isinstance(self.rope_scaling, dict):
            object.__setattr__(self, "rope_scaling", tuple(sorted(self.rope_scaling.items())))
        self.validate()

    @property
    def hd(self) -> int:
        return self.head_dim or self.hidden_size // self.num_heads

    @property
    def rope_scaling_dict(self) -> dict:
        return dict(self.rope_scaling or ())

    @property
    def rope_type(self) -> str:
        d = self.rope_scaling_dict
        return d.get("rope_type", d.get("type", "default"))

    def validate(self) -> None:
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads={self.num_heads} must be a multiple of num_kv_heads={self.num_kv_heads}"
            )
        if self.rope_type not in SUPPORTED_ROPE_TYPES:
            raise ValueError(
                f"rope_scaling.rope_type={self.rope_type!r} is not supported; supported: {SUPPORTED_ROPE_TYPES}"
            )
        if self.family not in FAMILIES:
            raise ValueError(f"family={self.family!r} must be one of {', '.join(FAMILIES)}")
        if self.sliding_window is not None and (isinstance(self.sliding_window, bool) or not isinstance(
                self.sliding_window, int) or self.sliding_window < 1):
            raise ValueError(f"sliding_window={self.sliding_window!r} must be a positive integer or None")
        if self.hd % 2:
            raise ValueError(f"head_dim={self.hd} must be even for RoPE")
        if self.remat not in REMAT_POLICIES:
            raise ValueError(f"remat={self.remat!r} is not one of {REMAT_POLICIES}")
        if self.attention not in ATTENTION_IMPLS:
            raise ValueError(f"attention={self.attention!r} must be one of {', '.join(ATTENTION_IMPLS)}")
        if self.attn_block_size < 1:
            raise ValueError(f"attn_block_size={self.attn_block_size} must be at least 1")
        if self.attention == "splash" and self.attn_block_size % 128:
            raise ValueError(f"attn_block_size={self.attn_block_size} must be a multiple of 128 with attention='splash'")
        for name in ("dtype", "param_dtype"):
            if getattr(self, name) not in ("float32", "bfloat16", "float16"):
                raise ValueError(f"{name}={getattr(self, name)!r} must be float32, bfloat16 or float16")

    def num_params(self, include_embedding: bool = True) -> int:
        d, f, hd = self.hidden_size, self.intermediate_size, self.hd
        attn = d * hd * (2 * self.num_heads + 2 * self.num_kv_heads)
        per_layer = attn + 3 * d * f + 2 * d + (hd * (self.num_heads + 2 * self.num_kv_heads) if self.qkv_bias else 0)
        total = self.num_layers * per_layer + d
        if include_embedding:
            total += self.vocab_size * d * (1 if self.tie_word_embeddings else 2)
        return total


_LLAMA32_ROPE = (("factor", 32.0), ("high_freq_factor", 4.0), ("low_freq_factor", 1.0),
                 ("original_max_position_embeddings", 8192), ("rope_type", "llama3"))

_LLAMA31_ROPE = (("factor", 8.0), ("high_freq_factor", 4.0), ("low_freq_factor", 1.0),
                 ("original_max_position_embeddings", 8192), ("rope_type", "llama3"))

PRESETS: dict[str, LlamaConfig] = {
    # vocab 4096 is the shipped tokenizer's size; models built on other tokenizers override it.
    "tiny": LlamaConfig(vocab_size=4096, hidden_size=128, intermediate_size=352, num_layers=4,
                    num_heads=4, num_kv_heads=2, max_position_embeddings=1024),
    "llama2_7b": LlamaConfig(),
    "llama2_13b": LlamaConfig(hidden_size=5120, intermediate_size=13824, num_layers=40, num_heads=40, num_kv_heads=40),
    "llama2_70b": LlamaConfig(hidden_size=8192, intermediate_size=28672, num_layers=80, num_heads=64, num_kv_heads=8),
    "codellama_34b": LlamaConfig(vocab_size=32000, hidden_size=8192, intermediate_size=22016, num_layers=48,
                             num_heads=64, num_kv_heads=8, rope_theta=1e6, max_position_embeddings=16384),
    "llama3_8b": LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_layers=32,
                         num_heads=32, num_kv_heads=8, rope_theta=5e5, max_position_embeddings=8192,
                         rms_norm_eps=1e-5, bos_token_id=128000, eos_token_id=128001),
    "llama3_70b": LlamaConfig(vocab_size=128256, hidden_size=8192, intermediate_size=28672, num_layers=80,
                          num_heads=64, num_kv_heads=8, rope_theta=5e5, max_position_embeddings=8192,
                          rms_norm_eps=1e-5, bos_token_id=128000, eos_token_id=128001),
    # Llama-3.1/3.3: Llama-3's shapes with llama3 RoPE scaling (factor 8) to a 128K context
    **{f"llama3.1_{name}": LlamaConfig(vocab_size=128256, hidden_size=d, intermediate_size=f, num_layers=n,
                                       num_heads=h, num_kv_heads=8, rope_theta=5e5, max_position_embeddings=131072,
                                       rope_scaling=_LLAMA31_ROPE, rms_norm_eps=1e-5, bos_token_id=128000,
                                       eos_token_id=128001)
       for name, d, f, n, h in (("8b", 4096, 14336, 32, 32), ("70b", 8192, 28672, 80, 64))},
    # Llama-3.2: llama3 RoPE scaling (factor 32) and the head tied to the embedding
    **{name: LlamaConfig(vocab_size=128256, hidden_size=d, intermediate_size=8192, num_layers=n, num_heads=h,
                         num_kv_heads=8, rope_theta=5e5, max_position_embeddings=131072,
                         rope_scaling=_LLAMA32_ROPE, tie_word_embeddings=True, rms_norm_eps=1e-5,
                         bos_token_id=128000, eos_token_id=128001)
       for name, d, n, h in (("llama3.2_1b", 2048, 16, 32), ("llama3.2_3b", 3072, 28, 24))},
    # Qwen2.5-Coder: q/k/v biases, theta 1e6; the three small ones tie the head
    **{f"qwen2.5_coder_{name}": LlamaConfig(
        vocab_size=151936 if tied else 152064, hidden_size=d, intermediate_size=f, num_layers=n, num_heads=h,
        num_kv_heads=kv, rope_theta=1e6, max_position_embeddings=32768, rms_norm_eps=1e-6, tie_word_embeddings=tied,
        family="qwen2", qkv_bias=True, bos_token_id=151643, eos_token_id=151643)
       for name, d, f, n, h, kv, tied in (
           ("0.5b", 896, 4864, 24, 14, 2, True), ("1.5b", 1536, 8960, 28, 12, 2, True),
           ("3b", 2048, 11008, 36, 16, 2, True), ("7b", 3584, 18944, 28, 28, 4, False),
           ("14b", 5120, 13824, 48, 40, 8, False), ("32b", 5120, 27648, 64, 40, 8, False))},
}
