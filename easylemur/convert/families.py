"""The HF model families easylemur reads and writes, as data: per `model_type`, the
architecture class, what the family adds to Llama's math, the config.json fields it must hold
at a fixed value, the fields it may carry that change nothing, and what an export writes.

`hf.config_from_hf` reads the fields common to all families and asks this table the rest;
every other field of a config.json is refused by name (docs/design.md, "HF layout"): a field
easylemur does not implement may change the math, and a silently different model is worse
than an error.

The family names are owned by `easylemur.model.config.FAMILIES` (what `LlamaConfig.family`
accepts); this table has exactly those keys, checked when it is imported (`_check_names`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from easylemur.model.config import FAMILIES as MODEL_FAMILIES
from easylemur.model.config import LlamaConfig


@dataclasses.dataclass(frozen=True)
class Family:
    model_type: str
    architecture: str  # the transformers class an export names
    qkv_bias: bool  # biases on q/k/v_proj (LlamaConfig.qkv_bias)
    # config.json fields that must be absent, null or this value (anything else changes the math)
    fixed: dict[str, Any]
    # fields this family may carry that change nothing easylemur computes
    ignored: tuple[str, ...] = ()
    # sliding_window is read into LlamaConfig.sliding_window (checked against every row's length)
    reads_sliding_window: bool = False
    # the family's own fields of an exported config.json
    export: Callable[[LlamaConfig], dict] = lambda cfg: {}


FAMILIES: dict[str, Family] = {
    f.model_type: f for f in (
        Family("llama", "LlamaForCausalLM", qkv_bias=False,
               fixed={"attention_bias": False, "mlp_bias": False},
               ignored=("pretraining_tp",),  # a tensor-parallel split of the same matmuls
               export=lambda cfg: {"attention_bias": False, "mlp_bias": False, "pretraining_tp": 1}),
        # Qwen2 / Qwen2.5 (Coder): q/k/v biases; released models ship use_sliding_window false,
        # and then sliding_window and max_window_layers are not read by transformers either
        Family("qwen2", "Qwen2ForCausalLM", qkv_bias=True,
               fixed={"use_sliding_window": False},
               ignored=("sliding_window", "max_window_layers"),
               export=lambda cfg: {"use_sliding_window": False, "sliding_window": None,
                                   "max_window_layers": cfg.num_layers,
                                   "layer_types": ["full_attention"] * cfg.num_layers}),
        # Mistral: Llama's layout; a sliding_window no row reaches changes nothing
        Family("mistral", "MistralForCausalLM", qkv_bias=False, fixed={},
               reads_sliding_window=True,
               export=lambda cfg: {"sliding_window": cfg.sliding_window}),
    )
}


def _check_names(table: dict[str, Family], names: tuple[str, ...]) -> None:
    """The table's keys are the model's family names, no more and no fewer: a family added in
    one place and not the other would load weights the model cannot build, or refuse a family
    the model accepts."""
    missing, extra = sorted(set(names) - set(table)), sorted(set(table) - set(names))
    if missing or extra:
        raise ImportError(f"convert/families.py's FAMILIES and easylemur.model.config.FAMILIES differ: "
                          f"no entry here for {missing}; not in model/config.py: {extra}")


_check_names(FAMILIES, MODEL_FAMILIES)


# Fields of any family's config.json that change nothing easylemur computes: bookkeeping,
# loader options and the generation settings older configs carried.
BENIGN = frozenset((
    "architectures", "transformers_version", "_name_or_path", "torch_dtype", "dtype", "use_cache",
    "initializer_range", "pad_token_id", "sep_token_id", "decoder_start_token_id", "tokenizer_class",
    "output_attentions", "output_hidden_states", "return_dict", "torchscript", "use_bfloat16",
    "id2label", "label2id", "problem_type", "finetuning_task", "prefix", "task_specific_params",
    "is_decoder", "is_encoder_decoder", "add_cross_attention", "tie_encoder_decoder", "chunk_size_feed_forward",
    "tf_legacy_loss", "pruned_heads", "cross_attention_hidden_size",
    "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty",
    "temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences", "output_scores",
    "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values",
    "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens",
    "max_sequence_length",  # LLaMA-1 conversions: not read by transformers
))

# Fields `hf.config_from_hf` reads for every family.
COMMON = frozenset((
    "model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "hidden_act", "rms_norm_eps", "rope_theta", "rope_scaling",
    "rope_parameters", "partial_rotary_factor", "max_position_embeddings", "tie_word_embeddings",
    "bos_token_id", "eos_token_id", "attention_dropout", "layer_types",
))


def family_of(model_type: str) -> Family | None:
    return FAMILIES.get(model_type)


def known_fields(family: Family) -> frozenset:
    """Every config.json field `family` may hold; any other is refused by name."""
    extra = set(family.fixed) | set(family.ignored) | ({"sliding_window"} if family.reads_sliding_window else set())
    return BENIGN | COMMON | frozenset(extra)
