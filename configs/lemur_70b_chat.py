"""Lemur-70B-Chat: instruction fine-tuning of the pre-trained Lemur on ~300K text and code
conversations (OpenAssistant 1, OpenOrca, ShareGPT, code instructions) in ChatML, loss on the
assistant turns only.

Known from the paper: data sources and size, ChatML format. Other values are ASSUMED.

The conversations are tokenized once into a store (conversations cut to data.seq_len):
    python -m easylemur.data tokenize --config configs/lemur_70b_chat.py \
        --config.data.sources.chat.path=gs://BUCKET/lemur/raw/chat --out gs://BUCKET/lemur/chat_tokens --workers 8
    python -m easylemur.data finalize --config configs/lemur_70b_chat.py \
        --config.data.sources.chat.path=gs://BUCKET/lemur/raw/chat --out gs://BUCKET/lemur/chat_tokens
"""

from ml_collections import ConfigDict


def get_config() -> ConfigDict:
    c = ConfigDict()
    c.workdir = "runs/lemur_70b_chat"
    c.mesh = "data:1,fsdp:-1,tensor:1"
    c.model = ConfigDict({"preset": "llama2_70b", "dtype": "bfloat16", "scan_layers": True, "remat": "full_offload",
                          "attention": "auto", "attn_block_size": 512})
    c.init = ConfigDict({"from": "runs/lemur_70b_pretrain"})  # parameters only, newest step
    c.data = ConfigDict()
    c.data.seq_len = 4096
    c.data.sources = ConfigDict()
    c.data.sources.chat = ConfigDict({"path": "gs://BUCKET/lemur/chat_tokens", "weight": 1.0, "format": "chat"})
    c.train = ConfigDict({
        "batch_size": 256,  # ASSUMED: one 4096-token row per device of a v4-512 (256 devices)
        "steps": 1600,  # ASSUMED: ~2 epochs of 300K conversations packed ~1.5 per 4096-token row
        "extend_vocab": True,
        "loss_chunk": 1024,  # add <|im_start|>/<|im_end|> if the tokenizer lacks them
    })
    c.optimizer = ConfigDict({"lr": 2e-5, "warmup_steps": 100, "schedule": "cosine", "end_lr": 2e-6,
                              "weight_decay": 0.0, "b1": 0.9, "b2": 0.95, "clip_norm": 1.0})  # ASSUMED
    c.checkpoint = ConfigDict({"every": 250, "keep": 3})
    c.log = ConfigDict({"every": 10})
    return c
