"""The OpenAI-compatible server (`python -m easylemur.serve`), judged by the real `openai`
client: completions and chat equal `LoadedModel` greedy output, streaming equals non-streaming,
stop strings, echo logprobs equal log_softmax of the model's logits, 400s name the field, a
full queue answers 503, and a load test (many concurrent clients, some leaving mid-stream) where
every greedy answer equals the prompt served alone and the server stays healthy. Also the slot
engine alone: requests joining a busy batch decode as they do alone. And vLLM's semantics: chat
prompts are transformers' apply_chat_template ids of the model's own template (ChatML's,
Qwen2.5's, Llama-3's), a base model's chat is a 400 unless --chat-template, an unknown model a
404, a lone surrogate or a prompt over the context a 400 naming the field, default max_tokens,
no traceback for a dropped /health."""

import json
import random
import shutil
import threading
import time
import urllib.error
import urllib.request

import jax
import numpy as np
import openai
import pytest

try:  # the HTTP library the openai client is built on (httpx2 from openai 3)
    import httpx2 as httpx
except ImportError:
    import httpx
from transformers import AutoTokenizer

import easylemur
from chat_models import STYLES, chat_model_dir, prompts
from easylemur.chat.chatml import CHAT_TEMPLATE
from easylemur.errors import InputError
from easylemur.generate.slots import SlotEngine
from easylemur.serve.cli import main as serve_main
from easylemur.serve.server import Server
from easylemur.tokenizer.spm import Tokenizer
from hf_models import make_hf_model

CALL_TIMEOUT = 60  # every client call has one: a hang fails the test instead of the suite


DEFAULT_MAX_TOKENS = 8  # the fixture server's --default-max-tokens (chat requests without max_tokens)


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory):
    """An HF dir with the shipped ChatML tokenizer as to-hf writes it for a chat model (ChatML's
    template in tokenizer_config.json) and a random model of its vocabulary (context 256)."""
    path = tmp_path_factory.mktemp("serve")
    tok = Tokenizer.load()
    make_hf_model(vocab_size=tok.vocab_size, num_key_value_heads=2).save_pretrained(path)
    tok.save_hf(path)
    return path


@pytest.fixture(scope="module")
def base_dir(chat_dir, tmp_path_factory):
    """The same model as a base model: the tokenizer without a chat template."""
    path = tmp_path_factory.mktemp("serve_base")
    for f in ("config.json", "model.safetensors"):
        shutil.copy(chat_dir / f, path / f)
    shutil.copy(Tokenizer.load().model_path, path / "tokenizer.model")
    return path


@pytest.fixture(scope="module")
def model(chat_dir):
    return easylemur.load(chat_dir)


@pytest.fixture(scope="module")
def server(model):
    srv = Server(model, port=0, slots=4, max_queue=64, name="m", default_max_tokens=DEFAULT_MAX_TOKENS)
    srv.warmup()
    srv.start()
    yield srv
    srv.shutdown()


@pytest.fixture(scope="module")
def base_server(base_dir):
    """A base model's server (served under its folder name), never warmed: what it is asked
    here is answered before any decoding."""
    srv = Server(easylemur.load(base_dir), port=0, slots=1)
    srv.start()
    yield srv
    srv.shutdown()


def _client(srv, source: str | None = None) -> openai.OpenAI:
    """An openai client of the server; `source`: the loopback address it connects from (all of
    127/8 is this machine; the server shares its queue and turns among addresses)."""
    http = openai.DefaultHttpxClient(transport=httpx.HTTPTransport(local_address=source)) if source else None
    return openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key="none", timeout=CALL_TIMEOUT,
                         max_retries=0, http_client=http)


def _post(srv, route: str, body) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{srv.port}{route}", data=data,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=CALL_TIMEOUT) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _get(srv, route: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{srv.port}{route}", timeout=CALL_TIMEOUT) as r:
        return json.loads(r.read())


def _idle(srv, seconds: float = 10.0) -> dict:
    """/health once every slot and the queue are free (a cancelled request leaves at the next step)."""
    end = time.time() + seconds
    while True:
        h = _get(srv, "/health")
        if (h["running"] == 0 and h["queued"] == 0) or time.time() > end:
            return h
        time.sleep(0.05)


@pytest.mark.slow
def test_slot_engine_joins_equal_generate_alone(model):
    prompts = [[1, 5, 17, 300, 2, 41], [1, 7], list(range(3, 40))]
    ref = model.generate(prompts, max_new_tokens=8, stop_ids=[])
    ref_sampled = model.generate(prompts, max_new_tokens=8, stop_ids=[], temperature=0.8, top_p=0.9, seed=[3, 4, 5])
    eng = SlotEngine(model.config, model.params, slots=4)
    got = {0: [], 2: [], 1: []}
    eng.prefill(0, prompts[0])
    for _ in range(3):  # slot 0 is mid-way when the others join
        got[0].append(int(eng.step().tokens[0]))
    eng.prefill(2, prompts[1])
    eng.prefill(1, prompts[2])
    while len(got[2]) < 8:
        out = eng.step()
        for s in got:
            if len(got[s]) < 8:
                got[s].append(int(out.tokens[s]))
        if len(got[0]) == 8:
            eng.release(0)
    assert [got[0], got[2], got[1]] == ref
    for s, (p, seed) in enumerate(zip(prompts, [3, 4, 5])):  # per-slot seeds: the key Decoder gives a row its own seed
        eng.prefill(s, p, temperature=0.8, top_p=0.9, seed=seed)
    eng.release(3)
    sampled = [[], [], []]
    for _ in range(8):
        out = eng.step()
        for s in range(3):
            sampled[s].append(int(out.tokens[s]))
    assert sampled == ref_sampled


@pytest.mark.slow
def test_completions_and_chat_equal_loaded_model(server, model):
    c = _client(server)
    for prompt, n in [("def f(x):", 8), ("Hello", 3), ("import numpy as np\n" * 6, 12)]:
        r = c.completions.create(model="m", prompt=prompt, max_tokens=n, temperature=0)
        assert r.choices[0].text == model.complete(prompt, max_new_tokens=n)
        assert r.choices[0].finish_reason in ("length", "stop")
    ids = [1, 5, 17, 300, 2, 41]
    r = c.completions.create(model="m", prompt=ids, max_tokens=6, temperature=0)
    assert r.choices[0].text == model.tokenizer.decode(model.generate([ids], max_new_tokens=6)[0])
    conv = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Write add."}]
    r = c.chat.completions.create(model="m", messages=conv, max_tokens=10, temperature=0)
    assert r.choices[0].message.content == model.chat(conv, max_new_tokens=10)
    assert r.choices[0].message.role == "assistant"
    assert [m.id for m in c.models.list().data] == [server.service.name] == ["m"]
    assert _get(server, "/health")["status"] == "ok"
    # the prompt is apply_chat_template's (to-hf's ChatML template, BOS written by it)
    auto = AutoTokenizer.from_pretrained(str(server.model.path))
    assert r.usage.prompt_tokens == len(auto.apply_chat_template(conv, add_generation_prompt=True, return_dict=False))


def test_stream_equals_non_stream(server):
    c = _client(server)
    for kw in [dict(prompt="def f(x):", max_tokens=12), dict(prompt="The", max_tokens=9, stop=["e"])]:
        full = c.completions.create(model="m", temperature=0, **kw).choices[0].text
        chunks = list(c.completions.create(model="m", temperature=0, stream=True, **kw))
        assert "".join(ch.choices[0].text for ch in chunks) == full
        assert chunks[-1].choices[0].finish_reason is not None
    conv = [{"role": "user", "content": "hi"}]
    full = c.chat.completions.create(model="m", messages=conv, max_tokens=10, temperature=0).choices[0].message.content
    chunks = list(c.chat.completions.create(model="m", messages=conv, max_tokens=10, temperature=0, stream=True))
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == full


def test_stop_strings_cut_the_text(server):
    c = _client(server)
    free = c.completions.create(model="m", prompt="def f(x):", max_tokens=16, temperature=0).choices[0].text
    stop = free[5:7]
    assert len(free) > 8 and stop
    for stops in (stop, [stop, "never-said"]):
        r = c.completions.create(model="m", prompt="def f(x):", max_tokens=16, temperature=0, stop=stops)
        assert r.choices[0].text == free[: free.index(stop)]
        assert r.choices[0].finish_reason == "stop"
    conv = [{"role": "user", "content": "hi"}]
    free = c.chat.completions.create(model="m", messages=conv, max_tokens=12, temperature=0).choices[0].message.content
    stop = free[3:5]
    r = c.chat.completions.create(model="m", messages=conv, max_tokens=12, temperature=0, stop=stop)
    assert r.choices[0].message.content == free[: free.index(stop)] and r.choices[0].finish_reason == "stop"


@pytest.mark.slow
def test_echo_logprobs_equal_log_softmax_of_logits(server, model):
    c = _client(server)
    prompt = "def add(a, b):\n    return a + b"
    ids = [model.tokenizer.bos_id] + model.tokenizer.encode(prompt)
    ref = np.asarray(jax.nn.log_softmax(model.logits([ids])[0], axis=-1))
    r = c.completions.create(model="m", prompt=prompt, max_tokens=0, echo=True, logprobs=1, temperature=0)
    lp = r.choices[0].logprobs
    assert r.choices[0].text == prompt
    assert len(lp.token_logprobs) == len(ids) and lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    want = ref[np.arange(len(ids) - 1), ids[1:]]
    np.testing.assert_allclose(lp.token_logprobs[1:], want, atol=1e-4)
    np.testing.assert_allclose([max(t.values()) for t in lp.top_logprobs[1:]], ref[:-1].max(-1), atol=1e-4)
    assert "".join(lp.tokens) == model.tokenizer.decode(ids) and lp.text_offset[1] == 0
    # generated tokens: their logprob given everything before them
    r = c.completions.create(model="m", prompt=ids, max_tokens=4, echo=True, logprobs=3, temperature=0)
    lp = r.choices[0].logprobs
    new = model.generate([ids], max_new_tokens=4, stop_ids=[])[0]
    full = ids + new
    ref = np.asarray(jax.nn.log_softmax(model.logits([full])[0], axis=-1))
    np.testing.assert_allclose(lp.token_logprobs[1:], ref[np.arange(len(full) - 1), full[1:]], atol=1e-4)
    assert all(len(t) == 3 for t in lp.top_logprobs[1:])


@pytest.mark.parametrize("body, field", [
    ({"prompt": "x", "max_tokens": -1}, "max_tokens"),
    ({"prompt": "x", "max_tokens": 10_000}, "max_tokens"),
    ({"prompt": "x " * 200, "max_tokens": 100}, "max_tokens"),  # prompt + max_tokens over the 256-token context
    ({"prompt": "x " * 300, "max_tokens": 1}, "prompt"),  # the prompt alone is over it
    ({"prompt": "x " * 300}, "prompt"),
    ({"prompt": "ok \ud800"}, "prompt"),  # a lone surrogate: not text (sentencepiece would fail on it)
    ({"prompt": ["fine", "\udcff"]}, "prompt"),
    ({"prompt": "x", "max_tokens": "5"}, "max_tokens"),
    ({"prompt": "x", "temperature": -0.5}, "temperature"),
    ({"prompt": "x", "top_p": 1.5}, "top_p"),
    ({"prompt": "x", "n": 2}, "n"),
    ({"prompt": "x", "stop": 3}, "stop"),
    ({"prompt": 5}, "prompt"),
    ({"prompt": [1, 10**9]}, "prompt"),
    ({"max_tokens": 3}, "prompt"),
])
def test_bad_requests_are_400s_naming_the_field(server, body, field):
    status, out = _post(server, "/v1/completions", {"model": "m", **body})
    assert status == 400, out
    assert out["error"]["param"] == field and f"'{field}" in out["error"]["message"]
    assert set(out["error"]) == {"message", "type", "param", "code"}


def test_malformed_json_and_bad_messages_are_400s(server):
    status, out = _post(server, "/v1/completions", b"{not json")
    assert status == 400 and "JSON" in out["error"]["message"]
    status, out = _post(server, "/v1/chat/completions", {"model": "m", "messages": [{"role": "user"}]})
    assert status == 400 and out["error"]["param"] == "messages"
    with pytest.raises(openai.BadRequestError, match="temperature"):
        _client(server).completions.create(model="m", prompt="x", temperature=-1)


@pytest.mark.slow
def test_full_queue_answers_503(model):
    srv = Server(model, port=0, slots=1, max_queue=1)
    srv.start()
    try:
        results = []

        def call():
            results.append(_post(srv, "/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 200, "temperature": 0}))

        threads = [threading.Thread(target=call) for _ in range(5)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=CALL_TIMEOUT)
        statuses = sorted(s for s, _ in results)
        assert len(results) == 5 and 200 in statuses and 503 in statuses, statuses
        busy = next(out for s, out in results if s == 503)
        assert set(busy["error"]) == {"message", "type", "param", "code"} and "max-queue" in busy["error"]["message"]
        assert _idle(srv)["running"] == 0
    finally:
        srv.shutdown()


@pytest.mark.slow
def test_load_many_clients_some_leaving_mid_stream(server, model):
    rng = random.Random(0)
    words = "def return import class self value list for in if else while print".split()
    jobs = []
    for i in range(40):
        prompt = " ".join(rng.choice(words) for _ in range(rng.randint(1, 40)))
        leave = i % 7 == 0  # a long request whose client leaves after its first chunk
        jobs.append(dict(prompt=prompt, max_tokens=150 if leave else rng.randint(1, 16), stream=i % 3 == 0 or leave,
                         leave=leave))
    tok = model.tokenizer
    ids = [[tok.bos_id] + tok.encode(j["prompt"]) for j in jobs]
    solo = model.generate(ids, max_new_tokens=16)  # greedy rows do not depend on the batch (leavers are not compared)
    answers, errors = {}, []

    def client(i, job):
        c = _client(server, f"127.0.0.{10 + i}")  # forty clients: forty addresses
        try:
            if job["stream"]:
                s = c.completions.create(model="m", prompt=job["prompt"], max_tokens=job["max_tokens"], temperature=0,
                                         stream=True)
                text = ""
                for k, ch in enumerate(s):
                    text += ch.choices[0].text
                    if job["leave"] and k == 0:
                        s.close()  # the client goes away: its slot must be freed
                        return
                answers[i] = text
            else:
                r = c.completions.create(model="m", prompt=job["prompt"], max_tokens=job["max_tokens"], temperature=0)
                answers[i] = r.choices[0].text
        except Exception as e:  # collected: an exception in a thread would be lost
            errors.append(f"{i}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=client, args=(i, j)) for i, j in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=2 * CALL_TIMEOUT)
    assert not any(t.is_alive() for t in threads), "a client hung"
    assert errors == []
    left = {i for i, j in enumerate(jobs) if j["stream"] and j["leave"]}
    assert set(answers) | left == set(range(len(jobs)))
    for i, text in answers.items():
        assert text == tok.decode(solo[i][: jobs[i]["max_tokens"]]), i
    health = _idle(server)
    assert health["status"] == "ok" and health["running"] == 0 and health["queued"] == 0
    r = _client(server).completions.create(model="m", prompt="def f(x):", max_tokens=4, temperature=0)
    assert r.choices[0].text == model.complete("def f(x):", max_new_tokens=4)


def test_client_leaving_frees_its_slot(server):
    """A client that closes its connection, streaming or not, frees its slot long before its
    200 tokens are done (the scheduler counts its steps)."""
    import socket

    c = _client(server)
    _idle(server)
    steps = server.scheduler.steps
    stream = c.completions.create(model="m", prompt=[1, 2], max_tokens=200, temperature=0, stream=True)
    next(iter(stream))
    stream.close()
    assert _idle(server)["running"] == 0 and server.scheduler.steps - steps < 150
    steps = server.scheduler.steps
    body = json.dumps({"prompt": [1, 2], "max_tokens": 200, "temperature": 0}).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=CALL_TIMEOUT) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body)
        end = time.time() + CALL_TIMEOUT
        while server.scheduler.steps == steps and time.time() < end:  # it is decoding
            time.sleep(0.01)
    assert _idle(server)["running"] == 0 and server.scheduler.steps - steps < 150


@pytest.mark.slow
def test_lm_eval_local_completions_scores_loglikelihoods(server, model, chat_dir):
    """lm-eval's own `local-completions` client (echo, logprobs, token-list prompts) gets the
    sums of log_softmax of the model's logits over each continuation."""
    pytest.importorskip("tenacity")  # lm-eval's API models need it (lm_eval[api])
    api = pytest.importorskip("lm_eval.models.openai_completions")
    from lm_eval.api.instance import Instance

    lm = api.LocalCompletionsAPI(base_url=f"http://127.0.0.1:{server.port}/v1/completions", model="m",
                                 tokenizer=str(chat_dir), tokenizer_backend="huggingface", max_length=256,
                                 num_concurrent=2, max_retries=1, timeout=CALL_TIMEOUT)
    pairs = [("def f(x):", " return x"), ("Hello", " world"), ("import", " os")]
    out = lm.loglikelihood([Instance(request_type="loglikelihood", doc={}, arguments=p, idx=i)
                            for i, p in enumerate(pairs)], disable_tqdm=True)
    for (context, continuation), (logprob, _) in zip(pairs, out):
        ctx, cont = lm.tok_encode(context), lm.tok_encode(continuation)
        ref = np.asarray(jax.nn.log_softmax(model.logits([ctx + cont])[0], axis=-1))
        assert logprob == pytest.approx(sum(ref[len(ctx) - 1 + i, t] for i, t in enumerate(cont)), abs=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("style", STYLES)
def test_chat_prompts_are_apply_chat_templates_ids(style, tmp_path_factory):
    """A model chat-tuned in its tokenizer's own template (Qwen2.5's, which adds a default system
    prompt; Llama-3's, whose template writes BOS) is prompted as transformers prompts it: the
    server's chat ids are apply_chat_template(add_generation_prompt=True)'s, and its 400 for a
    conversation over the context counts those ids."""
    d = chat_model_dir(tmp_path_factory, style)
    auto = AutoTokenizer.from_pretrained(str(d))
    srv = Server(easylemur.load(d), port=0, slots=1)
    srv.start()
    try:
        convs = prompts(40, seed=2)
        want = [list(auto.apply_chat_template(c, add_generation_prompt=True, return_dict=False)) for c in convs]
        assert [srv.service.chat_ids(c) for c in convs] == want
        long = next(c for c, w in zip(convs, want) if len(w) > srv.engine.max_len)
        status, out = _post(srv, "/v1/chat/completions", {"model": srv.service.name, "messages": long, "max_tokens": 1})
        assert status == 400 and out["error"]["param"] == "messages", out
        assert f"the prompt has {len(want[convs.index(long)])} tokens" in out["error"]["message"]
    finally:
        srv.shutdown()


def test_base_model_chat_is_a_400_unless_given_a_template(base_server, base_dir, chat_dir, tmp_path):
    conv = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Write add."}]
    status, out = _post(base_server, "/v1/chat/completions", {"messages": conv})
    assert status == 400 and out["error"]["type"] == "invalid_request_error", out
    assert "no chat template" in out["error"]["message"] and "--chat-template" in out["error"]["message"]
    with pytest.raises(openai.BadRequestError, match="no chat template"):
        _client(base_server).chat.completions.create(model=base_server.service.name, messages=conv, max_tokens=2)
    # --chat-template FILE: that template's prompts (here ChatML's: the chat model's, as AutoTokenizer renders them)
    with pytest.raises(InputError, match="missing.jinja: does not exist"):
        serve_main(["--checkpoint", str(base_dir), "--chat-template", str(tmp_path / "missing.jinja")])
    srv = Server(base_server.model, port=0, slots=1, chat_template=CHAT_TEMPLATE)
    try:
        want = AutoTokenizer.from_pretrained(str(chat_dir)).apply_chat_template(conv, add_generation_prompt=True,
                                                                                 return_dict=False)
        assert srv.service.chat_ids(conv) == list(want)
    finally:
        srv.close()


def test_unknown_model_is_vllms_404(server, base_server, base_dir):
    with pytest.raises(openai.NotFoundError, match="The model `gpt-4` does not exist"):
        _client(server).completions.create(model="gpt-4", prompt="x", max_tokens=1)
    status, out = _post(server, "/v1/chat/completions", {"model": "nope", "messages": [{"role": "user", "content": "x"}]})
    assert (status, out) == (404, {"error": {"message": "The model `nope` does not exist.", "type": "NotFoundError",
                                             "param": "model", "code": 404}})
    # served under its folder name; an absolute path is never a model's name (it would tell a client
    # where the checkpoint lies: a relative one as given is answered, as vLLM's default name)
    status, out = _post(base_server, "/v1/chat/completions", {"model": base_dir.name, "messages": [{"role": "user",
                                                                                                   "content": "x"}]})
    assert status == 400 and "no chat template" in out["error"]["message"]
    status, out = _post(base_server, "/v1/chat/completions", {"model": str(base_dir), "messages": [{"role": "user",
                                                                                                   "content": "x"}]})
    assert status == 404, out


def test_chat_fields_that_are_not_text_or_too_long_are_400s_naming_them(server):
    for content, where in (("a\ud800b", "'messages[0].content'"), ("x " * 300, "'messages'")):
        status, out = _post(server, "/v1/chat/completions", {"model": "m", "messages": [{"role": "user",
                                                                                         "content": content}]})
        assert status == 400 and out["error"]["param"] == "messages" and where in out["error"]["message"], out
    status, out = _post(server, "/v1/chat/completions", {"messages": [{"role": "\udcff", "content": "x"}]})
    assert status == 400 and "'messages[0].role'" in out["error"]["message"] and "0xff" in out["error"]["message"]


def test_default_max_tokens(server, model):
    """Without max_tokens a completion gets 16 tokens (OpenAI's default), a chat reply
    --default-max-tokens (the fixture's 8), each ending sooner only at a stop id."""
    c = _client(server)
    r = c.completions.create(model="m", prompt=[1, 5, 17], temperature=0)
    assert r.choices[0].text == model.tokenizer.decode(model.generate([[1, 5, 17]], max_new_tokens=16)[0])
    conv = [{"role": "user", "content": "hi"}]
    r = c.chat.completions.create(model="m", messages=conv, temperature=0)
    assert r.choices[0].message.content == model.chat(conv, max_new_tokens=DEFAULT_MAX_TOKENS)
    assert r.usage.completion_tokens <= DEFAULT_MAX_TOKENS


def test_dropped_health_probe_prints_no_traceback(server, capfd):
    """A load balancer's probe that hangs up (a reset) before reading the answer: the server
    stays quiet and healthy (socketserver would print a BrokenPipe/ConnectionReset traceback)."""
    import socket
    import struct

    for _ in range(20):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=CALL_TIMEOUT)
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST
        sock.close()
    time.sleep(0.5)
    assert _get(server, "/health")["status"] == "ok"
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Error" not in err, err


def test_help_works(capsys):
    with pytest.raises(SystemExit) as e:
        serve_main(["--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps the help at any space
    assert e.value.code == 0 and "--checkpoint" in out and "--chat-template FILE" in out
    # the default max_tokens is stated
    assert "chat request that sets none (default 1024; /v1/completions: 16" in out
