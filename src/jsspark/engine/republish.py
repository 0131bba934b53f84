"""RePublish over stored lake messages: what a server sends for each message it stores.

A server with ``republish {src, dest, headers_only}`` sends every stored message whose
(stored) subject matches ``src`` to the mapped ``dest`` as a plain core publish, with its
original headers followed by ``Nats-Stream``, ``Nats-Subject``, ``Nats-Sequence``,
``Nats-Time-Stamp`` (Go's ``time.RFC3339Nano`` in UTC: up to nine fraction digits, trailing
zeros and a bare dot cut) and ``Nats-Last-Sequence`` (the previous sequence stored on the same
exact subject, 0 if none); ``headers_only`` sends an empty body and adds ``Nats-Msg-Size``.
A mapped subject that is not a valid publish subject is suppressed (``stream.go``,
``processJetStreamMsgWithBatch``). ``republish_batch`` computes the same messages for a
batch of stored rows, with Arrow kernels and numpy only.

``Nats-Last-Sequence`` is the server's ``LoadLastMsg`` before the store. A lake republishes
after the store, from what it reads, so it is computed over the messages the job sees: the
previous message of the subject in the batch, else in the batches before it (carried in
``LastSequences``), else the last live message of the subject below the batch in the lake
(``lake_last_seqs``). A message a limit, purge or delete removed before it was read is
neither republished nor counted; the server, republishing at store time, saw it.

Nothing here imports pyspark.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jsspark.config.stream import RePublish, StreamConfig
from jsspark.engine.headers import HEADER_TYPE, append_headers, typed_headers
from jsspark.subjects import SubjectTransform

if TYPE_CHECKING:
    from jsspark.engine.lake import Lake

STREAM = "Nats-Stream"
SUBJECT = "Nats-Subject"
SEQUENCE = "Nats-Sequence"
TIME_STAMP = "Nats-Time-Stamp"
LAST_SEQUENCE = "Nats-Last-Sequence"
MSG_SIZE = "Nats-Msg-Size"
REPUBLISH_HEADERS = (STREAM, SUBJECT, SEQUENCE, TIME_STAMP, LAST_SEQUENCE)

OUTPUT_SCHEMA = pa.schema(
    [
        pa.field("seq", pa.int64()),  # the stored message's sequence (not sent; ids, ordering)
        pa.field("subject", pa.string()),  # the mapped destination subject
        pa.field("headers", HEADER_TYPE),
        pa.field("data", pa.binary()),
    ]
)
DEFAULT_MAX_SUBJECTS = 1_000_000

# A valid publish subject (``IsValidPublishSubject``): non-empty tokens without the server's
# whitespace, none exactly ``*`` or ``>`` (``*a`` and ``a>`` are literal tokens).
_WS = r"\t\n\f\r "
_TOKEN = rf"(?:[^.*>{_WS}][^.{_WS}]*|[*>][^.{_WS}]+)"
_PUBLISH_SUBJECT = rf"^{_TOKEN}(?:\.{_TOKEN})*$"

LastSeqLookup = Callable[[int, pa.Array | None], pa.Table | None]
"""``lookup(seq, subjects)``: table ``subject, last_seq`` with each subject's last live
sequence below ``seq`` (0 if none); ``subjects=None`` asks for every subject with a message
below ``seq`` and may answer ``None`` (too many to carry)."""


def effective_republish(config: StreamConfig, republish: RePublish | None = None) -> RePublish | None:
    """The republish a server runs for ``config`` (or for ``republish`` on that stream): empty
    ``src`` is ``>``, and ``>``→``>`` behind a transform of the only subject becomes the
    transform's dest (implicit republish). Not validated (``_check_republish`` does that)."""
    from jsspark.config.defaults import default_republish

    cfg = with_republish(config, republish)
    if cfg is None:
        return None
    default_republish(cfg, pedantic=False)
    return cfg.republish


def with_republish(config: StreamConfig, republish: RePublish | None = None) -> StreamConfig | None:
    """A copy of ``config`` carrying ``republish`` (else its own), with the server's default
    subject (the stream name) when it has none; ``None`` when there is nothing to republish."""
    cfg = config.model_copy(deep=True)
    if republish is not None:
        cfg.republish = republish.model_copy(deep=True)
    if cfg.republish is None:
        return None
    if not cfg.subjects and cfg.mirror is None and not cfg.sources:
        cfg.subjects = [cfg.name]
    return cfg


def rfc3339nano_array(ts_ns: pa.Array | pa.ChunkedArray | np.ndarray) -> pa.Array:
    """Go's ``time.Unix(0, ns).UTC().Format(time.RFC3339Nano)`` for every row."""
    ns = np.asarray(ts_ns.to_numpy(zero_copy_only=False) if not isinstance(ts_ns, np.ndarray) else ts_ns,
                    dtype=np.int64)
    secs = pa.array(ns // 1_000_000_000).cast(pa.timestamp("s", tz="UTC"))
    base = pc.strftime(secs, format="%Y-%m-%dT%H:%M:%S")
    frac = pc.utf8_rtrim(pc.utf8_lpad(pa.array(ns % 1_000_000_000).cast(pa.string()), width=9, padding="0"),
                         characters="0")
    dot = pc.if_else(pc.equal(pc.utf8_length(frac), 0), "", ".")
    return pc.binary_join_element_wise(base, dot, frac, "Z", "")


def valid_publish_subjects(subjects: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``is_valid_publish_subject`` for every row (null -> false), on the distinct values."""
    if isinstance(subjects, pa.ChunkedArray):
        subjects = subjects.combine_chunks()
    enc = subjects if pa.types.is_dictionary(subjects.type) else pc.dictionary_encode(subjects)
    ok = pc.fill_null(pc.match_substring_regex(enc.dictionary.cast(pa.string()), _PUBLISH_SUBJECT), False)
    return pc.fill_null(pc.take(ok, enc.indices), False)


@dataclass
class LastSequences:
    """Per subject the last sequence republish has seen, carried from batch to batch.

    ``through`` is the highest sequence folded in; a batch must start above it (batches of a
    streaming read are consecutive ranges), else the carry is dropped and rebuilt. With
    ``complete`` every subject missing from ``last`` has no earlier message, so no lookup is
    needed. Bounded by ``max_subjects``: past it the carry restarts from the current batch.
    """

    last: dict[str, int] = field(default_factory=dict)
    through: int = 0
    complete: bool = False
    max_subjects: int = DEFAULT_MAX_SUBJECTS

    def reset(self) -> None:
        self.last = {}
        self.through = 0
        self.complete = False


def lake_last_seqs(lake: Lake, stream: str, max_subjects: int = DEFAULT_MAX_SUBJECTS) -> LastSeqLookup:
    """The ``LastSeqLookup`` of a lake stream, answered from its in-memory index; asking for all
    subjects answers ``None`` when the stream has more than ``max_subjects``."""

    def lookup(seq: int, subjects: pa.Array | None) -> pa.Table | None:
        index = lake.stream(stream).index()
        if subjects is None and index.num_subjects > max_subjects:
            return None
        return index.last_seqs_before(seq, subjects)

    return lookup


def _bases(
    names: pa.Array, first: int, carry: LastSequences | None, lookup: LastSeqLookup | None
) -> np.ndarray:
    """Last sequence below ``first`` of each of ``names`` (distinct subjects): from the carry,
    else from ``lookup``, else 0. A fresh carry is seeded with every subject when the lookup
    can give them all, and is then complete."""
    if first <= 1:  # nothing is stored below the first sequence: no lookup, and the carry is complete
        lookup = None
        if carry is not None and not carry.through:
            carry.complete = True
    known: dict[str, int] = {}
    complete = lookup is None
    if carry is not None:
        if not carry.through and lookup is not None:
            seeded = lookup(first, None)
            if seeded is not None:
                carry.last = dict(zip(seeded["subject"].to_pylist(), seeded["last_seq"].to_pylist(), strict=True))
                carry.complete = True
        known, complete = carry.last, complete or carry.complete
    got = [known.get(s) for s in names.to_pylist()]
    out = np.array([v or 0 for v in got], dtype=np.int64)
    missing = [i for i, v in enumerate(got) if v is None]
    if missing and not complete and lookup is not None:
        ask = names.take(pa.array(missing, pa.int64()))
        found = lookup(first, ask)
        if found is not None:
            out[missing] = _align(ask, found)
    return out


def _align(names: pa.Array, found: pa.Table) -> np.ndarray:
    pos = pc.index_in(names, value_set=found["subject"].combine_chunks())
    seqs = found["last_seq"].combine_chunks().to_numpy(zero_copy_only=False)
    pos_np = pc.fill_null(pos, -1).to_numpy(zero_copy_only=False).astype(np.int64)
    return np.where(pos_np >= 0, seqs[np.maximum(pos_np, 0)] if len(seqs) else 0, 0).astype(np.int64)


def republish_batch(
    stream: str,
    republish: RePublish,
    messages: pa.Table | pa.RecordBatch,
    *,
    carry: LastSequences | None = None,
    lookup: LastSeqLookup | None = None,
) -> pa.Table:
    """The messages a server republishes for the stored ``messages`` of ``stream``.

    ``messages``: columns ``seq``, ``ts_ns``, ``subject``, ``headers``, ``data`` (as the lake
    reader emits them; other columns ignored), consecutive stored messages of the stream.
    ``republish``: the effective config (``effective_republish``). ``carry`` (updated in place)
    holds the last sequences of earlier batches; ``lookup`` answers the last sequence of a
    subject below the batch from the lake (``lake_last_seqs``); with neither, a subject's
    first message in the batch gets ``Nats-Last-Sequence: 0``.

    Returns ``OUTPUT_SCHEMA`` rows in sequence order: ``seq`` of the stored message, ``subject``
    the mapped destination, ``headers`` the original pairs then the republish headers,
    ``data`` the payload (empty with ``headers_only``).
    """
    if isinstance(messages, pa.RecordBatch):
        messages = pa.Table.from_batches([messages])
    if not messages.num_rows or not republish.dest:  # an empty dest: the server makes no transform
        if carry is not None and messages.num_rows:
            carry.reset()
        return OUTPUT_SCHEMA.empty_table()
    for name, typ in (("headers", HEADER_TYPE), ("data", pa.binary())):
        if name not in messages.column_names:
            messages = messages.append_column(name, pa.nulls(messages.num_rows, typ))
    messages = messages.select(["seq", "ts_ns", "subject", "headers", "data"]).sort_by("seq")
    seqs = messages["seq"].to_numpy().astype(np.int64)
    first, top = int(seqs[0]), int(seqs[-1])
    if carry is not None and carry.through and carry.through >= first:
        carry.reset()  # not the next range (a replay, a restart): rebuild

    subjects = pc.dictionary_encode(messages["subject"].combine_chunks().cast(pa.string()))
    tr = SubjectTransform(republish.src, republish.dest, validate=False)
    dest = tr.apply_array(subjects, keep_unmatched=False)
    keep = pc.and_(pc.is_valid(dest), valid_publish_subjects(dest))
    keep_np = np.asarray(keep.to_numpy(zero_copy_only=False), dtype=bool)

    # Nats-Last-Sequence: the previous sequence of the same subject, in the batch or before it.
    codes = subjects.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    sel = np.flatnonzero(keep_np)
    k_codes, k_seqs = codes[sel], seqs[sel]
    order = np.lexsort((k_seqs, k_codes))
    s_codes, s_seqs = k_codes[order], k_seqs[order]
    starts = np.ones(len(order), dtype=bool)
    starts[1:] = s_codes[1:] != s_codes[:-1]
    used = np.unique(k_codes)
    names = subjects.dictionary.take(pa.array(used, pa.int64())).cast(pa.string())
    base_by_code = np.zeros(len(subjects.dictionary), dtype=np.int64)
    base_by_code[used] = _bases(names, first, carry, lookup)
    prev = np.empty(len(order), dtype=np.int64)
    prev[1:] = s_seqs[:-1]
    prev[starts] = base_by_code[s_codes[starts]]
    last_seq = np.empty(len(order), dtype=np.int64)
    last_seq[order] = prev
    if carry is not None:
        ends = np.ones(len(order), dtype=bool)
        ends[:-1] = s_codes[1:] != s_codes[:-1]
        lasts = subjects.dictionary.take(pa.array(s_codes[ends], pa.int64())).cast(pa.string()).to_pylist()
        if len(carry.last) + len(lasts) > carry.max_subjects:
            carry.last, carry.complete = {}, False
        carry.last.update(zip(lasts, s_seqs[ends].tolist(), strict=True))
        carry.through = top

    if not len(sel):
        return OUTPUT_SCHEMA.empty_table()
    take = pa.array(sel, pa.int64())
    kept = messages.take(take)
    data = pc.fill_null(kept["data"].combine_chunks().cast(pa.binary()), b"")
    n = kept.num_rows
    stored_subject = kept["subject"].combine_chunks().cast(pa.string())
    names_out = list(REPUBLISH_HEADERS)
    values = [
        pa.array(np.full(n, stream, dtype=object), pa.string()),
        stored_subject,
        pa.array(k_seqs).cast(pa.string()),
        rfc3339nano_array(kept["ts_ns"].combine_chunks()),
        pa.array(last_seq).cast(pa.string()),
    ]
    if republish.headers_only:
        names_out.append(MSG_SIZE)
        values.append(pc.fill_null(pc.binary_length(data), 0).cast(pa.string()))
        data = pa.array(np.full(n, b"", dtype=object), pa.binary())
    headers = append_headers(typed_headers(kept["headers"]), names_out, values)
    return pa.Table.from_arrays(
        [pa.array(k_seqs, pa.int64()), dest.take(take).cast(pa.string()), headers, data], schema=OUTPUT_SCHEMA
    )


__all__ = [
    "MSG_SIZE",
    "OUTPUT_SCHEMA",
    "REPUBLISH_HEADERS",
    "LastSeqLookup",
    "LastSequences",
    "effective_republish",
    "lake_last_seqs",
    "republish_batch",
    "rfc3339nano_array",
    "valid_publish_subjects",
]
