"""ChatML, easylemur's chat format: its markers, its template text and THE token-level renderer
(training, the HF export's template, and the chat prompts of a ChatML model with a
sentencepiece tokenizer, through renderer.ChatRenderer, use this module).

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

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
CHATML_TOKENS = (IM_START, IM_END)  # the markers, as tokenizer pieces (tokenizer extend-chatml adds them)

# Renders the same text as render_chat / render_prompt (HF tokenizer_config.json "chat_template").
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def chatml_template(tokenizer: Any) -> str | None:
    """ChatML's template for a tokenizer with the markers (its BOS written only when it has one,
    as render_prompt starts), None without them: the text to-hf writes for a chatml model."""
    if tokenizer is None or not tokenizer.has_chatml:
        return None
    return CHAT_TEMPLATE if tokenizer.bos_id is not None else CHAT_TEMPLATE.replace("{{ bos_token }}", "")


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
