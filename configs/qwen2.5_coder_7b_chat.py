"""Chat fine-tuning of Qwen2.5-Coder-7B on ChatML conversations in Qwen's own chat template
(`chat_format: model`: its tokenizer_config.json `chat_template`, which adds Qwen's default
system turn when a conversation has none), loss on the assistant turns only. Qwen2.5's
tokenizer has no BOS: conversations start at their first `<|im_start|>`.

Sized for a TPU v4-32 (16 megacore devices) or one 8-GPU host. Check it fits:
    python -m easylemur.aot --config configs/qwen2.5_coder_7b_chat.py --accelerator v4-32   # peak 22.5 of 30.75 GiB

    python -m easylemur.convert from-hf --hf /path/Qwen2.5-Coder-7B --out checkpoints/qwen2.5-coder-7b
    python -m easylemur.data tokenize --config configs/qwen2.5_coder_7b_chat.py \
        --config.data.sources.chat.path=gs://BUCKET/qwen/raw/chat --out gs://BUCKET/qwen/chat_tokens --workers 8

Every value is ASSUMED except the model's shape and template.
"""

from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    c = ConfigDict()
    c.workdir = "runs/qwen2.5_coder_7b_chat"
    c.mesh = "data:1,fsdp:-1,tensor:1"
    c.model = ConfigDict({"preset": "qwen2.5_coder_7b", "dtype": "bfloat16", "scan_layers": True, "remat": "full",
                          "attention": "auto", "attn_block_size": 512})
    c.init = ConfigDict({"from": "checkpoints/qwen2.5-coder-7b"})
    c.data = ConfigDict()
    c.data.seq_len = 8192
    c.data.sources = ConfigDict()
    c.data.sources.chat = ConfigDict({"path": "gs://BUCKET/qwen/chat_tokens", "weight": 1.0, "format": "chat",
                                      "chat_format": "model"})
    c.train = ConfigDict({
        "batch_size": 64,  # 64 rows of 8192 tokens, ~0.5M tokens per step
        "steps": 2000,
        "loss_chunk": 512,  # [512, 152064] float32 logits per chunk, not [8192, 152064]
    })
    c.optimizer = ConfigDict({"lr": 1e-5, "warmup_steps": 100, "schedule": "cosine", "end_lr": 1e-6,
                              "weight_decay": 0.0, "b1": 0.9, "b2": 0.95, "clip_norm": 1.0})
    c.checkpoint = ConfigDict({"every": 250, "keep": 3})
    c.log = ConfigDict({"every": 10})
    return c
