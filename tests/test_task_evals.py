"""Task evals inside a run (eval.tasks): pass@k of the weights at the configured steps, logged
beside the loss, computed from the same completions `python -m easylemur.eval` gives for that
checkpoint; a check that fails or hangs leaves training going and says so."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from easylemur.config import ConfigError, load_config
from train_run import ROOT, SMALL, cmd, env, run

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")
EVALS = ["train.steps=4", "checkpoint.every=2", "eval.tasks=humaneval", "eval.every_tasks=2", "eval.problems=3",
         "eval.max_new_tokens=16", "eval.batch_size=2"]


def _records(workdir) -> list[dict]:
    return [json.loads(l) for l in (Path(workdir) / "metrics.jsonl").read_text().splitlines()]


MC = [{"question": "def add(a, b):\n    return", "choices": [" a + b", " a - b", " None"], "answer": 0},
      {"question": "Question: what is 2 + 2?\nAnswer:", "choices": [" 4", " five"], "answer": 0},
      {"question": "import os\nprint(", "choices": ["os.getcwd())", "'hi')"], "answer": 1}]


def _mc_task(d: Path) -> None:
    """A local lm-eval multiple-choice task, `el_mc`, in directory d."""
    d.mkdir()
    (d / "mc.jsonl").write_text("".join(json.dumps(r) + "\n" for r in MC))
    (d / "el_mc.yaml").write_text(f"task: el_mc\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {d / 'mc.jsonl'}\n"
                                  "test_split: test\noutput_type: multiple_choice\n"
                                  'doc_to_text: "{{question}}"\ndoc_to_choice: "{{choices}}"\ndoc_to_target: "{{answer}}"\n'
                                  "metric_list:\n  - metric: acc\n  - metric: acc_norm\n")


@pytest.mark.slow
@needs_bwrap
def test_pass_at_k_and_lm_eval_scores_are_logged_at_the_configured_steps_from_those_weights(tmp_path):
    lm_eval = pytest.importorskip("lm_eval")
    _mc_task(tmp_path / "tasks")
    wd = tmp_path / "run"
    p = run(wd, [*EVALS[:2], "eval.tasks=humaneval,lm_eval:el_mc", *EVALS[3:], f"eval.lm_eval_include={tmp_path / 'tasks'}"])
    rows = _records(wd)
    evals = {r["step"]: r for r in rows if "eval/humaneval/pass@1" in r}
    assert sorted(evals) == [2, 4], rows
    assert all(r["eval/humaneval/problems"] == 3 for r in evals.values())
    assert {r["step"] for r in rows if "loss" in r} == {1, 2, 3, 4}  # the loss records are all there
    assert "eval humaneval at step 4: pass@1" in p.stdout
    # lm-eval's score of the run's weights at step 4 is lm-eval's score of the step-4 checkpoint
    scores = {r["step"]: r for r in rows if "eval/el_mc/acc_norm" in r}
    assert sorted(scores) == [2, 4], rows
    from easylemur.eval.backends.harness import EasylemurLM
    from lm_eval.tasks import TaskManager

    ref = lm_eval.simple_evaluate(model=EasylemurLM(path=str(wd), step=4, batch_size=16), tasks=["el_mc"],
                                  task_manager=TaskManager(include_path=str(tmp_path / "tasks"), include_defaults=False),
                                  bootstrap_iters=0)
    for metric in ("acc", "acc_norm"):
        assert scores[4][f"eval/el_mc/{metric}"] == ref["results"]["el_mc"][f"{metric},none"]

    # `eval watch` on the run's checkpoints afterwards: the same completions and scores, in files of its own
    overrides = [f"--config.{o}" for o in SMALL + [f"workdir={wd}", "eval.tasks=humaneval", "eval.problems=3",
                                                      "eval.max_new_tokens=16", "eval.batch_size=2"]]
    w = subprocess.run([sys.executable, "-m", "easylemur.eval", "watch", "--config", "configs/tiny_pretrain.py", "--once",
                        *overrides], cwd=ROOT, env=env(1), capture_output=True, text=True, timeout=300)
    assert w.returncode == 0, w.stdout[-2000:] + w.stderr[-2000:]
    watched = {json.loads(l)["step"]: json.loads(l) for l in (wd / "eval_metrics.jsonl").read_text().splitlines()}
    assert sorted(watched) == [2, 4]
    for step in (2, 4):
        assert watched[step]["eval/humaneval/pass@1"] == evals[step]["eval/humaneval/pass@1"]
        assert ((wd / "evals_watch" / f"step_{step}" / "humaneval" / "samples.jsonl").read_text()
                == (wd / "evals" / f"step_{step}" / "humaneval" / "samples.jsonl").read_text())
    assert rows == _records(wd)  # the run's own metrics.jsonl is untouched
    # the completions the run checked at step 2 are those the eval CLI decodes from the step-2 checkpoint
    out = tmp_path / "cli"
    cli = subprocess.run([sys.executable, "-m", "easylemur.eval", "humaneval", "--checkpoint", str(wd), "--step", "2",
                          "--limit", "3", "--max-new-tokens", "16", "--out", str(out)],
                         cwd=ROOT, env=env(1), capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0, cli.stderr[-2000:]
    ours = (wd / "evals" / "step_2" / "humaneval" / "samples.jsonl").read_text().splitlines()
    assert ours == (out / "samples.jsonl").read_text().splitlines() and len(ours) == 3
    assert json.loads(cli.stdout.splitlines()[-1])["pass@1"] == evals[2]["eval/humaneval/pass@1"]


# Imported by every Python the run starts (PYTHONPATH): two toy benchmarks in the registry, one row
# each and no other file, whose checks misbehave: toy_raise's program cannot be built (its check
# raises), toy_hang's programs sleep past eval.timeout_s.
FAULTS = """
import sys
sys.path.insert(0, {toy!r})
from easylemur.eval.benchmarks import registry
registry.BENCHMARKS["toy_raise"] = registry.Benchmark("toy_raise", registry.SINGLE_TURN, "toy_faults:raising", ("toy.jsonl",))
registry.BENCHMARKS["toy_hang"] = registry.Benchmark("toy_hang", registry.SINGLE_TURN, "toy_faults:hanging", ("toy.jsonl",))
"""
TOY_FAULTS = """
from easylemur.eval.sandbox import Job
from toy_bench import Toy, load


class Raising(Toy):
    def program(self, p, code):
        raise RuntimeError("toy refuses")


class Hanging(Toy):
    def program(self, p, code):
        return Job(code="import time\\ntime.sleep(60)")


def raising(data, variant="", prompt_format="base"):
    return Raising(load(data), prompt_format)


def hanging(data, variant="", prompt_format="base"):
    return Hanging(load(data), prompt_format)
"""


@pytest.mark.slow
@needs_bwrap
def test_a_failed_or_hung_check_is_reported_and_training_goes_on(tmp_path):
    from test_benchmark_registry import toy_files

    data = toy_files(tmp_path / "toy")
    (tmp_path / "toy" / "toy_faults.py").write_text(TOY_FAULTS)
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(FAULTS.format(toy=str(tmp_path / "toy")))
    wd = tmp_path / "run"
    e = {**env(1), "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")])}
    overrides = [*EVALS, "eval.tasks=toy_raise,toy_hang", f"eval.data_dir={data.parent}", "eval.timeout_s=5",
                 "eval.program_timeout_s=8"]
    t = time.monotonic()
    p = subprocess.run(cmd(wd, overrides), cwd=ROOT, env=e, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert time.monotonic() - t < 100  # the hung check was not waited for past its timeout
    rows = _records(wd)
    for name in ("toy_raise", "toy_hang"):
        assert [r["step"] for r in rows if r.get(f"eval/{name}/failed") == 1] == [2, 4], rows
        assert not any(f"eval/{name}/pass@1" in r for r in rows)
    assert {r["step"] for r in rows if "loss" in r} == {1, 2, 3, 4}
    assert "eval toy_raise at step 2: the sandbox check failed: RuntimeError: toy refuses; training goes on" in p.stdout
    assert ("eval toy_hang at step 4: the sandbox check ran past eval.timeout_s=5s and was cancelled; training goes on"
            in p.stdout)


def test_task_eval_config_errors_name_the_key():
    for overrides, key in ((["eval.tasks=gsm8k", "eval.every_tasks=5"], "eval.tasks"),
                           (["eval.tasks=humaneval"], "eval.every_tasks"),
                           (["eval.tasks=mbpp", "eval.every_tasks=5"], "eval.mbpp_data"),
                           (["eval.tasks=humaneval", "eval.every_tasks=5", "eval.k=1,10"], "eval.k"),
                           (["eval.tasks=lm_eval:", "eval.every_tasks=5"], "eval.tasks"),
                           # a MariaDB server per run: the suite's only
                           (["eval.tasks=intercode_sql", "eval.every_tasks=5"], "eval suite --tasks intercode_sql` only")):
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            load_config("configs/tiny_pretrain.py", overrides)


@pytest.mark.slow
def test_an_unknown_lm_eval_task_stops_the_run_before_step_one(tmp_path):
    pytest.importorskip("lm_eval")
    p = run(tmp_path / "run", EVALS[:2] + ["eval.tasks=lm_eval:no_such_task_here", *EVALS[3:]], check=False)
    assert p.returncode == 2 and "lm_eval:no_such_task_here is not an lm-eval task" in p.stderr, p.stderr[-2000:]


@pytest.mark.slow
def test_a_bad_prompt_format_stops_the_run_before_step_one(tmp_path):
    p = run(tmp_path / "run", EVALS + ["eval.prompt_format=chat"], check=False)
    assert p.returncode == 2 and "config key 'eval.prompt_format' must be one of base, chatml, got 'chat'" in p.stderr
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_local_lm_eval_tasks_are_indexed_alone_once_per_process(tmp_path):
    """Tasks that all come from local YAMLs get an index of those alone (lm-eval's own 14,000+
    YAMLs take seconds to read), built once and shared; a local group may name lm-eval's tasks,
    so it is not taken as local-only."""
    pytest.importorskip("lm_eval")
    from easylemur.eval.backends.lm_eval_tasks import _plain_task, task_manager

    _mc_task(tmp_path / "tasks")
    (tmp_path / "tasks" / "el_group.yaml").write_text("group: el_group\ntask:\n  - el_mc\n  - arc_easy\n")
    tm = task_manager(["el_mc"], str(tmp_path / "tasks"))
    assert set(tm.all_tasks) == {"el_mc", "el_group"} and task_manager(["el_mc"], str(tmp_path / "tasks")) is tm
    assert _plain_task(tm, "el_mc") and not _plain_task(tm, "el_group") and not _plain_task(tm, "arc_easy")
