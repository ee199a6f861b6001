"""Evaluation, in floors; each imports only the floors below it (tests/test_architecture.py):

- `sandbox/`: untrusted code run and judged under bubblewrap; the standard library and
  `easylemur.errors` only, it knows no benchmark;
- `api/`: the contracts benchmarks implement (`Task[P]`, problems, prompts), pass@k, JSONL;
- `agent/`: the multi-turn engine (episodes, actions, the agent task contract, tools);
- `benchmarks/`: one module per benchmark and `registry.py`, the one table of their names;
- `backends/`: how a model is reached (an OpenAI-compatible client, a checkpoint behind its own
  server, a model in this process, lm-evaluation-harness);
- `runs/`: the one scoring loop, the suites and their tables, training's evals, `watch`;
- `cli/`: `python -m easylemur.eval` and its subcommands.

None of sandbox, api, agent, benchmarks imports the model side; training imports `runs` only."""
