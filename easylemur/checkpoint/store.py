"""Checkpoint storage for any pytree: an orbax CheckpointManager directory of step folders,
each holding named pytree items and a JSON `meta` item. Nothing here knows the model: its
meta schema and parameter loading are `checkpoint.model_meta`'s.

A crash mid-write never leaves a checkpoint that looks whole: on a local disk orbax writes a
step under a temporary name and renames it once every item is complete; on a bucket (no atomic
rename) it writes under the final name and adds `commit_success.txt` last, and a step folder
without it is incomplete (`is_complete`): never resolved, restored or verified as a
checkpoint. `save` records a fingerprint of every array in the meta; `verify_restored` and
`verify_step` check them (docs/design.md, "Checkpoint layout", "Checkpoint integrity").
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
from pathlib import Path
from typing import Any, Optional

import numpy as np
import orbax.checkpoint as ocp
from etils import epath

from easylemur.checkpoint.fingerprint import array_fingerprint, tree_fingerprints
from easylemur.checkpoint.paths import as_path
from easylemur.errors import InputError, RunError, brief
from easylemur.storage import is_url

ITEMS = ("params", "opt_state", "meta")


class CheckpointError(InputError):
    pass


def manager(directory: str | Path, keep: int | None = None, async_save: bool = True) -> ocp.CheckpointManager:
    # orbax reads max_to_keep=0 as "keep none": every save would delete itself. 0 here (like
    # None) keeps every checkpoint.
    options = ocp.CheckpointManagerOptions(
        max_to_keep=keep or None, create=True, enable_async_checkpointing=async_save,
    )
    return ocp.CheckpointManager(as_path(directory), options=options, item_names=ITEMS)


class CheckpointSaveError(RunError):
    """A save that failed (disk full, permissions, a bucket error); older checkpoints are intact."""


def save(mngr: ocp.CheckpointManager, step: int, params: Any, meta: dict, opt_state: Any = None, force: bool = False) -> bool:
    """Saves one step (asynchronously when the manager is async), with the fingerprint of every
    array in its meta (computed on device before the save starts: docs/design.md, "Checkpoint
    integrity"). A failure now, or one of an earlier async save, is a CheckpointSaveError."""
    check_save_errors(mngr)
    trees = {"params": params} if opt_state is None else {"params": params, "opt_state": opt_state}
    meta = {**meta, "checksums": {name: tree_fingerprints(tree) for name, tree in trees.items()}}
    items = {name: ocp.args.StandardSave(tree) for name, tree in trees.items()}
    try:
        return mngr.save(step, args=ocp.args.Composite(meta=ocp.args.JsonSave(meta), **items), force=force)
    except Exception as e:
        raise CheckpointSaveError(_save_failure(mngr, e)) from e


def check_save_errors(mngr: ocp.CheckpointManager, wait: bool = False) -> None:
    """Raises CheckpointSaveError when an async save has failed (`wait`: after waiting for the
    saves in flight). Cheap: the train loop calls it every step, so a failed save stops the run
    right after it fails, not at the next save."""
    try:
        mngr.wait_until_finished() if wait else mngr.check_for_errors()
    except Exception as e:
        raise CheckpointSaveError(_save_failure(mngr, e)) from e


def write_failure_cause(e: BaseException) -> str:
    """The root cause of a failed write, one line: the OS's words and errno first where the
    writer reports an OS error (tensorstore carries it inside its own error, e.g. ENOSPC as
    `RESOURCE_EXHAUSTED: ... [os_error_code='28']`), then the error's start."""
    cause = e
    while cause.__cause__ is not None or cause.__context__ is not None:
        cause = cause.__cause__ or cause.__context__
    text = brief(cause, 200)
    code = re.search(r"os_error_code='?(\d+)", str(cause))  # tensorstore's way of carrying errno
    # orbax's write tasks still hold the same error; asyncio would dump each of them at exit,
    # after (and burying) the one line that reports it
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    if isinstance(cause, OSError) and cause.errno:
        return f"{os.strerror(cause.errno)} [errno {cause.errno}]" + (f" ({cause.filename})" if cause.filename else "")
    if code:
        return f"{os.strerror(int(code.group(1)))} [errno {code.group(1)}] ({text})"
    return text


def _save_failure(mngr: ocp.CheckpointManager, e: BaseException) -> str:
    """One line: where, the root cause (the OS's words where the writer reports an OS error),
    and which step is safe. (A failure of an async save surfaces at a later call, so the step
    being saved then is not necessarily the one that failed: the directory is named.)"""
    # complete on disk: the manager also lists a step whose save began (the one that may have failed)
    directory = as_path(mngr.directory)
    newest = [s for s in mngr.all_steps() if is_complete(directory / str(s))]
    return (f"saving a checkpoint in {directory} failed: {write_failure_cause(e)}; "
            + (f"the newest complete checkpoint is step {max(newest)}" if newest else "no checkpoint was saved"))


def restore_meta(mngr: ocp.CheckpointManager, step: int) -> dict:
    return mngr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]


def restore(mngr: ocp.CheckpointManager, step: int, abstract_params: Any, abstract_opt_state: Any = None) -> tuple[Any, Any]:
    """(params, opt_state or None) restored into the shardings the abstract trees
    (ShapeDtypeStructs with .sharding) carry; the meta is `read_meta`'s job."""
    items = {"params": ocp.args.StandardRestore(abstract_params)}
    if abstract_opt_state is not None:
        items["opt_state"] = ocp.args.StandardRestore(abstract_opt_state)
    out = mngr.restore(step, args=ocp.args.Composite(**items))
    return out["params"], out.get("opt_state") if abstract_opt_state is not None else None


@dataclasses.dataclass(frozen=True)
class Saved:
    """One checkpoint step and its JSON meta, read once (`read_saved`)."""

    directory: epath.Path  # the checkpoints/ directory (for a lone step folder: the folder it sits in)
    step: int
    meta: dict
    # a step folder not named by its step (copied or renamed out of a checkpoints/ directory,
    # e.g. X/step30): read on its own, not through a manager of `directory`
    step_dir: Optional[epath.Path] = None

    @property
    def path(self) -> epath.Path:
        return self.step_dir if self.step_dir is not None else self.directory / str(self.step)


def verify_restored(saved: Saved, trees: dict[str, Any]) -> None:
    """Checks restored (device) arrays against the fingerprints the step recorded at save time;
    a mismatch is a CheckpointError naming the array. Steps saved without fingerprints (older
    easylemur, or `convert from-hf`) pass unchecked."""
    recorded = saved.meta.get("checksums") or {}
    for item, tree in trees.items():
        if item in recorded:
            _compare(saved.path / item, recorded[item], tree_fingerprints(tree))


def _compare(where: Any, recorded: dict[str, str], found: dict[str, str]) -> None:
    for name in sorted(set(recorded) | set(found)):
        if recorded.get(name) != found.get(name):
            what = "missing" if name not in found else "not recorded" if name not in recorded else \
                f"checksum {found[name]}, recorded {recorded[name]}"
            raise CheckpointError(f"{where}: array {name}: {what}")


def move_aside(mngr: ocp.CheckpointManager, step: int) -> epath.Path:
    """Renames a damaged step out of the manager's sight (kept for inspection, never deleted),
    so that the run can save that step again; returns the new path."""
    src = as_path(mngr.directory) / str(step)
    dst = src.parent / f"{step}.damaged"
    n = 1
    while dst.exists():
        n += 1
        dst = src.parent / f"{step}.damaged{n}"
    src.rename(dst)
    return dst


def read_saved(path: str | Path, step: int | None = None) -> Saved:
    """The meta of a workdir's newest checkpoint (or `step`), of a checkpoints dir, or of a step
    dir (under any name: `is_step_dir`)."""
    folder = as_path(path)
    if not folder.name.isdigit() and not (folder / "checkpoints").is_dir() and is_step_dir(folder):
        return _read_step_folder(folder, step)
    directory, step = resolve(path, step)
    mngr = manager(directory, async_save=False)
    try:
        meta = restore_meta(mngr, step)
    finally:
        mngr.close()
    return Saved(directory, step, meta)


def is_complete(step_dir: str | Path) -> bool:
    """Whether a step folder's save finished, by orbax's own rule (the one `all_steps` applies):
    on a bucket its `commit_success.txt` exists; on a local disk any folder not under orbax's
    temporary name is complete."""
    return ocp.utils.is_checkpoint_finalized(as_path(step_dir))


def _incomplete(step_dir: Any) -> CheckpointError:
    return CheckpointError(f"{step_dir}: incomplete (its save did not finish: no commit_success.txt); not a checkpoint")


def is_step_dir(path: str | Path) -> bool:
    """Whether `path` is one checkpoint step folder, judged by its contents (an orbax step
    holding a `meta` item), not by its name: a step copied elsewhere keeps its contents, not
    necessarily its number."""
    path = as_path(path)
    return (path / "meta").is_dir() and (path / "params").is_dir()


def _read_step_folder(path: epath.Path, step: int | None) -> Saved:
    """A step folder whose name is not its step number; the step is the one its meta records."""
    ckptr = ocp.Checkpointer(ocp.CompositeCheckpointHandler())
    try:
        meta = ckptr.restore(path, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
    except Exception as e:
        raise CheckpointError(f"{path / 'meta'}: unreadable ({brief(e)}); not an easylemur checkpoint step") from e
    finally:
        ckptr.close()
    if not isinstance(meta, dict) or not isinstance(meta.get("step"), int):
        raise CheckpointError(f"{path / 'meta'}: no easylemur meta (a step was expected)")
    if step is not None and step != meta["step"]:
        raise CheckpointError(f"{path} is step {meta['step']}, but step {step} was asked for")
    return Saved(path.parent, meta["step"], meta, step_dir=path)


def restore_items(saved: Saved, args: ocp.args.Composite) -> Any:
    """Restores the items `args` names from the step `saved` describes."""
    if saved.step_dir is not None:
        ckptr = ocp.Checkpointer(ocp.CompositeCheckpointHandler())
        try:
            return ckptr.restore(saved.step_dir, args=args)
        finally:
            ckptr.close()
    mngr = manager(saved.directory, async_save=False)
    try:
        return mngr.restore(saved.step, args=args)
    finally:
        mngr.close()


def resolve(path: str | Path, step: int | None = None) -> tuple[Path, int]:
    """(checkpoints directory, step) for a workdir, a checkpoints dir or a step dir named by its
    step (`read_meta` reads a step folder of any other name)."""
    path = as_path(path)
    if (path / "checkpoints").is_dir():
        path = path / "checkpoints"
    elif (path / "meta").is_dir() and path.name.isdigit():
        if step is not None and step != int(path.name):
            raise CheckpointError(f"{path} is step {path.name}, but step {step} was asked for")
        if not is_complete(path):
            raise _incomplete(path)
        return path.parent, int(path.name)
    if not path.is_dir():
        raise CheckpointError(f"{path}: not an HF directory, an easylemur workdir or a checkpoint")
    # a bucket's step folder whose save was cut off has the final name: skipped, as orbax does
    steps = sorted(int(p.name) for p in path.iterdir() if p.name.isdigit() and (p / "meta").is_dir() and is_complete(p))
    if not steps:
        raise CheckpointError(f"{path}: no complete checkpoint (no step folder with params and meta)")
    if step is None:
        return path, steps[-1]
    if step not in steps:
        raise CheckpointError(f"{path}: no checkpoint for step {step}; steps present: {steps}")
    return path, step


# ----------------------------------------------------------------------------- reading and verifying on disk

class ItemReader:
    """Reads an orbax item directory (a step's `params/` or `opt_state/`) one array at a time,
    straight from its on-disk layout with tensorstore: no devices, no model-sized host."""

    def __init__(self, item_dir: str | Path):
        self.dir = as_path(item_dir)
        md_file = self.dir / "_METADATA"
        if not md_file.is_file():
            raise CheckpointError(f"{self.dir}: no _METADATA; not an orbax item")
        md = json.loads(md_file.read_text())
        self._ocdbt = bool(md.get("use_ocdbt", True))
        self._driver = "zarr3" if md.get("use_zarr3") else "zarr"
        # leaf name ('/'-joined keys, as fingerprint.leaf_name) -> orbax's stored keys
        self.keys = {"/".join(k["key"] for k in v["key_metadata"]): tuple(k["key"] for k in v["key_metadata"])
                     for v in md["tree_metadata"].values()
                     if not v.get("value_metadata", {}).get("skip_deserialize")}
        self._ctx = None

    def open(self, name: str):
        """The tensorstore of one array, by leaf name (read lazily, e.g. `[i].read()`)."""
        import tensorstore as ts

        if self._ctx is None:  # no chunk cache: each array is read once
            self._ctx = ts.Context({"cache_pool": {"total_bytes_limit": 0}})
        stored = ".".join(self.keys[name])
        base = str(self.dir) if is_url(self.dir) else f"file://{self.dir}"
        kv = {"driver": "ocdbt", "base": base, "path": stored} if self._ocdbt else \
            {"driver": "file", "path": str(self.dir / stored)}
        return ts.open({"driver": self._driver, "kvstore": kv}, open=True, read=True, context=self._ctx).result()

    def read(self, name: str) -> np.ndarray:
        return np.asarray(self.open(name).read().result())


def verify_step(directory: str | Path, step: int) -> str:
    """Reads every array of one step from disk and checks it against the recorded fingerprints;
    returns a one-line verdict, raises CheckpointError naming what is damaged."""
    path = as_path(directory) / str(step)
    if path.is_dir() and not is_complete(path):
        raise _incomplete(path)
    mngr = manager(directory, async_save=False)
    try:
        meta = restore_meta(mngr, step)
    except Exception as e:
        raise CheckpointError(f"{path}/meta: unreadable: {brief(e)}") from e
    finally:
        mngr.close()
    recorded = meta.get("checksums") or {}
    n = 0
    for item in ("params", "opt_state"):
        if not (path / item).is_dir():
            if item == "params" or item in recorded:
                raise CheckpointError(f"{path / item}: missing")
            continue
        reader = ItemReader(path / item)
        found = {}
        for name in reader.keys:
            try:
                found[name] = array_fingerprint(reader.read(name))
            except Exception as e:
                raise CheckpointError(f"{path / item}: array {name} unreadable: {brief(e)}") from e
        if item in recorded:
            _compare(path / item, recorded[item], found)
            n += len(found)
    return f"ok ({n} arrays match their checksums)" if recorded else "readable (saved without checksums)"


def last_good(mngr: ocp.CheckpointManager) -> str:
    """A sentence naming the newest checkpoint of `mngr` that exists and verifies (read back
    from disk), or saying there is none; for messages that tell the user what is safe."""
    with contextlib.suppress(Exception):
        mngr.wait_until_finished()
    directory = as_path(mngr.directory)
    for step in sorted(mngr.all_steps(), reverse=True):
        try:
            verify_step(directory, step)
        except CheckpointError:
            continue
        return f"The last good state is checkpoint step {step} ({directory / str(step)}, verified)."
    return f"There is no usable checkpoint in {directory} yet."
