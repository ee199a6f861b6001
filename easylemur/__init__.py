"""easylemur: a JAX training stack for Llama-family models."""

__version__ = "0.1.0"


def load(path, **kwargs):
    """Loads an HF Llama directory or an easylemur checkpoint/workdir; see easylemur.generate.api."""
    from easylemur.generate.api import load as _load

    return _load(path, **kwargs)
