"""JetStream publishes in bulk: a batch's PUB/HPUB frames built as one column and written a window
at a time, their PubAcks read back as columns on one inbox.

Why: a publish through ``nc.request`` costs nats-py about 40 µs of Python (an inbox token, a
future, a ``Msg``, a callback), so the sink topped out near 23,000 msg/s, where one nats-server
stores about 380,000 core publishes a second. Here every message of a batch is one frame of a
binary column (``frame_column``: Arrow joins, no Python per message), a window of them goes to
the connection as one write, and the replies, each addressed ``<inbox>.<row>``, come back through
``wire``'s bulk parser as columns: a PubAck that is plainly one (``{"stream":...}``, no
``"error"``) is counted with numpy, anything else goes through ``client.pub_ack`` one at a time,
so the server's refusals are raised as its own ``APIError``, as before.

What a publish means is unchanged: at most ``max_in_flight`` messages without a reply, each
answered within ``timeout`` (else the batch fails at once, naming the first one not answered),
sending stops at the first failure and the messages under way are waited for, and the first
failure is raised. A connection lost under way loses the frames in its buffer: their replies
never come, and the timeout fails the batch (a retried task re-sends them; their
``Nats-Msg-Id`` drops copies). A timeout counts while a write is under way too (nats-py waits
for a full buffer to drain with no limit, and a stalled server never drains it), and the
connection that timed out is torn down (``client.tear_down``), not drained.

Users: the live sink (``publisher``) and republish's idempotent mode. Core publishes (republish
at most once) stay a row at a time: sent in bulk they outran a stream's ingest queue, which
drops what is over it, where a row at a time stays under the store rate.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jsspark.engine import headers as H
from jsspark.engine.arrays import value_bytes, value_offsets
from jsspark.live import wire
from jsspark.live.client import PublishFailed, pub_ack, tear_down
from jsspark.subjects.vectorized import all_sendable

CHUNK = 4096  # the most messages one write carries (also at most half the window)
SEGMENT_BYTES = 64 << 20  # the frames built at once
_FRAME_EXTRA = 64  # "HPUB", blanks, a row number, two sizes, CRLFs: a bound on what a frame adds
_ACK_START = b'{"stream":'
_NO_RESPONDERS = b"NATS/1.0 503"
_DUPLICATE = r'"duplicate":\s*true'  # the server writes '"duplicate": true' (processJetStreamMsg)


def frame_column(subjects: pa.Array, inbox: str, first: int, blocks: pa.Array, payloads: pa.Array) -> pa.Array:
    """Each message's wire frame (binary): ``PUB <subject> <inbox>.<row> <size>`` or, with a header
    block, ``HPUB <subject> <inbox>.<row> <header size> <size>``, then block, payload and CRLF;
    rows are numbered from ``first``. Subjects must already be valid (``can_send``)."""
    n = len(subjects)
    rows = _decimal(pa.array(np.arange(first, first + n, dtype=np.int64)))
    reply = pc.binary_join_element_wise(inbox.encode() + b".", rows, b" ", b"")
    has = pc.is_valid(blocks)
    hsize = pc.fill_null(pc.binary_length(blocks), 0)
    total = _decimal(pc.add(hsize, pc.binary_length(payloads)))
    verb = pc.if_else(has, pa.scalar(b"HPUB ", pa.binary()), pa.scalar(b"PUB ", pa.binary()))
    hpart = pc.if_else(has, pc.binary_join_element_wise(_decimal(hsize), b" ", b""), pa.scalar(b"", pa.binary()))
    return pc.binary_join_element_wise(verb, subjects.cast(pa.binary()), b" ", reply, hpart, total, b"\r\n",
                                       pc.fill_null(blocks, b""), payloads.cast(pa.binary()), b"\r\n", b"")


def _decimal(numbers: pa.Array) -> pa.Array:
    """Integers as their decimal digits (binary), as a protocol line writes them."""
    return numbers.cast(pa.string()).cast(pa.binary())


def can_send(subjects: pa.Array, headers: pa.Array, blocks: pa.Array, payloads: pa.Array, max_payload: int) -> bool:
    """Whether every message is one nats-py would send as it is: a subject (no null, no blank, tab,
    CR or LF), header names that are tokens (no null, no empty), header block and payload within
    the server's ``max_payload`` (it resets a connection sending more). Else the caller's rows go
    one at a time, which raise each problem's own error at its row."""
    if subjects.null_count or not all_sendable(subjects):
        return False
    entries = pc.list_flatten(headers)
    if len(entries) and not H.names_are_tokens(pc.struct_field(entries, "name")):
        return False
    sizes = pc.add(pc.fill_null(pc.binary_length(blocks), 0), pc.binary_length(payloads))
    return not (max_payload and len(sizes) and pc.max(sizes).as_py() > max_payload)


def client_class(base: type) -> type | None:
    """``base`` reading replies in bulk (``wire``), or None where this nats-py cannot."""
    try:
        return wire.client_class(base)
    except wire.BulkDeliveryUnsupported:
        return None


def segments(subjects: pa.Array, blocks: pa.Array, payloads: pa.Array, inbox_len: int) -> list[tuple[int, int]]:
    """Row ranges whose frames take about ``SEGMENT_BYTES`` at most (a binary column's offsets are
    32-bit, and a batch of large messages is not copied into frames all at once); each at
    least one row."""
    n = len(subjects)
    size = (pc.fill_null(pc.binary_length(blocks), 0).to_numpy(zero_copy_only=False).astype(np.int64)
            + pc.binary_length(payloads).to_numpy(zero_copy_only=False).astype(np.int64)
            + pc.binary_length(subjects).to_numpy(zero_copy_only=False).astype(np.int64) + inbox_len + _FRAME_EXTRA)
    ends = np.cumsum(size)
    out, lo = [], 0
    while lo < n:
        base = int(ends[lo - 1]) if lo else 0
        hi = max(lo + 1, int(np.searchsorted(ends, base + SEGMENT_BYTES, side="right")))
        out.append((lo, min(hi, n)))
        lo = hi
    return out


async def send_frames(nc: Any, frames: pa.Array, lo: int, hi: int) -> None:
    """Frames ``lo``..``hi`` of ``frame_column``'s column to the connection, as one write."""
    offsets = value_offsets(frames)
    await nc._send_command(frames.buffers()[2][int(offsets[lo]):int(offsets[hi])].to_pybytes())
    await nc._flush_pending()


def no_stream(subject: str) -> BaseException:
    """The sink's error for a publish no stream captures (the server's 503 no responders)."""
    return PublishFailed(f"no JetStream stream captures subject {subject!r} on the server (no responders)")


class AckWindow:
    """The replies of one bulk publish: which rows are answered, what they said, and when each
    was sent (for the timeout). ``take`` runs in the client's read loop."""

    def __init__(self, subjects: pa.Array, inbox: str, no_responders: Callable[[str], BaseException]) -> None:
        n = len(subjects)
        self.no_responders = no_responders
        self.subjects, self.prefix = subjects, len(inbox) + 1
        self.answered = np.zeros(n, bool)
        self.sent_at = np.zeros(n, np.float64)
        self.done = self.published = self.duplicates = 0
        self.failure: BaseException | None = None
        self.timed_out = False  # a message went unanswered past the timeout
        self.low = 0  # every row below this is answered
        self.changed = asyncio.Event()

    def take(self, frames: wire.Frames) -> None:
        rows = self._rows(frames.subjects)
        n = len(self.answered)
        fresh = (rows >= 0) & (rows < n)
        fresh[fresh] = ~self.answered[rows[fresh]]
        if not fresh.all():
            keep = pa.array(fresh)
            frames = wire.Frames(frames.sid, frames.subjects.filter(keep), frames.replies.filter(keep),
                                 frames.headers.filter(keep), frames.payloads.filter(keep))
            rows = rows[fresh]
        if not len(rows):
            return
        payloads = frames.payloads
        plain = pc.and_(pc.starts_with(payloads, _ACK_START),
                        pc.invert(pc.match_substring(payloads, '"error"')))
        plain = pc.and_(plain, pc.is_null(frames.headers)).to_numpy(zero_copy_only=False)
        self.answered[rows] = True
        self.done += len(rows)
        acks = payloads if plain.all() else payloads.filter(pa.array(plain))
        self.published += len(acks)
        self.duplicates += int(pc.sum(pc.match_substring_regex(acks, _DUPLICATE)).as_py() or 0)
        for i in np.flatnonzero(~plain).tolist():
            self._one(int(rows[i]), frames.headers[i].as_py(), payloads[i].as_py())
        while self.low < n and self.answered[self.low]:
            self.low += 1
        self.changed.set()

    def _rows(self, subjects: pa.Array) -> np.ndarray:
        """The row each reply subject ``<inbox>.<row>`` names (-1 for one that names none)."""
        raw, offsets = value_bytes(subjects), value_offsets(subjects)
        if raw is None or offsets is None or not len(subjects):
            return np.full(len(subjects), -1, np.int64)
        base = offsets[0]
        value, ok = wire.decimals(raw, offsets[:-1] - base + self.prefix, offsets[1:] - base)
        return np.where(ok, value, -1)

    def _one(self, row: int, header: bytes | None, payload: bytes) -> None:
        """A reply that is not plainly a PubAck: the server's no responders, its refusal, or a core
        subscriber's answer (``pub_ack``'s errors); the first failure is kept."""
        subject = self.subjects[row].as_py()
        try:
            if header is not None and header.startswith(_NO_RESPONDERS):
                raise self.no_responders(subject)
            ack = pub_ack(subject, payload)
        except Exception as e:
            if self.failure is None:
                self.failure = e
            return
        self.published += 1
        self.duplicates += bool(ack.get("duplicate"))

    def overdue(self, timeout: float, sent: int) -> BaseException | None:
        """A failure naming the first message sent and not answered within ``timeout``, if any."""
        if self.low < sent and time.monotonic() - self.sent_at[self.low] > timeout:
            subject = self.subjects[self.low].as_py()
            return PublishFailed(f"no PubAck for a publish to {subject!r} within publishTimeout ({timeout:g} s)")
        return None

    def _due(self, timeout: float, sent: int) -> float:
        """Seconds until the first unanswered message is due (``timeout`` while none is)."""
        due = self.sent_at[self.low] + timeout - time.monotonic() if self.low < sent else timeout
        return max(due, 0.0) + 0.001

    def _raise_overdue(self, timeout: float, sent: int) -> None:
        late = self.overdue(timeout, sent)
        if late is not None:
            self.timed_out = True
            raise late

    async def wait(self, timeout: float, sent: int) -> None:
        """Until a reply comes, or the first unanswered message is due; raises ``overdue``'s error."""
        self.changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.changed.wait(), self._due(timeout, sent))
        self._raise_overdue(timeout, sent)

    async def write(self, writing: asyncio.Future[None], timeout: float, sent: int) -> None:
        """Until ``writing`` (``send_frames``) ends, or the first unanswered message is due;
        raises ``overdue``'s error. Past its max pending size nats-py waits for its buffer to
        drain with no time limit, and a stalled server never drains it."""
        while not writing.done():
            await asyncio.wait({writing}, timeout=self._due(timeout, sent))
            if not writing.done():
                self._raise_overdue(timeout, sent)
        writing.result()


async def publish_columns(nc: Any, subjects: pa.Array, blocks: pa.Array, payloads: pa.Array, max_in_flight: int,
                          timeout: float, no_responders: Callable[[str], BaseException] = no_stream) -> tuple[int, int]:
    """Publish one message per row (subject, header block or null, payload) with a PubAck each,
    at most ``max_in_flight`` unanswered; (published, duplicates). ``nc``: a client of
    ``client_class``; every message one ``can_send`` passed. ``no_responders``: the error for a
    subject no stream captures."""
    n = len(subjects)
    if not n:
        return 0, 0
    inbox = nc.new_inbox()
    window = AckWindow(subjects, inbox, no_responders)
    sub = await nc.subscribe(f"{inbox}.*", cb=_ignore, pending_msgs_limit=-1, pending_bytes_limit=-1)
    wire.route(nc, sub, window.take)
    writing: asyncio.Future[None] | None = None
    try:
        step = max(1, min(CHUNK, max_in_flight // 2))
        sent = 0
        for lo, hi in segments(subjects, blocks, payloads, len(inbox)):
            frames = frame_column(subjects.slice(lo, hi - lo), inbox, lo, blocks.slice(lo, hi - lo),
                                  payloads.slice(lo, hi - lo))
            while sent < hi and window.failure is None:
                room = max_in_flight - (sent - window.done)
                if room <= 0:
                    await window.wait(timeout, sent)
                    continue
                k = min(room, step, hi - sent)
                window.sent_at[sent:sent + k] = time.monotonic()
                writing = asyncio.ensure_future(send_frames(nc, frames, sent - lo, sent - lo + k))
                sent += k
                await window.write(writing, timeout, sent)
            if window.failure is not None:
                break
        while window.done < sent:  # what is under way is answered (or times out) before anything is raised
            try:
                await window.wait(timeout, sent)
            except PublishFailed:
                if window.failure is None:
                    raise
                break
        if window.failure is not None:
            raise window.failure
        return window.published, window.duplicates
    finally:
        wire.route(nc, sub, None)
        if window.timed_out:  # a server that answers nothing may read nothing: not drained, torn down
            await tear_down(nc, [writing] if writing is not None else [])
        with contextlib.suppress(Exception):  # the connection is gone: nothing to unsubscribe from
            await sub.unsubscribe()


async def _ignore(msg: Any) -> None:
    """nats-py's callback for the reply subscription: replies go to ``AckWindow.take`` in bulk."""
