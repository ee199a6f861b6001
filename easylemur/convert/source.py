"""init.from resolved (docs/design.md, "Tokenizer"): what the source is (an HF directory or an
easylemur checkpoint's meta) and the tokenizer of a run's data: data.tokenizer, else init.from's
own (an HF directory's tokenizer.model or tokenizer.json, or the one an easylemur checkpoint
stores), else, for a run from scratch, the shipped one.

The one owner of those choices, beside the converters that read the same sources: the train loop
(`state.resolve_run`) and the `python -m easylemur.data` command call it; the data floor below
is handed the resolved tokenizer path. `hf` and `checkpoint` are imported only when init.from
names a source, so the data commands of a run from scratch never load orbax, optax or the model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from ml_collections import ConfigDict

from easylemur.config import ConfigError
from easylemur.tokenizer import load_tokenizer, tokenizer_kind
from easylemur.tokenizer.spm import Tokenizer

if TYPE_CHECKING:
    from easylemur.tokenizer.hf import HFTokenizer


def read_source(src: str) -> Any:
    """init.from read once: None, the HF directory, or the checkpoint's `Saved` meta."""
    if not src:
        return None
    from easylemur.convert import hf

    if hf.is_hf_dir(src):
        return src
    from easylemur.checkpoint import model_meta

    return model_meta.read_meta(src)


def tokenizer_path(cfg: ConfigDict, source: Any) -> Optional[str]:
    """What `load_tokenizer` reads for this run: data.tokenizer, else init.from's own tokenizer,
    else (fresh runs only) None, the shipped one. A source without a tokenizer is an error:
    training a real model on the shipped tokenizer's ids would silently scramble it."""
    if cfg.data.tokenizer:
        return str(cfg.data.tokenizer)
    src = cfg.init["from"]
    if isinstance(source, str):
        if tokenizer_kind(source) is not None:
            return source
        raise ConfigError(f"init.from={src} has no tokenizer.model or tokenizer.json; set data.tokenizer to the "
                          "tokenizer it was trained with")
    if source is not None:
        path = source.tokenizer_path()
        if path is None:
            raise ConfigError(f"init.from={src} holds no tokenizer; set data.tokenizer")
        return str(path)
    return None


def source_tokenizer(cfg: ConfigDict, source: Any) -> Tokenizer | HFTokenizer:
    """The run's tokenizer, loaded (see `tokenizer_path`)."""
    return load_tokenizer(tokenizer_path(cfg, source))
