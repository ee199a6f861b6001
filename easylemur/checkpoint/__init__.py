"""Checkpoints: `store` (any pytree plus JSON meta, orbax; no model), `paths`, `fingerprint`,
and `model_meta` (the easylemur model's meta schema, parameter loading and saving)."""
