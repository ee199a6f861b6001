"""A token store in a bucket (the GCS emulator, tests/gcs_emulator.py): tokenize workers write
it, finalize checks it, training reads it by ranged GETs and, killed with SIGKILL, resumes bit
for bit: the losses equal an uninterrupted run's from the same store on local disk."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
from ml_collections import ConfigDict

from easylemur.config import validate_sources
from easylemur.data import build
from easylemur.data.store import StoreSource, read_manifest
from easylemur.tokenizer.spm import Tokenizer
from train_run import ROOT, cmd, env, losses

import pytest

SAMPLES = ROOT / "data" / "samples"


def _store_args(store: str) -> list[str]:
    return [f"data.sources.code.path={store}", f"data.sources.text.path={store}"]


@pytest.mark.slow
def test_a_store_in_a_bucket_matches_a_local_one_and_trains_resuming_bit_exact_after_sigkill(gcs_bucket, tmp_path):
    tok = Tokenizer.load()
    srcs = ConfigDict({"code": {"path": str(SAMPLES / "code")}, "text": {"path": str(SAMPLES / "text")}})
    validate_sources(srcs, "data.sources")
    local = str(tmp_path / "store")
    build.tokenize(srcs, tok, local, seq_len=64, strict=False, log=lambda m: None)
    build.finalize(srcs, tok, local, seq_len=64)

    # the CLI, as a pod's workers run it: two workers' shares, then finalize, all into the bucket
    bucket = f"{gcs_bucket}/lemur/tokens"
    tokenize = [sys.executable, "-m", "easylemur.data", "tokenize", "--config", "configs/tiny_pretrain.py",
                "--out", bucket]
    for shard in ("0/2", "1/2"):
        p = subprocess.run(tokenize + ["--shard", shard], cwd=ROOT, env=env(1), capture_output=True, text=True,
                           timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
    p = subprocess.run([sys.executable, "-m", "easylemur.data", "finalize", "--config", "configs/tiny_pretrain.py",
                        "--out", bucket], cwd=ROOT, env=env(1), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]

    remote, here = read_manifest(bucket), read_manifest(local)
    for name in ("code", "text"):
        a, b = StoreSource(bucket, name, remote), StoreSource(local, name, here)
        assert len(a) == len(b) == here["sources"][name]["documents"]
        for i in range(0, len(a), 7):
            assert np.array_equal(a[i][1]["ids"], b[i][1]["ids"])
        assert a.bytes_read == b.bytes_read > 0  # ranged reads of the same bytes
        assert [u["files"] for u in remote["sources"][name]["units"]] == \
            [u["files"] for u in here["sources"][name]["units"]]  # sha256 of every file

    run = ["train.steps=8", "checkpoint.every=4"]
    e = {**env(1), "TMPDIR": str(tmp_path)}
    reference = subprocess.Popen(cmd(tmp_path / "reference", run + _store_args(local)), cwd=ROOT, env=e,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    killed = tmp_path / "killed"
    proc = subprocess.Popen(cmd(killed, run + _store_args(bucket)), cwd=ROOT, env=e, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 300
        while not (killed / "checkpoints" / "4").is_dir():
            assert proc.poll() is None and time.time() < deadline, "the run ended before it could be killed"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait() == -signal.SIGKILL
        p = subprocess.run(cmd(killed, run + _store_args(bucket)), cwd=ROOT, env=e, capture_output=True, text=True,
                           timeout=600)
        assert p.returncode == 0 and "resumed from" in p.stdout, p.stderr[-3000:]
        assert reference.wait(timeout=600) == 0, reference.stderr.read()[-3000:]
    finally:
        for q in (proc, reference):
            if q.poll() is None:
                q.kill()
    whole = losses(tmp_path / "reference")
    assert sorted(whole) == list(range(1, 9))
    assert losses(killed) == whole  # bit for bit, float32 on CPU
