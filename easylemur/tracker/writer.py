"""metrics.jsonl and its mirrors: the one writer of a run's metric records (the train loop's
steps and evals, `eval watch`'s scores), to a local or bucket workdir, TensorBoard and W&B.
Below the run and the evals, which both write through it; it imports storage and paths only."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Optional

import jax

from easylemur.storage import LineFile, exists, is_url, makedirs, read, write


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
        if not self.active:
            return
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
                import wandb
            except ImportError:
                print("log.wandb_project is set but wandb is not installed; logging to W&B is off")
            else:
                self.wandb = wandb.init(project=wandb_project, config=config, resume="allow")

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
            if step >= self.wandb_step:
                self.wandb.log(record, step=step)
                self.wandb_step = step
            else:
                # a late record (a task eval's score, measured at `step` and checked while training
                # went on): W&B drops steps below its current one, so it goes in at the current
                # step, carrying its own "step" to plot against
                self.wandb.log({**record, "measured_at_step": step})

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()
