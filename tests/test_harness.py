"""`--model easylemur` for lm-evaluation-harness, judged by lm-eval's own `hf` backend on the
HF directory of the same tiny random model (the shipped ChatML tokenizer, no downloads):
per-item loglikelihoods of a multiple-choice task (one row longer than the context, cut on the
left as HFLM cuts it), rolling loglikelihoods with exactly one BOS (the training loss of the
document; hf with add_bos_token=True puts two), greedy generations with stop strings, the
chat template (ChatML's; Qwen2.5's and Llama-3's own on models that carry them: the prompts are
apply_chat_template's ids and the --apply_chat_template loglikelihoods `hf`'s), few compiled
programs per task, model_args and the CLI hand-over."""

import copy
import json
import subprocess
import sys

import jax.numpy as jnp
import pytest

lm_eval = pytest.importorskip("lm_eval")
pytest.importorskip("accelerate")  # lm-eval's hf backend, the judge

from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.api.registry import get_model  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

from easylemur.errors import InputError  # noqa: E402
from easylemur.eval.backends.harness import EasylemurLM  # noqa: E402
from easylemur.ops.loss import token_loss_sum  # noqa: E402
from easylemur.tokenizer.spm import Tokenizer  # noqa: E402
from chat_models import STYLES, chat_model_dir, prompts  # noqa: E402
from hf_models import make_hf_model  # noqa: E402

TASKS = ["el_mc", "el_ppl", "el_gen"]
MC = [
    {"question": "def add(a, b):\n    return", "choices": [" a + b", " a - b", " None"], "answer": 0},
    {"question": "Question: what is 2 + 2?\nAnswer:", "choices": [" 4", " five", " 22 and more"], "answer": 0},
    {"question": "import os\nprint(", "choices": ["os.getcwd())", "'hi')"], "answer": 1},
    # longer than max_length (256) + 1 with its answer: HFLM keeps the last 257 tokens
    {"question": "x = 1\n" * 90 + "y =", "choices": [" x", " 2"], "answer": 0},
]
DOCS = [
    {"text": "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n"},
    {"text": "Lemurs live on Madagascar."},
    {"text": "The quick brown fox jumps over the lazy dog. " * 25},  # two windows of 256
]
GEN = [{"prompt": "def square(x):\n", "answer": "return x * x"}, {"prompt": "Hello", "answer": "world"},
       {"prompt": "class A:\n    def", "answer": "x"}]


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    """An HF dir: a random model of the shipped tokenizer's vocabulary, that tokenizer in HF
    form (add_bos_token, ChatML template) and both stop ids in generation_config.json."""
    path = tmp_path_factory.mktemp("harness_model")
    tok = Tokenizer.load()
    model = make_hf_model(vocab_size=tok.vocab_size, max_position_embeddings=256, bos_token_id=tok.bos_id,
                          eos_token_id=tok.eos_id, pad_token_id=tok.pad_id)
    model.generation_config.eos_token_id = [tok.eos_id, tok.im_end_id]
    model.save_pretrained(path)
    tok.save_hf(path)
    return path


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("harness_tasks")
    for name, rows in (("mc", MC), ("docs", DOCS), ("gen", GEN)):
        (d / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    def head(task, data):
        return (f"task: {task}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {d / data}\n"
                "test_split: test\n")

    (d / "el_mc.yaml").write_text(head("el_mc", "mc.jsonl") + "output_type: multiple_choice\n"
                                  'doc_to_text: "{{question}}"\ndoc_to_choice: "{{choices}}"\ndoc_to_target: "{{answer}}"\n'
                                  "metric_list:\n  - metric: acc\n")
    (d / "el_ppl.yaml").write_text(head("el_ppl", "docs.jsonl") + "output_type: loglikelihood_rolling\n"
                                   'doc_to_text: ""\ndoc_to_target: "{{text}}"\n'
                                   "metric_list:\n  - metric: word_perplexity\n  - metric: bits_per_byte\n")
    (d / "el_gen.yaml").write_text(head("el_gen", "gen.jsonl") + "output_type: generate_until\n"
                                   'doc_to_text: "{{prompt}}"\ndoc_to_target: "{{answer}}"\n'
                                   'generation_kwargs:\n  until: ["\\n\\n", "."]\n  max_gen_toks: 12\n  do_sample: false\n'
                                   "metric_list:\n  - metric: exact_match\n")
    return d


@pytest.fixture(scope="module")
def ours(hf_dir):
    return get_model("easylemur").create_from_arg_string(f"path={hf_dir},batch_size=4")


@pytest.fixture(scope="module")
def hflm(hf_dir):
    from lm_eval.models.huggingface import HFLM

    return HFLM(pretrained=str(hf_dir), dtype="float32", device="cpu", batch_size=4)


@pytest.fixture(scope="module")
def task_manager(task_dir):
    return TaskManager(include_path=str(task_dir), include_defaults=False)  # the local tasks alone: lm-eval's own take 6 s


@pytest.fixture(scope="module")
def results(ours, hflm, task_manager):
    tm = task_manager
    out = {}
    for name, lm in (("ours", ours), ("hf", hflm)):
        r = lm_eval.simple_evaluate(model=lm, tasks=TASKS, task_manager=tm, log_samples=True)
        out[name] = {t: [s["resps"] for s in sorted(r["samples"][t], key=lambda s: s["doc_id"])] for t in TASKS}
        out[name]["results"] = r["results"]
    return out


def _close(a: float, b: float, rel: float = 1e-4) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b))


def test_registered_and_not_imported_by_the_rest_of_easylemur():
    assert get_model("easylemur") is EasylemurLM
    code = "import sys, easylemur, easylemur.eval.cli, easylemur.generate.api; sys.exit('lm_eval' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


@pytest.mark.slow
def test_multiple_choice_loglikelihoods_equal_hf(results, ours):
    got, ref = results["ours"]["el_mc"], results["hf"]["el_mc"]
    assert [len(x) for x in got] == [len(doc["choices"]) for doc in MC]
    for doc_got, doc_ref in zip(got, ref):
        for [(ll, greedy)], [(ll_ref, greedy_ref)] in zip(doc_got, doc_ref):
            assert _close(ll, ll_ref), (ll, ll_ref)
            assert greedy == greedy_ref
    assert results["ours"]["results"]["el_mc"]["acc,none"] == results["hf"]["results"]["el_mc"]["acc,none"]
    # the whole run (loglikelihood and rolling rows, 128 to 257 tokens) compiled one scoring
    # program per bucket: batch 4 x {128, 256}
    assert ours.score_shapes == {(4, 128), (4, 256)}
    assert ours._score._cache_size() == 2


@pytest.mark.slow
def test_rolling_has_exactly_one_bos(results, ours, hf_dir):
    from lm_eval.models.huggingface import HFLM

    got = [r[0][0] for r in results["ours"]["el_ppl"]]
    ref_two_bos = [r[0][0] for r in results["hf"]["el_ppl"]]
    tok = ours.tok
    for doc, value, two_bos in zip(DOCS, got, ref_two_bos):
        ids = [tok.bos_id] + tok.encode(doc["text"])
        if len(ids) - 1 <= ours.max_length:  # one window: minus the training loss of the document
            batch = {"input_ids": jnp.asarray([ids]), "segment_ids": jnp.ones((1, len(ids)), jnp.int32),
                     "loss_mask": jnp.ones((1, len(ids)), jnp.int32)}
            loss, count = token_loss_sum(ours.model.logits(ids), batch)
            assert int(count) == len(ids) - 1
            assert _close(value, -float(loss)), (value, -float(loss))
        # hf with the export's add_bos_token=True scores BOS after BOS too (lm-evaluation-harness#3333)
        assert not _close(value, two_bos)
    # lm-eval's hf backend without the tokenizer's BOS has our definition, windows included
    one_bos = HFLM(pretrained=str(hf_dir), dtype="float32", device="cpu", batch_size=4, add_bos_token=False)
    reqs = [Instance("loglikelihood_rolling", {}, (d["text"],), i) for i, d in enumerate(DOCS)]
    for value, ref in zip(got, one_bos.loglikelihood_rolling(reqs, disable_tqdm=True)):
        assert _close(value, ref), (value, ref)
    assert len(tok.encode(DOCS[2]["text"])) > ours.max_length  # the last document needed two windows


def test_greedy_generations_equal_hf(results, ours, hflm):
    got = [r[0] for r in results["ours"]["el_gen"]]
    assert got == [r[0] for r in results["hf"]["el_gen"]]
    assert all("." not in g and "\n\n" not in g for g in got) and any(got)
    assert len(ours.model.decoder.programs) == 1  # 3 prompts, batch bucket 4, one prompt/new-token bucket
    # is_greedy: the model's own first two greedy tokens as a continuation
    prompts = [g["prompt"] for g in GEN]
    firsts = ours.model.generate([ours.tok_encode(p) for p in prompts], max_new_tokens=2, stop_ids=[])
    reqs = [Instance("loglikelihood", {}, (p, ours.tok.decode(f)), i) for i, (p, f) in enumerate(zip(prompts, firsts))]
    mine, theirs = ours.loglikelihood(reqs, disable_tqdm=True), hflm.loglikelihood(reqs, disable_tqdm=True)
    assert [g for _, g in mine] == [g for _, g in theirs] and sum(g for _, g in mine) >= 2
    assert all(_close(a, b) for (a, _), (b, _) in zip(mine, theirs))


def test_chat_template_is_easylemurs_chatml(ours, hflm):
    from easylemur.chat.chatml import render_prompt

    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2 + 2?"}]
    text = ours.apply_chat_template(chat)
    assert ours.tok_encode(text) == render_prompt(chat, ours.tok) == hflm.tok_encode(hflm.apply_chat_template(chat))
    # a prefilled assistant turn stays open, as HF's continue_final_message leaves it
    prefilled = chat + [{"role": "assistant", "content": "The answer is"}]
    assert ours.tok_encode(ours.apply_chat_template(prefilled, add_generation_prompt=False)) == hflm.tok_encode(
        hflm.apply_chat_template(prefilled, add_generation_prompt=False))
    assert ours.chat_template(True) == hflm.chat_template(True)
    # a base model (no chat template) cannot be evaluated with --apply_chat_template
    plain = copy.copy(ours)
    plain.model = copy.copy(ours.model)
    plain.model.use_chat_template(None, "a base model")
    with pytest.raises(InputError, match="no chat template"):
        plain.apply_chat_template(chat)


def test_model_args_mesh_and_errors(hf_dir, ours, monkeypatch):
    import easylemur.eval.backends.harness as harness

    monkeypatch.setattr(harness, "HEAD_CHUNK_BYTES", 8 * 16 * 4096 * 4)  # the LM head 16 positions at a time
    # simple_evaluate's "a=b,c=d" string splits the mesh spec at its commas: joined back
    sharded = EasylemurLM.create_from_arg_string(f"path={hf_dir},mesh=data:2,fsdp:2,tensor:2,batch_size=8,max_length=64")
    assert sharded.model.mesh.shape == {"data": 2, "fsdp": 2, "tensor": 2} and sharded.max_length == 64
    reqs = [Instance("loglikelihood", {}, (d["question"], d["choices"][0]), i) for i, d in enumerate(MC)]
    got, ref = sharded.loglikelihood(reqs, disable_tqdm=True), ours.loglikelihood(reqs, disable_tqdm=True)
    for (a, ga), (b, gb) in zip(got[:3], ref[:3]):
        assert _close(a, b) and ga == gb
    assert not _close(got[3][0], ref[3][0])  # cut to its last 65 tokens there
    assert sharded.score_shapes == {(8, 64)}
    with pytest.raises(InputError, match="'colour'"):
        EasylemurLM.create_from_arg_string(f"path={hf_dir},colour=red")
    with pytest.raises(InputError, match="max_length=4096"):
        EasylemurLM(path=str(hf_dir), max_length=4096)
    with pytest.raises(InputError, match="'repetition_penalty'"):
        ours.generate_until([Instance("generate_until", {}, ("hi", {"until": ["\n"], "repetition_penalty": 1.1}), 0)])


@pytest.fixture(scope="module", params=STYLES)
def styled(request, tmp_path_factory):
    """(ours, hf) over a model whose tokenizer carries its own chat template (chat_models.py)."""
    from lm_eval.models.huggingface import HFLM

    d = chat_model_dir(tmp_path_factory, request.param)
    ours = EasylemurLM(path=str(d), batch_size=4, max_length=128)
    return request.param, d, ours, HFLM(pretrained=str(d), dtype="float32", device="cpu", batch_size=4, max_length=128)


MAX_DLL = {}  # the largest |ours - hf| loglikelihood with --apply_chat_template, per style (the report's figure)


@pytest.mark.slow
def test_apply_chat_template_is_the_models_own(styled, task_manager):
    """With the model's own template (Qwen2.5's default system prompt, Llama-3's headers and the
    BOS its template writes): lm-eval's rendered prompts tokenize to apply_chat_template's ids,
    a prefilled assistant turn stays open as HFLM leaves it, and a multiple-choice task run with
    --apply_chat_template scores every choice as lm-eval's `hf` backend does."""
    from transformers import AutoTokenizer

    style, d, ours, hflm = styled
    auto = AutoTokenizer.from_pretrained(str(d))
    assert ours.chat_template(True) == hflm.chat_template(True) == auto.chat_template
    for conv in prompts(30, seed=4):
        want = list(auto.apply_chat_template(conv, add_generation_prompt=True, return_dict=False))
        assert ours.tok_encode(ours.apply_chat_template(conv)) == want == hflm.tok_encode(hflm.apply_chat_template(conv))
        open_turn = conv + [{"role": "assistant", "content": "The answer is"}]
        assert ours.apply_chat_template(open_turn, False) == hflm.apply_chat_template(open_turn, False)
    tm = task_manager
    got = {}
    for name, lm in (("ours", ours), ("hf", hflm)):
        r = lm_eval.simple_evaluate(model=lm, tasks=["el_mc"], task_manager=tm, log_samples=True,
                                    apply_chat_template=True)
        samples = sorted(r["samples"]["el_mc"], key=lambda s: s["doc_id"])
        got[name] = [ll for s in samples for [(ll, _)] in s["resps"]]
        assert all(s["arguments"] for s in samples)
    assert len(got["ours"]) == sum(len(doc["choices"]) for doc in MC)
    MAX_DLL[style] = max(abs(a - b) for a, b in zip(got["ours"], got["hf"]))
    assert MAX_DLL[style] <= 1e-4, (MAX_DLL, got)


@pytest.mark.slow
def test_cli_hands_over_to_lm_eval(hf_dir, task_dir, capsys, tmp_path_factory):
    from easylemur.eval.cli import main

    # --apply_chat_template on a Llama-3-template model (once exit 2: "no ChatML tokens")
    llama3 = chat_model_dir(tmp_path_factory, "llama3")
    assert main(["lm-eval", "--model", "easylemur", "--model_args", f"path={llama3},max_length=128", "--tasks", "el_mc",
                 "--include_path", str(task_dir), "--limit", "2", "--batch_size", "2", "--apply_chat_template"]) == 0
    out = capsys.readouterr().out
    assert "el_mc" in out and "acc" in out
