"""Subjects and headers no NATS client can send are refused by every lake publish path, as nats-py
refuses them (``BadSubjectError``, ``BadHeaderError``) before a server could see them; what a
client does send (wildcard tokens, ``\\f``, NUL, an empty value) is stored as the server stores it.
Before, the lake stored them, and a value with CR LF read back through a header block
(direct get, republish, the live sink) became another header: an injected ``Nats-Msg-Id``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pyarrow as pa
import pytest
from nats.errors import BadHeaderError, BadSubjectError

from jsspark.engine import headers as H
from jsspark.engine.lake import Lake, connect
from jsspark.errors import HeaderError, SubjectError

SUBJECTS = ["out.*", "out.a>", "out.>", "out.\fa", "out.a\x00", "out.é",  # sent and stored
            "out. a", "out.\ta", "out.a\r", "out.\na", ""]  # fmt: skip
HEADERS = [{"K": "v"}, {"K": ""}, {"K": "a\x00b"}, {"Nats-Msg-Id": "i"},  # sent and stored
           {"K:x": "v"}, {"K x": "v"}, {"Ké": "v"}, {"K\r\nX": "v"}]  # fmt: skip


@pytest.fixture
def lake(tmp_path: Path) -> Iterator[Lake]:
    lake = connect(tmp_path / "lake")
    lake.add_stream(name="OUT", subjects=["out.>"], duplicate_window=60)
    yield lake


def _server_outcomes(url: str, run: Any, stream: str) -> tuple[list[str], list[str]]:
    """Per subject and per header case: "stored" or the nats-py error a publish got."""

    async def go() -> tuple[list[str], list[str]]:
        nc = await nats.connect(url)
        js = nc.jetstream()
        await js.add_stream(name=stream, subjects=["out.>"])
        subjects, headers = [], []
        for cases, out, publish in (
            (SUBJECTS, subjects, lambda s: js.publish(s, b"x", stream=stream, timeout=2)),
            (HEADERS, headers, lambda h: js.publish("out.h", b"x", headers=h, stream=stream, timeout=2)),
        ):
            for case in cases:
                try:
                    await publish(case)
                    out.append("stored")
                except (BadSubjectError, BadHeaderError) as e:
                    out.append(type(e).__name__)
        await js.delete_stream(stream)
        await nc.close()
        return subjects, headers

    return run(go())


def test_lake_publish_refuses_what_nats_py_refuses(nats_server: Any, run: Any, lake: Lake) -> None:
    server_subjects, server_headers = _server_outcomes(nats_server.url, run, "SENDABLE")
    assert server_subjects == ["stored"] * 6 + ["BadSubjectError"] * 5  # the cases are what they claim
    lake_subjects, lake_headers = [], []
    for s in SUBJECTS:
        try:
            lake.publish(s, b"x")
            lake_subjects.append("stored")
        except SubjectError as e:
            assert f"invalid subject {s!r}" in str(e)
            lake_subjects.append("BadSubjectError")
    for h in HEADERS:
        try:
            lake.publish("out.h", b"x", headers=h)
            lake_headers.append("stored")
        except HeaderError as e:
            assert f"invalid header name {next(iter(h))!r}" in str(e)
            lake_headers.append("BadHeaderError")
    assert (lake_subjects, lake_headers) == (server_subjects, server_headers)
    stored = lake.stream("OUT").read().sort_by("seq")
    assert stored["subject"].to_pylist() == SUBJECTS[:6] + ["out.h"] * 4


def test_header_values_that_would_end_the_line_are_refused(lake: Lake) -> None:
    """nats-py rewrites CR/LF in a value to spaces; a block holding one is two headers to the
    server (``sliceHeader`` stops at CR LF), so storing it as given stored a second message of a
    msg id: the lake refuses it, and a null name or value, which no header block holds."""
    bad = "1\r\nNats-Msg-Id: dup"
    assert H.decode(H.encode([("X", bad)]))[0] == [("X", "1"), ("Nats-Msg-Id", "dup")]  # the injection
    for pairs, text in (
        ([("X", bad)], r"the value of header 'X' \('1\\r\\nNats-Msg-Id: dup'\) has a CR or LF"),
        ([("X", "a\nb")], r"the value of header 'X' \('a\\nb'\) has a CR or LF"),
        ([("K", None)], r"header 'K' has no value \(null\)"),
        ([(None, "v")], r"a header has no name \(null\)"),
    ):
        with pytest.raises(HeaderError, match=text):
            lake.publish("out.a", b"x", headers=pairs)
    assert lake.stream_info("OUT").state.messages == 0


def _batch(n: int, subject: Any = None, headers: Any = None, at: int = 0) -> pa.Table:
    subjects = [f"out.{k % 10}" for k in range(n)]
    cells: list[Any] = [[{"name": "Nats-Msg-Id", "value": str(k)}] for k in range(n)]
    if subject is not None:
        subjects[at] = subject
    if headers is not None:
        cells[at] = [{"name": k, "value": v} for k, v in headers]
    return pa.table({"subject": subjects, "data": pa.array([b"x"] * n, pa.binary()),
                     "headers": pa.array(cells, H.HEADER_TYPE)})


@pytest.mark.parametrize("dictionary", [False, True])
def test_publish_batch_names_the_bad_row_and_stores_nothing(lake: Lake, dictionary: bool) -> None:
    lake.publish("out.a", b"before")
    cases = [
        (_batch(500, subject="out. a", at=321), SubjectError,
         r"invalid subject 'out. a' \(publish_batch: row 321 of column 'subject'\)"),
        (_batch(500, subject="", at=7), SubjectError, r"invalid subject '' \(publish_batch: row 7 of column 'subject'\)"),
        (_batch(500, headers=[("A", "1"), ("K:x", "v")], at=499), HeaderError,
         r"invalid header name 'K:x' \(publish_batch: row 499 of column 'headers'\)"),
        (_batch(500, headers=[("X", "1\r\nNats-Msg-Id: dup")], at=3), HeaderError,
         r"the value of header 'X' .* \(publish_batch: row 3 of column 'headers'\) has a CR or LF"),
        (_batch(500, headers=[("K", None)], at=250), HeaderError,
         r"header 'K' has no value \(null\) \(publish_batch: row 250 of column 'headers'\)"),
    ]
    for table, error, text in cases:
        if dictionary:
            table = table.set_column(0, "subject", table["subject"].dictionary_encode())
        with pytest.raises(error, match=text):
            lake.publish_batch("OUT", table)
    state = lake.stream_info("OUT").state
    assert (state.messages, state.last_seq) == (1, 1)
    assert len(lake.publish_batch("OUT", _batch(500)).acks()) == 500  # the good rows go through


def test_null_data_is_stored_as_empty(lake: Lake) -> None:
    """A NATS message has no null payload: a null cell read back as null in Spark, ``b''`` from the engine."""
    lake.publish_batch("OUT", pa.table({"subject": ["out.a", "out.b"], "data": pa.array([None, b"y"], pa.binary())}))
    lake.publish_batch("OUT", pa.table({"subject": ["out.c"], "data": pa.array([None], pa.string())}))
    assert lake.stream("OUT").read().sort_by("seq")["data"].to_pylist() == [b"", b"y", b""]
    assert lake.get_msg("OUT", 1).data == b""


def test_header_column_check_equals_the_scalar_check() -> None:
    """The byte scans of ``check_column`` refuse the first row ``check_pair`` refuses, whatever the
    layout (sliced, a null row, large lists)."""
    import random

    rng = random.Random(7)
    names = ["K", "Nats-Msg-Id", "a.b~", "K:x", "K x", "", "Ké", None, "K\n"]
    values = ["v", "", "é", "a\x00", "a\rb", "a\nb", None, " v "]
    for _ in range(300):
        rows = [None if rng.random() < 0.2 else [(rng.choice(names[:3]), rng.choice(values[:4]))
                                                  for _ in range(rng.randint(0, 3))] for _ in range(rng.randint(1, 8))]
        if rng.random() < 0.7:  # one bad header somewhere
            at = rng.randrange(len(rows))
            rows[at] = [*(rows[at] or []), (rng.choice(names), rng.choice(values))]
        first = None
        for i, pairs in enumerate(rows):
            try:
                H.check(pairs)
            except HeaderError:
                first = i
                break
        cells = [None if r is None else [{"name": k, "value": v} for k, v in r] for r in rows]
        padded = pa.array([[{"name": "K:x", "value": None}], *cells], H.HEADER_TYPE).slice(1)
        for col in (pa.array(cells, H.HEADER_TYPE), padded, pa.array(cells, pa.large_list(H.HEADER_TYPE.value_type))):
            if first is None:
                H.check_column(col, "t")
            else:
                with pytest.raises(HeaderError, match=rf"\(t: row {first} of column 'headers'\)"):
                    H.check_column(col, "t")
