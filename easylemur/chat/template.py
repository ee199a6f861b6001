"""`chat_format: model`: conversations rendered with the tokenizer's own Jinja `chat_template`
(Llama-3-Instruct, Qwen2.5, ...) instead of ChatML (chatml.py), the loss on exactly the assistant
spans (docs/design.md, "Model chat templates"). `jinja_environment` is the one environment every
chat template renders in (renderer.ChatRenderer's too).

Rendering is transformers' `apply_chat_template`: a sandboxed Jinja environment (trim_blocks,
lstrip_blocks, `raise_exception`, `strftime_now`, its `tojson`), with `messages`,
`add_generation_prompt`, `tools`/`documents` (None) and the special tokens of
tokenizer_config.json (`bos_token`, `eos_token`, ...) as variables. The ids are those of the
whole rendered text encoded with add_special_tokens=False, as `apply_chat_template(tokenize=True)`
gives them. The template comes from tokenizer_config.json's `chat_template` (the "default" one of
a list), else a `chat_template.jinja` beside it (files.py).

The assistant spans (mask 1; a token is trained when its character offsets overlap a span):

- a template with `{% generation %}` blocks: the characters those blocks write, exactly
  transformers' `return_assistant_tokens_mask=True`;
- otherwise by rendering prefixes: for assistant message i, P = messages[:i] with
  add_generation_prompt=True and Q = messages[:i+1]; Q must start with P and the whole text
  with Q (the template is "prefix-stable"; else a ChatTemplateError), and the span is Q[len(P):]. It
  holds the content and the end-of-turn text the template writes after it (`<|im_end|>\\n`,
  `<|eot_id|>`), which is trained so that the model learns to stop.

BOS exactly once: easylemur trains every document with BOS, so when the tokenizer has one
(`bos_id` not None) and the rendered ids do not start with it, it is prepended (mask 0); a
template that writes `bos_token` itself gets no second one.

Truncation is chatml.render_truncated's: the conversation ends at its last assistant turn; when
it is longer than seq_len, the longest prefix of whole turns ending with an assistant turn that
fits (rendered as the template renders that shorter conversation), else the first assistant
turn's conversation cut at seq_len; None when no trained token is left. A template that refuses
a conversation (`raise_exception`, an undefined value) gives `TemplateRejected`, a bad record.
A template that cannot serve a source at all gives `ChatTemplateError` (data turns it into its
DataError).
"""

from __future__ import annotations

import json
import re
from contextvars import ContextVar
from datetime import datetime
from typing import Any, Mapping, Sequence

from easylemur.chat.choice import template_of
from easylemur.chat.files import token_text
from easylemur.errors import InputError

# the special tokens transformers passes to a template (its `special_tokens_map`), when set
SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")


class ChatTemplateError(InputError):
    """A tokenizer's chat template that cannot serve a source (none, not compiling, not
    prefix-stable); the message names the source and the tokenizer."""


class TemplateRejected(Exception):
    """The template could not render one conversation (its own `raise_exception`, or an error
    inside it): the record is bad, the run goes on."""


def special_tokens(config: Mapping[str, Any]) -> dict[str, str]:
    """The special-token variables a template sees, from a tokenizer_config.json."""
    return {k: t for k in SPECIAL_TOKEN_KEYS if (t := token_text(config.get(k))) is not None}


class _Recorder:
    """The characters rendered so far and the generation blocks' spans, of one render."""

    def __init__(self):
        self.length = 0
        self.spans: list[tuple[int, int]] = []


def jinja_environment():
    """The sandboxed Jinja environment transformers renders chat templates in."""
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        # `{% generation %}...{% endgeneration %}` writes its body and records where it lands.
        # Like transformers, the start is the length of the output generated so far (so a
        # block inside a macro or a {% set %} capture is misplaced the same way there).
        tags = {"generation"}

        def __init__(self, environment):
            super().__init__(environment)
            # per thread (grain's read threads render at once): a ContextVar, not an attribute
            self.recorder: ContextVar[_Recorder | None] = ContextVar("easylemur_generation", default=None)
            environment.extend(generation_recorder=self.recorder)

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_block"), [], [], body).set_lineno(lineno)

        def _block(self, caller):
            text = caller()
            rec = self.recorder.get()
            if rec is not None:
                rec.spans.append((rec.length, rec.length + len(text)))
            return text

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # transformers' filter: Jinja's own escapes HTML characters and takes fewer options
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


class ChatTemplate:
    """One source's renderer: the tokenizer's template compiled once; pickles as its text (grain
    pickles the Tokenize map), compiled again on the other side. `render_truncated` is the
    entry point; `source_name` names the source in errors."""

    def __init__(self, tokenizer: Any, source_name: str):
        path = getattr(tokenizer, "model_path", "?")
        if getattr(tokenizer, "kind", None) != "hf":
            raise ChatTemplateError(f"source '{source_name}': chat_format: model needs a tokenizer_config.json "
                                    f"chat_template, and tokenizer {path} is a sentencepiece model (use a tokenizer.json "
                                    "with one, or chat_format: chatml)")
        template = template_of(tokenizer)
        if template is None:
            raise ChatTemplateError(f"source '{source_name}': chat_format: model needs a tokenizer_config.json "
                                    f"chat_template; tokenizer {path} has none (add one, or use chat_format: chatml)")
        self.tokenizer = tokenizer
        self.source_name = source_name
        self.template = template
        self.tracked = GENERATION_TAG.search(template) is not None
        self.variables = special_tokens(tokenizer.config)
        self._compile()

    def _compile(self) -> None:
        import jinja2

        try:
            self._compiled = jinja_environment().from_string(self.template)
        except jinja2.TemplateError as e:
            msg = str(e).replace("\n", " ")
            raise ChatTemplateError(f"source '{self.source_name}': the chat_template of tokenizer "
                                    f"{self.tokenizer.model_path} does not compile: {msg}") from None
        self._recorder = self._compiled.environment.generation_recorder

    def __getstate__(self):
        state = dict(self.__dict__)
        del state["_compiled"], state["_recorder"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._compile()

    def render(self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = False,
               track: bool = False) -> tuple[str, list[tuple[int, int]]]:
        """(text, the generation blocks' character spans when `track`) of `messages`."""
        variables = {**self.variables, "messages": [dict(m) for m in messages], "tools": None, "documents": None,
                     "add_generation_prompt": add_generation_prompt}
        rec = _Recorder()
        token = self._recorder.set(rec if track else None)
        try:
            parts = []
            for block in self._compiled.generate(**variables):
                parts.append(block)
                rec.length += len(block)
            return "".join(parts), rec.spans
        except Exception as e:  # the template's raise_exception, an undefined value, a type error in it
            raise TemplateRejected(f"the chat_template rejects it: {type(e).__name__}: {e}".replace("\n", " ")) from None
        finally:
            self._recorder.reset(token)

    def _prefix_spans(self, msgs: Sequence[Mapping[str, str]], assistants: list[int]
                      ) -> tuple[str, list[tuple[int, int]]]:
        """(the whole text, each assistant message's span) by rendering prefixes (module doc)."""
        text, _ = self.render(msgs)
        spans = []
        for i in assistants:
            p, _ = self.render(msgs[:i], add_generation_prompt=True)
            q = text if i == len(msgs) - 1 else self.render(msgs[:i + 1])[0]
            if not (q.startswith(p) and text.startswith(q)):
                raise ChatTemplateError(f"source '{self.source_name}': chat_format: model: the chat_template of "
                                        f"tokenizer {self.tokenizer.model_path} is not prefix-stable (messages[:{i}] with "
                                        f"the generation prompt, messages[:{i + 1}] and the whole conversation do not "
                                        "extend one another), so the assistant spans are unknown; add {% generation %} "
                                        "blocks to it or use chat_format: chatml")
            spans.append((len(p), len(q)))
        return text, spans

    def _tokens(self, text: str, spans: Sequence[tuple[int, int]]) -> tuple[list[int], list[int]]:
        """(ids, mask) of a rendered text: BOS once, 1 on every token overlapping a span."""
        ids, offsets = self.tokenizer.encode_offsets(text)
        ids = list(ids)
        mask = [0] * len(ids)
        k = 0  # spans and offsets are both in order: one pass (transformers' own rule)
        for t, (start, end) in enumerate(offsets):
            while k < len(spans) and start >= spans[k][1]:
                k += 1
            if k == len(spans):
                break
            if end > spans[k][0]:
                mask[t] = 1
        bos = self.tokenizer.bos_id
        if bos is not None and (not ids or ids[0] != bos):
            ids, mask = [bos] + ids, [0] + mask
        return ids, mask

    def render_truncated(self, messages: Sequence[Mapping[str, str]], max_len: int
                         ) -> tuple[list[int], list[int]] | None:
        """(ids, mask) of the conversation up to its last assistant turn, cut to at most
        `max_len` tokens keeping whole turns where it can (module doc); None when no trained
        token is left. Raises TemplateRejected for a conversation the template refuses."""
        assistants = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        if not assistants:
            return None
        msgs = list(messages[:assistants[-1] + 1])
        if self.tracked:
            text, spans = self.render(msgs, track=True)
        else:
            text, spans = self._prefix_spans(msgs, assistants)
        done: dict[int, tuple[list[int], list[int]]] = {len(assistants) - 1: self._tokens(text, spans)}

        def upto(k: int) -> tuple[list[int], list[int]]:
            """The conversation ending with assistant turn k, as the template renders it."""
            if k not in done:
                end = assistants[k] + 1
                if self.tracked:
                    done[k] = self._tokens(*self.render(msgs[:end], track=True))
                else:  # prefix-stable: its text is a prefix of the whole, its spans the first k + 1
                    done[k] = self._tokens(text[:spans[k][1]], spans[:k + 1])
            return done[k]

        best = len(assistants) - 1
        if len(done[best][0]) > max_len:
            # the longest prefix that fits: a binary search, as a longer conversation never
            # renders shorter; O(log turns) renders and encodes, not one per turn
            lo, hi, best = 0, len(assistants) - 2, -1
            while lo <= hi:
                mid = (lo + hi) // 2
                if len(upto(mid)[0]) <= max_len:
                    best, lo = mid, mid + 1
                else:
                    hi = mid - 1
        if best < 0:  # not even the first assistant turn fits whole: cut inside it
            ids, mask = upto(0)
            ids, mask = ids[:max_len], mask[:max_len]
        else:
            ids, mask = upto(best)
        return (ids, mask) if any(mask) else None
