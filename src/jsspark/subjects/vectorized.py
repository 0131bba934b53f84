"""Subject filters and transforms over Arrow columns, with no per-row Python on the hot path.

Filters and transform sources compile to one anchored RE2 pattern each (``pyarrow.compute``
regex kernels); transforms then split matching subjects into token lists and rebuild them
with Arrow string kernels. Token functions work on bytes (``binary`` views), as Go does; a cut
through a multi-byte character comes back as the server's JSON API shows it (``subject_text``).
``partition`` hashes with a byte-position loop (``hashing.fnv1a_32_array``) and ``slice*`` loops
over chunk positions; only ``split`` on an empty delimiter runs the scalar function, once per
*distinct* token.
Every function here must agree row for row with its scalar twin (the tests check it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from jsspark.engine.arrays import has_empty, value_bytes
from jsspark.subjects.hashing import fnv1a_32_array
from jsspark.subjects.mapping import DestToken, Fn
from jsspark.subjects.tokens import (
    FWC,
    PWC,
    TSEP,
    check_sendable_subject,
    is_literal,
    is_valid_subject,
    subject_text,
)
from jsspark.subjects.transform import SubjectTransform, apply_token_function

ArrayLike = pa.Array | pa.ChunkedArray

_ANY = r"[^.]+"  # a non-empty token, as the sublist sees it
_ANY_TAIL = rf"{_ANY}(?:\.{_ANY})*"
_LIT = r"(?:[^.*>][^.]*|[*>][^.]+)"  # a token of a valid literal subject: not exactly `*` or `>`
_RE2_SPECIAL = frozenset("\\.+*?()|[]{}^$")


def _escape(token: str) -> str:
    return "".join("\\" + c if c in _RE2_SPECIAL else c for c in token)


_UNSENDABLE = r"^$|[ \t\r\n]"  # empty, or one of tokens.UNSENDABLE


def check_sendable_subjects(subjects: ArrayLike, who: str, column: str = "subject") -> None:
    """``check_sendable_subject`` over a column: the first bad one fails naming its row (``who``:
    the caller). A byte scan rules a column out first (no byte at or below a space, no empty value:
    a millisecond for a million subjects); only then a regex pass finds the row."""
    if all_sendable(subjects):
        return
    bad = pc.fill_null(_per_chunk(subjects, lambda c: pc.match_substring_regex(c, _UNSENDABLE)), False)
    row = pc.index(bad, True).as_py()
    check_sendable_subject(subjects[row].as_py(), f" ({who}: row {row} of column {column!r})")
    raise AssertionError("unreachable: the regex and check_sendable_subject disagree")


def all_sendable(subjects: ArrayLike) -> bool:
    """Every (non-null) subject one a client can publish to (``is_sendable_subject``): a byte scan
    first, the regex only over a column it cannot rule out."""
    chunks = subjects.chunks if isinstance(subjects, pa.ChunkedArray) else [subjects]
    if not any(_may_be_unsendable(c.dictionary if pa.types.is_dictionary(c.type) else c) for c in chunks):
        return True
    bad = pc.fill_null(_per_chunk(subjects, lambda c: pc.match_substring_regex(c, _UNSENDABLE)), False)
    return not pc.any(bad).as_py()


def _may_be_unsendable(values: pa.Array) -> bool:
    raw = value_bytes(values)
    return raw is None or bool((raw <= ord(" ")).any()) or has_empty(values)


def _per_chunk(values: ArrayLike, fn: Callable[[pa.Array], pa.Array], *, via_dictionary: bool = True) -> ArrayLike:
    """Apply ``fn`` to every chunk; dictionary chunks are computed on their distinct values."""
    if isinstance(values, pa.ChunkedArray):
        chunks = values.chunks or [pa.array([], values.type)]
        return pa.chunked_array([_per_chunk(c, fn, via_dictionary=via_dictionary) for c in chunks])
    if pa.types.is_dictionary(values.type):
        if via_dictionary:
            return pc.take(fn(values.dictionary), values.indices)
        values = values.cast(values.type.value_type)
    return fn(values)


def filter_pattern(filters: Sequence[str]) -> str | None:
    """One anchored RE2 alternation for wildcard filters (sublist semantics), None if empty."""
    alternatives = []
    for f in filters:
        parts = [_ANY if t == PWC else _ANY_TAIL if t == FWC else _escape(t) for t in f.split(TSEP)]
        alternatives.append(r"\.".join(parts))
    if not alternatives:
        return None
    return "^(?:" + "|".join(alternatives) + ")$"


def match_filter(subjects: ArrayLike, filters: str | Sequence[str]) -> ArrayLike:
    """True where a subject matches ANY filter (``subject_matches``); null and invalid filters -> false."""
    wanted = [filters] if isinstance(filters, str) else list(filters)
    valid = [f for f in dict.fromkeys(wanted) if is_valid_subject(f)]
    literals = [f for f in valid if is_literal(f)]
    pattern = filter_pattern([f for f in valid if not is_literal(f)])
    if FWC in valid:
        pattern = f"^{_ANY_TAIL}$"

    def chunk(arr: pa.Array) -> pa.Array:
        result = pa.nulls(len(arr), pa.bool_()).fill_null(False)
        if literals:
            result = pc.is_in(arr, value_set=pa.array(literals, arr.type))
        if pattern is not None:
            result = pc.or_(result, pc.match_substring_regex(arr, pattern))
        return result

    return pc.fill_null(_per_chunk(subjects, chunk), False)


def source_pattern(tr: SubjectTransform) -> str:
    """Anchored RE2 for ``tr.matches``: valid literal subjects that are a subset match of ``src``.

    A source token merely starting with ``*`` matches any token, the server's subset quirk.
    """
    parts = []
    for t in tr.src_tokens:
        if t == FWC:
            parts.append(rf"{_LIT}(?:\.{_LIT})*")
        elif t.startswith(PWC):
            parts.append(_LIT)
        else:
            parts.append(_escape(t))
    return "^" + r"\.".join(parts) + "$"


def _matches_chunk(tr: SubjectTransform, arr: pa.Array) -> pa.Array:
    if tr.identity:
        return pc.is_valid(arr)
    return pc.fill_null(pc.match_substring_regex(arr, source_pattern(tr)), False)


def transform_matches_array(tr: SubjectTransform, subjects: ArrayLike) -> ArrayLike:
    """``tr.matches`` over a column; null -> false."""
    return pc.fill_null(_per_chunk(subjects, lambda arr: _matches_chunk(tr, arr)), False)


def _binary(arr: pa.Array) -> pa.Array:
    return arr.view(pa.large_binary() if pa.types.is_large_string(arr.type) else pa.binary())


def _slices_from_left(raw: pa.Array, size: int) -> pa.Array:
    """``sliceFromLeft``: ``size``-byte chunks joined by ``.``, remainder last; a byte-position
    loop (one step per chunk of the longest token), never a row loop."""
    lengths = pc.binary_length(raw)
    longest = pc.max(lengths).as_py() or 0
    if longest <= size:
        return raw
    dot, empty = pa.scalar(b".", raw.type), pa.scalar(b"", raw.type)
    pieces = [pc.binary_slice(raw, 0, size)]
    for start in range(size, longest, size):
        # truncate, then cut the prefix: Arrow's binary_slice mis-sizes positive starts
        chunk = pc.binary_replace_slice(pc.binary_slice(raw, 0, start + size), start=0, stop=start, replacement="")
        pieces.append(pc.if_else(pc.greater(lengths, start), pc.binary_join_element_wise(dot, chunk, empty), empty))
    joined = pc.binary_join_element_wise(*pieces, empty)
    return pc.if_else(pc.greater(lengths, size), joined, raw)


def _split_on(col: pa.Array, delimiter: str) -> pa.Array:
    """The server's ``split`` loop in kernels: parts never contain ``.``, so replacing the
    delimiter with ``.`` and collapsing/trimming dots yields the non-empty parts joined by ``.``;
    a token starting with two delimiters keeps one leading ``.`` (the server's quirk)."""
    dotted = pc.replace_substring(col, pattern=delimiter, replacement=".")
    parts = pc.replace_substring_regex(pc.replace_substring_regex(dotted, r"\.\.+", "."), r"^\.|\.$", "")
    lead = pc.and_(pc.starts_with(col, delimiter * 2), pc.greater(pc.binary_length(parts), 0))
    dot, empty = pa.scalar(".", col.type), pa.scalar("", col.type)
    return pc.if_else(lead, pc.binary_join_element_wise(dot, parts, empty), parts)


def _token_function(dt: DestToken, col: pa.Array, text_type: pa.DataType) -> pa.Array:
    """A single-token function over a token column, in Arrow kernels; only ``split`` on an empty
    delimiter (split into characters) runs the scalar rule, once per distinct token."""
    if dt.fn is Fn.SPLIT:
        if dt.str_arg:
            return _split_on(col, dt.str_arg)
        encoded = pc.dictionary_encode(col)
        mapped = [apply_token_function(dt, v) for v in encoded.dictionary.to_pylist()]
        return pc.take(pa.array(mapped, text_type), encoded.indices)
    n = dt.int_arg
    if n <= 0:
        return col
    return _as_text(_cut(dt.fn, n, _binary(col)), text_type)


def _cut(fn: Fn, n: int, raw: pa.Array) -> pa.Array:
    """The byte-cutting functions over a ``binary`` token column (``n`` > 0)."""
    if fn is Fn.LEFT:
        return pc.binary_slice(raw, 0, n)
    if fn is Fn.RIGHT:
        return pc.binary_slice(raw, -n)
    if fn is Fn.SLICE_FROM_LEFT:
        return _slices_from_left(raw, n)
    if fn is Fn.SLICE_FROM_RIGHT:
        return pc.binary_reverse(_slices_from_left(pc.binary_reverse(raw), n))
    # splitFrom*: insert "." n bytes from the left/right end, only in tokens longer than n
    at = n if fn is Fn.SPLIT_FROM_LEFT else -n
    split = pc.binary_replace_slice(raw, start=at, stop=at, replacement=".")
    return pc.if_else(pc.greater(pc.binary_length(raw), n), split, raw)


def _as_text(raw: pa.Array, text_type: pa.DataType) -> pa.Array:
    """Cut bytes as text: as they are when they are UTF-8 (the usual case, checked in one
    pass), else each distinct value as the server's JSON API shows it (``subject_text``)."""
    out = raw.view(text_type)
    try:
        out.validate(full=True)
    except pa.ArrowInvalid:
        encoded = pc.dictionary_encode(raw)
        shown = [subject_text(v) for v in encoded.dictionary.to_pylist()]
        return pc.take(pa.array(shown, text_type), encoded.indices)
    return out


def _count_text(values: pa.Array, count: int, text_type: pa.DataType) -> pa.Array:
    """``str(value % count)`` for uint values, with the server's modulus rules."""
    if count == 0:
        return pa.nulls(len(values), text_type).fill_null("0")
    return pc.cast(pc.modulo(values, pa.scalar(count, values.type)), text_type)


def _transform_chunk(tr: SubjectTransform, arr: pa.Array, keep_unmatched: bool) -> pa.Array:
    text_type = arr.type
    fallback = arr if keep_unmatched else pa.nulls(len(arr), text_type)
    if tr.identity:
        return arr
    matched = _matches_chunk(tr, arr)
    if not tr.dest_tokens:
        return pc.if_else(matched, arr, fallback)
    if not pc.any(matched).as_py():
        return fallback
    # Non-matching rows are swapped for a matching stand-in so every row has all source tokens;
    # their results are discarded below.
    stand_in = TSEP.join("x" if t in (PWC, FWC) else t for t in tr.src_tokens)
    tokens = pc.split_pattern(pc.if_else(matched, arr, pa.scalar(stand_in, text_type)), TSEP)
    empty = pa.scalar("", text_type)

    def token(p: int) -> pa.Array:
        return pc.list_element(tokens, p)

    pieces: list[pa.Array | pa.Scalar] = []
    for dt in tr.dest_tokens:
        if dt.fn is Fn.LITERAL:
            if dt.text == FWC:
                pieces.append(pc.binary_join(pc.list_slice(tokens, len(tr.src_tokens) - 1), pa.scalar(TSEP, text_type)))
                break
            pieces.append(pa.scalar(dt.text, text_type))
        elif dt.fn is Fn.WILDCARD:
            pieces.append(token(dt.positions[0]))
        elif dt.fn is Fn.PARTITION:
            key = (pc.binary_join_element_wise(*[token(p) for p in dt.positions], empty) if dt.positions
                   else pc.fill_null(arr, ""))
            pieces.append(_count_text(fnv1a_32_array(key), dt.int_arg & 0xFFFFFFFF, text_type))
        elif dt.fn is Fn.RANDOM:
            draws = pc.cast(pc.floor(pc.multiply(pc.random(len(arr)), 2.0**31)), pa.uint32())
            pieces.append(_count_text(draws, abs(dt.int_arg), text_type))
        else:
            pieces.append(_token_function(dt, token(dt.positions[0]), text_type))
    if all(isinstance(p, pa.Scalar) for p in pieces):
        result: pa.Array | pa.Scalar = pa.scalar(TSEP.join(p.as_py() for p in pieces), text_type)
    else:
        result = pc.binary_join_element_wise(*pieces, pa.scalar(TSEP, text_type))
    return pc.if_else(matched, result, fallback)


def transform_array(tr: SubjectTransform, subjects: ArrayLike, keep_unmatched: bool = True) -> ArrayLike:
    """``tr.apply_or_keep`` over a column (``keep_unmatched``), or null for rows it does not match."""
    per_row = any(dt.fn is Fn.RANDOM for dt in tr.dest_tokens)
    return _per_chunk(subjects, lambda arr: _transform_chunk(tr, arr, keep_unmatched), via_dictionary=not per_row)
