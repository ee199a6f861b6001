"""model.dtype=auto (docs/design.md, "Compute dtype on CPUs"): bf16 off a CPU and on a CPU that
computes bf16 natively, float32 on one that does not (AVX2 only), an explicit model.dtype always
winning; resolved once per run for the mesh's platform (a TPU program compiled on a CPU host is
bf16), and said in the run's start line."""

import types

import pytest

from easylemur import host
from easylemur.config import ConfigError, compute_dtype, load_config, model_config
from easylemur.tokenizer.spm import DEFAULT_TOKENIZER_PATH
from easylemur.train.start import resolve_run, say_changed_settings

# an AMD EPYC (Zen 2/3) or a laptop: AVX2 and FMA, no AVX-512, no bf16
AVX2_ONLY = frozenset("fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma avx2 bmi1 bmi2 adx sha_ni".split())
AVX512_BF16 = AVX2_ONLY | {"avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16"}  # Zen 4, Cooper Lake
AMX = AVX2_ONLY | {"avx512f", "amx_tile", "amx_int8", "amx_bf16"}  # Sapphire Rapids
AVX512_NO_BF16 = AVX2_ONLY | {"avx512f", "avx512bw", "avx512vl", "avx512_vnni"}  # Skylake-SP, Ice Lake
GRAVITON3 = frozenset("fp asimd sve sve2 bf16 i8mm svebf16".split())
A64FX = frozenset("fp asimd sve".split())  # SVE without bf16
TINY = "configs/tiny_pretrain.py"
HERE_NATIVE = host.native_bf16(host.cpu_flags() or ())


@pytest.mark.parametrize("flags, want", [
    (AVX2_ONLY, "float32"), (AVX512_NO_BF16, "float32"), (AVX512_BF16, "bfloat16"), (AMX, "bfloat16"),
    (GRAVITON3, "bfloat16"), (A64FX, "float32"), (None, "float32"),
])
def test_cpu_rule_by_flags(flags, want):
    dtype, why = host.compute_dtype("cpu", flags)
    assert dtype == want, why
    if flags is None:
        assert why == "CPU features unknown; set model.dtype=bfloat16 to force bf16"
    elif want == "float32":
        assert why == "CPU has no native bf16; set model.dtype=bfloat16 to force it"
    else:
        assert why == f"CPU has {host.native_bf16(flags)}"


@pytest.mark.parametrize("platform", ["tpu", "gpu", "cuda", None])
def test_off_a_cpu_it_is_bf16_whatever_the_host_cpu(platform):
    for flags in (AVX2_ONLY, None):
        assert host.compute_dtype(platform, flags, {host.CPU_DTYPE_ENV: "float32"})[0] == "bfloat16"


def test_environment_overrides_the_cpu_rule():
    assert host.compute_dtype("cpu", AVX2_ONLY, {host.CPU_DTYPE_ENV: "bfloat16"}) == (
        "bfloat16", "EASYLEMUR_CPU_DTYPE=bfloat16")
    assert host.compute_dtype("cpu", AMX, {host.CPU_DTYPE_ENV: "float32"})[0] == "float32"
    with pytest.raises(ValueError, match="EASYLEMUR_CPU_DTYPE='fp8' must be one of float32, bfloat16"):
        host.compute_dtype("cpu", AMX, {host.CPU_DTYPE_ENV: "fp8"})


def test_cpu_flags_reads_x86_and_arm_cpuinfo(tmp_path):
    x86 = tmp_path / "x86"
    x86.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu avx2 avx512_bf16\n\nprocessor\t: 1\n")
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nBogoMIPS\t: 2100.00\nFeatures\t: fp asimd sve bf16\nCPU implementer\t: 0x41\n")
    assert host.cpu_flags(str(x86)) == {"fpu", "avx2", "avx512_bf16"}
    assert host.cpu_flags(str(arm)) == {"fp", "asimd", "sve", "bf16"}
    assert host.cpu_flags(str(tmp_path / "absent")) is None  # macOS, Windows
    (tmp_path / "bare").write_text("processor\t: 0\n")
    assert host.cpu_flags(str(tmp_path / "bare")) is None


@pytest.fixture
def avx2_host(monkeypatch):
    monkeypatch.setattr(host, "cpu_flags", lambda path="/proc/cpuinfo": AVX2_ONLY)
    monkeypatch.delenv(host.CPU_DTYPE_ENV, raising=False)


def test_tiny_config_resolves_to_float32_on_an_avx2_host_and_bf16_for_tpu(avx2_host):
    cfg = load_config(TINY, [])
    assert cfg.model.dtype == "auto"
    spec = resolve_run(cfg, None, "cpu")
    assert spec.model_cfg.dtype == spec.start_cfg.dtype == "float32"
    assert spec.compute == "compute float32 (CPU has no native bf16; set model.dtype=bfloat16 to force it)"
    # an AOT compile for TPU on this host (no mesh at hand: platform None) and a TPU mesh: bf16
    assert resolve_run(cfg, None).model_cfg.dtype == "bfloat16"
    assert resolve_run(cfg, None, "tpu").compute == "compute bfloat16 (model.dtype=auto on tpu)"
    assert model_config(cfg).dtype == "bfloat16"
    from easylemur.train.aot import run_model_config  # what `aot` compiles: unchanged by the host's CPU

    assert run_model_config(cfg)[0].dtype == "bfloat16"


def test_explicit_dtype_wins(avx2_host, monkeypatch):
    cfg = load_config(TINY, ["model.dtype=bfloat16"])
    assert model_config(cfg, "cpu").dtype == "bfloat16"
    assert compute_dtype(cfg, "cpu") == ("bfloat16", "model.dtype=bfloat16; this CPU has no native bf16, so bf16 is emulated")
    assert compute_dtype(cfg, "tpu") == ("bfloat16", "model.dtype=bfloat16")
    monkeypatch.setenv(host.CPU_DTYPE_ENV, "bfloat16")  # the environment decides only model.dtype=auto
    assert model_config(load_config(TINY, ["model.dtype=float32"]), "cpu").dtype == "float32"
    assert model_config(load_config(TINY, []), "cpu").dtype == "bfloat16"
    monkeypatch.setenv(host.CPU_DTYPE_ENV, "half")
    with pytest.raises(ConfigError, match="EASYLEMUR_CPU_DTYPE='half'"):
        model_config(load_config(TINY, []), "cpu")
    # unset: the preset's (float32 for every preset)
    assert compute_dtype(load_config(None, []), "cpu") == ("float32", "the preset's; model.dtype=auto picks by the hardware")


def test_tiny_config_on_this_host(monkeypatch):
    """This machine (AVX-512 BF16) keeps bf16; another one resolves by its own flags."""
    monkeypatch.delenv(host.CPU_DTYPE_ENV, raising=False)
    spec = resolve_run(load_config(TINY, []), None, "cpu")
    assert spec.model_cfg.dtype == ("bfloat16" if HERE_NATIVE else "float32")
    if HERE_NATIVE:
        assert spec.compute == f"compute bfloat16 (CPU has {HERE_NATIVE})"


def test_a_run_resumed_on_a_cpu_without_bf16_computes_in_float32_and_says_so(avx2_host, capsys):
    """dtype is a compute option: a checkpoint saved by a bf16 run resumes on an AVX2 host in float32."""
    cfg = load_config(TINY, [])
    saved = model_config(load_config(TINY, ["model.dtype=bfloat16", "model.vocab_size=4096"]))
    resume = types.SimpleNamespace(model_config=saved, step=100, path="runs/x/checkpoints/100", meta={},
                                   tokenizer_path=lambda: DEFAULT_TOKENIZER_PATH)
    spec = resolve_run(cfg, resume, "cpu")
    assert spec.model_cfg.dtype == "float32" and spec.model_cfg.param_dtype == saved.param_dtype
    say_changed_settings(cfg, resume, spec.model_cfg)
    assert "changed compute options (model.dtype bfloat16 -> float32): applied" in capsys.readouterr().out


@pytest.mark.slow
def test_the_start_line_says_the_compute_dtype_and_why(avx2_host, tmp_path, capsys):
    """The tiny config on a (faked) AVX2-only host trains a step in float32 and says why."""
    from easylemur.train.loop import train

    cfg = load_config(TINY, [f"workdir={tmp_path}", "train.steps=1", "data.seq_len=64", "train.batch_size=8",
                             "model.num_layers=1", "data.prefetch=0"])
    train(cfg)
    (line,) = [x for x in capsys.readouterr().out.splitlines() if " params, " in x]
    assert line.endswith("steps 0->1, compute float32 (CPU has no native bf16; set model.dtype=bfloat16 to force it)")
