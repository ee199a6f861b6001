"""THE rule for which chat template a model chats with (docs/design.md, "Chat prompts: one
renderer"): the server, `generate --chat`, `LoadedModel.chat`, lm-eval's --apply_chat_template,
the task evals, and to-hf's export (`convert.to_hf.export_chat_template` without flags) all ask
`chat_template_for`, so that easylemur, transformers and vLLM render the same prompt."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Mapping, Optional

from easylemur.chat.chatml import chatml_template
from easylemur.chat.files import config_template, default_template, template_files

UNKNOWN = object()  # chat_format not recorded (a checkpoint from before meta chat_format)


def template_in(config_value: Any, files: Mapping[str, str]) -> Optional[str]:
    """THE rule for which of a tokenizer's templates is its own, as transformers 5 loads them:
    template files (chat_template.jinja as "default", additional_chat_templates/NAME.jinja)
    replace tokenizer_config.json's `chat_template` whole when there are any, and the "default"
    one is used (none named so: no template); else the config's (a string, or the "default" of
    a list of named ones). `--chat-template FILE` goes over all of them (its callers)."""
    if files:
        return files.get("default") or None
    return default_template(config_value)


def hf_dir_chat_template(path: str | Path) -> Optional[str]:
    """An HF directory's own chat template (`template_in`), None without one."""
    return template_in(config_template(path), template_files(path))


def template_of(tokenizer: Any) -> Optional[str]:
    """A tokenizer's own chat template (`template_in` over its configuration and the template
    files beside it in its HF directory), None when it has none."""
    config = getattr(tokenizer, "config", None)
    if config is None:
        return None
    here = Path(tokenizer.model_path)
    in_hf_dir = tokenizer.kind == "hf" or here.name == "tokenizer.model"
    return template_in(config.get("chat_template"), template_files(here.parent) if in_hf_dir else {})


def template_sha256(tokenizer: Any) -> Optional[str]:
    """The sha256 of the chat template a store's `chat_format: model` documents were rendered with."""
    t = template_of(tokenizer)
    return None if t is None else hashlib.sha256(t.encode("utf-8")).hexdigest()


def own_template(tokenizer: Any, meta: Any = None) -> Optional[str]:
    """A model's own chat template ("the tokenizer's own"): the one from-hf kept in meta
    chat_template (when the embedded tokenizer's configuration would give another: a
    chat_template.jinja file won over it), else its tokenizer's."""
    return (meta or {}).get("chat_template") or template_of(tokenizer)


def chat_template_for(source: Any, tokenizer: Any, chat_format: Any = UNKNOWN) -> tuple[Optional[str], str]:
    """(the template text or None, why, for messages) of a model:

    - `source` an HF directory (a path): its tokenizer's own (`hf_dir_chat_template`), as
      transformers and vLLM read it; a directory without one is a base model (None);
    - `source` a checkpoint (anything with a `meta` dict: `model_meta.ModelCheckpoint`): the
      template its to-hf export writes: meta chat_format "chatml" ChatML's, "model" the
      tokenizer's own (or the one from-hf kept in meta chat_template), null none; a checkpoint
      from before the key: the tokenizer's own when it is an HF tokenizer with one, else ChatML's
      when it has the markers;
    - `source` None (weights in this process, a training run's): the same rule for
      `chat_format` (what the run's checkpoints record; not given: as before the key)."""
    if tokenizer is None:
        return None, "the model has no tokenizer"
    if isinstance(source, (str, Path)):
        template = hf_dir_chat_template(source)
        if template is None:
            return None, f"{source}: its tokenizer has no chat_template (a base model)"
        return template, "the tokenizer's own (the HF directory's chat_template)"
    meta = dict(source.meta) if source is not None else {} if chat_format is UNKNOWN else {"chat_format": chat_format}
    own = own_template(tokenizer, meta)
    chatml = chatml_template(tokenizer)
    if "chat_format" not in meta:
        how = ("the checkpoint predates meta chat_format" if source is not None else "no chat_format known") + \
            ", so as before: "
        if tokenizer.kind == "hf" and own:
            return own, how + "the tokenizer's own"
        return chatml, how + ("ChatML's, the tokenizer has its markers" if chatml else "none, the tokenizer has no ChatML")
    fmt = meta["chat_format"]
    if fmt == "chatml":
        return chatml, "ChatML's (meta chat_format chatml)" if chatml else "none: chat_format chatml but no ChatML tokens"
    if fmt == "model":
        return own, ("the tokenizer's own (meta chat_format model)" if own else
                     "none: chat_format model but the tokenizer carries no template")
    return None, "none: not chat-tuned (meta chat_format null)"
