"""NATS message headers: the wire block, the stored form, and lookups the server does.

A lake message keeps its headers as an ordered list of ``(name, value)`` pairs (Arrow
``list<struct<name, value>>``), so repeated keys and their order survive exactly as on the
wire. Lookups follow nats-server's ``sliceHeader``: exact, case-sensitive key, first
occurrence, leading spaces of the value skipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jsspark.engine.arrays import has_empty, one_chunk, value_bytes
from jsspark.errors import HeaderError

HEADER_LINE = b"NATS/1.0"
HeaderPairs = list[tuple[str, str]]
HeadersLike = Mapping[str, str | Sequence[str]] | Iterable[tuple[str, str]] | bytes | None

HEADER_TYPE = pa.list_(pa.struct([pa.field("name", pa.string()), pa.field("value", pa.string())]))

# Headers the server strips or reacts to.
MSG_ID = "Nats-Msg-Id"
EXPECTED_STREAM = "Nats-Expected-Stream"
EXPECTED_LAST_SEQ = "Nats-Expected-Last-Sequence"
EXPECTED_LAST_SUBJ_SEQ = "Nats-Expected-Last-Subject-Sequence"
EXPECTED_LAST_SUBJ_SEQ_SUBJ = "Nats-Expected-Last-Subject-Sequence-Subject"
EXPECTED_LAST_MSG_ID = "Nats-Expected-Last-Msg-Id"
STREAM_SOURCE = "Nats-Stream-Source"
TTL = "Nats-TTL"
ROLLUP = "Nats-Rollup"
INCR = "Nats-Incr"
SCHEDULE = "Nats-Schedule"
SCHEDULE_NEXT = "Nats-Schedule-Next"
SCHEDULE_TIME_ZONE = "Nats-Schedule-Time-Zone"
SCHEDULER = "Nats-Scheduler"
BATCH_ID = "Nats-Batch-Id"
EXPECTED_PREFIX = "Nats-Expected-"
ORIGIN_CHECK_PREFIXES = (EXPECTED_PREFIX, "Nats-Batch-")
"""Key prefixes of the headers that were checks against the stream a message was first
published to: a mirror, a source or a stored republish drops them, as the check is done."""
CHECKED_ONE_BY_ONE = (EXPECTED_PREFIX, ROLLUP, TTL, INCR, SCHEDULE, BATCH_ID)
"""Key prefixes of the headers whose rules depend on the message before (expectations,
rollups) or that the server checks message by message (TTL, counters, schedules, batches)."""


NAME_PATTERN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
"""A header name a client sends: an HTTP token (RFC 7230), as nats-py checks it (``BadHeaderError``);
a ':' or a line break in a name would split it where the server's ``getHeaderKeyIndex`` looks."""
_NAME = re.compile(NAME_PATTERN)
_NAME_ROW = f"^{NAME_PATTERN}$"
_LINE_BREAK = "[\r\n]"
_TOKEN_BYTE = np.zeros(256, bool)
_TOKEN_BYTE[[c for c in range(128) if _NAME.fullmatch(chr(c))]] = True


def check_pair(name: str | None, value: str | None, where: str = "") -> None:
    """``HeaderError`` for a header no NATS message can carry (``where``: its row, for a batch):
    a name that is no token (``NAME_PATTERN``), a null value, or one with CR or LF, which would end
    the header line (``K: 1\\r\\nNats-Msg-Id: x`` is two headers to the server's ``sliceHeader``)."""
    if name is None:
        raise HeaderError(f"a header has no name (null){where}")
    if not _NAME.fullmatch(name):
        raise HeaderError(f"invalid header name {name!r}{where}: a NATS header name is letters, digits and "
                          "!#$%&'*+-.^_`|~ only (nats-py's BadHeaderError)")
    if value is None:
        raise HeaderError(f"header {name!r} has no value (null){where}; NATS header values are strings")
    if "\r" in value or "\n" in value:
        raise HeaderError(f"the value of header {name!r} ({value!r}){where} has a CR or LF, which would end the "
                          "header line of the message")


def check(pairs: HeaderPairs | None) -> None:
    """``check_pair`` for every header of one message."""
    for name, value in pairs or ():
        check_pair(name, value)


def check_column(headers: pa.Array | pa.ChunkedArray, who: str, column: str = "headers") -> None:
    """``check_pair`` over a ``HEADER_TYPE`` column: the first bad header fails naming its row
    (``who``: the caller). Byte scans rule a column out first (every name byte a token's, no CR
    or LF in a value); only then regex passes find the row."""
    headers = one_chunk(headers)
    if len(headers) == 0 or headers.null_count == len(headers):
        return
    entries = pc.list_flatten(headers)
    if len(entries) == 0:
        return
    names, values = pc.struct_field(entries, "name"), pc.struct_field(entries, "value")
    value_bytes_ = value_bytes(values)
    if (
        names_are_tokens(names) and not values.null_count and value_bytes_ is not None
        and not ((value_bytes_ == ord("\r")) | (value_bytes_ == ord("\n"))).any()
    ):  # fmt: skip
        return
    bad = pc.or_(
        pc.invert(pc.fill_null(pc.match_substring_regex(names, _NAME_ROW), False)),
        pc.fill_null(pc.match_substring_regex(values, _LINE_BREAK), True),
    )
    if not pc.any(bad).as_py():
        return
    at = pc.index(bad, True).as_py()
    row = pc.list_parent_indices(headers)[at].as_py()
    check_pair(names[at].as_py(), values[at].as_py(), f" ({who}: row {row} of column {column!r})")
    raise AssertionError("unreachable: the regexes and check_pair disagree")


def names_are_tokens(names: pa.Array) -> bool:
    """Every header name (a string column) a token a NATS message can carry: no null, no empty
    one, only ``NAME_PATTERN`` bytes. A byte scan, no regex."""
    raw = value_bytes(names)
    return not names.null_count and raw is not None and bool(_TOKEN_BYTE[raw].all()) and not has_empty(names)


def normalize(headers: HeadersLike) -> HeaderPairs | None:
    """Any accepted header form as ordered pairs; ``None`` when there are none.

    Accepts a dict (a list value means repeated keys, as nats-py sends them), pairs, or a raw
    ``NATS/1.0`` block.
    """
    if headers is None:
        return None
    if isinstance(headers, bytes | bytearray | memoryview):
        return decode(bytes(headers))[0] or None
    pairs: HeaderPairs = []
    items = headers.items() if isinstance(headers, Mapping) else headers
    for key, value in items:  # a None stays None (not "None"), for ``check`` to refuse
        name = None if key is None else str(key)
        if value is None or isinstance(value, str):
            pairs.append((name, value))
        else:
            pairs.extend((name, None if v is None else str(v)) for v in value)
    return pairs or None


def encode(pairs: HeaderPairs | None, status: str = "") -> bytes:
    """The wire block (``NATS/1.0[ status]\\r\\nK: V\\r\\n...\\r\\n``)."""
    if not pairs and not status:
        return b""
    out = [HEADER_LINE + (b" " + status.encode() if status else b"") + b"\r\n"]
    out.extend(f"{k}: {v}\r\n".encode() for k, v in pairs or ())
    out.append(b"\r\n")
    return b"".join(out)


def decode(block: bytes) -> tuple[HeaderPairs, str]:
    """Pairs and the status text (``"404 Message Not Found"``, or ``""``) of a wire block."""
    if not block:
        return [], ""
    lines = block.decode("utf-8", errors="replace").split("\r\n")
    first = lines[0]
    if not first.startswith("NATS/1.0"):
        raise ValueError(f"not a NATS header block: {first[:40]!r}")
    status = first[len("NATS/1.0") :].strip()
    pairs: HeaderPairs = []
    for line in lines[1:]:
        if not line:
            continue
        key, sep, value = line.partition(":")
        if sep:
            pairs.append((key, value.lstrip(" ")))
    return pairs, status


class NotVectorized(ValueError):
    """``decode_column`` cannot read these blocks as columns; ``decode`` one at a time."""


def _cut(data: pa.Buffer, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    """Strings ``data[starts[i]:ends[i]]`` (ascending, disjoint spans of valid UTF-8), copied
    out by one ``take`` from a zero-copy array of the spans and the gaps between them."""
    bounds = np.empty(2 * len(starts), np.int32)
    bounds[0::2], bounds[1::2] = starts, ends
    spans = pa.Array.from_buffers(pa.string(), max(2 * len(starts) - 1, 0), [None, pa.py_buffer(bounds), data])
    return spans.take(pa.array(np.arange(0, 2 * len(starts), 2, dtype=np.int64)))


def decode_column(blocks: pa.Array | pa.ChunkedArray, list_type: pa.DataType = HEADER_TYPE) -> pa.Array:
    """``decode`` of each wire block (binary; null or empty: none) as a headers column: every
    pair in order, a row without pairs null, as ``[{'name': k, 'value': v}, ...] or None`` per
    block would give. Found with numpy over the blocks' bytes: lines split at CRLF, the first
    (``NATS/1.0[ status]``) passed over, a line's name before its first ``:``, its value after
    it with leading spaces dropped, a line without ``:`` skipped. Raises ``NotVectorized`` when
    a block is not valid UTF-8 (``decode`` replaces what it cannot read) or does not start with
    ``NATS/1.0`` (``decode`` refuses it): the caller decodes those one at a time. Why: decoding
    a block at a time cost about 1.2 µs a message, more than all the rest of taking a delivery."""
    blocks = one_chunk(blocks)
    n = len(blocks)
    if pa.types.is_large_binary(blocks.type):
        try:
            blocks = blocks.cast(pa.binary())
        except pa.ArrowInvalid:  # over 2 GiB of blocks
            raise NotVectorized("large binary blocks past binary's offsets") from None
    if not pa.types.is_binary(blocks.type):
        raise NotVectorized(f"not a binary column: {blocks.type}")
    _, offsets, data = blocks.buffers()
    off = np.frombuffer(offsets, np.int32, n + 1, blocks.offset * 4).astype(np.int64) if n else np.zeros(1, np.int64)
    present = np.diff(off) > 0
    if blocks.null_count:
        present &= blocks.is_valid().to_numpy(zero_copy_only=False)
    if data is None or not present.any():
        return pa.nulls(n, list_type)
    if not np.all(pc.starts_with(blocks, HEADER_LINE.decode()).to_numpy(zero_copy_only=False)[present]):
        raise NotVectorized("a header block does not start with NATS/1.0")
    lo, hi = int(off[0]), int(off[-1])
    try:  # every block's bytes valid UTF-8 (null slots' too: they hold none, or their own)
        pa.Array.from_buffers(pa.string(), 1, [None, pa.py_buffer(np.array([lo, hi], np.int32)), data]).validate(full=True)
    except pa.ArrowInvalid:
        raise NotVectorized("a header block is not valid UTF-8") from None
    a = np.frombuffer(data, np.uint8)
    starts, ends = off[:-1][present], off[1:][present]
    crlf = np.flatnonzero((a[lo:hi - 1] == 13) & (a[lo + 1:hi] == 10)) + lo
    owner = np.searchsorted(ends, crlf, side="right")  # the present block a CR is in, if any
    inside = owner < len(starts)
    inside[inside] &= (crlf[inside] >= starts[owner[inside]]) & (crlf[inside] + 1 < ends[owner[inside]])
    crlf = crlf[inside]
    # lines: each block's start and each CRLF's end open one; each CRLF and block end close one.
    # A block ending in CRLF has an empty last line where the next block starts: at one place,
    # the line a CRLF opens goes first.
    opened = np.concatenate([starts, crlf + 2])
    by_block = np.concatenate([np.ones(len(starts), bool), np.zeros(len(crlf), bool)])
    order = np.lexsort((by_block, opened))
    line_lo, first = opened[order], by_block[order]  # first: the status lines
    line_hi = np.sort(np.concatenate([crlf, ends]))
    rows = np.flatnonzero(present)[np.cumsum(first) - 1]  # each line's row
    keep = ~first & (line_hi > line_lo)
    colons = np.flatnonzero(a[lo:hi] == 58) + lo
    at = np.searchsorted(colons, line_lo)
    colon = colons[np.minimum(at, max(len(colons) - 1, 0))] if len(colons) else line_hi
    keep &= (at < len(colons)) & (colon < line_hi)
    name_lo, name_hi, line_hi, rows = line_lo[keep], colon[keep], line_hi[keep], rows[keep]
    value_lo = name_hi + 1
    while True:  # the value's leading spaces (``lstrip(" ")``), a place at a time for every line
        space = (value_lo < line_hi) & (a[np.minimum(value_lo, len(a) - 1)] == 32)
        if not space.any():
            break
        value_lo = value_lo + space
    entries = pa.StructArray.from_arrays([_cut(data, name_lo, name_hi), _cut(data, value_lo, line_hi)],
                                         fields=list(list_type.value_type))
    return _lists(np.bincount(rows, minlength=n), entries, list_type)


def repaired(block: bytes) -> bytes:
    """A header block without the ``NATS/1.0`` line (nats-server stores whatever header bytes a
    publisher sent) as a NATS block of the ``K: V`` lines it holds, which is what the server's
    own header lookups read from it; a block that has the line comes back as it is."""
    if not block or block.startswith(HEADER_LINE):
        return block
    return encode(decode(HEADER_LINE + b"\r\n" + bytes(block))[0])


def encoded_len(pairs: HeaderPairs | None) -> int:
    """``len(encode(pairs))`` without building it: the server's byte accounting needs it."""
    if not pairs:
        return 0
    return 12 + sum(len(k.encode()) + len(v.encode()) + 4 for k, v in pairs)


def get(pairs: HeaderPairs | None, key: str) -> str | None:
    """The server's lookup: first exact match, leading spaces skipped. An empty value is no
    value (``None``): every server check treats it as unset (``len(v) == 0``, ``v == _EMPTY_``),
    so an empty ``Nats-Msg-Id`` deduplicates nothing and an empty expectation expects nothing."""
    for k, v in pairs or ():
        if k == key:
            return v.lstrip(" ") or None
    return None


def without(pairs: HeaderPairs | None, drop: Iterable[str] = (), drop_prefixes: Iterable[str] = ()) -> HeaderPairs | None:
    """Pairs without the given keys or key prefixes (mirror/source ingest strips some)."""
    drop = set(drop)
    prefixes = tuple(drop_prefixes)
    kept = [(k, v) for k, v in pairs or () if k not in drop and not (prefixes and k.startswith(prefixes))]
    return kept or None


def to_arrow(rows: Sequence[HeaderPairs | None]) -> pa.Array:
    return pa.array(
        [None if not r else [{"name": k, "value": v} for k, v in r] for r in rows], type=HEADER_TYPE
    )


COLUMN_TYPES = (
    "array<struct<name: string, value: string>> (its fields in any order), map<string,string>, "
    "or binary (a NATS/1.0 header block)"
)


def from_column(col: pa.Array | pa.ChunkedArray, column: str = "headers") -> pa.Array:
    """A DataFrame's headers column (``COLUMN_TYPES``) as ``HEADER_TYPE``, for the sinks.

    A struct's fields are read by name: Spark orders them as the query built the struct, and
    read by position a header's value would be stored as its name. Any other type fails naming
    the column: read row by row, a string's characters or an array's items would be unpacked
    as pairs, or a struct's fields taken for a name and a value."""
    col = one_chunk(col)
    t = col.type
    try:
        if pa.types.is_null(t):
            return pa.nulls(len(col), HEADER_TYPE)
        if pa.types.is_map(t):
            # keys and items are the whole child, also of a slice: its entries start at its first offset
            start, size = col.offsets[0].as_py(), col.offsets[-1].as_py() - col.offsets[0].as_py()
            values = pa.StructArray.from_arrays(
                [col.keys.slice(start, size).cast(pa.string()), col.items.slice(start, size).cast(pa.string())],
                fields=list(HEADER_TYPE.value_type),
            )
            offsets = pc.subtract(col.offsets, col.offsets[0])
            return pa.ListArray.from_arrays(offsets, values, mask=col.is_null())
        if (pa.types.is_list(t) or pa.types.is_large_list(t)) and pa.types.is_struct(t.value_type):
            names = [t.value_type.field(i).name for i in range(t.value_type.num_fields)]
            if names == ["name", "value"]:
                return col.cast(HEADER_TYPE)
            if sorted(names) == ["name", "value"]:
                return _by_name(col)
        elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
            try:
                return decode_column(col)
            except NotVectorized:  # read one at a time: a block not UTF-8, or one ``normalize`` refuses
                return to_arrow([normalize(v) for v in col.to_pylist()])
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, ValueError) as e:
        raise ValueError(f"column {column!r} of type {t} cannot be read as message headers ({e}); "
                         f"headers are {COLUMN_TYPES}") from None
    raise ValueError(f"column {column!r} has type {t}, which is not message headers; headers are {COLUMN_TYPES}")


def headers_column(table: pa.Table | pa.RecordBatch) -> pa.Array:
    """A batch's ``headers`` column as ``HEADER_TYPE`` (``from_column``); no headers where there is none."""
    if "headers" not in table.schema.names:
        return pa.nulls(table.num_rows, HEADER_TYPE)
    return from_column(table.column("headers"))


def _by_name(col: pa.Array) -> pa.Array:
    """A list of ``struct<value, name>`` (a list array, any offset) with its fields in the stored order."""
    start = col.offsets[0].as_py()
    entries = col.values.slice(start, col.offsets[-1].as_py() - start)
    fields = [pc.struct_field(entries, f.name) for f in HEADER_TYPE.value_type]
    values = pa.StructArray.from_arrays(fields, names=[f.name for f in HEADER_TYPE.value_type], mask=entries.is_null())
    lists = pa.LargeListArray if pa.types.is_large_list(col.type) else pa.ListArray
    return lists.from_arrays(pc.subtract(col.offsets, col.offsets[0]), values, mask=col.is_null()).cast(HEADER_TYPE)


def typed_headers(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A headers column as one array of ``HEADER_TYPE``."""
    col = one_chunk(col)
    return col if col.type == HEADER_TYPE else col.cast(HEADER_TYPE)


def _lists(counts: np.ndarray, entries: pa.Array, list_type: pa.DataType = HEADER_TYPE) -> pa.Array:
    """Rows of ``counts[i]`` consecutive ``entries`` each; a row of none null."""
    offsets = np.zeros(len(counts) + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), entries, type=list_type, mask=pa.array(counts == 0))


def without_column(headers: pa.Array | pa.ChunkedArray, drop: Iterable[str] = (),
                   drop_prefixes: Iterable[str] = ()) -> pa.Array:
    """Vectorised ``without`` over a headers column: each row's pairs but those named in ``drop``
    or starting with one of ``drop_prefixes``, in order; a row left without pairs null."""
    headers = typed_headers(headers)
    n = len(headers)
    lengths = pc.fill_null(pc.list_value_length(headers), 0).to_numpy(zero_copy_only=False)
    if not lengths.any():
        return pa.nulls(n, HEADER_TYPE)
    entries = pc.list_flatten(headers)
    names = pc.struct_field(entries, "name")
    hit = pa.array(np.zeros(len(entries), bool))
    for name in drop:
        hit = pc.or_(hit, pc.equal(names, name))
    for prefix in drop_prefixes:
        hit = pc.or_(hit, pc.starts_with(names, prefix))
    dropped = pc.fill_null(hit, False).to_numpy(zero_copy_only=False)
    if not dropped.any():
        return headers if lengths.all() else pc.if_else(pa.array(lengths > 0), headers, pa.nulls(n, HEADER_TYPE))
    kept = ~dropped
    counts = np.bincount(pc.list_parent_indices(headers).to_numpy()[kept], minlength=n)
    return _lists(counts, entries.filter(pa.array(kept)).cast(HEADER_TYPE.value_type))


def append_headers(headers: pa.Array, names: list[str], values: list[pa.Array]) -> pa.Array:
    """Each row's header pairs followed by ``(names[j], values[j][row])`` (the server appends
    to the original block, keeping repeats and order)."""
    n, k = len(headers), len(names)
    lengths = pc.fill_null(pc.list_value_length(headers), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    old = pc.list_flatten(headers)
    n_old = len(old)
    added = pa.StructArray.from_arrays(
        [pa.array(np.tile(np.array(names, dtype=object), n), pa.string()),
         pa.concat_arrays([v.cast(pa.string()) for v in values]).take(
             pa.array((np.arange(n * k) % k) * n + np.arange(n * k) // k, pa.int64()))],
        fields=list(HEADER_TYPE.value_type),
    )
    total = lengths + k
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(total, out=offsets[1:])
    row = np.repeat(np.arange(n, dtype=np.int64), total)
    within = np.arange(int(offsets[-1]), dtype=np.int64) - offsets[row]
    starts = np.cumsum(lengths) - lengths  # each row's first entry in ``old``
    take = np.where(within < lengths[row], starts[row] + within, n_old + row * k + within - lengths[row])
    entries = pa.concat_arrays([old.cast(HEADER_TYPE.value_type), added]).take(pa.array(take))
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), entries).cast(HEADER_TYPE)


def set_column(headers: pa.Array | pa.ChunkedArray, key: str, values: pa.Array, keep_later: bool = False) -> pa.Array:
    """Vectorised dict-style set of ``key`` in each row where ``values`` is not null: the row's
    first ``key`` pair takes the value in its place and its later ``key`` pairs go (stay, with
    ``keep_later``: the server reads the first one only); a row without one gets the pair
    appended. Rows where ``values`` is null keep their pairs as they are; a row left without
    pairs is null."""
    headers = typed_headers(headers)
    n = len(headers)
    has = ~np.asarray(values.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    if not has.any():
        return headers
    entries = pc.list_flatten(headers)
    parents = pc.list_parent_indices(headers).to_numpy().astype(np.int64)
    hit = pc.fill_null(pc.equal(pc.struct_field(entries, "name"), key), False).to_numpy(zero_copy_only=False)
    hit &= has[parents]
    size = len(entries)
    src = np.arange(size, dtype=np.int64)
    keep = np.ones(size, bool)
    had = np.zeros(n, bool)
    if hit.any():
        at = np.flatnonzero(hit)
        rows = parents[at]
        first = np.r_[True, rows[1:] != rows[:-1]]  # entries are in row order
        src[at[first]] = size + rows[first]  # the new pair (same name) in the first one's place
        if not keep_later:
            keep[at[~first]] = False
        had[rows] = True
    append = np.flatnonzero(has & ~had)
    all_src = np.concatenate([src[keep], size + append])
    all_row = np.concatenate([parents[keep], append])
    order = np.argsort(all_row, kind="stable")  # each row's kept pairs in order, its appended one last
    new = pa.StructArray.from_arrays(
        [pa.array(np.full(n, key, dtype=object), pa.string()), values.cast(pa.string())],
        fields=list(HEADER_TYPE.value_type),
    )
    pairs = pa.concat_arrays([entries.cast(HEADER_TYPE.value_type), new]).take(pa.array(all_src[order]))
    return _lists(np.bincount(all_row, minlength=n), pairs)


def encode_column(headers: pa.Array | pa.ChunkedArray, newlines_to_spaces: bool = False) -> pa.Array:
    """Vectorised ``encode`` over a headers column: each row's ``NATS/1.0`` block (binary), null
    where the row has no pairs. A null value is encoded empty; ``newlines_to_spaces``: CR and LF
    in values become spaces, as nats-py sends them. Names are not checked (``check_column``)."""
    headers = typed_headers(headers)
    n = len(headers)
    lengths = pc.fill_null(pc.list_value_length(headers), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    if not lengths.any():
        return pa.nulls(n, pa.binary())
    entries = pc.list_flatten(headers)
    values = pc.fill_null(pc.struct_field(entries, "value"), "")
    if newlines_to_spaces:
        raw = value_bytes(values)
        if raw is not None and ((raw == 13) | (raw == 10)).any():
            values = pc.replace_substring_regex(values, "[\r\n]", " ")
    lines = pc.binary_join_element_wise(pc.struct_field(entries, "name").cast(pa.binary()), b": ",
                                        values.cast(pa.binary()), b"\r\n", b"")
    line_offsets = np.frombuffer(lines.buffers()[1], np.int32)[lines.offset:lines.offset + len(lines) + 1]
    bounds = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=bounds[1:])
    body = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(line_offsets[bounds].astype(np.int32)),
                                                  lines.buffers()[2]])
    blocks = pc.binary_join_element_wise(HEADER_LINE + b"\r\n", body, b"\r\n", b"")
    return pc.if_else(pa.array(lengths > 0), blocks, pa.scalar(None, pa.binary()))


def from_arrow(value: Sequence[Mapping[str, str]] | None) -> HeaderPairs | None:
    """One stored headers cell (as ``to_pylist`` gives it) back to pairs."""
    if not value:
        return None
    return [(e["name"], e["value"]) for e in value]


def column_encoded_len(headers: pa.Array) -> np.ndarray:
    """Vectorised ``encoded_len`` over a headers column (int64 per row, 0 for null); read-only
    (a zero view, no memory) when no row has headers."""
    headers = one_chunk(headers)
    n = len(headers)
    if n == 0 or headers.null_count == n:
        return np.broadcast_to(np.int64(0), (n,))
    entries = pc.list_flatten(headers)
    if len(entries) == 0:
        return np.broadcast_to(np.int64(0), (n,))
    out = np.zeros(n, dtype=np.int64)
    parents = pc.list_parent_indices(headers).to_numpy()
    names = pc.binary_length(pc.struct_field(entries, "name").cast(pa.binary())).to_numpy(zero_copy_only=False)
    values = pc.binary_length(pc.struct_field(entries, "value").cast(pa.binary())).to_numpy(zero_copy_only=False)
    per_entry = np.nan_to_num(names).astype(np.int64) + np.nan_to_num(values).astype(np.int64) + 4
    np.add.at(out, parents, per_entry)
    has = out > 0
    out[has] += 12
    return out


def column_lookup(headers: pa.Array, key: str) -> pa.Array:
    """Vectorised ``get``: the first value of ``key`` per row (null where absent or empty)."""
    headers = one_chunk(headers)
    n = len(headers)
    if n == 0 or headers.null_count == n:
        return pa.nulls(n, pa.string())
    entries = pc.list_flatten(headers)
    if len(entries) == 0:
        return pa.nulls(n, pa.string())
    names = pc.struct_field(entries, "name")
    hit = pc.fill_null(pc.equal(names, key), False).to_numpy(zero_copy_only=False)
    if not hit.any():
        return pa.nulls(n, pa.string())
    parents = pc.list_parent_indices(headers).to_numpy()
    idx = np.flatnonzero(hit)
    rows = parents[idx]  # ascending: entries are in row order
    first = np.r_[True, rows[1:] != rows[:-1]]  # the first hit of each row
    values = pc.utf8_ltrim(pc.struct_field(entries, "value").take(pa.array(idx[first])), characters=" ")
    values = pc.if_else(pc.equal(values, ""), pa.scalar(None, values.type), values)  # empty: unset, as ``get``
    at = np.full(n, -1, dtype=np.int64)
    at[rows[first]] = np.arange(int(first.sum()))
    return values.cast(pa.string()).take(pa.array(at, mask=at < 0))


def column_has_prefix(headers: pa.Array, prefix: str) -> np.ndarray:
    """Per row: does any header key start with ``prefix``?"""
    headers = one_chunk(headers)
    n = len(headers)
    out = np.zeros(n, dtype=bool)
    if n == 0 or headers.null_count == n:
        return out
    entries = pc.list_flatten(headers)
    if len(entries) == 0:
        return out
    hit = pc.fill_null(pc.starts_with(pc.struct_field(entries, "name"), prefix), False).to_numpy(
        zero_copy_only=False
    )
    out[pc.list_parent_indices(headers).to_numpy()[hit]] = True
    return out


def any_has_prefix(headers: pa.Array, prefix: str | tuple[str, ...]) -> bool:
    """Does any row have a header key starting with ``prefix`` (or one of them)?
    (``column_has_prefix(...).any()`` without a per-row array.)"""
    headers = one_chunk(headers)
    if len(headers) == 0 or headers.null_count == len(headers):
        return False
    entries = pc.list_flatten(headers)
    if len(entries) == 0:
        return False
    names = pc.struct_field(entries, "name")
    return any(pc.any(pc.starts_with(names, p)).as_py() for p in ((prefix,) if isinstance(prefix, str) else prefix))
