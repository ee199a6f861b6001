"""Never losing a run: one trainer per workdir, SIGTERM saves, damaged checkpoints fall back,
failed saves stop the run, no shared temp file is trusted, one-line errors."""

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from easylemur.checkpoint import store, model_meta
from easylemur.checkpoint import __main__ as checkpoint_cli
from easylemur.train.lock import WorkdirLock, WorkdirLocked
from train_run import REFERENCE, ROOT, cmd, env, losses, main, run


def _wait_for(predicate, proc, what: str, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while not predicate():
        assert proc.poll() is None, f"the run ended before {what}: {proc.returncode}"
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _read(path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def _descendants(pid: int) -> list[int]:
    """Every process below `pid` (from /proc: children of children too)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"


# ----------------------------------------------------------------------------- the workdir lock


@pytest.mark.slow
def test_second_trainer_refuses_a_held_workdir_and_takes_over_a_dead_ones(tmp_path):
    w = tmp_path / "w"
    first = subprocess.Popen(cmd(w, ["train.steps=100000", "checkpoint.every=100000"]), cwd=ROOT, env=env(1),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: (w / "metrics.jsonl").exists(), first, "its first step")
        p = run(w, ["train.steps=2"], check=False)
        assert p.returncode == 2, p.stderr[-2000:]
        line = p.stderr.strip().splitlines()[-1]
        assert line.startswith("error: ") and "in use by another run" in line and f"pid {first.pid}" in line
        assert not (w / "checkpoints" / "2").exists()
    finally:
        first.kill()
        first.wait()
    # SIGKILL left the lock behind; its pid is dead on this host, so the next run takes over
    assert json.loads((w / "run.lock").read_text())["pid"] == first.pid
    p = run(w, ["train.steps=2"])
    assert f"pid {first.pid}) is no longer running" in p.stdout
    assert not (w / "run.lock").exists()  # released at the end


def test_lock_of_another_host_is_taken_over_only_when_its_heartbeat_is_stale(tmp_path):
    lock = tmp_path / "run.lock"
    holder = {"host": "some-other-host", "pid": 1, "started": time.time() - 7200, "token": "x"}
    lock.write_text(json.dumps({**holder, "heartbeat": time.time() - 10}))
    with pytest.raises(WorkdirLocked, match="host some-other-host, pid 1"):
        WorkdirLock(tmp_path).acquire()
    lock.write_text(json.dumps({**holder, "heartbeat": time.time() - 3600}))
    said = []
    with WorkdirLock(tmp_path, log=said.append):
        assert json.loads(lock.read_text())["host"] == socket.gethostname()
    assert "has not refreshed it for 3600 s" in said[0]
    assert not lock.exists()


# ----------------------------------------------------------------------------- signals


@pytest.mark.slow
def test_sigterm_saves_exits_cleanly_and_resumes_bit_exact(tmp_path, reference_run):
    w = tmp_path / "w"
    proc = subprocess.Popen(cmd(w, REFERENCE + ["data.prefetch=2"]), cwd=ROOT, env=env(1), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    _wait_for(lambda: (w / "checkpoints" / "6").is_dir(), proc, "its first checkpoint")
    # past the first checkpoint, and signalled at once: on an idle machine the small model's
    # remaining steps take well under a second, so a fixed sleep could outlast the run
    _wait_for(lambda: '"step": 8,' in _read(w / "metrics.jsonl"), proc, "step 8")
    children = _descendants(proc.pid)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "SIGTERM: finishing this step" in err
    saved = int(out.split("stopped: saved step ")[1].split()[0])
    assert 6 < saved < 30 and (w / "checkpoints" / str(saved)).is_dir()
    assert store.verify_step(w / "checkpoints", saved).startswith("ok")
    assert not any(_alive(c) for c in children), "a process of the run outlived it"
    assert not (w / "run.lock").exists()
    p = run(w, REFERENCE)
    assert f"resumed from {w / 'checkpoints' / str(saved)}" in p.stdout
    assert losses(w) == losses(reference_run)  # bit for bit


# ----------------------------------------------------------------------------- damaged checkpoints


def _damaged_copy(reference_run, tmp_path, damage) -> Path:
    w = tmp_path / "w"
    shutil.copytree(reference_run, w)
    damage(w / "checkpoints" / "30")
    return w


def _truncate_params(step_dir: Path) -> None:
    data = max((step_dir / "params" / "d").iterdir(), key=lambda f: f.stat().st_size)
    with open(data, "r+b") as f:
        f.truncate(data.stat().st_size // 2)


def _flip_a_bit_of_params(step_dir: Path) -> None:
    """One flipped bit in the middle of the params data (whatever the storage format then
    makes of it: an unreadable chunk or a wrong value, the step must not be used)."""
    data = max((step_dir / "params" / "d").iterdir(), key=lambda f: f.stat().st_size)
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0x10
    data.write_bytes(bytes(raw))


def _flip_a_recorded_checksum(step_dir: Path) -> None:
    """What a flipped bit inside an array does to its fingerprint, without depending on
    where the storage format keeps the bytes of that array."""
    meta_file = step_dir / "meta" / "metadata"
    meta = json.loads(meta_file.read_text())
    name, value = next(iter(meta["checksums"]["params"].items()))
    meta["checksums"]["params"][name] = f"{int(value, 16) ^ 1:016x}"
    meta_file.write_text(json.dumps(meta))


@pytest.mark.slow
@pytest.mark.parametrize("damage", [_truncate_params, _flip_a_bit_of_params, _flip_a_recorded_checksum,
                                    lambda d: shutil.rmtree(d / "meta")],
                         ids=["truncated", "flipped-bit", "checksum", "no-meta"])
def test_damaged_newest_checkpoint_falls_back_to_the_previous_step(tmp_path, reference_run, damage):
    w = _damaged_copy(reference_run, tmp_path, damage)
    p = run(w, REFERENCE)
    assert "checkpoint step 30 is damaged" in p.stdout and f"resumed from {w / 'checkpoints' / '24'}" in p.stdout
    assert (w / "checkpoints" / "30.damaged").is_dir()  # kept for inspection, never deleted
    assert losses(w) == losses(reference_run)  # steps 25..30 again, bit for bit
    assert store.verify_step(w / "checkpoints", 30).startswith("ok")


def test_verify_cli_names_the_damaged_step(tmp_path, reference_run, capsys):
    w = _damaged_copy(reference_run, tmp_path, _flip_a_recorded_checksum)
    assert checkpoint_cli.main(["verify", str(w)]) == 1
    out = capsys.readouterr().out
    assert "step 30: DAMAGED:" in out and "checksum" in out and "step 24: ok (" in out


def test_fingerprints_on_device_equal_the_host_ones_and_see_one_flipped_bit():
    import jax

    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from easylemur.checkpoint.fingerprint import array_fingerprint, tree_fingerprints
    from easylemur.sharding import make_mesh

    rng = np.random.default_rng(0)
    arrays = {"f32": rng.standard_normal((16, 24), np.float32), "bf16": rng.standard_normal((8, 6)).astype("bfloat16"),
              "i32": np.int32(7), "b": rng.random(5) > 0.5}
    mesh = make_mesh("data:2,fsdp:2,tensor:2")
    spec = {2: P(("data", "fsdp"), "tensor"), 1: P(), 0: P()}
    sharded = {k: jax.device_put(v, NamedSharding(mesh, spec[np.ndim(v)])) for k, v in arrays.items()}
    assert tree_fingerprints(sharded) == {k: array_fingerprint(np.asarray(v)) for k, v in arrays.items()}
    flipped = arrays["f32"].copy()
    flipped.view(np.uint32)[3, 5] ^= 1 << 17
    swapped = arrays["f32"].copy()
    swapped[[0, 1]] = swapped[[1, 0]]
    assert len({array_fingerprint(a) for a in (arrays["f32"], flipped, swapped)}) == 3


# ----------------------------------------------------------------------------- failed saves


@pytest.mark.slow
def test_a_failed_save_stops_the_run_at_that_save(tmp_path):
    w = tmp_path / "small_disk"
    w.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12m", "tmpfs", str(w)], capture_output=True).returncode:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        p = run(w, ["train.steps=8", "checkpoint.every=2", "checkpoint.keep=0"], check=False)
        assert p.returncode == 1, p.stdout[-2000:] + p.stderr[-2000:]
        line = p.stderr.strip().splitlines()[-1]
        assert line.startswith("error: saving a checkpoint in ") and "No space left on device" in line, p.stderr[-3000:]
        good = [s for s in (2, 4, 6) if (w / "checkpoints" / str(s)).is_dir()]
        assert good and f"the newest complete checkpoint is step {good[-1]}" in line
        for s in good:  # the earlier checkpoints are intact
            assert store.verify_step(w / "checkpoints", s).startswith("ok")
    finally:
        subprocess.run(["umount", "-l", str(w)])


def test_a_failed_saves_message_names_only_a_complete_step_as_the_newest(tmp_path):
    """The manager lists a step as soon as its save begins; the message of a failed save names
    the newest step whose save finished, not the one that failed (a run told "step 6 is
    complete" would trust a folder that is not there)."""
    mngr = store.manager(tmp_path / "checkpoints", keep=0, async_save=False)
    for step in (2, 4):
        store.save(mngr, step, {"w": np.full((2,), step, np.float32)}, {"step": step}, force=True)
    # step 4 as a save cut short leaves it: under orbax's temporary name, never finalized
    (tmp_path / "checkpoints" / "4").rename(tmp_path / "checkpoints" / "4.orbax-checkpoint-tmp-1")
    assert 4 in mngr.all_steps()
    msg = store._save_failure(mngr, OSError(28, "No space left on device"))
    assert msg.endswith("the newest complete checkpoint is step 2"), msg
    assert "No space left on device [errno 28]" in msg
    mngr.close()


# ----------------------------------------------------------------------------- temp files


def test_a_planted_tokenizer_at_a_temp_path_is_never_used(tmp_path, llama2_like_spm):
    import hashlib
    import tempfile

    from easylemur.tokenizer.spm import DEFAULT_TOKENIZER_PATH

    raw = Path(DEFAULT_TOKENIZER_PATH).read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    # every predictable name easylemur ever used, and a few others, hold another model
    for name in (f"easylemur-tok-{digest[:16]}.model", f"tokenizer-{digest}.model", f"tokenizer-{digest[:16]}.model"):
        shutil.copy(llama2_like_spm, Path(tempfile.gettempdir()) / name)
    meta = model_meta.make_meta(0, model_meta.model_config_from_json({}), DEFAULT_TOKENIZER_PATH)
    path = model_meta.tokenizer_from_json(meta["tokenizer"], meta["tokenizer_sha256"])
    assert path.read_bytes() == raw
    assert os.stat(path.parent).st_mode & 0o077 == 0  # a directory only this user can enter
    with pytest.raises(store.CheckpointError, match=f"sha256 {digest}.*recorded 0+"):
        model_meta.tokenizer_from_json(base64.b64encode(raw).decode(), "0" * 64)


# ----------------------------------------------------------------------------- one-line errors


@pytest.mark.slow
@pytest.mark.parametrize("overrides, expected", [
    (["data.seq_len=2048"], "data.seq_len=2048 is longer than the model's max_position_embeddings=1024"),
    (["train.batch_size=12"], "train.batch_size=12 with train.grad_accum=1 gives micro-batches of 12 rows"),
    (["data.sources.code.path=/nowhere/code"], "/nowhere/code"),
])
def test_train_errors_are_one_line_with_exit_2(tmp_path, capsys, overrides, expected):
    rc, out, err = main(capsys, tmp_path / "w", overrides + ["train.steps=2"])
    assert rc == 2, out[-2000:] + err[-2000:]
    assert err.count("\n") == 1 and err.startswith("error: ") and expected in err, err


@pytest.mark.slow
def test_resume_with_another_batch_size_says_the_data_order_changes(tmp_path, reference_run):
    w = tmp_path / "w"
    shutil.copytree(reference_run, w)
    p = run(w, ["train.steps=31", "checkpoint.every=6", "train.batch_size=16"])
    assert "warning: resuming step 30 with changed data settings (train.batch_size 8 -> 16)" in p.stdout
    # the closing summary: how far, the last loss, where the checkpoint and the metrics are
    last = json.loads((w / "metrics.jsonl").read_text().splitlines()[-1])
    assert f"train: done: step 31 of 31 (this launch: steps 30->31); final loss {last['loss']:.4f}; " in p.stdout
    assert f"checkpoint {w / 'checkpoints' / '31'}; metrics {w / 'metrics.jsonl'}" in p.stdout, p.stdout[-2000:]


def test_a_config_over_other_sources_is_refused_on_a_workdir_with_a_run(tmp_path, reference_run, capsys):
    """A chat config pointed at a pre-training workdir is another run, not a resume: one line
    saying so and how to start from it (it dumped the sources as JSON, then failed in the data
    iterator)."""
    w = tmp_path / "w"
    shutil.copytree(reference_run, w)
    from easylemur.errors import run_cli
    from easylemur.train.loop import main as train_main

    rc = run_cli(train_main, ["--config", "configs/tiny_chat.py", f"--config.workdir={w}", "--config.train.steps=31"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: workdir {w} holds a run over data sources ['code', 'text'] (step 30); this config "
                          f"reads ['chat']. A new run needs its own workdir (--config.workdir=NEW); add "
                          f"--config.init.from={w} to start from that run's weights"), err
