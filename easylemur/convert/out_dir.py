"""Output directories that never destroy (docs/design.md, "HF layout"): what from-hf and to-hf
refuse to write into, a private staging directory beside the final one, and the rename that puts
the finished directory in place (with --force keeping the files that belong to no model)."""

from __future__ import annotations

import errno
import fnmatch
import os
import shutil
import stat
import tempfile
from pathlib import Path

from easylemur.convert.dtypes import ConvertError
from easylemur.errors import RunError
from easylemur.storage import is_url


# The files of an HF model directory besides its weights. An export writes some of them; any of
# them left from the model a directory held before would be read with the new weights
# (AutoTokenizer prefers an old tokenizer.json to the new tokenizer.model, for one).
_HF_MODEL_FILES = frozenset({
    "config.json", "generation_config.json", "tokenizer.model", "tokenizer.json", "tokenizer_config.json",
    "special_tokens_map.json", "added_tokens.json", "vocab.json", "merges.txt", "chat_template.jinja",
    "chat_template.json",
})
# Weights and weight indexes in the formats transformers, llama.cpp and Meta's checkpoints use.
_WEIGHT_PATTERNS = ("*.safetensors", "*.index.json", "pytorch_model*.bin", "tf_model*.h5", "flax_model*.msgpack",
                    "*.gguf", "consolidated*.pth")
INCOMPLETE, PREVIOUS = ".incomplete-", ".previous-"


def belongs_to_a_model(name: str) -> bool:
    """Whether a file named `name` in an HF directory is part of the model it holds."""
    return name in _HF_MODEL_FILES or any(fnmatch.fnmatch(name, p) for p in _WEIGHT_PATTERNS)


def _names(names, limit: int = 8) -> str:
    names = sorted(names)
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _local_dir(out: str | Path, flag: str = "--out") -> Path:
    """`out` as an absolute real path (a symlinked --out is followed: the link stays, its target
    is replaced); refuses what a rename cannot replace."""
    text = os.fspath(out)
    if is_url(text):
        raise ConvertError(f"{flag} {text}: only local directories are written (each output is renamed into "
                           "place when complete); write locally, then copy it to the bucket")
    final = Path(os.path.realpath(text))
    if final.exists() and not final.is_dir():
        raise ConvertError(f"{flag} {text}: exists and is not a directory")
    blocker = next((p for p in final.parents if p.exists()), None)
    if blocker is not None and not blocker.is_dir():
        raise ConvertError(f"{flag} {text}: {blocker} is a file, not a directory")
    if os.path.ismount(final):
        raise ConvertError(f"{flag} {text}: is a mount point, which cannot be replaced by a rename; "
                           "write into a directory inside it")
    return final


def _inside(path: str | Path, directory: Path) -> bool:
    path = Path(os.path.realpath(os.fspath(path)))
    return path == directory or directory in path.parents


def note_leftovers(final: Path, log) -> None:
    """Names the directories an interrupted (or still running) conversion left beside `final`."""
    if not final.parent.is_dir():
        return
    for p in sorted(final.parent.iterdir()):
        if p.name.startswith(final.name + INCOMPLETE):
            log(f"note: {p} is left from an interrupted or running conversion: the new output, unfinished, or "
                f"finished but not yet renamed to {final.name}; delete it once no conversion runs")
        elif p.name.startswith(final.name + PREVIOUS):
            log(f"note: {p} holds what an interrupted --force conversion moved aside from {final}; "
                f"{'move it back to ' + str(final) if not final.exists() else 'delete it'} unless it is still running")


def _staging_dir(final: Path) -> Path:
    """A new private directory beside `final` (same filesystem, so the rename is atomic)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(dir=final.parent, prefix=final.name + INCOMPLETE))


def _dir_mode(final: Path) -> int:
    """The mode the new directory gets: the replaced one's, else mkdir's (mkdtemp makes 0700,
    which would hide an export from everyone else)."""
    if final.is_dir():
        return stat.S_IMODE(final.stat().st_mode)
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o777 & ~umask


def _unchanged(final: Path) -> str:
    """What a failed conversion left at `final` (its output is written beside it, then renamed)."""
    return (f"{final} is as it was (the partial output was removed)" if final.exists()
            else "nothing was written there (the partial output was removed)")


def _is_empty_dir(path: Path) -> bool:
    return path.is_dir() and not any(path.iterdir())


def _put_in_place(staged: Path, final: Path, replace: bool, log) -> None:
    """Renames the complete directory `staged` to `final`; a non-empty `final` only if `replace`."""
    os.chmod(staged, _dir_mode(final))
    if not final.exists() or _is_empty_dir(final) or not replace:
        try:
            os.rename(staged, final)  # onto an empty directory too; fails if one appeared and filled meanwhile
        except OSError as e:
            if e.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                raise RunError(f"{final}: was filled by something else while this conversion ran; "
                               "the new output was discarded and that directory left as it is") from None
            raise
        return
    aside = Path(tempfile.mkdtemp(dir=final.parent, prefix=final.name + PREVIOUS))
    try:
        os.rename(final, aside)  # onto the empty placeholder that reserved the name
    except BaseException:
        os.rmdir(aside)
        raise
    # A crash right here, between the two renames, leaves no `final`: the previous output whole
    # in NAME.previous-XXXXXX and the new one whole in NAME.incomplete-XXXXXX. Renaming either
    # to NAME restores a complete directory; the next conversion into NAME names both
    # (`note_leftovers`).
    try:
        os.rename(staged, final)
    except BaseException:
        os.rename(aside, final)
        raise
    shutil.rmtree(aside, ignore_errors=True)
    if aside.exists():
        log(f"warning: could not remove {aside} (the replaced output); delete it")


def _link_or_copy(src, dst) -> None:
    # a hard link costs no space and no time; the replaced directory is deleted right after
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:
        shutil.copy2(src, dst, follow_symlinks=False)


def _carry_over(old: Path, new: Path) -> tuple[list[str], list[str], list[str]]:
    """Brings the entries of `old` that belong to no model into `new`; returns the names
    (kept, replaced by the new output, removed as another model's files)."""
    kept, replaced, removed = [], [], []
    for entry in sorted(old.iterdir()):
        dst = new / entry.name
        if dst.exists() or dst.is_symlink():
            replaced.append(entry.name)
        elif belongs_to_a_model(entry.name):
            removed.append(entry.name)
        else:
            if entry.is_symlink():
                os.symlink(os.readlink(entry), dst)
            elif entry.is_dir():
                shutil.copytree(entry, dst, symlinks=True, copy_function=_link_or_copy)
            else:
                _link_or_copy(entry, dst)
            kept.append(entry.name)
    return kept, replaced, removed


def check_checkpoint_out(out: str | Path, overwrite: bool) -> Path:
    """Refuses an `out` whose checkpoints from-hf must not replace; returns `out` as a local
    real path. Without --force any checkpoint there is refused; with it only a parameter-only
    step 0 (an earlier from-hf or `save_params`) is replaced: a training run's checkpoints hold
    optimizer state and a history no conversion can give back."""
    final = _local_dir(out)
    ckdir = final / "checkpoints"
    if ckdir.exists() and not ckdir.is_dir():
        raise ConvertError(f"--out {out}: {ckdir} exists and is not a directory")
    held = sorted(p.name for p in ckdir.iterdir()) if ckdir.is_dir() else []
    if not held:
        return final
    steps = sorted((p for p in held if p.isdigit()), key=int)
    if not overwrite:
        what = f"checkpoints (steps {', '.join(steps)})" if steps else f"files ({_names(held)})"
        raise ConvertError(f"--out {out}: {ckdir} already holds {what}; choose an empty directory or pass --force")
    trained = [s for s in steps if (ckdir / s / "opt_state").exists()]
    if trained or steps != ["0"] or held != ["0"]:
        why = f"step {trained[0]} has optimizer state" if trained else f"it holds {_names(held)}"
        raise ConvertError(f"--out {out}: {ckdir} is not a parameter-only step-0 checkpoint ({why}); from-hf "
                           "--force replaces only an earlier conversion, never a training run; choose another directory")
    return final


def check_export_out(out: str | Path, checkpoint_path: str | Path, overwrite: bool) -> Path:
    """`out` as a local real path. A directory that is not empty is refused unless `overwrite`;
    one that holds easylemur checkpoints, or the checkpoint being exported, always."""
    final = _local_dir(out)
    if not is_url(checkpoint_path) and _inside(checkpoint_path, final):
        raise ConvertError(f"--out {out} holds the checkpoint being exported ({checkpoint_path}); "
                           "choose a directory outside it")
    held = sorted(p.name for p in final.iterdir()) if final.is_dir() else []
    if (final / "checkpoints").is_dir() or ((final / "meta").is_dir() and final.name.isdigit()) or any(
            n.isdigit() and (final / n / "meta").is_dir() for n in held):
        raise ConvertError(f"--out {out}: holds easylemur checkpoints; to-hf never writes into a workdir or "
                           "checkpoint directory, even with --force; choose another directory")
    if held and not overwrite:
        raise ConvertError(f"--out {out}: not empty (holds {_names(held)}); choose a new or empty directory, or pass "
                           "--force to replace the model there (its weight, config and tokenizer files go, other "
                           "files stay)")
    return final
