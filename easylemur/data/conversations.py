"""Conversation records -> messages: OpenAI `messages`, ShareGPT `conversations` (its `from`
values mapped to the chat roles) and OpenOrca `system_prompt`/`question`/`response`; a record
that is not a usable conversation is a bad record of one of records.py's kinds (rendering the
messages is the chat package's: chat/chatml.py, chat/template.py)."""

from __future__ import annotations

from typing import Any, Mapping

from easylemur.chat.formats import ROLES
from easylemur.data.records import EMPTY, MISSING_FIELD, NOT_A_STRING, UNKNOWN_ROLE
from easylemur.errors import InputError

# ShareGPT `from` values seen in the wild -> the chat roles
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
