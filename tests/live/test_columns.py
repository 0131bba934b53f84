"""Deliveries scanned as columns (``wire.scan_frames``) buffer exactly what the same bytes walked
frame by frame (the parser's loop, ``Frames.of_lists``) buffer: rows, their order,
the delivery generation, the controls seen, the restarts asked for. No server, no Spark."""

from __future__ import annotations

import asyncio
from typing import Any

import pyarrow as pa
import pytest

from jsspark.live import wire
from jsspark.live.ingestor import Ingestor
from jsspark.live.options import parse_live_read_options
from jsspark.live.spill import Pending, header_cells, rows_to_batch

_SCAN = wire.scan_frames


def _delivery(sseq: int, dseq: int, pending: int) -> bytes:
    reply = f"$JS.ACK.O.c.1.{sseq}.{dseq}.{1_700_000_000_000_000_000 + sseq * 7}.{pending}"
    data = b"d%d" % sseq * (sseq % 5)
    if sseq % 6 == 1:
        hdr = b"NATS/1.0\r\nNats-Msg-Id: m%d\r\nA: 1\r\nA: 2\r\n\r\n" % sseq
        return f"HMSG o.{sseq % 9} 1 {reply} {len(hdr)} {len(hdr) + len(data)}\r\n".encode() + hdr + data + b"\r\n"
    return f"MSG o.{sseq % 9} 1 {reply} {len(data)}\r\n".encode() + data + b"\r\n"


def _control(block: bytes, reply: bytes = b"") -> bytes:
    return b"HMSG _INBOX.d 1 %s %d %d\r\n%s\r\n" % (reply, len(block), len(block), block)


def _wire() -> list[bytes]:
    """What a consumer's subscription receives, in socket reads: a backlog with a heartbeat
    and a flow-control request in it; a reset back to an earlier stream seq (delivery seqs
    start again at 1); more of the new generation; then a delivery seq gap."""
    first = [_delivery(s, s, 3000 - s) for s in range(1, 2001)]
    first.insert(700, _control(b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 700\r\nNats-Last-Stream: 700\r\n\r\n"))
    first.insert(1300, _control(b"NATS/1.0 100 FlowControl Request\r\n\r\n", b"$JS.FC.O.c.1"))
    back = [_delivery(s, d, 0) for d, s in enumerate(range(1500, 2501), start=1)]
    on = [_delivery(s, d, 0) for d, s in enumerate(range(2501, 3501), start=1002)]
    gap = [_delivery(s, d, 0) for d, s in enumerate(range(3501, 3601), start=2010)]
    return [b"".join(first), b"".join(back), b"".join(on), b"".join(gap)]


def _take(scan: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[Ingestor, list[str], int, int]:
    ing = Ingestor(parse_live_read_options({"servers": "nats://127.0.0.1:1", "stream": "O", "consumerMode": "ordered",
                                            "chunkRows": "1000000"}))
    answered: list[str] = []
    restarts = [0]

    async def answer(subject: str, near: bool = False) -> None:
        answered.append(subject)

    async def restart(raise_errors: bool = False) -> dict[str, Any]:
        restarts[0] += 1
        return {}

    ing._answer_fc = answer  # type: ignore[method-assign]
    ing._restart_delivery = restart  # type: ignore[method-assign]
    ing._awaiting = False

    scanned = [0]

    def counted(data: bytes, routed: Any) -> Any:
        found = _SCAN(data, routed)
        scanned[0] += len(found[0]) if found else 0
        return found

    monkeypatch.setattr(wire, "scan_frames", counted)
    monkeypatch.setattr(wire, "BULK_MIN", 4096 if scan else 1 << 40)

    async def feed() -> None:
        parser = wire.bulk_parser_class()(None)
        parser.route(1, ing._on_frames)
        for read in _wire():
            await parser.parse(read)
            assert bytes(parser.buf) == b""
        await asyncio.sleep(0)  # the spawned answer and restart run

    asyncio.run(feed())
    return ing, answered, restarts[0], scanned[0]


def test_scanned_frames_buffer_what_walked_frames_buffer(monkeypatch: pytest.MonkeyPatch) -> None:
    cols, answered, restarts, scanned = _take(True, monkeypatch)
    lists, answered_lists, restarts_lists, walked_scanned = _take(False, monkeypatch)
    assert scanned > 4000 and walked_scanned == 0  # the scan took nearly every frame; the other way walked them
    batch = cols._rows.to_batch("O", "c")
    assert batch.equals(lists._rows.to_batch("O", "c"))
    assert batch.column("seq").to_pylist() == list(range(1, 3501))  # the reset's re-deliveries not twice
    assert cols._seqs == lists._seqs == list(range(1, 3501))
    assert batch.column("headers")[0].as_py() == [{"name": "Nats-Msg-Id", "value": "m1"}, {"name": "A", "value": "1"},
                                                  {"name": "A", "value": "2"}]
    assert batch.column("ts_ns")[1].as_py() == 1_700_000_000_000_000_014
    assert (cols._last_dseq, cols._awaiting, cols._gen_count) == (lists._last_dseq, lists._awaiting, lists._gen_count)
    assert (cols._last_dseq, cols._awaiting) == (2001, True)  # the gap: delivery stops being taken until a reset
    assert [(p[0].tolist()[:1], p[1]) for p in cols._gen_pairs] == [(p[0].tolist()[:1], p[1]) for p in lists._gen_pairs]
    assert cols.controls_seen == lists.controls_seen == 2
    assert answered == answered_lists == ["$JS.FC.O.c.1"]
    assert restarts == restarts_lists == 1


def test_pending_keeps_delivery_order_across_parts_and_appended_rows() -> None:
    rows = [(b"o.%d" % s, s, 10**18 + s, b"NATS/1.0\r\nK: %d\r\n\r\n" % s if s % 2 else None, b"d%d" % s, s, 9 - s)
            for s in range(1, 10)]
    pending = Pending()
    for row in rows[:2]:
        pending.append(*row)
    part = rows[2:6]
    pending.add_part(pa.array([r[0].decode() for r in part]), pa.array([r[1] for r in part]).to_numpy(),
                     pa.array([r[2] for r in part]).to_numpy(), header_cells(pa.array([r[3] for r in part], pa.binary())),
                     pa.array([r[4] for r in part], pa.binary()), pa.array([r[5] for r in part]).to_numpy(),
                     pa.array([r[6] for r in part]).to_numpy())
    for row in rows[6:]:
        pending.append(*row)
    assert len(pending) == 9
    assert pending.to_batch("O", "c").equals(rows_to_batch("O", "c", rows))  # type: ignore[arg-type]


@pytest.mark.parametrize("reply", [b"$JS.ACK.O.c.1.x.2.3.0", b"$JS.ACK.O.c.1.2.3"])
def test_replies_columns_cannot_read_go_frame_by_frame(reply: bytes) -> None:
    """A reply that is not a well-formed ack subject is not taken as columns: the run goes to
    ``_take_one``, which skips what it cannot read, and the good deliveries around it land."""
    ing = Ingestor(parse_live_read_options({"servers": "nats://127.0.0.1:1", "stream": "O", "consumerMode": "ordered"}))
    ing._awaiting = False
    good = [_delivery(s, s, 0) for s in range(1, 300)]
    bad = b"MSG o.1 1 %s 1\r\nx\r\n" % reply
    found = wire.scan_frames(b"".join(good[:150]) + bad + b"".join(good[150:]), lambda sid: True)
    assert found is not None and len(found[0]) == 300
    ing._on_frames(found[0])
    assert ing._seqs == list(range(1, 300)) and not ing._rows._parts
