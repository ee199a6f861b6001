"""Lemur-70B continued pre-training (arXiv 2310.06830): Llama-2-70B on a 10:1 code:text
mixture, 90B tokens, sequence packing, one TPU v4-512 pod: 256 chips, which a v4 TPU VM
presents to JAX as 256 megacore devices of 30.75 GiB HBM each (libtpu topology `v4:4x8x8`,
chip config megacore). Check it fits before launching:
    python -m easylemur.aot --config configs/lemur_70b_pretrain.py --accelerator v4-512

Known from the paper: base model, mixture ratio, token budget, pod. Every other value is an
assumption, marked ASSUMED. Convert the weights first (to a local or shared disk: the
converters write local directories), then point init.from at the result:
    python -m easylemur.convert from-hf --hf /path/Llama-2-70b-hf --out checkpoints/llama2-70b

The data is read from a token store in a bucket, tokenized once from the raw JSONL by every
worker of the pod (each takes its share of the files; a rerun redoes only what is missing),
then finalized and checked (docs/guides/training.md, "Continued pre-training from Llama-2, step by step"):
    RAW="--config.data.sources.code.path=gs://BUCKET/lemur/raw/code --config.data.sources.text.path=gs://BUCKET/lemur/raw/text"
    tpu_scripts/launch.sh --name lemur --zone ZONE -- python -m easylemur.data tokenize \
        --config configs/lemur_70b_pretrain.py $RAW --out gs://BUCKET/lemur/tokens --shard auto --workers 96
    python -m easylemur.data finalize --config configs/lemur_70b_pretrain.py $RAW --out gs://BUCKET/lemur/tokens
    python -m easylemur.data stats --config configs/lemur_70b_pretrain.py
"""

from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    c = ConfigDict()
    c.workdir = "runs/lemur_70b_pretrain"  # point at a bucket on a pod
    c.mesh = "data:1,fsdp:-1,tensor:1"  # ASSUMED: pure FSDP over all 256 devices
    c.model = ConfigDict({
        "preset": "llama2_70b",
        "dtype": "bfloat16",  # bf16 compute, float32 params and Adam moments
        "scan_layers": True,  # one compiled layer: minutes, not hours, to compile 80 layers
        # nothing of a layer kept in HBM for the backward, its input in host memory: the 80
        # layers' inputs are 10 GiB per device at 2 rows of 4096
        "remat": "full_offload",
        # splash attention on TPU (scores stay on chip; blockwise elsewhere), 512-token tiles
        "attention": "auto",
        "attn_block_size": 512,
    })
    c.init = ConfigDict({"from": "checkpoints/llama2-70b"})  # from-hf output (or the HF dir itself)
    c.data = ConfigDict()
    c.data.seq_len = 4096  # Llama-2's context
    c.data.sources = ConfigDict()
    # The Stack (permissive licences) and RefinedWeb/RedPajama/... as JSONL shards, tokenized
    # into one store (above); each source reads the store's source of its name
    c.data.sources.code = ConfigDict({"path": "gs://BUCKET/lemur/tokens", "weight": 10.0, "format": "text"})
    c.data.sources.text = ConfigDict({"path": "gs://BUCKET/lemur/tokens", "weight": 1.0, "format": "text"})
    c.train = ConfigDict({
        "batch_size": 512,  # ASSUMED: two 4096-token rows per device, ~2.1M tokens per step
        "steps": 43000,  # 90e9 tokens / (512 x 4096)
        "grad_accum": 1,
        "loss_chunk": 1024,  # the [4096, 32000] float32 logits and their gradient never exist whole
    })
    c.optimizer = ConfigDict({
        "lr": 4e-5,  # ASSUMED: a low continued-pre-training rate so Llama-2's text ability survives
        "warmup_steps": 2000,  # ASSUMED
        "schedule": "cosine",
        "end_lr": 4e-6,  # ASSUMED
        "weight_decay": 0.1,  # Llama-2's value
        "b1": 0.9, "b2": 0.95, "eps": 1e-8,  # Llama-2's values
        "clip_norm": 1.0,
    })
    c.checkpoint = ConfigDict({"every": 500, "keep": 3})
    c.log = ConfigDict({"every": 10})
    return c
