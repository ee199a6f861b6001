"""Tiny HF chat-model directories in the layouts the Hub's chat models ship, for the tests of
chat rendering on every path (tests/test_chat_layouts.py), judged by transformers'
`AutoTokenizer.from_pretrained(dir).apply_chat_template`:

- "llama2_chat": tokenizer.model + the tokenizer.json transformers converts it to with
  `legacy: true` (a "▁" after every special token, as Llama-2-chat-hf's) + Llama-2-chat's
  template (BOS per turn, `raise_exception` on the role order);
- "mistral": tokenizer.model + a `legacy: false` tokenizer.json, Mistral-Instruct-v0.1's template
  (no system role);
- "spm_only": tokenizer.model alone with Gemma's turn template in tokenizer_config.json (Gemma's
  turns on a Llama architecture; transformers converts the model when it loads it);
- "spm_only_legacy": the same with `legacy: true` and Llama-2-chat's template;
- "two_templates": a byte-level tokenizer.json with one template in tokenizer_config.json and
  another in chat_template.jinja (transformers 5 uses the file);
- "named": the same tokenizer with named templates in additional_chat_templates/ (default.jinja
  and tool_use.jinja; the config's template loses to them);
- "specials_map": a byte-level tokenizer.json whose BOS/EOS are declared only in
  special_tokens_map.json, with a template that writes both.

Each directory holds a random HF Llama of its vocabulary (context 256). The sentencepiece model
is conftest's `llama2_like_spm` (Llama-2's settings: dummy prefix, byte fallback)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from hf_models import make_hf_model
from test_tokenizer_hf import LLAMA3_SPLIT, build_hf_dir

# Meta's Llama-2-chat template, verbatim from the Llama-2-7b-chat-hf repository
LLAMA2_CHAT_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
    "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
    "{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"
)
# Mistral-7B-Instruct-v0.1's
MISTRAL_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token + ' ' }}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"
)
# Gemma-7b-it's
GEMMA_TEMPLATE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
    "{% endif %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}"
)
# a ChatML-like template that writes BOS and EOS by name (the "specials_map" layout's)
TURNS_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{{ '### ' + m['role'] + ':\\n' + m['content'] }}"
    "{% if m['role'] == 'assistant' %}{{ eos_token }}{% endif %}{{ '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '### assistant:\\n' }}{% endif %}"
)
# the config's template in "two_templates" and "named": transformers ignores it there
LOSING_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
TOOL_TEMPLATE = "{% for m in messages %}{{ 'TOOL ' + m['content'] }}{% endfor %}"

LAYOUTS = ("llama2_chat", "mistral", "spm_only", "spm_only_legacy", "two_templates", "named", "specials_map")
HF_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|pad|>"]


def _spm_config(legacy: bool, template: str | None) -> dict:
    cfg = {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
           "legacy": legacy, "add_bos_token": True, "add_eos_token": False, "clean_up_tokenization_spaces": False}
    return {**cfg, "chat_template": template} if template else cfg


def _spm_dir(d: Path, spm: Path, legacy: bool, template: str, twin: bool) -> None:
    """tokenizer.model with its configuration, and the tokenizer.json transformers converts it to."""
    from transformers import AutoTokenizer

    shutil.copyfile(spm, d / "tokenizer.model")
    (d / "tokenizer_config.json").write_text(json.dumps(_spm_config(legacy, template), indent=2))
    if twin:
        converted = d.parent / f"{d.name}-converted"
        AutoTokenizer.from_pretrained(str(d)).save_pretrained(str(converted))
        shutil.copyfile(converted / "tokenizer.json", d / "tokenizer.json")
        shutil.rmtree(converted)


def build_layout(d: Path, layout: str, spm: Path) -> Path:
    """The directory of `layout` (module doc) in `d`, with a random model of its vocabulary."""
    d.mkdir(parents=True, exist_ok=True)
    if layout == "llama2_chat":
        _spm_dir(d, spm, True, LLAMA2_CHAT_TEMPLATE, twin=True)
    elif layout == "mistral":
        _spm_dir(d, spm, False, MISTRAL_TEMPLATE, twin=True)
    elif layout == "spm_only":
        _spm_dir(d, spm, False, GEMMA_TEMPLATE, twin=False)
    elif layout == "spm_only_legacy":
        _spm_dir(d, spm, True, LLAMA2_CHAT_TEMPLATE, twin=False)
    else:
        cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False}
        if layout != "specials_map":
            cfg.update(bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>", chat_template=LOSING_TEMPLATE)
        build_hf_dir(d, LLAMA3_SPLIT, HF_SPECIAL, cfg, bos="<|begin_of_text|>", vocab_size=400)
        if layout == "two_templates":
            (d / "chat_template.jinja").write_text(TURNS_TEMPLATE)
        elif layout == "named":
            (d / "additional_chat_templates").mkdir()
            (d / "additional_chat_templates" / "default.jinja").write_text(TURNS_TEMPLATE)
            (d / "additional_chat_templates" / "tool_use.jinja").write_text(TOOL_TEMPLATE)
        else:  # specials_map: BOS/EOS only in special_tokens_map.json
            cfg["chat_template"] = TURNS_TEMPLATE
            (d / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2))
            (d / "special_tokens_map.json").write_text(json.dumps(
                {"bos_token": "<|begin_of_text|>", "eos_token": {"content": "<|end_of_text|>", "lstrip": False,
                                                                 "normalized": False, "rstrip": False,
                                                                 "single_word": False}}, indent=2))
    bos, eos, size = 1, 2, 600  # the sentencepiece model's
    if not (d / "tokenizer.model").is_file():
        vocab = json.loads((d / "tokenizer.json").read_text())
        added = {t["content"]: t["id"] for t in vocab["added_tokens"]}
        size = max([*vocab["model"]["vocab"].values(), *added.values()]) + 1
        bos, eos = added["<|begin_of_text|>"], added["<|end_of_text|>"]
    make_hf_model(seed=LAYOUTS.index(layout), vocab_size=size, bos_token_id=bos, eos_token_id=eos,
                  pad_token_id=eos, num_key_value_heads=2).save_pretrained(d)
    return d
