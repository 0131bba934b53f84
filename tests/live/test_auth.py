"""Connection options against nats-servers configured for them (``auth_servers``): user/password,
token, nkey seed, TLS with a CA and a client certificate, and a creds file in operator/JWT mode.

Each way must work for the live source (streaming ``Ingestor`` and the batch read) and for the
publisher; wrong credentials must fail promptly with the server's refusal; and no secret may
appear in any ``repr``, exception text or log line. One Spark test checks the same for a real
query and its progress JSON.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from jsspark.live import publisher
from jsspark.live.ingestor import Ingestor
from jsspark.live.options import Connection, parse_live_read_options, parse_live_write_options
from jsspark.live.snapshot import SnapshotPartition
from jsspark.nats_server import NatsServer
from tests.live.auth_servers import AuthCase, auth_cases
from tests.live.test_batch_read import collect, load
from tests.live.test_consumers import drain

pytestmark = [pytest.mark.nats]
NAMES = ["userpass", "token", "nkey", "tls", "creds"]
REFUSED = 10.0  # seconds a refused connection may take to fail, at most


@pytest.fixture(scope="module")
def auth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[AuthCase, NatsServer]]]:
    root = tmp_path_factory.mktemp("auth")
    started: dict[str, tuple[AuthCase, NatsServer]] = {}
    try:
        for case in auth_cases(root):
            started[case.name] = (case, case.start(root))
        yield started
    finally:
        for _, srv in started.values():
            srv.close()


def admin(conn: Connection, stream: str) -> None:
    """Create ``stream`` (subjects ``<stream>.>``) over a connection with the same options."""
    import nats

    async def go() -> None:
        kw = conn.connect_kwargs()
        kw.update(allow_reconnect=False, max_reconnect_attempts=1)
        nc = await nats.connect(**kw)
        try:
            await nc.jetstream().add_stream(name=stream, subjects=[f"{stream.lower()}.>"])
        finally:
            await nc.close()

    asyncio.run(go())


def rows(stream: str, n: int) -> pa.Table:
    return pa.table({"subject": [f"{stream.lower()}.{i % 3}" for i in range(n)],
                     "data": [f"d{i}".encode() for i in range(n)]})


def refused(fn: Any) -> str:
    """Run ``fn``, which must fail within ``REFUSED`` seconds; its error text."""
    t = time.monotonic()
    with pytest.raises(Exception) as info:
        fn()
    assert time.monotonic() - t < REFUSED, f"a refused connection took {time.monotonic() - t:.1f}s to fail"
    return f"{type(info.value).__name__}: {info.value}"


def assert_no_secret(case: AuthCase, texts: list[str]) -> None:
    for secret in case.secrets:
        for text in texts:
            assert secret not in text, f"{case.name}: a secret appears in {text[:300]!r}"


@pytest.mark.parametrize("name", NAMES)
def test_connection_options(name: str, auth: dict[str, tuple[AuthCase, NatsServer]], tmp_path: Path,
                            caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> None:
    caplog.set_level(logging.DEBUG)
    case, srv = auth[name]
    stream = f"AUTH_{name.upper()}"
    good = {"servers": srv.url, **case.good}
    bad = {"servers": srv.url, **case.bad}
    read = {"stream": stream, "spillDir": str(tmp_path), "consumer": "lake", "waitTimeout": "20"}
    ropts, wopts = parse_live_read_options({**good, **read}), parse_live_write_options(good)
    admin(ropts.conn, stream)

    # the publisher, the streaming source (a flow_control durable) and a batch read
    published = asyncio.run(publisher.publish_batches(wopts, iter(rows(stream, 300).to_batches())))
    assert published == (300, 0)
    ing = Ingestor(ropts)
    ing.start(None)
    try:
        _, got = drain(ing, ing.floor, 300)
    finally:
        ing.stop()
    assert got == list(range(1, 301))
    snapshot = collect(load(srv.url, stream, **case.good))
    assert [r[0] for r in snapshot] == list(range(1, 301))

    # refused: each path fails promptly, with the server's refusal, naming no secret
    errors = [
        refused(lambda: Ingestor(parse_live_read_options({**bad, **read})).start(None)),
        refused(lambda: collect(load(srv.url, stream, **case.bad))),
        refused(lambda: asyncio.run(publisher.publish_batches(parse_live_write_options(bad),
                                                              iter(rows(stream, 3).to_batches())))),
    ]
    # the server's -ERR; a missing client certificate ends the TLS 1.3 session right after the
    # handshake: the client sees the alert, or (racing it) the connection reset
    refusal = (r"CERTIFICATE_REQUIRED|Connection lost|Connection reset|Broken pipe" if name == "tls"
               else "'Authorization Violation'")
    for text in errors:
        assert re.search(refusal, text), text

    bad_ropts = parse_live_read_options({**bad, **read})
    part = SnapshotPartition(ropts.conn, stream, 0, 300, (), False, True)
    out, err = capfd.readouterr()
    assert_no_secret(case, [*errors, repr(ropts), repr(wopts), repr(bad_ropts), repr(part), str(part),
                            caplog.text, out, err])


def spark_log(spark: Any) -> Any:
    """Capture the driver's log4j output at INFO from now on; the returned function stops the
    capture (back to ERROR, as ``local_spark`` sets it) and returns the text."""
    jvm = spark._jvm
    core = jvm.org.apache.logging.log4j.core
    ctx = jvm.org.apache.logging.log4j.LogManager.getContext(False)
    config = ctx.getConfiguration()
    writer = jvm.java.io.StringWriter()
    appender = core.appender.WriterAppender.createAppender(core.layout.PatternLayout.createDefaultLayout(), None,
                                                           writer, "jsspark-auth-test", False, True)
    appender.start()
    config.addAppender(appender)
    config.getRootLogger().addAppender(appender, None, None)
    ctx.updateLoggers()
    spark.sparkContext.setLogLevel("INFO")

    def stop() -> str:
        spark.sparkContext.setLogLevel("ERROR")
        config.getRootLogger().removeAppender("jsspark-auth-test")
        ctx.updateLoggers()
        appender.stop()
        return str(writer.toString())

    return stop


@pytest.mark.spark
def test_spark_query_keeps_secrets_out_of_progress_logs_and_errors(
        spark: Any, auth: dict[str, tuple[AuthCase, NatsServer]], tmp_path: Path,
        capfd: pytest.CaptureFixture[str]) -> None:
    """NATS (user/password) -> Spark -> NATS (same server): the query works, and its progress JSON,
    Spark's and the workers' output and a refused query's error hold no password."""
    case, srv = auth["userpass"]
    admin(parse_live_write_options({"servers": srv.url, **case.good}).conn, "SQ_IN")
    admin(parse_live_write_options({"servers": srv.url, **case.good}).conn, "SQ_OUT")
    assert asyncio.run(publisher.publish_batches(parse_live_write_options({"servers": srv.url, **case.good}),
                                                 iter(rows("SQ_IN", 200).to_batches()))) == (200, 0)

    def query(opts: dict[str, str], ckpt: str) -> Any:
        reader = spark.readStream.format("jetstream").option("servers", srv.url).option("stream", "SQ_IN")
        for k, v in {**opts, "spillDir": str(tmp_path / "spill"), "reportLatestOffset": "true",
                     "waitTimeout": "10"}.items():
            reader = reader.option(k, v)
        writer = reader.load().selectExpr("concat('sq_out.', subject) AS subject", "data").writeStream \
            .format("jetstream").option("servers", srv.url)
        for k, v in opts.items():
            writer = writer.option(k, v)
        return writer.option("checkpointLocation", str(tmp_path / ckpt)).trigger(availableNow=True).start()

    log = spark_log(spark)
    q = query(case.good, "ok")
    q.awaitTermination(120)
    assert q.exception() is None, q.exception()
    progress = json.dumps(q.recentProgress, default=str)
    assert json.loads(q.recentProgress[-1]["sources"][0]["latestOffset"])["seq"] == 200

    async def count() -> int:
        import nats

        nc = await nats.connect(srv.url, user="alice", password=case.good["password"])
        try:
            return (await nc.jetstream().stream_info("SQ_OUT")).state.messages
        finally:
            await nc.close()

    assert asyncio.run(count()) == 200

    failed = query(case.bad, "bad")
    with pytest.raises(Exception, match="Authorization Violation"):
        failed.awaitTermination(120)
    error = str(failed.exception())
    assert "Authorization Violation" in error, error[:2000]
    with pytest.raises(Exception) as batch:
        spark.read.format("jetstream").option("servers", srv.url).option("stream", "SQ_IN") \
            .option("user", "alice").option("password", case.bad["password"]).load().collect()
    out, err = capfd.readouterr()
    spark_log_text = log()
    assert "Authorization Violation" in spark_log_text  # the capture sees the query's failure
    assert_no_secret(case, [progress, json.dumps(failed.recentProgress, default=str), error, str(batch.value), out, err,
                            spark_log_text])


@pytest.mark.spark
def test_query_plans_redact_the_nkey_seed_and_url_credentials(
        spark: Any, auth: dict[str, tuple[AuthCase, NatsServer]]) -> None:
    """Spark prints a source's options in its plans and redacts only options like ``*password*``;
    ``register`` (``local_spark`` calls it) adds ``nkeySeed`` and any value with a URL's userinfo."""
    nkey, nkey_srv = auth["nkey"]
    userpass, userpass_srv = auth["userpass"]
    url = userpass_srv.url.replace("nats://", f"nats://alice:{userpass.good['password']}@")
    admin(parse_live_write_options({"servers": nkey_srv.url, **nkey.good}).conn, "PLAN_NKEY")
    admin(parse_live_write_options({"servers": url}).conn, "PLAN_URL")
    plans = []
    for servers, opts, stream in ((nkey_srv.url, nkey.good, "PLAN_NKEY"), (url, {}, "PLAN_URL")):
        reader = spark.readStream.format("jetstream").option("servers", servers).option("stream", stream)
        df = reader.options(**opts).load()
        plans.append(df._jdf.queryExecution().toString())
    assert "nkeySeed=*" in plans[0] and "servers=*" in plans[1]
    assert "stream=PLAN_NKEY" in plans[0]  # what is not secret still shows
    assert_no_secret(nkey, plans)
    assert_no_secret(userpass, plans)


def test_tls_hostname_alone_names_the_host_the_server_certificate_must_carry(
        auth: dict[str, tuple[AuthCase, NatsServer]], monkeypatch: pytest.MonkeyPatch) -> None:
    """``tlsHostname`` without ``tlsCa``/``tlsCert`` (a server dialled by IP whose certificate,
    from a CA the system trusts, names a host): nats-py checks the certificate against it with
    its default SSL context; here the system's CAs are the test CA (``SSL_CERT_FILE``)."""
    case, srv = auth["tls"]
    monkeypatch.setenv("SSL_CERT_FILE", case.good["tlsCa"])

    def connect(host: str) -> str:
        conn = parse_live_read_options({"servers": srv.url, "stream": "TLS_HOST", "tlsHostname": host}).conn
        kw = conn.connect_kwargs()
        assert kw["tls_hostname"] == host and "tls" not in kw  # nats-py's default context
        return refused(lambda: admin(conn, "TLS_HOST"))

    assert "Hostname mismatch, certificate is not valid for 'nats.elsewhere.test'" in connect("nats.elsewhere.test")
    # a name the certificate carries passes: the server then asks for the client certificate
    assert re.search(r"CERTIFICATE_REQUIRED|Connection lost|Connection reset|Broken pipe", connect("localhost"))


def test_job_origin_with_refused_credentials_fails_promptly(auth: dict[str, tuple[AuthCase, NatsServer]]) -> None:
    """A job's origin lookup (``jsspark run``) with a wrong password fails with the server's
    refusal instead of retrying the first connection forever."""
    from jsspark.jobs.origins import server_facts
    from jsspark.jobs.spec import Endpoint

    case, srv = auth["userpass"]
    text = refused(lambda: server_facts(Endpoint(servers=srv.url, user="alice", password=case.bad["password"]),
                                        "ANY", None))
    assert "Authorization Violation" in text
    assert_no_secret(case, [text])


@pytest.mark.parametrize("name", NAMES)
def test_a_republish_destination_connects_as_the_reader_and_the_sink_do(
        name: str, auth: dict[str, tuple[AuthCase, NatsServer]], tmp_path: Path) -> None:
    """A job's ``republish_to`` server (``jobs.republish.publish_to_server``): its options work,
    refused ones fail at once with the server's refusal (it said "no servers available"), and a
    certificate the client cannot verify fails at once too (nats-py's reconnect path then
    waited for ever on the failed TLS transport's close: the batch, and the query, hung)."""
    from jsspark.engine.republish import OUTPUT_SCHEMA
    from jsspark.jobs.republish import parse_destination, publish_to_server
    from tests.live.auth_servers import make_certs

    case, srv = auth[name]
    out = pa.table({"seq": [1, 2], "ts_ns": [0, 0], "subject": ["rp.a", "rp.b"], "headers": [None, None],
                    "data": [b"1", b"2"]}, OUTPUT_SCHEMA)

    def republish(opts: dict[str, str]) -> tuple[int, int]:
        dest = parse_destination({"servers": srv.url, **opts}, origin_location=str(tmp_path), origin_stream="S")
        # bounded beyond REFUSED, so a hang fails the test instead of stalling it
        return asyncio.run(asyncio.wait_for(publish_to_server(dest, out, stream="S", acked=False), REFUSED + 5))

    assert republish(case.good) == (2, 0)
    refusal = (r"CERTIFICATE_REQUIRED|Connection lost|Connection reset|Broken pipe" if name == "tls"
               else "'Authorization Violation'")
    texts = [refused(lambda: republish(case.bad))]
    assert re.search(refusal, texts[0]), texts[0]
    if name == "tls":  # the client refuses the server's certificate: another CA, or none (system CAs)
        elsewhere = make_certs(tmp_path)
        for opts in ({"tlsCa": str(elsewhere["ca"])}, {}):
            texts.append(refused(lambda opts=opts: republish(opts)))
            assert "CERTIFICATE_VERIFY_FAILED" in texts[-1], texts[-1]
    assert_no_secret(case, texts)


def test_a_url_password_with_an_at_sign_is_redacted_whole(tmp_path: Path) -> None:
    """``nats://alice:pw@rest@host``: nats-py (and nats.go's ``url.Parse``) take the userinfo up to the
    last ``@``, so this authenticates with the password ``pw@rest``; every text that shows the URL
    must hide all of it (the redaction stopped at the first ``@`` and showed the rest)."""
    from jsspark.cli.context import Context
    from jsspark.cli.run import Redactor
    from jsspark.jobs.spec import load_job
    from jsspark.nats_server import free_port

    password = "pw@Rest-Of-The-S3cret"
    (tmp_path / "store").mkdir()
    with NatsServer(store_dir=tmp_path / "store", extra_args=["--user", "alice", "--pass", password]) as srv:
        url = srv.url.replace("nats://", f"nats://alice:{password}@")
        read = {"stream": "AT", "spillDir": str(tmp_path), "waitTimeout": "2"}
        admin(parse_live_read_options({"servers": url, **read}).conn, "AT")  # it authenticates
        dead = f"nats://alice:{password}@127.0.0.1:{free_port()}"
        spec = load_job({"stream": {"name": "L", "sources": [{"name": "AT"}]}, "target": {"location": str(tmp_path)},
                         "origins": {"AT": {"servers": url}}})
        texts = [
            repr(parse_live_read_options({"servers": url, **read})),
            refused(lambda: Ingestor(parse_live_read_options({"servers": dead, **read})).start(None)),
            repr(spec.origins["AT"]),
            Redactor(spec)(f"could not reach {url}"),
            json.dumps(Context(name="c", location=str(tmp_path), url=url).redacted()),
        ]
    assert "no NATS server reachable at nats://alice:***@127.0.0.1" in texts[1], texts[1]
    for text in texts:
        assert "Rest-Of-The-S3cret" not in text and "alice" in text, text


def test_a_running_reader_whose_credentials_the_server_no_longer_takes_stops(tmp_path: Path) -> None:
    """The server restarts with another password (rotated): nats-py reconnects for ever, each try
    refused, and the reader waited without a word, the query running empty batches for good.
    As nats.go gives up after the same auth error twice in a row (``processAuthError``), the
    reader now fails its next batch with the server's refusal, naming no secret."""
    (tmp_path / "store").mkdir()
    conf = tmp_path / "auth.conf"
    conf.write_text('authorization { user: "alice", password: "old-S3cret-pw" }')
    with NatsServer(store_dir=tmp_path / "store", extra_args=["-c", str(conf)]) as srv:
        ropts = parse_live_read_options({"servers": srv.url, "user": "alice", "password": "old-S3cret-pw",
                                         "stream": "ROT", "spillDir": str(tmp_path / "spill"), "waitTimeout": "10"})
        admin(ropts.conn, "ROT")
        assert asyncio.run(publisher.publish_batches(parse_live_write_options(
            {"servers": srv.url, "user": "alice", "password": "old-S3cret-pw"}), iter(rows("ROT", 20).to_batches()))) \
            == (20, 0)
        ing = Ingestor(ropts)
        ing.start(None)
        try:
            end, got = drain(ing, ing.floor, 20)
            assert got == list(range(1, 21))
            conf.write_text('authorization { user: "alice", password: "new-S3cret-pw" }')
            srv.restart()
            deadline = time.monotonic() + 30
            with pytest.raises(Exception) as info:  # batches until the reader gives up
                while time.monotonic() < deadline:
                    ing.latest(end, 400, None)
                    time.sleep(0.2)
        finally:
            ing.stop()
    text = f"{type(info.value).__name__}: {info.value}"
    assert "Authorization Violation" in text and srv.url.removeprefix("nats://") in text, text
    assert "S3cret" not in text, text


def test_an_encrypted_tls_key_fails_naming_the_option(auth: dict[str, tuple[AuthCase, NatsServer]],
                                                      tmp_path: Path) -> None:
    """A ``tlsKey`` that needs a passphrase: Python's ``load_cert_chain`` without one has OpenSSL
    prompt on the terminal ("Enter PEM pass phrase:", a reader or a job started from a shell
    waited there) or, with none, failed as ``OSError: [Errno 22] Invalid argument``, naming
    neither the option nor the file. jsspark takes no passphrase: it says so."""
    from cryptography.hazmat.primitives import serialization

    case, srv = auth["tls"]
    key = serialization.load_pem_private_key(Path(case.good["tlsKey"]).read_bytes(), None)
    encrypted = tmp_path / "client-key-encrypted.pem"
    encrypted.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                            serialization.BestAvailableEncryption(b"a-passphrase")))
    opts = {"servers": srv.url, **case.good, "tlsKey": str(encrypted)}
    texts = [
        refused(lambda: Ingestor(parse_live_read_options({**opts, "stream": "ENC", "spillDir": str(tmp_path),
                                                          "waitTimeout": "5"})).start(None)),
        refused(lambda: asyncio.run(publisher.publish_batches(parse_live_write_options(opts),
                                                              iter(rows("ENC", 1).to_batches())))),
    ]
    for text in texts:
        assert f"option tlsKey: the private key in {str(encrypted)!r} is encrypted" in text, text


@pytest.fixture(scope="module")
def tls_first(auth: dict[str, tuple[AuthCase, NatsServer]],
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AuthCase, NatsServer]]:
    """The TLS case's server again, configured to take the TLS handshake before it sends INFO."""
    case, _ = auth["tls"]
    root = tmp_path_factory.mktemp("tls-first")
    first = AuthCase("tls_first", case.config.replace("timeout: 2", "timeout: 2, handshake_first: true"),
                     case.good, case.bad, case.secrets)
    assert "handshake_first: true" in first.config
    srv = first.start(root)
    try:
        yield first, srv
    finally:
        srv.close()


def test_tls_handshake_first_connects_everywhere_connection_options_are_taken(
        tls_first: tuple[AuthCase, NatsServer], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server with ``tls { handshake_first: true }`` sends nothing before the client's TLS
    handshake. ``tlsHandshakeFirst`` (nats.go's TLSHandshakeFirst) reaches it from the live
    source (streaming and batch), the sink, a republish destination, a job's endpoint
    (``tls_handshake_first``) and a CLI context saved with ``--tlsfirst`` (the nats CLI's
    ``tls_first``); there was no such option, and a connection failed after the server's TLS
    timeout with nats-py's "empty response from server when expecting INFO message"."""
    from jsspark.cli.main import main
    from jsspark.engine.republish import OUTPUT_SCHEMA
    from jsspark.jobs.origins import server_facts
    from jsspark.jobs.republish import parse_destination, publish_to_server
    from jsspark.jobs.spec import Endpoint

    case, srv = tls_first
    good = {"servers": srv.url, **case.good, "tlsHandshakeFirst": "true"}
    read = {"stream": "TLS_FIRST", "spillDir": str(tmp_path), "consumer": "lake", "waitTimeout": "20"}
    ropts = parse_live_read_options({**good, **read})
    admin(ropts.conn, "TLS_FIRST")
    assert asyncio.run(publisher.publish_batches(parse_live_write_options(good),
                                                 iter(rows("TLS_FIRST", 30).to_batches()))) == (30, 0)
    ing = Ingestor(ropts)
    ing.start(None)
    try:
        assert drain(ing, ing.floor, 30)[1] == list(range(1, 31))
    finally:
        ing.stop()
    opts = {k: v for k, v in good.items() if k != "servers"}
    assert [r[0] for r in collect(load(srv.url, "TLS_FIRST", **opts))] == list(range(1, 31))
    out = pa.table({"seq": [1], "ts_ns": [0], "subject": ["tls_first.rp"], "headers": [None], "data": [b"1"]},
                   OUTPUT_SCHEMA)
    dest = parse_destination(good, origin_location=str(tmp_path), origin_stream="S")
    assert asyncio.run(publish_to_server(dest, out, stream="S", acked=True)) == (1, 0)  # stored: TLS_FIRST takes it

    tls = {"tls_ca": case.good["tlsCa"], "tls_cert": case.good["tlsCert"], "tls_key": case.good["tlsKey"]}
    assert server_facts(Endpoint(servers=srv.url, **tls, tls_handshake_first=True), "TLS_FIRST").messages == 31
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert main(["context", "add", "first", "--server", srv.url, "--tlsca", tls["tls_ca"], "--tlscert",
                 tls["tls_cert"], "--tlskey", tls["tls_key"], "--tlsfirst"]) == 0
    assert server_facts(Endpoint(context="first"), "TLS_FIRST").messages == 31

    # without the option: refused promptly (the server's TLS timeout), saying what to set
    plain = {k: v for k, v in good.items() if k != "tlsHandshakeFirst"}
    texts = [refused(lambda: asyncio.run(publisher.publish_batches(parse_live_write_options(plain),
                                                                   iter(rows("TLS_FIRST", 1).to_batches())))),
             refused(lambda: server_facts(Endpoint(servers=srv.url, **tls), "TLS_FIRST"))]
    for text in texts:
        assert "sent no INFO" in text and "tlsHandshakeFirst" in text, text
    assert_no_secret(case, texts)


def test_tls_handshake_first_to_a_server_without_it_fails_at_once(
        auth: dict[str, tuple[AuthCase, NatsServer]]) -> None:
    """A server without ``handshake_first`` sends INFO in plain text at once: the handshake reads it
    as a TLS record (wrong version number), or nats-py took it in before starting TLS, the server
    took the handshake and both wait (connectTimeout). Either way the error names the option."""
    case, srv = auth["tls"]
    opts = parse_live_write_options({"servers": srv.url, **case.good, "tlsHandshakeFirst": "true"})
    text = refused(lambda: asyncio.run(publisher.publish_batches(opts, iter(rows("X", 1).to_batches()))))
    assert "option tlsHandshakeFirst" in text and "not configured with tls { handshake_first: true }" in text, text
    assert_no_secret(case, [text])
