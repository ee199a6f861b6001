"""Tiny continued pre-training demo: Lemur's 10:1 code:text mixture on data/samples, CPU-sized."""

from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    c = ConfigDict()
    c.workdir = "runs/tiny_pretrain"
    # auto: bf16 matmul inputs (float32 accumulation) where the CPU computes bf16 natively
    # (AVX-512 BF16, AMX) and on TPU/GPU, float32 on other CPUs (docs/design.md, "Compute dtype on CPUs")
    c.model = ConfigDict({"preset": "tiny", "dtype": "auto"})
    c.data = ConfigDict()
    c.data.seq_len = 256
    c.data.sources = ConfigDict()
    c.data.sources.code = ConfigDict({"path": "data/samples/code", "weight": 10.0, "format": "text"})
    c.data.sources.text = ConfigDict({"path": "data/samples/text", "weight": 1.0, "format": "text"})
    c.train = ConfigDict({"steps": 200, "batch_size": 16})
    c.optimizer = ConfigDict({"lr": 3e-3, "warmup_steps": 20, "end_lr": 3e-4})
    c.checkpoint = ConfigDict({"every": 100, "keep": 2})
    c.log = ConfigDict({"every": 10})
    return c
