"""Commits another engine makes to a stream's table (table properties as README's Storage
section recommends, a compaction) that change no message: the stream reads on as if they
were not there, compared with a server that never saw them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from deltalake import DeltaTable

import jsspark
from jsspark.engine import headers as H
from tests.engine.backends import LakeBackend, ServerBackend
from tests.engine.test_differential import Pair, paired


@pytest.fixture
def pair(nats_server: Any, tmp_path: Any) -> Iterator[Pair]:
    yield from paired(ServerBackend(nats_server.url), LakeBackend(jsspark.connect(tmp_path / "lake")))


def _set_properties(uri: str) -> None:
    DeltaTable(uri).alter.set_table_properties({"delta.logRetentionDuration": "interval 1 day"})


def _compact(uri: str) -> None:
    """As Spark's OPTIMIZE: the files rewritten, ``dataChange=false``, no jsspark state."""
    assert DeltaTable(uri).optimize.compact()["numFilesRemoved"] > 1


@pytest.mark.parametrize("foreign", [_set_properties, _compact], ids=["table properties", "compaction"])
def test_a_commit_that_changes_no_data_keeps_the_last_msg_id_and_time(
    pair: Pair, foreign: Callable[[str], None]
) -> None:
    """The server keeps the last msg id and time whatever removed the message (``lmsgId``,
    stream.go); the lake keeps them in its commits' recorded state, which a foreign commit
    that changes no data must not hide."""
    name = pair.stream()
    subject = name.lower()
    for i in (1, 2, 3):
        pair.publish(f"{subject}.a", b"x", headers=[(H.MSG_ID, f"m{i}")])  # one partition: files to merge
    pair.delete_msg(name, 3)
    lake = pair.lake.lake
    before = lake.stream_info(name).state.last_ts_ns
    foreign(lake.stream_uri(name))

    fresh = jsspark.connect(lake.location)  # reads the state from the table, nothing cached
    assert fresh.stream_info(name).state.last_ts_ns == before
    pair.lake.lake = fresh
    pair.state(name)
    pair.publish(f"{subject}.4", b"y", headers=[(H.EXPECTED_LAST_MSG_ID, "m3")])
    pair.check(name)


def test_a_foreign_commit_that_changes_data_is_read_from_the_table(tmp_path: Any) -> None:
    """Another engine deleting a message leaves no recorded state for it: the state is derived
    from the table's rows (as the server derives it when it rebuilds a stream)."""
    lake = jsspark.connect(tmp_path)
    lake.add_stream(name="S", subjects=["s.>"])
    for i in range(3):
        lake.publish(f"s.{i}", b"x")
    _set_properties(lake.stream_uri("S"))
    DeltaTable(lake.stream_uri("S")).delete("seq = 1")
    _set_properties(lake.stream_uri("S"))
    state = jsspark.connect(tmp_path).stream_info("S").state
    assert (state.messages, state.first_seq, state.last_seq) == (2, 2, 3)
