"""Every layout the Hub's chat models ship chats with its own template, with the ids transformers
gives (tests/chat_layouts.py builds them: sentencepiece + tokenizer.json, legacy or not;
sentencepiece alone; two templates in one directory; named templates; BOS/EOS only in
special_tokens_map.json). On each path, for multi-turn, system, unicode, special-token text and
empty-content conversations, the prompt ids equal `AutoTokenizer.from_pretrained(dir)
.apply_chat_template(msgs, add_generation_prompt=True)`, and a conversation its template refuses
is refused: `easylemur.load` (generate --chat and the task evals chat through it), the server
(what `eval suite --checkpoint` evaluates through), lm-eval's --apply_chat_template, and a
checkpoint made by `convert from-hf` and its `to-hf` export. generate --chat streams a reply of
byte tokens as it decodes."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from transformers import AutoTokenizer

import easylemur
from chat_layouts import LAYOUTS, build_layout
from chat_models import prompts
from easylemur.errors import InputError, run_cli

CONVERSATIONS = prompts(24, seed=11) + [
    [{"role": "user", "content": ""}],
    [{"role": "system", "content": "Réponds en français 🦙"}, {"role": "user", "content": "  x = 1  \n"}],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": ""}, {"role": "user", "content": "b"}],
    [{"role": "assistant", "content": "first"}, {"role": "user", "content": "b"}],  # a bad role order
]


@pytest.fixture(scope="module")
def layouts(built_once, llama2_like_spm):
    def build(root):
        for layout in LAYOUTS:
            build_layout(root / layout, layout, llama2_like_spm)

    root = built_once("chat_layouts", build)
    return {layout: root / layout for layout in LAYOUTS}


def _want(auto, conv):
    """apply_chat_template's ids, None when its template refuses the conversation."""
    try:
        return list(auto.apply_chat_template(conv, add_generation_prompt=True, return_dict=False))
    except Exception:  # the template's raise_exception (jinja2's TemplateError)
        return None


def _ours(ids_of, conv):
    try:
        return ids_of(conv)
    except InputError as e:
        assert "\n" not in str(e) and "rejects it" in str(e), e
        return None


def _assert_equal_ids(ids_of, auto, where):
    refused = 0
    for conv in CONVERSATIONS:
        want = _want(auto, conv)
        refused += want is None
        assert _ours(ids_of, conv) == want, (where, conv)
    assert len(CONVERSATIONS) - refused >= 8, where  # enough render (Mistral's and Gemma's refuse a system role)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_api_server_and_lm_eval_prompt_as_transformers(layout, layouts):
    from easylemur.eval.backends.harness import EasylemurLM
    from easylemur.serve.server import RequestError, Server

    d = layouts[layout]
    auto = AutoTokenizer.from_pretrained(str(d))
    model = easylemur.load(d)
    assert model.chat_template == auto.chat_template if isinstance(auto.chat_template, str) else \
        model.chat_template == auto.chat_template["default"]
    _assert_equal_ids(model.chat_prompt_ids, auto, f"{layout}: easylemur.load")

    srv = Server(model, port=0, slots=1)
    try:
        def server_ids(conv):
            try:
                return srv.service.chat_ids(conv)
            except RequestError as e:  # a 400 naming the template's refusal
                raise InputError(str(e)) from None

        _assert_equal_ids(server_ids, auto, f"{layout}: the server")
    finally:
        srv.close()

    # lm-eval's --apply_chat_template: the text apply_chat_template renders, and its ids (every
    # template here writes BOS, so the hf backend adds none: tok_encode's has_bos_prefix rule)
    lm = EasylemurLM(loaded=model)
    for conv in CONVERSATIONS:
        if _want(auto, conv) is None:
            continue
        text = lm.apply_chat_template(conv)
        assert text == auto.apply_chat_template(conv, add_generation_prompt=True, tokenize=False), (layout, conv)
        assert lm.tok_encode(text) == _want(auto, conv), (layout, conv)


@pytest.mark.parametrize("layout", ["llama2_chat", "spm_only", "two_templates", "specials_map"])
def test_from_hf_and_to_hf_keep_the_template_and_its_ids(layout, layouts, tmp_path):
    """A checkpoint of the directory chats as the directory does (the eval suite's --checkpoint
    path serves it), and its export renders the same ids under transformers."""
    from easylemur.convert.from_hf import from_hf
    from easylemur.convert.to_hf import to_hf

    d = layouts[layout]
    auto = AutoTokenizer.from_pretrained(str(d))
    from_hf(d, tmp_path / "ckpt", log=lambda m: None)
    ckpt = easylemur.load(tmp_path / "ckpt")
    _assert_equal_ids(ckpt.chat_prompt_ids, auto, f"{layout}: from-hf checkpoint")
    to_hf(tmp_path / "ckpt", tmp_path / "export", log=lambda m: None)
    exported = AutoTokenizer.from_pretrained(str(tmp_path / "export"))
    _assert_equal_ids(lambda c: _want(exported, c) or _raise(), auto, f"{layout}: to-hf export")


def _raise():
    raise InputError("the chat template rejects it")


def test_generate_chat_streams_the_reply_and_names_a_bad_template_file(layouts, tmp_path, capsys):
    """generate --chat on the Llama-2-chat layout: stdout is the decoded greedy reply to
    transformers' prompt (a random model of a byte-fallback vocabulary: many byte tokens, some
    not valid UTF-8), streamed token by token; a --chat-template that does not compile is blamed
    by its file name."""
    import torch
    from transformers import LlamaForCausalLM

    from easylemur.generate.cli import main
    from easylemur.tokenizer import load_tokenizer

    d = layouts["llama2_chat"]
    conv = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Write add(a, b) in Python."}]
    ids = AutoTokenizer.from_pretrained(str(d)).apply_chat_template(conv, add_generation_prompt=True, return_dict=False)
    hf = LlamaForCausalLM.from_pretrained(str(d)).eval()
    ref = hf.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False, eos_token_id=2, pad_token_id=2)
    reply = [t for t in ref[0, len(ids):].tolist() if t != 2]
    tok = load_tokenizer(d)
    assert sum(tok.id_to_piece(t).startswith("<0x") for t in reply) >= 4  # bytes to hold back and join
    assert run_cli(main, ["--checkpoint", str(d), "--chat", "--system", "Be brief.", "--prompt", conv[1]["content"],
                          "--max-new-tokens", "24"]) == 0
    assert capsys.readouterr().out == tok.decode(reply) + "\n"

    bad = tmp_path / "bad.jinja"
    bad.write_text("{% for m in messages %}{{ m['content'] }")
    assert run_cli(main, ["--checkpoint", str(d), "--chat", "--chat-template", str(bad), "--prompt", "hi"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--chat-template {bad}" in err and "does not compile" in err, err
    assert str(d) not in err


def test_server_streams_byte_tokens_as_its_whole_reply(layouts):
    """The server's streamed chat reply, joined, equals its non-streamed reply on a model whose
    replies are full of byte tokens."""
    from easylemur.serve.server import Server

    srv = Server(easylemur.load(layouts["llama2_chat"]), port=0, slots=2)
    srv.start()
    try:
        body = {"messages": [{"role": "user", "content": "Say something in Japanese."}], "max_tokens": 32,
                "temperature": 0}
        whole = _post(srv, body)["choices"][0]["message"]["content"]
        assert "\ufffd" in whole or any(ord(c) > 127 for c in whole)  # bytes were decoded
        streamed = "".join(_stream(srv, body))
        assert streamed == whole
    finally:
        srv.shutdown()


def _post(srv, body) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{srv.port}/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def _stream(srv, body) -> list[str]:
    req = urllib.request.Request(f"http://127.0.0.1:{srv.port}/v1/chat/completions",
                                 data=json.dumps({**body, "stream": True}).encode(),
                                 headers={"Content-Type": "application/json"})
    pieces = []
    with urllib.request.urlopen(req, timeout=120) as r:
        for line in r:
            line = line.strip()
            if line.startswith(b"data: ") and line != b"data: [DONE]":
                delta = json.loads(line[6:])["choices"][0]["delta"]
                pieces.append(delta.get("content") or "")
    return pieces


def test_a_template_file_chats_a_sentencepiece_base_model_as_transformers(layouts, tmp_path):
    """`--chat-template FILE` on a directory with tokenizer.model alone and no template of its own:
    the server starts and prompts as apply_chat_template(chat_template=that text) does."""
    import shutil

    from chat_layouts import LLAMA2_CHAT_TEMPLATE
    from easylemur.serve.server import Server

    d = tmp_path / "base"
    shutil.copytree(layouts["spm_only"], d)
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    del cfg["chat_template"]
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    auto = AutoTokenizer.from_pretrained(str(d))
    srv = Server(easylemur.load(d), port=0, slots=1, chat_template=LLAMA2_CHAT_TEMPLATE,
                 chat_template_why="--chat-template llama2.jinja")
    try:
        for conv in CONVERSATIONS[:12]:
            want = auto.apply_chat_template(conv, chat_template=LLAMA2_CHAT_TEMPLATE, add_generation_prompt=True,
                                            return_dict=False)
            assert srv.service.chat_ids(conv) == list(want), conv
    finally:
        srv.close()


@pytest.mark.parametrize("decoder", [False, True])
def test_special_tokens_as_transformers_reads_them(decoder, layouts, tmp_path):
    """BOS/EOS from special_tokens_map.json over tokenizer_config.json's, unless the config has
    added_tokens_decoder (then transformers reads no map): the ids equal AutoTokenizer's."""
    import shutil

    from easylemur.tokenizer.hf import HFTokenizer

    d = tmp_path / "tok"
    shutil.copytree(layouts["two_templates"], d)
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>", "eos_token": "<|pad|>"}
    if decoder:
        vocab = json.loads((d / "tokenizer.json").read_text())
        cfg["added_tokens_decoder"] = {str(t["id"]): {k: v for k, v in t.items() if k != "id"}
                                       for t in vocab["added_tokens"]}
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    (d / "special_tokens_map.json").write_text(json.dumps({"eos_token": "<|end_of_text|>"}))
    ours, auto = HFTokenizer.load(d), AutoTokenizer.from_pretrained(str(d))
    assert (ours.bos_id, ours.eos_id) == (auto.bos_token_id, auto.eos_token_id)
    assert ours.id_to_piece(ours.eos_id) == ("<|pad|>" if decoder else "<|end_of_text|>")


def test_text_prompts_are_encoded_as_transformers_encodes_them(layouts):
    """/v1/completions' text prompts on a legacy sentencepiece + tokenizer.json repo: BOS and the
    ids transformers' tokenizer gives (a leading space, special-token text, text after it)."""
    from easylemur.serve.server import Server

    d = layouts["llama2_chat"]
    auto = AutoTokenizer.from_pretrained(str(d))
    srv = Server(easylemur.load(d), port=0, slots=1)
    try:
        for text in (" leading space", "a</s> b<s>[INST] c", "def f(x):\n    return x  # ünï"):
            jobs, _, _ = srv.service.completion_jobs({"prompt": text, "max_tokens": 1})
            assert jobs[0].ids == auto(text)["input_ids"], text
    finally:
        srv.close()
