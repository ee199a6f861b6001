"""A CPU run restarts itself once with glibc's huge-page malloc tunable (easylemur/host.py):
when that applies, that the restart keeps the pid, and that the tunable really turns XLA-sized
buffers' page faults from 4 KiB ones into 2 MiB ones (counted faults, not timing)."""

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from easylemur import host

ROOT = Path(__file__).resolve().parents[1]
APPLIES = host._glibc_version() >= (2, 35) and host._thp_enabled() and sys.platform.startswith("linux")
needs_thp = pytest.mark.skipif(not APPLIES, reason="needs Linux, glibc 2.35+ and transparent huge pages")


@needs_thp
def test_cpu_malloc_env_applies_to_cpu_runs_only_and_never_overrides_the_user():
    env = host.cpu_malloc_env({"JAX_PLATFORMS": "cpu", "PATH": "/bin"})
    assert env == {"JAX_PLATFORMS": "cpu", "PATH": "/bin", "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
    # other tunables are kept, in front
    env = host.cpu_malloc_env({"JAX_PLATFORMS": "cpu", "GLIBC_TUNABLES": "glibc.rtld.optional_static_tls=2048"})
    assert env["GLIBC_TUNABLES"] == "glibc.rtld.optional_static_tls=2048:glibc.malloc.hugetlb=1"
    assert host.cpu_malloc_env({"JAX_PLATFORMS": "tpu"}) is None
    assert host.cpu_malloc_env({"JAX_PLATFORMS": "cuda,cpu"}) is None
    assert host.cpu_malloc_env({"JAX_PLATFORMS": "cpu", "EASYLEMUR_MALLOC": "default"}) is None
    # the user's own malloc tunable wins, and the restarted process does not restart again
    assert host.cpu_malloc_env({"JAX_PLATFORMS": "cpu", "GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}) is None


_FAULTS = textwrap.dedent("""
    import ctypes, os, resource, sys
    from easylemur.host import restart_with_cpu_malloc
    restart_with_cpu_malloc()
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    size = 256 << 20  # served by mmap, as XLA's step buffers are
    faults = []
    for _ in range(3):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        p = libc.malloc(size)
        ctypes.memset(p, 1, size)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
        libc.free(ctypes.c_void_p(p))
    print(os.getpid(), os.environ.get("GLIBC_TUNABLES", ""), min(faults))
""")


def _faults(extra_env: dict) -> tuple[int, int, str, int]:
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "EASYLEMUR_MALLOC")}
    proc = subprocess.Popen([sys.executable, "-c", _FAULTS], cwd=ROOT, env={**env, "JAX_PLATFORMS": "cpu", **extra_env},
                            stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0
    pid, tunables, faults = out.split()[0], " ".join(out.split()[1:-1]), out.split()[-1]
    return proc.pid, int(pid), tunables, int(faults)


@needs_thp
def test_restart_keeps_the_pid_and_turns_4k_faults_into_huge_page_faults():
    spawned, pid, tunables, faults = _faults({})
    assert pid == spawned and tunables == "glibc.malloc.hugetlb=1"
    _, _, tunables, default_faults = _faults({"EASYLEMUR_MALLOC": "default"})
    assert tunables == ""
    pages = (256 << 20) // 4096
    assert default_faults >= pages * 0.9, default_faults  # one fault per 4 KiB page
    # 2 MiB pages where the kernel had them free; a fragmented host may fall back for some
    assert faults <= pages // 4, (faults, default_faults)


@needs_thp
def test_the_train_cli_runs_with_the_tunable_under_its_own_pid(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "EASYLEMUR_MALLOC")}
    proc = subprocess.Popen([sys.executable, "-m", "easylemur.train", "--config", "configs/tiny_pretrain.py",
                             f"--config.workdir={tmp_path / 'w'}", "--config.train.steps=100000"],
                            cwd=ROOT, env={**env, "JAX_PLATFORMS": "cpu"}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        seen = b""
        for _ in range(600):
            seen = Path(f"/proc/{proc.pid}/environ").read_bytes()
            if b"GLIBC_TUNABLES=" in seen or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert b"GLIBC_TUNABLES=glibc.malloc.hugetlb=1\0" in seen
    finally:
        proc.kill()
        proc.wait()


def test_a_cpu_host_imports_jax_without_libtpu_noise(tmp_path):
    """With neither TPU nor NVIDIA device nodes and JAX_PLATFORMS unset, `import easylemur` tells
    JAX to use its CPU before JAX loads: the installed libtpu writes nothing (it printed five
    lines, one an `E0000 ... TPU_WORKER_HOSTNAMES` error, on every command)."""
    if not host.runs_on_cpu({}):
        pytest.skip("this host has accelerator device nodes")
    e = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "TPU_WORKER_HOSTNAMES")}
    e["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    p = subprocess.run([sys.executable, "-c", "import easylemur, jax; print(jax.devices()[0].platform)"],
                       capture_output=True, text=True, env=e, cwd=tmp_path, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "cpu", p.stderr
    assert "TPU" not in p.stderr and "E0000" not in p.stderr, p.stderr
