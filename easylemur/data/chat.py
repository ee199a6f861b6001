"""THE ChatML renderer (training, the HF export's template, and the chat prompts of a ChatML
model with a sentencepiece tokenizer, through data.chat_template.ChatRenderer, use this module).

Each message renders as `<|im_start|>{role}\\n{content}<|im_end|>\\n`; the conversation starts
with BOS. The loss covers each assistant message's content, its `<|im_end|>` and the `\\n` after
it; system/user turns and the `<|im_start|>assistant\\n` header are masked. EOS is never
trained: generation stops on `<|im_end|>`.

Pieces are encoded separately (header, content, "\\n") and concatenated, each with
`continuation=True` (no dummy prefix: every piece follows a marker or other text). With the
ChatML markers as user-defined pieces and no learned piece containing "\\n" (true of the shipped
model; Llama-2's encodes "\\n" as a byte piece), this equals encoding the whole rendered text,
which is what HF's tokenizer does with CHAT_TEMPLATE; tests/test_chat.py and tests/test_tokenizer.py (random
conversations, shipped and dummy-prefix models) check that equality.
"""

from __future__ import annotations

import functools
from typing import Any, Mapping, Sequence

from easylemur.data.records import EMPTY, MISSING_FIELD, NOT_A_STRING, UNKNOWN_ROLE
from easylemur.errors import InputError

ROLES = ("system", "user", "assistant")
# ShareGPT `from` values seen in the wild -> ChatML roles
SHAREGPT_ROLES = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "chatgpt": "assistant",
    "assistant": "assistant",
    "bing": "assistant",
    "bard": "assistant",
    "model": "assistant",
}

# Renders the same text as render_chat / render_prompt (HF tokenizer_config.json "chat_template").
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


class ChatFormatError(InputError):
    """A record that is not a usable conversation; `kind` is one of the bad-record kinds."""

    def __init__(self, kind: str, message: str):
        super().__init__(f"{kind}: {message}")
        self.kind = kind


Message = dict[str, str]


def _message(role: Any, content: Any, i: int, roles: Mapping[str, str] | None) -> Message:
    if not isinstance(role, str):
        raise ChatFormatError(UNKNOWN_ROLE, f"message {i}: role {role!r} is not a string")
    mapped = (roles or {r: r for r in ROLES}).get(role if roles is None else role.lower())
    if mapped is None:
        raise ChatFormatError(UNKNOWN_ROLE, f"message {i}: unknown role {role!r}")
    if not isinstance(content, str):
        raise ChatFormatError(NOT_A_STRING, f"message {i}: content is {type(content).__name__}, not a string")
    return {"role": mapped, "content": content}


def _from_list(items: Any, field: str) -> list[Message]:
    if not isinstance(items, list):
        raise ChatFormatError(NOT_A_STRING if items is not None else MISSING_FIELD,
                              f"field {field!r} is {type(items).__name__}, not a list of messages")
    out = []
    for i, m in enumerate(items):
        if not isinstance(m, dict):
            raise ChatFormatError(MISSING_FIELD, f"message {i} is {type(m).__name__}, not an object")
        if "role" in m or "content" in m:
            if "role" not in m or "content" not in m:
                raise ChatFormatError(MISSING_FIELD, f"message {i} lacks 'role' or 'content'")
            out.append(_message(m["role"], m["content"], i, None))
        elif "from" in m or "value" in m:
            if "from" not in m or "value" not in m:
                raise ChatFormatError(MISSING_FIELD, f"message {i} lacks 'from' or 'value'")
            out.append(_message(m["from"], m["value"], i, SHAREGPT_ROLES))
        else:
            raise ChatFormatError(MISSING_FIELD, f"message {i} has neither role/content nor from/value")
    if not out:
        raise ChatFormatError(EMPTY, f"field {field!r} holds no messages")
    return out


def to_messages(record: Mapping[str, Any], field: str | None = None) -> list[Message]:
    """OpenAI `messages`, ShareGPT `conversations` or OpenOrca `system_prompt`/`question`/
    `response` -> a list of {"role", "content"}. Raises ChatFormatError for bad records."""
    if not isinstance(record, Mapping):
        raise ChatFormatError(MISSING_FIELD, f"record is {type(record).__name__}, not an object")
    if field:
        if field not in record:
            raise ChatFormatError(MISSING_FIELD, f"record has no field {field!r}")
        return _from_list(record[field], field)
    if "messages" in record:
        return _from_list(record["messages"], "messages")
    if "conversations" in record:
        return _from_list(record["conversations"], "conversations")
    if "question" in record or "response" in record:
        msgs = []
        for key, role in (("system_prompt", "system"), ("question", "user"), ("response", "assistant")):
            if key not in record:
                if key == "system_prompt":
                    continue
                raise ChatFormatError(MISSING_FIELD, f"OpenOrca-style record has no {key!r}")
            v = record[key]
            if not isinstance(v, str):
                raise ChatFormatError(NOT_A_STRING, f"field {key!r} is {type(v).__name__}, not a string")
            if key == "system_prompt" and not v:
                continue  # OpenOrca leaves it empty for many rows: no system turn
            msgs.append({"role": role, "content": v})
        return msgs
    raise ChatFormatError(MISSING_FIELD, "record has none of 'messages', 'conversations', 'question'/'response'")


def _bos(tokenizer) -> tuple[list[int], list[int]]:
    """(ids, mask) a conversation starts with: BOS, or nothing for a tokenizer without one."""
    return ([], []) if tokenizer.bos_id is None else ([tokenizer.bos_id], [0])


def _turn(message: Mapping[str, str], tokenizer) -> tuple[list[int], list[int]]:
    role, content = message["role"], message["content"]
    enc = functools.partial(tokenizer.encode, continuation=True)
    head_ids = enc(role + "\n")
    if tokenizer.kind == "hf":
        # A byte-level BPE's pre-tokenizer merges across the role's "\n" and the content (content
        # starting with "\n" or spaces): encode the text between the markers whole, as AutoTokenizer
        # does, and split it where it stops agreeing with the role's own ids (a token spanning
        # both is the content's). sentencepiece (the shipped model: "\n" is never in a piece) keeps
        # encoding the two apart.
        joint = enc(role + "\n" + content)
        k = 0
        while k < min(len(joint), len(head_ids)) and joint[k] == head_ids[k]:
            k += 1
        head_ids, content_ids = joint[:k], joint[k:]
    else:
        content_ids = enc(content)
    head = [tokenizer.im_start_id] + head_ids
    body = content_ids + [tokenizer.im_end_id] + enc("\n")
    trained = 1 if role == "assistant" else 0
    return head + body, [0] * len(head) + [trained] * len(body)


def render_chat(messages: Sequence[Mapping[str, str]], tokenizer) -> tuple[list[int], list[int]]:
    """(ids, loss_mask) of a conversation: BOS first (if the tokenizer has one), mask 1 on assistant content+<|im_end|>\\n."""
    tokenizer.require_chatml()
    ids, mask = _bos(tokenizer)
    for m in messages:
        t_ids, t_mask = _turn(m, tokenizer)
        ids += t_ids
        mask += t_mask
    return ids, mask


def render_prompt(messages: Sequence[Mapping[str, str]], tokenizer) -> list[int]:
    """Prompt ids for generation: BOS + the turns + `<|im_start|>assistant\\n`."""
    ids, _ = render_chat(messages, tokenizer)
    return ids + [tokenizer.im_start_id] + tokenizer.encode("assistant\n", continuation=True)


def render_text(messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = False) -> str:
    """The rendered text (without BOS), as CHAT_TEMPLATE writes it after bos_token."""
    s = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return s + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def render_truncated(
    messages: Sequence[Mapping[str, str]], tokenizer, max_len: int
) -> tuple[list[int], list[int]] | None:
    """render_chat cut to at most `max_len` tokens, keeping whole turns where it can.

    Keeps the longest prefix of whole turns that fits and ends with an assistant turn; when
    even the first assistant turn does not fit, cuts the tokens at max_len. Returns None when
    no trained token is left (the caller drops and counts the conversation)."""
    tokenizer.require_chatml()
    ids, mask = _bos(tokenizer)
    best = None
    for m in messages:
        t_ids, t_mask = _turn(m, tokenizer)
        if len(ids) + len(t_ids) > max_len:
            if best is None:  # nothing whole fits: cut inside this turn
                ids, mask = (ids + t_ids)[:max_len], (mask + t_mask)[:max_len]
                best = (ids, mask) if any(mask) else None
            break
        ids, mask = ids + t_ids, mask + t_mask
        if m["role"] == "assistant":
            best = (ids, mask)
    return best
