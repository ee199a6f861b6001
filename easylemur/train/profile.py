"""The profiler switch (`log.profile_steps`, `log.profile_start_step`; docs/design.md, "Profiling").

A JAX profiler trace of a few steps, written where TensorBoard's Profile tab finds it
(`workdir/tb/plugins/profile/<time>/<host>.xplane.pb`): the trace starts before step
`profile_start_step + 1` is dispatched (the default 5 leaves the first step's compile out) and
stops once step `profile_start_step + profile_steps` has finished on the device, so it holds
whole steps. Process 0 traces its host (one trace per run; every host runs the same program). A
run resumed past the window traces nothing.
"""

from __future__ import annotations

from typing import Any

import jax


class StepProfiler:
    """`before(step)` ahead of dispatching step `step` + 1; `after(step, metrics)` once step `step`
    is dispatched (it waits for the step's metrics only at the window's last step)."""

    def __init__(self, log_cfg: Any, tb_dir: Any):
        self.steps = int(log_cfg.get("profile_steps", 0))
        self.start = int(log_cfg.get("profile_start_step", 0))
        self.dir = str(tb_dir)
        self.active = self.steps > 0 and jax.process_index() == 0
        self.tracing = False

    def before(self, step: int) -> None:
        if self.active and not self.tracing and step == self.start:
            jax.profiler.start_trace(self.dir)
            self.tracing = True

    def after(self, step: int, metrics: Any) -> None:
        if self.tracing and step == self.start + self.steps:
            jax.block_until_ready(metrics)
            jax.profiler.stop_trace()
            self.tracing, self.active = False, False
            print(f"profile: steps {self.start + 1}-{step} traced to {self.dir}/plugins/profile "
                  f"(TensorBoard's Profile tab: tensorboard --logdir {self.dir})", flush=True)

    def close(self) -> None:
        """A run that ended inside the window (a stop, an error) still writes what it traced."""
        if self.tracing:
            jax.profiler.stop_trace()
            self.tracing = False
