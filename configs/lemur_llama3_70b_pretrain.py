"""The Lemur recipe on today's base model: Llama-3.1-70B continued on a 10:1 code:text mixture
for 90B tokens, on one TPU v4-512 pod (256 megacore devices of 30.75 GiB) or a v5p-256 (128
megacore devices of 95.74 GiB). Llama-3.1 differs from Llama-2-70B where it costs memory: a
128,256-token vocabulary (the embedding and LM head are 4x Llama-2's) and an 8K context (the
rows are twice as long). Check it fits before launching:
    python -m easylemur.aot --config configs/lemur_llama3_70b_pretrain.py --accelerator v4-512
    python -m easylemur.aot --config configs/lemur_llama3_70b_pretrain.py --accelerator v5p-256

The HF directory carries a byte-level BPE `tokenizer.json` (no tokenizer.model): easylemur
reads it with HF `tokenizers`, and the store is tokenized with it, so it is a different store
from the Llama-2 run's. Convert the weights first, then tokenize into a bucket (each worker of
the pod takes its share of the files; a rerun redoes only what is missing):
    python -m easylemur.convert from-hf --hf /path/Llama-3.1-70B --out checkpoints/llama3.1-70b
    RAW="--config.data.sources.code.path=gs://BUCKET/lemur/raw/code --config.data.sources.text.path=gs://BUCKET/lemur/raw/text"
    tpu_scripts/launch.sh --name lemur --zone ZONE -- python -m easylemur.data tokenize \
        --config configs/lemur_llama3_70b_pretrain.py $RAW --out gs://BUCKET/lemur/tokens_llama3 --shard auto --workers 96
    python -m easylemur.data finalize --config configs/lemur_llama3_70b_pretrain.py $RAW --out gs://BUCKET/lemur/tokens_llama3

Every value the Lemur paper does not give for Llama-3.1 is marked ASSUMED.
"""

from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    c = ConfigDict()
    c.workdir = "runs/lemur_llama3_70b_pretrain"  # point at a bucket on a pod
    c.mesh = "data:1,fsdp:-1,tensor:1"  # ASSUMED: pure FSDP over every device
    c.model = ConfigDict({
        # Llama-3.1-70B: llama3 RoPE scaling (factor 8), theta 5e5; init.from's config.json wins
        # where it differs (the preset only names the shape for the AOT check before converting)
        "preset": "llama3.1_70b",
        "dtype": "bfloat16",
        "scan_layers": True,
        "remat": "full_offload",  # 80 layers x 8192 tokens of inputs kept in host memory
        "attention": "auto",
        "attn_block_size": 512,
    })
    c.init = ConfigDict({"from": "checkpoints/llama3.1-70b"})  # from-hf output (or the HF dir itself)
    c.data = ConfigDict()
    c.data.seq_len = 8192  # Llama-3's pre-training context
    c.data.sources = ConfigDict()
    c.data.sources.code = ConfigDict({"path": "gs://BUCKET/lemur/tokens_llama3", "weight": 10.0, "format": "text"})
    c.data.sources.text = ConfigDict({"path": "gs://BUCKET/lemur/tokens_llama3", "weight": 1.0, "format": "text"})
    c.train = ConfigDict({
        # ASSUMED: 256 rows of 8192 tokens (~2.1M tokens per step, as the Llama-2 run): one row
        # per device on a v4-512, two on a v5p-256
        "batch_size": 256,
        "steps": 43000,  # 90e9 tokens / (256 x 8192)
        "grad_accum": 1,
        # the [8192, 128256] float32 logits of one row are 3.9 GiB: 512-token chunks keep 0.24 GiB
        "loss_chunk": 512,
    })
    c.optimizer = ConfigDict({
        "lr": 3e-5,  # ASSUMED: below Llama-3's final pre-training rate, so its text ability survives
        "warmup_steps": 2000,  # ASSUMED
        "schedule": "cosine",
        "end_lr": 3e-6,  # ASSUMED
        "weight_decay": 0.1,
        "b1": 0.9, "b2": 0.95, "eps": 1e-8,
        "clip_norm": 1.0,
    })
    c.checkpoint = ConfigDict({"every": 500, "keep": 3})
    c.log = ConfigDict({"every": 10})
    return c
