"""A direct get (and ``get_msg``) while another writer removes the message it selected.

The server answers under the stream's read lock (stream.go ``getDirectRequest``,
``jsMsgGetRequest``): the old value or the new one, never an error. A lake answers from the
one table version its selection was made on; only when that version's files are gone
(vacuumed underneath) does it answer again on the newest version.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import jsspark
from jsspark.engine.directget import DirectGet
from jsspark.engine.lake import Lake


@pytest.fixture
def lakes(tmp_path: Path) -> tuple[Lake, Lake]:
    """A reader and a writer on one location, as two processes would be."""
    location = str(tmp_path / "lake")
    reader, writer = jsspark.connect(location), jsspark.connect(location)
    reader.add_stream(name="KV", subjects=["kv.>"], max_msgs_per_subject=1, allow_direct=True)
    reader.publish("kv.k", b"old")  # 1
    reader.publish("kv.other", b"x")  # 2
    return reader, writer


@pytest.fixture
def between(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Callable[[], Any]], None]]:
    """``between(write)``: run ``write`` once, after the next request selected its seqs and
    before it reads their rows."""
    pending: list[Callable[[], Any]] = []
    load = DirectGet._load

    def interleaved(self: DirectGet, *args: Any, **kwargs: Any) -> Any:
        while pending:
            pending.pop()()
        return load(self, *args, **kwargs)

    monkeypatch.setattr(DirectGet, "_load", interleaved)
    yield pending.append


def test_a_kv_update_between_selection_and_read_answers_the_old_value(lakes, between) -> None:
    reader, writer = lakes
    between(lambda: writer.publish("kv.k", b"new"))
    reply = reader.direct_get("KV", {"last_by_subj": "kv.k"})
    assert [(m.seq, m.data) for m in reply.messages] == [(1, b"old")]
    assert reader.direct_get("KV", {"last_by_subj": "kv.k"}).messages[0].data == b"new"


def test_get_msg_by_subject_and_by_seq_answer_the_state_they_selected_on(lakes, between) -> None:
    reader, writer = lakes
    between(lambda: writer.publish("kv.k", b"new"))
    assert reader.get_msg("KV", subject="kv.k").data == b"old"
    between(lambda: writer.delete_msg("KV", 3))
    assert reader.get_msg("KV", seq=3).data == b"new"


def test_a_purge_during_a_batch_answers_the_whole_batch_before_it(lakes, between) -> None:
    reader, writer = lakes
    between(lambda: writer.purge("KV"))
    reply = reader.direct_get("KV", {"seq": 1, "batch": 10})
    assert [m.seq for m in reply.messages] == [1, 2]
    assert [h["Nats-Num-Pending"] for h in reply.reply_headers] == ["1", "0"]
    assert reply.eob == {"Nats-Num-Pending": "0", "Nats-Last-Sequence": "2"}


def test_files_vacuumed_under_the_selection_answer_from_the_newest_version(lakes, between) -> None:
    reader, writer = lakes

    def replace_and_vacuum() -> None:
        writer.publish("kv.k", b"new")
        writer.compact("KV")
        writer.vacuum("KV", retention_hours=0)

    between(replace_and_vacuum)
    reply = reader.direct_get("KV", {"last_by_subj": "kv.k"})
    assert [(m.seq, m.data) for m in reply.messages] == [(3, b"new")]
