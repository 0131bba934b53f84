"""Two backends that run the same scenario: a real nats-server and a lake.

Both answer in the server's wire shapes (publish ack or ``{"error": ...}`` dicts, stream state
dicts, stored messages as tuples), so a differential test is a list of steps and one
``assert server == lake`` per step.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import nats

from jsspark.config import ConsumerConfig
from jsspark.engine import headers as H
from jsspark.engine.lake import Lake
from jsspark.errors import APIError, DirectGetError
from tests.rawnats import RawNats

STATE_KEYS = ("messages", "bytes", "first_seq", "last_seq", "num_subjects", "num_deleted", "consumer_count")


def _ack(d: dict[str, Any]) -> dict[str, Any]:
    if "error" in d:
        return {"error": d["error"]}
    out = {"stream": d["stream"], "seq": d["seq"]}
    if d.get("duplicate"):
        out["duplicate"] = True
    return out


INFO_DROP = ("type", "created", "ts")


def consumer_view(r: dict[str, Any]) -> dict[str, Any]:
    """A consumer info / create / reset response without its times (they differ); a paused
    consumer's ``pause_remaining`` in whole minutes, rounded up (asked at different instants)."""
    if "error" in r:
        return {"error": r["error"]}
    out = {k: v for k, v in r.items() if k not in INFO_DROP}
    if "pause_remaining" in out:
        out["pause_remaining"] = -(-out["pause_remaining"] // 60_000_000_000)
    for key in ("delivered", "ack_floor"):
        if key in out:
            out[key] = {k: v for k, v in out[key].items() if k != "last_active"}
    return out


class ServerBackend:
    """Raw JetStream API requests with nats-py, on a private event loop (sync for tests)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.loop = asyncio.new_event_loop()
        self.nc = self.loop.run_until_complete(nats.connect(url))
        self.raw: RawNats | None = None

    def close(self) -> None:
        if self.raw is not None:
            self.raw.close()
        self.loop.run_until_complete(self.nc.close())
        self.loop.close()

    def _req(self, subject: str, body: Any = None, headers: dict[str, str] | None = None) -> dict[str, Any]:
        payload = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        msg = self.loop.run_until_complete(self.nc.request(subject, payload, timeout=5, headers=headers))
        return json.loads(msg.data)

    def add_stream(self, cfg: dict[str, Any]) -> dict[str, Any]:
        r = self._req(f"$JS.API.STREAM.CREATE.{cfg['name']}", cfg)
        return {"error": r["error"]} if "error" in r else {"ok": True}

    def delete_stream(self, name: str) -> None:
        self._req(f"$JS.API.STREAM.DELETE.{name}")

    def add_consumer(self, stream: str, cfg: dict[str, Any]) -> dict[str, Any]:
        name = cfg.get("durable_name") or cfg.get("name")
        r = self._req(f"$JS.API.CONSUMER.CREATE.{stream}.{name}", {"stream_name": stream, "config": cfg})
        return {"error": r["error"]} if "error" in r else {"ok": True}

    def publish(self, subject: str, data: bytes = b"", headers: list[tuple[str, str]] | None = None) -> dict[str, Any]:
        hdrs = dict(headers) if headers else None
        msg = self.loop.run_until_complete(self.nc.request(subject, data, timeout=5, headers=hdrs))
        return _ack(json.loads(msg.data))

    def publish_raw(self, subject: str, data: bytes = b"", headers: list[tuple[str, str]] | None = None) -> dict[str, Any]:
        """``publish`` with the header block written as given (nats-py strips values and keeps
        one per key), for checks of what the server reads from raw header bytes."""
        if self.raw is None:
            self.raw = RawNats(self.url)
        return _ack(json.loads(self.raw.request(subject, data, headers).data))

    def state(self, name: str) -> dict[str, Any]:
        s = self._req(f"$JS.API.STREAM.INFO.{name}")["state"]
        return {k: s.get(k, 0) for k in STATE_KEYS}

    def config(self, name: str) -> dict[str, Any]:
        """The stored config, without the metadata the server adds to responses only."""
        from tests.config.conftest import stored

        r = self._req(f"$JS.API.STREAM.INFO.{name}")
        return {"error": r["error"]} if "error" in r else stored(r["config"])

    def replication(self, name: str) -> dict[str, Any]:
        """The info's ``mirror``/``sources`` entries, without ``active`` and ``error`` (a
        sourcing server's own progress; nothing runs a lake's until a job does)."""
        r = self._req(f"$JS.API.STREAM.INFO.{name}")
        return _replication(r)

    def purge(self, name: str, **req: Any) -> dict[str, Any]:
        """Keywords as the lake's ``purge`` takes them (``subject`` is the request's ``filter``)."""
        body = {("filter" if k == "subject" else k): v for k, v in req.items() if v is not None}
        r = self._req(f"$JS.API.STREAM.PURGE.{name}", body)
        return {"error": r["error"]} if "error" in r else {"purged": r["purged"]}

    def delete_msg(self, name: str, seq: int) -> dict[str, Any]:
        r = self._req(f"$JS.API.STREAM.MSG.DELETE.{name}", {"seq": seq})
        return {"error": r["error"]} if "error" in r else {"ok": True}

    def msg_get(self, name: str, seq: int | None = None, subject: str | None = None, next: bool = False) -> dict[str, Any]:
        """``$JS.API.STREAM.MSG.GET`` with the request nats-py's ``get_msg`` would send (a
        last-by-subject request drops the sequence)."""
        body: dict[str, Any] = {} if seq is None or (subject and not next) else {"seq": seq}
        if subject:
            body["next_by_subj" if next else "last_by_subj"] = subject
        r = self._req(f"$JS.API.STREAM.MSG.GET.{name}", body)
        if "error" in r:
            return {"error": r["error"]}
        return {"seq": r["message"]["seq"], "subject": r["message"]["subject"]}

    def messages(self, name: str) -> list[tuple[int, str, bytes, list[tuple[str, str]] | None]]:
        """Every stored message, read back one by one through the get API."""
        st = self._req(f"$JS.API.STREAM.INFO.{name}")["state"]
        out = []
        for seq in range(st["first_seq"], st["last_seq"] + 1):
            r = self._req(f"$JS.API.STREAM.MSG.GET.{name}", {"seq": seq})
            if "error" in r:
                continue
            m = r["message"]
            import base64

            hdrs = H.decode(base64.b64decode(m["hdrs"]))[0] if m.get("hdrs") else None
            out.append((m["seq"], m["subject"], base64.b64decode(m.get("data") or ""), hdrs or None))
        return out

    def direct_get(self, name: str, req: dict[str, Any]) -> list[tuple[str, dict[str, str], bytes]]:
        """Every reply to a direct get: (status, headers, data); batches end with the 204 EOB."""
        inbox = self.nc.new_inbox()
        replies: list[tuple[str, dict[str, str], bytes]] = []

        async def go() -> None:
            done = asyncio.Event()

            async def cb(msg: Any) -> None:
                status = "" if msg.headers is None else (msg.headers.get("Status", "") + " " + msg.headers.get(
                    "Description", "")).strip()
                hdrs = {k: v for k, v in (msg.headers or {}).items() if k not in ("Status", "Description")}
                replies.append((status, hdrs, msg.data))
                if status or not _is_batch(req):
                    done.set()

            sub = await self.nc.subscribe(inbox, cb=cb)
            await self.nc.publish(f"$JS.API.DIRECT.GET.{name}", json.dumps(req).encode(), reply=inbox)
            await asyncio.wait_for(done.wait(), 5)
            await sub.unsubscribe()

        self.loop.run_until_complete(go())
        return replies

    # -- consumers -------------------------------------------------------------------------------
    def consumer_create(self, stream: str, cfg: dict[str, Any], action: str | None = None) -> dict[str, Any]:
        name = cfg.get("durable_name") or cfg.get("name")
        subject = f"$JS.API.CONSUMER.CREATE.{stream}.{name}" if name else f"$JS.API.CONSUMER.CREATE.{stream}"
        req: dict[str, Any] = {"stream_name": stream, "config": cfg}
        if action:
            req["action"] = action
        return consumer_view(self._req(subject, req))

    def consumer_info(self, stream: str, name: str) -> dict[str, Any]:
        return consumer_view(self._req(f"$JS.API.CONSUMER.INFO.{stream}.{name}"))

    def consumer_delete(self, stream: str, name: str) -> dict[str, Any]:
        r = self._req(f"$JS.API.CONSUMER.DELETE.{stream}.{name}")
        return {"error": r["error"]} if "error" in r else {"ok": True}

    def consumer_pause(self, stream: str, name: str, until: str | None = None) -> dict[str, Any]:
        """Raw ``$JS.API.CONSUMER.PAUSE``: no body without ``until``, else ``{"pause_until": until}``."""
        return consumer_view(self._req(f"$JS.API.CONSUMER.PAUSE.{stream}.{name}",
                                       None if until is None else {"pause_until": until}))

    def consumer_reset(self, stream: str, name: str, seq: int | None = None) -> dict[str, Any]:
        """Raw ``$JS.API.CONSUMER.RESET``: no body without ``seq``, else ``{"seq": N}``."""
        return consumer_view(self._req(f"$JS.API.CONSUMER.RESET.{stream}.{name}", None if seq is None else {"seq": seq}))

    def fetch(self, stream: str, name: str, batch: int, expires: float | None = None) -> list[tuple[int, int, str]]:
        """One no-wait pull of up to ``batch``: ``(stream_seq, consumer_seq, subject)`` per message,
        read from the ack reply subject. A pull that ``max_ack_pending`` stops short gets no
        answer until it expires: pass ``expires`` (seconds) there."""
        inbox = self.nc.new_inbox()
        got: list[tuple[int, int, str]] = []

        async def go() -> None:
            done = asyncio.Event()

            async def cb(msg: Any) -> None:
                if msg.headers and msg.headers.get("Status"):
                    done.set()
                    return
                tokens = msg.reply.split(".")
                got.append((int(tokens[-4]), int(tokens[-3]), msg.subject))
                if len(got) >= batch:
                    done.set()

            sub = await self.nc.subscribe(inbox, cb=cb)
            body: dict[str, Any] = {"batch": batch, "no_wait": True}
            if expires is not None:
                body["expires"] = int(expires * 1e9)
            req = json.dumps(body).encode()
            await self.nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{name}", req, reply=inbox)
            await asyncio.wait_for(done.wait(), 5 + (expires or 0))
            await sub.unsubscribe()

        self.loop.run_until_complete(go())
        return got

    def ack(self, stream: str, name: str, stream_seq: int, consumer_seq: int) -> None:
        """``+ACK`` on the ack subject of ``(stream_seq, consumer_seq)``, then a ``+WPI`` request
        on the same consumer: acks are handled in order and an ignored ack has no reply, so the
        progress reply tells us the ack was processed."""

        async def go() -> None:
            await self.nc.publish(f"$JS.ACK.{stream}.{name}.1.{stream_seq}.{consumer_seq}.0.0", b"+ACK")
            await self.nc.request(f"$JS.ACK.{stream}.{name}.1.{stream_seq}.{consumer_seq}.0.0", b"+WPI", timeout=5)

        self.loop.run_until_complete(go())


def _replication(info: dict[str, Any]) -> dict[str, Any]:
    def entry(e: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in e.items() if k not in ("active", "error")}

    out: dict[str, Any] = {}
    if info.get("mirror") is not None:
        out["mirror"] = entry(info["mirror"])
    if info.get("sources"):  # the server lists its sources in Go map order: compared as a set
        out["sources"] = sorted((entry(e) for e in info["sources"]), key=lambda e: json.dumps(e, sort_keys=True))
    return out


def _is_batch(req: dict[str, Any]) -> bool:
    return bool(req.get("batch") or req.get("multi_last"))


class LakeBackend:
    def __init__(self, lake: Lake) -> None:
        self.lake = lake

    @staticmethod
    def _call(fn: Any, *a: Any, **kw: Any) -> Any:
        try:
            return fn(*a, **kw)
        except APIError as e:
            return {"error": e.to_dict()}

    def add_stream(self, cfg: dict[str, Any]) -> dict[str, Any]:
        r = self._call(self.lake.add_stream, cfg)
        return r if isinstance(r, dict) else {"ok": True}

    def add_consumer(self, stream: str, cfg: dict[str, Any]) -> dict[str, Any]:
        r = self._call(self.lake.add_consumer, stream, cfg)
        return r if isinstance(r, dict) else {"ok": True}

    def publish(self, subject: str, data: bytes = b"", headers: list[tuple[str, str]] | None = None) -> dict[str, Any]:
        r = self._call(self.lake.publish, subject, data, headers=headers)
        if isinstance(r, dict):
            return r
        out = {"stream": r.stream, "seq": r.seq}
        if r.duplicate:
            out["duplicate"] = True
        return out

    publish_raw = publish  # the lake takes header pairs exactly as given

    def state(self, name: str) -> dict[str, Any]:
        s = self.lake.stream_info(name).state
        return {k: getattr(s, k) for k in STATE_KEYS}

    def config(self, name: str) -> dict[str, Any]:
        r = self._call(self.lake.stream_info, name)
        return r if isinstance(r, dict) else r.config.to_json()

    def replication(self, name: str) -> dict[str, Any]:
        return _replication(self.lake.stream_info(name).to_json())

    def purge(self, name: str, **req: Any) -> dict[str, Any]:
        r = self._call(self.lake.purge, name, **req)
        return r if isinstance(r, dict) else {"purged": r}

    def delete_msg(self, name: str, seq: int) -> dict[str, Any]:
        r = self._call(self.lake.delete_msg, name, seq)
        return r if isinstance(r, dict) else {"ok": True}

    def msg_get(self, name: str, seq: int | None = None, subject: str | None = None, next: bool = False) -> dict[str, Any]:
        r = self._call(self.lake.get_msg, name, seq=seq, subject=subject, next=next)
        return r if isinstance(r, dict) else {"seq": r.seq, "subject": r.subject}

    def messages(self, name: str) -> list[tuple[int, str, bytes, list[tuple[str, str]] | None]]:
        t = self.lake.stream(name).read(columns=["seq", "subject", "data", "headers"]).sort_by("seq")
        return [(r["seq"], r["subject"], r["data"] or b"", H.from_arrow(r["headers"])) for r in t.to_pylist()]

    # -- consumers -------------------------------------------------------------------------------
    def _info(self, fn: Any, *a: Any) -> dict[str, Any]:
        r = self._call(fn, *a)
        return r if isinstance(r, dict) else consumer_view(r.to_json())

    def consumer_create(self, stream: str, cfg: dict[str, Any], action: str | None = None) -> dict[str, Any]:
        return self._info(self.lake.consumers.add, stream, ConsumerConfig.from_json(cfg), action or "")

    def consumer_info(self, stream: str, name: str) -> dict[str, Any]:
        return self._info(self.lake.consumer_info, stream, name)

    def consumer_delete(self, stream: str, name: str) -> dict[str, Any]:
        r = self._call(self.lake.delete_consumer, stream, name)
        return r if isinstance(r, dict) else {"ok": True}

    def consumer_pause(self, stream: str, name: str, until: str | None = None) -> dict[str, Any]:
        return consumer_view(self._call(self.lake.pause_consumer, stream, name, until))

    def consumer_reset(self, stream: str, name: str, seq: int | None = None) -> dict[str, Any]:
        return self._info(self.lake.reset_consumer, stream, name, seq)

    def fetch(self, stream: str, name: str, batch: int, expires: float | None = None) -> list[tuple[int, int, str]]:
        """Deliver the next ``batch`` messages as a reader would and record the position
        (``expires``: the server's pull only)."""
        seqs = self.lake.next_seqs(stream, name, batch)
        if not seqs:
            return []
        first_dseq = self.lake.consumer_info(stream, name).delivered.consumer_seq + 1
        rows = self.lake.stream(stream).index().rows
        subjects = dict(zip(rows["seq"].to_pylist(), rows["subject"].to_pylist(), strict=True))
        self.lake.record_delivered(stream, name, seqs[-1], first_dseq + len(seqs) - 1)
        return [(s, first_dseq + i, subjects[s]) for i, s in enumerate(seqs)]

    def ack(self, stream: str, name: str, stream_seq: int, consumer_seq: int) -> None:
        self.lake.ack(stream, name, stream_seq, consumer_seq)

    def direct_get(self, name: str, req: dict[str, Any]) -> list[tuple[str, dict[str, str], bytes]]:
        try:
            reply = self.lake.direct_get(name, req)
        except DirectGetError as e:
            return [(f"{e.status} {e.description}", {}, b"")]
        out = [
            ("", {**dict(m.header_pairs or []), **h}, m.data)
            for m, h in zip(reply.messages, reply.reply_headers, strict=True)
        ]
        if reply.eob is not None:
            out.append(("204 EOB", dict(reply.eob), b""))
        return out
