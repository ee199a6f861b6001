"""Hugging Face <-> easylemur checkpoint converters, streaming one tensor at a time.

    python -m easylemur.convert from-hf --hf DIR --out CKPT [--param-dtype auto] [--add-chatml-tokens]
    python -m easylemur.convert to-hf --checkpoint CKPT [--step N] --out DIR [--dtype bfloat16] [--max-shard-size 5GB]
        [--chat-template [chatml|model] | --no-chat-template]

from-hf writes the checkpoint format `easylemur.checkpoint` reads (an orbax CheckpointManager
directory `CKPT/checkpoints/0/` with items `params` and `meta`), so `init.from=CKPT`,
`easylemur.load(CKPT)` and `model_meta.load_params(CKPT)` all take it. Parameters keep the HF
dtype by default (bf16 stays bf16: float32 would double the disk for no information; the
loaders cast on restore) and meta.model.param_dtype records it.

Memory: orbax's StandardSave wants the whole pytree and, for numpy leaves, deep-copies all of
them and writes them concurrently (2x the model in RAM). Here the tree handed to orbax holds
`safetensors_io.LazyArray` leaves (shape and dtype only), and a type handler for them
materialises and writes one leaf at a time (`lazy_array_params_handler`, the one place that
uses orbax internals; without them from-hf saves through orbax's public API, holding the model
in memory). The on-disk result is byte-for-byte the layout `save_params` writes (same handler,
same `np.ndarray` value type, OCDBT + zarr). to-hf reads leaf by leaf with tensorstore from that
layout (a scanned checkpoint's layer i is a slice of the stacked array) and writes shard files
tensor by tensor.

Outputs never destroy (docs/design.md, "HF layout"): both commands write into a fresh directory
beside the final one (`NAME.incomplete-XXXXXX`) and rename it into place only when complete, so
a crash leaves the previous output or the new one, never a mix. to-hf refuses an --out that is
not empty unless --force, and then replaces the model there whole: other models' weight,
config and tokenizer files are removed (and listed), files that belong to no model are kept.
from-hf --force replaces only a parameter-only checkpoint, never a training run's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from easylemur.convert.dtypes import ConvertError
from easylemur.convert.from_hf import from_hf
from easylemur.convert.to_hf import to_hf
from easylemur.errors import add_debug_flag, run_cli


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m easylemur.convert", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="{from-hf,to-hf}")
    a = sub.add_parser("from-hf", help="HF Llama directory -> easylemur checkpoint",
                       description="Convert a Hugging Face Llama directory (config.json + safetensors, sharded or "
                                   "not, or pytorch_model*.bin) into an easylemur checkpoint OUT/checkpoints/0.")
    a.add_argument("--hf", required=True, metavar="DIR|ORG/NAME",
                   help="the HF model directory, or a Hub model name (downloaded into the Hugging Face cache: weights, "
                   "configs and tokenizer files; HF_HUB_OFFLINE=1 reads the cache only)")
    a.add_argument("--revision", default=None, help="with a Hub model name: the branch, tag or commit (default: main)")
    a.add_argument("--out", required=True, metavar="CKPT", help="output directory (a workdir-shaped folder)")
    a.add_argument("--param-dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="stored parameter dtype; auto (default) keeps the HF files' dtype")
    a.add_argument("--tokenizer", default=None, metavar="PATH",
                   help="sentencepiece model to embed (default: DIR/tokenizer.model when present)")
    a.add_argument("--add-chatml-tokens", action="store_true",
                   help="add <|im_start|>/<|im_end|> to the tokenizer and grow the embedding and LM head "
                        "(new rows = mean of the existing rows)")
    a.add_argument("--force", action="store_true",
                   help="replace an earlier conversion in --out (never a training run's checkpoints)")
    b = sub.add_parser("to-hf", help="easylemur checkpoint -> HF directory",
                       description="Export an easylemur checkpoint as a Hugging Face Llama directory: sharded "
                                   "safetensors + index, config.json, generation_config.json, tokenizer files; "
                                   "a chat template (and the <|im_end|> stop) only for a chat-tuned model.")
    b.add_argument("--checkpoint", required=True, metavar="CKPT", help="a workdir (newest step), checkpoints dir or step dir")
    b.add_argument("--step", type=int, default=None, help="step to export (default: the newest)")
    b.add_argument("--out", required=True, metavar="DIR", help="output HF directory")
    b.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"],
                   help="tensor dtype of the export (default bfloat16; float16 is refused if a value overflows it)")
    b.add_argument("--max-shard-size", default="5GB", metavar="SIZE",
                   help="largest shard file, e.g. 5GB (default), 500MB, 2GiB or bytes")
    b.add_argument("--force", action="store_true",
                   help="replace the model in a non-empty --out (its weight, config and tokenizer files are "
                        "removed and listed; other files are kept)")
    tmpl = b.add_mutually_exclusive_group()
    tmpl.add_argument("--chat-template", nargs="?", const="auto", choices=["auto", "chatml", "model"], default=None,
                      help="write a chat template whatever the checkpoint's chat_format says: chatml (ChatML's), "
                           "model (the tokenizer's own); auto or bare: the tokenizer's own when it has one, else ChatML's")
    tmpl.add_argument("--no-chat-template", action="store_const", const="none", dest="chat_template",
                      help="write no chat template (and no <|im_end|> stop the source did not declare)")
    for p in (ap, a, b):
        add_debug_flag(p)
    return ap


def hub_model_dir(name: str, revision: str | None = None) -> str:
    """`--hf`: a directory here as it is; a Hub model name (`org/name`, not a local-looking path)
    is downloaded with huggingface_hub into its cache (only what a conversion reads) and its
    snapshot directory returned. Unreachable, missing or gated: one line saying what to do."""
    from easylemur.data.files import looks_like_hub_name

    if Path(name).expanduser().is_dir() or not looks_like_hub_name(name):
        return name  # from_hf names a missing directory
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import GatedRepoError, LocalEntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError

    print(f"convert: --hf {name}: not a directory here; fetching it from the Hugging Face Hub (or its cache)",
          file=sys.stderr, flush=True)
    try:
        return snapshot_download(name, revision=revision, allow_patterns=HUB_FILES)
    except GatedRepoError:
        raise ConvertError(f"--hf {name}: a gated model; accept its license on the Hub and log in "
                           "(`hf auth login` or HF_TOKEN)") from None
    except RevisionNotFoundError:
        raise ConvertError(f"--hf {name}: no revision {revision!r} on the Hub") from None
    except RepositoryNotFoundError:
        raise ConvertError(f"--hf {name}: not a directory here, and no such model on the Hub (or it is private: "
                           "log in with `hf auth login`)") from None
    except LocalEntryNotFoundError as e:
        raise ConvertError(f"--hf {name}: not a directory here, and the Hub cannot be reached nor has the cache a copy "
                           f"({' '.join(str(e).split())[:160]}); download it where there is a network (hf download "
                           f"{name} --local-dir DIR) and pass --hf DIR") from None
    except OSError as e:  # a network error of any kind
        raise ConvertError(f"--hf {name}: not a directory here, and the Hub cannot be reached "
                           f"({' '.join(str(e).split())[:160]}); download it where there is a network (hf download "
                           f"{name} --local-dir DIR) and pass --hf DIR") from None


# what from_hf reads of a Hub model: weights as safetensors, configs, tokenizer and chat templates
HUB_FILES = ["*.json", "*.safetensors", "tokenizer.model", "*.jinja", "additional_chat_templates/*"]


def _main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.cmd == "from-hf":
        step_dir = from_hf(hub_model_dir(args.hf, args.revision), args.out, param_dtype=args.param_dtype,
                           tokenizer=args.tokenizer, add_chatml_tokens=args.add_chatml_tokens, overwrite=args.force)
        print(json.dumps({"checkpoint": str(step_dir)}))
    else:
        out = to_hf(args.checkpoint, args.out, step=args.step, dtype=args.dtype,
                    max_shard_size=args.max_shard_size, overwrite=args.force, chat_template=args.chat_template)
        print(json.dumps({"hf_dir": str(out)}))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The CLI: one line `error: ...` on stderr and exit 2 for bad input (`InputError`), 1 for a
    conversion that failed; the traceback only with --debug (`errors.run_cli`)."""
    return run_cli(_main, argv)
