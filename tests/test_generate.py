"""The decode engine: batched greedy decoding equals transformers' generate on each prompt
alone; sampling options; stops; one compile per shape bucket; a sharded model decodes the same
tokens; the CLI streams and rejects bad flags; chat prompts are apply_chat_template's ids of the
model's own template, and a base model has no chat."""

import shutil

import jax
import numpy as np
import pytest
import torch

import easylemur
from chat_models import STYLES, chat_model_dir, prompts
from easylemur.generate.api import LoadedModel
from easylemur.errors import run_cli
from easylemur.generate.cli import main
from easylemur.generate.engine import GenerateError
from easylemur.tokenizer.spm import Tokenizer
from hf_models import make_hf_model

PROMPTS = [[5, 17, 300, 2, 41], [7], list(range(3, 40))]  # 3 rows (bucket 4: one filler row), lengths 5, 1, 37


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("gqa")
    hf = make_hf_model(num_key_value_heads=2)
    hf.save_pretrained(path)
    return path, hf


@pytest.fixture(scope="module")
def model(hf_dir):
    # One model for the module: its decoder keeps the compiled programs between tests.
    return easylemur.load(hf_dir[0])


def test_batched_greedy_equals_transformers_alone(hf_dir, model):
    _, hf = hf_dir
    ours = model.generate(PROMPTS, max_new_tokens=12, stop_ids=[])
    for p, got in zip(PROMPTS, ours):
        ref = hf.generate(torch.tensor([p]), max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=0)
        assert got == ref[0, len(p):].tolist()


@pytest.mark.slow
def test_top_k_1_equals_greedy(model):
    greedy = model.generate(PROMPTS, max_new_tokens=12, stop_ids=[])
    assert model.generate(PROMPTS, max_new_tokens=12, temperature=1.0, top_k=1, stop_ids=[]) == greedy
    # top_p that keeps only the most likely token is greedy too
    assert model.generate(PROMPTS, max_new_tokens=12, temperature=1.0, top_p=1e-6, stop_ids=[]) == greedy


@pytest.mark.slow
def test_seeded_sampling_reproducible_and_seed_dependent(model):
    kw = dict(max_new_tokens=12, temperature=1.0, stop_ids=[])
    a = model.generate(PROMPTS, seed=1, **kw)
    assert model.generate(PROMPTS, seed=1, **kw) == a
    assert model.generate(PROMPTS, seed=2, **kw) != a
    assert model.generate(PROMPTS, seed=1, top_k=5, top_p=0.9, **kw) != a
    # per-row seeds: a row samples the same tokens alone or in any batch
    batch = model.generate(PROMPTS, seed=[11, 12, 13], **kw)
    assert model.generate([PROMPTS[1]], seed=[12], **kw) == [batch[1]]


def test_stop_id_ends_its_row_only(model):
    free = model.generate(PROMPTS, max_new_tokens=8, stop_ids=[])
    stop = free[0][3]
    got = model.generate(PROMPTS, max_new_tokens=8, stop_ids=[stop])
    for row, g in zip(free, got):
        assert g == (row[: row.index(stop)] if stop in row else row)


def test_second_call_with_seen_shapes_compiles_nothing(model):
    compiles = []

    def listener(event, duration, **kw):
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(event)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        model.generate([[1, 2, 3], [4, 5]], max_new_tokens=10, temperature=0.7, top_p=0.9, seed=3)
        first = len(compiles)
        # same buckets (batch 2, prompt <= 16, new tokens <= 16), other values
        model.generate([[9] * 14, [8]], max_new_tokens=16, temperature=1.3, top_k=4, seed=5, stop_ids=[7])
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert first > 0 and len(compiles) == first


def test_mesh_2x2x2_generates_the_same_tokens(hf_dir, model):
    sharded = easylemur.load(hf_dir[0], mesh="data:2,fsdp:2,tensor:2")
    emb = sharded.params["embed_tokens"]["embedding"]
    assert len(emb.sharding.device_set) == 8
    assert sharded.generate(PROMPTS, max_new_tokens=12, stop_ids=[]) == model.generate(PROMPTS, max_new_tokens=12,
                                                                                           stop_ids=[])


def test_bad_arguments_are_input_errors(model):
    with pytest.raises(GenerateError, match="empty"):
        model.generate([[1], []], max_new_tokens=4)
    with pytest.raises(GenerateError, match="outside the vocabulary"):
        model.generate([[1, 5000]], max_new_tokens=4)
    with pytest.raises(GenerateError, match="max_new_tokens"):
        model.generate([[1]], max_new_tokens=0)
    with pytest.raises(GenerateError, match="list of prompts"):
        model.generate([1, 2, 3], max_new_tokens=4)


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory):
    """An HF dir with the shipped ChatML tokenizer and a random model of its vocabulary."""
    path = tmp_path_factory.mktemp("chat")
    tok = Tokenizer.load()
    make_hf_model(vocab_size=tok.vocab_size, num_key_value_heads=2).save_pretrained(path)
    shutil.copy(tok.model_path, path / "tokenizer.model")
    return path


def test_chat_stops_on_im_end(chat_dir):
    m = easylemur.load(chat_dir)
    tok = m.tokenizer
    conv = [{"role": "user", "content": "Write add."}]
    from easylemur.chat.chatml import render_prompt

    prompt = render_prompt(conv, tok)
    free = m.generate([prompt], max_new_tokens=8, stop_ids=[])[0]
    target = free[2]
    assert tok.im_end_id not in free[:3] and tok.eos_id not in free[:3]
    # Swap the LM-head columns of <|im_end|> and `target`: the model now says <|im_end|> exactly
    # where it said `target`.
    params = jax.tree.map(lambda x: x, m.params)
    k = np.array(params["lm_head"]["kernel"])
    k[:, [target, tok.im_end_id]] = k[:, [tok.im_end_id, target]]
    params["lm_head"]["kernel"] = k
    swapped = LoadedModel(m.config, params, tok, str(chat_dir))
    assert swapped.generate([prompt], max_new_tokens=8)[0] == free[: free.index(target)]
    assert swapped.chat(conv, max_new_tokens=8) == tok.decode(free[: free.index(target)])


def test_cli_streams_the_completion_and_rejects_zero_tokens(chat_dir, capsys):
    m = easylemur.load(chat_dir)
    expected = m.complete("def f(x):", max_new_tokens=6, stop_ids=[])
    assert run_cli(main, ["--checkpoint", str(chat_dir), "--prompt", "def f(x):", "--max-new-tokens", "6"]) == 0
    out = capsys.readouterr().out
    # default stops (EOS, <|im_end|>) may end it sooner than the free run
    assert out.startswith("def f(x):") and expected.startswith(out[len("def f(x):"):].rstrip("\n"))
    assert run_cli(main, ["--checkpoint", str(chat_dir), "--prompt", "x", "--max-new-tokens", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--max-new-tokens 0" in err


@pytest.mark.parametrize("style", STYLES)
def test_chat_prompt_ids_equal_apply_chat_template(style, tmp_path_factory):
    """`LoadedModel.chat` (and so generate --chat, local chat evals) prompts a model with its
    tokenizer's own template exactly as transformers does, on 40 random conversations."""
    from transformers import AutoTokenizer

    d = chat_model_dir(tmp_path_factory, style)
    m, auto = easylemur.load(d), AutoTokenizer.from_pretrained(str(d))
    assert m.chat_template == auto.chat_template
    for conv in prompts(40, seed=3):
        assert m.chat_prompt_ids(conv) == list(auto.apply_chat_template(conv, add_generation_prompt=True,
                                                                        return_dict=False)), conv


def test_cli_chat_answers_as_transformers_does(tmp_path_factory, capsys):
    """generate --chat on a Llama-3-template model: the reply is transformers' greedy reply to
    apply_chat_template's prompt (system message included), stopped at <|eot_id|>."""
    from transformers import AutoTokenizer, LlamaForCausalLM

    d = chat_model_dir(tmp_path_factory, "llama3")
    conv = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Write add(a, b) in Python."}]
    ids = AutoTokenizer.from_pretrained(str(d)).apply_chat_template(conv, add_generation_prompt=True, return_dict=False)
    hf = LlamaForCausalLM.from_pretrained(str(d)).eval()
    tok = easylemur.tokenizer.load_tokenizer(d)
    stop = tok.piece_to_id("<|eot_id|>")
    ref = hf.generate(torch.tensor([ids]), max_new_tokens=6, do_sample=False, eos_token_id=stop, pad_token_id=stop)
    reply = [t for t in ref[0, len(ids):].tolist() if t != stop]
    assert len(reply) >= 3  # something to compare: the model does not stop at once
    assert run_cli(main, ["--checkpoint", str(d), "--chat", "--system", "Be brief.", "--prompt", conv[1]["content"],
                          "--max-new-tokens", "6"]) == 0
    assert capsys.readouterr().out == tok.decode(reply) + "\n"


def test_cli_chat_with_a_base_model_is_bad_input(chat_dir, tmp_path, capsys):
    # chat_dir's tokenizer has no chat template: a base model, refused before anything is read or decoded
    assert run_cli(main, ["--checkpoint", str(chat_dir), "--chat", "--prompt", "hi"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no chat template" in err and "--chat-template FILE" in err, err
    assert run_cli(main, ["--checkpoint", str(chat_dir), "--chat", "--chat-template", str(tmp_path / "none.jinja")]) == 2
    assert "--chat-template" in capsys.readouterr().err


def test_chat_template_rule_is_the_exports(tmp_path_factory):
    """A checkpoint chats in the template its to-hf export writes: chat_template_for (THE rule)
    equals convert.to_hf.export_chat_template (no flags, which asks it) for every meta chat_format (absent, null,
    chatml, model, a from-hf kept template) on a sentencepiece ChatML tokenizer and on HF
    tokenizers with and without their own template."""
    from easylemur.checkpoint.model_meta import ModelCheckpoint
    from easylemur.convert.to_hf import export_chat_template
    from easylemur.chat.choice import chat_template_for
    from easylemur.tokenizer import load_tokenizer

    qwen = load_tokenizer(chat_model_dir(tmp_path_factory, "qwen"))
    bare = load_tokenizer(chat_model_dir(tmp_path_factory, "llama3"))
    bare.config = {k: v for k, v in bare.config.items() if k != "chat_template"}  # an HF tokenizer without one
    metas = [{}, {"chat_format": None}, {"chat_format": "chatml"}, {"chat_format": "model"},
             {"chat_format": "model", "chat_template": "{{ messages[0]['content'] }}"}]
    seen = set()
    for tok in (Tokenizer.load(), qwen, bare, None):
        for meta in metas:
            saved = ModelCheckpoint(tmp_path_factory.getbasetemp(), 0, meta)
            got, want = chat_template_for(saved, tok), export_chat_template(saved, tok)
            assert got[0] == want[0], (tok and tok.model_path, meta, got, want)
            seen.add(got[0])
            if set(meta) == {"chat_format"}:  # a training run's weights: the format its checkpoints record
                assert chat_template_for(None, tok, meta["chat_format"])[0] == got[0]
    assert len(seen) >= 4  # None, ChatML's (with and without BOS), Qwen's, the kept one
