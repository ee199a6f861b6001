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


def _missing_module_hook() -> None:
    """`python -m easylemur.X` run by a Python without the dependencies (a bare `python` outside
    .venv) fails while the command imports them, before its one-line error handling: say it in
    one line too (`errors.one_line`), instead of a traceback. Only for `python -m easylemur...`
    (argv[0] is still "-m" while the package is imported), never for a library user."""
    import sys

    if sys.argv[:1] != ["-m"]:
        return
    previous = sys.excepthook

    def hook(kind, value, tb):  # noqa: ANN001 (sys.excepthook's signature)
        if isinstance(value, ModuleNotFoundError) and value.name and not value.name.startswith("easylemur"):
            from easylemur.errors import one_line

            print(f"error: {one_line(value)}", file=sys.stderr)
            return
        previous(kind, value, tb)

    sys.excepthook = hook


_cpu_host_platform()
_missing_module_hook()


def load(path, **kwargs):
    """Loads an HF Llama directory or an easylemur checkpoint/workdir; see easylemur.generate.api."""
    from easylemur.generate.api import load as _load

    return _load(path, **kwargs)
