"""`chat_format: model`: conversations rendered with the tokenizer's own chat_template, judged
by transformers' apply_chat_template on small local tokenizers: a Llama-3-style one with
`{% generation %}` blocks (its assistant mask), a Qwen2.5-style one without (the prefix-rendering
mask), BOS once, truncation, the pipeline end to end, errors, token store identity."""

import json
import pickle
import random
import unicodedata

import numpy as np
import pytest
import transformers
from ml_collections import ConfigDict
from test_tokenizer_hf import LLAMA3_SPECIAL, LLAMA3_SPLIT, QWEN_SPECIAL, QWEN_SPLIT, build_hf_dir, random_strings

from easylemur.config import ConfigError, validate_sources
from easylemur.data import build
from easylemur.chat.template import ChatTemplate, ChatTemplateError, TemplateRejected
from easylemur.data.pipeline import make_pipeline
from easylemur.data.records import DataError
from easylemur.data.tokenize import Tokenize
from easylemur.tokenizer import load_tokenizer
from easylemur.tokenizer.hf import HFTokenizer
from easylemur.tokenizer.spm import Tokenizer

# Llama-3-Instruct's template with {% generation %} around each assistant answer and its <|eot_id|>
LLAMA3_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}"
    "{% if message['role'] == 'assistant' %}"
    "{% generation %}{{ message['content'] | trim + '<|eot_id|>' }}{% endgeneration %}"
    "{% else %}{{ message['content'] | trim + '<|eot_id|>' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
# the same without BOS and without generation blocks (spans by prefix rendering)
LLAMA3_NO_BOS_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
# Qwen2.5's (without its tools branch): a default system message, ChatML turns, no BOS
QWEN_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}\n"
    "    {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    "{%- else %}\n"
    "    {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- if (message.role == 'user') or (message.role == 'system' and not loop.first) or "
    "(message.role == 'assistant') %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n"
)


@pytest.fixture(scope="module")
def llama3_dir(tmp_path_factory):
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>",
           "eos_token": {"content": "<|end_of_text|>", "special": True, "__type": "AddedToken"},
           "clean_up_tokenization_spaces": False, "chat_template": LLAMA3_TEMPLATE}
    return build_hf_dir(tmp_path_factory.mktemp("llama3t"), LLAMA3_SPLIT, LLAMA3_SPECIAL, cfg, bos="<|begin_of_text|>",
                        vocab_size=600)


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory):
    cfg = {"tokenizer_class": "Qwen2Tokenizer", "bos_token": None, "eos_token": "<|endoftext|>",
           "pad_token": "<|endoftext|>", "split_special_tokens": False, "clean_up_tokenization_spaces": False,
           "chat_template": QWEN_TEMPLATE}
    return build_hf_dir(tmp_path_factory.mktemp("qwent"), QWEN_SPLIT, QWEN_SPECIAL, cfg, nfc=True, vocab_size=600)


STRINGS = random_strings(300, seed=3)


def conversations(n: int, seed: int, end_with_assistant: bool = True) -> list[list[dict]]:
    """Random system/user/assistant conversations, 1-4 exchanges, contents from random_strings."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        roles = (["system"] if rnd.random() < 0.5 else []) + ["user", "assistant"] * rnd.randint(1, 4)
        if not end_with_assistant and i % 3 == 0:
            roles.append("user")
        out.append([{"role": r, "content": rnd.choice(STRINGS)} for r in roles])
    return out


def _auto(d):
    return transformers.AutoTokenizer.from_pretrained(str(d))


def overlap_mask(offsets, spans) -> list[int]:
    """1 on every token whose character range overlaps a span."""
    return [int(any(s < b and e > a for a, b in spans)) for s, e in offsets]


def prefix_spans(auto, msgs, template=None) -> tuple[str, list[tuple[int, int]]]:
    """The prefix-rendering definition, rendered by transformers."""
    def text(m, gen=False):
        return auto.apply_chat_template(m, tokenize=False, add_generation_prompt=gen, chat_template=template)

    full, spans = text(msgs), []
    for i, m in enumerate(msgs):
        if m["role"] == "assistant":
            p, q = text(msgs[:i], True), text(msgs[:i + 1])
            assert q.startswith(p) and full.startswith(q)
            spans.append((len(p), len(q)))
    return full, spans


def test_generation_blocks_equal_transformers_assistant_mask(llama3_dir):
    tok, auto = load_tokenizer(llama3_dir), _auto(llama3_dir)
    ct = ChatTemplate(tok, "chat")
    assert ct.tracked
    bos, head = tok.bos_id, tok.piece_to_id("<|start_header_id|>")
    n_trained = 0
    for msgs in conversations(150, seed=0):
        ids, mask = ct.render_truncated(msgs, 1 << 20)
        want = auto.apply_chat_template(msgs, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
        assert ids == list(want["input_ids"]), msgs
        assert mask == list(want["assistant_masks"]), msgs
        assert ids[:2] == [bos, head]  # the template's BOS, not a second one
        n_trained += sum(mask)
        # each answer's trained tokens decode to its trimmed content and <|eot_id|>
        runs = [tok.decode([t for t, m in zip(ids, mask) if m])]
        assert runs[0] == "".join(m["content"].strip() + "<|eot_id|>" for m in msgs if m["role"] == "assistant")
    assert n_trained > 1000


def test_prefix_rendering_mask_and_ids_equal_transformers(qwen_dir):
    tok, auto = load_tokenizer(qwen_dir), _auto(qwen_dir)
    ct = ChatTemplate(tok, "chat")
    assert not ct.tracked and tok.bos_id is None
    plain = [s for s in STRINGS if "<|" not in s]
    rnd = random.Random(5)
    for k, msgs in enumerate(conversations(150, seed=1)):
        if k % 2:  # some contents start with newlines: a token spans the header's "\n" and the content
            msgs = [{**m, "content": rnd.choice(["\n", "\n\n", " "]) + rnd.choice(plain)} for m in msgs]
        ids, mask = ct.render_truncated(msgs, 1 << 20)
        assert ids == list(auto.apply_chat_template(msgs, tokenize=True, return_dict=True)["input_ids"]), msgs
        full, spans = prefix_spans(auto, msgs)
        enc = auto(full, add_special_tokens=False, return_offsets_mapping=True)
        assert ids == list(enc["input_ids"])
        assert mask == overlap_mask(enc["offset_mapping"], spans), msgs
        runs, cur = [], []  # one trained run per assistant turn: its content, <|im_end|> and "\n"
        for t, m in zip(ids + [0], mask + [0]):
            if m:
                cur.append(t)
            elif cur:
                runs, cur = runs + [tok.decode(cur)], []
        want = [unicodedata.normalize("NFC", m["content"]) + "<|im_end|>\n" for m in msgs if m["role"] == "assistant"]
        assert len(runs) == len(want) and all(r in (w, "\n" + w) for r, w in zip(runs, want)), (runs, want)
        assert "You are Qwen" in tok.decode(ids) or msgs[0]["role"] == "system"


def test_bos_prepended_once_when_the_template_writes_none(llama3_dir):
    base = load_tokenizer(llama3_dir)
    tok = HFTokenizer(base.model_path, base._json, {**base.config, "chat_template": LLAMA3_NO_BOS_TEMPLATE})
    auto = _auto(llama3_dir)
    ct = ChatTemplate(tok, "chat")
    assert not ct.tracked
    for msgs in conversations(40, seed=2):
        ids, mask = ct.render_truncated(msgs, 1 << 20)
        full, spans = prefix_spans(auto, msgs, LLAMA3_NO_BOS_TEMPLATE)
        enc = auto(full, add_special_tokens=False, return_offsets_mapping=True)
        assert ids == [tok.bos_id] + list(enc["input_ids"]) and enc["input_ids"][0] != tok.bos_id
        assert mask == [0] + overlap_mask(enc["offset_mapping"], spans)


@pytest.mark.parametrize("which", ["llama3", "qwen"])
def test_truncation_keeps_whole_turns(which, llama3_dir, qwen_dir):
    d = llama3_dir if which == "llama3" else qwen_dir
    tok, auto = load_tokenizer(d), _auto(d)
    ct = ChatTemplate(tok, "chat")
    msgs = [{"role": "system", "content": "Be terse."}] + [
        {"role": r, "content": f"{r} turn {i}: " + "word " * (i + 3)} for i in range(4) for r in ("user", "assistant")]

    def want(m):
        out = auto.apply_chat_template(m, tokenize=True, return_dict=True)["input_ids"]
        return list(out) if tok.bos_id is None or out[0] == tok.bos_id else [tok.bos_id] + list(out)

    full = want(msgs)
    assert ct.render_truncated(msgs, len(full))[0] == full
    assert ct.render_truncated(msgs + [{"role": "user", "content": "more?"}], len(full))[0] == full  # trailing user dropped
    for k in (3, 2, 1):  # room for k exchanges and a token more, not k + 1: exactly the first k
        ids, mask = ct.render_truncated(msgs, len(want(msgs[:2 * k + 3])) - 1)
        assert ids == want(msgs[:2 * k + 1]) and sum(mask) > 0
    first = want(msgs[:3])
    ids, mask = ct.render_truncated(msgs, len(first) - 2)  # the first answer does not fit: cut inside it
    assert ids == first[:len(first) - 2] and sum(mask) > 0
    assert ct.render_truncated(msgs, 5) is None  # nothing trained left
    assert ct.render_truncated(msgs[:2], 1000) is None  # no assistant turn


def test_pipeline_rows_train_exactly_the_assistant_spans(llama3_dir, tmp_path):
    tok, auto = load_tokenizer(llama3_dir), _auto(llama3_dir)
    convs = conversations(40, seed=4)
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps({"messages": m}) + "\n" for m in convs))
    srcs = ConfigDict({"chat": {"path": str(path), "format": "chat", "chat_format": "model"}})
    validate_sources(srcs, "data.sources")
    cfg = ConfigDict({"seq_len": 4096, "strict": True, "prefetch": 2, "sources": srcs, "eval_sources": ConfigDict()})
    with make_pipeline(cfg, tok, global_batch_size=2, seed=0, shuffle=False, repeat=False) as it:
        docs = segments(it)
    want = [auto.apply_chat_template(m, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
            for m in convs]
    assert max(len(w["input_ids"]) for w in want) <= 4096  # none truncated
    assert len(docs) == len(want) == 40
    for (ids, mask), w in zip(docs, want):
        assert ids == list(w["input_ids"]) and mask == list(w["assistant_masks"])


def segments(it) -> list[tuple[list[int], list[int]]]:
    """(ids, loss mask) of every packed document of every row, in order."""
    docs = []
    for b in it:
        for row in range(len(b["segment_ids"])):
            seg = b["segment_ids"][row]
            for s in range(1, int(seg.max()) + 1):
                sel = seg == s
                docs.append((b["input_ids"][row][sel].tolist(), b["loss_mask"][row][sel].tolist()))
    return docs


def test_tokenize_pickles_and_template_errors_are_bad_records(qwen_dir):
    tok = load_tokenizer(qwen_dir)
    t = Tokenize("chat", "", tok, 512, False, "chat", "model")
    t2 = pickle.loads(pickle.dumps(t))
    rec = {"messages": conversations(1, seed=6)[0]}
    a, b = t.map(("f:1", rec)), t2.map(("f:1", rec))
    assert a["ids"].tolist() == b["ids"].tolist() and a["mask"].tolist() == b["mask"].tolist()
    assert a["ids"].dtype == np.int32 and a["mask"].dtype == np.int8
    # Qwen's template reads messages[0] of the empty prefix before an opening assistant turn
    bad = t.map(("f:2", {"messages": [{"role": "assistant", "content": "hi"}]}))
    assert bad.kind == "unknown_role" and "chat_template rejects it" in bad.detail
    with pytest.raises(TemplateRejected):
        ChatTemplate(tok, "chat").render_truncated([{"role": "assistant", "content": "hi"}], 100)


def test_errors_name_the_source_key_and_tokenizer(qwen_dir, tmp_path):
    spm = Tokenizer.load()
    with pytest.raises(DataError, match=r"^source 'sft': chat_format: model needs a tokenizer_config.json "
                                        r"chat_template.*sentencepiece") as e:
        Tokenize("chat", "", spm, 128, False, "sft", "model")
    assert "\n" not in str(e.value) and spm.model_path in str(e.value)
    Tokenize("text", "", spm, 128, False, "sft", "model")  # text sources render nothing: fine
    base = load_tokenizer(qwen_dir)
    bare = HFTokenizer(base.model_path, base._json, {k: v for k, v in base.config.items() if k != "chat_template"})
    with pytest.raises(DataError, match=r"^source 'sft': chat_format: model needs a tokenizer_config.json "
                                        r"chat_template; tokenizer .*tokenizer.json has none"):
        Tokenize("chat", "", bare, 128, False, "sft", "model")
    # raised when the pipeline is built, before any record is read
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"messages": conversations(1, seed=7)[0]}) + "\n")
    srcs = ConfigDict({"sft": {"path": str(path), "format": "chat", "chat_format": "model"}})
    validate_sources(srcs, "data.sources")
    cfg = ConfigDict({"seq_len": 128, "strict": False, "prefetch": 0, "sources": srcs, "eval_sources": ConfigDict()})
    with pytest.raises(DataError, match=r"^source 'sft': chat_format: model needs"):
        make_pipeline(cfg, spm, global_batch_size=1, seed=0)
    with pytest.raises(ConfigError, match=r"^config key 'data.sources.sft.chat_format' must be 'chatml' or 'model', "
                                          r"got 'jinja'$"):
        validate_sources(ConfigDict({"sft": {"path": "x.jsonl", "format": "chat", "chat_format": "jinja"}}),
                         "data.sources")
    # a template whose history differs from its generation prompt: the spans are unknown
    unstable = HFTokenizer(base.model_path, base._json, {
        **base.config, "chat_template": "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
                                        "{% if add_generation_prompt %}ASSISTANT> {% endif %}"})
    with pytest.raises(ChatTemplateError, match=r"^source 'sft': .*not prefix-stable"):
        ChatTemplate(unstable, "sft").render_truncated([{"role": "user", "content": "a"},
                                                        {"role": "assistant", "content": "b"}], 100)


def test_token_store_records_the_chat_format(qwen_dir, tmp_path):
    tok = load_tokenizer(qwen_dir)
    path = tmp_path / "c.jsonl"
    convs = conversations(30, seed=8)
    path.write_text("".join(json.dumps({"messages": m}) + "\n" for m in convs))

    def srcs(fmt):
        s = ConfigDict({"chat": {"path": str(path), "format": "chat", "chat_format": fmt}})
        validate_sources(s, "data.sources")
        return s

    def cfg(store, fmt):
        s = ConfigDict({"chat": {"path": str(store), "format": "chat", "chat_format": fmt}})
        validate_sources(s, "data.sources")
        return ConfigDict({"seq_len": 512, "strict": False, "prefetch": 0, "sources": s, "eval_sources": ConfigDict()})

    for built, read in (("model", "chatml"), ("chatml", "model")):
        store = tmp_path / f"store_{built}"
        build.tokenize(srcs(built), tok, str(store), seq_len=512, strict=False, log=lambda m: None)
        man = build.finalize(srcs(built), tok, str(store), seq_len=512)
        assert man["sources"]["chat"]["chat_format"] == built
        with pytest.raises(DataError, match=rf"^source 'chat': token store .* rendered with chat_format='{built}', "
                                            rf"the config says chat_format='{read}'"):
            make_pipeline(cfg(store, read), tok, global_batch_size=1, seed=0)
        # read as built: the documents Tokenize makes on the fly
        t = Tokenize("chat", "", tok, 512, False, "chat", built)
        want = [t.map(("x", {"messages": m})) for m in convs]
        with make_pipeline(cfg(store, built), tok, global_batch_size=1, seed=0, shuffle=False, repeat=False) as it:
            got = segments(it)
        assert [g[0] for g in got] == [w["ids"].tolist() for w in want]
        assert [g[1][1:] for g in got] == [w["mask"].tolist()[1:] for w in want]
    # a rebuild with the other chat_format redoes the units rather than keeping the stale ones
    store = tmp_path / "store_model"
    assert build.tokenize(srcs("chatml"), tok, str(store), seq_len=512, strict=False, log=lambda m: None)["tokenized"] == 1
