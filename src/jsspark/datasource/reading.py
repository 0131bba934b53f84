"""Executor-side reading of one ``ReadPartition``: Arrow batches in the source's exact schema.

Runs in a Spark Python worker from nothing but the partition: it opens the Delta table by
URI at the pinned version (a ``DeltaTable`` cannot be pickled), reads only the partition's
files and sequence range with pyarrow, keeps the wanted messages in stream order, and paces
the output for ``replay_policy=original`` and ``rate_limit_bps`` as the server paces a push
consumer, from the pacing state the planner carries across micro-batches (``push_pacing``).
No pyspark import: the batches already match ``ARROW_SCHEMA``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from jsspark.datasource.partition import DataLossError, ReadPartition, delivery_mask
from jsspark.datasource.push_pacing import Pace, Pacer, ack_reply_lens, delivered_sizes
from jsspark.datasource.schema import ARROW_SCHEMA, HEADERS_ARROW
from jsspark.engine import headers as H
from jsspark.engine.arrays import one_chunk
from jsspark.engine.schema import MESSAGE_SCHEMA, stored_size, value_lengths

MAX_BATCH_ROWS = 10_000  # paced reads: rows released at once at most
# Unpaced reads take, convert and hand Spark the wanted rows this many at a time, as one Arrow
# batch, and at most about OUTPUT_SLICE_BYTES of them. Spark's cost per batch it takes from a
# Python source is high: the same 3M rows through the bench's ceiling source took 5.4 s in
# 10,000-row batches and 3.2 s in 131,072-row ones (bench/replay.py).
OUTPUT_SLICE_ROWS = 131_072
OUTPUT_SLICE_BYTES = 64 << 20
MSG_SIZE_HEADER = "Nats-Msg-Size"  # what a headers_only consumer gets instead of the payload
# A paced read releases together the messages due within this of the first one (at the last
# one's time): a fast rate does not cost Spark a batch per message.
RELEASE_QUANTUM = 0.01


def _filesystem(p: ReadPartition) -> Any:
    """The table's storage as a pyarrow filesystem rooted at the table (``table_filesystem``:
    delta-rs's own object store with the same storage options, pyarrow's for a local table)."""
    from jsspark.engine.files import table_filesystem

    return table_filesystem(p.uri, p.storage_options, dict(zip(p.files, p.file_sizes, strict=True)))


def _dataset(p: ReadPartition) -> tuple[ds.Dataset, bool]:
    """The partition's files, and whether the dataset is exactly those. With the files' paths,
    sizes and the table schema planned on the driver the Parquet files are opened directly: no
    Delta log replay per task."""
    if p.files and p.table_schema is not None and len(p.file_sizes) == len(p.files):
        fs = _filesystem(p)
        fmt = ds.ParquetFileFormat(default_fragment_scan_options=ds.ParquetFragmentScanOptions(pre_buffer=True))
        frags = [fmt.make_fragment(f, filesystem=fs) for f in p.files]
        return ds.FileSystemDataset(frags, p.table_schema, fmt, fs), True
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError

    from jsspark.engine.files import local_filesystem

    try:
        table = DeltaTable(p.uri, version=p.version, storage_options=p.storage_options)
    except DeltaError:  # no such version: the log may be another table's now
        if not _recreated(p):
            raise
        return ds.InMemoryDataset(MESSAGE_SCHEMA.empty_table()), True  # failOnDataLoss=false: skipped
    if _recreated(p, str(table.metadata().id)):
        return ds.InMemoryDataset(MESSAGE_SCHEMA.empty_table()), True
    dataset = table.to_pyarrow_dataset(filesystem=local_filesystem(p.uri))
    if not p.files:
        return dataset, False
    wanted = set(p.files)
    frags = [f for f in dataset.get_fragments() if f.path in wanted]
    if len(frags) != len(wanted):  # paths spelled differently: fall back to range pruning on all files
        return dataset, False
    return ds.FileSystemDataset(frags, dataset.schema, dataset.format, dataset.filesystem), True


def _recreated(p: ReadPartition, table_id: str | None = None) -> bool:
    """Whether the table at ``p.uri`` (``table_id``, default: as it is now) is no longer the one
    the partition was planned on: the stream was deleted and created again since, and its
    version ``p.version`` (if any) holds other messages at the same sequences. Then a
    ``DataLossError`` with ``failOnDataLoss``, else True: the partition's rows are skipped."""
    now = _table_id_now(p) if table_id is None and p.table_id else table_id
    if not p.table_id or not now or now == p.table_id:
        return False
    if p.fail_on_data_loss:
        raise DataLossError(
            f"jetstream source: stream {p.stream} was deleted and created again after this batch was planned "
            f"on table {p.table_id} (the stream is now table {now}): sequences {p.lo + 1}..{p.hi} are lost. "
            "Start the query with a new checkpoint, or set failOnDataLoss=false to skip them."
        )
    return True


def _table_id_now(p: ReadPartition) -> str:
    """The id of the table at ``p.uri`` now ("" when there is none)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return str(DeltaTable(p.uri, storage_options=p.storage_options).metadata().id)
    except TableNotFoundError:
        return ""


def _seq_filter(p: ReadPartition, exact: bool) -> ds.Expression | None:
    """Rows in ``(lo, hi]``; ``None`` when the dataset is exactly the partition's files and
    each lies wholly inside it, as the planner's cuts between commits usually make them (the
    filter, evaluated per row, cost a 1M-row task 112 ms against 58 ms without)."""
    if exact and len(p.file_seqs) == len(p.files) and all(p.lo < a and b <= p.hi for a, b in p.file_seqs):
        return None
    return (ds.field("seq") > p.lo) & (ds.field("seq") <= p.hi)


def _stored_columns(p: ReadPartition) -> list[str]:
    """What a task decodes: ``time`` is always ``ts_ns`` truncated to microseconds (the engine
    writes it so), and ``size`` only sizes a headers-only payload or paces a read."""
    paced = p.pace is not None and p.pace.paced
    return ["seq", "ts_ns", "subject", "headers", *(["size"] if paced or p.headers_only else []),
            *([] if p.headers_only else ["data"])]


def load_rows(p: ReadPartition) -> tuple[pa.Table, np.ndarray]:
    """The partition's stored rows (row groups pruned by their ``seq`` statistics, in file
    order) and the indices of the wanted messages among them, in sequence order.

    Rows are moved once: ``rows_at`` later slices (no copy) or takes each output slice,
    instead of a sort, a filter and a concatenation that each copied every column."""
    # one contiguous chunk per column: ``take`` on a many-chunk column concatenates it first,
    # which for the output slices below would copy the payloads once per slice
    dataset, exact = _dataset(p)
    try:
        rows = dataset.to_table(columns=_stored_columns(p), filter=_seq_filter(p, exact)).combine_chunks()
    except FileNotFoundError:  # files opened directly: gone with the table when the stream was deleted
        if not _recreated(p):  # a file vacuumed, or the stream deleted and not created again
            raise
        rows = MESSAGE_SCHEMA.empty_table().select(_stored_columns(p))
    seqs = rows["seq"].to_numpy()
    mask = delivery_mask(seqs, rows["subject"], p.filters, p.skip, p.resume)  # per row: order-free
    if bool(np.all(seqs[1:] > seqs[:-1])):  # files read in sequence order: the usual case
        idx = np.flatnonzero(mask)
    else:
        order = np.argsort(seqs, kind="stable")  # a few sorted runs (one per file): near linear
        idx = order[mask[order]]
    if len(idx) < p.expected and p.fail_on_data_loss:
        raise DataLossError(
            f"jetstream source: stream {p.stream}: sequences {p.lo + 1}..{p.hi} of version {p.version} hold "
            f"{len(idx)} of the {p.expected} planned messages (files removed by vacuum?). "
            "Set failOnDataLoss=false to skip them."
        )
    return rows, idx


def load_messages(p: ReadPartition) -> pa.Table:
    """The partition's wanted messages in sequence order (stored columns)."""
    rows, idx = load_rows(p)
    return rows_at(rows, idx)


def rows_at(rows: pa.Table, idx: np.ndarray) -> pa.Table:
    """``rows`` at ``idx``, one chunk per column: a zero-copy slice when ``idx`` is a run of
    consecutive rows (every message of files read in order), else a ``take``."""
    n = len(idx)
    if n == 0 or (idx[-1] - idx[0] == n - 1 and bool(np.all(idx[1:] > idx[:-1]))):
        first = int(idx[0]) if n else 0
        return pa.Table.from_arrays(
            [one_chunk(col.slice(first, n)) for col in rows.columns], schema=rows.schema
        )
    return rows.take(pa.array(idx, pa.int64())).combine_chunks()


def _with_size_header(headers: pa.Array, sizes: np.ndarray) -> pa.Array:
    """Each row's headers plus ``Nats-Msg-Size: <payload length>``, appended as the server does."""
    n = len(headers)
    lengths = pc.fill_null(pc.list_value_length(headers), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    old_values = pc.list_flatten(headers)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths + 1, out=offsets[1:])
    appended = np.zeros(offsets[-1], dtype=bool)
    appended[offsets[1:] - 1] = True
    take = np.empty(offsets[-1], dtype=np.int64)
    take[~appended] = np.arange(len(old_values))
    take[appended] = len(old_values) + np.arange(n)
    extra = pa.StructArray.from_arrays(
        [pa.array([MSG_SIZE_HEADER] * n, pa.string()), pa.array([str(int(s)) for s in sizes], pa.string())],
        fields=list(H.HEADER_TYPE.value_type),
    )
    values = pa.concat_arrays([old_values.cast(extra.type), extra]).take(pa.array(take))
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values)


def _payload_sizes(rows: pa.Table) -> np.ndarray:
    """Payload lengths from the stored ``size`` (no payload read): size minus the file store's
    overhead, subject and header block."""
    subj = pc.binary_length(rows["subject"].cast(pa.binary())).to_numpy(zero_copy_only=False).astype(np.int64)
    hlen = H.column_encoded_len(rows["headers"])
    size = rows["size"].to_numpy().astype(np.int64)
    return size - stored_size("", 0, 0) - subj - np.where(hlen > 0, hlen + 4, 0)


def to_output(p: ReadPartition, rows: pa.Table, first: int = 0, total: int | None = None) -> pa.Table:
    """Stored columns -> the source's rows (``ARROW_SCHEMA``), numbered for delivery: ``rows``
    are the partition's wanted messages ``first..first + len`` of ``total``."""
    n = rows.num_rows
    after = (n if total is None else total) - first - n  # the partition's messages after these
    headers = one_chunk(rows["headers"])
    ts_ns = one_chunk(rows["ts_ns"])
    if p.headers_only:
        headers = _with_size_header(headers, _payload_sizes(rows))
        data = pa.array([b""] * n, pa.binary())
    else:
        data = one_chunk(rows["data"])
    dseq = p.dseq_base + first + np.arange(1, n + 1, dtype=np.int64)
    pending = p.pending_after + after + np.arange(n - 1, -1, -1, dtype=np.int64)
    return pa.Table.from_arrays(
        [
            pa.repeat(pa.scalar(p.stream, pa.string()), n),
            _as(one_chunk(rows["subject"]), pa.string()),
            one_chunk(rows["seq"]),
            pc.divide(ts_ns, 1000).cast(pa.timestamp("us", tz="UTC")),
            ts_ns,
            _as(headers, HEADERS_ARROW),
            _as(data, pa.binary()),
            pa.repeat(pa.scalar(p.consumer, pa.string()), n),
            pa.array(dseq, pa.int64()),
            pa.array(pending, pa.int64()),
        ],
        schema=ARROW_SCHEMA,
    )


def _as(column: pa.Array, type_: pa.DataType) -> pa.Array:
    """``column`` as ``type_``, with no cast where it already is one (pyarrow 26 makes such a
    cast zero-copy; the versions ``pyarrow>=16`` admits are not all checked)."""
    return column if column.type == type_ else column.cast(type_)


def delivered_sizes_of(p: ReadPartition, rows: pa.Table, out: pa.Table) -> np.ndarray:
    """The bytes the server's rate limit charges each of ``rows`` (stored columns, delivered as
    ``out``): subject, ack reply, header block and payload (``push_pacing.delivered_sizes``)."""
    subj = value_lengths(rows["subject"])
    hlen = H.column_encoded_len(rows["headers"])
    ack = ack_reply_lens(p.stream, p.consumer, out["seq"].to_numpy(), out["delivery_seq"].to_numpy(),
                         out["ts_ns"].to_numpy(), out["num_pending"].to_numpy())
    return delivered_sizes(subj, hlen, _payload_sizes(rows), ack, p.headers_only)


def _chunks(
    out: pa.Table, ts_ns: np.ndarray, sizes: np.ndarray, pace: Pace,
    clock: Callable[[], float], sleep: Callable[[float], None],
) -> Iterator[pa.RecordBatch]:
    """Slices of ``out`` each released no earlier than the server would deliver its messages
    from ``pace`` (``Pacer.release``): the first message of a slice when due, with the ones due
    within ``RELEASE_QUANTUM`` after it (released at the last one's time, never early)."""
    n = out.num_rows
    pacer = Pacer(pace)
    ts, sz = ts_ns.tolist(), sizes.tolist()
    i = 0
    while i < n:
        now = clock()
        at, j = now, i
        while j < n and j - i < MAX_BATCH_ROWS:
            t = pacer.release(at, ts[j], sz[j])
            if j > i and t > now + RELEASE_QUANTUM:
                break
            pacer.commit()
            at, j = t, j + 1
        if at > now:
            sleep(at - now)
        yield from out.slice(i, j - i).to_batches(max_chunksize=MAX_BATCH_ROWS)
        i = j


def read_partition(
    p: ReadPartition, clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep
) -> Iterator[pa.RecordBatch]:
    """All record batches of one partition, schema exactly ``ARROW_SCHEMA``.

    Unpaced reads build the output a slice at a time: Spark converts one slice while the
    next is taken, and only the stored rows plus one slice are held at once."""
    if p.pace is not None and p.pace.paced:
        rows = load_messages(p)
        if rows.num_rows == 0:
            return
        out = to_output(p, rows)
        yield from _chunks(out, rows["ts_ns"].to_numpy(), delivered_sizes_of(p, rows, out), p.pace, clock, sleep)
        return
    rows, idx = load_rows(p)
    n = len(idx)
    step = _slice_rows(rows)
    for i in range(0, n, step):
        yield from to_output(p, rows_at(rows, idx[i : i + step]), i, n).to_batches(max_chunksize=step)


def _slice_rows(rows: pa.Table) -> int:
    """Rows per output batch: ``OUTPUT_SLICE_ROWS``, fewer where the messages are large."""
    per_row = rows.nbytes / max(rows.num_rows, 1)
    return max(1, min(OUTPUT_SLICE_ROWS, int(OUTPUT_SLICE_BYTES / max(per_row, 1))))
