"""Storing messages that came from another stream: mirror form and source form.

``LakeStream.publish_batch`` is a client publish: it assigns new sequences and refuses a
``Nats-Stream-Source`` header (10227), as the server does for clients. Ingest from an origin is
the server's *internal* path, with its own rules (``stream.go:processInboundMirrorMsg`` /
``processInboundSourceMsg``):

- **mirror**: stored at the origin's sequence with the origin's timestamp; sequences the origin
  no longer has are skipped, which the stream state shows as deleted (``num_deleted``); rows at
  or below the stream's last sequence are ignored (a redelivery); a first store into an empty
  stream starts the stream at the origin's sequence (the server purges up to it); no dedup by
  ``Nats-Msg-Id``.
- **source**: new local sequences and local time, ``Nats-Stream-Source`` added in the server's
  format ``<origin> <seq> <filters> <dests> <original subject>[ <identity>]``, dedup by
  ``Nats-Msg-Id`` only in the target's own window.

Both honour the mirror's or source's ``filter_subject`` / ``subject_transforms`` (first match
wins, ``engine.sourcing.Origin``), then the target stream's own ``subject_transform``, which
the server applies to every stored message, mirrored and sourced ones included
(``processJetStreamMsg``: ``mset.itr``). Both store, in the same commit, the origin's progress
marks (last origin sequence, lag, last seen) that restarts and ``stream_info`` read.

Both drop ``Nats-Expected-*`` and ``Nats-Batch-*`` as the server does. A source also drops an
incoming ``Nats-Stream-Source`` (daisy-chained sourcing: its own replaces it); a mirror keeps
it, as ``processInboundMirrorMsg`` keeps the header block. Both take ``txn=(app_id, version)``
so a replayed Spark batch is stored once. As the server stores each landed message through its
publish path, an interest target does not store those nobody wants, a discard-new limit refuses
the landing, and the target's limits, expiries and the landed messages' ``Nats-Rollup`` headers
(where it allows rollups) then apply message by message (``LakeStream.landing`` and
``settle_landed``).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import Transaction

from jsspark.engine import header_rules as rules
from jsspark.engine import headers as H
from jsspark.engine.api import BatchAck
from jsspark.engine.arrays import column
from jsspark.engine.contention import Retries
from jsspark.engine.lake import Lake
from jsspark.engine.schema import INDEX_COLUMNS, MESSAGE_SCHEMA, PARTITION_COLUMN, column_stored_size
from jsspark.engine.sourcing import Origin, identity_number
from jsspark.engine.stream import LakeStream
from jsspark.engine.subject_stats import SubjectGroups
from jsspark.engine.table import ConcurrentCommit
from jsspark.errors import APIError

# How origin messages can be stored: the two ways a JetStream stream takes another's messages.
# Listed once so ``land_batch`` and the sink's ``form`` option accept exactly the same values.
LANDING_FORMS = ("mirror", "source")


class SequenceRegression(ValueError):
    """Kept for callers that catch it; mirrored rows at or below the stream's last sequence are
    now ignored as the server ignores them (``sseq <= last``)."""


def _clean_headers(headers: pa.Array, stamp: pa.Array | None = None) -> pa.Array:
    """Headers as ingest stores them: without ``Nats-Expected-*`` and ``Nats-Batch-*``, an
    empty list as no headers. With ``stamp`` (a source's own ``Nats-Stream-Source`` per row), an
    incoming ``Nats-Stream-Source`` is dropped and ``stamp`` appended; without it (a mirror) the
    incoming one is kept. Column at a time (``H.without_column``, ``H.append_headers``)."""
    if stamp is None:
        return H.without_column(headers, drop_prefixes=H.ORIGIN_CHECK_PREFIXES)
    kept = H.without_column(headers, drop=(H.STREAM_SOURCE,), drop_prefixes=H.ORIGIN_CHECK_PREFIXES)
    return H.append_headers(kept, [H.STREAM_SOURCE], [stamp])


def _stored_subjects(ls: LakeStream, origin: Origin, subjects: pa.Array) -> pa.Array:
    """The subjects an origin's messages are stored under: the mirror's or source's first
    matching transform, then the target stream's own ``subject_transform`` (a subject it does
    not match is kept), in the server's order."""
    mapped = origin.map_subjects(subjects)
    own = ls._subject_transform()
    if own is None or not len(mapped):
        return mapped
    out = own.apply_array(mapped, keep_unmatched=True)
    return out.combine_chunks() if isinstance(out, pa.ChunkedArray) else out


def _commit(ls: LakeStream, build: object, txn: tuple[str, int] | None, marks: Any = None,
            skip_empty: bool = False) -> BatchAck:
    """Load, build rows against the snapshot, commit with ``txn`` and the origin ``marks`` (a
    list, or a function of the snapshot and the rows stored); retry on a concurrent commit.
    Nothing to store and no mark to move: no commit."""
    retries = Retries(ls.name, "storing")
    while True:
        snap, index = ls._load()
        ls.config_at(snap)  # an update committed since the batch began: its limits decide
        if txn is not None:
            done = snap.txn_version(txn[0])
            if done is not None and done >= txn[1]:
                return BatchAck(ls.name, np.zeros(0, np.int64), np.zeros(0, bool), 0, replayed=True)
        rows, last_seq, last_ts = build(snap)  # type: ignore[operator]
        if skip_empty and not rows.num_rows:
            return BatchAck(ls.name, np.zeros(0, np.int64), np.zeros(0, bool), 0)
        try:
            rows, skipped = ls.landing(index, rows)
        except APIError as e:
            if not ls.room_by_expiring(e):
                raise
            continue  # on the table the expiry left, as the server's source stores after its timer
        rows, groups = _partitioned(ls, index, rows)
        state = index.state_after(rows.select(INDEX_COLUMNS), None, last_seq, last_ts, groups)
        try:
            version = ls.table.commit(
                snap, rows, last_seq=last_seq, state=state,
                app_transactions=([Transaction(*txn)] if txn is not None else [])
                + list((marks(snap, rows) if callable(marks) else marks) or []),
            )
        except ConcurrentCommit:
            retries.lost()
            continue
        ls._after_commit(index, snap, version, rows, None, state, groups)
        ls._remember_stored(rows)
        seqs = rows["seq"].to_numpy()
        ls.settle_landed(rows, skipped=skipped)
        return BatchAck(ls.name, seqs, np.zeros(len(seqs), bool), rows.num_rows)


def _partitioned(ls: LakeStream, index: Any, rows: pa.Table) -> tuple[pa.Table, SubjectGroups]:
    """``rows`` with their ``part`` column, and their subject groups: both from one encoding of
    the subjects against the stream's subject stats, as a publish does (a subject's bucket is
    hashed once and kept, not once per row; the groups come with their positions in the stats)."""
    seqs = rows["seq"].to_numpy()
    if not rows.num_rows:
        return rows.append_column(_PART_FIELD, pa.array([], pa.string())), SubjectGroups.of(rows["subject"], seqs)
    encoded, known, counts = index.subjects().encode(column(rows, "subject"))
    part = ls._partition_column(encoded, known)
    return rows.append_column(_PART_FIELD, part), SubjectGroups.of(encoded, seqs, known, counts)


_PART_FIELD = MESSAGE_SCHEMA.field(PARTITION_COLUMN)
_UNPARTITIONED = pa.schema([f for f in MESSAGE_SCHEMA if f.name != PARTITION_COLUMN])


def _message_rows(seqs: pa.Array, ts_ns: pa.Array, subjects: pa.Array, headers: pa.Array,
                  data: pa.Array | pa.ChunkedArray) -> pa.Table:
    """Stored rows but for ``part`` (``_partitioned`` adds it at commit)."""
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
        ],
        schema=_UNPARTITIONED,
    )


def _headers_of(rows: pa.Table) -> pa.Array:
    n = rows.num_rows
    headers = column(rows, "headers") if "headers" in rows.column_names else pa.nulls(n, H.HEADER_TYPE)
    return headers.cast(H.HEADER_TYPE) if headers.type != H.HEADER_TYPE else headers


def _data_of(rows: pa.Table) -> pa.Array | pa.ChunkedArray:
    """The payloads, left in their chunks (a batch read from many spill files has one per
    file): only their lengths are needed before the Parquet write, which takes chunks."""
    n = rows.num_rows
    return rows.column("data").cast(pa.binary()) if "data" in rows.column_names else pa.array([b""] * n, pa.binary())


def _origin_order(rows: pa.Table) -> tuple[pa.Table, np.ndarray]:
    """Rows in origin order, each origin sequence once (a repeat is a redelivery: ignored)."""
    seqs = column(rows, "seq").cast(pa.int64()).to_numpy()
    if len(seqs) > 1 and (np.diff(seqs) < 0).any():  # a source delivers in order: sort only if not
        rows = rows.sort_by("seq")
        seqs = column(rows, "seq").cast(pa.int64()).to_numpy()
    if len(seqs) > 1 and (np.diff(seqs) == 0).any():
        keep = np.concatenate([[True], np.diff(seqs) != 0])
        rows, seqs = rows.filter(pa.array(keep)), seqs[keep]
    return rows, seqs


def _progress(origin: Origin, top: int, lag: int | None, now_ns: int, identity: str | None = None) -> list[Transaction]:
    """The per-origin marks stored with the messages (see ``engine.sourcing``)."""
    marks = [Transaction(origin.seq_app, top), Transaction(origin.seen_app, now_ns // 1_000_000)]
    if lag is not None:
        marks.append(Transaction(origin.lag_app, max(int(lag), 0)))
    if identity:
        marks.append(Transaction(origin.ident_app, identity_number(identity)))
    return marks


def _taken(snap: Any, origin: Origin, identity: str | None) -> int:
    """The last origin sequence the target took from ``origin`` (its mark), or 0 when the
    origin's ``identity`` is not the one the mark was taken from: the origin was deleted and
    created again, and, as the server does on ``consumer's stream identity does not match``,
    the source starts over at sequence 0."""
    mark = int(snap.txn_version(origin.seq_app) or 0)
    if mark and identity:
        known = snap.txn_version(origin.ident_app)
        if known is not None and int(known) != identity_number(identity):
            return 0
    return mark


def store_mirrored(lake: Lake, stream: str, rows: pa.Table, *, txn: tuple[str, int] | None = None,
                   mirror: Any = None, lag: int | None = None) -> BatchAck:
    """Store origin messages (columns ``seq``, ``ts_ns``, ``subject``, optional ``headers``,
    ``data``) at their origin sequence and time, as ``processInboundMirrorMsg`` does: rows at
    or below the stream's last sequence are ignored, the mirror's ``filter_subject`` /
    ``subject_transforms`` (``mirror``, a ``StreamSource``; default the stream's own config)
    select and map subjects. ``lag``: the origin messages still pending after this batch."""
    ls = lake.stream(stream)
    origin = Origin.of(mirror if mirror is not None else (ls.config.mirror or stream))
    rows, arr = _origin_order(rows)
    keep = origin.selected(column(rows, "subject")) if rows.num_rows else pa.array([], pa.bool_())
    top_seen = int(arr[-1]) if len(arr) else 0
    if rows.num_rows and not pc.all(keep).as_py():
        rows, arr = rows.filter(keep), arr[keep.to_numpy(zero_copy_only=False)]
    subjects = _stored_subjects(ls, origin, column(rows, "subject"))
    built_all = _message_rows(column(rows, "seq").cast(pa.int64()), column(rows, "ts_ns"), subjects,
                              _clean_headers(_headers_of(rows)), _data_of(rows))

    def build(snap: object) -> tuple[pa.Table, int, int]:
        last = snap.last_seq  # type: ignore[attr-defined]
        fresh = arr > last
        built = built_all if fresh.all() else built_all.filter(pa.array(fresh))
        if not built.num_rows:
            return built, last, ls._last_ts_ns
        return built, int(built["seq"][-1].as_py()), int(pc.max(built["ts_ns"]).as_py())

    def marks(snap: Any, _stored: pa.Table) -> list[Transaction]:  # a replayed, older batch never moves the mark back
        return _progress(origin, max(top_seen, _taken(snap, origin, None)), lag, time.time_ns())

    return _commit(ls, build, txn, marks if top_seen else [], skip_empty=not top_seen)


def source_header(origin: str, seq: int, subject: str, filter_subject: str | None = None,
                  identity: str | None = None) -> str:
    """``Nats-Stream-Source`` as ``sourceInfo.genSourceHeader`` writes it for a source with no
    transforms (``Origin.header`` covers every form)."""
    return Origin(name=origin, filter_subject=filter_subject or "").header(seq, subject, identity)


def sourced_seq(lake: Lake, stream: str, source: Any, identity: str | None = None) -> int:
    """The last origin sequence ``stream`` holds from ``source`` (0 if none): where a restarted
    source resumes (+1). The mark stored with the messages answers at once; without one (a
    stream filled by a server or an older jsspark), the newest ``Nats-Stream-Source`` of that
    origin is looked up, as ``startingSequenceForSources`` scans backwards. With the origin's
    ``identity``: 0 if what the stream holds came from an earlier origin of the same name."""
    ls = lake.stream(stream)
    origin = Origin.of(source)
    snap, _ = ls._load()
    if snap.txn_version(origin.seq_app) is not None:
        return _taken(snap, origin, identity)
    table = ls.read(columns=["seq", "headers"]).sort_by("seq")
    values = H.column_lookup(column(table, "headers").cast(H.HEADER_TYPE), H.STREAM_SOURCE)
    head = origin.iname.split(" ")
    best = 0
    for text in values.drop_null().to_pylist():  # oldest first: the newest origin decides
        fields = text.split(" ")
        if (len(fields) >= 4 and [fields[0], fields[2], fields[3]] == head) or (len(fields) == 2 and fields[0] == origin.name):
            if identity and len(fields) >= 6 and fields[5] != identity:
                best = 0  # from an earlier origin of that name
                continue
            best = max(best, int(fields[1]))
    return best


def store_sourced(lake: Lake, stream: str, rows: pa.Table, *, origin: Any = None, filter_subject: str | None = None,
                  identity: str | None = None, txn: tuple[str, int] | None = None, lag: int | None = None) -> BatchAck:
    """Store origin messages (``seq``, ``subject``, optional ``headers``, ``data``) with new local
    sequences and time, as ``processInboundSourceMsg`` does. ``origin`` is the ``StreamSource``
    (or its name): its filter selects, its first matching transform maps the subject, and each
    message carries ``Nats-Stream-Source`` (with the origin's ``identity`` when given). Rows at
    or below the origin's mark are ignored, so a replay or a reset back stores nothing twice;
    with a ``duplicate_window`` on the target, a ``Nats-Msg-Id`` seen in it is skipped."""
    ls = lake.stream(stream)
    if origin is None:
        raise ValueError("store_sourced needs origin= (the StreamSource or its name)")
    src = Origin.of(origin)
    if filter_subject and not src.filter_subject and not src.transforms:
        src = Origin(name=src.name, filter_subject=filter_subject, external_api=src.external_api,
                     consumer_name=src.consumer_name)
    rows, arr = _origin_order(rows)
    window = int(ls.config.duplicate_window or 0)
    built_from: list[Any] = []  # the built rows' origin seqs and first target seq

    def build(snap: object) -> tuple[pa.Table, int, int]:
        last = snap.last_seq  # type: ignore[attr-defined]
        mark = _taken(snap, src, identity)
        take = (arr > mark) & src.selected(column(rows, "subject")).to_numpy(zero_copy_only=False)
        part = rows.filter(pa.array(take)) if not take.all() else rows
        headers = _headers_of(part)
        if window > 0 and part.num_rows:
            part, headers = _drop_known_ids(ls, part, headers, window)
        n = part.num_rows
        built_from[:] = [column(part, "seq").cast(pa.int64()).to_numpy(), last + 1]
        originals = column(part, "subject").cast(pa.string())
        stamp = src.headers_column(column(part, "seq"), originals, identity)
        headers = _raised_ttls(ls, _clean_headers(headers, stamp))
        now = time.time_ns()
        seqs = pa.array(np.arange(last + 1, last + 1 + n, dtype=np.int64))
        ts = pa.array(np.full(n, now, dtype=np.int64))
        built = _message_rows(seqs, ts, _stored_subjects(ls, src, originals), headers, _data_of(part))
        return built, last + n, now if n else ls._last_ts_ns

    top = int(arr[-1]) if len(arr) else 0

    def marks(snap: Any, stored: pa.Table) -> list[Transaction]:
        """The progress marks (a replayed, older batch never moves the mark back), and the last
        origin seq stored where it is not the mark: the server's source ``seq`` counts what it
        stored, not what it skipped (no interest on an interest target, a duplicate)."""
        taken = _taken(snap, src, identity)
        out = _progress(src, max(top, taken), lag, time.time_ns(), identity)
        kept = snap.txn_version(src.stored_app)
        last_stored = (taken if kept is None else int(kept)) if taken else 0
        if stored.num_rows:
            origin_seqs, first = built_from
            last_stored = int(origin_seqs[int(pc.max(stored["seq"]).as_py()) - first])
        if kept is not None or last_stored != max(top, taken):
            out.append(Transaction(src.stored_app, last_stored))
        return out

    return _commit(ls, build, txn, marks if top else [], skip_empty=not top)


def _raised_ttls(ls: LakeStream, headers: pa.Array) -> pa.Array:
    """Sourced headers with a ``Nats-TTL`` shorter than the target's subject delete markers
    raised to theirs (``header_rules.raised_ttl``: moved last, after ``Nats-Stream-Source``),
    as the server's publish path does for sourced messages too. A mirror never has markers
    (refused in its config)."""
    cfg = ls.config
    marker_ttl, per_subject = int(cfg.subject_delete_marker_ttl or 0), int(cfg.max_msgs_per_subject)
    if marker_ttl <= 0 or per_subject == 1 or not len(headers):
        return headers
    with_ttl = np.flatnonzero(pc.is_valid(H.column_lookup(headers, H.TTL)).to_numpy(zero_copy_only=False))
    if not len(with_ttl):
        return headers
    rows = [H.from_arrow(cell) for cell in headers.to_pylist()]
    changed = False
    for i in with_ttl.tolist():
        raised = rules.raised_ttl(rows[i], marker_ttl, per_subject)
        if raised is not None:
            rows[i], changed = raised, True
    return H.to_arrow(rows) if changed else headers


def _drop_known_ids(ls: LakeStream, part: pa.Table, headers: pa.Array, window: int) -> tuple[pa.Table, pa.Array]:
    """Sourced messages whose ``Nats-Msg-Id`` the target saw within its window are skipped
    (the server's duplicate check on the sourced publish), the first of a repeated id kept."""
    id_column = H.column_lookup(headers, H.MSG_ID)
    present = len(id_column) - id_column.null_count
    if not present:
        return part, headers
    ids = id_column.to_pylist()
    known = ls._known_ids(ls.index(), time.time_ns() - window)
    if pc.count_distinct(id_column).as_py() == present and not known.any_of(ids):
        return part, headers  # the common case, without a loop: no id repeats, none is known
    seen: set[str] = set()
    keep = []
    for mid in ids:
        dup = mid is not None and (mid in known or mid in seen)
        keep.append(not dup)
        if mid is not None:
            seen.add(mid)
    mask = pa.array(keep)
    return part.filter(mask), headers.filter(mask)
