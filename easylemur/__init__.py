"""easylemur: a JAX training stack for Llama-family models."""

__version__ = "0.1.0"


def _cpu_host_platform() -> None:
    """On a host with neither TPU nor NVIDIA device nodes, JAX is told to use its CPU
    (JAX_PLATFORMS=cpu, unless the user set it): otherwise the installed libtpu (the TPU compiler
    that `aot` uses, which works under `cpu` too) tries to initialize chips that are not there and
    prints five lines of warnings, one an `E0000 ... TPU_WORKER_HOSTNAMES` error, on every
    command. Read by JAX when it is imported, so set before anything imports it."""
    import os

    from easylemur.host import runs_on_cpu

    if "JAX_PLATFORMS" not in os.environ and runs_on_cpu(os.environ):
        os.environ["JAX_PLATFORMS"] = "cpu"


_cpu_host_platform()


def load(path, **kwargs):
    """Loads an HF Llama directory or an easylemur checkpoint/workdir; see easylemur.generate.api."""
    from easylemur.generate.api import load as _load

    return _load(path, **kwargs)
