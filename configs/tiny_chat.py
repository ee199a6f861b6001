"""Tiny chat fine-tuning demo: ChatML conversations, loss on assistant turns, from tiny_pretrain."""

from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    c = ConfigDict()
    c.workdir = "runs/tiny_chat"
    # auto: bf16 matmul inputs (float32 accumulation) where the CPU computes bf16 natively
    # (AVX-512 BF16, AMX) and on TPU/GPU, float32 on other CPUs (docs/design.md, "Compute dtype on CPUs")
    c.model = ConfigDict({"preset": "tiny", "dtype": "auto"})
    c.data = ConfigDict()
    c.data.seq_len = 256
    c.data.sources = ConfigDict()
    c.data.sources.chat = ConfigDict({"path": "data/samples/chat", "weight": 1.0, "format": "chat"})
    c.train = ConfigDict({"steps": 100, "batch_size": 16})
    c.optimizer = ConfigDict({"lr": 1e-3, "warmup_steps": 10, "end_lr": 1e-4, "weight_decay": 0.0})
    c.checkpoint = ConfigDict({"every": 50, "keep": 2})
    c.log = ConfigDict({"every": 10})
    c.init = ConfigDict({"from": "runs/tiny_pretrain"})
    return c
