"""data.stages: mixture weights that change at given steps (docs/design.md, "Mixture"), through
the real pipeline on the sample data: the switch at the exact step, each stage's shares,
resume (mid-stage, at and across a boundary), data.shards, the stats report, config errors."""

import json
from pathlib import Path

import grain
import numpy as np
import pytest

from easylemur.config import ConfigError, load_config, split_overrides
from easylemur.data.mixture import MixIterDataset
from easylemur.data.pipeline import make_pipeline
from easylemur.data.records import DataError
from easylemur.tokenizer.spm import Tokenizer

ROOT = Path(__file__).resolve().parents[1]
# code:text 10:1 (the sources' own weights) until step 6, then 1:1, text only from step 10,
# 3:1 from step 13
STAGES = [{"start_step": 6, "weights": {"code": 1, "text": 1}},
          {"start_step": 10, "weights": {"code": 0, "text": 1}},
          {"start_step": 13, "weights": {"code": 3.0, "text": 1.0}}]
BOUNDS = [(0, 6, 10 / 11), (6, 10, 0.5), (10, 13, 0.0), (13, 40, 0.75)]  # (first step, end, code's share)


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.load(None)


def cfg_of(*overrides, stages=STAGES, config="configs/tiny_pretrain.py"):
    extra = [f"data.stages={json.dumps(stages)}"] if stages is not None else []
    return load_config(ROOT / config, ["data.seq_len=32", "data.prefetch=0", *extra, *overrides])


def batches(it, n):
    return [{k: v.copy() for k, v in next(it).items()} for _ in range(n)]


def code_rows(bs) -> np.ndarray:
    """[steps] rows of source 0 (code) in each batch."""
    return np.array([int((b["source"] == 0).sum()) for b in bs])


def assert_same(expected, got):
    assert len(expected) == len(got)
    for e, g in zip(expected, got):
        for k in e:
            np.testing.assert_array_equal(e[k], g[k], err_msg=k)


def test_weights_switch_at_the_stated_step_and_each_stage_is_exact(tok):
    B = 16
    with make_pipeline(cfg_of().data, tok, global_batch_size=B, seed=0) as it:
        bs = batches(it, 40)
    code = code_rows(bs)
    assert all(((b["source"] == 0) | (b["source"] == 1)).all() for b in bs)
    for first, end, share in BOUNDS:
        # within a stage, after m of its rows code has given round(m * share) of them, within one
        cum = np.cumsum(code[first:end])
        m = B * np.arange(1, end - first + 1)
        assert (np.abs(cum - m * share) <= 1).all(), (first, cum, m * share)
        assert abs(cum[-1] / m[-1] - share) <= 0.02
    # the rows of each step right before and at each switch
    assert code[5] in (14, 15) and code[6:10].tolist() == [8] * 4  # 10:1, then 1:1
    assert code[9] == 8 and code[10:13].tolist() == [0] * 3  # text only: code paused
    assert code[13:].tolist() == [12] * 27  # 3:1 of 16 rows


def test_each_stage_ratio_holds_over_many_rows(tok):
    # 2,048 rows a stage at 48 rows a step: every stage's share within 2% (by rows)
    stages = [{"start_step": 0, "weights": {"code": 1, "text": 4}}, {"start_step": 43, "weights": {"code": 7, "text": 1}}]
    with make_pipeline(cfg_of(stages=stages).data, tok, global_batch_size=48, seed=5) as it:
        code = code_rows(batches(it, 86))
    assert abs(code[:43].sum() / (43 * 48) - 0.2) <= 0.02 and abs(code[43:].sum() / (43 * 48) - 0.875) <= 0.02


@pytest.mark.parametrize("at,resumed_prefetch", [(3, 0), (6, 2), (11, 0), (12, 2)])
def test_resume_mid_stage_and_across_a_boundary(tok, at, resumed_prefetch):
    # saved mid-stage (3, 11), exactly at a switch (6) and one step before one (12): the resumed
    # run (with another data.prefetch, too) gives the uninterrupted run's batches
    cfg = cfg_of()
    with make_pipeline(cfg.data, tok, global_batch_size=8, seed=3) as it:
        batches(it, at)
        state = json.loads(json.dumps(it.get_state()))  # what a checkpoint stores
        expected = batches(it, 20 - at)
        tokens = it.token_counts()
    cfg2 = cfg_of(f"data.prefetch={resumed_prefetch}")
    with make_pipeline(cfg2.data, tok, global_batch_size=8, seed=3) as it2:
        it2.set_state(state)
        assert_same(expected, batches(it2, 20 - at))
        assert it2.token_counts() == tokens


def _range_sources(n):
    inline = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)  # no read threads to start per iterator
    return [grain.MapDataset.range(10**6).map(lambda i, s=s: (s, i)).to_iter_dataset(inline) for s in range(n)]


def test_mixer_resumes_at_every_row_also_between_equal_stages():
    # stages of equal weights one after the other still restart the round-robin at the switch;
    # a state saved at any row (a boundary included) continues the same sequence
    ds = MixIterDataset(_range_sources(3), [5, 1, 1],
                        [(2, [1, 1, 1]), (4, [1, 1, 1]), (5, [0, 2, 3]), (7, [2, 0, 0])], rows_per_step=3)
    it = iter(ds)
    full = [next(it) for _ in range(30)]
    assert [s for s, _ in full[15:21]] == [2, 1, 2, 1, 2, 2]  # stage 5: 2:3, fresh credits
    assert {s for s, _ in full[21:]} == {0}
    for k in range(30):
        it = iter(ds)
        for _ in range(k):
            next(it)
        state = json.loads(json.dumps(it.get_state()))
        it2 = iter(ds)
        it2.set_state(state)
        assert [next(it2) for _ in range(30 - k)] == full[k:], k


def test_state_without_stages_still_loads(tok):
    # a state saved before data.stages existed (mixer keys parents, credit, active) resumes a run
    # without stages exactly; with stages it is a one-line error (it does not say where the run is)
    cfg = cfg_of(stages=None)
    with make_pipeline(cfg.data, tok, global_batch_size=8, seed=1) as it:
        batches(it, 5)
        state = json.loads(json.dumps(it.get_state()))
        expected = batches(it, 6)
    state["grain"] = {k: state["grain"][k] for k in ("parents", "credit", "active")}
    with make_pipeline(cfg.data, tok, global_batch_size=8, seed=1) as it2:
        it2.set_state(state)
        assert_same(expected, batches(it2, 6))
        assert it2.get_state()["grain"]["rows"] is None
    with make_pipeline(cfg_of().data, tok, global_batch_size=8, seed=1) as it3:
        with pytest.raises(DataError) as e:
            it3.set_state(state)
    assert "\n" not in str(e.value) and "without data.stages" in str(e.value)


def test_changed_weights_on_resume_restart_the_round_robin(tok):
    # a run resumed with other weights at its row: a fresh round-robin there, as at a stage's start
    with make_pipeline(cfg_of(stages=None).data, tok, global_batch_size=8, seed=1) as it:
        batches(it, 3)
        state = it.get_state()
    assert state["grain"]["credit"] != [0.0, 0.0]
    stages = [{"start_step": 0, "weights": {"code": 1, "text": 3}}]
    with make_pipeline(cfg_of(stages=stages).data, tok, global_batch_size=8, seed=1) as it2:
        it2.set_state(state)
        assert it2.get_state()["grain"]["credit"] == [0.0, 0.0]
        assert code_rows(batches(it2, 4)).tolist() == [2, 2, 2, 2]


def test_data_shards_same_global_batches_for_one_or_two_processes(tok):
    from easylemur.data.shards import DataShards
    from easylemur.sharding import make_mesh

    cfg = cfg_of("data.shards=2")
    mesh = make_mesh(cfg.mesh)
    data = DataShards(cfg.data, tok, mesh, global_batch_size=16, seed=2)  # one process: both shards
    try:
        one = [{k: np.asarray(v) for k, v in next(data).items()} for _ in range(16)]
        state = json.loads(json.dumps(data.get_state()))
    finally:
        data.close()
    # each process of a 2-process run builds its shard alone, as shards.py does: shard s is
    # process_index=s of process_count=2, 8 rows a step
    per = []
    for s in range(2):
        with make_pipeline(cfg.data, tok, global_batch_size=16, seed=2, process_index=s, process_count=2) as it:
            per.append(batches(it, 16))
            if s == 0:
                assert state["streams"]["0"]["grain"] == it.get_state()["grain"]
    two = [{k: np.concatenate([per[0][t][k], per[1][t][k]]) for k in per[0][t]} for t in range(16)]
    assert_same(one, two)
    code = code_rows(one)
    assert code[6:10].tolist() == [8] * 4 and code[10:13].tolist() == [0] * 3 and code[13:].tolist() == [12] * 3
    # 10:1 before step 6: each shard within one row of its share, so the global batch within two
    assert abs(code[:6].sum() - 6 * 16 * 10 / 11) <= 2 and state["streams"]["1"]["grain"]["rows"] == 16 * 8


def test_single_source_and_eval_pipelines(tok):
    # one source: stages naming only it are fine (no mixer, the same rows as without)
    kw = dict(global_batch_size=4, seed=0)
    with make_pipeline(cfg_of(stages=None, config="configs/tiny_chat.py").data, tok, **kw) as a:
        ref = batches(a, 3)
    one = [{"start_step": 0, "weights": {"chat": 2}}, {"start_step": 2, "weights": {"chat": 1}}]
    with make_pipeline(cfg_of(stages=one, config="configs/tiny_chat.py").data, tok, **kw) as b:
        assert_same(ref, batches(b, 3))
    # eval pipelines (sources given) take no stages: text paused by a stage is still read
    cfg = cfg_of(stages=[{"start_step": 0, "weights": {"code": 1, "text": 0}}])
    with make_pipeline(cfg.data, tok, global_batch_size=8, seed=0) as it:
        assert code_rows(batches(it, 4)).tolist() == [8] * 4
    with make_pipeline(cfg.data, tok, global_batch_size=8, seed=0, sources=cfg.data.sources, shuffle=False,
                       repeat=False) as ev:
        assert (code_rows(batches(ev, 4)) < 8).any()


def test_stats_reports_tokens_and_epochs_per_stage(capsys):
    from easylemur.data.__main__ import main

    stages = json.dumps([{"start_step": 50, "weights": {"code": 1, "text": 1}},
                         {"start_step": 150, "weights": {"code": 0, "text": 1}},
                         {"start_step": 500, "weights": {"code": 1, "text": 1}}])
    args = ["stats", "--no-progress", "--config", "configs/tiny_pretrain.py", f"--config.data.stages={stages}"]
    assert main([*args, "--format", "json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    by = {s["name"]: s for s in rep["sources"]}
    run = rep["run"]
    assert [(s["from"], s["start_step"], s["end_step"], s["steps"]) for s in run["stages"]] == [
        ("data.sources", 0, 50, 50), ("data.stages[0]", 50, 150, 100), ("data.stages[1]", 150, 200, 50),
        ("data.stages[2]", 500, 500, 0)]
    s0, s1, s2, s3 = run["stages"]
    assert s0["sources"]["code"]["share"] == pytest.approx(10 / 11) and s0["sources"]["code"]["weight"] == 10
    assert s1["sources"]["code"]["rows"] == s1["sources"]["text"]["rows"] == 100 * 16 // 2
    assert s2["sources"]["code"]["rows"] == 0 and s2["sources"]["text"]["rows"] == 50 * 16
    for n in ("code", "text"):
        for s in run["stages"]:
            q = s["sources"][n]
            # of the rows the stage reads (before they are rounded to whole rows)
            assert q["epochs"] == pytest.approx(q["rows"] / by[n]["rows"], abs=0.5 / by[n]["rows"])
            assert q["tokens"] == pytest.approx(q["rows"] * by[n]["tokens"] / by[n]["rows"], abs=by[n]["tokens"] / by[n]["rows"])
        total = run["sources"][n]
        assert total["rows"] == sum(s["sources"][n]["rows"] for s in run["stages"])
        assert total["epochs"] == pytest.approx(sum(s["sources"][n]["epochs"] for s in run["stages"]))
        assert total["tokens"] == pytest.approx(sum(s["sources"][n]["tokens"] for s in run["stages"]), abs=2)
    assert run["sources"]["code"]["rows"] + run["sources"]["text"]["rows"] == 200 * 16
    assert "data.stages[2] starts at step 500, not before train.steps=200: it never applies" in rep["warnings"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "  stage 1 (data.stages[0]): from step 50, 100 steps\n" in out and "  all stages:\n" in out
    t = s1["sources"]["text"]
    assert f"    text  weight 1      share  50.0%  rows 800  tokens {t['tokens']:,}  epochs {t['epochs']:.2f}\n" in out


def test_stages_from_a_config_file_and_the_command_line(tmp_path):
    f = tmp_path / "staged.py"
    f.write_text(
        "from ml_collections import ConfigDict\n\n"
        "def get_config():\n"
        "    c = ConfigDict()\n"
        "    c.data = ConfigDict()\n"
        "    c.data.sources = ConfigDict({'a': {'path': 'x.jsonl', 'weight': 3}, 'b': {'path': 'y.jsonl'}})\n"
        "    c.data.stages = ({'start_step': 0, 'weights': {'a': 1, 'b': 1}}, {'start_step': 9, 'weights': {'a': 0, 'b': 2}})\n"
        "    return c\n")
    cfg = load_config(f)
    assert cfg.data.stages == [{"start_step": 0, "weights": {"a": 1.0, "b": 1.0}},
                               {"start_step": 9, "weights": {"a": 0.0, "b": 2.0}}]
    _, overrides = split_overrides(["--config.data.stages", '[{"start_step": 4, "weights": {"b": 1, "a": 0.5}}]'])
    cfg = load_config(f, overrides)
    assert cfg.data.stages == [{"start_step": 4, "weights": {"a": 0.5, "b": 1.0}}]
    assert load_config(f, ["data.stages=[]"]).data.stages == []
    assert load_config(None).data.stages == []


@pytest.mark.parametrize("stages,message", [
    ('[{"start_step": 0, "weights": {"code": 1, "txt": 1}}]',
     "config key 'data.stages[0].weights.txt': no such source in data.sources (code, text)"),
    ('[{"start_step": 0, "weights": {"code": 1}}]',
     "config key 'data.stages[0].weights.text' is missing: a stage gives every source a weight (0 pauses it)"),
    ('[{"start_step": 5, "weights": {"code": 1, "text": 1}}, {"start_step": 5, "weights": {"code": 1, "text": 0}}]',
     "config key 'data.stages[1].start_step' must be an integer >= 0 and after data.stages[0].start_step=5, got 5"),
    ('[{"start_step": -1, "weights": {"code": 1, "text": 1}}]',
     "config key 'data.stages[0].start_step' must be an integer >= 0, got -1"),
    ('[{"start_step": 0, "weights": {"code": -1, "text": 1}}]',
     "config key 'data.stages[0].weights.code' must be a number >= 0 (0 pauses it), got -1"),
    ('[{"start_step": 0, "weights": {"code": 0, "text": 0}}]',
     "config key 'data.stages[0].weights' gives no source a weight above 0"),
    ('[{"start": 0, "weights": {"code": 1, "text": 1}}]',
     "config key 'data.stages[0]' must be a mapping with keys start_step and weights, got {'start': 0, "),
    ('{"start_step": 0}', "config key 'data.stages' must be a list, got {'start_step': 0}"),
])
def test_bad_stages_are_one_line_errors(capsys, stages, message):
    from easylemur.data.__main__ import main

    with pytest.raises(ConfigError) as e:
        load_config(ROOT / "configs/tiny_pretrain.py", [f"data.stages={stages}"])
    assert str(e.value).startswith(message) and "\n" not in str(e.value)
    rc = main(["stats", "--no-progress", "--config", "configs/tiny_pretrain.py", f"--config.data.stages={stages}"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.startswith(f"error: {message}") and err.count("\n") == 1
