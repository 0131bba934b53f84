"""Storing messages that came from another stream: mirror form and source form.

``LakeStream.publish_batch`` is a client publish: it assigns new sequences and refuses a
``Nats-Stream-Source`` header (10227), as the server does for clients. Ingest from an origin is
the server's *internal* path, with its own rules (``stream.go:processInboundMirrorMsg`` /
``processInboundSourceMsg``):

- **mirror**: stored at the origin's sequence with the origin's timestamp; sequences the origin
  no longer has are skipped, which the stream state shows as deleted (``num_deleted``); a batch
  may not go back in sequence (the caller's offsets are wrong if it does); a first store into
  an empty stream starts the stream at the origin's sequence (the server purges up to it); no
  dedup by ``Nats-Msg-Id``.
- **source**: new local sequences and local time, ``Nats-Stream-Source`` added in the server's
  format ``<origin> <seq> <filter|>> <dest|>> <original subject>``.

Both drop ``Nats-Expected-*`` and ``Nats-Batch-*`` (and an incoming ``Nats-Stream-Source``) as
the server does, and take ``txn=(app_id, version)`` so a replayed Spark batch is stored once.
Limits of the target stream are then applied as after any store.
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import Transaction

from jsspark.engine import headers as H
from jsspark.engine.api import BatchAck
from jsspark.engine.lake import Lake
from jsspark.engine.schema import INDEX_COLUMNS, MESSAGE_SCHEMA, column_stored_size
from jsspark.engine.stream import MAX_ATTEMPTS, LakeStream
from jsspark.engine.subject_stats import SubjectGroups
from jsspark.engine.table import ConcurrentCommit

_DROP_PREFIXES = ("Nats-Expected-", "Nats-Batch-")
# How origin messages can be stored: the two ways a JetStream stream takes another's messages.
# Listed once so ``land_batch`` and the sink's ``form`` option accept exactly the same values.
LANDING_FORMS = ("mirror", "source")


class SequenceRegression(ValueError):
    """A mirrored batch does not continue above the stream's last sequence."""


def _clean_headers(headers: pa.Array, extra: list[list[tuple[str, str]]] | None = None) -> pa.Array:
    rows = []
    for i, cell in enumerate(headers.to_pylist()):
        pairs = H.without(H.from_arrow(cell), drop=(H.STREAM_SOURCE,), drop_prefixes=_DROP_PREFIXES) or []
        if extra is not None:
            pairs = pairs + extra[i]
        rows.append(pairs or None)
    return H.to_arrow(rows)


def _col(table: pa.Table, name: str) -> pa.Array:
    col = table.column(name)
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _commit(ls: LakeStream, build: object, txn: tuple[str, int] | None) -> BatchAck:
    """Load, build rows against the snapshot, commit with ``txn``; retry on a concurrent commit."""
    for _ in range(MAX_ATTEMPTS):
        snap, index = ls._load()
        if txn is not None:
            done = snap.table.transaction_version(txn[0])
            if done is not None and done >= txn[1]:
                return BatchAck(ls.name, np.zeros(0, np.int64), np.zeros(0, bool), 0, replayed=True)
        rows, last_seq, last_ts = build(snap)  # type: ignore[operator]
        groups = SubjectGroups.of(rows["subject"], rows["seq"].to_numpy())
        state = index.state_after(rows.select(INDEX_COLUMNS), None, last_seq, last_ts, groups)
        try:
            version = ls.table.commit(
                snap, rows, last_seq=last_seq, state=state,
                app_transactions=[Transaction(*txn)] if txn is not None else None,
            )
        except ConcurrentCommit:
            continue
        ls._after_commit(index, snap, version, rows, None, state, groups)
        seqs = rows["seq"].to_numpy()
        if ls._has_limits():
            ls.enforce_limits()
        return BatchAck(ls.name, seqs, np.zeros(len(seqs), bool), rows.num_rows)
    raise RuntimeError(f"stream {ls.name}: gave up storing after {MAX_ATTEMPTS} concurrent commits")


def _message_rows(ls: LakeStream, seqs: pa.Array, ts_ns: pa.Array, subjects: pa.Array, headers: pa.Array,
                  data: pa.Array) -> pa.Table:
    subjects = subjects.cast(pa.string())
    return pa.Table.from_arrays(
        [
            seqs.cast(pa.int64()),
            ts_ns.cast(pa.int64()),
            pc.divide(ts_ns.cast(pa.int64()), 1000).cast(pa.timestamp("us", tz="UTC")),
            subjects,
            headers,
            data.cast(pa.binary()),
            H.column_lookup(headers, H.MSG_ID),
            pa.array(column_stored_size(subjects, headers, data.cast(pa.binary()))),
            ls.partition.of(subjects),
        ],
        schema=MESSAGE_SCHEMA,
    )


def store_mirrored(lake: Lake, stream: str, rows: pa.Table, *, txn: tuple[str, int] | None = None) -> BatchAck:
    """Store origin messages (columns ``seq``, ``ts_ns``, ``subject``, optional ``headers``,
    ``data``) at their origin sequence and time. Raises ``SequenceRegression`` if the batch is
    not strictly increasing or does not start above the stream's last sequence."""
    ls = lake.stream(stream)
    rows = rows.sort_by("seq")
    seqs = _col(rows, "seq").cast(pa.int64())
    arr = seqs.to_numpy()
    if len(arr) > 1 and (np.diff(arr) <= 0).any():
        raise SequenceRegression(f"stream {stream}: mirrored batch repeats a sequence")
    n = rows.num_rows
    headers = _col(rows, "headers") if "headers" in rows.column_names else pa.nulls(n, H.HEADER_TYPE)
    if headers.type != H.HEADER_TYPE:
        headers = headers.cast(H.HEADER_TYPE)
    data = _col(rows, "data") if "data" in rows.column_names else pa.array([b""] * n, pa.binary())
    built = _message_rows(ls, seqs, _col(rows, "ts_ns"), _col(rows, "subject"), _clean_headers(headers), data)

    def build(snap: object) -> tuple[pa.Table, int, int]:
        last = snap.last_seq  # type: ignore[attr-defined]
        if n and int(arr[0]) <= last:
            raise SequenceRegression(
                f"stream {stream}: mirrored batch starts at seq {int(arr[0])}, not above last seq {last}")
        if not n:
            return built, last, ls._last_ts_ns
        return built, int(arr[-1]), int(pc.max(built["ts_ns"]).as_py())

    return _commit(ls, build, txn)


def source_header(origin: str, seq: int, subject: str, filter_subject: str | None = None) -> str:
    """``Nats-Stream-Source`` as ``sourceInfo.genSourceHeader`` writes it (no transforms)."""
    return f"{origin} {seq} {filter_subject or '>'} > {subject}"


def store_sourced(lake: Lake, stream: str, rows: pa.Table, *, origin: str, filter_subject: str | None = None,
                  txn: tuple[str, int] | None = None) -> BatchAck:
    """Store origin messages (``seq``, ``subject``, optional ``headers``, ``data``) with new local
    sequences and time, each carrying ``Nats-Stream-Source``."""
    ls = lake.stream(stream)
    rows = rows.sort_by("seq")
    n = rows.num_rows
    origin_seqs = _col(rows, "seq").to_pylist()
    subjects = _col(rows, "subject").cast(pa.string())
    subj_list = subjects.to_pylist()
    extra = [[(H.STREAM_SOURCE, source_header(origin, s, subj, filter_subject))]
             for s, subj in zip(origin_seqs, subj_list, strict=True)]
    headers = _col(rows, "headers") if "headers" in rows.column_names else pa.nulls(n, H.HEADER_TYPE)
    if headers.type != H.HEADER_TYPE:
        headers = headers.cast(H.HEADER_TYPE)
    headers = _clean_headers(headers, extra)
    data = _col(rows, "data") if "data" in rows.column_names else pa.array([b""] * n, pa.binary())

    def build(snap: object) -> tuple[pa.Table, int, int]:
        last = snap.last_seq  # type: ignore[attr-defined]
        now = time.time_ns()
        seqs = pa.array(np.arange(last + 1, last + 1 + n, dtype=np.int64))
        ts = pa.array(np.full(n, now, dtype=np.int64))
        return _message_rows(ls, seqs, ts, subjects, headers, data), last + n, now if n else ls._last_ts_ns

    return _commit(ls, build, txn)
