"""Loading a config loads no model code: `load_config` on every shipped configs/*.py (the model
section resolved, `model_config`, included) imports neither JAX nor Flax, because `LlamaConfig`,
the presets and the family names live in easylemur/model/config.py, plain data. And the model
family names have one owner (model/config.py's FAMILIES), which the converters' table matches."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted(ROOT.glob("configs/*.py"))
HEAVY = ("jax", "jaxlib", "flax")

# One fresh interpreter loads every config and resolves its model section, then reports which of
# JAX's and Flax's packages it holds.
_PROBE = """
import json, sys
from easylemur.config import compute_dtype, load_config, model_config
for path in sys.argv[1:]:
    cfg = load_config(path)
    model_config(cfg)
    compute_dtype(cfg, "cpu")
heavy = json.loads(sys.stdin.read())
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in heavy)))
"""


def test_every_shipped_config_loads_without_jax_or_flax():
    assert len(CONFIGS) >= 5  # the glob sees the shipped configs
    out = subprocess.run([sys.executable, "-c", _PROBE, *map(str, CONFIGS)], input=json.dumps(HEAVY), cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert loaded == [], f"loading a config imported {loaded}"


def test_model_config_module_imports_only_the_standard_library():
    """model/config.py may import nothing that could pull in JAX later (an easylemur module that
    grows a JAX import would): only the standard library."""
    tree = ast.parse((ROOT / "easylemur/model/config.py").read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


MOVED = {"LlamaConfig", "PRESETS", "FAMILIES", "SUPPORTED_ROPE_TYPES", "REMAT_POLICIES", "ATTENTION_IMPLS"}


def test_nobody_imports_the_config_names_from_llama_py():
    """They moved to easylemur.model.config; llama.py only uses them."""
    wrong = []
    for folder in ("easylemur", "tests", "bench", "scripts"):
        for path in (ROOT / folder).rglob("*.py"):
            if "easylemur.model.llama" not in (text := path.read_text()):
                continue
            for node in ast.walk(ast.parse(text, str(path))):
                if isinstance(node, ast.ImportFrom) and node.module == "easylemur.model.llama":
                    wrong += [f"{path.relative_to(ROOT)}:{node.lineno} {a.name}" for a in node.names if a.name in MOVED]
    assert wrong == [], wrong


def test_the_converters_know_exactly_the_model_families():
    from easylemur.convert.families import FAMILIES as TABLE
    from easylemur.model.config import FAMILIES, LlamaConfig

    assert sorted(TABLE) == sorted(FAMILIES)
    assert all(TABLE[name].model_type == name for name in TABLE)
    for name in FAMILIES:  # each family is one LlamaConfig accepts
        assert LlamaConfig(family=name).family == name


def test_a_family_in_one_place_only_fails_the_import_check():
    from easylemur.convert.families import FAMILIES as TABLE
    from easylemur.convert.families import _check_names

    _check_names(TABLE, tuple(TABLE))
    with pytest.raises(ImportError, match="no entry here for \\['gemma'\\]"):
        _check_names(TABLE, (*TABLE, "gemma"))  # added to model/config.py only
    with pytest.raises(ImportError, match="not in model/config.py: \\['mistral'\\]"):
        _check_names(TABLE, tuple(n for n in TABLE if n != "mistral"))  # in the converters' table only
