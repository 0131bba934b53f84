"""What a job needs to know about an origin stream before it reads it, lake or server.

The server's own choices when it sets up a mirror or source (``stream.go``
``setupMirrorConsumer`` / ``setupSourceConsumer``) depend on the origin: an Interest or
WorkQueue origin is read through a durable consumer whose acks remove what was stored (2.14
durable sourcing); a Limits origin through an ephemeral ordered consumer. The origin's
identity (the hash of its creation time) goes into every ``Nats-Stream-Source`` a 2.15
server writes. ``OriginFacts`` gathers those, from ``stream_info`` on a lake or the
JetStream API on a server.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from jsspark.config import StreamSource
from jsspark.engine.api import rfc3339nano
from jsspark.engine.sourcing import Origin, identity_of, server_hash
from jsspark.errors import APIError
from jsspark.jobs.spec import Endpoint

DURABLE_PREFIX = "jsspark_"
# The server's API level from which origins answer with their identity (2.15).
IDENTITY_API_LEVEL = 5


@dataclass(frozen=True)
class OriginFacts:
    retention: str
    identity: str | None
    durable: dict[str, Any] | None = None  # the existing durable's config, if any (server origins)
    messages: int = 0  # the origin's state when the job planned
    last_seq: int = 0
    last_ts_ns: int = 0
    durable_name: str = ""  # the durable the job reads it through (choose_durable), when it acks
    stale: tuple[str, ...] = ()  # the job's durables there no source reads any more
    first_seq: int = 0

    @property
    def needs_acks(self) -> bool:
        return self.retention in ("interest", "workqueue")


def consumer_name(target: str, source: StreamSource, sources: Sequence[StreamSource]) -> str:
    """The durable a job reads an Interest/WorkQueue origin through, named as the server names
    its sourcing consumer (``createSourcingConsumerHash``): stable per target and origin, so a
    source whose filter or transforms change keeps its durable (updated, its position kept);
    the source's iname joins the hash only when ``sources`` read that origin twice."""
    origin = Origin.of(source)
    twice = sum(Origin.of(s).name == origin.name for s in sources) > 1
    return f"{DURABLE_PREFIX}{target}_{server_hash(origin.iname if twice else origin.iname.split(' ')[0])}"


def legacy_consumer_name(target: str, source: StreamSource) -> str:
    """The name jobs gave the durable until they named it as the server does: per iname."""
    return f"{DURABLE_PREFIX}{target}_{server_hash(Origin.of(source).iname)}"


def owned_durables(target: str, names: Iterable[str]) -> list[str]:
    """Among an origin's consumer names, the durables jobs into ``target`` created."""
    pattern = re.compile(rf"{DURABLE_PREFIX}{re.escape(target)}_[0-9A-Za-z]{{8}}")
    return [n for n in names if pattern.fullmatch(n)]


def choose_durable(target: str, source: StreamSource, sources: Sequence[StreamSource],
                   existing: Iterable[str]) -> tuple[str, tuple[str, ...]]:
    """The durable ``source`` reads through, and the job's durables on its origin that no source
    of ``sources`` reads any more (to delete, as the server's stream update deletes the sourcing
    consumers it no longer uses: ``tryDeleteSourceConsumer``). ``existing``: the origin's
    consumer names. The chosen one is ``consumer_name``'s if it exists; else a durable named as
    jobs named it before (``legacy_consumer_name``: adopted, so its checkpoint's offsets, which
    carry its name, and its ack floor stay valid); else, when ``sources`` read the origin once,
    the one job durable there (a config whose filter or transforms were different: its filter
    is updated and its position carries over); else ``consumer_name``'s, created."""
    owned = owned_durables(target, existing)
    mine = [s for s in sources if Origin.of(s).name == Origin.of(source).name]
    wanted = [consumer_name(target, s, sources) for s in mine]
    chosen = {}
    for s, want in zip(mine, wanted, strict=True):
        legacy = legacy_consumer_name(target, s)
        chosen[want] = want if want in owned else legacy if legacy in owned else None
    left = [n for n in owned if n not in chosen.values()]
    if len(mine) == 1 and chosen[wanted[0]] is None and len(left) == 1:
        chosen[wanted[0]] = left.pop()
    taken = {want: name or want for want, name in chosen.items()}
    return taken[consumer_name(target, source, sources)], tuple(n for n in owned if n not in taken.values())


def run_sync(coro: Any) -> Any:
    """``asyncio.run``, also where this thread's event loop is already running (a Jupyter
    cell, which ``asyncio.run`` refuses): then on a short-lived helper thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1, thread_name_prefix="jsspark-origin") as pool:
        return pool.submit(asyncio.run, coro).result()


Chooser = Callable[[list[str]], tuple[str, tuple[str, ...]]]  # consumer names -> (durable, stale)


def lake_facts(endpoint: Endpoint, name: str, choose: Chooser | None = None) -> OriginFacts:
    import jsspark

    lake = jsspark.connect(str(endpoint.location), endpoint.storage_options)
    info = lake.stream_info(name)
    retention = str(getattr(info.config.retention, "value", info.config.retention))
    facts = OriginFacts(retention=retention, identity=identity_of(rfc3339nano(info.created_ns)),
                        messages=info.state.messages, last_seq=info.state.last_seq,
                        last_ts_ns=info.state.last_ts_ns, first_seq=info.state.first_seq)
    if choose is None or not facts.needs_acks:
        return facts
    durable, stale = choose([c.name for c in lake.consumers_info(name)])
    return replace(facts, durable_name=durable, stale=stale)


def delete_durables(endpoint: Endpoint, stream: str, names: Sequence[str],
                    connection: Mapping[str, str] | None = None) -> None:
    """Delete a job's durables on an origin (one already gone is no error)."""
    if not names:
        return
    if endpoint.is_lake:
        import jsspark

        lake = jsspark.connect(str(endpoint.location), endpoint.storage_options)
        for name in names:
            try:
                lake.delete_consumer(stream, name)
            except APIError as e:
                if e.err_code != 10014:  # consumer not found: already gone
                    raise
        return
    from jsspark.live.consumer import delete_consumer

    async def delete(nc: Any, conn: Any) -> None:
        for name in names:
            await delete_consumer(nc, conn, stream, name)

    _on_server(endpoint, stream, delete, connection)


def origin_connection(endpoint: Endpoint, source: StreamSource) -> dict[str, str]:
    """The live options that connect to a server origin: the endpoint's, and for a mirror or
    source with ``external`` (an origin in another account or domain, reached through imports)
    its prefixes, used as the server uses them for its own sourcing consumer
    (``setupSourceConsumer``): API requests go to ``external.api`` and deliveries to subjects
    under ``external.deliver``, the only ones the importing account receives. The reader's
    inboxes (its durable's deliver subject, each ordered consumer's) are built on
    ``inboxPrefix``, so that is the deliver prefix. What the endpoint sets itself (``api_prefix``
    or ``domain``; ``apiPrefix``/``domain``/``inboxPrefix`` in its ``options``) wins."""
    opts = endpoint.connection_options()
    ext = source.external
    if ext is None:
        return opts
    given = {k.lower() for k in (*opts, *endpoint.options)}
    if ext.api and not given & {"apiprefix", "domain"}:
        opts["apiPrefix"] = ext.api
    if ext.deliver and "inboxprefix" not in given:
        opts["inboxPrefix"] = ext.deliver
    return opts


def _connection_options(options: Mapping[str, str]) -> dict[str, str]:
    """The connection options among an endpoint's ``options`` (names case-insensitive, as
    Spark's), under their canonical names: the probe connects as the reader will."""
    from jsspark.live.options import CONNECTION_OPTIONS

    names = {n.lower(): n for n in CONNECTION_OPTIONS}
    return {names[k.lower()]: str(v) for k, v in options.items() if k.lower() in names}


def server_facts(endpoint: Endpoint, name: str, choose: Chooser | None = None,
                 connection: Mapping[str, str] | None = None) -> OriginFacts:
    """Stream info (retention, created) and API level from the server; on an origin read
    through a durable, its consumer names given to ``choose`` (``choose_durable``) and the
    chosen durable's config when it exists already (a restart must ask for the same start
    position). ``connection``: the origin's connection options (``origin_connection``: an
    external origin's API prefix); default the endpoint's."""
    from jsspark.live.consumer import consumer_info, consumer_names, js_request, stream_info
    from jsspark.live.snapshot import rfc3339_ns

    async def ask(nc: Any, conn: Any) -> OriginFacts:
        info = await stream_info(nc, conn, name)
        account = await js_request(nc, conn, "INFO", None)
        level = int((account.get("api") or {}).get("level") or 0)
        created = info.get("created")
        identity = identity_of(created) if created and level >= IDENTITY_API_LEVEL else None
        state = info.get("state") or {}
        last_ts = state.get("last_ts")
        facts = OriginFacts(str(info["config"].get("retention", "limits")), identity, None,
                            int(state.get("messages", 0)), int(state.get("last_seq", 0)),
                            rfc3339_ns(last_ts) if last_ts and state.get("messages") else 0,
                            first_seq=int(state.get("first_seq", 0)))
        if choose is None or not facts.needs_acks:
            return facts
        durable, stale = choose(await consumer_names(nc, conn, name))
        existing = None
        try:
            if durable:
                existing = (await consumer_info(nc, conn, name, durable)).get("config")
        except APIError as e:
            if e.err_code != 10014:  # consumer not found: created on first start
                raise
        return replace(facts, durable=existing, durable_name=durable, stale=stale)

    return _on_server(endpoint, name, ask, connection)


def seq_from_time(endpoint: Endpoint, name: str, at: str, connection: Mapping[str, str] | None = None) -> int | None:
    """The origin's first sequence stored at or after ``at`` (its last sequence + 1 past its
    messages), where a by-start-time consumer created now starts (``GetSeqFromTime``): a lake's
    ``start_sequence``, a server's ``STREAM.MSG.GET`` with ``start_time`` (``None`` from a server
    that does not take one)."""
    if endpoint.is_lake:
        import jsspark
        from jsspark.config import ConsumerConfig

        lake = jsspark.connect(str(endpoint.location), endpoint.storage_options)
        cfg = ConsumerConfig.from_json({"deliver_policy": "by_start_time", "opt_start_time": at})
        return int(lake.start_sequence(name, cfg)[0])
    from jsspark.live.consumer import js_request, stream_info

    async def ask(nc: Any, conn: Any) -> int | None:
        try:
            return int((await js_request(nc, conn, f"STREAM.MSG.GET.{name}", {"start_time": at}))["message"]["seq"])
        except APIError as e:
            if e.err_code != 10037:  # no message found: past the last one
                return None
        return int((await stream_info(nc, conn, name)).get("state", {}).get("last_seq", 0)) + 1

    return _on_server(endpoint, name, ask, connection)


def _on_server(endpoint: Endpoint, name: str, work: Callable[[Any, Any], Any],
               connection: Mapping[str, str] | None) -> Any:
    """Run ``work(nc, conn)`` on a connection to the origin's server; a connection error names
    the origin and the server without credentials."""
    from jsspark.live.options import parse_connection, redact

    given = dict(endpoint.connection_options() if connection is None else connection)
    conn = parse_connection({**given, **_connection_options(endpoint.options)})

    async def run() -> Any:
        from jsspark.live.client import open_client

        nc = await open_client(conn, conn.connect_timeout)  # refused credentials fail at once
        try:
            return await work(nc, conn)
        finally:
            await nc.close()

    try:
        return run_sync(run())
    except APIError:
        raise
    except Exception as e:  # a connection error may echo a URL with credentials
        raise ConnectionError(f"origin {name} at {redact(endpoint.server_urls, conn)}: {redact(str(e), conn)}") from None
