"""Hugging Face `tokenizers` tokenizer (`tokenizer.json`: Llama-3, Qwen2.5, DeepSeek-Coder's
byte-level BPE) with the public surface of `spm.Tokenizer`; `tokenizer.load_tokenizer` picks
the kind a path holds.

Ids are those of `transformers.AutoTokenizer.from_pretrained(dir)` (fast) with
`add_special_tokens=False`: `tokenizer.json` runs as it is (normalizer, pre-tokenizer regexes,
added tokens matched in raw text, special ones included: "<|endoftext|>" in a document is the
token, as for sentencepiece's "</s>", docs/design.md "Literal special-token text"; special ones
read as text only where tokenizer_config.json says `split_special_tokens`, as AutoTokenizer
does), nothing added around the text. BOS,
EOS and pad come from `tokenizer_config.json` beside it, or `special_tokens_map.json` as
transformers reads it (`files.read_tokenizer_config`; a string or an AddedToken dict each).
`bos_id` is None when the tokenizer has no BOS (`bos_token` null, as Qwen2.5, or
`add_bos_token: false`): documents are then framed as tokens + EOS (data/tokenize.py) and
conversations start at their first `<|im_start|>` (chat/chatml.py). `decode` is lossless: no
`clean_up_tokenization_spaces`, special tokens kept.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
from tokenizers import Tokenizer as _HFTokenizer

from easylemur.chat.chatml import CHATML_TOKENS, IM_END, IM_START, chatml_template
from easylemur.chat.files import token_text
from easylemur.tokenizer.files import TOKENIZER_CONFIG, TokenizerError, read_tokenizer_config

TOKENIZER_JSON = "tokenizer.json"


def _strip_prefix_space(node: Any) -> tuple[Any, bool]:
    """A copy of a tokenizer.json normalizer/pre-tokenizer with every "prefix space at the start
    of the input" turned off (ByteLevel add_prefix_space, Metaspace prepend_scheme, a Prepend
    normalizer), and whether there was one: the `continuation=True` encoder."""
    if isinstance(node, list):
        out, found = [], False
        for n in node:
            n2, f = _strip_prefix_space(n)
            found |= f
            if n2 is not None:
                out.append(n2)
        return out, found
    if not isinstance(node, dict):
        return node, False
    t = node.get("type")
    if t == "Prepend":
        return None, True
    node = dict(node)
    found = False
    if t == "ByteLevel" and node.get("add_prefix_space"):
        node["add_prefix_space"], found = False, True
    if t == "Metaspace" and node.get("prepend_scheme", "always") != "never" and node.get("add_prefix_space", True):
        node["prepend_scheme"], found = "never", True
        if "add_prefix_space" in node:
            node["add_prefix_space"] = False
    for key in ("normalizers", "pretokenizers"):
        if key in node:
            node[key], f = _strip_prefix_space(node[key])
            found |= f
    return node, found


class HFTokenizer:
    """A `tokenizer.json` plus the ids the pipeline and generation need (see the module doc)."""

    kind = "hf"

    def __init__(self, model_path: str | os.PathLike, tokenizer_json: bytes | None = None,
                 config: dict | None = None):
        path = Path(model_path)
        self.model_path = str(path)
        if tokenizer_json is None:
            tokenizer_json = path.read_bytes()
        if config is None:  # tokenizer_config.json and special_tokens_map.json beside it, as transformers reads them
            config = read_tokenizer_config(path.parent)
        self._json = tokenizer_json
        self.config = config
        try:
            spec = json.loads(tokenizer_json)
            self.tok = _HFTokenizer.from_str(tokenizer_json.decode("utf-8"))
        except Exception as e:  # a malformed file: tokenizers' own message
            raise TokenizerError(f"tokenizer {self.model_path} is not a loadable tokenizer.json: {e}") from None
        self.tok.no_truncation()
        self.tok.no_padding()
        # continuation=True: the same tokenizer without a prefix space at the start (byte-level
        # BPEs as Llama-3's and Qwen2.5's have none: then it is the tokenizer itself)
        cont = copy.deepcopy(spec)
        found = False
        for key in ("normalizer", "pre_tokenizer"):
            if cont.get(key) is not None:
                cont[key], f = _strip_prefix_space(cont[key])
                found |= f
        self._cont = _HFTokenizer.from_str(json.dumps(cont)) if found else self.tok
        # tokenizer_config.json's split_special_tokens (default false): AutoTokenizer then reads the
        # text of special added tokens as text, so encode must too (non-special ones stay matched)
        self.split_special_tokens = bool(config.get("split_special_tokens", False))
        for t in {id(self.tok): self.tok, id(self._cont): self._cont}.values():
            t.encode_special_tokens = self.split_special_tokens
        vocab = self.tok.get_vocab(with_added_tokens=True)
        self.vocab_size: int = max(vocab.values()) + 1

        def tid(name: str) -> int | None:
            text = token_text(config.get(name))
            if text is None:
                return None
            i = self.tok.token_to_id(text)
            if i is None:
                raise TokenizerError(f"tokenizer {self.model_path}: its configuration names {name} {text!r}, which is "
                                     f"not in {TOKENIZER_JSON}")
            return i

        bos = tid("bos_token")
        self.bos_id: int | None = bos if config.get("add_bos_token", True) is not False else None
        eos = tid("eos_token")
        if eos is None:
            raise TokenizerError(f"tokenizer {self.model_path}: no eos_token (in {TOKENIZER_CONFIG} or "
                                 "special_tokens_map.json beside it); documents end with EOS")
        self.eos_id: int = eos
        # padded positions are masked everywhere: any id will do
        pad = tid("pad_token")
        self.pad_id: int = pad if pad is not None else eos
        ids = []
        for t in CHATML_TOKENS:  # a marker counts only when raw text matches it whole
            i = self.tok.token_to_id(t)
            ids.append(i if i is not None and self.encode(t) == [i] else None)
        self.im_start_id: int | None = ids[0]
        self.im_end_id: int | None = ids[1]

    @classmethod
    def load(cls, path: str | os.PathLike) -> "HFTokenizer":
        """A `tokenizer.json` file, or a directory holding one (with tokenizer_config.json)."""
        p = Path(path)
        file = p / TOKENIZER_JSON if p.is_dir() else p
        if not file.is_file():
            raise TokenizerError(f"tokenizer file {file} does not exist")
        return cls(file)

    @property
    def sha256(self) -> str:
        """The sha256 of the tokenizer.json bytes (a token store records it, data/store.py)."""
        return hashlib.sha256(self._json).hexdigest()

    # pickling (grain worker processes): ship the file's bytes and the config, not the Rust object
    def __getstate__(self):
        return {"model_path": self.model_path, "json": self._json, "config": self.config}

    def __setstate__(self, state):
        self.__init__(state["model_path"], state["json"], state["config"])

    @property
    def transformers_encoder(self) -> "HFTokenizer":
        """What transformers encodes this model's text with: this tokenizer (spm.Tokenizer's may
        be the tokenizer.json beside it)."""
        return self

    @property
    def has_chatml(self) -> bool:
        return self.im_start_id is not None and self.im_end_id is not None

    def require_chatml(self) -> None:
        if not self.has_chatml:
            raise TokenizerError(f"tokenizer {self.model_path} has no {IM_START}/{IM_END} tokens; ChatML data needs them "
                                 "(add them as added tokens of its tokenizer.json)")

    def encode(self, text: str, *, continuation: bool = False) -> list[int]:
        """Token ids of `text`, without BOS/EOS: AutoTokenizer's with add_special_tokens=False.
        continuation=True: `text` follows other text, so no prefix space is added (a difference
        only for tokenizers that add one)."""
        # the batch API without offsets: ~20% faster than `encode`, and it releases the GIL, so
        # the pipeline's read threads (data.prefetch) tokenize in parallel
        return (self._cont if continuation else self.tok).encode_batch_fast([text], add_special_tokens=False)[0].ids

    def encode_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """`encode(text)` and each token's (start, end) character offsets in `text`: how
        chat/template.py maps a chat template's assistant spans to tokens, as transformers'
        return_assistant_tokens_mask does."""
        enc = self.tok.encode_batch([text], add_special_tokens=False)[0]  # the batch API releases the GIL
        return enc.ids, enc.offsets

    def encode_array(self, text: str, *, continuation: bool = False) -> np.ndarray:
        """`encode` as an int32 numpy array (what the data pipeline uses)."""
        return np.asarray(self.encode(text, continuation=continuation), np.int32)

    def encode_batch(self, texts: Sequence[str], num_threads: int = 1) -> list[list[int]]:
        """`[encode(t) for t in texts]` in one call (tokenizers' batch API: its own thread pool,
        TOKENIZERS_PARALLELISM, not `num_threads`)."""
        return [e.ids for e in self.tok.encode_batch_fast(list(texts), add_special_tokens=False)]

    def decode(self, ids: Iterable[int]) -> str:
        return self.tok.decode([int(i) for i in ids], skip_special_tokens=False)

    def id_to_piece(self, i: int) -> str:
        return self.tok.id_to_token(int(i))

    def piece_to_id(self, piece: str) -> int | None:
        """The id of a vocabulary entry (byte-level form, "Ġx"), None when there is none."""
        return self.tok.token_to_id(piece)

    def save_hf(self, out_dir: str | os.PathLike, chat_template: str | None = None, *, write_chat_template: bool = True,
                model_max_length: int | None = None) -> None:
        """Writes tokenizer.json (these bytes) and tokenizer_config.json (the one read, with
        `chat_template` when given; without one, the source's, else easylemur's ChatML template
        when the tokenizer has the markers; write_chat_template=False: none at all, the source's
        removed) for `AutoTokenizer.from_pretrained(out_dir)`. `model_max_length`, when given,
        replaces the source's (to-hf: the model's max_position_embeddings)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        target = out / TOKENIZER_JSON
        if not target.is_file() or target.read_bytes() != self._json:
            target.write_bytes(self._json)
        cfg = dict(self.config)
        cfg.setdefault("tokenizer_class", "PreTrainedTokenizerFast")
        cfg.setdefault("eos_token", self.id_to_piece(self.eos_id))
        if model_max_length:
            cfg["model_max_length"] = int(model_max_length)
        if not write_chat_template:
            cfg.pop("chat_template", None)
            chat_template = None
        elif chat_template is None and not cfg.get("chat_template"):
            chat_template = chatml_template(self)  # no BOS: the template writes none either (as render_chat)
        if chat_template:
            cfg["chat_template"] = chat_template
        (out / TOKENIZER_CONFIG).write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")


def extend_hf(path: str | os.PathLike, out_dir: str | os.PathLike, tokens: Sequence[str] = CHATML_TOKENS) -> dict:
    """Appends `tokens` (those raw text does not already match whole) as special added tokens of
    a tokenizer.json, writing tokenizer.json + tokenizer_config.json to `out_dir`; returns a
    report dict, as `spm.extend_model`. New ids go after the largest id, so every existing id
    keeps its meaning and `train.extend_vocab` grows the embedding and LM head to match."""
    from tokenizers import AddedToken

    tok = HFTokenizer.load(path)
    old_size = tok.vocab_size
    hf = _HFTokenizer.from_str(tok._json.decode("utf-8"))
    added = {}
    for t in dict.fromkeys(tokens):
        i = hf.token_to_id(t)
        if i is not None and hf.encode(t, add_special_tokens=False).ids == [i]:
            continue
        hf.add_special_tokens([AddedToken(t, special=True, normalized=False)])
        added[t] = hf.token_to_id(t)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    new = HFTokenizer(out / TOKENIZER_JSON, hf.to_str(pretty=True).encode("utf-8"), tok.config)
    new.save_hf(out, chat_template=tok.config.get("chat_template"))
    new = HFTokenizer.load(out)  # proves the result loads
    return {"model": str(out), "old_vocab_size": old_size, "vocab_size": new.vocab_size, "added": added,
            "im_start_id": new.im_start_id, "im_end_id": new.im_end_id}
