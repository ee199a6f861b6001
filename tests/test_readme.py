"""The README's commands exist and answer --help, every --flag it names is one the command
accepts, every --config.KEY it names is in the schema, and the quick start's demo runs end to end."""

import functools
import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
ENV = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": ""}

# Flags of other programs the README names in its prose (in its code blocks, other programs'
# commands are recognised as not ours and skipped): SLURM's --requeue.
EXTERNAL_FLAGS = {"--requeue"}


def _code_commands() -> list[list[str]]:
    """The commands of the README's bash blocks, as words: continuation lines joined,
    comments dropped, split at ;, &&, ||, | and at launch.sh's -- (its command is one too)."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", README, re.S):
        text = re.sub(r"\\\n", " ", block)
        for line in text.splitlines():
            lex = shlex.shlex(line, posix=True, punctuation_chars=";&|")
            lex.whitespace_split, lex.commenters = True, "#"
            cmd: list[str] = []
            for word in list(lex) + [";"]:
                if word in (";", "&&", "||", "|", "&"):
                    if cmd:
                        commands.append(cmd)
                    cmd = []
                else:
                    cmd.append(word)
    out = []
    for cmd in commands:
        if _key(cmd) and _key(cmd)[0].endswith(".sh") and "--" in cmd:
            i = cmd.index("--")
            out += [cmd[:i], cmd[i + 1:]]
        else:
            out.append(cmd)
    return out


def _key(cmd: list[str]) -> tuple[str, ...] | None:
    """("easylemur.data", "stats") or ("tpu_scripts/launch.sh",) for a command of ours, else None."""
    words = [w for w in cmd if not re.fullmatch(r"[A-Z_]+=\S*", w)]  # VAR=value prefixes
    words = words[1:] if words[:1] == ["bash"] else words
    if not words:
        return None
    if words[0].endswith("python") and words[1:2] == ["-m"] and words[2].startswith("easylemur"):
        sub = words[3] if len(words) > 3 and re.fullmatch(r"[a-z][\w-]*", words[3]) else None
        return (words[2], sub) if sub else (words[2],)
    if re.fullmatch(r"(\./)?(tpu_scripts/\w+\.sh)", words[0]):
        return (words[0].removeprefix("./"),)
    return None


def _commands() -> list[tuple[str, ...]]:
    found = {_key(c) for c in _code_commands()}
    for m in re.finditer(r"python -m (easylemur(?:\.\w+)*)((?: [a-z][\w-]*)?)", README):  # prose mentions too
        module, sub = m.group(1), m.group(2).strip()
        found.add((module, sub) if sub and not sub.startswith("-") else (module,))
    return sorted(k for k in found if k)


def _argv(key: tuple[str, ...]) -> list[str]:
    return ["bash", key[0]] if key[0].endswith(".sh") else [sys.executable, "-m", *key]


@functools.lru_cache(maxsize=None)
def _helps() -> dict[tuple[str, ...], subprocess.CompletedProcess]:
    """Every README command's --help, run two at a time (each imports jax)."""
    def run(key):
        return key, subprocess.run([*_argv(key), "--help"], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=180)

    with ThreadPoolExecutor(2) as pool:
        return dict(pool.map(run, _commands()))


def _flags(words: list[str]) -> set[str]:
    """The --flags among `words`; optional ones may be written in brackets: [--rows N]."""
    words = [w.strip("[](),|") for w in words]
    return {w.split("=", 1)[0] for w in words if re.match(r"--[a-z][\w-]*(=|$)", w)}


def test_readme_names_every_cli():
    modules = {c[0] for c in _commands()}
    assert {"easylemur.train", "easylemur.convert", "easylemur.data", "easylemur.generate", "easylemur.aot",
            "easylemur.tokenizer", "easylemur.eval", "easylemur.checkpoint"} <= modules
    assert {f"tpu_scripts/{s}.sh" for s in ("create", "setup", "launch", "status", "logs", "stop")} <= modules


@pytest.mark.parametrize("cmd", _commands(), ids=" ".join)
def test_readme_command_has_help(cmd):
    p = _helps()[cmd]
    assert p.returncode == 0, p.stderr[-2000:]
    assert "usage:" in p.stdout.lower()


def test_readme_flags_are_accepted_by_their_commands():
    helps = {k: p.stdout for k, p in _helps().items()}
    wrong = []
    for cmd in _code_commands():
        key = _key(cmd)
        if key is None:
            continue  # another program (pip, gcloud, sbatch, vllm, ...)
        for flag in sorted(_flags(cmd)):
            if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", helps[key]):
                wrong.append(f"{' '.join(key)}: {flag}")
    # flags named in the prose: each must be one some README command accepts
    every = "\n".join(helps.values())
    for span in re.findall(r"`([^`\n]*--[^`\n]*)`", re.sub(r"```.*?```", "", README, flags=re.S)):
        for flag in sorted(_flags(span.split())):
            if flag not in EXTERNAL_FLAGS and not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", every):
                wrong.append(f"prose `{span}`: {flag}")
    assert not wrong, "flags the README names that no parser accepts:\n" + "\n".join(wrong)


def test_readme_config_keys_exist():
    from easylemur.config import SOURCE_DEFAULTS, default_config
    from easylemur.model.llama import LlamaConfig

    cfg, llama = default_config(), set(LlamaConfig.__dataclass_fields__)
    keys = set(re.findall(r"--config\.([a-z_][a-z0-9_.]*[a-z0-9_])", README))  # not the KEY placeholder
    assert len(keys) > 5

    def exists(key: str) -> bool:
        parts = key.split(".")
        if parts[0] == "model":
            return len(parts) == 2 and (parts[1] in llama or parts[1] == "preset")
        if parts[:2] in (["data", "sources"], ["data", "eval_sources"]):
            return len(parts) == 4 and parts[3] in SOURCE_DEFAULTS
        node = cfg
        for p in parts:
            if not hasattr(node, "keys") or p not in node:
                return False
            node = node[p]
        return not hasattr(node, "keys")

    assert not [k for k in sorted(keys) if not exists(k)]


def test_quick_start_demo_runs(tmp_path):
    assert "bash scripts/demo.sh" in README and "bash scripts/test.sh" in README
    few = "--config.train.steps=4 --config.log.every=2 --config.checkpoint.every=4 --config.data.prefetch=0"
    env = {**ENV, "SKIP_SETUP": "1", "PYTHON": sys.executable, "RUNS": str(tmp_path), "PRETRAIN_ARGS": few, "CHAT_ARGS": few}
    p = subprocess.run(["bash", "scripts/demo.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert (tmp_path / "tiny_chat_hf" / "config.json").is_file()
    assert re.search(r"tiny_chat: loss [\d.]+ \(step 2\) -> [\d.]+ \(step 4\)", p.stdout)
