"""The benchmark scripts start and report what they promise, cheaply (no timing is asserted):
bench/gpu_mfu.py builds its configurations anywhere and refuses in one line without a GPU;
bench/train_throughput.py's last line is the JSON the README and BENCHMARKS.md quote;
bench/data_throughput.py measures sentencepiece and an HF byte-level BPE in one run."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    return subprocess.run([sys.executable, str(ROOT / "bench" / script), *args], capture_output=True, text=True,
                          env=env, timeout=300)


@pytest.mark.slow
def test_gpu_mfu_builds_its_configs_and_refuses_without_a_gpu():
    dry = _run("gpu_mfu.py", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "1b: 1.10B params" in dry.stdout and "7b: 6.74B params" in dry.stdout, dry.stdout
    assert "batch 4 x 4096, bfloat16 compute" in dry.stdout
    run = _run("gpu_mfu.py", "--models", "1b", "--attention", "cudnn", "--steps", "1")
    assert run.returncode == 1, (run.returncode, run.stderr)
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: bench/gpu_mfu.py needs an NVIDIA GPU, and JAX sees cpu"), lines
    bad = _run("gpu_mfu.py", "--models", "13b", "--dry-run")
    assert bad.returncode == 2 and "--models: '13b' is not one of 1b, 7b" in bad.stderr, bad.stderr


@pytest.mark.slow
def test_train_throughput_reports_its_json():
    """A tiny model, easylemur alone: the last line holds tokens/s, the matmul ceiling measured in
    the same run and the fraction of it, and no transformers figures."""
    run = _run("train_throughput.py", "--only", "easylemur", "--hidden", "64", "--layers", "1", "--heads", "2",
               "--kv-heads", "1", "--ff", "128", "--vocab", "256", "--seq", "32", "--batch", "2", "--steps", "1",
               "--repeats", "1")
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    for key in ("easylemur_tokens_per_second", "matmul_ceiling_gflops", "easylemur_gflops",
                "easylemur_fraction_of_ceiling", "load_average_1m"):
        assert result[key] > 0, key
    assert "transformers_tokens_per_second" not in result and "ratio" not in result
    assert result["batch"] == [2, 32]
    # --dtype auto (the default) is model.dtype=auto's pick on this CPU, said first
    from easylemur import host

    dtype, why = host.compute_dtype("cpu", host.cpu_flags(), os.environ)
    assert result["easylemur_dtype"] == result["matmul_ceiling_dtype"] == dtype and result["easylemur_dtype_why"] == why
    assert run.stdout.splitlines()[0] == f"easylemur: compute {dtype} ({why})"
    bad = _run("train_throughput.py", "--hidden", "60", "--heads", "8")
    assert bad.returncode == 2 and "heads must divide hidden" in bad.stderr, bad.stderr


@pytest.mark.slow
def test_train_throughput_rates_easylemur_against_torchs_best_dtype():
    """Both sides, PyTorch in float32 and in bf16 autocast: the ratio is against the faster,
    which the JSON names; easylemur in a forced dtype."""
    run = _run("train_throughput.py", "--hidden", "64", "--layers", "1", "--heads", "2", "--kv-heads", "1", "--ff",
               "128", "--vocab", "256", "--seq", "32", "--batch", "2", "--steps", "1", "--repeats", "1",
               "--dtype", "float32")
    assert run.returncode == 0, run.stderr
    rounds = [x.split(" tokens/s")[0].split()[2:-1] for x in run.stdout.splitlines() if x.startswith("round ")]
    assert rounds == [["easylemur"], ["torch", "float32"], ["torch", "bfloat16"]], rounds
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["easylemur_dtype"] == "float32" and result["easylemur_dtype_why"] == "--dtype"
    by = result["transformers_by_dtype"]
    assert set(by) == {"float32", "bfloat16 autocast"} and all(v > 0 for v in by.values()), by
    assert result["transformers_dtype"] == max(by, key=by.get)
    assert result["transformers_tokens_per_second"] == by[result["transformers_dtype"]]
    assert set(result["ratio_by_torch_dtype"]) == set(by) and result["ratio"] == min(result["ratio_by_torch_dtype"].values())


@pytest.mark.slow
def test_data_scale_reports_every_measurement(tmp_path):
    """A 2 MB corpus, one tokenize worker, a few reader steps: every figure is there, the resumed
    batches are the uninterrupted run's, and each of four data shards reads under half of what one reads."""
    run = _run("data_scale.py", "--gb", "0.002", "--workers", "1", "--late-step", "20", "--shard-steps", "20",
               "--repeats", "1", "--sample-mb", "0.5", "--batch", "8", "--workdir", str(tmp_path))
    assert run.returncode == 0, run.stderr + run.stdout[-2000:]
    recs = {r["what"]: r for r in (json.loads(x) for x in run.stdout.splitlines() if x.startswith("{"))}
    assert set(recs) == {"corpus", "raw_sentencepiece", "tokenize", "reader", "resume", "shards"}, set(recs)
    assert recs["tokenize"]["tokens"] > 0 and recs["tokenize"]["peak_rss_bytes"] > 0
    assert recs["reader"]["tokens_per_s"] > 0 and recs["reader"]["index_bytes"] > 0
    assert recs["resume"]["batches_match"] is True
    assert recs["shards"]["n4"]["mean_fraction_of_n1"] < 0.5  # ~1/4 and some read-ahead
    assert (tmp_path / "data_scale.jsonl").exists() and "reader: tokens/s (steady)" in run.stdout


@pytest.mark.slow
def test_data_throughput_reports_hf_against_sentencepiece(tmp_path):
    """Both tokenizer kinds in one run, a fraction of a second each: per tokenizer the raw and
    pipeline lines with tokens/s and bytes/s, then the BPE's "vs" line against sentencepiece."""
    run = _run("data_throughput.py", "--seconds", "0.2", "--repeats", "1", "--prefetch", "0", "--batch-size", "4",
               "--tokenizer", "config", "bpe", "--bpe-vocab", "512")
    assert run.returncode == 0, run.stderr
    recs = [json.loads(x) for x in run.stdout.splitlines() if x.startswith("{")]
    kinds = {r["tokenizer"]: (r["kind"], r["vocab_size"]) for r in recs}
    assert kinds == {"config": ("spm", 4096), "bpe": ("hf", 512)}, kinds
    for spec in kinds:
        whats = sorted(r["what"] for r in recs if r["tokenizer"] == spec and r["what"] != "vs")
        assert whats == ["pipeline", "raw encode", "raw encode, numpy ids"], whats
    assert all(r["tokens_per_s"] > 0 and r["bytes_per_s"] > 0 for r in recs if r["what"] != "vs")
    (vs,) = [r for r in recs if r["what"] == "vs"]
    assert vs["tokenizer"] == "bpe" and vs["reference"] == "config" and len(vs["pipeline"]) == 1
    assert all(vs[k]["tokens_per_s"] > 0 and vs[k]["bytes_per_s"] > 0 for k in ("raw", "raw_array"))
    bad = _run("data_throughput.py", "--tokenizer", "bpe", "bpe")
    assert bad.returncode == 2 and "names a tokenizer twice" in bad.stderr, bad.stderr

    # the pipeline's bytes/s counts, per token, exactly the text bytes it encodes
    spec = importlib.util.spec_from_file_location("data_throughput", ROOT / "bench" / "data_throughput.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    from easylemur.config import load_config
    from easylemur.tokenizer import load_tokenizer

    texts = bench.source_texts(load_config(str(ROOT / "configs" / "tiny_pretrain.py")))[::4]
    for tok in (load_tokenizer(None), load_tokenizer(bench.train_bpe(texts, 512, tmp_path / "bpe"))):
        table = bench.byte_lengths(tok)
        assert all(int(table[tok.encode_array(t)].sum()) == len(t.encode("utf-8")) for t in texts), tok.kind
