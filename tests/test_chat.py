"""ChatML rendering (chat/chatml.py) and conversation records (data/conversations.py): formats, exact loss
masks, HF chat template agreement, truncation."""

import pytest

from easylemur.chat.chatml import (
    CHAT_TEMPLATE,
    render_chat,
    render_prompt,
    render_text,
    render_truncated,
)
from easylemur.data.conversations import ChatFormatError, to_messages
from easylemur.tokenizer.spm import Tokenizer

OPENAI = {"messages": [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Sort a list in Python?"},
    {"role": "assistant", "content": "Use `sorted(xs)`:\n\n```python\nys = sorted(xs)\n```"},
    {"role": "user", "content": "In place?"},
    {"role": "assistant", "content": "xs.sort()  # returns None\n\tdone"},
]}
SHAREGPT = {"conversations": [
    {"from": "system", "value": "Be kind."},
    {"from": "human", "value": "Write hello world in C."},
    {"from": "gpt", "value": "#include <stdio.h>\nint main(void) { puts(\"hi\"); }"},
    {"from": "human", "value": "And Rust? ünïcödé"},
    {"from": "gpt", "value": "fn main() {\n    println!(\"hi\");\n}"},
]}
ORCA = {"system_prompt": "You are an AI assistant.", "question": "What is 2+2?", "response": "2 + 2 = 4."}
ORCA_NO_SYS = {"system_prompt": "", "question": "Name a prime.", "response": "7"}


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.load()


def trained_runs(ids, mask, tok):
    runs, cur = [], []
    for t, m in zip(ids, mask):
        if m:
            cur.append(t)
        elif cur:
            runs.append(tok.decode(cur)), cur.clear()
    if cur:
        runs.append(tok.decode(cur))
    return runs


def test_formats_to_messages():
    assert to_messages(OPENAI) == OPENAI["messages"]
    m = to_messages(SHAREGPT)
    assert [x["role"] for x in m] == ["system", "user", "assistant", "user", "assistant"]
    assert m[2]["content"] == SHAREGPT["conversations"][2]["value"]
    assert to_messages(ORCA) == [{"role": "system", "content": ORCA["system_prompt"]},
                                 {"role": "user", "content": "What is 2+2?"},
                                 {"role": "assistant", "content": "2 + 2 = 4."}]
    assert [x["role"] for x in to_messages(ORCA_NO_SYS)] == ["user", "assistant"]
    assert to_messages({"dialog": OPENAI["messages"]}, field="dialog") == OPENAI["messages"]


@pytest.mark.parametrize("record", [OPENAI, SHAREGPT, ORCA, ORCA_NO_SYS], ids=["openai", "sharegpt", "orca", "orca_nosys"])
def test_masks_exact(tok, record):
    msgs = to_messages(record)
    ids, mask = render_chat(msgs, tok)
    assert ids[0] == tok.bos_id and mask[0] == 0 and len(ids) == len(mask)
    expected = [m["content"] + "<|im_end|>\n" for m in msgs if m["role"] == "assistant"]
    assert trained_runs(ids, mask, tok) == expected
    # the whole sequence is exactly BOS + the ChatML text, tokenized as one string
    assert ids == [tok.bos_id] + tok.encode(render_text(msgs))
    assert tok.decode(ids) == render_text(msgs)
    assert tok.eos_id not in ids
    # headers are never trained
    for i, t in enumerate(ids):
        if t == tok.im_start_id:
            assert mask[i] == 0 and mask[i + 1] == 0


def test_prompt(tok):
    msgs = to_messages(OPENAI)[:4]
    p = render_prompt(msgs, tok)
    assert p == [tok.bos_id] + tok.encode(render_text(msgs, add_generation_prompt=True))
    assert tok.decode(p).endswith("<|im_start|>assistant\n")


def test_hf_chat_template_agrees(tok, tmp_path):
    transformers = pytest.importorskip("transformers")
    tok.save_hf(tmp_path)
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    assert hf.chat_template == CHAT_TEMPLATE
    for rec in (OPENAI, SHAREGPT, ORCA):
        msgs = to_messages(rec)
        assert list(hf.apply_chat_template(msgs, tokenize=True, return_dict=False)) == render_chat(msgs, tok)[0]
        ids = hf.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True, return_dict=False)
        assert list(ids) == render_prompt(msgs, tok)
        assert hf.apply_chat_template(msgs, tokenize=False) == "<s>" + render_text(msgs)


@pytest.mark.parametrize("record,kind", [
    ({"messages": [{"role": "wizard", "content": "x"}]}, "unknown_role"),
    ({"conversations": [{"from": "robot", "value": "x"}]}, "unknown_role"),
    ({"messages": [{"role": "user", "content": None}]}, "not_a_string"),
    ({"messages": [{"role": "user", "content": ["a"]}]}, "not_a_string"),
    ({"messages": [{"role": "user"}]}, "missing_field"),
    ({"messages": "hello"}, "not_a_string"),
    ({"messages": []}, "empty"),
    ({"text": "no chat here"}, "missing_field"),
    ({"question": "q"}, "missing_field"),
    ({"question": "q", "response": 3}, "not_a_string"),
])
def test_bad_records(record, kind):
    with pytest.raises(ChatFormatError) as e:
        to_messages(record)
    assert e.value.kind == kind


def test_truncation_keeps_whole_turns(tok):
    msgs = to_messages(OPENAI)
    full, _ = render_chat(msgs, tok)
    first_two, _ = render_chat(msgs[:3], tok)
    # room for the first exchange but not the second: keep exactly the first three turns
    ids, mask = render_truncated(msgs, tok, len(full) - 1)
    assert ids == first_two
    assert trained_runs(ids, mask, tok) == [msgs[2]["content"] + "<|im_end|>\n"]
    # everything fits: unchanged
    assert render_truncated(msgs, tok, len(full))[0] == full
    # the first answer does not fit: cut inside it, still training what is left
    ids, mask = render_truncated(msgs, tok, len(render_chat(msgs[:2], tok)[0]) + 6)
    assert len(ids) == len(render_chat(msgs[:2], tok)[0]) + 6 and sum(mask) > 0
    # not even the prompt fits: nothing to train -> None (dropped and counted by the pipeline)
    assert render_truncated(msgs, tok, 5) is None
    # a conversation with no assistant turn has nothing to train
    assert render_truncated(msgs[:2], tok, 1000) is None
    # a trailing user turn is dropped
    assert render_truncated(msgs[:4], tok, 1000)[0] == first_two
