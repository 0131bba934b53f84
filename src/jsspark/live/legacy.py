"""The live source on nats-servers older than 2.14: no ``flow_control`` ack policy, no consumer reset.

``ingestor_for(opts)`` asks the server its version and returns a ``LegacyIngestor`` for a
server-managed durable on a server before 2.14 (ordered mode needs neither feature and keeps the
normal ``Ingestor``; a user-managed durable must be ``flow_control``, which such a server cannot
have, so that mode is refused with a clear error).

What replaces each 2.14 feature, and what it costs:

- **Acks.** The durable is ``ack_policy all`` (AckAll) with flow control and the 1 s heartbeat; on a
  WorkQueue stream, where servers before 2.14 accept only explicit acks, ``ack_policy explicit``.
  When Spark commits (and on every flow-control request) the reader acks up to the committed
  offset and never above it: AckAll at the newest message delivered to it at or below the offset
  (which acks everything up to it); explicit, each sequence the reader holds at or below the
  offset: only messages this durable delivered (or the repair read for it, which match its
  filters). Never a sequence in between: a 2.12 server removes a WorkQueue message on an
  explicit ack of its sequence even when this consumer never had it (another consumer's
  subject), which lost those messages (tests/jobs/test_legacy_jobs.py). After a reconnect or in a
  new process, the durable's messages between the server's ack floor and the committed offset
  are acked again (all sequences without a filter; with one, those the stream holds on it); a
  redelivery of a message at or below the committed offset is acked on arrival.
- **Gap repair and re-binding, instead of ``$JS.API.CONSUMER.RESET``.** Nothing above the committed
  offset is ever acked, so every message this durable delivered but the reader does not hold is
  still in the stream (a WorkQueue or Interest stream keeps unacked messages). On a delivery gap, a
  heartbeat naming a delivery we never saw, a reconnect, a stall, or a new process, the reader
  takes ``CONSUMER.INFO`` (last delivered stream seq ``L``, delivery seq ``D``), reads every
  matching message in (what it holds, ``L``] straight from the stream (``STREAM.MSG.GET`` or direct
  get, as a batch read does), and continues with delivery seq ``D + 1``; deliveries that raced the
  repair are dropped (they are at or below ``L``, or they show up as the next gap). Limits: on a
  Limits stream a message removed by its limits before the repair is lost, as with a reset; and
  the server redelivers unacked messages every ``ack_wait`` (``LEGACY_ACK_WAIT``) while Spark
  holds a batch: the reader skips them (already held), at the cost of that traffic.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import time
from typing import Any

from jsspark.datasource.partition import DataLossError
from jsspark.engine.headers import encoded_len
from jsspark.engine.schema import stored_size
from jsspark.live import consumer as C
from jsspark.live.ingestor import Ingestor, LiveSourceError, log, parse_ack_reply
from jsspark.live.options import LiveReadOptions, redact

FLOW_CONTROL_VERSION = (2, 14)
FLOW_CONTROL_API_LEVEL = 4  # v2.14's JetStream API level (``jetstream_versioning.go``)
LEVEL_TIMEOUT = 2.0  # the INFO request that tells it; unanswered (not permitted): the server's version
LEGACY_ACK_WAIT_NS = 30 * 1_000_000_000


def ingestor_for(opts: LiveReadOptions) -> Ingestor:
    """The reader for ``opts``' server: ``LegacyIngestor`` before 2.14 (not for ordered mode)."""
    if opts.mode == "ordered":
        return Ingestor(opts)

    async def older() -> bool:
        """Whether the JetStream that answers at the API prefix predates 2.14: its API level
        (``INFO``; a leaf node's domain or an imported API may be served by another version
        than the server connected to), else that server's version (before 2.11, no level)."""
        from jsspark.live.client import open_client

        nc = await open_client(opts.conn, opts.wait_timeout / 2)
        try:
            with contextlib.suppress(Exception):
                level = (await C.js_request(nc, opts.conn, "INFO", None, LEVEL_TIMEOUT)).get("api", {}).get("level")
                if isinstance(level, int):
                    return level < FLOW_CONTROL_API_LEVEL
            v = nc.connected_server_version
            return (int(v.major), int(v.minor)) < FLOW_CONTROL_VERSION
        finally:
            await nc.close()

    try:
        old = asyncio.run(older())
    except Exception as e:
        raise LiveSourceError(redact(f"jetstream (live): cannot reach the server of stream {opts.stream!r}: "
                                     f"{type(e).__name__}: {e}", opts.conn)) from None
    return LegacyIngestor(opts) if old else Ingestor(opts)


def legacy_durable_config(opts: LiveReadOptions, retention: str) -> dict[str, Any]:
    """The server-managed durable for a server before 2.14: AckAll (explicit on a WorkQueue)
    instead of flow_control."""
    cfg = C.durable_config(opts)
    cfg.update(ack_policy="explicit" if retention == "workqueue" else "all", ack_wait=LEGACY_ACK_WAIT_NS)
    return cfg


class LegacyIngestor(Ingestor):
    """``Ingestor`` for servers before 2.14; see the module docstring."""

    _bulk = False  # each delivery is looked at first (_on_msg): redeliveries are acked, repairs skip them
    _resettable = False  # no reset API before 2.14: no one else's reset for an ack to cross

    def __init__(self, opts: LiveReadOptions) -> None:
        super().__init__(opts)
        # "$JS.ACK.<stream>.<consumer>", replaced by the server's own spelling once a message arrives
        self._ack_prefix = f"$JS.ACK.{opts.stream}.{opts.consumer}"
        self._explicit = False
        self._unacked: list[int] = []  # explicit: committed sequences this reader holds, not acked yet

    async def _on_msg(self, msg: Any) -> None:
        if self._restarting:
            return  # the repair reads these from the stream
        reply = msg.reply or ""
        if reply.startswith("$JS.ACK."):
            tokens = reply.split(".")
            if len(tokens) == 9:  # $JS.ACK.<stream>.<consumer>.<dc>.<sseq>.<dseq>.<ts>.<pending>
                self._ack_prefix = ".".join(tokens[:4])
            with contextlib.suppress(ValueError):
                if parse_ack_reply(reply)[1] <= self.floor:  # a redelivery of a committed message
                    await self._nc.publish(reply, b"+ACK")
        await super()._on_msg(msg)

    async def _restart_delivery(self, raise_errors: bool = False) -> dict[str, Any]:
        """Fill what was delivered but is not held from the stream; go on after the last delivery."""
        self._restarting = True
        with self._cv:
            self._awaiting = True
        try:
            o = self.opts
            if not raise_errors and not await self._same_origin():  # deleted, or created again
                return {}
            if o.mode == "user":
                raise LiveSourceError("jetstream (live): consumerMode user needs nats-server 2.14 or newer (a "
                                      "flow_control durable); on this server use the server-managed durable")
            retention = str((await C.stream_info(self._nc, o.conn, o.stream))["config"].get("retention", "limits"))
            cfg = legacy_durable_config(o, retention)
            await C.create_durable(self._nc, o, cfg)  # never another application's durable of the name
            info = await C.consumer_info(self._nc, o.conn, o.stream, o.consumer)
            if (info.get("config") or {}).get("ack_policy") != cfg["ack_policy"]:
                raise LiveSourceError(f"jetstream (live): durable {o.consumer!r} on {o.stream!r} is not "
                                      f"ack_policy {cfg['ack_policy']}")
            self._take_position(info)
            self._explicit = cfg["ack_policy"] == "explicit"
            delivered = info.get("delivered") or {}
            last, dseq = int(delivered.get("stream_seq", 0)), int(delivered.get("consumer_seq", 0))
            server_floor = C.ack_floor(info)
            lo = self._highest or server_floor
            if last > lo:
                await self._fill(lo, last)
            with self._cv:
                self._awaiting = False
                self._last_dseq = dseq
                # acks sent while disconnected are lost: resend from the server's own ack floor
                self._acked_sseq = server_floor
                self._highest = max(self._highest, lo)
                self._cv.notify_all()
            self.resets += 1
            self._last_heard = time.monotonic()
            if self._explicit and server_floor < self.floor:
                # committed but not acked as far as the server knows (acks lost in an outage, or
                # a crash before they went out): ack again the ones this durable takes
                owed = await self._owed(server_floor, self.floor)
                with self._cv:
                    self._unacked = sorted(set(self._unacked) | set(owed))
            await self._ack_floor()
            return info
        except Exception as e:
            self.last_error = self._redact(str(e))
            if raise_errors:
                raise
            if isinstance(e, DataLossError):
                self._fatal = e
            log.warning("jetstream (live): repairing delivery failed, will retry: %s", self.last_error)
            return {}
        finally:
            self._restarting = False

    async def _owed(self, lo: int, hi: int) -> list[int]:
        """The sequences in (lo, hi] of the messages this durable takes: all of them without a
        filter (it then is the WorkQueue's only consumer), else read from the stream (headers only)."""
        from jsspark.live.snapshot import filters_of

        if not filters_of(self.opts):
            return list(range(lo + 1, hi + 1))
        return [row[1] for row in await self._read_stream(lo, hi, headers_only=True)]

    async def _read_stream(self, lo: int, hi: int, headers_only: bool) -> list[Any]:
        """The durable's matching messages in (lo, hi], read from the stream as a batch read does."""
        from jsspark.live.snapshot import SnapshotPartition, filters_of, read_rows

        info = await C.stream_info(self._nc, self.opts.conn, self.opts.stream)
        part = SnapshotPartition(self.opts.conn, self.opts.stream, lo, hi, filters_of(self.opts),
                                 headers_only, bool(info["config"].get("allow_direct")))
        return await read_rows(part)

    async def _fill(self, lo: int, hi: int) -> None:
        """Buffer the matching messages in (lo, hi] read from the stream."""
        rows = await self._read_stream(lo, hi, self.opts.headers_only)
        with self._cv:
            for subject, sseq, ts, hdrs, data, _, _ in rows:
                if sseq <= self._highest:
                    continue
                self._highest = sseq
                self._rows.append(subject, sseq, ts, hdrs, data, None, None)
                self._hold([sseq], [stored_size(subject, encoded_len(hdrs), len(data))])
                if len(self._rows) >= self.opts.chunk_rows:
                    self._flush()
            self._highest = max(self._highest, hi)
            self._last_msg = time.monotonic()
            self._cv.notify_all()

    # -- acks ----------------------------------------------------------------------------------
    async def _answer_fc(self, subject: str, near: bool = False) -> None:
        """Answer flow control at once (a pre-2.14 server reads no ack from it), then ack."""
        await self._nc.publish(subject, b"")
        await self._ack_floor()

    async def _ack_floor(self) -> None:
        """Ack up to ``floor``: AckAll at the newest delivered message at or below it, explicit
        every sequence since the last ack."""
        with self._cv:
            if self._explicit:
                seqs = [q for q in self._unacked if q <= self.floor]
                self._unacked = self._unacked[len(seqs):]
                top = max(self.floor, self._acked_sseq) if seqs else 0
            else:
                pair = None if self._awaiting else self._ack_pair()
                seqs, top = [], 0
                if pair is not None and pair[0] > self._acked_sseq:
                    top = pair[0]
            if not top or (not seqs and top <= self._acked_sseq):
                return
            self._acked_sseq = top
        if self._explicit:
            for seq in seqs:
                await self._nc.publish(f"{self._ack_prefix}.1.{seq}.0.0.0", b"+ACK")
        else:
            assert pair is not None
            await self._nc.publish(f"{self._ack_prefix}.1.{pair[0]}.{pair[1]}.0.0", b"+ACK")
        await self._nc.flush()
        with self._cv:
            self._acks_flushed = max(self._acks_flushed, top)
            self._cv.notify_all()

    def commit(self, seq: int) -> None:
        with self._cv:
            moved = seq > self.floor
            if moved and self._explicit:  # the held messages now committed: what explicit acks name
                self._unacked += self._seqs[: bisect.bisect_right(self._seqs, seq)]
            super().commit(seq)
        if moved and self._loop is not None and self._nc is not None:
            asyncio.run_coroutine_threadsafe(self._ack_floor(), self._loop)
