"""W&B (`log.wandb_project`): one W&B run per workdir, its id in WORKDIR/wandb_run_id, so a
relaunch logs on into the same run at its own train steps; real wandb, offline (WANDB_MODE=offline:
no server, no network), judged by the run files wandb writes."""

import sys
from pathlib import Path

import pytest

from train_run import main


@pytest.fixture
def wandb_offline(tmp_path, monkeypatch) -> Path:
    """wandb offline, every file it writes under tmp_path; the directory of its runs."""
    root = tmp_path / "wandb_home"
    for var, sub in [("WANDB_DIR", "dir"), ("WANDB_CONFIG_DIR", "config"), ("WANDB_CACHE_DIR", "cache"),
                     ("WANDB_DATA_DIR", "data"), ("WANDB_ARTIFACT_DIR", "artifacts")]:
        (root / sub).mkdir(parents=True)
        monkeypatch.setenv(var, str(root / sub))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_ERROR_REPORTING", "false")
    monkeypatch.delenv("WANDB_RUN_ID", raising=False)
    monkeypatch.delenv("WANDB_RESUME", raising=False)
    yield root / "dir" / "wandb"
    import wandb

    wandb.teardown()  # its service process, started by the first run, ends with the test


def _records(path: Path):
    """The protobuf records of an offline run's run-ID.wandb: a 7-byte header (":W&B", magic,
    version), then LevelDB's log format (32 KiB blocks of chunks: crc32c, length, type)."""
    from wandb.proto.wandb_internal_pb2 import Record

    data, block = path.read_bytes(), 32768
    assert data[:4] == b":W&B", path
    pos, chunk = 7, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a chunk header is padding
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        chunk += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL, LAST
            yield Record.FromString(chunk)
            chunk = b""


def _offline_runs(wandb_dir: Path) -> list[tuple[str, str, list[int], dict[int, float]]]:
    """Each offline run, oldest first: (run id, project, history steps, loss per step)."""
    runs = []
    for d in sorted(wandb_dir.glob("offline-run-*")):
        (f,) = d.glob("run-*.wandb")
        run_id = project = None
        steps, loss = [], {}
        for r in _records(f):
            kind = r.WhichOneof("record_type")
            if kind == "run":
                run_id, project = r.run.run_id, r.run.project
            elif kind == "history":
                steps.append(r.history.step.num)
                items = {i.key or "/".join(i.nested_key): i.value_json for i in r.history.item}
                assert int(items["step"]) == r.history.step.num, items  # W&B's step is the train step
                loss[r.history.step.num] = float(items["loss"])
        runs.append((run_id, project, steps, loss))
    return runs


@pytest.mark.slow
def test_a_relaunch_logs_on_into_the_same_wandb_run(tmp_path, capsys, wandb_offline):
    w = tmp_path / "w"
    rc, out, err = main(capsys, w, ["log.wandb_project=lemur", "train.steps=3", "checkpoint.every=3"])
    assert rc == 0, out[-2000:] + err[-2000:]
    run_id = (w / "wandb_run_id").read_text().strip()
    assert run_id and f"W&B run {run_id} (project lemur" in out, out[-2000:]
    rc, out, err = main(capsys, w, ["log.wandb_project=lemur", "train.steps=5", "checkpoint.every=3"])
    assert rc == 0, out[-2000:] + err[-2000:]
    assert (w / "wandb_run_id").read_text().strip() == run_id  # read back, not made again

    runs = _offline_runs(wandb_offline)
    assert [(i, p, s) for i, p, s, _ in runs] == [(run_id, "lemur", [1, 2, 3]), (run_id, "lemur", [4, 5])], runs
    import json

    logged = {r["step"]: r["loss"] for r in map(json.loads, (w / "metrics.jsonl").read_text().splitlines())}
    assert {**runs[0][3], **runs[1][3]} == pytest.approx(logged)


def test_wandb_project_without_wandb_is_one_line_exit_2_before_the_run_starts(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError; find_spec finds none
    rc, out, err = main(capsys, tmp_path / "w", ["log.wandb_project=lemur", "train.steps=2"])
    assert rc == 2, out[-2000:] + err[-2000:]
    assert err.count("\n") == 1 and err.startswith("error: log.wandb_project='lemur'"), err
    assert "pip install 'easylemur[wandb]'" in err
    assert not (tmp_path / "w").exists()  # before the workdir was made, let alone a model


class _FakeRun:
    def __init__(self, starting_step: int):
        self.starting_step, self.logged, self.finished = starting_step, [], False

    def log(self, record, step=None):
        self.logged.append((step, record))

    def finish(self):
        self.finished = True


def test_only_process_0_opens_the_wandb_run(tmp_path, monkeypatch):
    import jax
    import wandb

    from easylemur.tracker.writer import MetricsWriter

    monkeypatch.setattr(wandb, "init", lambda **kw: pytest.fail(f"wandb.init on process 1: {kw}"))
    monkeypatch.setattr(jax, "process_index", lambda: 1)
    w = MetricsWriter(tmp_path / "w", "lemur", {})
    w.write({"step": 1, "loss": 2.0})
    w.close()
    assert not (tmp_path / "w").exists()


def test_a_resumed_wandb_run_gets_no_step_it_already_holds(tmp_path, monkeypatch, capsys):
    """Online, a resumed W&B run goes on after the last step it holds, which can be past the
    checkpoint the relaunch resumes from (the killed launch logged on after it): those steps
    are trained again, and W&B would refuse them (and warn for each)."""
    import wandb

    from easylemur.tracker.writer import MetricsWriter

    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "wandb_run_id").write_text("abc123\n")
    seen = {}
    run = _FakeRun(starting_step=8)  # the killed launch logged steps up to 7

    def init(**kw):
        seen.update(kw)
        return run

    monkeypatch.setattr(wandb, "init", init)
    w = MetricsWriter(tmp_path / "w", "lemur", {"seed": 1}, resume_step=5)
    assert seen["id"] == "abc123" and seen["resume"] == "allow" and seen["project"] == "lemur"
    assert "resumed after its step 7" in capsys.readouterr().out
    for step in (6, 7, 8, 9):
        w.write({"step": step, "loss": 1.0 / step})
    w.close()
    assert [s for s, _ in run.logged] == [8, 9] and run.finished
    assert (tmp_path / "w" / "wandb_run_id").read_text() == "abc123\n"


def test_a_first_launch_that_logs_nothing_leaves_no_run_id(tmp_path, monkeypatch):
    import wandb

    from easylemur.tracker.writer import MetricsWriter

    monkeypatch.setattr(wandb, "init", lambda **kw: _FakeRun(0))
    w = MetricsWriter(tmp_path / "w", "lemur", {})
    assert len((tmp_path / "w" / "wandb_run_id").read_text().strip()) == 8
    w.close()  # a start that failed before its first step
    assert not (tmp_path / "w" / "wandb_run_id").exists()
