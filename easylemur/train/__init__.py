"""The run: `start.py` (resolve the run; fresh, init.from or resumed state), `step.py` (the
jitted train and eval steps), `optim.py`, `metrics.py` (FLOPs, MFU, writers, StepLogger),
`lock.py` and `signals.py` (run safety), `goodput.py` (the run's events.jsonl and the goodput
CLI), `aot.py` and `hlo_cost.py` (the same step compiled for a TPU pod, and its cost),
`loop.py` (the wiring and the CLI). The top layer: nothing else imports it."""
