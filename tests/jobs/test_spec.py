"""A job file's checks before anything runs: no Spark, no target stream touched.

A job that cannot run fails at load (or at the origins' first answer) with the server's text,
not after Spark's start-up, and nothing in a spec's ``repr`` or the runner's log shows a secret.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import jsspark
from jsspark.jobs import runner
from jsspark.jobs.runner import Job
from jsspark.jobs.spec import JobError, load_job


def job(tmp_path: Path, stream: Any, **more: Any) -> dict[str, Any]:
    return {"stream": stream, "target": {"location": str(tmp_path / "target")},
            "origins": {"*": {"location": str(tmp_path / "origin")}}, **more}


@pytest.mark.parametrize(
    ("text", "spark_form"),
    [("5s", "5 seconds"), ("2m", "120 seconds"), ("1h", "3600 seconds"), ("1m30s", "90 seconds"),
     ("500ms", "500 milliseconds"), ("1 min", "60 seconds"), ("5 seconds", "5 seconds"), ("1.5s", "1500 milliseconds")],
)  # fmt: skip
def test_a_trigger_interval_is_kept_in_the_form_spark_reads(tmp_path: Path, text: str, spark_form: str) -> None:
    spec = load_job(job(tmp_path, {"name": "T", "sources": [{"name": "O"}]}, trigger=text))
    assert spec.trigger == spark_form and spec.trigger_kwargs() == {"processingTime": spark_form}


@pytest.mark.parametrize(
    ("stream", "text"),
    [({"name": "X", "mirror": {"name": "X"}}, "detected cycle (10052)"),
     ({"name": "X", "mirror": {"name": "O"}, "subjects": ["a"]}, "stream mirrors can not contain subjects (10034)"),
     ({"name": "X", "sources": [{"name": "O"}, {"name": "O"}]}, "duplicate source configuration detected (10140)"),
     ({"name": "X", "sources": [{"name": "O"}], "max_msg": 4}, 'invalid JSON: json: unknown field "max_msg" (10025)'),
     ({"name": "X", "sources": [{"name": "O", "filter_subjects": "o.eu.>"}]},
      'invalid JSON: json: unknown field "filter_subjects" (10025)')],
)  # fmt: skip
def test_a_stream_config_the_server_refuses_fails_at_load(tmp_path: Path, stream: dict[str, Any], text: str) -> None:
    with pytest.raises(JobError) as e:
        load_job(job(tmp_path, stream))
    assert str(e.value) == f"job: stream 'X': {text}"


def test_a_republish_cycle_fails_at_load(tmp_path: Path) -> None:
    stream = {"name": "X", "subjects": ["x.>"], "republish": {"src": "x.>", "dest": "x.a"}}
    with pytest.raises(JobError, match="republish destination forms a cycle"):
        load_job(job(tmp_path, stream, republish_to={"servers": "nats://127.0.0.1:4222"}))


def test_a_stream_file_that_is_not_there_is_named(tmp_path: Path) -> None:
    path = tmp_path / "job.json"
    path.write_text('{"stream": "missing.json", "target": {"location": "/tmp/lake"}}')
    with pytest.raises(JobError) as e:
        load_job(path)
    assert str(e.value) == f"{path}: stream: no such stream config file: {tmp_path / 'missing.json'}"


def test_a_spec_repr_and_the_runner_log_show_no_secret(tmp_path: Path) -> None:
    spec = load_job({
        "stream": {"name": "X", "sources": [{"name": "O"}]},
        "target": {"location": "s3://b/x", "storage_options": {"aws_secret_access_key": "SUPERSECRET",
                                                               "aws_region": "eu-west-1"}},
        "origins": {"O": {"servers": "nats://alice:Pw0rdXYZ@nats:4222", "password": "hunter22",
                          "token": "tok3nABCD", "nkey_seed": "SUAKSEED"}},
    })  # fmt: skip
    shown = repr(spec)
    for secret in ("SUPERSECRET", "Pw0rdXYZ", "hunter22", "tok3nABCD", "SUAKSEED"):
        assert secret not in shown
    assert "nats://alice:***@nats:4222" in shown and "'aws_region': 'eu-west-1'" in shown
    assert runner._where(spec.origin("O")) == "server nats://alice:***@nats:4222"
    assert runner._where(load_job(job(tmp_path, {"name": "Y", "sources": [{"name": "O"}]}, origins={
        "*": {"servers": "nats://tok3nABCD@nats:4222"}})).origin("O")) == "server nats://***@nats:4222"


def test_secret_reader_options_stay_out_of_a_spec_repr() -> None:
    """An endpoint's reader ``options`` may hold ``storage.*`` credentials or connection secrets
    (Spark options ignore case): shown as ``***``, as the same fields are; the rest as given."""
    spec = load_job({
        "stream": {"name": "X", "sources": [{"name": "A"}, {"name": "B"}]},
        "target": {"location": "/tmp/lake"},
        "origins": {"A": {"location": "s3://b/lake", "options": {"storage.aws_secret_access_key": "AWSSECRETVAL",
                                                                 "storage.aws_region": "eu-west-1"}},
                    "B": {"servers": "nats://h:4222", "options": {"nkeySeed": "SUANKEYSEEDVAL", "PASSWORD": "hunter22",
                                                                  "token": "tok3nABCD", "creds": "/secrets/app.creds",
                                                                  "spillDir": "s3://k:SPILLSECRET@lake/spill"}}},
    })  # fmt: skip
    shown = repr(spec)
    for secret in ("AWSSECRETVAL", "SUANKEYSEEDVAL", "hunter22", "tok3nABCD", "SPILLSECRET"):
        assert secret not in shown
    assert "'storage.aws_secret_access_key': '***'" in shown and "'nkeySeed': '***'" in shown
    assert "'storage.aws_region': 'eu-west-1'" in shown and "'creds': '/secrets/app.creds'" in shown
    assert "'spillDir': 's3://k:***@lake/spill'" in shown
    assert spec.origin("B").options["nkeySeed"] == "SUANKEYSEEDVAL"  # only the repr hides it


def test_yaml_numbers_and_booleans_in_options_are_text_as_spark_takes_them(tmp_path: Path) -> None:
    """``maxMessagesPerTrigger: 100000`` or ``allow_http: true`` in a YAML (or JSON) job: options
    are text, booleans lower-case as Spark's ``.option()`` writes them; a list is still refused."""
    path = tmp_path / "job.yaml"
    path.write_text(
        "stream: {name: X, sources: [{name: O}]}\n"
        f"target: {{location: {tmp_path / 'lake'}, storage_options: {{allow_http: true, timeout: 30}}}}\n"
        "origins:\n  O:\n    servers: nats://h:4222\n"
        "    options: {maxMessagesPerTrigger: 100000, spillReferences: false, maxTriggerDelay: 2.5}\n"
    )
    spec = load_job(path)
    assert spec.target.storage_options == {"allow_http": "true", "timeout": "30"}
    assert spec.origin("O").options == {"maxMessagesPerTrigger": "100000", "spillReferences": "false",
                                        "maxTriggerDelay": "2.5"}
    assert load_job(job(tmp_path, {"name": "X", "sources": [{"name": "O"}]}, origins={
        "*": {"servers": "nats://h:4222", "options": {"headersOnly": True}}})).origin("O").options == {"headersOnly": "true"}
    with pytest.raises(JobError, match=r"origins\.O\.options\.filterSubjects: Input should be a valid string"):
        load_job(job(tmp_path, {"name": "X", "sources": [{"name": "O"}]}, origins={
            "O": {"servers": "nats://h:4222", "options": {"filterSubjects": ["a", "b"]}}}))


def test_an_origin_that_is_not_there_fails_before_the_target_is_made(tmp_path: Path) -> None:
    spec = load_job(job(tmp_path, {"name": "T", "sources": [{"name": "NOPE"}]}))
    jsspark.connect(str(tmp_path / "origin"))  # the origin lake exists, its stream does not
    running = Job(spec, spark=object())  # no session is started: probe and start fail first
    with pytest.raises(jsspark.errors.APIError, match="stream not found"):
        running.start()
    assert jsspark.connect(str(tmp_path / "target")).streams_info() == []


def test_republish_to_passes_its_own_store_and_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    got: list[dict[str, Any]] = []
    monkeypatch.setattr("jsspark.jobs.republish.start_republish", lambda *a, **kw: got.append(kw))
    stream = {"name": "X", "subjects": ["x.>"], "republish": {"src": "x.>", "dest": "out.>"}}
    lake_dest = {"location": "s3://other/lake", "storage_options": {"aws_region": "us-east-1"}, "stream": "B"}
    server_dest = {"servers": "nats://h:4222", "options": {"publishTimeout": "60s", "maxInFlight": "10"}}
    for dest in (lake_dest, server_dest):
        spec = load_job({**job(tmp_path, stream, republish_to=dest),
                         "target": {"location": str(tmp_path / "t"), "storage_options": {"aws_region": "eu-west-1"}}})
        Job(spec, spark=object())._start_republish({"availableNow": True}, str(tmp_path / "ck"))
    assert got[0]["destination"] == lake_dest and got[0]["storage_options"] == {"aws_region": "eu-west-1"}
    assert got[1]["destination"] == {"servers": "nats://h:4222", "publishTimeout": "60s", "maxInFlight": "10"}


def test_an_endpoint_names_a_saved_context_for_its_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``{"context": NAME}``: the server and credentials ``jsspark context add`` saved, as
    ``nats --context``; fields given next to it win."""
    from jsspark.cli.context import Context, save

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    seed = tmp_path / "user.nk"
    seed.write_text("SUAFAKESEED\n")
    save(Context("prod", url="nats://alice:pw123456@nats:4222", user="alice", password="hunter22", nkey=str(seed)))
    save(Context("lakeonly", location=str(tmp_path / "lake")))
    spec = load_job(job(tmp_path, {"name": "X", "sources": [{"name": "O"}, {"name": "P"}]},
                        origins={"O": {"context": "prod"}, "P": {"context": "prod", "user": "bob"}}))
    assert spec.origin("O").connection_options() == {
        "servers": "nats://alice:pw123456@nats:4222", "user": "alice", "password": "hunter22", "nkeySeed": "SUAFAKESEED"}
    assert spec.origin("P").user == "bob" and "hunter22" not in repr(spec) and "SUAFAKESEED" not in repr(spec)
    for name, text in [("lakeonly", "context 'lakeonly' has no server"), ("nope", "unknown context 'nope'")]:
        with pytest.raises(JobError, match=text):
            load_job(job(tmp_path, {"name": "X", "sources": [{"name": "O"}]}, origins={"O": {"context": name}}))


@pytest.mark.parametrize(
    ("where", "endpoint", "text"),
    [("origins", {"servers": "nats://h:4222", "storage_options": {"aws_region": "x"}},
      "storage_options: a lake's object-store settings need 'location'"),
     ("origins", {"location": "/l", "tls_hostname": "h"}, "tls_hostname: connection fields need 'servers'"),
     ("origins", {"location": "/l", "name": "app"}, "name: connection fields need 'servers'"),
     ("target", {"location": "/l", "options": {"maxBatchRows": "5"}}, "target.options: the target takes no reader options")],
)  # fmt: skip
def test_a_field_that_would_do_nothing_is_refused(tmp_path: Path, where: str, endpoint: dict[str, Any], text: str) -> None:
    doc = job(tmp_path, {"name": "T", "sources": [{"name": "O"}]})
    doc[where] = {"*": endpoint} if where == "origins" else endpoint
    with pytest.raises(JobError, match=text):
        load_job(doc)


@pytest.mark.parametrize(
    ("stream", "text"),
    [({"name": "T", "sources": [{"name": "ORDERS"}, {"name": "RETURNS"}]},
      "origins: 'ORDRES' is no mirror or source of stream 'T' \\(its origins: 'ORDERS', 'RETURNS'\\)"),
     ({"name": "M", "mirror": {"name": "ORDERS"}}, "'ORDRES' is no mirror or source of stream 'M' \\(its origins: 'ORDERS'\\)"),
     ({"name": "R", "subjects": ["r.>"], "republish": {"src": "r.>", "dest": "out.>"}},
      "'ORDRES' is no mirror or source of stream 'R' \\(its origins: none\\)")],
)  # fmt: skip
def test_an_origins_entry_that_names_no_origin_is_refused(tmp_path: Path, stream: dict[str, Any], text: str) -> None:
    """A misspelt entry would otherwise be ignored, and with a '*' default its origin read from there."""
    doc = job(tmp_path, stream, origins={"ORDRES": {"servers": "nats://prod:4222"}, "*": {"location": "/other"}})
    if "republish" in stream:
        doc["republish_to"] = {"servers": "nats://prod:4222"}
    with pytest.raises(JobError, match=text):
        load_job(doc)


@pytest.mark.parametrize("line", [
    "password: Sup3r: S3cretValue",  # a ': ' inside the password
    'password: "S3cretValue',  # an unclosed quote
    "password: *S3cretValue",  # read as an alias
    "password: !S3cretValue x",  # read as a tag
])
def test_a_yaml_job_file_that_does_not_parse_names_the_place_not_the_text(tmp_path: Path, line: str) -> None:
    """PyYAML's errors quote the offending line (and an alias or tag name): the job file's
    password line ended up in ``jsspark run``'s error; now the problem and where it is."""
    path = tmp_path / "job.yaml"
    path.write_text(f"stream: {{name: L, sources: [{{name: O}}]}}\ntarget: {{location: {tmp_path}}}\n"
                    f"origins:\n  O:\n    servers: nats://127.0.0.1:4222\n    {line}\n")
    with pytest.raises(JobError) as e:
        load_job(path)
    assert str(e.value).startswith(f"{path}: not valid YAML: ") and "line 6, column" in str(e.value), str(e.value)
    assert "S3cretValue" not in str(e.value), str(e.value)
