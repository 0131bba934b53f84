"""A lake on an object store: the same engine over S3 (moto's S3 server on loopback), with
delta-rs's conditional put serialising commits exactly as on a local disk."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pytest

import jsspark
from jsspark.engine.catalog import Change
from jsspark.engine.lake import Lake
from jsspark.engine.table import MessageTable
from jsspark.errors import LocationError, StreamNotFoundError


def test_stream_lifecycle_on_s3(s3: dict[str, str]) -> None:
    lake = jsspark.connect("s3://lake/t1", storage_options=s3)
    lake.add_stream(name="S", subjects=["s.>"], max_msgs_per_subject=2)
    acks = [lake.publish(f"s.{i % 2}", f"{i}".encode(), headers={"Nats-Msg-Id": f"m{i}"}) for i in range(5)]
    assert [a.seq for a in acks] == [1, 2, 3, 4, 5]
    assert lake.publish("s.0", b"dup", headers={"Nats-Msg-Id": "m4"}).duplicate
    batch = lake.publish_batch("S", pa.table({"subject": ["s.2", "s.3"], "data": [b"a", b"b"]}))
    assert list(batch.seqs) == [6, 7]
    state = jsspark.connect("s3://lake/t1", storage_options=s3).stream_info("S").state
    assert (state.messages, state.first_seq, state.last_seq, state.num_subjects) == (6, 2, 7, 4)
    assert lake.get_msg("S", subject="s.1").seq == 4
    assert lake.purge("S", subject="s.0") == 2
    assert lake.delete_stream("S")
    with pytest.raises(StreamNotFoundError):
        lake.stream_info("S")
    lake.add_stream(name="S", subjects=["s.>"])  # the old table is gone: numbering restarts
    assert lake.publish("s.x", b"again").seq == 1


def test_add_stream_clears_a_deleted_streams_leftover_table(tmp_path: Path) -> None:
    """A table with no stream in the catalog (a delete killed before removing it) is never
    served; a new stream of the name starts afresh rather than carry its sequences on."""
    lake = jsspark.connect(str(tmp_path))
    lake.add_stream(name="L", subjects=["l.>"])
    lake.publish("l.a", b"x")
    lake.catalog.transact(lambda records: [Change("stream", "L", "", None)])  # deleted, table left
    with pytest.raises(StreamNotFoundError):
        lake.stream_info("L")
    info = lake.add_stream(name="L", subjects=["l.>"])
    assert (info.state.messages, info.state.last_seq) == (0, 0)
    assert lake.publish("l.a", b"y").seq == 1


def test_concurrent_writers_on_s3_get_contiguous_sequences(s3: dict[str, str]) -> None:
    jsspark.connect("s3://lake/t2", storage_options=s3).add_stream(name="C", subjects=["c.>"])

    def writer(tag: str) -> None:
        lake = jsspark.connect("s3://lake/t2", storage_options=s3)  # its own snapshot and index
        for b in range(8):
            lake.publish_batch("C", pa.table({"subject": [f"c.{tag}"] * 5, "data": [f"{tag}{b}".encode()] * 5}))

    threads = [threading.Thread(target=writer, args=(t,)) for t in "xy"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    lake = jsspark.connect("s3://lake/t2", storage_options=s3)
    rows = lake.stream("C").read(columns=["seq", "data"]).sort_by("seq")
    assert rows["seq"].to_pylist() == list(range(1, 81))
    assert sorted(set(rows["data"].to_pylist())) == sorted({f"{t}{b}".encode() for t in "xy" for b in range(8)})


_ODD_NAMES = ["s[t", "s]t", "s^t", "s|t", "s\x01t", "s%41t", "s?t", "s%t", "s#t", "s&t"]


def _each_stream_keeps_its_own(lake: Lake) -> None:
    for i, name in enumerate(_ODD_NAMES):
        lake.add_stream(name=name, subjects=[f"odd{i}"])
        lake.publish(f"odd{i}", name.encode())
    for i, name in enumerate(_ODD_NAMES):
        assert lake.stream_info(name).state.messages == 1, name
        assert lake.get_msg(name, seq=1).data == name.encode()
        assert lake.purge(name) == 1
        assert lake.publish(f"odd{i}", b"again").seq == 2
        assert lake.delete_stream(name)


def test_stream_names_a_path_cannot_carry_locally(tmp_path: Path) -> None:
    """The server takes any stream name without ``. * > / \\`` or whitespace. ``[ ] ^ |`` and
    control characters made delta-rs panic at the first publish (a ``PanicException``, which
    ``except Exception`` does not catch), a local ``%41`` was read back as ``A`` (the creation
    gave up); their tables now live under an escaped directory, the others' where they were."""
    lake = jsspark.connect(str(tmp_path))
    _each_stream_keeps_its_own(lake)
    lake.add_stream(name="s?t", subjects=["kept"])
    assert (tmp_path / "streams" / "s?t" / "_delta_log").is_dir()


def test_stream_names_a_path_cannot_carry_on_s3(s3: dict[str, str]) -> None:
    """As above on an object store, where a ``?`` cut the table path short too, and a stream
    with ``%41`` or ``#`` in its name could not be deleted (its files were not where the removal
    looked)."""
    _each_stream_keeps_its_own(jsspark.connect("s3://lake/odd", storage_options=s3))


def test_a_deleted_stream_is_removed_with_the_storage_options_delta_rs_takes(s3: dict[str, str]) -> None:
    """The table of a deleted stream is removed through the same object store, built from the
    same storage options, that delta-rs wrote it with. It was removed through pyarrow's S3
    filesystem fed with a few mapped keys: an option delta-rs takes under another of its names
    (``endpoint_url``, ``token``, ``default_region``) or any other option (addressing style, a
    GCS or Azure store's) was ignored there, so the removal went to AWS itself and failed, and
    so did every later creation of the name, which clears the leftover table first."""
    options = {("endpoint_url" if k == "AWS_ENDPOINT_URL" else k): v for k, v in s3.items()}
    lake = jsspark.connect("s3://lake/aliases", storage_options=options)
    lake.add_stream(name="S", subjects=["s.>"])
    lake.add_stream(name="S2", subjects=["t.>"])  # its directory shares the prefix "streams/S"
    assert lake.publish("s.x", b"one").seq == 1
    lake.publish("t.x", b"kept")
    assert lake.delete_stream("S")
    assert not MessageTable(lake.stream_uri("S"), options).exists()
    lake.add_stream(name="S", subjects=["s.>"])
    assert lake.publish("s.x", b"again").seq == 1
    assert lake.get_msg("S2", seq=1).data == b"kept"


def test_a_writer_knows_its_own_commits_sequence_without_reading_the_log(
    s3: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``DeltaTable.transaction_version`` reads every log entry since the newest checkpoint (one
    GET each on an object store, up to ``delta.checkpointInterval``, 100): looked up for the last
    sequence at every publish, a publish on S3 made 3 GETs after a checkpoint and 100 before the
    next, 0.2 -> 0.9 s each on moto; a Spark micro-batch's commit looked its txn up too, and a
    source's landing its origin marks. A writer now takes what a commit it made itself wrote from
    that commit, and another writer's from the log entries its index catches up from."""
    from jsspark.engine.table import SEQ_APP_ID
    from tests.engine.log_reads import count_txn_lookups

    lake = jsspark.connect("s3://lake/own-seq", storage_options=s3)
    lake.add_stream(name="S", subjects=["s.>"])
    assert lake.publish("s.a", b"0").seq == 1
    looked = count_txn_lookups(monkeypatch)
    assert [lake.publish("s.a", f"{i}".encode()).seq for i in range(2, 12)] == list(range(2, 12))
    assert looked.count(SEQ_APP_ID) == 0
    assert jsspark.connect("s3://lake/own-seq", storage_options=s3).publish("s.b", b"other").seq == 12
    looked.clear()
    # another writer's commit: its txn comes with the log entries the index catches up from
    # (IndexStore.caught_up), not from a transaction_version lookup
    assert lake.publish("s.a", b"13").seq == 13
    assert looked.count(SEQ_APP_ID) == 0
    assert sorted(lake.stream("S").read(columns=["seq"])["seq"].to_pylist()) == list(range(1, 14))
    looked.clear()
    rows = pa.table({"subject": ["s.c"] * 2, "data": [b"c"] * 2})
    acks = [lake.publish_batch("S", rows, txn=("app", b)) for b in range(3)]
    assert [list(a.seqs) for a in acks] == [[14, 15], [16, 17], [18, 19]]
    assert lake.publish_batch("S", rows, txn=("app", 2)).replayed  # a replayed batch is still told
    assert (looked.count("app"), looked.count(SEQ_APP_ID)) == (1, 0)  # the first batch's look, no more


def test_a_lake_location_with_a_question_mark_or_hash_on_s3(s3: dict[str, str]) -> None:
    """A URL takes ``?`` and ``#`` for its query and fragment, so delta-rs cut an object-store
    location there: a lake at ``.../a#b`` wrote its catalog at ``.../a`` and every stream table
    there too (the first ``add_stream`` failed: ``Found unmasked nulls for non-nullable
    StructArray field "part"``), and lakes at ``.../a#b`` and ``.../a?c`` were the same place. On
    a local disk the same lake works. They are escaped for delta-rs, which stores them as given."""
    import boto3

    for place in ("a#b", "a?c"):
        lake = jsspark.connect(f"s3://lake/marks/{place}", storage_options=s3)
        lake.add_stream(name="S", subjects=["s.>"], max_msgs_per_subject=1)
        assert [lake.publish("s.x", place.encode()).seq for _ in range(2)] == [1, 2]
        again = jsspark.connect(f"s3://lake/marks/{place}", storage_options=s3)
        assert again.get_msg("S", seq=2).data == place.encode()
        lake.publish_batch("S", pa.table({"subject": ["s.y"] * 3, "data": [b"y"] * 3}))
        assert lake.stream_info("S").state.messages == 2
    assert jsspark.connect("s3://lake/marks/a", storage_options=s3).streams_info() == []
    client = boto3.client(
        "s3",
        endpoint_url=s3["AWS_ENDPOINT_URL"],
        aws_access_key_id=s3["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=s3["AWS_SECRET_ACCESS_KEY"],
        region_name=s3["AWS_REGION"],
    )
    keys = [o["Key"] for o in client.list_objects_v2(Bucket="lake", Prefix="marks/")["Contents"]]
    assert {k.split("/")[1] for k in keys} == {"a#b", "a?c"}
    assert jsspark.connect("s3://lake/marks/a#b", storage_options=s3).delete_stream("S")
    assert not client.list_objects_v2(Bucket="lake", Prefix="marks/a#b/streams/").get("Contents")


@pytest.mark.parametrize("key", ["AWS_S3_LOCKING_PROVIDER", "aws_s3_locking_provider"])
def test_a_dynamodb_locking_provider_is_refused_naming_the_option(key: str) -> None:
    """delta-rs 1.x has no DynamoDB log store: it logs an error and commits with conditional puts
    as without the option, so a lake configured for DynamoDB locking (to make concurrent writers
    safe on a store without conditional writes) would not be. Refused at connect, naming it."""
    with pytest.raises(LocationError, match=rf"storage option {key} .* conditional put"):
        jsspark.connect("s3://lake/locked", storage_options={key: "dynamodb", "AWS_REGION": "us-east-1"})
