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
  runs; the last AvailableNow batch is acked by the next run's first planning call). One
  exception to answering at once: a request that would ack nothing while the server is at or
  near ``max_ack_pending`` is held, and answered with the ack the moment the batch is safe
  (``_answer_fc``): the server sends no other request while one is outstanding.
- **Acks from the landing sink** (jobs: rows by reference, ``spillReferences``): Spark commits
  a batch to its source only when it plans the next one, so with ``max_ack_pending`` reached
  delivery would wait for that planning, every batch. Once its Delta commit holds a batch, the
  landing sink writes the batch's end seq into this reader's (local) spill directory
  (``spill.mark_landed``); acks may name it at once (a held flow-control request looks for
  it every ``LANDED_POLL``). A batch Spark runs again after a crash between that commit and
  its commit log finds those messages acked: the origin does not deliver them again, the
  batch plans no rows, and the sink's txn skips it anyway (``lake_sink``). Spill files still
  go only when Spark commits.
- **Pacing** (``minMessagesPerTrigger``/``maxTriggerDelay``, which jobs set for an interval
  trigger and run with a 0 s one): ``latestOffset`` holds a batch that is not full until the
  delay has passed since the last batch, so a durable stalled at ``max_ack_pending`` goes on
  the moment its window is acked, while a trickle still makes one commit per interval.
- **A batch's size**: at most ``maxBytesPerTrigger`` of stored bytes (64 MiB by default; the
  server's count, as the lake source's) and ``maxMessagesPerTrigger`` messages, at least one
  message: a job's landing holds its batch in the driver's memory. ``_upto`` keeps the bytes
  held per sequence, so ``latest`` cuts the batch there; the end it returns goes to Spark's
  offset log, so a retried batch reads (start, end] again without measuring anything. A batch
  full by bytes is full for the pacing too (a job's ``minMessagesPerTrigger`` is ``max_ack_pending``).
- **Back-pressure**: ``max_ack_pending`` — the server stops delivering once that many messages
  are unacked, which bounds the buffer; memory holds about ``chunkRows`` rows before a spill
  (one read's deliveries are taken whole), or ``CHUNK_BYTES`` of payloads and headers, whichever
  comes first (5,000 messages of 1 MiB would be 5 GiB), and a spill file at most ``chunkRows`` rows.
  On an object store a spill file is put in the background (a put is a network round trip per
  ``chunkRows`` messages, which would pause delivery each time): a spill starts when fewer than
  ``MAX_PUTS`` are under way, their rows held until the put succeeded; a batch is planned only
  over files that are there.
- **Gaps and restarts**: deliveries must arrive with delivery seq last+1. A jump, or a heartbeat
  whose ``Nats-Last-Consumer`` is not ours, means messages were lost in flight:
  ``$JS.API.CONSUMER.RESET`` (empty body) restarts delivery at the ack floor + 1 with dseq 1;
  origin seqs we already hold are skipped. The same reset binds a fresh process (the durable
  may have delivered far past the ack floor to a process that died), follows a reconnect, and
  breaks a stall (no heartbeat for ``STALL_SECONDS``). A reset made by someone else shows up as
  dseq 1 (or a heartbeat with ``Nats-Last-Consumer: 0``) and just starts a new generation.
  The durable is never deleted (ordered mode, which has no durable, recreates its ephemeral).
- **The origin deleted and created again**: its sequences start over, so every restart of
  delivery first asks ``STREAM.INFO`` whether the origin is still the stream (its creation time)
  the reader holds sequences of (``_same_origin``), and a start compares the checkpoint's origin
  (``start(origin=)``): another one fails with ``DataLossError``, or (``failOnDataLoss=false``)
  the reader drops what it held and reads the new stream from its start (``_recreated``). A
  deleted origin is waited for. In user mode a delivery generation we did not start (the
  operator's new durable of that name delivers on its own) waits for our restart's check
  (``_foreign_generation``).
- **An ack that crosses someone else's reset**: an answer to a flow-control request sent just
  before that reset can reach the server just after it (a reset leaves the request
  outstanding, so the server takes the answer's ack). It names a delivery seq of the old
  generation, and the server then drops every ack of the new one up to that seq: at
  ``max_ack_pending`` it delivers nothing more, for good (the crash tests' external resets hit
  it). It names only committed messages, so nothing is lost, but the durable must be made
  whole: every ``STALL_SECONDS`` while no delivery comes, the reader asks for the durable's
  info; an ack floor below an ack of this generation that reached the server, or more pending
  than delivered above the ack floor (``consumer.acks_out_of_order``), seen twice in a row,
  gets our own reset (``_check_acks``).
- **Acked but still stored (WorkQueue origins)**: an ack removes the messages it covers one by
  one, newest first, after the consumer's ack floor has moved. A nats-server killed during that
  comes back with the ack floor and the oldest of those messages still stored. A clustered
  server removes them within its periodic ``checkInterestState``; a standalone one never does
  (its startup ``checkForOrphanMsgs`` and the reset's clean-up run for Interest streams only),
  so the WorkQueue would keep them for good. So each (re)start on a WorkQueue looks for
  the durable's oldest stored message; at or below its ack floor, the reset goes back there
  instead: the server delivers them again, the reader skips them (they are at or below what it
  holds) and its next ack removes them (``_orphans``). The same look runs every
  ``STALL_SECONDS`` while no delivery comes (``_check_acks``): a reset by someone else can strand
  messages below the ack floor too (those an ack that crossed an earlier reset left pending).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jsspark.datasource.options import OptionError
from jsspark.datasource.pacing import TriggerPacing
from jsspark.datasource.partition import DataLossError
from jsspark.datasource.redaction import redact_storage
from jsspark.engine.headers import HEADER_LINE
from jsspark.engine.headers import decode as decode_headers
from jsspark.engine.headers import repaired as repaired_headers
from jsspark.engine.schema import stored_size, stored_sizes, value_lengths
from jsspark.errors import APIError
from jsspark.live import consumer as C
from jsspark.live import wire
from jsspark.live.client import client_class, open_client
from jsspark.live.options import LiveReadOptions, redact
from jsspark.live.spill import (
    Chunk,
    Pending,
    SpillDir,
    SpillPartition,
    describe,
    header_cells,
    make_spill_dir,
    put_chunk,
    write_chunk,
)
from jsspark.subjects import subject_text

log = logging.getLogger(__name__)

STALL_SECONDS = 5.0
# Resets after acks it did not take, its ack floor never moving, before the reader gives up:
# the acks do not reach the server at all (an external origin's account without $JS.FC.>).
ACKS_LOST_RESETS = 3
# The look for acked messages still stored (_orphans) is an extra on each bind: a request the
# user may not be permitted (answered by nothing) must not hold the bind for long.
LOOKUP_TIMEOUT = 5.0
# That look unanswered (a cluster electing the stream's leader) is made again at the next restart
# or check; this many times in a row and it is given up, as a refused one is at once.
ORPHAN_LOOK_TIMEOUTS = 3
ACK_FLUSH_SECONDS = 3.0
# The server's texts nats.go counts as auth errors (``isAuthError``): the same one twice in a row
# on reconnects and it gives up (``processAuthError``), as the reader does (``_on_error``).
AUTH_REFUSALS = ("authorization violation", "user authentication expired", "user authentication revoked",
                 "account authentication expired")
LANDED_POLL = 0.01  # how often a held flow-control request looks for the landing sink's mark
# A batch waits for the buffer to fill while messages keep arriving (each Spark batch costs far
# more than the wait): until the batch is full, delivery pauses LINGER_IDLE, or LINGER_MAX passes.
LINGER_IDLE = 0.05
LINGER_MAX = 1.0
PARTITION_ROWS = 100_000  # spill rows per Spark partition at most
# The buffer spills once its payloads and headers reach this many bytes, before ``chunkRows``
# rows: large messages (up to the server's max_payload, 8 MiB) are held a spill file's worth at most.
CHUNK_BYTES = 64 << 20
# By reference, a task only emits a sequence per message (the landing commit reads the files):
# splitting a batch buys nothing, and each task costs a Python worker round trip in each stage.
REFERENCE_PARTITION_ROWS = 10_000_000
# Spill files being put on an object store at once; the delivery thread waits for a free slot.
MAX_PUTS = 4
PUT_RETRY_SECONDS = 1.0  # a failed put is tried again this much later (at once when a batch needs it)
ACK_PREFIX = b"$JS.ACK."
CONTROL_STATUS = b"NATS/1.0 100"
LAST_CONSUMER = "Nats-Last-Consumer"
LAST_STREAM = "Nats-Last-Stream"
STALLED = "Nats-Consumer-Stalled"


class LiveSourceError(RuntimeError):
    """The live source cannot go on (bad consumer, server refused, timed out); secrets redacted."""


def same_stream(a: str | None, b: str | None) -> bool:
    """Whether two origin keys (``Ingestor.origin``) name the same origin stream: the same
    identity (its creation time, hashed), as the lake source compares table ids. An offset
    written before offsets carried an origin, or an identity the reader could not learn
    (``nats-unknown``), cannot tell: taken as the same."""
    from jsspark.datasource.planning import Origin

    if not a or not b:
        return True
    ta, tb = Origin.parse(a).table_id, Origin.parse(b).table_id
    return ta == tb or UNKNOWN_IDENTITY in (ta, tb)


UNKNOWN_IDENTITY = "nats-unknown"


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


async def _ignore(msg: Any) -> None:
    """nats-py's callback for the delivery subscription: deliveries go to ``wire`` in bulk."""


class _Put:
    """A spill file being put on an object store. Its rows stay here until the put succeeded;
    a failed put keeps them, with the (redacted) error, to be tried again."""

    __slots__ = ("batch", "error", "future", "retry_at")

    def __init__(self, batch: pa.RecordBatch, future: Future[str]) -> None:
        self.batch, self.future = batch, future
        self.error: str | None = None
        self.retry_at = 0.0


class Ingestor:
    """One origin stream's deliveries buffered by origin seq; see the module docstring."""

    # Deliveries in bulk from the client's parser (``wire``); a subclass that needs every
    # delivery as a nats-py ``Msg`` (``_on_msg``) sets this False.
    _bulk = True
    # The durable can be reset by someone else (the reset API, 2.14+), so acks can reach it out
    # of order (_check_acks).
    _resettable = True

    def __init__(self, opts: LiveReadOptions) -> None:
        self.opts = opts
        self._cv = threading.Condition()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._nc: Any = None
        self._dir: SpillDir | None = None
        self._spill_retry = 0.0  # after a failed spill write (loop thread): when to try again
        self._consumer_name = opts.consumer
        self._deliver = ""
        self._sub: Any = None
        self._watch: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()  # flow-control answers and restarts under way
        # buffer (guarded by _cv)
        self._chunks: list[Chunk] = []  # spill files in origin seq order, those still being put too
        self._puts: dict[str, _Put] = {}  # chunk path -> its put on an object store, until it succeeded
        self._rows = Pending()
        self._seqs: list[int] = []
        # Stored bytes (the server's count, as the lake source's ``size``) of everything held up to
        # and including ``_seqs[k]``, counted from ``_bytes_base``: what ``maxBytesPerTrigger`` cuts by
        self._upto: list[int] = []
        self._bytes_base = 0  # what ``_upto`` counted of messages no longer held
        self.floor = 0  # highest origin seq Spark has committed
        self._landed = 0  # highest origin seq a landing sink's Delta commit holds (spill.mark_landed)
        self._landed_watch: asyncio.Task[None] | None = None
        self._highest = 0  # highest origin seq this process holds or knows is committed
        # delivery generation (loop thread only, read under _cv)
        self._awaiting = True
        self._last_dseq = 0
        # (stream seqs, first delivery seq) of this generation's deliveries not known to be
        # acked, delivery seqs consecutive within each entry; _gen_count counts them all
        self._gen_pairs: deque[tuple[np.ndarray, int]] = deque()
        self._gen_count = 0
        self._last_heard = time.monotonic()
        self._last_msg = 0.0  # when the last message was buffered
        self._pacing = TriggerPacing(opts.max_trigger_delay)  # minMessagesPerTrigger / maxTriggerDelay
        # Heartbeats and flow-control requests seen: the moments an ack could go out, which
        # is what a test of "no ack before commit" has to wait through.
        self.controls_seen = 0
        self._restarting = False
        self._restart_ended = 0.0  # when the last restart of delivery ended, well or not (monotonic)
        self._held_fc: str | None = None  # a flow-control request we answer once Spark commits
        self._fc_dseq = 0  # the delivery seq a flow-control request last came after (loop thread)
        self._acked_sseq = 0
        self._acks_flushed = 0  # highest stream seq whose ack reached the server
        self._generation = 0  # counts delivery generations (_clear_pairs)
        self._gen_flushed = 0  # highest stream seq whose ack reached the server in this generation
        self._acks_suspect = 0  # the generation _check_acks last found needing a reset (0: none)
        self._acks_lost: tuple[int, int] = (-1, 0)  # ack floor at the last reset for acks not taken, resets in a row
        self._fatal: BaseException | None = None
        self.last_error: str | None = None
        self._refused: str | None = None  # the auth error the last reconnect got (_on_error)
        self.resets = 0
        self.orphan_resets = 0  # resets back to acked messages a WorkQueue still stores (_orphans)
        self._orphan_timeouts = 0  # looks for them unanswered in a row (_oldest_stored)
        self.ack_repairs = 0  # resets after an ack out of order or messages stranded (_check_acks)
        self._workqueue: bool | None = None  # the origin's retention is workqueue (asked once)
        self._retention: str | None = None  # the origin's retention, if STREAM.INFO told it (_learn_origin)
        self._first_seq: int | None = None  # the origin's first seq at the last STREAM.INFO (_check_removed)
        self._gaps: list[tuple[int, int]] = []  # (held, next delivered) origin seqs to check (_check_gaps)
        self._gap_check = False  # a _check_gaps is under way (loop thread)
        self._server_acked = 0  # the durable's ack floor at the last restart of delivery: committed (_check_removed)
        self.origin = ""  # this reader's origin key for its offsets, once bound (_learn_origin)
        self._unbound = False  # the last restart of delivery failed: a dseq 1 now is no reset of ours
        self._from_consumer = False  # the next restart of delivery takes floor from the consumer (_bind)
        self._landed_off = False  # a landing sink's marks name an earlier stream of this name (_forget)

    # -- lifecycle -----------------------------------------------------------------------------
    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self, floor: int | None, origin: str | None = None) -> None:
        """Connect, bind the consumer and start delivery above ``floor`` (``None``: the
        consumer's own position, for a brand-new query). ``origin``: the origin key the
        checkpoint's offset carries; another stream of this name (deleted and created again
        since) fails with ``DataLossError``, or with ``failOnDataLoss=false`` is read from its
        start (``_recreated``)."""
        if self.started:
            return
        try:
            self._dir = make_spill_dir(self.opts.spill_dir, self.opts.storage_options)
        except Exception as e:
            raise LiveSourceError(self._redact(f"jetstream (live): cannot create the spill directory under "
                                               f"spillDir {self.opts.spill_dir!r}: {describe(e)}")) from None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="jsspark-live", daemon=True)
        self._thread.start()
        if floor is not None:
            self.floor = self._highest = floor
        try:
            self._call(self._bind(floor is None, origin), self.opts.wait_timeout)
        except (DataLossError, OptionError):
            raise
        except BaseException as e:
            what = ("cannot create an ordered consumer" if self.opts.mode == "ordered" else
                    f"cannot bind consumer {self.opts.consumer!r}")
            raise LiveSourceError(redact(f"jetstream (live): {what} on stream {self.opts.stream!r}: {e}",
                                         self.opts.conn)) from None

    def _call(self, coro: Any, timeout: float) -> Any:
        if self._loop is None:
            coro.close()
            raise LiveSourceError(f"jetstream (live): the reader of stream {self.opts.stream!r} is stopped")
        fut: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return fut.result(timeout)

    def _redact(self, text: str) -> str:
        """``text`` without the connection's secrets nor the spill's storage secrets."""
        return redact_storage(redact(text, self.opts.conn), self.opts.storage_options)

    def stop(self) -> None:
        """Close the connection and the loop; again, nothing more (the loop is gone)."""
        loop = self._loop
        if loop is None:
            return
        with contextlib.suppress(Exception):
            self._call(self._shutdown(), 10)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread:
            self._thread.join(5)
        self._loop = None
        if self._thread is None or not self._thread.is_alive():
            loop.close()  # its selector's file descriptors, now rather than at garbage collection
        if self._dir is not None:
            # what is still spilled belongs to no committed batch: a new reader re-receives it
            self._dir.close()

    async def _shutdown(self) -> None:
        """The watchers first (a closing connection is no reason to restart delivery), then
        the connection (what is published goes out), then any flow-control answer still under
        way: one awaiting its flush's PONG would otherwise stay pending on a stopped loop, and
        asyncio reports each such task as destroyed while pending."""
        for task in (self._watch, self._landed_watch):
            if task is not None:
                task.cancel()
        try:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._nc.close(), 5)
        finally:
            under_way = list(self._tasks)
            for task in under_way:
                task.cancel()
            await asyncio.gather(*under_way, return_exceptions=True)

    def origin_position(self, timeout: float = 5.0) -> dict[str, int]:
        """For query progress: the origin's last seq and, while the consumer exists, its
        ``num_pending`` (matching messages the server has not delivered yet)."""

        async def ask() -> dict[str, int]:
            info = await C.stream_info(self._nc, self.opts.conn, self.opts.stream)
            out = {"seq": int(info["state"]["last_seq"])}
            with contextlib.suppress(Exception):  # an ordered consumer being recreated
                c = await C.consumer_info(self._nc, self.opts.conn, self.opts.stream, self._consumer_name)
                out["num_pending"] = int(c.get("num_pending", 0))
            return out

        return self._call(ask(), timeout)

    async def _bind(self, from_consumer: bool, origin: str | None = None) -> None:
        deadline = time.monotonic() + self.opts.wait_timeout
        cls = wire.client_class(client_class()) if self._bulk else client_class()
        self._nc = await open_client(self.opts.conn, self.opts.wait_timeout / 2, cls,
                                     reconnected_cb=self._on_reconnect, error_cb=self._on_error)
        if self.opts.mode != "ordered":  # an ordered consumer gets a new inbox at each (re)creation
            await self._subscribe(C.deliver_subject_for(self.opts))
        await self._learn_origin(deadline)
        self._check_ordered()
        if not same_stream(origin, self.origin):
            with self._cv:
                held = self.floor
            self._recreated(origin or "", self.origin, held)
            from_consumer = True
        self._from_consumer = from_consumer
        while True:
            try:
                await self._restart_delivery(raise_errors=True)
                break
            except TimeoutError:
                # A clustered consumer answers a reset from its leader only, once applied: one
                # sent as the leader changes (or just after the durable's creation) gets no
                # answer. Asked again, as a running reader does, while waitTimeout allows.
                if time.monotonic() + C.REQUEST_TIMEOUT >= deadline:
                    raise
                log.warning("jetstream (live): binding consumer %s on %s: no answer (%s); asking again",
                            self.opts.consumer, self.opts.stream, self.last_error)
        self._watch = asyncio.get_running_loop().create_task(self._watchdog())

    def _check_ordered(self) -> None:
        """``consumerMode ordered`` reads without acks, so only a Limits origin keeps what it
        delivered until Spark commits it: an Interest stream removes a message once delivered to
        an AckNone consumer that is its only interest (a failed batch would lose it), and a
        WorkQueue refuses such a consumer (10098). Refused before anything is created."""
        if self.opts.mode != "ordered" or self._retention in (None, "limits"):
            return
        raise OptionError(
            f"jetstream (live): consumerMode ordered reads without acks, but stream {self.opts.stream} has retention "
            f"{self._retention}: " + ("the server removes each message once delivered to a consumer without acks, "
                                      "before Spark commits it, so a failed batch would lose it"
                                      if self._retention == "interest" else
                                      "the server refuses a consumer without acks on it (10098)")
            + "; use consumerMode server (or user), which acks only what Spark committed")

    def _take_position(self, info: dict[str, Any]) -> None:
        """After a new query's bind, or a restart on a new stream of this name: ``floor`` is the
        consumer's own position (``info``: its answer to the reset or creation)."""
        if not self._from_consumer:
            return
        key = "delivered" if self.opts.mode == "ordered" else "ack_floor"
        with self._cv:
            self.floor = int((info.get(key) or {}).get("stream_seq", 0))
            self._highest = max(self._highest, self.floor)
        self._from_consumer = False

    def _recreated(self, old: str, new: str, after: int) -> None:
        """The origin stream is another one of this name (deleted and created again): its
        sequences start over, so what this reader holds or Spark committed says nothing about
        it, and skipping (and acking) the new stream's messages at or below ``after`` would lose
        them. As the lake source (``planning.recreated``): ``DataLossError`` naming both
        identities, or with ``failOnDataLoss=false`` the new stream from its start (the
        consumer's own position, as for a new query), with a warning."""
        from jsspark.datasource.planning import Origin

        what = (f"jetstream (live): stream {self.opts.stream} was deleted and created again (the reader's offsets "
                f"are on origin {Origin.parse(old).table_id if old else '?'}, the stream is now "
                f"{Origin.parse(new).table_id})")
        if self.opts.fail_on_data_loss:
            raise DataLossError(f"{what}: what the old stream held after sequence {after} is lost, and the new "
                                "stream's sequences start over. Start the query with a new checkpoint, or set "
                                "failOnDataLoss=false to read the new stream from its start.")
        log.warning("%s; failOnDataLoss=false: reading the new stream from its start (what this reader held of "
                    "the old one and Spark had not committed is dropped)", what)
        self._forget()
        self.origin = new

    def _forget(self) -> None:
        """Drop everything held of an earlier origin stream (``_recreated``); a landing sink's
        marks name its sequences, so acks follow Spark's commits only from here on."""
        with self._cv:
            done = [c.path for c in self._chunks]
            self._chunks, self._puts, self._rows, self._seqs, self._upto = [], {}, Pending(), [], []
            self.floor = self._highest = self._landed = self._server_acked = 0
            self._landed_off = True
            self._awaiting = True
            self._cv.notify_all()
        if done and self._dir is not None:
            self._dir.delete(done)

    def _origin_key(self, identity: str) -> str:
        from jsspark.datasource.planning import Origin
        from jsspark.live.snapshot import filters_of

        durable = None if self.opts.mode == "ordered" else self.opts.consumer
        return Origin.of(self.opts.stream, f"nats-{identity}", durable, filters_of(self.opts)).key

    async def _same_origin(self) -> bool:
        """Before a running reader restarts delivery: is the origin still the stream it reads?
        Deleted (``10059``): no, for now; delivery is tried again every ``STALL_SECONDS``, as the
        server's sourcing retries, with a warning each time (nothing is lost while it waits; a
        stream created again then meets ``_recreated``). Created again: ``_recreated``."""
        from jsspark.engine.sourcing import server_hash

        if self.origin.split(".", 3)[1:2] == [UNKNOWN_IDENTITY]:
            return True  # not permitted STREAM.INFO: cannot tell (_learn_origin)
        try:
            info = await C.stream_info(self._nc, self.opts.conn, self.opts.stream, LOOKUP_TIMEOUT)
        except APIError as e:
            if e.err_code != 10059:
                raise
            self.last_error = self._redact(f"stream {self.opts.stream} not found (10059): deleted")
            log.warning("jetstream (live): origin stream %s was deleted; waiting for it (a stream created again "
                        "under this name fails the query with DataLossError, or with failOnDataLoss=false is "
                        "read from its start)", self.opts.stream)
            return False
        self._first_seq = int((info.get("state") or {}).get("first_seq", 0)) or None
        new = self._origin_key(server_hash(str(info.get("created"))))
        if not same_stream(self.origin, new):
            with self._cv:
                held = self.floor
            self._recreated(self.origin, new, held)
            self._from_consumer = True
        return True

    async def _learn_origin(self, deadline: float) -> None:
        """``origin``: this reader's origin key (``datasource.planning.Origin``), which its offsets
        carry for a sink's per-origin mark. The origin stream, told from another of its name (on
        another server, or deleted and created again) by its identity (its creation time, hashed),
        and the consumer (a durable's name; an ordered consumer's filters). The same
        ``STREAM.INFO`` gives the retention. A user allowed only the consumer API gets identity
        ``unknown`` (``_oldest_stored`` then finds out the retention, and says it cannot); one
        unanswered is asked again until ``deadline`` nears (the bind's ``waitTimeout``)."""
        from jsspark.engine.sourcing import server_hash

        identity, info = "unknown", None
        while info is None:
            try:
                info = await C.stream_info(self._nc, self.opts.conn, self.opts.stream, LOOKUP_TIMEOUT)
            except TimeoutError:
                # Unanswered: on a cluster, while the origin's stream leader is elected (the consumer
                # API, answered by the consumer's leader, may answer meanwhile). Asked again while the
                # bind's waitTimeout leaves room, unless the server said the user may not ask.
                if self._denied() or time.monotonic() + LOOKUP_TIMEOUT + C.REQUEST_TIMEOUT >= deadline:
                    break
            except Exception:  # refused otherwise: the identity stays unknown
                break
        if info is not None:
            self._first_seq = int((info.get("state") or {}).get("first_seq", 0)) or None
            self._retention = str((info.get("config") or {}).get("retention", "limits"))
            self._workqueue = self._retention == "workqueue"
            if info.get("created"):
                identity = server_hash(str(info["created"]))
        self.origin = self._origin_key(identity)

    async def _subscribe(self, deliver: str) -> None:
        """Take deliveries on ``deliver`` (instead of the subject taken so far, if any)."""
        old = self._sub
        self._deliver = deliver
        # Deliveries reach _on_frames in bulk (wire); nats-py's callback only sees what arrived
        # before the route was set, all of it from before our reset or creation, so dropped anyway.
        self._sub = await self._nc.subscribe(deliver, cb=_ignore if self._bulk else self._on_msg,
                                             pending_msgs_limit=-1, pending_bytes_limit=-1)
        if self._bulk:
            wire.route(self._nc, self._sub, self._on_frames)
        if old is not None:
            if self._bulk:
                wire.route(self._nc, old, None)
            with contextlib.suppress(Exception):
                await old.unsubscribe()

    async def _restart_delivery(self, raise_errors: bool = False) -> dict[str, Any]:
        """(Re)start delivery above what we hold: reset the durable (or recreate the ordered
        consumer at highest+1). Until dseq 1 arrives, older deliveries are dropped."""
        self._restarting = True
        with self._cv:
            self._awaiting = True
            self._clear_pairs()
            self._last_dseq = 0
            self._fc_dseq = 0
            self._acked_sseq = 0
            self._held_fc = None
        try:
            nc, o = self._nc, self.opts
            if not raise_errors and not await self._same_origin():
                self._unbound = True
                return {}
            self._unbound = False  # the reset's first deliveries can come before its answer
            if o.mode == "ordered":
                if self._consumer_name != o.consumer:
                    with contextlib.suppress(Exception):
                        await C.delete_consumer(nc, o.conn, o.stream, self._consumer_name)
                # A new inbox, as nats.go's ordered consumer takes: one the delete above missed
                # (it outlives it while anything listens on its inbox) cannot reach us.
                await self._subscribe(nc.new_inbox())
                self._check_removed(0)
                start = self._highest + 1 if self._highest else None
                info = await C.create_ordered(nc, o, start, self._deliver)
                self._consumer_name = info["name"]
            else:
                # server: create it (or find it); user: look it up first (10014 when there is none: a
                # reset of no consumer gets no answer at all), and reset only one we accept
                if o.mode == "server":
                    created = await C.create_durable(nc, o)
                else:
                    created = await C.consumer_info(nc, o.conn, o.stream, o.consumer)
                C.check_bound(created, o)
                self._server_acked = C.ack_floor(created)
                self._check_removed(self._server_acked)
                start, floor = await self._orphans(created)
                info = await C.reset_consumer(nc, o.conn, o.stream, o.consumer, start)
                C.check_bound(info, o)
                if start is not None:  # the reset moved the ack floor back to the orphans: they stay acked
                    info = {**info, "ack_floor": floor}
            self._take_position(info)
            self.resets += 1
            self._last_heard = time.monotonic()
            return info
        except Exception as e:
            self.last_error = self._redact(str(e))
            self._unbound = True
            if raise_errors:
                raise
            if isinstance(e, DataLossError) or (isinstance(e, APIError) and e.err_code in (10214, 10215, 10217)):
                with self._cv:
                    self._fatal = e
                    self._cv.notify_all()
            log.warning("jetstream (live): restarting delivery failed, will retry: %s", self.last_error)
            return {}
        finally:
            self._restarting = False
            self._restart_ended = time.monotonic()

    def _check_removed(self, acked: int, gap: tuple[int, int] | None = None) -> None:
        """Before delivery restarts above what the query holds (``_highest``, a checkpoint's offset
        on a restart) or the durable acked (``acked``: committed by a landing sink): messages
        after that and below the origin's first sequence (as ``STREAM.INFO`` told it just before)
        were removed unread, by a limit, ``max_age``, a purge or a delete, and the new delivery
        would start past them, as a server consumer does, without a word. As the lake source
        (``planning._check_gap``) and Spark's Kafka source (offsets out of range):
        ``DataLossError`` naming them, or with ``failOnDataLoss=false`` a warning. A query's first
        bind starts where its consumer starts (nothing held yet); with a filter the removed
        messages' subjects are unknown (the server keeps none), so they are not checked, nor a
        ``last_per_subject`` consumer's, which passes over older messages of a subject.

        ``gap``: (held, last missing) origin seqs of a jump in a running delivery (``_note_gap``): the
        messages in between that lie below the first sequence were removed before the server
        delivered them (a durable waiting at ``max_ack_pending`` for Spark's commit, while a limit
        went on removing); one deleted from inside the stream is skipped, as a server consumer
        skips it."""
        first = self._first_seq
        if first is None or self._from_consumer or not self._gaps_matter():
            return
        if gap is not None:
            held, upto = gap  # committed as of the jump (_note_gap): acks since may cover what it skipped
        else:
            with self._cv:
                held = max(self._highest, acked, self._acked_through())
            upto = first - 1
        upto = min(upto, first - 1)
        if held == 0 or held >= upto:
            return
        what = (f"jetstream (live): stream {self.opts.stream}: messages {held + 1}..{upto} were removed (purged, "
                f"deleted or expired by a limit) before this query read them; the stream's first sequence is now {first}")
        if self.opts.fail_on_data_loss:
            raise DataLossError(f"{what}. Set failOnDataLoss=false to skip them.")
        log.warning("%s; failOnDataLoss=false: skipping them", what)

    def _gaps_matter(self) -> bool:
        """Whether a jump in delivered origin seqs can be loss: without a filter and not
        ``last_per_subject``, every message after the start is delivered."""
        from jsspark.live.snapshot import filters_of

        return not filters_of(self.opts) and self.opts.deliver_policy != "last_per_subject"

    def _acked_through(self) -> int:
        """The highest origin seq the durable's acks cover (under ``_cv``): committed, since a
        landing sink acks a batch before Spark's commit log holds it."""
        return max(self._server_acked, self._acks_flushed)

    def _note_gap(self, held: int, nxt: int) -> None:
        """Delivery jumped from origin seq ``held`` to ``nxt`` (loop thread, under ``_cv``):
        ``_check_gaps`` asks whether what lies between was removed below the first sequence."""
        if not self._gaps_matter():
            return
        # what was committed when delivery jumped: an ack flushed later covers the jump itself,
        # not the messages it skipped
        self._gaps.append((max(held, self._acked_through()), nxt - 1))
        if not self._gap_check:
            self._gap_check = True
            self._spawn(self._check_gaps())

    async def _check_gaps(self) -> None:
        """``STREAM.INFO`` after delivery jumped; ``_check_removed`` for each jump. Asked after the
        jump was delivered, so the first sequence it tells was past the missing messages before
        the server could deliver them no later than now. Unanswered: not known, not checked."""
        try:
            while True:
                with self._cv:
                    gaps, self._gaps = self._gaps, []
                if not gaps:
                    return
                try:
                    info = await C.stream_info(self._nc, self.opts.conn, self.opts.stream, LOOKUP_TIMEOUT)
                except Exception:
                    continue
                self._first_seq = int((info.get("state") or {}).get("first_seq", 0)) or None
                for gap in gaps:
                    try:
                        self._check_removed(0, gap)
                    except DataLossError as e:
                        with self._cv:
                            self._fatal = e
                            self._cv.notify_all()
                        return
        finally:
            self._gap_check = False

    async def _orphans(self, info: dict[str, Any] | None) -> tuple[int | None, dict[str, Any]]:
        """On a WorkQueue origin, where the reset should restart delivery: the durable's oldest
        stored message when it is at or below the ack floor (acked but still stored: module
        docstring) or at or below what Spark committed, and that ack floor; else ``(None, {})``
        (the ack floor + 1). The second is where the ack floor + 1 would be anyway, unless the
        server's ack floor in memory is ahead of what its info shows (an ack that crossed a
        reset, ``_check_acks``): then the ack floor + 1 would skip, and strand, stored messages.
        Everything up to the ack floor is taken as held (``_highest``): redelivered, it is only
        acked again. ``info``: the durable's info if the caller has it (else it is asked for and
        checked like the reset's, so a durable we refuse is never reset)."""
        nc, o = self._nc, self.opts
        if self._workqueue is False:
            return None, {}
        if info is None:
            info = await C.consumer_info(nc, o.conn, o.stream, o.consumer)  # errors as the reset's
            C.check_bound(info, o)
        floor = info.get("ack_floor") or {}
        acked = C.ack_floor(info)
        with self._cv:
            safe = max(acked, self.floor)
        oldest = await self._oldest_stored(info, look=safe > 0)
        if oldest is None or oldest > safe:
            return None, {}
        if oldest > acked:
            return oldest, floor
        with self._cv:
            self._highest = max(self._highest, acked)
        self.orphan_resets += 1
        log.warning("jetstream (live): %s still stores messages from seq %d that its durable %s acked (up to %d; "
                    "a server stopped while removing them, or a reset by another process left them); delivering "
                    "them again to ack them again", o.stream, oldest, o.consumer, acked)
        return oldest, floor

    async def _oldest_stored(self, info: dict[str, Any], look: bool = True) -> int | None:
        """On a WorkQueue origin, the oldest message stored for the durable of ``info``; None if
        the origin is not a WorkQueue or stores none (or without ``look``: the retention is only
        found out, once). The lookups are an extra. They come after the durable answered, so
        JetStream is up: one refused then (a user whose permissions allow the consumer API but
        not ``STREAM.INFO``/``STREAM.MSG.GET``) is logged once and not tried again. One unanswered
        (on a cluster, while the stream's leader is elected: the consumer's may answer meanwhile)
        is tried again at the next call, up to ``ORPHAN_LOOK_TIMEOUTS`` times in a row. Callers
        ask only while the retention may be a WorkQueue (``_workqueue`` not False)."""
        nc, o = self._nc, self.opts
        try:
            if self._workqueue is None:
                config = (await C.stream_info(nc, o.conn, o.stream, LOOKUP_TIMEOUT))["config"]
                self._workqueue = config.get("retention") == "workqueue"
                if not self._workqueue:
                    return None
            if not look:
                return None
            oldest = await C.oldest_stored(nc, o.conn, o.stream, info.get("config") or {}, LOOKUP_TIMEOUT)
        except Exception as e:
            if isinstance(e, TimeoutError) and not self._denied():
                self._orphan_timeouts += 1
                if self._orphan_timeouts < ORPHAN_LOOK_TIMEOUTS:
                    log.warning("jetstream (live): %s: no answer looking for acked messages still stored (%d in a "
                                "row); trying again at the next restart or check", o.stream, self._orphan_timeouts)
                    return None
            self._no_orphan_lookup(e)
            return None
        self._orphan_timeouts = 0
        return oldest

    def _denied(self) -> bool:
        """The server said the user may not make a request (nats-py reports it to ``_on_error``
        only; the request itself goes unanswered)."""
        return "permissions violation" in (self.last_error or "").lower()

    def _no_orphan_lookup(self, e: BaseException) -> None:
        self._workqueue = False
        log.warning("jetstream (live): %s: cannot look for acked messages still stored, not trying again: %s",
                    self.opts.stream, self._redact(str(e) or type(e).__name__))

    def _schedule_restart(self) -> None:
        if not self._restarting:
            self._restarting = True
            self._spawn(self._restart_delivery())

    async def _on_reconnect(self) -> None:
        self._refused = None
        self._schedule_restart()

    async def _on_error(self, e: Exception) -> None:
        """nats-py reconnects for ever, also when the server refuses the credentials (changed on
        the server, expired): the same auth error twice in a row ends the reader, as nats.go's
        connection gives up, instead of running empty batches for good."""
        self.last_error = self._redact(str(e))
        refusal = str(e)
        if not any(a in refusal.lower() for a in AUTH_REFUSALS):
            return
        if refusal != self._refused:
            self._refused = refusal
            return
        with self._cv:
            if self._fatal is None:
                self._fatal = LiveSourceError(self._redact(
                    f"the server at {', '.join(self.opts.conn.servers)} refuses this reader's credentials since it "
                    f"reconnected ({refusal}, twice in a row); restart the query with ones it takes"))
                log.error("jetstream (live): %s", self._fatal)
            self._cv.notify_all()

    async def _watchdog(self) -> None:
        """Break a stall: no message or heartbeat for STALL_SECONDS while connected, or a failed
        restart of delivery STALL_SECONDS ago (the durable may go on delivering what the reader
        drops while it waits for a reset's first delivery: no silence, no idle heartbeat comes).
        And while no delivery comes (heartbeats may), check every STALL_SECONDS that the
        durable's acks can still move it (``_check_acks``)."""
        seen, since = self._last_dseq, time.monotonic()
        while True:
            await asyncio.sleep(1.0)
            now = time.monotonic()
            if not self._nc.is_connected:
                continue
            if now - self._last_heard > STALL_SECONDS:
                self._last_heard = now
                self._schedule_restart()
            elif self._unbound and self._fatal is None and now - self._restart_ended > STALL_SECONDS:
                self._schedule_restart()
            elif self._last_dseq != seen:
                seen, since = self._last_dseq, now
            elif now - since > STALL_SECONDS:
                since = now
                await self._check_acks()

    async def _check_acks(self) -> None:
        """Reset the durable if an ack reached it out of order, or (WorkQueue) it still stores
        messages at or below its ack floor (module docstring): our reset restarts delivery at
        its ack floor + 1, which that ack moved only over committed messages. The info request
        goes after every ack counted in ``_gen_flushed`` (same connection), so the ack floor it
        shows must cover them. Only a sign seen twice in a row counts: an ack of ours that
        answered a request the server no longer waited for (it takes the first answer only)
        shows the first sign until our answer to its next request, within its next heartbeat.
        A failed look is retried on the next call. When resets for acks not taken leave the ack
        floor where it was ``ACKS_LOST_RESETS`` times, the acks never reach the server: the
        reader stops with that reason instead of resetting for good."""
        o = self.opts
        if o.mode == "ordered" or not self._resettable or self._restarting or self._fatal is not None:
            return
        with self._cv:
            generation, acked = self._generation, self._gen_flushed
        try:
            info = await C.consumer_info(self._nc, o.conn, o.stream, o.consumer, LOOKUP_TIMEOUT)
        except Exception as e:
            self.last_error = self._redact(str(e) or type(e).__name__)
            return
        sign = None
        untaken = C.acks_out_of_order(info, acked)
        if untaken:
            sign = "does not take our acks: an ack reached it after a reset made by another process"
        elif self._workqueue:
            oldest = await self._oldest_stored(info)
            if oldest is not None and oldest <= C.ack_floor(info):
                sign = (f"still has seq {oldest} stored at or below its ack floor: a reset by another process "
                        f"skipped it, or dropped it pending above an ack that crossed an earlier reset")
        with self._cv:
            if self._restarting or self._generation != generation:
                return
            if sign is None:
                self._acks_suspect, self._acks_lost = 0, (-1, 0)
                return
            if self._acks_suspect != generation:
                self._acks_suspect = generation
                return
            floor = C.ack_floor(info)
            resets = self._acks_lost[1] + 1 if untaken and self._acks_lost[0] == floor else int(untaken)
            self._acks_lost = (floor if untaken else -1, resets)
            if resets > ACKS_LOST_RESETS:  # no reset helped: the acks never arrive
                self._fatal = LiveSourceError(
                    f"durable {o.consumer} on {o.stream} takes none of our acks: its ack floor stayed at stream seq "
                    f"{floor} through {ACKS_LOST_RESETS} resets while we acked up to seq {acked}, so nothing is "
                    f"removed from the origin. The acks are replies to its flow-control requests ($JS.FC.>; "
                    f"$JS.ACK.> with explicit acks) and do not reach the server: an origin in another account "
                    f"(a job's external source) needs the importing account to import them too")
                self._cv.notify_all()
                log.error("jetstream (live): %s", self._fatal)
                return
            self._awaiting = True
        self.ack_repairs += 1
        log.warning("jetstream (live): durable %s on %s %s (acked up to seq %d; ack floor %s, delivered %s, %s "
                    "pending); resetting it", o.consumer, o.stream, sign, acked, info.get("ack_floor"),
                    info.get("delivered"), info.get("num_ack_pending"))
        self._schedule_restart()

    # -- deliveries (loop thread) ------------------------------------------------------------
    def _clear_pairs(self) -> None:
        """A new delivery generation: nothing of it delivered or acked yet."""
        self._gen_pairs.clear()
        self._gen_count = 0
        self._generation += 1
        self._gen_flushed = 0

    def _new_generation(self) -> None:
        self._awaiting = False
        self._last_dseq = 0
        self._fc_dseq = 0
        self._clear_pairs()
        self._acked_sseq = 0
        self._held_fc = None

    async def _on_msg(self, msg: Any) -> None:
        """One delivery through nats-py's callback (``_bulk`` False): handled as a run of one."""
        raw = getattr(msg.headers, "raw", b"") if msg.headers else b""
        self._on_frames(wire.Frames.of_lists(b"", [msg.subject.encode()], [(msg.reply or "").encode()],
                                             [raw or None], [bytes(msg.data)]))

    def _on_frames(self, frames: wire.Frames) -> None:
        """One read's deliveries, in wire order (``wire``): runs of data messages are taken
        whole (``_take_frames``, or one by one where it cannot); control messages (heartbeats,
        flow control) in between, one by one."""
        self._last_heard = time.monotonic()
        replies = frames.replies
        is_ack = pc.starts_with(replies, pattern=ACK_PREFIX.decode())
        n = len(frames)
        segments, prev = [], 0  # [lo, hi): runs of deliveries, and each other message alone
        if is_ack.true_count != n:
            for k in np.flatnonzero(~is_ack.to_numpy(zero_copy_only=False)).tolist():
                segments += [(prev, k), (k, k + 1)] if k > prev else [(k, k + 1)]
                prev = k + 1
        if prev < n:
            segments.append((prev, n))
        for lo, hi in segments:
            part = wire.Frames(frames.sid, *(c.slice(lo, hi - lo) for c in (
                frames.subjects, replies, frames.headers, frames.payloads)))
            if is_ack[lo].as_py():
                if not self._take_frames(part):
                    for subject, reply, hdr, payload in zip(*part.to_lists(), strict=True):
                        self._take_one(subject, reply, hdr, payload)
                continue
            reply, hdr, payload = part.replies[0].as_py(), part.headers[0].as_py(), part.payloads[0].as_py()
            if not payload and hdr and hdr.startswith(CONTROL_STATUS):
                self.controls_seen += 1
                self._on_control(reply, hdr)
            # anything else without a $JS.ACK reply is not a delivery of ours: ignored

    def _take_frames(self, f: wire.Frames) -> bool:
        """Deliveries with ``$JS.ACK`` replies, in the common case: replies of one shape,
        delivery seqs exactly last+1, last+2, ... of the current generation, taken as columns.
        False (nothing taken) for anything else (a reset's dseq 1, a gap, a reply it cannot
        read), which the caller takes message by message."""
        k = len(f)
        tokens = pc.split_pattern(f.replies, pattern=".")
        widths = pc.list_value_length(tokens)
        span = pc.min_max(widths)
        width = span["min"].as_py()
        if not (width == 9 or width >= 11) or span["max"].as_py() != width:
            return False
        at = 4 if width == 9 else 6
        # stream seq, delivery seq, timestamp, pending: each a column of k
        picks = (np.arange(at + 1, at + 5)[:, None] + np.arange(k, dtype=np.int64) * width).ravel()
        try:  # everything that can fail, before any state changes
            numbers = pc.list_flatten(tokens).take(picks).cast(pa.string()).cast(pa.int64())
            subjects = f.subjects.cast(pa.string())
            headers = header_cells(f.headers)
        except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError):
            return False
        sseqs, dseqs, ts, pend = numbers.to_numpy().reshape(4, k)
        sizes = stored_sizes(f.subjects, value_lengths(f.headers), value_lengths(f.payloads), reuse=True)
        with self._cv:
            last = self._last_dseq
            if self._awaiting or dseqs[0] != last + 1 or dseqs[-1] != last + k or (
                    k > 2 and not np.array_equal(dseqs, np.arange(last + 1, last + k + 1, dtype=np.int64))):
                return False
            self._last_dseq = last + k
            self._gen_pairs.append((sseqs, last + 1))
            self._gen_count += k
            # each origin seq once: only what is above everything held (a reset back re-delivers what we have)
            prior = np.maximum.accumulate(np.concatenate(([self._highest], sseqs[:-1])))
            keep = sseqs > prior
            jump = np.flatnonzero(keep & (sseqs > prior + 1))
            for j in jump:  # every jump of the run, not only its first
                if prior[j] > 0:
                    self._note_gap(int(prior[j]), int(sseqs[j]))
            if keep.any():
                payloads = f.payloads
                if not keep.all():
                    mask = pa.array(keep)
                    subjects, headers, payloads = subjects.filter(mask), headers.filter(mask), payloads.filter(mask)
                    sseqs, ts, dseqs, pend, sizes = sseqs[keep], ts[keep], dseqs[keep], pend[keep], sizes[keep]
                self._rows.add_part(subjects, sseqs, ts, headers, payloads, dseqs, pend)
                seqs = sseqs.tolist()
                self._hold(seqs, sizes)
                self._highest = seqs[-1]
                self._last_msg = self._last_heard
                if self._buffer_full():
                    self._spill_full()
                    self._last_msg = time.monotonic()  # a spill is no pause in delivery
                self._cv.notify_all()
        return True

    def _take_one(self, subject: bytes, reply: bytes, hdr: bytes | None, payload: bytes) -> None:
        try:
            _dc, sseq, dseq, ts, pending = parse_ack_reply(reply.decode())
        except ValueError:
            return
        try:
            subject.decode()
        except UnicodeDecodeError:  # the server takes any bytes; a lake subject is a string
            subject = subject_text(subject).encode()
            log.warning("jetstream (live): %s seq %d has a subject that is not UTF-8; stored as the server's JSON "
                        "API shows it: %r", self.opts.stream, sseq, subject.decode())
        if hdr and not hdr.startswith(HEADER_LINE):  # the server stores any header bytes; a lake keeps pairs
            log.warning("jetstream (live): %s seq %d has a header block without the NATS/1.0 line (%r); stored "
                        "with the 'K: V' lines it holds", self.opts.stream, sseq, bytes(hdr[:40]))
            hdr = repaired_headers(hdr)
        with self._cv:
            if self._awaiting:
                if dseq != 1 or self._unbound:
                    return  # still from before our reset, or from no reset of ours (the restart failed)
                self._new_generation()
            elif dseq == 1 and self._last_dseq != 0:
                if self._foreign_generation():
                    return
                self._new_generation()  # someone reset the consumer
            if dseq != self._last_dseq + 1:
                if dseq > self._last_dseq + 1:
                    self._awaiting = True
                    self._schedule_restart()  # lost in flight: reset, never recreate
                return
            self._last_dseq = dseq
            self._gen_pairs.append((np.array([sseq], np.int64), dseq))
            self._gen_count += 1
            if sseq <= self._highest:
                return
            if sseq > self._highest + 1 and self._highest > 0:
                self._note_gap(self._highest, sseq)
            self._highest = sseq
            self._last_msg = self._last_heard
            self._rows.append(subject, sseq, ts, hdr, payload, dseq, pending)
            self._hold([sseq], [stored_size(subject.decode(), len(hdr or b""), len(payload))])
            if self._buffer_full():
                self._spill_full()
                self._last_msg = time.monotonic()  # a spill is no pause in delivery
            self._cv.notify_all()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _on_control(self, reply: bytes, block: bytes) -> None:
        pairs, status = decode_headers(block)
        hdrs = dict(pairs)
        if "FlowControl" in status and reply:
            with self._cv:
                since, self._fc_dseq = self._last_dseq - self._fc_dseq, self._last_dseq
                near = self.opts.max_ack_pending - self._gen_count <= since
            self._spawn(self._answer_fc(reply.decode(), near))
            return
        stalled = hdrs.get(STALLED)
        if stalled:
            self._spawn(self._answer_fc(stalled))
        last_c = int(hdrs.get(LAST_CONSUMER, "0") or 0)
        with self._cv:
            if self._awaiting:
                if self._restarting:
                    return
                if last_c == 0 and not self._unbound:
                    self._new_generation()  # reset done, nothing delivered yet
                    return
                if time.monotonic() - self._restart_ended < STALL_SECONDS:
                    return  # sent before our reset took effect
                # The consumer goes on delivering, long after the restart we wait on ended: it
                # never took (its request failed, or a gap found while one was under way was
                # not acted on). Restart again, as the server's sourcing does on a mismatch.
            elif last_c == self._last_dseq:
                return
            elif last_c == 0 and not self._foreign_generation():
                self._new_generation()  # someone reset the consumer, nothing delivered yet
                return
            self._awaiting = True
        self._schedule_restart()  # the consumer delivered messages we never saw

    def _foreign_generation(self) -> bool:
        """A delivery generation we did not start, on an operator's durable (user mode): it may
        be a new durable of that name on a stream created again under its name, whose sequences
        start over (``_recreated``). Not taken (a message at or below what we hold would be
        skipped and then acked) until our own restart, which checks the origin first, restarts
        it at the ack floor + 1, where the other reset had. (Under ``_cv``.)"""
        if self.opts.mode != "user":
            return False
        self._awaiting = True
        self._schedule_restart()
        return True

    def _ack_pair(self) -> tuple[int, int] | None:
        """The newest (stream seq, delivery seq) of this generation at or below ``floor``."""
        best = None
        pairs, floor = self._gen_pairs, max(self.floor, self._landed)
        while pairs and pairs[0][0][0] <= floor:
            sseqs, first = pairs[0]
            above = sseqs > floor
            i = int(np.argmax(above)) if above.any() else len(sseqs)
            best = (int(sseqs[i - 1]), first + i - 1)
            if i < len(sseqs):  # keep it at the front: the next request names it again if needed
                pairs[0] = (sseqs[i - 1:], first + i - 1)
                self._gen_count -= i - 1
                return best
            pairs.popleft()
            self._gen_count -= len(sseqs)
        if best is not None:
            pairs.appendleft((np.array([best[0]], np.int64), best[1]))
            self._gen_count += 1
        return best

    async def _answer_fc(self, subject: str, near: bool = False) -> None:
        """Answer a flow-control request, acking up to ``floor``. When it would ack nothing new
        and ``max_ack_pending`` messages are unacked (the server is stalled on them anyway), hold
        it: ``commit`` (or the landing sink's mark) answers it the moment the batch is safe,
        instead of the server asking again on its next heartbeat.

        ``near``: the request came when fewer deliveries were left before ``max_ack_pending``
        than came since the previous request. The server sends a request at half its
        pending-bytes window, and none while one is outstanding; so it will likely reach
        ``max_ack_pending`` (where it sends one) with this one still outstanding, and, answered
        now with nothing to ack, it would stall there with none until its next idle heartbeat,
        up to a second. Held, it delivers the rest meanwhile (the window left is about what came
        since the last request). A heartbeat saying it stalls on this request before that
        (a byte window run out first) gets it answered (``_on_control``)."""
        headers = None
        pair: tuple[int, int] | None = None
        generation = 0
        if self.opts.mode != "ordered":
            if self._marked():
                self._read_landed()
            with self._cv:
                pair = None if self._awaiting else self._ack_pair()
                generation = self._generation
                nothing_new = pair is None or pair[0] <= self._acked_sseq
                if nothing_new and (near or self._gen_count >= self.opts.max_ack_pending):
                    self._held_fc = subject
                    if self._landed_watch is None and self._marked():
                        self._landed_watch = asyncio.get_running_loop().create_task(self._watch_landed())
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
                if self._generation == generation:
                    self._gen_flushed = max(self._gen_flushed, pair[0])
                self._cv.notify_all()

    def _marked(self) -> bool:
        """A landing sink may mark this reader's spill (``spill.mark_landed``): it reads rows by
        reference, into a local directory. Others never get a mark, so they do not look for one."""
        return self.opts.spill_references and self._dir is not None and not self._dir.remote and not self._landed_off

    def _read_landed(self) -> bool:
        """Take up the landing sink's mark (``spill.mark_landed``, local spill directories only):
        its Delta commit holds everything up to it, so acks may name it before Spark's commit
        reaches ``floor`` a batch later. True if it moved."""
        seq = self._dir.landed() if self._dir is not None else 0
        with self._cv:
            if seq <= self._landed:
                return False
            self._landed = seq
            return True

    async def _watch_landed(self) -> None:
        """While a flow-control request is held (``max_ack_pending`` reached): answer it the
        moment a landing sink's mark covers more, so delivery resumes while Spark finishes the
        batch instead of at the next batch's planning."""
        try:
            while self._held_fc is not None:
                await asyncio.sleep(LANDED_POLL)
                if self._read_landed():
                    await self._answer_held()
        finally:
            self._landed_watch = None

    async def _answer_held(self) -> None:
        subject = self._held_fc
        if subject is not None:
            self._held_fc = None
            await self._answer_fc(subject)

    # -- the buffer (any thread, under _cv) -----------------------------------------------------
    def _hold(self, seqs: list[int], sizes: Sequence[int] | np.ndarray) -> None:
        """Messages ``seqs`` (ascending, above all held) of ``sizes`` stored bytes are held now."""
        total = self._upto[-1] if self._upto else self._bytes_base
        self._seqs += seqs
        self._upto += (np.cumsum(sizes, dtype=np.int64) + total).tolist()

    def _flush(self) -> None:
        """Spill the buffered rows as files of at most ``chunkRows`` rows (a run of deliveries
        taken as columns can overshoot it): written at once locally (if one fails, none counts,
        the rows stay buffered and this raises, secrets redacted), put in the background on an
        object store."""
        if not self._rows:
            return
        assert self._dir is not None
        if self._dir.remote:
            self._retry_puts()
            while sum(p.error is None for p in self._puts.values()) >= MAX_PUTS:
                self._check()
                self._cv.wait(0.05)  # back-pressure: the store is slower than delivery
            if not self._rows:
                return  # another thread spilled them while this one waited
        # from here on nothing waits: no other thread sees the rows both buffered and spilled
        batch = self._rows.to_batch(self.opts.stream, self._consumer_name)
        size = self.opts.chunk_rows
        pieces = [batch.slice(i, size) for i in range(0, batch.num_rows, size)]
        if self._dir.remote:
            for piece in pieces:
                chunk, future = put_chunk(self._dir, piece)
                self._track(chunk.path, _Put(piece, future))
                self._chunks.append(chunk)
        else:
            written: list[Chunk] = []
            try:
                for piece in pieces:
                    written.append(write_chunk(self._dir, piece))
            except Exception as e:
                self._dir.delete([c.path for c in written])
                raise LiveSourceError(self._write_error(e)) from None
            self._chunks += written
        self._rows = Pending()

    def _write_error(self, e: BaseException) -> str:
        """What a failed spill write says (secrets redacted)."""
        return self._redact(f"jetstream (live): cannot write a spill file under "
                            f"{self._dir.uri if self._dir else '?'}: {describe(e)}")

    def _track(self, path: str, put: _Put) -> None:
        self._puts[path] = put
        put.future.add_done_callback(lambda f: self._put_done(path, f))

    def _put_done(self, path: str, future: Future[str]) -> None:
        """A put ended (pool thread): forget it, or keep its rows and error for a retry."""
        with self._cv:
            put = self._puts.get(path)
            if put is None or put.future is not future:
                return
            error = future.exception()
            if error is None:
                del self._puts[path]
            else:
                put.error = self._write_error(error)
                put.retry_at = time.monotonic() + PUT_RETRY_SECONDS
                self.last_error = put.error
                log.warning("%s (the rows stay buffered)", put.error)
            self._cv.notify_all()

    def _retry_puts(self, paths: Collection[str] | None = None) -> None:
        """Put again the failed files due for it (``paths``: those, now)."""
        assert self._dir is not None
        now = time.monotonic()
        for path, put in list(self._puts.items()):
            if put.error is not None and (now >= put.retry_at if paths is None else path in paths):
                put.error = None
                put.future = self._dir.write_later(path.rsplit("/", 1)[1], put.batch)
                self._track(path, put)

    def _await_puts(self, paths: Sequence[str]) -> None:
        """Until the spill files a batch reads are all on the store. A failed put is tried again
        at once; failing again fails the batch (Spark retries it) with the store's error."""
        deadline = time.monotonic() + self.opts.wait_timeout
        retried: set[str] = set()
        with self._cv:
            while True:
                self._check()
                waiting = [p for p in paths if p in self._puts]
                if not waiting:
                    return
                failed = [p for p in waiting if self._puts[p].error is not None]
                again = [p for p in failed if p in retried]
                if again:
                    raise LiveSourceError(self._puts[again[0]].error)
                if failed:
                    retried.update(failed)
                    self._retry_puts(failed)
                if time.monotonic() >= deadline:
                    raise LiveSourceError(self._redact(
                        f"jetstream (live): timed out after {self.opts.wait_timeout}s waiting for {len(waiting)} spill "
                        f"file(s) to be written under {self._dir.uri if self._dir else '?'}"))
                self._cv.wait(0.05)

    def _buffer_full(self) -> bool:
        """The buffer holds ``chunkRows`` rows or ``CHUNK_BYTES`` bytes: time to spill. (Under ``_cv``.)"""
        return len(self._rows) >= self.opts.chunk_rows or self._rows.nbytes >= CHUNK_BYTES

    def _spill_full(self) -> None:
        """A full buffer, on the delivery thread: spill it; a failed write (an object store
        that is unreachable for a moment) keeps the rows and is tried again a second later, and
        again when Spark plans a batch (where it fails the batch)."""
        now = time.monotonic()
        if now < self._spill_retry:
            return
        try:
            self._flush()
        except LiveSourceError as e:
            self._spill_retry = now + 1.0
            self.last_error = str(e)
            log.warning("%s (the rows stay buffered)", e)

    def _check(self) -> None:
        if isinstance(self._fatal, DataLossError):
            raise DataLossError(str(self._fatal))
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
            done = [ch.path for ch in self._chunks if ch.last <= seq]
            self._chunks = [ch for ch in self._chunks if ch.last > seq]
            for path in done:  # committed rows need no put (a batch is planned only once its puts succeeded)
                self._puts.pop(path, None)
            k = bisect.bisect_right(self._seqs, seq)
            if k:
                self._bytes_base = self._upto[k - 1]
                del self._seqs[:k], self._upto[:k]
            held = self._held_fc is not None
        if done and self._dir is not None:
            self._dir.delete(done)  # at once locally, in the background on an object store
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
            info = self._call(C.consumer_info(self._nc, self.opts.conn, self.opts.stream, self._consumer_name), 10)
        except Exception:
            return False
        delivered = int((info.get("delivered") or {}).get("consumer_seq", 0))
        with self._cv:
            return int(info.get("num_pending", 1)) == 0 and delivered <= self._last_dseq and not self._awaiting

    def latest(self, start: int, max_rows: int | None, target: int | None, max_bytes: int | None = None) -> int:
        """The end offset of the next batch: the highest buffered origin seq (at most
        ``max_rows`` messages and about ``max_bytes`` stored bytes after ``start``, at least one
        message; at most ``target``); ``start`` if none yet. Spark records it in the offset log
        before the batch runs, so a retried or restarted batch reads (start, end] again,
        whatever the messages measure then.

        With an AvailableNow ``target`` it waits (bounded) for *something* above ``start``
        rather than for the whole target: the buffer is bounded by ``max_ack_pending``, so the
        rest only comes once this batch is committed and acked."""
        self.commit(start)
        if target is not None and target > start:
            self._wait(lambda: (bool(self._seqs) and self._seqs[-1] > start) or self._highest >= target,
                       f"messages above origin seq {start} (AvailableNow target {target})")
        self._linger(start, max_rows, max_bytes, target)
        end = self._pick(start, max_rows, max_bytes, target)
        if end > start and self._paced(target) and not self._due(start, max_rows, max_bytes):
            return start  # not enough for a batch yet, and the last one was too recent: Spark asks again
        if end > start:
            with self._cv:
                full = (self._held_above(start) - self._held_above(end) >= self._full(max_rows)
                        or self._bytes_full(start, max_bytes))
            self._pacing.went(time.monotonic(), full)
        if end > start or target is None:
            return end
        self.flush_acks(ACK_FLUSH_SECONDS)  # the run ends after this call: ack what it committed
        return start

    def _paced(self, target: int | None) -> bool:
        """``minMessagesPerTrigger`` applies (never to an AvailableNow run, which must end)."""
        return self.opts.min_messages is not None and target is None

    def _full(self, max_rows: int | None) -> int:
        """The messages that make a batch full: ``max_rows``, the ``max_ack_pending`` the server
        stops at, and ``minMessagesPerTrigger``, whichever is least (or ``_bytes_full``)."""
        full = self.opts.max_ack_pending if max_rows is None else min(max_rows, self.opts.max_ack_pending)
        return full if self.opts.min_messages is None else min(full, self.opts.min_messages)

    def _held_above(self, start: int) -> int:
        return len(self._seqs) - bisect.bisect_right(self._seqs, start)

    def _bytes_full(self, start: int, max_bytes: int | None) -> bool:
        """The messages held above ``start`` make a batch full by bytes: a job's pacing must not
        hold back a batch of large messages until its interval because it has fewer than
        ``max_ack_pending`` of them. (Under ``_cv``.)"""
        i = bisect.bisect_right(self._seqs, start)
        if max_bytes is None or i == len(self._seqs):
            return False
        return self._upto[-1] - (self._upto[i - 1] if i else self._bytes_base) >= max_bytes

    def _due(self, start: int, max_rows: int | None, max_bytes: int | None) -> bool:
        with self._cv:
            full = self._held_above(start) >= self._full(max_rows) or self._bytes_full(start, max_bytes)
        return self._pacing.due(time.monotonic(), full)

    def _linger(self, start: int, max_rows: int | None, max_bytes: int | None, target: int | None) -> None:
        """Let a batch that has begun to arrive fill up: until it is full (``_full``, ``_bytes_full``),
        reaches ``target``, or delivery pauses; at most ``LINGER_MAX``. Paced, a batch that is not due
        yet does not stop at a pause, and an empty buffer is waited on too, for ``LINGER_MAX``
        before the first message and ``LINGER_MAX`` after it (Spark asks again at once; a call
        never takes longer, so a query stops promptly)."""
        full, paced = self._full(max_rows), self._paced(target)
        begin = time.monotonic()  # the ack that commit just sent may only now resume delivery
        deadline = begin + LINGER_MAX
        due, waited_empty = self._pacing.due_at(), False
        with self._cv:
            while self._fatal is None:
                now = time.monotonic()
                held = self._held_above(start) if self._seqs and self._seqs[-1] > start else 0
                if (held >= full or (target is not None and self._highest >= target) or now >= deadline
                        or self._bytes_full(start, max_bytes)):
                    return
                if not held:
                    if not paced:
                        return
                    waited_empty = True
                elif waited_empty:  # the batch's linger counts from its first message
                    begin, deadline, waited_empty = now, now + LINGER_MAX, False
                elif (not paced or now >= due) and now - max(self._last_msg, begin) >= LINGER_IDLE:
                    return
                self._cv.wait(LINGER_IDLE / 2)

    def _pick(self, start: int, max_rows: int | None, max_bytes: int | None, target: int | None) -> int:
        with self._cv:
            self._check()
            self._flush()
            i = bisect.bisect_right(self._seqs, start)
            j = len(self._seqs) if max_rows is None else min(len(self._seqs), i + max_rows)
            if target is not None:
                j = min(j, bisect.bisect_right(self._seqs, target))
            if max_bytes is not None and j > i:  # a soft bound: one message larger than it still goes
                before = self._upto[i - 1] if i else self._bytes_base
                j = max(i + 1, bisect.bisect_right(self._upto, before + max_bytes, i, j))
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

    def plan(self, start: int, end: int, by_reference: bool = False) -> list[SpillPartition]:
        """Partitions for (start, end]: waits (bounded) until the buffer covers ``end`` — after
        a restart the batch is re-received from the origin, where nothing above ``start`` was acked.
        ``by_reference``: each partition also carries its rows' sequences (``spill.reference_batch``)."""
        self.commit(start)
        self._wait(lambda: self._highest >= end, f"origin seq {end} to re-read batch ({start}, {end}]")
        with self._cv:
            self._check()
            self._flush()
            chunks = [c for c in self._chunks if c.last > start and c.first <= end]
            self._await_puts([c.path for c in chunks])
        # Few, large partitions: each Spark task costs far more than reading a few spill files.
        # Chunks hold ascending, disjoint sequence ranges: each partition covers its own.
        groups: list[list[Chunk]] = []
        rows, limit = 0, REFERENCE_PARTITION_ROWS if by_reference else PARTITION_ROWS
        for c in chunks:
            if groups and rows + c.count <= limit:
                groups[-1].append(c)
                rows += c.count
            else:
                groups.append([c])
                rows = c.count
        parts = []
        for i, g in enumerate(groups):
            lo = start if i == 0 else groups[i - 1][-1].last
            hi = end if i == len(groups) - 1 else g[-1].last
            seqs = self._seqs_in(lo, hi) if by_reference else None
            parts.append(SpillPartition(tuple(c.path for c in g), lo, hi, seqs, self.opts.storage_options))
        return parts

    def _seqs_in(self, lo: int, hi: int) -> tuple[int, ...] | range:
        """The held sequences in (lo, hi]: a ``range`` when they have no gap (the common case:
        it pickles to a few bytes, where a batch's tuple took milliseconds each way)."""
        with self._cv:
            i, j = bisect.bisect_right(self._seqs, lo), bisect.bisect_right(self._seqs, hi)
            if j > i and self._seqs[j - 1] - self._seqs[i] == j - 1 - i:  # ascending and distinct
                return range(self._seqs[i], self._seqs[j - 1] + 1)
            return tuple(self._seqs[i:j])

