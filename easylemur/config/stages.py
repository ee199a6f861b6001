"""The mixture's stages (`data.stages`): each checked against the sources and turned into a plain
dict (`_checked_stages`)."""

from __future__ import annotations

from typing import Any

from easylemur.config.schema import ConfigError


def _checked_stages(stages: Any, names: list[str]) -> list[dict]:
    """data.stages as plain dicts {start_step: int, weights: {every source: float}}; a bad one
    is a ConfigError naming its key (data.stages[i].weights.NAME)."""
    out, last = [], -1
    for i, stage in enumerate(stages or []):
        key = f"data.stages[{i}]"
        if not hasattr(stage, "items") or set(stage.keys()) != {"start_step", "weights"}:
            raise ConfigError(f"config key '{key}' must be a mapping with keys start_step and weights, got {stage!r}")
        step, weights = stage["start_step"], stage["weights"]
        if isinstance(step, bool) or not isinstance(step, int) or step < 0 or step <= last:
            after = f" and after data.stages[{i - 1}].start_step={last}" if i else ""
            raise ConfigError(f"config key '{key}.start_step' must be an integer >= 0{after}, got {step!r}")
        if not hasattr(weights, "items"):
            raise ConfigError(f"config key '{key}.weights' must be a mapping of source name -> weight, got {weights!r}")
        for name, w in weights.items():
            if name not in names:
                raise ConfigError(f"config key '{key}.weights.{name}': no such source in data.sources "
                                  f"({', '.join(names) or 'none'})")
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w < float("inf"):
                raise ConfigError(f"config key '{key}.weights.{name}' must be a number >= 0 (0 pauses it), got {w!r}")
        for name in names:
            if name not in weights:
                raise ConfigError(f"config key '{key}.weights.{name}' is missing: a stage gives every source a weight "
                                  "(0 pauses it)")
        if not any(w > 0 for w in weights.values()):
            raise ConfigError(f"config key '{key}.weights' gives no source a weight above 0")
        out.append({"start_step": step, "weights": {n: float(weights[n]) for n in names}})
        last = step
    return out
