"""Every test session sees 8 CPU devices, so sharded code paths run everywhere."""

import os
import shutil

from train_run import QUICK_COMPILE

os.environ.setdefault("JAX_PLATFORMS", "cpu")
_flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in _flags:
    _flags += " --xla_force_host_platform_device_count=8"
if "xla_backend_optimization_level" not in _flags:
    _flags += " " + QUICK_COMPILE
os.environ["XLA_FLAGS"] = _flags.strip()
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The benchmarks' data is fetched from nowhere (eval/benchmarks/fetch.py): every source that is
# not named by a test's own variable goes to a closed local port (refused at once), and the
# cache the fetch fills and reads is this run's own, empty, removed at the end.
os.environ.setdefault("EASYLEMUR_EVAL_MIRROR", "http://127.0.0.1:9")
if "EASYLEMUR_EVAL_CACHE" not in os.environ:
    import atexit
    import tempfile

    os.environ["EASYLEMUR_EVAL_CACHE"] = tempfile.mkdtemp(prefix="easylemur-tests-eval-cache-")
    atexit.register(shutil.rmtree, os.environ["EASYLEMUR_EVAL_CACHE"], True)
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if "JAX_COMPILATION_CACHE_DIR" not in os.environ and not os.environ.get("EASYLEMUR_TEST_NO_JAX_CACHE"):
    # One persistent compilation cache for this run's processes (this one, pytest-xdist's workers,
    # and every trainer/CLI subprocess, which inherit the variable): the suite compiles the same
    # tiny programs in many processes, and a trainer started again skips its compile (15 s -> 8 s
    # for a 4-step tiny run). Made fresh per run and private (mkdtemp is 0700), so nothing from
    # another run or user is read; removed when the run ends.
    import atexit
    import shutil
    import tempfile

    _cache = tempfile.mkdtemp(prefix="easylemur-tests-jax-cache-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _cache
    atexit.register(shutil.rmtree, _cache, True)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
# A CPU run measures the host's bf16 matmul rate for its MFU at start (metrics.peak_flops):
# 19 matmuls of 1024^2, 0.2 s of both cores on an idle 2-core host (more under the suite's
# load) in every trainer the suite starts, and processes running side by side would only
# measure each other. The suite's runs take a stated peak instead; test_train_metrics.py
# measures it once, small.
os.environ.setdefault("EASYLEMUR_CPU_PEAK_FLOPS", "1e11")
# A CPU trainer restarts itself with glibc malloc tunables for long runs (host.cpu_malloc_env);
# in the suite's seconds-long runs they only add page-fault time (about 1.5 CPU-s of sys a run,
# 10% of test_run_safety.py's CPU). test_host.py tests the restart with environments of its own.
os.environ.setdefault("EASYLEMUR_MALLOC", "default")

import jax  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")
jax.config.update("jax_threefry_partitionable", True)

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

from gcs_emulator import gcs_bucket, gcs_emulator  # noqa: E402, F401 (real buckets: tests/gcs_emulator.py)


@pytest.fixture(scope="session")
def llama2_like_spm(tmp_path_factory) -> Path:
    """A tiny sentencepiece BPE (600 pieces) with Llama-2's settings and, like Llama-2's, no
    ChatML pieces: add_dummy_prefix, identity normalisation, no whitespace folding, byte
    fallback, split digits, whitespace-only pieces, pad_id -1. Trained once per session on the
    sample code corpus; the path of its .model file (copy it before changing it)."""
    import io

    import sentencepiece as spm

    from easylemur.data.jsonl import iter_jsonl_texts

    lines = []
    for text in iter_jsonl_texts(ROOT / "data" / "samples" / "code", "text"):
        lines += [line for line in text.split("\n") if line.strip()]
        if len(lines) > 3000:
            break
    proto = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=proto, model_type="bpe", vocab_size=600,
        byte_fallback=True, normalization_rule_name="identity", remove_extra_whitespaces=False,
        split_digits=True, allow_whitespace_only_pieces=True, add_dummy_prefix=True,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, minloglevel=2, num_threads=1)
    path = tmp_path_factory.mktemp("spm") / "llama2_like.model"
    path.write_bytes(proto.getvalue())
    return path


def _built_once_per_run(tmp_path_factory, name: str, build) -> Path:
    """`build(dir)` run once per test run, not once per pytest-xdist worker (a session fixture is
    per worker): the workers share the parent of their base temp directories, pytest's directory
    of this run; the first to take the lock builds there, the others wait for it and read the
    same directory. Without xdist, this session's own. The product is read-only to its users."""
    import fcntl

    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    out, done = root / name, root / f"{name}.built"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            if out.exists():  # a worker that died while building it
                shutil.rmtree(out)
            out.mkdir()
            build(out)
            done.touch()
    return out


@pytest.fixture(scope="session")
def built_once(tmp_path_factory):
    """`built_once(name, build) -> Path`: `build(dir)` run once per test run, whichever worker asks
    first (`_built_once_per_run`); for a costly module fixture that every worker would redo."""
    return lambda name, build: _built_once_per_run(tmp_path_factory, name, build)


@pytest.fixture(scope="session")
def reference_run(tmp_path_factory) -> Path:
    """The workdir of one uninterrupted small training run (train_run.REFERENCE: 30 steps, a
    checkpoint every 6, the last two kept), which the resume tests compare against; trained once
    per test run, whichever worker asks first. Treat it as read-only: copy it before resuming or
    damaging it."""
    from train_run import REFERENCE, run

    return _built_once_per_run(tmp_path_factory, "reference", lambda d: run(d / "run", REFERENCE)) / "run"


@pytest.fixture(scope="session", autouse=True)
def checkout_runs_untouched():
    """No test may write under the checkout's runs/ (the demo's runs live there; a test that
    resumed or overwrote them would pass or fail by what was run before it)."""

    def listing() -> dict:
        runs = ROOT / "runs"
        return {str(p): p.stat().st_mtime_ns for p in runs.rglob("*")} if runs.is_dir() else {}

    before = listing()
    yield
    after = listing()
    changed = sorted(set(before) ^ set(after) | {p for p in before if p in after and before[p] != after[p]})
    assert not changed, f"tests wrote under {ROOT / 'runs'}: {changed[:5]}"



def pytest_collection_modifyitems(config, items) -> None:
    """The modules holding a whole user flow (marker e2e: minutes each) run first, each module's
    tests kept together and in order: with two workers on two cores, a long test started last
    leaves the other core idle until it ends (the suite is CPU-bound, so that idle time is the
    run's tail)."""
    heavy = {item.module.__name__ for item in items if item.get_closest_marker("e2e")}
    items.sort(key=lambda item: item.module.__name__ not in heavy)  # stable: the rest keeps its order
