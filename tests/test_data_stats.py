"""`python -m easylemur.data stats` (the pre-flight data report) and data.preflight, run
in-process through the CLIs' own `main`s."""

import json

import pytest

from easylemur.data.__main__ import main

GOOD = [json.dumps({"text": f"def f{i}(x):\n    return x + {i}\n" * 3}) for i in range(40)]


def run(capsys, *args):
    rc = main(["stats", "--no-progress", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def stats_json(capsys, *args) -> dict:
    rc, out, err = run(capsys, "--format", "json", *args)
    assert rc == 0, err
    return json.loads(out)


def bad_file(tmp_path):
    """40 good documents with bad records on lines 3, 6, 9, 12 and a blank line 15."""
    lines = list(GOOD)
    lines.insert(2, '{"text": "unterminated')  # line 3
    lines.insert(5, json.dumps({"content": "no text field"}))  # line 6
    lines.insert(8, json.dumps({"text": "   "}))  # line 9
    lines.insert(11, json.dumps({"text": ["not", "a", "string"]}))  # line 12
    lines.insert(14, "  ")  # line 15: blank, not a record
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.slow
def test_stats_tiny_pretrain_counts_equal_the_pipelines(capsys):
    from easylemur.config import load_config
    from easylemur.data.pipeline import make_pipeline
    from easylemur.tokenizer.spm import Tokenizer

    rep = stats_json(capsys, "--config", "configs/tiny_pretrain.py")
    by = {s["name"]: s for s in rep["sources"]}
    assert set(by) == {"code", "text"}
    assert by["code"]["files"] == 5 and by["text"]["files"] == 1
    for s in by.values():
        assert s["records"] == s["usable"] > 0 and s["bad_total"] == 0 and not s["estimated"]
        assert s["mean_tokens"] == pytest.approx(s["tokens"] / s["usable"], abs=0.1)

    # one unshuffled pass of the pipeline: its own per-source token counter and rows
    cfg = load_config("configs/tiny_pretrain.py", ["data.prefetch=0"])
    it = make_pipeline(cfg.data, Tokenizer.load(None), global_batch_size=16, seed=0, shuffle=False, repeat=False)
    rows = {"code": 0, "text": 0}
    with it:
        for batch in it:
            for src in batch["source"][batch["source"] >= 0]:
                rows[it.source_names[src]] += 1
        assert it.token_counts() == {n: by[n]["tokens"] for n in ("code", "text")}
    assert rows == {n: by[n]["rows"] for n in ("code", "text")}

    run_ = rep["run"]
    assert run_["tokens_per_step"] == 16 * 256 and run_["tokens"] == 200 * 16 * 256
    code, text = run_["sources"]["code"], run_["sources"]["text"]
    assert code["share"] == pytest.approx(10 / 11) and text["share"] == pytest.approx(1 / 11)
    assert code["rows"] + text["rows"] == 200 * 16
    # epochs: the rows 10:1 gives each source over the rows one pass of it fills
    assert code["epochs"] == pytest.approx(200 * 16 * 10 / 11 / by["code"]["rows"])
    assert text["epochs"] == pytest.approx(200 * 16 / 11 / by["text"]["rows"])

    rc, out, _ = run(capsys, "--config", "configs/tiny_pretrain.py", "--config.train.steps=4000")
    assert rc == 0
    assert "source 'code': data/samples/code (jsonl, text, weight 10)" in out
    assert f"tokens {by['text']['tokens']:,}  " in out and "(4,096 per step)" in out
    assert "warning: source 'text' would repeat" in out and "warning: source 'code' would repeat" in out


@pytest.mark.slow
def test_stats_sampled_is_marked_as_estimate(capsys):
    exact = {s["name"]: s for s in stats_json(capsys, "--config", "configs/tiny_pretrain.py")["sources"]}
    rep = stats_json(capsys, "--config", "configs/tiny_pretrain.py", "--sample-records", "30")
    for s in rep["sources"]:
        assert s["estimated"] and s["scanned"] < s["records"] == exact[s["name"]]["records"]
        assert s["scanned"] <= 30 + s["files"]  # about N, at least one per file
        assert 0.5 < s["tokens"] / exact[s["name"]]["tokens"] < 2
        assert rep["run"]["sources"][s["name"]]["estimated"]
    rc, out, _ = run(capsys, "--config", "configs/tiny_pretrain.py", "--sample-records", "30")
    assert rc == 0 and "(estimated from 30 records)" in out and "epochs ~" in out


@pytest.mark.slow
def test_stats_lists_bad_records_by_file_and_line(capsys, tmp_path):
    path = bad_file(tmp_path)
    rep = stats_json(capsys, "--config", "configs/tiny_pretrain.py", f"--config.data.sources.text.path={path}")
    text = next(s for s in rep["sources"] if s["name"] == "text")
    assert text["records"] == 45 and text["usable"] == 40 and text["blank"] == 1
    assert text["bad"] == {"malformed_json": 1, "missing_field": 1, "empty": 1, "not_a_string": 1}
    assert [e.split(": ")[0:2] for e in text["bad_examples"]] == [
        [f"{path}:3", "malformed_json (Unterminated string starting at"], [f"{path}:6", "missing_field (no field 'text')"],
        [f"{path}:9", "empty (field 'text' is empty)"], [f"{path}:12", "not_a_string (field 'text' is list)"]]
    assert any("'text' has 4 bad records" in w and f"{path}:3" in w for w in rep["warnings"])
    rc, out, _ = run(capsys, "--config", "configs/tiny_pretrain.py", f"--config.data.sources.text.path={path}")
    assert rc == 0 and f"    {path}:12: not_a_string" in out
    assert "bad 4 (empty 1, malformed_json 1, missing_field 1, not_a_string 1)" in out


@pytest.mark.slow
def test_stats_warns_about_tiny_shares(capsys):
    rep = stats_json(capsys, "--config", "configs/tiny_pretrain.py", "--config.data.sources.text.weight=0.05")
    assert rep["run"]["sources"]["text"]["share"] < 0.01
    assert any(w.startswith("source 'text' gets 0.50% of the rows") for w in rep["warnings"]), rep["warnings"]
    assert not any("repeat" in w for w in rep["warnings"])


def test_stats_errors_are_one_line(capsys, tmp_path):
    rc, out, err = run(capsys, "--config", "configs/tiny_pretrain.py", f"--config.data.sources.code.path={tmp_path}/nope")
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(f"error: source 'code': {tmp_path}/nope: no such file")
    rc, _, err = run(capsys, "--config", "configs/tiny_pretrain.py", "--sample-records", "0")
    assert rc == 2 and err == "error: --sample-records must be at least 1, got 0\n"
    with pytest.raises(SystemExit) as e:
        main(["stats", "--help"])
    assert e.value.code == 0 and "--sample-records" in capsys.readouterr().out


@pytest.mark.slow
def test_preflight_fails_a_strict_run_before_its_first_step(capsys, tmp_path):
    from train_run import main as train_main

    lines = GOOD * 5
    lines.insert(180, '{"text": "a record cut short')  # line 181, far from where step 1 reads
    path = tmp_path / "late_bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    base = [f"data.sources.text.path={path}", "data.strict=true", "train.steps=1", "checkpoint.every=1"]
    rc, _, err = train_main(capsys, tmp_path / "run", base + ["data.preflight=true"])
    assert rc == 2, err
    assert err.splitlines()[-1] == (f"error: source 'text': 1 bad record found by data.preflight, the first at {path}:181: "
                                    "malformed_json (Unterminated string starting at: line 1 column 10 (char 9)) "
                                    "(data.strict=True); the run did not start")
    assert "easylemur.data preflight:" in err
    assert not (tmp_path / "run" / "metrics.jsonl").exists() and not (tmp_path / "run" / "checkpoints").exists()
    # without the preflight, the same strict run would meet the record only later: its first
    # batch (the train loop's data, same seed and sizes) reads fine
    from easylemur.config import load_config
    from easylemur.data.shards import DataShards
    from easylemur.sharding import make_mesh
    from easylemur.tokenizer.spm import Tokenizer
    from train_run import SMALL

    cfg = load_config("configs/tiny_pretrain.py", SMALL + base)
    data = DataShards(cfg.data, Tokenizer.load(None), make_mesh(cfg.mesh), global_batch_size=cfg.train.batch_size,
                      seed=cfg.seed)
    try:
        next(data)
    finally:
        data.close()


def test_run_plan_per_stage_and_its_warnings():
    # data.stages (tests/test_stages.py runs the CLI): one stretch per stage, totals summed,
    # the share warning per stage, a source paused in every stage the run reaches
    from easylemur.data.stats import SourceStats, format_text, report, run_plan

    stats = [SourceStats("code", "c", "jsonl", "text", 10.0, usable=100, tokens=25_600, rows=100),
             SourceStats("text", "t", "jsonl", "text", 1.0, usable=50, tokens=12_800, rows=50)]
    plain = run_plan(stats, steps=100, batch_size=8, seq_len=256)
    assert [(s["from"], s["start_step"], s["steps"]) for s in plain["stages"]] == [("data.sources", 0, 100)]
    assert plain["sources"]["code"]["share"] == 10 / 11 and "stage" not in format_text(report(stats, plain))
    stages = [{"start_step": 0, "weights": {"code": 300.0, "text": 1.0}},
              {"start_step": 40, "weights": {"code": 0.0, "text": 1.0}}]
    plan = run_plan(stats, steps=100, batch_size=8, seq_len=256, stages=stages)
    assert [(s["from"], s["start_step"], s["end_step"]) for s in plan["stages"]] == [("data.stages[0]", 0, 40),
                                                                                     ("data.stages[1]", 40, 100)]
    text = plan["sources"]["text"]
    assert text["rows"] == round(320 / 301) + 480 and text["epochs"] == pytest.approx((320 / 301 + 480) / 50)
    assert text["tokens"] == round((320 / 301 + 480) * 256)
    ws = warnings_of(stats, plan)
    assert "source 'text' gets 0.33% of the rows of stage 0 (data.stages[0], from step 0; weight 1 of 301)" in ws
    assert not any(w.startswith("source 'code' gets") for w in ws)  # 0 in stage 1: paused, not warned
    paused = run_plan(stats, steps=30, batch_size=8, seq_len=256,
                      stages=[{"start_step": 0, "weights": {"code": 1.0, "text": 0.0}}])
    assert ("source 'text' gets no rows in 30 steps: its weight is 0 in every stage the run reaches"
            in warnings_of(stats, paused))


def warnings_of(stats, plan):
    from easylemur.data.stats import warnings

    return warnings(stats, plan)
