from easylemur.models.llama import PRESETS, Llama, LlamaConfig

__all__ = ["PRESETS", "Llama", "LlamaConfig"]
