"""metrics.jsonl and its mirrors: the one writer of a run's metric records (the train loop's
steps and evals, `eval watch`'s scores), to a local or bucket workdir, TensorBoard and W&B.
Below the run and the evals, which both write through it; it imports storage and paths only.

W&B (`log.wandb_project`, the `easylemur[wandb]` extra): one W&B run per workdir, its id kept in
WORKDIR/wandb_run_id (written by the run's first launch, read back by every relaunch), so a
resumed run goes on logging to the same W&B run at its own train steps."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import secrets
import string
import tempfile
from pathlib import Path
from typing import Any, Optional

import jax

from easylemur.errors import InputError, brief
from easylemur.storage import LineFile, create, exists, is_url, makedirs, read, remove, write


def wandb_missing(project: str) -> InputError:
    return InputError(f"log.wandb_project={project!r}: wandb is not installed; "
                      "pip install 'easylemur[wandb]' (or leave log.wandb_project empty)")


def require_wandb(project: str) -> None:
    """Refuses a set `log.wandb_project` where wandb is not importable, at the start of a run
    (before anything is restored or compiled); finds wandb without importing it."""
    if project and importlib.util.find_spec("wandb") is None:
        raise wandb_missing(project)


def wandb_id_path(workdir: Any, name: str = "metrics") -> Any:
    """WORKDIR/wandb_run_id: the W&B run of the workdir's metrics (`eval watch`'s, a W&B run
    of its own: WORKDIR/eval_metrics_wandb_run_id)."""
    return workdir / ("wandb_run_id" if name == "metrics" else f"{name}_wandb_run_id")


def _summary_writer_class() -> type:
    """tensorboardX's SummaryWriter, imported without torch or google-cloud-storage. tensorboardX
    imports torch when it is installed (only to accept torch tensors, which nothing here passes):
    with transformers' torch in the environment that was 2-8 s of every run's start (a third of a
    short run's Python imports, profiled on the 2-core CPU). It imports google.cloud.storage to
    write gs:// itself (0.26 s of every run's start), which nothing here asks of it: a bucket
    run's events are written locally and mirrored (MetricsWriter). Both stay importable after."""
    import sys

    if "tensorboardX" in sys.modules:
        from tensorboardX import SummaryWriter

        return SummaryWriter
    blocked = [m for m in ("torch", "google.cloud.storage") if m not in sys.modules]
    for m in blocked:
        sys.modules[m] = None  # type: ignore[assignment]  # `import m` raises ImportError
    try:
        from tensorboardX import SummaryWriter
    finally:
        for m in blocked:
            del sys.modules[m]
    return SummaryWriter


class MetricsWriter:
    """Appends one JSON object per logged step to metrics.jsonl and mirrors scalars to
    TensorBoard (and W&B when configured). A no-op on processes other than 0. A task eval's
    record comes later than its step's (eval/runs/training.py): a line of its own, with the step
    it measured."""

    def __init__(self, workdir: str | Path, wandb_project: str = "", config: Optional[dict] = None,
                 resume_step: Optional[int] = 0, name: str = "metrics"):
        """`resume_step`: a resumed run's step (the lines after it are dropped); None appends to
        what is there. `name`: NAME.jsonl and TensorBoard's NAME_tb/ ("metrics": tb/), so a
        second writer (`eval watch`) never shares the run's files."""
        self.active = jax.process_index() == 0
        from easylemur.checkpoint.paths import as_path

        workdir = as_path(workdir)
        self.remote = is_url(workdir)
        self.path = workdir / f"{name}.jsonl"
        self.file: Optional[LineFile] = None
        self.wandb_step = 0
        self.tb = None
        self.wandb = None
        self.wandb_id_made: Any = None  # the id file, when this writer wrote it (see close)
        self.wandb_held = 0  # the steps the resumed W&B run already holds (below: not sent again)
        self.wandb_logged = False
        if not self.active:
            return
        require_wandb(wandb_project)  # before anything is written
        makedirs(workdir)
        kept = self._truncate_after(resume_step if resume_step is not None else float("inf"))
        self.file = LineFile(self.path, lambda: kept)  # appended locally, rewritten whole in a bucket
        SummaryWriter = _summary_writer_class()

        tb_name = "tb" if name == "metrics" else f"{name}_tb"
        tb_dir = str(workdir / tb_name)
        if self.remote:  # tensorboardX writes local files; mirror them to the bucket yourself
            tb_dir = os.path.join(tempfile.gettempdir(), "easylemur-tb",
                                  f"{workdir}_{tb_name}".replace("://", "_").replace("/", "_"))
            print(f"TensorBoard events go to {tb_dir} (workdir {workdir} is remote)", flush=True)
        self.tb = SummaryWriter(tb_dir, purge_step=resume_step + 1 if resume_step else None)
        if wandb_project:
            try:
                self._open_wandb(workdir, wandb_project, config, name)
            except BaseException:
                self.close()
                raise

    def _open_wandb(self, workdir: Any, project: str, config: Optional[dict], name: str) -> None:
        """The workdir's W&B run: the id in WORKDIR/wandb_run_id (made by the first launch, with
        create-if-absent, so two writers at once still agree), resumed by every later launch."""
        import wandb

        path = wandb_id_path(workdir, name)
        new_id = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))  # as W&B's own
        if create(path, (new_id + "\n").encode()):
            self.wandb_id_made = path
        run_id = read(path).decode().strip()
        if not run_id:
            raise InputError(f"{path} is empty; it holds the run's W&B run id (delete it to start a new W&B run)")
        run_name = workdir.name if name == "metrics" else f"{workdir.name} {name}"
        try:
            self.wandb = wandb.init(project=project, id=run_id, resume="allow", name=run_name, config=config)
        except wandb.errors.Error as e:  # not logged in (no WANDB_API_KEY), W&B unreachable, a bad project
            raise InputError(f"log.wandb_project={project!r}: W&B did not start run {run_id}: {brief(e)}") from None
        # a resumed W&B run (online) starts after the last step it holds: the steps a killed launch
        # logged after its last checkpoint, which this launch trains again, W&B would refuse
        self.wandb_held = self.wandb_step = self.wandb.starting_step
        print(f"W&B run {run_id} (project {project}; id kept in {path})"
              + (f", resumed after its step {self.wandb_held - 1}" if self.wandb_held else ""), flush=True)

    def _truncate_after(self, step: int) -> list[str]:
        """A resumed run rewrites the steps after its checkpoint: drop the killed run's lines
        for them so metrics.jsonl reads as one uninterrupted run (rewritten atomically). Returns
        the lines kept."""
        if not exists(self.path):
            return []
        kept = []
        for line in read(self.path).decode().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # the killed run's half-written last line
            if record.get("step", 0) <= step:
                kept.append(line)
        write(self.path, "".join(l + "\n" for l in kept).encode())
        return kept

    def write(self, record: dict[str, Any]) -> None:
        if not self.active:
            return
        self.file.append(json.dumps(record))  # a bucket cannot append: the (small) file is rewritten
        step = record["step"]
        for k, v in record.items():
            # NaN means "not measured" (tokens/s of a run's first step, which compiles): kept in
            # metrics.jsonl, left out of TensorBoard, which would warn on stderr for each one
            if k != "step" and isinstance(v, (int, float)) and math.isfinite(v):
                self.tb.add_scalar(k, v, step)
        self.tb.flush()
        if self.wandb is not None:
            if step < self.wandb_held:
                # a step W&B holds from an earlier launch (and refuses again): metrics.jsonl and
                # TensorBoard have this launch's record
                pass
            elif step >= self.wandb_step:
                self.wandb.log(record, step=step)
                self.wandb_step = step
                self.wandb_logged = True
            else:
                # a late record (a task eval's score, measured at `step` and checked while training
                # went on): W&B drops steps below its current one, so it goes in at the current
                # step, carrying its own "step" to plot against
                self.wandb.log({**record, "measured_at_step": step})
                self.wandb_logged = True

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()
        if self.wandb_id_made is not None and not self.wandb_logged:
            # a first launch that logged nothing (it failed to start) leaves no id behind, as it
            # leaves no metrics.jsonl: the workdir stays as it was found
            remove(self.wandb_id_made)
            self.wandb_id_made = None
