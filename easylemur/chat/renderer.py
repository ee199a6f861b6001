"""A model's chat prompts (`ChatRenderer`): the one renderer the server, `generate --chat`,
lm-eval's --apply_chat_template and the task evals use (docs/design.md, "Chat prompts: one renderer")."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from easylemur.chat.chatml import chatml_template, render_prompt
from easylemur.chat.template import TemplateRejected, jinja_environment, special_tokens
from easylemur.errors import InputError


class ChatRenderer:
    """A model's chat prompts, as transformers' `apply_chat_template(messages,
    add_generation_prompt=True)` makes them from the same template (`text`, `prompt_ids`): the
    server, `generate --chat`, lm-eval's --apply_chat_template and the task evals all render
    through one (`LoadedModel.chat_renderer`; which template: `choice.chat_template_for`).

    The text is the template's, rendered as `ChatTemplate.render` renders it (transformers'
    sandboxed environment, the tokenizer's special tokens as variables: its configuration's, as
    transformers reads them, else a sentencepiece model's own pieces). The ids are the whole text
    encoded (add_special_tokens=False, nothing added: a template that writes `bos_token` gets its
    BOS from the text, one that does not gets none, exactly as transformers) by the tokenizer's
    `transformers_encoder`: an HF tokenizer itself, the tokenizer.json beside a directory's
    tokenizer.model (what transformers encodes with there), else the sentencepiece model, whose
    `encode` follows transformers' rules. One exception: a sentencepiece model without a
    tokenizer.json rendering ChatML's template goes through the token-level renderer
    (chatml.render_prompt), the ids training gave it (equal to its exported tokenizer.json's on
    the text, tests/test_chat.py). Raises InputError for a template that does not compile
    (naming `where`)."""

    def __init__(self, tokenizer: Any, template: str, where: str = "the model"):
        if tokenizer is None:
            raise InputError(f"{where}: no tokenizer, so no chat prompts")
        self.tok, self.template, self.where = tokenizer, template, where
        self.encoder = tokenizer.transformers_encoder
        self.token_level = self.encoder.kind == "spm" and template == chatml_template(tokenizer)
        self.variables = special_tokens(self.encoder.config)
        if self.encoder.kind == "spm":  # LlamaTokenizer's own BOS/EOS/UNK where the configuration names none
            unk = tokenizer.sp.unk_id()
            pieces = {k: tokenizer.id_to_piece(i) for k, i in (("bos_token", tokenizer.bos_id),
                      ("eos_token", tokenizer.eos_id), ("unk_token", unk)) if i is not None and i >= 0}
            self.variables = {**pieces, **self.variables}
        import jinja2

        try:
            self._compiled = jinja_environment().from_string(template)
        except jinja2.TemplateError as e:
            raise InputError(f"{where}: the chat template does not compile: {e}".replace("\n", " ")) from None

    def text(self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True,
             continue_final_message: bool = False) -> str:
        """The rendered conversation, as transformers' apply_chat_template(tokenize=False).
        `continue_final_message`: the last message is left open (the text ends with its content),
        by transformers' own rule: its content is tagged, rendered, and cut at the tag.
        Raises TemplateRejected when the template refuses the conversation."""
        msgs = [dict(m) for m in messages]
        tag = "CONTINUE_FINAL_MESSAGE_TAG "
        if continue_final_message:
            if not msgs:
                raise TemplateRejected("continue_final_message: the conversation is empty")
            final = msgs[-1]["content"]
            msgs[-1]["content"] = final + tag
        variables = {**self.variables, "messages": msgs, "tools": None, "documents": None,
                     "add_generation_prompt": add_generation_prompt}
        try:
            text = "".join(self._compiled.generate(**variables))
        except Exception as e:  # the template's raise_exception, an undefined value, a type error in it
            raise TemplateRejected(f"the chat template rejects it: {type(e).__name__}: {e}".replace("\n", " ")) from None
        if continue_final_message:
            if final.strip() not in text or tag.strip() not in text:
                raise TemplateRejected("the chat template drops part of the final message, which cannot be continued")
            at = text.rindex(tag.strip())
            text = text[:at] if text[at:at + len(tag)] == tag else text[:at].rstrip()
        return text

    def prompt_ids(self, messages: Sequence[Mapping[str, str]], assistant_prefix: str = "") -> list[int]:
        """The ids of the conversation and the generation prompt (the assistant's turn opened),
        then `assistant_prefix`, text the reply starts with. Raises TemplateRejected."""
        if self.token_level:
            prefix = self.tok.encode(assistant_prefix, continuation=True) if assistant_prefix else []
            return render_prompt(messages, self.tok) + prefix
        return list(self.encoder.encode(self.text(messages) + assistant_prefix))
