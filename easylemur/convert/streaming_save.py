"""The streaming orbax writer from-hf saves through: a parameter-only step-0 checkpoint written one
`LazyArray` leaf at a time (the one place easylemur uses orbax internals; without them, orbax's public
API), staged and renamed into place by `out_dir`."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any, Optional

from easylemur.checkpoint import store
from easylemur.convert.out_dir import _put_in_place, _staging_dir, _unchanged, check_checkpoint_out, note_leftovers
from easylemur.convert.safetensors_io import LazyArray
from easylemur.errors import RunError


class OrbaxInternalsMissing(RuntimeError):
    """The installed orbax lacks an internal name `lazy_array_params_handler` relies on."""

    def __init__(self, symbol: str):
        import orbax.checkpoint as ocp

        self.symbol = symbol
        version = getattr(ocp, "__version__", "?")
        super().__init__(f"orbax-checkpoint {version} has no {symbol} (convert.lazy_array_params_handler was "
                         "written against orbax-checkpoint 0.12.8)")


def lazy_array_params_handler(failures: Optional[list] = None):
    """(handler, save-args class) for a params item whose leaves are LazyArrays: each leaf is
    materialised only while it is written, one after the other. Raises OrbaxInternalsMissing
    naming the first orbax name that is gone.

    A leaf that fails to load (an unreadable tensor, a value float16 cannot hold) stops the
    writing and is appended to `failures` instead of raised: raised in orbax's writer thread it
    would reach the user as orbax's logged traceback. The caller raises it after the save and
    discards the checkpoint, which lacks the leaves from that one on.

    Written against orbax-checkpoint 0.12.8. Why: orbax's StandardSave takes the whole pytree
    and its numpy handler deep-copies every leaf before writing them all concurrently, so a
    from-hf conversion would hold the model twice in RAM. orbax has no public way to stream
    leaves, so this is the one place in easylemur that uses orbax internals:
      - `NumpyHandler._background_serialize`: the write of arrays already in memory, called
        here one leaf at a time;
      - `StandardCheckpointHandler()._impl`: the PyTreeCheckpointHandler it wraps, replaced by
        one whose type registry knows LazyArray (so the step metadata still names
        StandardCheckpointHandler, exactly as `model_meta.save_params` writes);
      - `StandardCheckpointHandler()._supported_types`: its leaf-type check, extended with
        LazyArray.
    tests/test_convert.py::test_orbax_internals_for_streaming_save fails naming the symbol
    when an orbax upgrade removes one; `save_streaming` then falls back to the public API."""
    import jax
    import orbax.checkpoint as ocp
    from orbax.checkpoint import future, type_handlers

    if not hasattr(type_handlers.NumpyHandler, "_background_serialize"):
        raise OrbaxInternalsMissing("orbax.checkpoint.type_handlers.NumpyHandler._background_serialize")
    handler = ocp.StandardCheckpointHandler()
    for name in ("_impl", "_supported_types"):
        if not hasattr(handler, name):
            raise OrbaxInternalsMissing(f"orbax.checkpoint.StandardCheckpointHandler().{name}")

    class LazyNumpyHandler(type_handlers.NumpyHandler):
        # typestr stays "np.ndarray": the checkpoint must read back exactly like save_params'.
        def __init__(self):
            super().__init__(deepcopy_host_arrays=False)

        async def serialize(self, values, infos, args=None):
            args = args or [ocp.SaveArgs()] * len(values)

            async def one_at_a_time():
                for value, info, arg in zip(values, infos, args):
                    if failures:
                        return
                    try:
                        arr = value()
                    except Exception as e:
                        if failures is None:
                            raise
                        failures.append(e)
                        return
                    await self._background_serialize([arr], [info], [arg])
                    del arr

            return [future.CommitFutureAwaitingContractedSignals(one_at_a_time(), name="easylemur_lazy_numpy")]

    # jax.Array's handler is there only so orbax keeps writing its array-metadata store, as
    # it does for save_params; every leaf here is a LazyArray.
    registry = type_handlers.create_type_handler_registry((jax.Array, type_handlers.ArrayHandler()),
                                                          (LazyArray, LazyNumpyHandler()))
    handler._impl = ocp.PyTreeCheckpointHandler(type_handler_registry=registry)
    handler._supported_types = (*handler._supported_types, LazyArray)
    return handler, ocp.args.StandardSave


def save_streaming(out: str | Path, params: Any, meta: dict, overwrite: bool = False, log=None) -> Path:
    """Writes a parameter-only step-0 checkpoint `out/checkpoints/0` from a tree whose leaves
    may be LazyArrays; returns the step directory.

    The checkpoint is written into a new directory and renamed into place when complete: to
    `out` when `out` does not exist yet, else to `out/checkpoints` (what else `out` holds is
    left alone). A previous conversion there (`overwrite`, see `check_checkpoint_out`) is
    replaced only then, so a failed conversion leaves it as it was."""
    import jax
    import orbax.checkpoint as ocp

    log = log or (lambda msg: print(msg, file=sys.stderr))
    final = check_checkpoint_out(out, overwrite)
    target = final / "checkpoints" if final.is_dir() else final
    note_leftovers(target, log)
    staged = _staging_dir(target)
    ckdir = staged if target != final else staged / "checkpoints"
    failures: list = []  # a leaf that failed to load (see lazy_array_params_handler)
    try:
        try:
            handler, save_args = lazy_array_params_handler(failures)
        except OrbaxInternalsMissing as e:
            log(f"note: {e}; saving through orbax's public StandardSave instead, which holds the whole model "
                "in memory (about twice)")
            handler, save_args = ocp.StandardCheckpointHandler(), ocp.args.StandardSave
            params = jax.tree.map(lambda x: x() if isinstance(x, LazyArray) else x, params)
        mngr = ocp.CheckpointManager(
            ckdir,
            options=ocp.CheckpointManagerOptions(create=True, enable_async_checkpointing=False),
            item_handlers={"params": handler, "meta": ocp.JsonCheckpointHandler()},
        )
        try:
            mngr.save(0, args=ocp.args.Composite(params=save_args(params), meta=ocp.args.JsonSave(meta)), force=True)
            mngr.wait_until_finished()
        except Exception as e:
            if failures:  # a leaf that could not be read stopped the writing: that is the error
                raise failures[0] from None
            # a full disk, a permission: the writer's error (tensorstore's RESOURCE_EXHAUSTED
            # for ENOSPC) says little on its own; name the output and the OS's words
            raise RunError(f"--out {out}: writing the checkpoint {final / 'checkpoints' / '0'} failed: "
                           f"{store.write_failure_cause(e)}; {_unchanged(final)}") from e
        finally:
            mngr.close()
        if failures:
            raise failures[0]
        check_checkpoint_out(out, overwrite)  # again: what is there now is what gets replaced
        # a whole new `out` never replaces one that appeared meanwhile; checkpoints/ may be replaced
        _put_in_place(staged, target, overwrite and target != final, log)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    return final / "checkpoints" / "0"
