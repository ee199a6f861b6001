"""The config schema: overrides, unknown keys, wrong types."""

from pathlib import Path

import pytest

from easylemur.config import ConfigError, load_config, model_config


def test_override_types_and_model_fields():
    cfg = load_config("configs/tiny_pretrain.py", ["train.steps=7", "optimizer.lr=1e-3", "model.num_layers=2",
                                                   "data.sources.code.weight=5", "model.dtype=bfloat16"])
    assert cfg.train.steps == 7 and cfg.optimizer.lr == 1e-3
    assert cfg.data.sources.code.weight == 5.0
    m = model_config(cfg)
    assert m.num_layers == 2 and m.dtype == "bfloat16"


@pytest.mark.parametrize(
    "override,needle",
    [
        ("train.stepz=3", "train.stepz"),
        ("optimizr.lr=1", "optimizr"),
        ("model.num_layerz=2", "model.num_layerz"),
        ("train.steps=abc", "train.steps"),
        ("train.steps=1.5", "train.steps"),
        ("data.strict=maybe", "data.strict"),
        ("optimizer.schedule=exp", "optimizer.schedule"),
    ],
)
def test_bad_override_names_key(override, needle):
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
        load_config("configs/tiny_pretrain.py", [override])


def test_unknown_key_in_config_file(tmp_path):
    f = tmp_path / "bad.py"
    f.write_text(
        "from ml_collections import ConfigDict\n"
        "def get_config():\n"
        "    c = ConfigDict()\n"
        "    c.train = ConfigDict({'stpes': 3})\n"
        "    return c\n"
    )
    with pytest.raises(ConfigError, match=r"unknown config key 'train\.stpes'"):
        load_config(f)


def test_batch_must_divide_by_accumulation():
    with pytest.raises(ConfigError, match="grad_accum"):
        load_config("configs/tiny_pretrain.py", ["train.batch_size=6", "train.grad_accum=4"])


def test_every_source_key_can_be_overridden():
    cfg = load_config("configs/tiny_pretrain.py", ["data.sources.code.field=content"])
    assert cfg.data.sources.code.field == "content"


def test_eval_without_eval_sources_is_refused():
    with pytest.raises(ConfigError, match=r"eval\.every=5 but data\.eval_sources is empty"):
        load_config("configs/tiny_pretrain.py", ["eval.every=5"])


def test_override_parser_takes_both_spellings():
    from easylemur.config import split_overrides

    rest, overrides = split_overrides(["preview", "--config", "c.py", "--config.a.b=1", "--config.c", "x y", "--rows", "2"])
    assert rest == ["preview", "--config", "c.py", "--rows", "2"] and overrides == ["a.b=1", "c=x y"]
    with pytest.raises(ConfigError, match="needs a value"):
        split_overrides(["--config.train.steps"])


def test_checkpoint_keep_zero_keeps_every_checkpoint(tmp_path):
    import numpy as np

    from easylemur.checkpoint import store

    mngr = store.manager(tmp_path, keep=0, async_save=False)
    for step in (1, 2, 3):
        store.save(mngr, step, {"w": np.full((2,), step, np.float32)}, {"step": step}, force=True)
    mngr.wait_until_finished()
    assert mngr.all_steps() == [1, 2, 3]
    mngr.close()


@pytest.mark.parametrize("body,needle", [
    (b'x = "\xff"\ndef get_config():\n    return {}\n', r"bad\.py, line 1: .*utf-8"),
    (b"def get_config():\n    raise ValueError('no such preset')\n", r"bad\.py, line 2: ValueError: no such preset"),
    (b"def get_config(:\n", r"bad\.py, line 1: "),
])
def test_a_config_file_that_fails_is_one_line_naming_file_and_line(tmp_path, body, needle):
    f = tmp_path / "bad.py"
    f.write_bytes(body)
    with pytest.raises(ConfigError, match=needle) as e:
        load_config(f)
    assert "\n" not in str(e.value)


def test_a_config_directory_is_named_as_one(tmp_path):
    with pytest.raises(ConfigError, match="is a directory; expected a Python file"):
        load_config(tmp_path)


def test_help_config_lists_every_key_with_its_default_and_description():
    """`--help-config` on a config-taking command prints every key of the schema, its default and
    the schema's own description of it, without needing --config."""
    import subprocess
    import sys

    from easylemur.config import default_config
    from easylemur.config.reference import descriptions, flat

    p = subprocess.run([sys.executable, "-m", "easylemur.train", "--help-config"], capture_output=True, text=True,
                       timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    text = descriptions()
    for key, value in flat(default_config()):
        default = repr(value) if not isinstance(value, str) else f'"{value}"'
        at = next(i for i, line in enumerate(lines) if line.split(" = ")[0].strip() == key)
        assert lines[at].endswith(f" = {default}") and lines[at + 1].strip() == text[key] != "", (key, lines[at:at + 2])
    assert "--help-config" in subprocess.run([sys.executable, "-m", "easylemur.train", "--help"], capture_output=True,
                                             text=True, timeout=120).stdout
