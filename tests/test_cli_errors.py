"""The CLI's errors through the real entry points (`python -m easylemur.generate/convert/train`):
undecodable text, a generation longer than the model's context, a workdir that is a file, a
full disk (a real small tmpfs, mounted here as root), init.from a step folder under another
name, and a failed init.from. Each error is exactly one stderr line `error: ...` naming the
path or value, with its exit code (2 bad input, 1 a failed run), never a traceback
(docs/design.md, "Errors")."""

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import easylemur
from easylemur.convert import cli as convert
from easylemur.errors import InputError
from easylemur.generate.engine import GenerateError
from easylemur.tokenizer.spm import DEFAULT_TOKENIZER_PATH
from hf_models import make_hf_model
from train_run import SMALL, env

ROOT = Path(__file__).resolve().parents[1]
CONTEXT = 256  # the tiny model's max_position_embeddings
# the train CLI on the tiny model that `ckpt` holds (no model.* keys: init.from gives the shape)
TRAIN = ["model.dtype=float32", "data.seq_len=64", "train.batch_size=8", "data.prefetch=0", "log.every=1"]


def cli(module: str, *args, input: bytes | None = None) -> subprocess.CompletedProcess:
    """`python -m easylemur.<module> args` on one CPU device; bytes arguments pass as they are."""
    argv = [sys.executable, "-m", f"easylemur.{module}", *[a if isinstance(a, bytes) else str(a) for a in args]]
    return subprocess.run(argv, cwd=ROOT, env=env(1), input=input if input is not None else b"",
                          capture_output=True, timeout=600)


def train_cli(workdir: Path, overrides) -> subprocess.CompletedProcess:
    return cli("train", "--config", "configs/tiny_pretrain.py", f"--config.workdir={workdir}",
               *[f"--config.{o}" for o in overrides])


def error_line(p: subprocess.CompletedProcess, rc: int) -> str:
    """The run's exit code is `rc` and its stderr exactly one line `error: ...`; that line."""
    err = p.stderr.decode("utf-8", "replace")
    lines = [line for line in err.splitlines() if line.strip()]
    assert p.returncode == rc, f"rc {p.returncode}, expected {rc}:\n{err[-3000:]}"
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err[-5000:]
    return lines[0]


@contextlib.contextmanager
def small_disk(path: Path, size: str):
    """A real filesystem of `size` at `path` (tmpfs; needs root): writes past it fail with ENOSPC."""
    path.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                      capture_output=True).returncode:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)])


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory) -> Path:
    """A random 1-layer HF Llama (context 256) with the shipped ChatML tokenizer."""
    d = tmp_path_factory.mktemp("hf")
    make_hf_model(vocab_size=4096, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                  num_key_value_heads=1, max_position_embeddings=CONTEXT).save_pretrained(d)
    shutil.copyfile(DEFAULT_TOKENIZER_PATH, d / "tokenizer.model")
    return d


@pytest.fixture(scope="module")
def ckpt(hf_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ckpt") / "ck"
    assert convert.main(["from-hf", "--hf", str(hf_dir), "--out", str(out)]) == 0
    return out


# ----------------------------------------------------------------------------- generate


@pytest.mark.slow
def test_chat_with_non_utf8_stdin_is_bad_input_naming_the_line(ckpt, tmp_path):
    from easylemur.chat.chatml import CHAT_TEMPLATE

    # a base model (from-hf of a directory without a chat template) chats in the template given
    (tmp_path / "chatml.jinja").write_text(CHAT_TEMPLATE)
    p = cli("generate", "--checkpoint", ckpt, "--chat", "--chat-template", tmp_path / "chatml.jinja",
            "--max-new-tokens", "4", input=b"hello\n\xff\xfe there\n")
    line = error_line(p, 2)
    assert "stdin line 2" in line and "0xff" in line, line


@pytest.mark.slow
def test_undecodable_prompt_argument_is_bad_input_naming_the_flag(ckpt):
    # invalid UTF-8 in argv reaches Python as a lone surrogate (U+DCFF)
    p = cli("generate", "--checkpoint", ckpt, "--prompt", b"def f\xff(x):", "--max-new-tokens", "4")
    line = error_line(p, 2)
    assert "--prompt" in line and "0xff" in line, line
    assert p.stdout == b""  # refused before anything is printed or loaded


def test_max_new_tokens_beyond_the_context_is_bad_input_naming_value_and_limit(ckpt):
    p = cli("generate", "--checkpoint", ckpt, "--prompt", "def f(x):", "--max-new-tokens", "1000000000")
    line = error_line(p, 2)
    assert "1000000000" in line and f"max_position_embeddings={CONTEXT}" in line, line


@pytest.mark.slow
def test_api_refuses_undecodable_text_and_too_long_generations_before_compiling(ckpt):
    model = easylemur.load(ckpt)
    with pytest.raises(InputError, match=r"prompt 1: .*U\+D800 at character 2"):
        model.complete(["fine", "ab\ud800"], max_new_tokens=2)
    with pytest.raises(InputError, match=r"message 0: .*0xff"):
        model.chat([{"role": "user", "content": "x\udcff"}], max_new_tokens=2)
    with pytest.raises(GenerateError, match=rf"max_new_tokens=254: .*\(257\).*max_position_embeddings={CONTEXT}"):
        model.generate([[1, 2, 3]], max_new_tokens=CONTEXT - 2)
    assert not model.decoder.programs  # refused before any program was built or compiled
    assert len(model.generate([[1, 2, 3]], max_new_tokens=CONTEXT - 3, stop_ids=[])[0]) == CONTEXT - 3


# ----------------------------------------------------------------------------- workdir, init.from


@pytest.mark.slow
def test_workdir_that_is_a_file_is_bad_input_naming_it(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("not a workdir\n")
    line = error_line(train_cli(f, SMALL + ["train.steps=1"]), 2)
    assert str(f) in line and "is a file" in line, line
    line = error_line(train_cli(f / "run", SMALL + ["train.steps=1"]), 2)
    assert str(f) in line and "is a file" in line, line
    assert f.read_text() == "not a workdir\n"


def test_a_mistyped_data_path_is_one_line_before_any_hub_call_or_workdir(tmp_path, monkeypatch, capsys):
    """A local-looking path that does not exist (relative beside an existing folder, with a data
    file's extension, absolute, ./) is one line naming the key, exit 2, no workdir left; a Hub name
    that cannot be reached (the Hub's address pointed at a closed port here) is one line too,
    instead of a minute of the datasets library's retries. In-process: the train CLI's own main."""
    from easylemur.errors import run_cli
    from easylemur.train.loop import main as train_main

    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)

    def train(path: str) -> str:
        rc = run_cli(train_main, ["--config", "configs/tiny_pretrain.py", f"--config.workdir={tmp_path / 'run'}",
                                  f"--config.data.sources.code.path={path}"])
        err = capsys.readouterr().err
        assert rc == 2 and err.count("\n") == 1 and err.startswith("error: "), err
        assert not (tmp_path / "run").exists()
        return err.strip()

    for path in ["data/nope", "data/nope.jsonl", str(tmp_path / "nope"), "./nope"]:
        line = train(path)
        assert line == f"error: data.sources.code.path: {path}: no such file or directory (and not a hub dataset " \
                       "name like 'org/name')", line
    line = train("bigcode/nope")
    assert line.startswith("error: data.sources.code.path: bigcode/nope: cannot reach the Hub ("), line


@pytest.mark.slow
def test_init_from_a_step_folder_under_another_name(ckpt, tmp_path):
    step = tmp_path / "X" / "step30"
    shutil.copytree(ckpt / "checkpoints" / "0", step)
    p = train_cli(tmp_path / "run", TRAIN + ["train.steps=1", f"init.from={step}"])
    assert p.returncode == 0, p.stderr.decode()[-3000:]
    assert (tmp_path / "run" / "checkpoints" / "1").is_dir()
    # the library reads it the same way
    assert easylemur.load(step).config.hidden_size == 32


@pytest.mark.slow
def test_failed_init_from_leaves_nothing_in_the_workdir(tmp_path):
    new = tmp_path / "runs" / "new"  # neither exists: the run must not leave them behind
    line = error_line(train_cli(new, SMALL + ["train.steps=1", f"init.from={tmp_path / 'nowhere'}"]), 2)
    assert str(tmp_path / "nowhere") in line, line
    assert not (tmp_path / "runs").exists(), sorted(str(p) for p in (tmp_path / "runs").rglob("*"))
    empty = tmp_path / "empty"  # a workdir the user made stays, and stays empty
    empty.mkdir()
    error_line(train_cli(empty, SMALL + ["train.steps=1", f"init.from={tmp_path / 'nowhere'}"]), 2)
    assert empty.is_dir() and not os.listdir(empty)


# ----------------------------------------------------------------------------- disk full


@pytest.mark.slow
def test_from_hf_on_a_full_disk_is_one_line_naming_the_output(hf_dir, tmp_path):
    with small_disk(tmp_path / "disk", "512k") as disk:
        line = error_line(cli("convert", "from-hf", "--hf", hf_dir, "--out", disk / "ck"), 1)
        assert str(disk / "ck") in line and "No space left on device" in line, line
        assert not os.listdir(disk)  # the partial output is gone


@pytest.mark.slow
def test_to_hf_on_a_full_disk_is_one_line_naming_the_output(ckpt, tmp_path):
    with small_disk(tmp_path / "disk", "512k") as disk:
        line = error_line(cli("convert", "to-hf", "--checkpoint", ckpt, "--out", disk / "hf"), 1)
        assert str(disk / "hf") in line and "No space left on device" in line, line
        assert not os.listdir(disk)


@pytest.mark.slow
def test_failed_training_save_is_one_line_without_orbax_tracebacks(tmp_path):
    # 2 MB holds the run's config and metrics but not one checkpoint of the 0.6M-param model;
    # log.every=2: no record of the first step (its tokens/s is NaN, a TensorBoard warning)
    with small_disk(tmp_path / "disk", "2m") as disk:
        p = train_cli(disk, SMALL + ["train.steps=3", "checkpoint.every=1", "log.every=2"])
        line = error_line(p, 1)
        assert line.startswith(f"error: saving a checkpoint in {disk / 'checkpoints'} failed: No space left on device")
        assert line.endswith("no checkpoint was saved"), line


# ----------------------------------------------------------------------------- data tokenize / finalize


@pytest.mark.parametrize("cmd, out, words", [
    ("tokenize", "{f}", "{f}: is a file, not a directory: a token store is a directory (made if missing) or a bucket URL"),
    ("tokenize", "{f}/store", "{f}/store: cannot make the token store's directory here: Not a directory"),
    ("finalize", "{f}", "{f}: is a file, not a directory: a token store is a directory (made if missing) or a bucket URL"),
])
def test_data_store_out_that_is_a_file_is_bad_input_naming_it(tmp_path, capsys, cmd, out, words):
    from easylemur.data.__main__ import main as data_main

    f = tmp_path / "notes.txt"
    f.write_text("not a store\n")
    rc = data_main([cmd, "--config", str(ROOT / "configs" / "tiny_pretrain.py"), "--out", out.format(f=f)])
    err = capsys.readouterr().err
    assert rc == 2 and err == f"error: {words.format(f=f)}\n", err
    assert f.read_text() == "not a store\n"


def test_a_write_coroutine_left_by_a_failed_save_prints_nothing_at_exit():
    """A save cut by an error can leave orbax's write coroutines never scheduled; collected at
    exit, each would print "coroutine ... was never awaited" under the command's one error line."""
    code = ("from easylemur.errors import quiet_background_errors\n"
            "async def write_fragment(): pass\n"
            "quiet_background_errors()\n"
            "left = write_fragment()\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stderr == "", p.stderr


def test_a_python_without_the_packages_is_told_to_enter_the_environment():
    """`python -m easylemur.train` from a Python without the dependencies (a bare `python` outside
    .venv; here the same interpreter with its site-packages off, `-S`) is one line saying which
    Python lacks which module and how to enter the environment: no traceback."""
    p = subprocess.run([sys.executable, "-S", "-m", "easylemur.train", "--config", "configs/tiny_pretrain.py"],
                       cwd=ROOT, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}, capture_output=True, timeout=60)
    line = error_line(p, 1)
    assert line.startswith(f"error: this Python ({sys.executable}) has no module '"), line
    assert line.endswith("': enter the environment the setup made (source .venv/bin/activate) or install easylemur "
                         "into this one (pip install -e .)"), line


def test_from_hf_takes_a_hub_model_name_from_the_hub_cache_and_says_what_to_do_offline(hf_dir, tmp_path):
    """`convert from-hf --hf ORG/NAME`: a name that is not a directory here is fetched with
    huggingface_hub (here from a Hub cache laid out as huggingface_hub writes it, read offline:
    HF_HUB_OFFLINE=1) and converted like the directory; a name neither cached nor reachable (the
    Hub's address a closed port) is one line saying how to get it; a local-looking typo never asks."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--tiny-org--tiny-llama"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    shutil.copytree(hf_dir, repo / "snapshots" / commit)
    hub = {"HF_HUB_CACHE": str(tmp_path / "hub"), "EASYLEMUR_MALLOC": "default"}
    argv = [sys.executable, "-m", "easylemur.convert", "from-hf", "--hf", "tiny-org/tiny-llama", "--out"]
    p = subprocess.run([*argv, str(tmp_path / "ck")], cwd=ROOT, env={**env(1), **hub, "HF_HUB_OFFLINE": "1"},
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "fetching it from the Hugging Face Hub (or its cache)" in p.stderr
    converted = subprocess.run([sys.executable, "-m", "easylemur.convert", "from-hf", "--hf", str(hf_dir), "--out",
                                str(tmp_path / "direct")], cwd=ROOT, env=env(1), capture_output=True, timeout=300)
    assert converted.returncode == 0
    import jax
    import numpy as np

    from easylemur.checkpoint import model_meta

    a, b = model_meta.load_params(tmp_path / "ck"), model_meta.load_params(tmp_path / "direct")
    assert jax.tree.structure(a) == jax.tree.structure(b)
    assert all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))

    offline = {**env(1), **hub, "HF_ENDPOINT": "http://127.0.0.1:9"}
    offline.pop("HF_HUB_OFFLINE", None)
    offline.pop("TRANSFORMERS_OFFLINE", None)  # huggingface_hub reads it as HF_HUB_OFFLINE
    p = subprocess.run([*argv[:-3], "--hf", "other-org/missing", "--out", str(tmp_path / "x")], cwd=ROOT, env=offline,
                       capture_output=True, text=True, timeout=120)
    said, line = p.stderr.splitlines()  # what it is doing, then why it stops
    assert p.returncode == 2 and said.startswith("convert: --hf other-org/missing: not a directory here; fetching"), said
    assert line.startswith("error: --hf other-org/missing: not a directory here, and the Hub cannot be reached"), line
    assert line.endswith("download it where there is a network (hf download other-org/missing --local-dir DIR) and "
                         "pass --hf DIR"), line
    line = error_line(subprocess.run([*argv[:-3], "--hf", "data/nope", "--out", str(tmp_path / "x")], cwd=ROOT,
                                     env=offline, capture_output=True, timeout=120), 2)
    assert line == "error: --hf data/nope: not a directory (nor a Hub model name like org/name)", line
