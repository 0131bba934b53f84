"""``SubjectTransform``: the server's subject mapping, applied to one subject or an Arrow column.

Scalar semantics are a port of ``subjectTransform.Match`` / ``TransformTokenizedSubject``;
the column methods delegate to ``jsspark.subjects.vectorized`` and give the same result row
for row. Token functions work on UTF-8 *bytes* like Go; a cut through a multi-byte character
comes back as the server's JSON API shows the bytes it stores (``subject_text``: U+FFFD for
each byte that is not UTF-8), so every result is text a lake can store and read back.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from jsspark.errors import SubjectTransformError
from jsspark.subjects.hashing import fnv1a_32
from jsspark.subjects.mapping import (
    INVALID_SUBJECT,
    NO_MATCHING_TRANSFORM,
    DestToken,
    Fn,
    compile_mapping,
    validate_mapping,
)
from jsspark.subjects.tokens import (
    FWC,
    TSEP,
    is_valid_literal_subject,
    is_valid_subject,
    subject_is_subset_match,
    subject_text,
)

if TYPE_CHECKING:
    import pyarrow as pa

_SYSRAND = random.Random()


def _b(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def _s(data: bytes) -> str:
    return subject_text(data)


def partition_of(key: bytes, count: int) -> str:
    """``getHashPartition``: FNV-1a of ``key`` modulo ``uint32(count)``; a count of 0 gives ``"0"``."""
    if count == 0:
        return "0"
    return str(fnv1a_32(key) % (count & 0xFFFFFFFF))


def random_partition(count: int) -> str:
    """``getRandomPartition``: ``rand.Int31() % count`` (Go's remainder keeps the dividend's sign)."""
    if count == 0:
        return "0"
    return str(_SYSRAND.randrange(2**31) % abs(count))


def split_from_left(token: str, pos: int) -> str:
    data = _b(token)
    return _s(data[:pos] + b"." + data[pos:]) if 0 < pos < len(data) else token


def split_from_right(token: str, pos: int) -> str:
    data = _b(token)
    cut = len(data) - pos
    return _s(data[:cut] + b"." + data[cut:]) if 0 < pos < len(data) else token


def slice_from_left(token: str, size: int) -> str:
    """Chunks of ``size`` bytes from the left; the remainder is the last chunk."""
    data = _b(token)
    if not 0 < size < len(data):
        return token
    return _s(b".".join(data[i:i + size] for i in range(0, len(data), size)))


def slice_from_right(token: str, size: int) -> str:
    """Chunks of ``size`` bytes from the right; the remainder is the first chunk."""
    data = _b(token)
    if not 0 < size < len(data):
        return token
    rem = len(data) % size
    chunks = ([data[:rem]] if rem else []) + [data[i:i + size] for i in range(rem, len(data), size)]
    return _s(b".".join(chunks))


def split_on(token: str, delimiter: str) -> str:
    """The server's split loop: non-empty parts joined by ``.``, with its leading-delimiter quirk
    (two or more leading delimiters leave a leading ``.``). An empty delimiter splits characters."""
    parts = list(token) if delimiter == "" else token.split(delimiter)
    out: list[str] = []
    for j, part in enumerate(parts):
        out.append(part)
        if j < len(parts) - 1 and parts[j + 1] and not (j == 0 and part == ""):
            out.append(TSEP)
    return "".join(out)


def left(token: str, size: int) -> str:
    data = _b(token)
    return _s(data[:size]) if 0 < size < len(data) else token


def right(token: str, size: int) -> str:
    data = _b(token)
    return _s(data[len(data) - size:]) if 0 < size < len(data) else token


TOKEN_FUNCTIONS = {
    Fn.SPLIT_FROM_LEFT: split_from_left,
    Fn.SPLIT_FROM_RIGHT: split_from_right,
    Fn.SLICE_FROM_LEFT: slice_from_left,
    Fn.SLICE_FROM_RIGHT: slice_from_right,
    Fn.LEFT: left,
    Fn.RIGHT: right,
}


def apply_token_function(dt: DestToken, token: str) -> str:
    """One single-token function (``split``, ``left``, ...) of ``dt`` applied to ``token``."""
    if dt.fn is Fn.SPLIT:
        return split_on(token, dt.str_arg)
    return TOKEN_FUNCTIONS[dt.fn](token, dt.int_arg)


class SubjectTransform:
    """A validated ``src`` -> ``dest`` subject mapping.

    The constructor raises ``SubjectTransformError`` with the server's text. ``validate=True``
    (the default) adds ``ValidateMapping``, as stream, source and mirror transforms get;
    ``validate=False`` is the plain constructor republish uses. ``strict`` is the import rule:
    only wildcards, and every ``*`` used. An empty ``dest`` means "no transform": matching
    subjects pass unchanged (a source transform used as a filter).
    """

    def __init__(self, src: str, dest: str, *, strict: bool = False, validate: bool = True) -> None:
        if validate:
            validate_mapping(src, dest)
        self.src = src
        self.dest = dest
        self.strict = strict
        self.filter = src or FWC
        self.identity = self.filter == FWC and dest in ("", FWC)
        if dest:
            self.src_tokens, self.dest_tokens = compile_mapping(src, dest, strict)
        elif is_valid_subject(self.filter):
            self.src_tokens, self.dest_tokens = self.filter.split(TSEP), []
        else:  # every server context checks the source on its own (10145, 10151, 10155)
            raise SubjectTransformError(INVALID_SUBJECT)

    def __repr__(self) -> str:
        return f"SubjectTransform({self.src!r}, {self.dest!r})"

    def matches(self, subject: str) -> bool:
        """Would ``apply`` transform ``subject`` (a valid literal matching ``src``)?"""
        if self.identity:
            return True
        if not is_valid_literal_subject(subject):
            return False
        return self.filter == FWC or subject_is_subset_match(subject, self.filter)

    def apply(self, subject: str) -> str:
        """The server's ``Match``: the mapped subject, or ``SubjectTransformError`` when
        ``subject`` is not a valid literal (``invalid subject``) or does not match ``src``."""
        if self.identity:
            return subject
        if not is_valid_literal_subject(subject):
            raise SubjectTransformError(INVALID_SUBJECT)
        if self.filter != FWC and not subject_is_subset_match(subject, self.filter):
            raise SubjectTransformError(NO_MATCHING_TRANSFORM)
        return self.transform(subject)

    def apply_or_keep(self, subject: str) -> str:
        """Stream ingest: mapped when it matches, otherwise unchanged."""
        return self.transform(subject) if self.matches(subject) and not self.identity else subject

    def transform(self, subject: str) -> str:
        """``TransformSubject``: map without checking the match. A missing wildcard token writes
        nothing (``foo.*`` -> ``one.two.$1`` on ``foo`` gives ``one.two.``)."""
        if not self.dest_tokens:
            return subject
        tokens = subject.split(TSEP)
        out: list[str] = []
        last = len(self.dest_tokens) - 1
        for i, dt in enumerate(self.dest_tokens):
            if dt.fn is Fn.LITERAL:
                if dt.text == FWC:
                    break
                out.append(dt.text)
            elif dt.fn is Fn.WILDCARD:
                if dt.positions and dt.positions[0] < len(tokens):
                    out.append(tokens[dt.positions[0]])
            elif dt.fn is Fn.PARTITION:
                key = "".join(tokens[p] for p in dt.positions) if dt.positions else subject
                out.append(partition_of(_b(key), dt.int_arg))
            elif dt.fn is Fn.RANDOM:
                out.append(random_partition(dt.int_arg))
            else:
                pos = dt.positions[0]
                if pos >= len(tokens):
                    raise SubjectTransformError(f"subject {subject!r} has no token {pos + 1} for {dt.text}")
                out.append(apply_token_function(dt, tokens[pos]))
            if i < last:
                out.append(TSEP)
        if self.dest_tokens[-1].text == FWC:
            out.append(TSEP.join(tokens[len(self.src_tokens) - 1:]))
        return "".join(out)

    def matches_array(self, subjects: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
        """``matches`` for every row (null -> false), vectorised."""
        from jsspark.subjects.vectorized import transform_matches_array

        return transform_matches_array(self, subjects)

    def apply_array(
        self, subjects: pa.Array | pa.ChunkedArray, keep_unmatched: bool = True
    ) -> pa.Array | pa.ChunkedArray:
        """``apply_or_keep`` (or null for non-matching rows) for every row, vectorised."""
        from jsspark.subjects.vectorized import transform_array

        return transform_array(self, subjects, keep_unmatched)
