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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jsspark.config import StreamSource
from jsspark.engine.api import rfc3339nano
from jsspark.engine.sourcing import Origin, identity_of, server_hash
from jsspark.errors import APIError
from jsspark.jobs.spec import Endpoint

# The server's API level from which origins answer with their identity (2.15).
IDENTITY_API_LEVEL = 5


@dataclass(frozen=True)
class OriginFacts:
    retention: str
    identity: str | None
    durable: dict[str, Any] | None = None  # the existing durable's config, if any (server origins)
    messages: int = 0  # the origin's state when the job planned
    last_seq: int = 0

    @property
    def needs_acks(self) -> bool:
        return self.retention in ("interest", "workqueue")


def consumer_name(target: str, origin: Origin) -> str:
    """The durable a job reads an Interest/WorkQueue origin through: stable per target and
    origin (its iname), so a restart binds the same consumer and its ack floor."""
    return f"jsspark_{target}_{server_hash(origin.iname)}"


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


def lake_facts(endpoint: Endpoint, name: str) -> OriginFacts:
    import jsspark

    info = jsspark.connect(str(endpoint.location), endpoint.storage_options).stream_info(name)
    retention = getattr(info.config.retention, "value", info.config.retention)
    return OriginFacts(retention=str(retention), identity=identity_of(rfc3339nano(info.created_ns)),
                       messages=info.state.messages, last_seq=info.state.last_seq)


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


def server_facts(endpoint: Endpoint, name: str, durable: str | None,
                 connection: Mapping[str, str] | None = None) -> OriginFacts:
    """Stream info (retention, created) and API level from the server, and the durable's
    config when it exists already (a restart must ask for the same start position).
    ``connection``: the origin's connection options (``origin_connection``: an external
    origin's API prefix); default the endpoint's."""
    from jsspark.live.consumer import consumer_info, js_request, stream_info
    from jsspark.live.options import parse_connection, redact

    given = dict(endpoint.connection_options() if connection is None else connection)
    conn = parse_connection({**given, **_connection_options(endpoint.options)})

    async def ask() -> OriginFacts:
        from jsspark.live.client import open_client

        nc = await open_client(conn, conn.connect_timeout)  # refused credentials fail at once
        try:
            info = await stream_info(nc, conn, name)
            account = await js_request(nc, conn, "INFO", None)
            existing = None
            if durable:
                try:
                    existing = (await consumer_info(nc, conn, name, durable)).get("config")
                except APIError as e:
                    if e.err_code != 10014:  # consumer not found: created on first start
                        raise
            level = int((account.get("api") or {}).get("level") or 0)
            created = info.get("created")
            identity = identity_of(created) if created and level >= IDENTITY_API_LEVEL else None
            state = info.get("state") or {}
            return OriginFacts(str(info["config"].get("retention", "limits")), identity, existing,
                               int(state.get("messages", 0)), int(state.get("last_seq", 0)))
        finally:
            await nc.close()

    try:
        return run_sync(ask())
    except APIError:
        raise
    except Exception as e:  # a connection error may echo a URL with credentials
        raise ConnectionError(f"origin {name} at {redact(endpoint.server_urls, conn)}: {redact(str(e), conn)}") from None
