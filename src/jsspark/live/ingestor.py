"""The driver-side half of the live source: one NATS connection, one push consumer, a spill
buffer, and acks that never run ahead of Spark's checkpoint.

Design (why each piece is there):

- **Where it runs.** Spark keeps one long-lived Python process per streaming source on the
  driver (``initialOffset``/``latestOffset``/``partitions``/``commit``); ``read()`` runs on
  executors from a pickled copy. So the subscription lives here, on an asyncio loop in a
  background thread, and executors read the spill files (``spill``).
- **Offsets are origin stream sequences** (``{"seq": N}`` = everything delivered with origin
  seq <= N). A batch is (start, end] in origin seqs, so a re-planned or retried batch reads the
  very same messages: nothing above the committed offset is ever acked, so the origin still has
  them and a fresh process re-receives them.
- **What "committed" means.** Spark writes batch N's commit log before it plans batch N+1, and it
  never runs two batches at once. So the ``start`` handed to ``latestOffset``/``partitions`` is
  always an offset Spark has committed (on a restart too: a re-run batch starts at the last
  committed end), and so is ``commit(end)`` (which Spark calls one batch late and never for the
  last ``AvailableNow`` batch). ``floor`` is the max of those; it is the only thing acks follow.
- **Acks** (``ack_policy flow_control``): the consumer acks when we answer its flow-control
  request with ``Nats-Last-Stream``/``Nats-Last-Consumer``. We answer every request at once
  (so delivery never stalls on us) naming the newest message at or below ``floor`` — never a
  higher one — as a (stream seq, delivery seq) pair *of the current delivery generation* (a
  reset restarts delivery seqs at 1, and an old-generation dseq would push the consumer's ack
  floor out of reach). The server asks again on every idle heartbeat while anything is pending,
  so a commit is acked within about a second: never before, always eventually (while the query
  runs; the last AvailableNow batch is acked by the next run's first planning call).
- **Back-pressure**: ``max_ack_pending`` — the server stops delivering once that many messages
  are unacked, which bounds the buffer; memory holds at most ``chunkRows`` rows before a spill.
- **Gaps and restarts**: deliveries must arrive with delivery seq last+1. A jump, or a heartbeat
  whose ``Nats-Last-Consumer`` is not ours, means messages were lost in flight:
  ``$JS.API.CONSUMER.RESET`` (empty body) restarts delivery at the ack floor + 1 with dseq 1;
  origin seqs we already hold are skipped. The same reset binds a fresh process (the durable
  may have delivered far past the ack floor to a process that died), follows a reconnect, and
  breaks a stall (no heartbeat for ``STALL_SECONDS``). A reset made by someone else shows up as
  dseq 1 (or a heartbeat with ``Nats-Last-Consumer: 0``) and just starts a new generation.
  The durable is never deleted (ordered mode, which has no durable, recreates its ephemeral).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from jsspark.live import consumer as C
from jsspark.live.options import LiveReadOptions, redact
from jsspark.live.spill import Chunk, Row, SpillPartition, make_spill_dir, rows_to_batch, write_chunk

log = logging.getLogger(__name__)

STALL_SECONDS = 5.0
ACK_FLUSH_SECONDS = 3.0
# A batch waits for the buffer to fill while messages keep arriving (each Spark batch costs far
# more than the wait): until the batch is full, delivery pauses LINGER_IDLE, or LINGER_MAX passes.
LINGER_IDLE = 0.05
LINGER_MAX = 1.0
PARTITION_ROWS = 100_000  # spill rows per Spark partition at most
LAST_CONSUMER = "Nats-Last-Consumer"
LAST_STREAM = "Nats-Last-Stream"
STALLED = "Nats-Consumer-Stalled"


class LiveSourceError(RuntimeError):
    """The live source cannot go on (bad consumer, server refused, timed out); secrets redacted."""


class _RawHeaders(dict):  # type: ignore[type-arg]
    """nats-py's parsed headers plus the raw block, so repeated keys and order survive."""

    raw: bytes = b""


def _client_class() -> type:
    from nats.aio.client import Client

    class RawHeaderClient(Client):  # type: ignore[misc]
        """nats-py folds headers into a dict (last value wins); keep the wire block too."""

        async def _process_headers(self, headers: bytes) -> dict[str, str] | None:  # type: ignore[override]
            hdr = await super()._process_headers(headers)
            if hdr is None:
                return None
            out = _RawHeaders(hdr)
            out.raw = bytes(headers)
            return out

    return RawHeaderClient


def parse_ack_reply(reply: str) -> tuple[int, int, int, int, int]:
    """(delivery count, stream seq, delivery seq, ts ns, pending) from a ``$JS.ACK`` reply
    (v1: 9 tokens; v2 adds domain and account hash after ``$JS.ACK``), as ``ackReplyInfo``."""
    t = reply.split(".")
    if len(t) == 9:
        i = 4
    elif len(t) >= 11:
        i = 6
    else:
        raise ValueError(f"not a JetStream ack reply: {reply!r}")
    return int(t[i]), int(t[i + 1]), int(t[i + 2]), int(t[i + 3]), int(t[i + 4])


def _pairs(headers: dict[str, str] | None) -> list[tuple[str, str]] | None:
    if not headers:
        return None
    raw = getattr(headers, "raw", b"")
    if raw:
        from jsspark.engine.headers import decode

        return decode(raw)[0] or None
    return list(headers.items())


class Ingestor:
    """One origin stream's deliveries buffered by origin seq; see the module docstring."""

    def __init__(self, opts: LiveReadOptions) -> None:
        self.opts = opts
        self._cv = threading.Condition()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._nc: Any = None
        self._dir: Path | None = None
        self._consumer_name = opts.consumer
        self._deliver = ""
        self._sub: Any = None
        self._watch: asyncio.Task[None] | None = None
        # buffer (guarded by _cv)
        self._chunks: list[Chunk] = []
        self._rows: list[Row] = []
        self._seqs: list[int] = []
        self.floor = 0  # highest origin seq Spark has committed
        self._highest = 0  # highest origin seq this process holds or knows is committed
        # delivery generation (loop thread only, read under _cv)
        self._awaiting = True
        self._last_dseq = 0
        self._gen_pairs: deque[tuple[int, int]] = deque()
        self._last_heard = time.monotonic()
        self._last_msg = 0.0  # when the last message was buffered
        # Heartbeats and flow-control requests seen: the moments an ack could go out, which
        # is what a test of "no ack before commit" has to wait through.
        self.controls_seen = 0
        self._restarting = False
        self._held_fc: str | None = None  # a flow-control request we answer once Spark commits
        self._acked_sseq = 0
        self._acks_flushed = 0  # highest stream seq whose ack reached the server
        self._fatal: BaseException | None = None
        self.last_error: str | None = None
        self.resets = 0

    # -- lifecycle -----------------------------------------------------------------------------
    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self, floor: int | None) -> None:
        """Connect, bind the consumer and start delivery above ``floor`` (``None``: the
        consumer's own position, for a brand-new query)."""
        if self.started:
            return
        self._dir = make_spill_dir(self.opts.spill_dir)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="jsspark-live", daemon=True)
        self._thread.start()
        if floor is not None:
            self.floor = self._highest = floor
        try:
            self._call(self._bind(floor is None), self.opts.wait_timeout)
        except BaseException as e:
            raise LiveSourceError(redact(f"jetstream (live): cannot bind consumer {self.opts.consumer!r} "
                                         f"on stream {self.opts.stream!r}: {e}", self.opts.conn)) from None

    def _call(self, coro: Any, timeout: float) -> Any:
        assert self._loop is not None
        fut: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return fut.result(timeout)

    def stop(self) -> None:
        if self._loop is None:
            return
        if self._watch is not None:
            self._loop.call_soon_threadsafe(self._watch.cancel)
        with contextlib.suppress(Exception):
            self._call(self._nc.close(), 5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread:
            self._thread.join(5)

    def origin_position(self, timeout: float = 5.0) -> dict[str, int]:
        """For query progress: the origin's last seq and, while the consumer exists, its
        ``num_pending`` (matching messages the server has not delivered yet)."""

        async def ask() -> dict[str, int]:
            info = await C.stream_info(self._nc, self.opts.conn, self.opts.stream)
            out = {"seq": int(info["state"]["last_seq"])}
            with contextlib.suppress(Exception):  # an ordered consumer being recreated
                c = await C.js_request(self._nc, self.opts.conn,
                                       f"CONSUMER.INFO.{self.opts.stream}.{self._consumer_name}", None)
                out["num_pending"] = int(c.get("num_pending", 0))
            return out

        return self._call(ask(), timeout)

    async def _bind(self, from_consumer: bool) -> None:
        from jsspark.live.client import open_client

        self._nc = await open_client(self.opts.conn, self.opts.wait_timeout / 2, reconnected_cb=self._on_reconnect,
                                     error_cb=self._on_error)
        if self.opts.mode == "ordered":
            self._deliver = self._nc.new_inbox()
        else:
            self._deliver = C.deliver_subject_for(self.opts)
        self._sub = await self._nc.subscribe(self._deliver, cb=self._on_msg, pending_msgs_limit=-1,
                                             pending_bytes_limit=-1)
        info = await self._restart_delivery(raise_errors=True)
        if from_consumer:
            key = "delivered" if self.opts.mode == "ordered" else "ack_floor"
            with self._cv:
                self.floor = int((info.get(key) or {}).get("stream_seq", 0))
                self._highest = max(self._highest, self.floor)
        self._watch = asyncio.get_running_loop().create_task(self._watchdog())

    async def _restart_delivery(self, raise_errors: bool = False) -> dict[str, Any]:
        """(Re)start delivery above what we hold: reset the durable (or recreate the ordered
        consumer at highest+1). Until dseq 1 arrives, older deliveries are dropped."""
        self._restarting = True
        with self._cv:
            self._awaiting = True
            self._gen_pairs.clear()
            self._last_dseq = 0
            self._acked_sseq = 0
            self._held_fc = None
        try:
            nc, o = self._nc, self.opts
            if o.mode == "ordered":
                if self._consumer_name != o.consumer:
                    with contextlib.suppress(Exception):
                        await C.delete_consumer(nc, o.conn, o.stream, self._consumer_name)
                start = self._highest + 1 if self._highest else None
                info = await C.create_ordered(nc, o, start, self._deliver)
                self._consumer_name = info["name"]
            else:
                if o.mode == "server":
                    C.check_bound(await C.create_durable(nc, o), o)
                info = await C.reset_consumer(nc, o.conn, o.stream, o.consumer)
                C.check_bound(info, o)
            self.resets += 1
            self._last_heard = time.monotonic()
            return info
        except Exception as e:
            self.last_error = redact(str(e), self.opts.conn)
            if raise_errors:
                raise
            from jsspark.errors import APIError

            if isinstance(e, APIError) and e.err_code in (10214, 10215, 10217):
                self._fatal = e
            log.warning("jetstream (live): restarting delivery failed, will retry: %s", self.last_error)
            return {}
        finally:
            self._restarting = False

    def _schedule_restart(self) -> None:
        if not self._restarting:
            self._restarting = True
            asyncio.get_running_loop().create_task(self._restart_delivery())

    async def _on_reconnect(self) -> None:
        self._schedule_restart()

    async def _on_error(self, e: Exception) -> None:
        self.last_error = redact(str(e), self.opts.conn)

    async def _watchdog(self) -> None:
        """Break a stall: no message or heartbeat for STALL_SECONDS while connected."""
        while True:
            await asyncio.sleep(1.0)
            if self._nc.is_connected and time.monotonic() - self._last_heard > STALL_SECONDS:
                self._last_heard = time.monotonic()
                self._schedule_restart()

    # -- deliveries (loop thread) ------------------------------------------------------------
    def _new_generation(self) -> None:
        self._awaiting = False
        self._last_dseq = 0
        self._gen_pairs.clear()
        self._acked_sseq = 0
        self._held_fc = None

    async def _on_msg(self, msg: Any) -> None:
        self._last_heard = time.monotonic()
        hdrs = msg.headers
        if not msg.data and hdrs and hdrs.get("Status") == "100":
            self.controls_seen += 1
            await self._on_control(msg, hdrs)
            return
        try:
            _dc, sseq, dseq, ts, pending = parse_ack_reply(msg.reply or "")
        except ValueError:
            return
        with self._cv:
            if self._awaiting:
                if dseq != 1:
                    return  # still from before our reset
                self._new_generation()
            elif dseq == 1 and self._last_dseq != 0:
                self._new_generation()  # someone reset the consumer
            if dseq != self._last_dseq + 1:
                if dseq > self._last_dseq + 1:
                    self._awaiting = True
                    self._schedule_restart()  # lost in flight: reset, never recreate
                return
            self._last_dseq = dseq
            self._gen_pairs.append((sseq, dseq))
            if sseq <= self._highest:
                return
            self._highest = sseq
            self._last_msg = self._last_heard
            self._rows.append((msg.subject, sseq, ts, _pairs(hdrs), bytes(msg.data), dseq, pending))
            self._seqs.append(sseq)
            if len(self._rows) >= self.opts.chunk_rows:
                self._flush()
                self._last_msg = time.monotonic()  # a spill is no pause in delivery
            self._cv.notify_all()

    async def _on_control(self, msg: Any, hdrs: dict[str, str]) -> None:
        desc = hdrs.get("Description", "")
        if "FlowControl" in desc and msg.reply:
            await self._answer_fc(msg.reply)
            return
        stalled = hdrs.get(STALLED)
        if stalled:
            await self._answer_fc(stalled)
        last_c = int(hdrs.get(LAST_CONSUMER, "0") or 0)
        with self._cv:
            if self._awaiting:
                if last_c == 0 and not self._restarting:
                    self._new_generation()  # reset done, nothing delivered yet
                return
            if last_c == self._last_dseq:
                return
            if last_c == 0:
                self._new_generation()  # someone reset the consumer, nothing delivered yet
                return
            self._awaiting = True
        self._schedule_restart()  # the consumer delivered messages we never saw

    def _ack_pair(self) -> tuple[int, int] | None:
        """The newest (stream seq, delivery seq) of this generation at or below ``floor``."""
        best = None
        while self._gen_pairs and self._gen_pairs[0][0] <= self.floor:
            best = self._gen_pairs.popleft()
        if best is not None:
            self._gen_pairs.appendleft(best)  # keep it: the next request names it again if needed
        return best

    async def _answer_fc(self, subject: str) -> None:
        """Answer a flow-control request, acking up to ``floor``. When it would ack nothing new
        and ``max_ack_pending`` messages are unacked (the server is stalled on them anyway), hold
        it: ``commit`` answers it the moment Spark's checkpoint moves, instead of the server
        asking again on its next heartbeat."""
        headers = None
        pair: tuple[int, int] | None = None
        if self.opts.mode != "ordered":
            with self._cv:
                pair = None if self._awaiting else self._ack_pair()
                nothing_new = pair is None or pair[0] <= self._acked_sseq
                if nothing_new and len(self._gen_pairs) >= self.opts.max_ack_pending:
                    self._held_fc = subject
                    return
                self._held_fc = None
                if pair is not None:
                    self._acked_sseq = max(self._acked_sseq, pair[0])
            if pair is not None:
                headers = {LAST_CONSUMER: str(pair[1]), LAST_STREAM: str(pair[0])}
        await self._nc.publish(subject, b"", headers=headers)
        if headers is not None and pair is not None:
            await self._nc.flush()
            with self._cv:
                self._acks_flushed = max(self._acks_flushed, pair[0])
                self._cv.notify_all()

    async def _answer_held(self) -> None:
        subject = self._held_fc
        if subject is not None:
            self._held_fc = None
            await self._answer_fc(subject)

    # -- the buffer (any thread, under _cv) -----------------------------------------------------
    def _flush(self) -> None:
        if not self._rows:
            return
        assert self._dir is not None
        batch = rows_to_batch(self.opts.stream, self._consumer_name, self._rows)
        self._chunks.append(write_chunk(self._dir, batch))
        self._rows = []

    def _check(self) -> None:
        if self._fatal is not None:
            raise LiveSourceError(redact(f"jetstream (live): {self._fatal}", self.opts.conn))

    def commit(self, seq: int) -> None:
        """Spark has committed everything up to ``seq``: acks may now name it; spill files
        wholly at or below it are no longer needed."""
        with self._cv:
            if seq <= self.floor:
                return
            self.floor = seq
            self._highest = max(self._highest, seq)
            keep = []
            for ch in self._chunks:
                if ch.last <= seq:
                    Path(ch.path).unlink(missing_ok=True)
                else:
                    keep.append(ch)
            self._chunks = keep
            del self._seqs[: bisect.bisect_right(self._seqs, seq)]
            held = self._held_fc is not None
        if held and self._loop is not None:
            asyncio.run_coroutine_threadsafe(self._answer_held(), self._loop)

    def _wait(self, done: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + self.opts.wait_timeout
        probe = 0.0
        with self._cv:
            while not done():
                self._check()
                now = time.monotonic()
                if now >= deadline:
                    raise LiveSourceError(redact(
                        f"jetstream (live): timed out after {self.opts.wait_timeout}s waiting for {what} "
                        f"(holding up to origin seq {self._highest}; last error: {self.last_error})",
                        self.opts.conn))
                if now >= probe:  # cheap local test first, then ask the server now and then
                    self._cv.release()
                    try:
                        caught = self._caught_up()
                    finally:
                        self._cv.acquire()
                    if caught:
                        return
                    probe = time.monotonic() + 0.5
                self._cv.wait(0.1)

    def _caught_up(self) -> bool:
        """The consumer has nothing more to deliver and we hold all it delivered."""
        if self._awaiting:
            return False
        try:
            info = self._call(C.js_request(self._nc, self.opts.conn,
                                           f"CONSUMER.INFO.{self.opts.stream}.{self._consumer_name}", None), 10)
        except Exception:
            return False
        delivered = int((info.get("delivered") or {}).get("consumer_seq", 0))
        with self._cv:
            return int(info.get("num_pending", 1)) == 0 and delivered <= self._last_dseq and not self._awaiting

    def latest(self, start: int, max_rows: int | None, target: int | None) -> int:
        """The end offset of the next batch: the highest buffered origin seq (at most
        ``max_rows`` messages after ``start``, at most ``target``); ``start`` if none yet.

        With an AvailableNow ``target`` it waits (bounded) for *something* above ``start``
        rather than for the whole target: the buffer is bounded by ``max_ack_pending``, so the
        rest only comes once this batch is committed and acked."""
        self.commit(start)
        if target is not None and target > start:
            self._wait(lambda: (bool(self._seqs) and self._seqs[-1] > start) or self._highest >= target,
                       f"messages above origin seq {start} (AvailableNow target {target})")
        self._linger(start, max_rows, target)
        end = self._pick(start, max_rows, target)
        if end > start or target is None:
            return end
        self.flush_acks(ACK_FLUSH_SECONDS)  # the run ends after this call: ack what it committed
        return start

    def _linger(self, start: int, max_rows: int | None, target: int | None) -> None:
        """Let a batch that has begun to arrive fill up: until it holds ``max_rows`` (or the
        ``max_ack_pending`` the server stops at), reaches ``target``, or delivery pauses."""
        full = self.opts.max_ack_pending if max_rows is None else min(max_rows, self.opts.max_ack_pending)
        begin = time.monotonic()  # the ack that commit just sent may only now resume delivery
        deadline = begin + LINGER_MAX
        with self._cv:
            while self._seqs and self._seqs[-1] > start and self._fatal is None:
                now = time.monotonic()
                held = len(self._seqs) - bisect.bisect_right(self._seqs, start)
                if (held >= full or (target is not None and self._highest >= target)
                        or now - max(self._last_msg, begin) >= LINGER_IDLE or now >= deadline):
                    return
                self._cv.wait(LINGER_IDLE / 2)

    def _pick(self, start: int, max_rows: int | None, target: int | None) -> int:
        with self._cv:
            self._check()
            self._flush()
            i = bisect.bisect_right(self._seqs, start)
            j = len(self._seqs) if max_rows is None else min(len(self._seqs), i + max_rows)
            if target is not None:
                j = min(j, bisect.bisect_right(self._seqs, target))
            return self._seqs[j - 1] if j > i else start

    def flush_acks(self, timeout: float) -> bool:
        """Wait (bounded) until the consumer has been acked up to ``floor``. An AvailableNow run
        ends right after this call (its last ``latestOffset`` sees everything committed), and
        the server asks for the ack only at its next flow-control request (within its 1s idle
        heartbeat), so without this wait the run's acks would wait for the next run."""
        if self.opts.mode == "ordered":
            return True
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                pair = None if self._awaiting else self._ack_pair()
                if pair is None or self._acks_flushed >= pair[0]:
                    return True
                if time.monotonic() >= deadline:
                    return False
                self._cv.wait(0.05)

    def plan(self, start: int, end: int) -> list[SpillPartition]:
        """Partitions for (start, end]: waits (bounded) until the buffer covers ``end`` — after
        a restart the batch is re-received from the origin, where nothing above ``start`` was acked."""
        self.commit(start)
        self._wait(lambda: self._highest >= end, f"origin seq {end} to re-read batch ({start}, {end}]")
        with self._cv:
            self._check()
            self._flush()
            chunks = [c for c in self._chunks if c.last > start and c.first <= end]
        # Few, large partitions: each Spark task costs far more than reading a few spill files.
        parts: list[SpillPartition] = []
        group: list[str] = []
        rows = 0
        for c in chunks:
            if group and rows + c.count > PARTITION_ROWS:
                parts.append(SpillPartition(tuple(group), start, end))
                group, rows = [], 0
            group.append(c.path)
            rows += c.count
        if group:
            parts.append(SpillPartition(tuple(group), start, end))
        return parts

