"""Continued pre-training of Llama-2-7B on the 10:1 code:text mixture: the same recipe as
lemur_70b_pretrain at a size that fits a v4-32 / v5e-16 slice or one 8-GPU host."""

from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    c = ConfigDict()
    c.workdir = "runs/llama2_7b_pretrain"
    c.mesh = "data:1,fsdp:-1,tensor:1"
    c.model = ConfigDict({"preset": "llama2_7b", "dtype": "bfloat16", "scan_layers": True, "remat": "full",
                          "attention": "auto", "attn_block_size": 512})
    c.init = ConfigDict({"from": "checkpoints/llama2-7b"})
    c.data = ConfigDict()
    c.data.seq_len = 4096
    c.data.sources = ConfigDict()
    c.data.sources.code = ConfigDict({"path": "data/lemur/code/*.jsonl.zst", "weight": 10.0, "format": "text"})
    c.data.sources.text = ConfigDict({"path": "data/lemur/text/*.jsonl.zst", "weight": 1.0, "format": "text"})
    c.train = ConfigDict({"batch_size": 64, "steps": 20000})
    c.optimizer = ConfigDict({"lr": 4e-5, "warmup_steps": 500, "schedule": "cosine", "end_lr": 4e-6,
                              "weight_decay": 0.1, "b1": 0.9, "b2": 0.95, "clip_norm": 1.0})
    c.checkpoint = ConfigDict({"every": 500, "keep": 3})
    return c
