"""sentencepiece tokenizer wrapper with the ChatML special tokens, and vocabulary extension
(its CLI: `tokenizer/cli.py`).

The ChatML markers `<|im_start|>` and `<|im_end|>` are USER_DEFINED pieces of the sentencepiece
model, not CONTROL pieces: sentencepiece then recognises them in raw text, exactly as Hugging
Face's tokenizer recognises its added tokens, so `Tokenizer.encode(rendered_chat)` and
`AutoTokenizer.from_pretrained(dir)(rendered_chat)` give the same ids. The cost is that a literal
"<|im_end|>" in user content becomes the special token; HF's chat template does the same.

`Tokenizer.encode` follows HF where sentencepiece and HF differ, since HF/vLLM/lm-eval serve and
score the exported model (docs/design.md, "Literal special-token text"):
- the text of a CONTROL or UNKNOWN piece ("<s>", "</s>", "<pad>", "<unk>") is matched whole as
  its id, as transformers matches its special tokens; sentencepiece alone would spell it out;
- for dummy-prefix models (Llama-2's), "▁" is prepended only at the very start of the input and
  not before a leading space or matched token (HF's Metaspace, prepend_scheme "first").
tests/test_tokenizer.py compares the two over many random strings, for both kinds of model.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import sentencepiece as spm

from easylemur.chat.chatml import CHAT_TEMPLATE, CHATML_TOKENS, IM_END, IM_START
from easylemur.errors import InputError
from easylemur.tokenizer.files import TokenizerError, read_tokenizer_config

SPM_FILE = "tokenizer.model"  # an HF directory's sentencepiece model
TWIN_FILE = "tokenizer.json"  # transformers' fast tokenizer beside it: what transformers encodes with
DEFAULT_TOKENIZER_PATH = str(Path(__file__).resolve().parents[2] / "tokenizer" / "easylemur_bpe.model")


def sentencepiece_has_numpy_output() -> bool:
    """Whether this sentencepiece can return ids as a numpy buffer, `encode(text,
    return_type="numpy")` (sentencepiece >= 0.2.1; older ones return lists only).

    Written against sentencepiece 0.2.3. sentencepiece has no public flag for it, so this reads
    its private dispatch table `sentencepiece._ENCODE_DISPATCH[False]["numpy"]`: the one use of
    a sentencepiece internal. Without it `encode_ids_array` builds the array from the list of
    ids (same ids, a Python int per token on the way); tests/test_tokenizer.py fails loudly
    when the table is gone."""
    return "numpy" in getattr(spm, "_ENCODE_DISPATCH", {}).get(False, {})


_NUMPY_OUT = sentencepiece_has_numpy_output()


def encode_ids_array(sp: spm.SentencePieceProcessor, text: str, numpy_output: bool = _NUMPY_OUT) -> np.ndarray:
    """sp's ids of `text` as an int32 array: straight from sentencepiece's buffer where it has
    one (`numpy_output`), else from the list of ids."""
    if numpy_output:
        return sp.encode(text, return_type="numpy")
    return np.asarray(sp.encode(text), np.int32)


def check_text(text: str, what: str) -> str:
    """`text` itself when it is text the tokenizer can take; an InputError naming `what` and
    the first bad character otherwise. A lone surrogate is not text: Python makes undecodable
    bytes (argv, stdin, files opened with errors="surrogateescape") into U+DC80..U+DCFF, and
    sentencepiece fails on any surrogate with an opaque cast error."""
    if not isinstance(text, str):
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        code = ord(text[e.start])
        bad = (f"the undecodable byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF
               else f"a lone surrogate U+{code:04X}")
        raise InputError(f"{what}: not UTF-8 text ({bad} at character {e.start}); give UTF-8 text") from None
    return text


def tokenizer_file(path: str | os.PathLike) -> Path:
    """The sentencepiece model a path names: the file itself, or a directory's `tokenizer.model`
    (an HF directory, an export). The one place that knows where a directory keeps it; the
    result may not exist (callers say what they expected)."""
    path = Path(path)
    return path / SPM_FILE if path.is_dir() else path


class Tokenizer:
    """A sentencepiece model plus the ids the pipeline and generation need."""

    kind = "spm"  # hf.HFTokenizer: "hf"

    def __init__(self, model_path: str, model_proto: bytes | None = None, config: dict | None = None):
        self.model_path = str(model_path)
        if model_proto is None:
            with open(self.model_path, "rb") as f:
                model_proto = f.read()
        self._proto = model_proto
        # An HF directory's tokenizer.model: the configuration beside it, as transformers reads it
        # (special tokens, chat template, `legacy`); a .model file of any other name has none.
        if config is None:
            here = Path(self.model_path)
            config = read_tokenizer_config(here.parent) if here.name == SPM_FILE else {}
        self.config = config
        # legacy: true (transformers' Metaspace prepend_scheme "always"): text after a matched token
        # gets the dummy prefix too; the default (false) gives it only at the start of the input
        self.legacy = config.get("legacy") is True
        self.sp = spm.SentencePieceProcessor(model_proto=model_proto)
        # Models with a dummy prefix (Llama-2's) follow HF's rule, not sentencepiece's (see
        # `encode`): a copy of the model with the flag off encodes everything but the start.
        from sentencepiece import sentencepiece_model_pb2 as pb

        m = pb.ModelProto()
        m.ParseFromString(model_proto)
        self.add_dummy_prefix = bool(m.normalizer_spec.add_dummy_prefix)
        # USER_DEFINED pieces (the ChatML markers, ...) are matched in raw text by sentencepiece
        # and, as added tokens, by HF
        kinds = pb.ModelProto.SentencePiece
        self._user_defined = tuple(p.piece for p in m.pieces if p.type == kinds.USER_DEFINED)
        # CONTROL and UNKNOWN pieces (<s>, </s>, <pad>, <unk>): sentencepiece spells their text out,
        # transformers (an added token each) matches it whole; encode does as transformers
        self._literal = tuple(p.piece for p in m.pieces if p.type in (kinds.CONTROL, kinds.UNKNOWN) and p.piece)
        self._matched = {p.piece: i for i, p in enumerate(m.pieces)
                         if p.piece and p.type in (kinds.CONTROL, kinds.UNKNOWN, kinds.USER_DEFINED)}
        # leftmost-longest, as transformers' added-token matcher: the alternation tries longer pieces first
        self._split = re.compile("(" + "|".join(re.escape(t) for t in sorted(self._matched, key=len, reverse=True))
                                 + ")") if self._matched else None
        if self.add_dummy_prefix:
            m.normalizer_spec.add_dummy_prefix = False
            self._sp_cont = spm.SentencePieceProcessor(model_proto=m.SerializeToString())
        else:
            self._sp_cont = self.sp
        self.vocab_size: int = self.sp.get_piece_size()
        self.bos_id: int = self.sp.bos_id()
        self.eos_id: int = self.sp.eos_id()
        unk = self.sp.unk_id()
        # No pad piece (Llama-2): padded positions are masked everywhere, so any id will do; unk
        # never occurs in byte-fallback encodings, which keeps padding easy to spot.
        self.pad_id: int = self.sp.pad_id() if self.sp.pad_id() >= 0 else unk
        ids = [self.sp.piece_to_id(t) for t in CHATML_TOKENS]
        ok = [i != unk and self.sp.id_to_piece(i) == t for i, t in zip(ids, CHATML_TOKENS)]
        self.im_start_id: int | None = ids[0] if ok[0] else None
        self.im_end_id: int | None = ids[1] if ok[1] else None

    @classmethod
    def load(cls, path: str | os.PathLike | None = None) -> "Tokenizer":
        """Loads a sentencepiece `.model` file, or a directory holding `tokenizer.model`
        (HF export, easylemur checkpoint); None = the model shipped in tokenizer/."""
        path = str(tokenizer_file(DEFAULT_TOKENIZER_PATH if path is None else path))
        if not os.path.isfile(path):
            raise TokenizerError(f"tokenizer model {path} does not exist")
        return cls(path)

    @property
    def sha256(self) -> str:
        """The sha256 of the model file: a token store records it, and a run reading that
        store must have the same (data/store.py)."""
        return hashlib.sha256(self._proto).hexdigest()

    # pickling (grain worker processes): ship the model bytes, not the C++ object
    def __getstate__(self):
        return {"model_path": self.model_path, "proto": self._proto, "config": self.config}

    def __setstate__(self, state):
        self.__init__(state["model_path"], state["proto"], state.get("config"))

    @property
    def transformers_encoder(self):
        """What transformers and vLLM encode this model's text with: the `twin` when there is one,
        else this tokenizer (its `encode` follows transformers' rules, legacy included). Chat
        prompts and lm-eval's requests encode with it."""
        return self.twin or self

    @functools.cached_property
    def twin(self):
        """The `tokenizer.json` beside an HF directory's tokenizer.model (`hf.HFTokenizer`), None
        without one. transformers and vLLM encode with it, not with the sentencepiece model (a
        Llama-2-chat or Mistral repo ships both, and its tokenizer.json may be "legacy", prefixing
        "▁" after special tokens), so chat prompts and lm-eval's ids are its ids
        (`transformers_encoder`); training keeps the sentencepiece model."""
        here = Path(self.model_path)
        twin = here.parent / TWIN_FILE
        if here.name != SPM_FILE or not twin.is_file():
            return None
        from easylemur.tokenizer.hf import HFTokenizer

        # a configuration without BOS/EOS/UNK: the model's own pieces (LlamaTokenizer's defaults)
        pieces = {k: self.id_to_piece(i) for k, i in (("bos_token", self.bos_id), ("eos_token", self.eos_id),
                                                       ("unk_token", self.sp.unk_id())) if i is not None and i >= 0}
        return HFTokenizer(twin, config={**pieces, **self.config})

    @property
    def has_chatml(self) -> bool:
        return self.im_start_id is not None and self.im_end_id is not None

    def require_chatml(self) -> None:
        if not self.has_chatml:
            raise TokenizerError(
                f"tokenizer {self.model_path} has no {IM_START}/{IM_END} pieces; add them with "
                f"`python -m easylemur.tokenizer extend --model {self.model_path} --out NEW.model`"
            )

    def _prefixed(self, text: str) -> bool:
        """Whether HF's Metaspace (prepend_scheme "first") prepends "▁" to `text` as a whole
        input: only a dummy-prefix model, and only when the text starts neither with a space
        (it becomes the "▁") nor "▁", nor with an added token (then the first piece of text is
        not at offset 0). Empty text gets nothing."""
        return bool(text) and text[0] not in " \u2581" and not text.startswith(self._user_defined)

    def has_literal_specials(self, text: str) -> bool:
        """Whether `encode` must cut `text` at matched pieces itself: it holds the text of a
        CONTROL/UNKNOWN piece ("<s>", "</s>", "<pad>", "<unk>"), which `encode` matches as its id
        where sentencepiece alone would spell it out, or, for a `legacy` tokenizer, of any matched
        piece (the text after it gets a dummy prefix, which sentencepiece would not give it)."""
        return any(t in text for t in self._literal) or (self.legacy and any(t in text for t in self._user_defined))

    def _sp_for(self, text: str, continuation: bool) -> spm.SentencePieceProcessor:
        """The processor for plain text (no CONTROL/UNKNOWN piece's text in it): the dummy-prefix
        one only where HF's Metaspace prepends "▁" (`_prefixed`)."""
        return self.sp if not continuation and self._sp_cont is not self.sp and self._prefixed(text) else self._sp_cont

    def _encode_split(self, text: str, continuation: bool) -> list[int]:
        """`encode` of text holding a CONTROL/UNKNOWN piece's text, as transformers does it: the
        matched pieces (those and the USER_DEFINED ones) cut the text, each matched piece is its
        id, and only text at offset 0 of the input gets a dummy prefix (`legacy`: every part)."""
        ids: list[int] = []
        for k, part in enumerate(self._split.split(text)):
            if k % 2:
                ids.append(self._matched[part])
            elif part:  # legacy: every later part gets the dummy prefix rule, else only the first
                ids += self._sp_for(part, continuation if k == 0 else not self.legacy).encode(part)
        return ids

    def encode(self, text: str, *, continuation: bool = False) -> list[int]:
        """Token ids of `text`, without BOS/EOS, exactly as the HF tokenizer `save_hf` writes
        encodes it (`AutoTokenizer(text, add_special_tokens=False)`).

        Literal "<s>", "</s>", "<unk>", "<pad>" (the text of any CONTROL/UNKNOWN piece) become
        their ids, as HF (and vLLM, lm-eval, EasyLM's tokenizer) match them; sentencepiece alone
        would spell them out. Training, easylemur's eval and the export follow this one rule
        (docs/design.md, "Literal special-token text", says why not sentencepiece's).

        For a dummy-prefix model (Llama-2's) that is HF's rule, not sentencepiece's: "▁" is
        prepended only at the very start of the input, and not when the text starts with a
        space (" hi" is "▁hi", where sentencepiece gives "▁▁hi") or with a matched token such as
        <|im_start|> (sentencepiece puts a lone "▁" before it). continuation=True: `text`
        follows other text or a special token (ChatML rendering), so no "▁" is prepended at all.
        The shipped model has no dummy prefix: both rules are plain sentencepiece."""
        if self.has_literal_specials(text):
            return self._encode_split(text, continuation)
        return self._sp_for(text, continuation).encode(text)

    def encode_array(self, text: str, *, continuation: bool = False) -> np.ndarray:
        """`encode` as an int32 numpy array, straight from sentencepiece's buffer (no Python
        ints) where it has one (`encode_ids_array`): what the data pipeline uses."""
        if self.has_literal_specials(text):
            return np.asarray(self._encode_split(text, continuation), np.int32)
        return encode_ids_array(self._sp_for(text, continuation), text)

    def encode_batch(self, texts: Sequence[str], num_threads: int = 1) -> list[list[int]]:
        """`[encode(t) for t in texts]`, in one call (sentencepiece's batch API, `num_threads`)."""
        texts = list(texts)
        split = [i for i, t in enumerate(texts) if self.has_literal_specials(t)]
        if split:  # rare: those one by one, the rest in one batch
            out: list = [None] * len(texts)
            for i in split:
                out[i] = self._encode_split(texts[i], False)
            plain = [i for i in range(len(texts)) if out[i] is None]
            for i, ids in zip(plain, self.encode_batch([texts[i] for i in plain], num_threads)):
                out[i] = ids
            return out
        if self._sp_cont is self.sp:
            return self.sp.encode(texts, num_threads=num_threads)
        # dummy prefix: the texts HF prefixes with "▁" get a leading space (identical to
        # sentencepiece's dummy prefix), the others none
        return self._sp_cont.encode([" " + t if self._prefixed(t) else t for t in texts], num_threads=num_threads)

    def decode(self, ids: Iterable[int]) -> str:
        return self.sp.decode([int(i) for i in ids])

    def id_to_piece(self, i: int) -> str:
        return self.sp.id_to_piece(int(i))

    def piece_to_id(self, piece: str) -> int:
        return self.sp.piece_to_id(piece)

    def save_hf(self, out_dir: str | os.PathLike, chat_template: str | None = None, *, write_chat_template: bool = True,
                model_max_length: int | None = None) -> None:
        """Writes tokenizer.model, tokenizer_config.json and special_tokens_map.json so that
        `transformers.AutoTokenizer.from_pretrained(out_dir)` encodes exactly like `encode`
        (no BOS added by the template-free call is the caller's choice: add_bos_token=True
        mirrors how easylemur feeds documents; the chat template writes BOS itself).

        `chat_template` None: ChatML's when the tokenizer has the markers (to-hf decides per the
        checkpoint's chat_format and passes its choice); write_chat_template=False: none at all.
        `model_max_length`: the model's context (to-hf: max_position_embeddings), else 2^30.
        With a `twin` (an HF directory's tokenizer.json beside the model), that tokenizer.json and
        its configuration are written instead, as the directory held them."""
        if not write_chat_template:
            chat_template = None
        elif chat_template is None:
            chat_template = CHAT_TEMPLATE if self.has_chatml else None
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.model_path, out / SPM_FILE) if os.path.abspath(
            self.model_path
        ) != os.path.abspath(out / SPM_FILE) else None
        if self.twin is not None:  # the source's tokenizer.json and configuration, as they came (with the template)
            self.twin.save_hf(out, chat_template, write_chat_template=chat_template is not None,
                              model_max_length=model_max_length)
            return
        piece = self.id_to_piece
        added = {}
        for i in sorted({self.sp.unk_id(), self.bos_id, self.eos_id, self.pad_id}
                        | ({self.im_start_id, self.im_end_id} if self.has_chatml else set())):
            if i is None or i < 0:
                continue
            added[str(i)] = {"content": piece(i), "lstrip": False, "rstrip": False,
                             "normalized": False, "single_word": False, "special": True}
        cfg = {
            "tokenizer_class": "LlamaTokenizer",
            "model_max_length": int(model_max_length) if model_max_length else 1 << 30,
            "bos_token": piece(self.bos_id),
            "eos_token": piece(self.eos_id),
            "unk_token": piece(self.sp.unk_id()),
            "pad_token": piece(self.pad_id),
            "add_bos_token": True,
            "add_eos_token": False,
            # the shipped model has no dummy prefix; a Llama-2 model has one: follow the model
            "add_prefix_space": self.add_dummy_prefix,
            "legacy": False,
            "clean_up_tokenization_spaces": False,
            "spaces_between_special_tokens": False,
            "added_tokens_decoder": added,
        }
        if chat_template:
            cfg["chat_template"] = chat_template
        (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")
        special = {k: cfg[k] for k in ("bos_token", "eos_token", "unk_token", "pad_token")}
        if self.has_chatml:
            special["additional_special_tokens"] = list(CHATML_TOKENS)
        (out / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")


def extend_model(model_path: str, out_path: str, tokens: Sequence[str] = CHATML_TOKENS) -> dict:
    """Appends `tokens` (those missing) as USER_DEFINED pieces; returns a report dict.

    New ids go after the existing vocabulary, so the embedding and LM head grow by the number
    of added pieces and every existing id keeps its meaning (`easylemur.vocab.extend_vocab`
    grows them: config train.extend_vocab, or `convert from-hf --add-chatml-tokens`)."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    m = pb.ModelProto()
    with open(model_path, "rb") as f:
        m.ParseFromString(f.read())
    existing = {p.piece for p in m.pieces}
    old_size = len(m.pieces)
    added = {}
    for t in tokens:
        if t in existing:
            continue
        p = m.pieces.add()
        p.piece = t
        p.score = 0.0
        p.type = pb.ModelProto.SentencePiece.USER_DEFINED
        added[t] = len(m.pieces) - 1
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    with open(out_path, "wb") as f:
        f.write(m.SerializeToString())
    tok = Tokenizer(out_path)  # proves the result loads
    return {"model": str(out_path), "old_vocab_size": old_size, "vocab_size": tok.vocab_size,
            "added": added, "im_start_id": tok.im_start_id, "im_end_id": tok.im_end_id}
