"""Tiny chat models whose tokenizers carry their own chat templates, for the tests of the one
chat renderer (the server, lm-eval's --apply_chat_template, generate --chat), judged by
transformers' apply_chat_template on the same directory:

- "qwen": a Qwen2.5-style byte-level BPE (ChatML markers, no BOS) with Qwen2.5's template, which
  adds a default system prompt when the conversation has none;
- "llama3": a Llama-3-style one (header tokens, `<|eot_id|>`, BOS written by the template, not by
  the caller) with Llama-3-Instruct's template (contents trimmed).

Each directory is an HF Llama of the tokenizer's vocabulary (context 256) with EOS/BOS set to
the tokenizer's: what `easylemur.load`, AutoTokenizer and lm-eval's `hf` backend all read. Built
once per test session (tokenizer training is the slow part)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from hf_models import make_hf_model
from test_chat_template import QWEN_TEMPLATE, STRINGS
from test_tokenizer_hf import LLAMA3_SPECIAL, LLAMA3_SPLIT, QWEN_SPECIAL, QWEN_SPLIT, build_hf_dir

# Meta's Llama-3-8B-Instruct template, verbatim
LLAMA3_INSTRUCT_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
STYLES = ("qwen", "llama3")
_BUILT: dict[str, Path] = {}


def chat_model_dir(tmp_path_factory, style: str) -> Path:
    """The HF directory of `style` (see the module doc), built at the first call of the session."""
    if style in _BUILT:
        return _BUILT[style]
    d = tmp_path_factory.mktemp(f"chat_{style}")
    if style == "qwen":
        cfg = {"tokenizer_class": "Qwen2Tokenizer", "bos_token": None, "eos_token": "<|im_end|>",
               "pad_token": "<|endoftext|>", "split_special_tokens": False, "clean_up_tokenization_spaces": False,
               "chat_template": QWEN_TEMPLATE}
        build_hf_dir(d, QWEN_SPLIT, QWEN_SPECIAL, cfg, nfc=True, vocab_size=600)
    else:
        cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>",
               "eos_token": "<|eot_id|>", "clean_up_tokenization_spaces": False, "chat_template": LLAMA3_INSTRUCT_TEMPLATE}
        build_hf_dir(d, LLAMA3_SPLIT, LLAMA3_SPECIAL, cfg, bos="<|begin_of_text|>", vocab_size=600)
    vocab = json.loads((d / "tokenizer.json").read_text())
    ids = {t["content"]: t["id"] for t in vocab["added_tokens"]}
    size = max([*vocab["model"]["vocab"].values(), *ids.values()]) + 1
    eos = ids[cfg["eos_token"]]
    bos = ids.get(cfg["bos_token"]) if cfg["bos_token"] else None
    make_hf_model(seed=len(style), vocab_size=size, bos_token_id=bos, eos_token_id=eos, pad_token_id=eos,
                  num_key_value_heads=2).save_pretrained(d)
    _BUILT[style] = d
    return d


def prompts(n: int, seed: int = 0) -> list[list[dict]]:
    """Conversations that end with a user turn (what a chat request sends): with and without a
    system message, 1-3 exchanges, contents of random unicode, code, whitespace runs and
    special-token text (which both sides read as the special token)."""
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        roles = (["system"] if rnd.random() < 0.5 else []) + ["user", "assistant"] * rnd.randint(0, 2) + ["user"]
        out.append([{"role": r, "content": rnd.choice(STRINGS)} for r in roles])
    return out
