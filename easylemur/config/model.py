"""The model section resolved: the `LlamaConfig` a run config names (`model_config`: the preset
with `model.<field>` overrides) and its compute dtype (`compute_dtype`, `model.dtype=auto` by
the hardware). `LlamaConfig` and the presets come from `easylemur.model.config`, plain data that
loads no JAX or Flax."""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

from ml_collections import ConfigDict

from easylemur.config.schema import ConfigError
from easylemur.model.config import PRESETS, LlamaConfig


def compute_dtype(cfg: ConfigDict, platform: Optional[str] = None) -> tuple[str, str]:
    """(the compute dtype, why) of a run config for a program compiled for `platform`
    (`sharding.platform(mesh)`): model.dtype when it names one, the preset's when unset, and
    for model.dtype=auto the hardware's pick, `host.compute_dtype` (bfloat16 off a CPU and for
    platform None, i.e. no mesh at hand, as `aot` compiling for TPU; on a CPU by its flags)."""
    from easylemur import host

    asked = cfg.model.get("dtype")
    on_cpu = platform == "cpu"
    if asked == "auto":
        try:
            return host.compute_dtype(platform, host.cpu_flags() if on_cpu else None, os.environ)
        except ValueError as e:
            raise ConfigError(str(e)) from None
    if asked is None:
        preset = PRESETS.get(cfg.model.get("preset", "tiny"))
        return (preset.dtype if preset else "float32"), "the preset's; model.dtype=auto picks by the hardware"
    why = f"model.dtype={asked}"
    flags = host.cpu_flags() if on_cpu and asked == "bfloat16" else None
    if flags is not None and not host.native_bf16(flags):
        why += "; this CPU has no native bf16, so bf16 is emulated"
    return asked, why


def model_config(cfg: ConfigDict, platform: Optional[str] = None) -> LlamaConfig:
    """The LlamaConfig a run config names: the preset with model.<field> overrides applied,
    model.dtype=auto resolved for `platform` (`compute_dtype`; the LlamaConfig never holds it)."""
    fields = {f.name: f for f in dataclasses.fields(LlamaConfig)}
    preset = cfg.model.get("preset", "tiny")
    if preset not in PRESETS:
        raise ConfigError(f"model.preset {preset!r} is not one of {sorted(PRESETS)}")
    overrides = {}
    for key, value in cfg.model.items():
        if key == "preset":
            continue
        if key not in fields:
            raise ConfigError(f"unknown config key 'model.{key}' (LlamaConfig has no field {key!r})")
        if isinstance(value, ConfigDict):
            value = value.to_dict()
        default = getattr(PRESETS[preset], key)
        expected = (bool,) if isinstance(default, bool) else (int,) if isinstance(default, int) else \
            (int, float) if isinstance(default, float) else (str,) if isinstance(default, str) else None
        if value is not None and expected and (not isinstance(value, expected) or
                                               (expected != (bool,) and isinstance(value, bool))):
            raise ConfigError(f"config key 'model.{key}' must be {expected[-1].__name__}, got {value!r}")
        overrides[key] = float(value) if isinstance(default, float) and value is not None else value
    if overrides.get("dtype") == "auto":
        overrides["dtype"] = compute_dtype(cfg, platform)[0]
    try:
        return dataclasses.replace(PRESETS[preset], **overrides)
    except ValueError as e:
        raise ConfigError(f"model: {e}") from None
