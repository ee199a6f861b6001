"""Bad records and data errors (docs/design.md, "Bad records"): the kinds a record can be bad
in, the `BadRecord` value a reader or `Tokenize` gives instead of raising, how many of them
are shown, and `DataError`, the one error class of the data package.

A bad record is a value, not an exception, so that it travels down the pipeline and is
counted once, when its row is consumed (`DataIterator`); only data.strict=True turns it into
a `DataError` at once.
"""

from __future__ import annotations

from dataclasses import dataclass

from easylemur.errors import InputError

# kinds of bad records, as counted and reported
MALFORMED_JSON = "malformed_json"
MISSING_FIELD = "missing_field"
NOT_A_STRING = "not_a_string"
INVALID_UTF8 = "invalid_utf8"
UNKNOWN_ROLE = "unknown_role"
EMPTY = "empty"
NO_TRAINED_TOKENS = "no_trained_tokens"  # chat: nothing left to train on after truncation
BAD_KINDS = (MALFORMED_JSON, MISSING_FIELD, NOT_A_STRING, INVALID_UTF8, UNKNOWN_ROLE, EMPTY, NO_TRAINED_TOKENS)

SHOW_FIRST_BAD = 5  # per source: file:line printed to stderr (and listed by `data stats`) for the first few


class DataError(InputError):
    """A data problem the run cannot continue past; the message names source, file and line
    (or the data setting, such as data.shards, that does not fit)."""


@dataclass(frozen=True)
class BadRecord:
    kind: str  # one of BAD_KINDS
    where: str  # "file:line"
    detail: str = ""

    def describe(self) -> str:
        return f"{self.where}: {self.kind}" + (f" ({self.detail})" if self.detail else "")
