"""``jsspark stream ...``: the nats CLI's stream verbs over a lake.

add, info, ls, edit, rm, purge, rmm, get and report, with the nats CLI's flag names. The
engine is imported only inside the handlers so parsing and ``--help`` stay instant.
"""

from __future__ import annotations

import argparse
import base64
from typing import TYPE_CHECKING, Any

from jsspark.cli import render
from jsspark.cli.documents import read_config
from jsspark.cli.errors import CLIError, doing
from jsspark.cli.interact import Progress, confirm, defaults_flag
from jsspark.cli.units import duration_arg, human_bytes, human_duration, size_arg, uint_arg

if TYPE_CHECKING:
    from jsspark.cli.session import Session
    from jsspark.engine.api import RawStreamMsg, StreamInfo

_RETENTION = {
    "limits": "limits",
    "interest": "interest",
    "work": "workqueue",
    "workq": "workqueue",
    "workqueue": "workqueue",
}


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add ``stream`` and its verbs (alias ``str`` as in the nats CLI)."""
    stream = sub.add_parser("stream", aliases=["str"], help="manage streams", parents=[common])
    verbs = stream.add_subparsers(dest="verb", metavar="VERB", required=True)

    p = verbs.add_parser("add", aliases=["create", "new"], help="create a stream", parents=[common])
    p.add_argument("name", nargs="?", metavar="NAME", help="stream name (or the config's name)")
    _stream_flags(p)
    defaults_flag(p)
    p.set_defaults(func=cmd_add)

    p = verbs.add_parser("info", help="show a stream's config and state", parents=[common])
    p.add_argument("name", metavar="NAME")
    p.add_argument(
        "--subjects",
        dest="subjects_filter",
        metavar="FILTER",
        help="also count messages per subject matching FILTER",
    )
    p.set_defaults(func=cmd_info)

    p = verbs.add_parser("ls", aliases=["list"], help="list streams", parents=[common])
    p.add_argument("-n", "--names", action="store_true", help="names only")
    p.set_defaults(func=cmd_ls)

    p = verbs.add_parser("edit", aliases=["update"], help="change a stream's config", parents=[common])
    p.add_argument("name", metavar="NAME")
    _stream_flags(p)
    p.add_argument("-f", "--force", action="store_true", help="apply without asking")
    p.set_defaults(func=cmd_edit)

    p = verbs.add_parser("rm", aliases=["delete"], help="delete a stream and its messages", parents=[common])
    p.add_argument("name", metavar="NAME")
    p.add_argument("-f", "--force", action="store_true", help="delete without asking")
    p.set_defaults(func=cmd_rm)

    p = verbs.add_parser("purge", help="remove messages from a stream", parents=[common])
    p.add_argument("name", metavar="NAME")
    p.add_argument("--subject", help="only messages on this subject (wildcards allowed)")
    p.add_argument("--seq", type=uint_arg, help="remove messages below this sequence")
    p.add_argument("--keep", type=uint_arg, help="keep this many newest messages")
    p.add_argument("-f", "--force", action="store_true", help="purge without asking")
    p.set_defaults(func=cmd_purge)

    p = verbs.add_parser("rmm", help="remove one message", parents=[common])
    p.add_argument("name", metavar="NAME")
    p.add_argument("seq", type=uint_arg, metavar="SEQ")
    p.add_argument("-f", "--force", action="store_true", help="remove without asking")
    p.set_defaults(func=cmd_rmm)

    p = verbs.add_parser("get", help="show one stored message", parents=[common])
    p.add_argument("name", metavar="NAME")
    p.add_argument("seq", type=uint_arg, nargs="?", metavar="SEQ")
    p.add_argument("--last-for", metavar="SUBJECT", help="the last message on SUBJECT")
    p.add_argument("--next-for", metavar="SUBJECT", help="the first message on SUBJECT at or after SEQ")
    p.set_defaults(func=cmd_get)

    p = verbs.add_parser("report", help="state of every stream, and how they replicate", parents=[common])
    p.add_argument("--dot", metavar="FILE", help="write the replication graph (GraphViz dot) to FILE")
    p.set_defaults(func=cmd_report)


def _stream_flags(p: argparse.ArgumentParser) -> None:
    """The config flags ``add`` and ``edit`` share; every default is ``None`` meaning "not given",
    so ``edit`` changes only what was typed."""
    bool_flag = argparse.BooleanOptionalAction
    p.add_argument(
        "--config",
        metavar="FILE",
        help="JSON or YAML config (nats stream info -j | jq .config); '-' for stdin",
    )
    p.add_argument(
        "--subjects",
        action="append",
        metavar="SUBJECTS",
        help="subjects to store (comma separated or repeated)",
    )
    p.add_argument("--description")
    p.add_argument("--retention", choices=sorted(_RETENTION), help="limits, interest or work queue")
    p.add_argument("--discard", choices=["old", "new"], help="what gives way when a limit is hit")
    p.add_argument(
        "--discard-per-subject", action=bool_flag, help="discard new per subject (needs --discard new)"
    )
    p.add_argument(
        "--storage", choices=["file", "memory"], help="kept for the server; a lake stores in Delta"
    )
    p.add_argument("--replicas", type=int, help="kept for the server; a lake has one copy per table")
    p.add_argument("--ack", action=bool_flag, help="acknowledge publishes (--no-ack: no_ack)")
    p.add_argument("--max-msgs", type=int, help="messages kept (-1 unlimited)")
    p.add_argument("--max-msgs-per-subject", type=int, help="messages kept per subject (-1 unlimited)")
    p.add_argument("--max-bytes", type=size_arg, help="bytes kept: 1GB, 512MiB, -1 unlimited")
    p.add_argument("--max-age", type=duration_arg, help="oldest message kept: 1h, 7d, 1y, 0 unlimited")
    p.add_argument("--max-msg-size", type=size_arg, help="largest message accepted (-1 unlimited)")
    p.add_argument("--max-consumers", type=int, help="consumers allowed (-1 unlimited)")
    p.add_argument("--dupe-window", type=duration_arg, help="window for Nats-Msg-Id deduplication: 2m")
    p.add_argument("--first-sequence", type=int, help="sequence of the first message")
    p.add_argument("--allow-direct", action=bool_flag, help="allow direct gets")
    p.add_argument("--allow-rollup", action=bool_flag, help="allow Nats-Rollup headers")
    p.add_argument("--allow-msg-ttl", action=bool_flag, help="allow Nats-TTL per-message TTLs")
    p.add_argument("--deny-delete", action=bool_flag, help="refuse message deletes")
    p.add_argument("--deny-purge", action=bool_flag, help="refuse purges")
    p.add_argument("--republish-source", metavar="SUBJECT", help="republish stored messages matching SUBJECT")
    p.add_argument("--republish-destination", metavar="SUBJECT", help="the subject mapping to republish to")
    p.add_argument("--republish-headers", action=bool_flag, help="republish headers only")
    p.add_argument("--mirror", metavar="STREAM", help="mirror STREAM")
    p.add_argument("--source", action="append", metavar="STREAM", help="source from STREAM (repeatable)")
    p.add_argument("--metadata", action="append", metavar="K=V", help="metadata entry (repeatable)")




def _flag_wire(args: argparse.Namespace) -> dict[str, Any]:
    """The wire fields the user set with flags (nothing for flags not given)."""
    wire: dict[str, Any] = {}
    if args.subjects:
        wire["subjects"] = [s.strip() for item in args.subjects for s in item.split(",") if s.strip()]
    direct = {
        "description": "description", "discard": "discard", "storage": "storage", "replicas": "num_replicas",
        "max_msgs": "max_msgs", "max_msgs_per_subject": "max_msgs_per_subject", "max_bytes": "max_bytes",
        "max_age": "max_age", "max_msg_size": "max_msg_size", "max_consumers": "max_consumers",
        "dupe_window": "duplicate_window", "first_sequence": "first_seq", "allow_direct": "allow_direct",
        "allow_rollup": "allow_rollup_hdrs", "allow_msg_ttl": "allow_msg_ttl", "deny_delete": "deny_delete",
        "deny_purge": "deny_purge", "discard_per_subject": "discard_new_per_subject",
    }  # fmt: skip
    for attr, key in direct.items():
        value = getattr(args, attr)
        if value is not None:
            wire[key] = value
    if args.ack is not None:
        wire["no_ack"] = not args.ack
    if args.retention is not None:
        wire["retention"] = _RETENTION[args.retention]
    if args.republish_headers is not None and args.republish_destination is None:
        raise CLIError("--republish-headers needs --republish-destination (a republish is given whole)")
    if args.republish_source is not None or args.republish_destination is not None:
        if not args.republish_destination:
            raise CLIError("--republish-source needs --republish-destination")
        wire["republish"] = {
            "src": args.republish_source or ">",
            "dest": args.republish_destination,
            "headers_only": bool(args.republish_headers),
        }
    if args.mirror:
        wire["mirror"] = {"name": args.mirror}
    if args.source:
        wire["sources"] = [{"name": s} for s in args.source]
    if args.metadata:
        wire["metadata"] = _pairs(args.metadata, "--metadata")
    return wire


def _pairs(items: list[str], flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CLIError(f"{flag} takes KEY=VALUE, got {item!r}")
        out[key] = value
    return out


# -- verbs -------------------------------------------------------------------------------------
def cmd_add(args: argparse.Namespace, session: Session) -> None:
    from jsspark.config import StreamConfig

    wire: dict[str, Any] = {}
    if args.config:
        with doing(f"could not read stream config {args.config}"):
            wire = read_config(args.config)
    name = _pick_name(args.name, wire.get("name"), args.config)
    wire = {**wire, **_flag_wire(args), "name": name}
    with doing(f"could not create stream {name}"):
        info = session.lake.add_stream(StreamConfig.from_json(wire))
    show_info(info, session.json)


def _pick_name(positional: str | None, from_config: str | None, config_path: str | None) -> str:
    if positional and from_config and positional != from_config:
        raise CLIError(f"stream name {positional!r} does not match the name {from_config!r} in {config_path}")
    name = positional or from_config
    if not name:
        raise CLIError('a stream needs a NAME (as an argument or "name" in --config)')
    return name


def cmd_info(args: argparse.Namespace, session: Session) -> None:
    with doing(f"could not get info for stream {args.name}"):
        info = session.lake.stream_info(args.name, subjects_filter=args.subjects_filter)
    show_info(info, session.json)


def show_info(info: StreamInfo, as_json: bool) -> None:
    """A stream info answer: the server's JSON, or the nats CLI's sections."""
    if as_json:
        render.print_json(info.to_json())
        return
    cfg, st = info.config, info.state
    render.print_line(f"Information for Stream {cfg.name} created {render.when(info.created_ns)}")
    render.print_line()
    source_rows: list[tuple[str, Any]] = []
    if cfg.mirror is not None:
        source_rows.append(("Mirror", _origin_text(cfg.mirror)))
    source_rows.extend(("Source", _origin_text(s)) for s in cfg.sources)
    republish = cfg.republish
    render.print_line(
        render.sections(
            [
                ("Configuration:", [
                    ("Subjects", ", ".join(cfg.subjects) if cfg.subjects else None),
                    ("Description", cfg.description or None),
                    ("Replicas", cfg.num_replicas),
                    ("Storage", f"{cfg.storage.value} (stored as Delta)"),
                    *source_rows,
                ]),
                ("Options:", [
                    ("Retention", cfg.retention.value),
                    ("Acknowledgments", not cfg.no_ack),
                    ("Discard Policy", cfg.discard.value + (" per subject" if cfg.discard_new_per_subject else "")),
                    ("Duplicate Window", human_duration(cfg.duplicate_window)),
                    ("Direct Get", cfg.allow_direct),
                    ("Allows Msg Delete", not cfg.deny_delete),
                    ("Allows Purge", not cfg.deny_purge),
                    ("Allows Rollups", cfg.allow_rollup_hdrs),
                    ("Allows Per-Message TTL", cfg.allow_msg_ttl),
                    ("Sealed", True if cfg.sealed else None),
                    ("Republishing", f"{republish.src or '>'} to {republish.dest}" + (" (headers only)" if republish.headers_only else "") if republish else None),
                    ("Metadata", ", ".join(f"{k}={v}" for k, v in cfg.metadata.items()) or None),
                ]),
                ("Limits:", [
                    ("Maximum Messages", render.limit(cfg.max_msgs)),
                    ("Maximum Per Subject", render.limit(cfg.max_msgs_per_subject)),
                    ("Maximum Bytes", render.limit(cfg.max_bytes, human_bytes)),
                    ("Maximum Age", render.limit(cfg.max_age, human_duration)),
                    ("Maximum Message Size", render.limit(cfg.max_msg_size, human_bytes)),
                    ("Maximum Consumers", render.limit(cfg.max_consumers)),
                ]),
                *_replication_sections(info),
                ("State:", [
                    ("Messages", render.count(st.messages)),
                    ("Bytes", human_bytes(st.bytes)),
                    ("First Sequence", f"{st.first_seq:,}" + (f" @ {render.when(st.first_ts_ns)}" if st.first_ts_ns else "")),
                    ("Last Sequence", f"{st.last_seq:,}" + (f" @ {render.when(st.last_ts_ns)}" if st.last_ts_ns else "")),
                    ("Deleted Messages", render.count(st.num_deleted) if st.num_deleted else None),
                    ("Active Consumers", st.consumer_count),
                    ("Number of Subjects", render.count(st.num_subjects)),
                ]),
            ]
        )
    )  # fmt: skip
    if st.subjects:
        render.print_line()
        rows = sorted(st.subjects.items(), key=lambda kv: (-kv[1], kv[0]))
        render.print_line(
            render.table("Subjects", ["Subject", "Messages"], [(s, render.count(n)) for s, n in rows])
        )


def _replication_sections(info: StreamInfo) -> list[tuple[str, list[tuple[str, Any]]]]:
    """The nats CLI's "Mirror Information" / "Source Information" blocks: each origin's progress
    as the landing commits recorded it (lag, when a batch last landed, last origin seq, error)."""
    return [
        (f"{link['kind'].capitalize()} Information:", [
            ("Stream Name", link["origin"]),
            ("Lag", render.count(link["lag"])),
            ("Last Seen", active_text(link["active"])),
            ("Last Origin Sequence", render.count(link["seq"])),
            ("Error", error_text(link["error"]) or None),
        ])
        for link in replication_links([info])
    ]  # fmt: skip


def _origin_text(src: Any) -> str:
    parts = [src.name]
    if src.filter_subject:
        parts.append(f"filter {src.filter_subject}")
    parts.extend(f"{t.src or '>'} => {t.dest}" for t in src.subject_transforms)
    if src.opt_start_seq:
        parts.append(f"from seq {src.opt_start_seq}")
    if src.opt_start_time is not None:
        parts.append(f"from {src.opt_start_time.to_rfc3339nano()}")
    if src.external is not None:
        parts.append(f"API {src.external.api}")
    return ", ".join(parts)


def cmd_ls(args: argparse.Namespace, session: Session) -> None:
    with doing(f"could not list streams in {session.resolved.location}"):
        if args.names:
            names = sorted(session.lake.stream_names())
            infos: list[StreamInfo] = []
        else:
            infos = sorted(session.lake.streams_info(), key=lambda i: i.config.name)
            names = [i.config.name for i in infos]
    if args.names:
        render.print_names(names, session.json)
        return
    if session.json:
        render.print_list_json("streams", infos)
        return
    if not infos:
        render.print_line("No Streams defined")
        return
    import time

    now = time.time_ns()
    rows = [
        (
            i.config.name,
            i.config.description,
            render.when(i.created_ns),
            render.count(i.state.messages),
            human_bytes(i.state.bytes),
            human_duration(now - i.state.last_ts_ns) if i.state.last_ts_ns else "never",
        )
        for i in infos
    ]
    title = f"Streams ({len(infos)})"
    render.print_line(
        render.table(title, ["Name", "Description", "Created", "Messages", "Size", "Last Message"], rows)
    )


def cmd_edit(args: argparse.Namespace, session: Session) -> None:
    from jsspark.config import StreamConfig

    with doing(f"could not get info for stream {args.name}"):
        current = session.lake.stream_info(args.name).config.to_json()
    if args.config:
        with doing(f"could not read stream config {args.config}"):
            wire = read_config(args.config)
        _pick_name(args.name, wire.get("name"), args.config)
    else:
        wire = dict(current)
    flags = _flag_wire(args)
    if not args.config and not flags:
        raise CLIError("nothing to change: pass --config FILE or config flags (see `jsspark stream edit -h`)")
    wire = {**wire, **flags, "name": args.name}
    with doing(f"invalid config for stream {args.name}"):
        new = StreamConfig.from_json(wire).with_server_defaults().to_json()  # compare like with like
    diff = _diff(current, new)
    if not diff:
        render.print_line(f"Stream {args.name}: no configuration changes")
        return
    if not session.json:
        render.print_line(f"Differences for Stream {args.name} (- current, + new):")
        for line in diff:
            render.print_line(line)
        render.print_line()
    confirm(f"Really edit Stream {args.name}?", args.force)
    with doing(f"could not edit stream {args.name}"):
        info = session.lake.update_stream(StreamConfig.from_json(new))
    show_info(info, session.json)


def _diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``- key: value`` / ``+ key: value`` lines for the fields that differ."""
    import json

    lines = []
    for key in list(dict.fromkeys([*old, *new])):
        if old.get(key) != new.get(key):
            if key in old:
                lines.append(f"  - {key}: {json.dumps(old[key])}")
            if key in new:
                lines.append(f"  + {key}: {json.dumps(new[key])}")
    return lines


def cmd_rm(args: argparse.Namespace, session: Session) -> None:
    with doing(f"could not delete stream {args.name}"):
        session.lake.stream_info(args.name)
    confirm(f"Really delete Stream {args.name}?", args.force)
    with doing(f"could not delete stream {args.name}"):
        session.lake.delete_stream(args.name)
    if session.json:
        render.print_json({"success": True})
    else:
        render.print_line(f"Deleted stream {args.name}")


def cmd_purge(args: argparse.Namespace, session: Session) -> None:
    with doing(f"could not purge stream {args.name}"):
        before = session.lake.stream_info(args.name).state.messages
    scope = "".join(
        [
            f" on subject {args.subject}" if args.subject else "",
            f" below sequence {args.seq}" if args.seq is not None else "",
            f" keeping the newest {args.keep}" if args.keep is not None else "",
        ]
    )
    confirm(f"Really purge Stream {args.name}{scope}?", args.force)
    with doing(f"could not purge stream {args.name}"), Progress(f"purging {args.name}", before) as progress:
        purged = session.lake.purge(args.name, seq=args.seq, subject=args.subject, keep=args.keep)
        progress.advance(purged)
    if session.json:
        render.print_json({"success": True, "purged": purged})
        return
    render.print_line(f"Purged {purged:,} messages from Stream {args.name}{scope}")


def cmd_rmm(args: argparse.Namespace, session: Session) -> None:
    with doing(f"could not remove message {args.seq} from stream {args.name}"):
        session.lake.stream_info(args.name)
    confirm(f"Really remove message {args.seq} from Stream {args.name}?", args.force)
    with doing(f"could not remove message {args.seq} from stream {args.name}"):
        session.lake.delete_msg(args.name, args.seq)
    if session.json:
        render.print_json({"success": True})
    else:
        render.print_line(f"Removed message {args.seq} from Stream {args.name}")


def cmd_get(args: argparse.Namespace, session: Session) -> None:
    if args.last_for and args.next_for:
        raise CLIError("pass only one of --last-for and --next-for")
    if args.seq is None and not (args.last_for or args.next_for):
        raise CLIError("say which message: SEQ, --last-for SUBJECT or --next-for SUBJECT")
    if args.last_for and args.seq is not None:
        raise CLIError("--last-for takes no SEQ")
    what = args.last_for or args.next_for or f"sequence {args.seq}"
    with doing(f"could not get message {what} from stream {args.name}"):
        if args.last_for:
            msg = session.lake.get_msg(args.name, subject=args.last_for)
        elif args.next_for:
            msg = session.lake.get_msg(args.name, seq=args.seq or 1, subject=args.next_for, next=True)
        else:
            msg = session.lake.get_msg(args.name, seq=args.seq)
    show_msg(msg, session.json)


def show_msg(msg: RawStreamMsg, as_json: bool) -> None:
    """A stored message: the server's ``StoredMsg`` JSON (base64 ``hdrs``/``data``), or text."""
    from jsspark.engine.api import rfc3339nano

    if as_json:
        doc: dict[str, Any] = {"subject": msg.subject, "seq": msg.seq}
        if msg.hdrs:
            doc["hdrs"] = base64.b64encode(msg.hdrs).decode()
        if msg.data:
            doc["data"] = base64.b64encode(msg.data).decode()
        doc["time"] = rfc3339nano(msg.ts_ns)
        render.print_json(doc)
        return
    render.print_line(
        f"Item: {msg.stream}#{msg.seq} received {render.when(msg.ts_ns)} on Subject {msg.subject}"
    )
    render.print_line()
    if msg.header_pairs:
        render.print_line("Headers:")
        render.print_line()
        for key, value in msg.header_pairs:
            render.print_line(f"  {key}: {value}")
        render.print_line()
    render.print_line(msg.data.decode("utf-8", errors="replace"))


# -- report ------------------------------------------------------------------------------------
def cmd_report(args: argparse.Namespace, session: Session) -> None:
    with doing(f"could not report on streams in {session.resolved.location}"):
        names = sorted(session.lake.stream_names())
        infos: list[StreamInfo] = []
        with Progress("reading streams", len(names)) as progress:
            for name in names:
                infos.append(session.lake.stream_info(name))
                progress.advance()
    streams = [
        {
            "name": i.config.name,
            "consumers": i.state.consumer_count,
            "messages": i.state.messages,
            "bytes": i.state.bytes,
            "first_seq": i.state.first_seq,
            "last_seq": i.state.last_seq,
            "num_subjects": i.state.num_subjects,
            "num_deleted": i.state.num_deleted,
        }
        for i in infos
    ]
    links = replication_links(infos)
    if args.dot:
        with doing(f"could not write {args.dot}"), open(args.dot, "w", encoding="utf-8") as fh:
            fh.write(replication_dot(infos, links))
    if session.json:
        render.print_json({"streams": streams, "replication": links})
        return
    if not streams:
        render.print_line("No Streams defined")
        return
    render.print_line(
        render.table(
            "Stream Report",
            ["Stream", "Consumers", "Messages", "Bytes", "First Seq", "Last Seq", "Subjects", "Deleted"],
            [
                (s["name"], s["consumers"], render.count(s["messages"]), human_bytes(s["bytes"]),
                 render.count(s["first_seq"]), render.count(s["last_seq"]), render.count(s["num_subjects"]),
                 render.count(s["num_deleted"]))
                for s in streams
            ],
        )
    )  # fmt: skip
    if links:
        render.print_line()
        render.print_line(replication_table(links))
    if args.dot:
        render.print_line()
        render.print_line(f"Wrote replication graph to {args.dot}")


def replication_links(infos: list[StreamInfo]) -> list[dict[str, Any]]:
    """One row per configured mirror or source: the config (filters, transforms, start, API
    prefix) and the progress the landing commits record (``stream_info``'s ``mirror`` /
    ``sources``, the server's ``StreamSourceInfo``): ``lag`` (origin messages pending at the last
    batch), ``active`` (nanoseconds since the last batch landed, -1 never), ``seq`` (the last
    origin sequence taken) and ``error``."""
    links: list[dict[str, Any]] = []
    for info in infos:
        cfg = info.config
        if cfg.mirror is not None:
            origins = [("mirror", cfg.mirror, info.mirror)]
        else:
            progress = list(info.sources or [])
            origins = [("source", s, progress[i] if i < len(progress) else None)
                       for i, s in enumerate(cfg.sources)]  # fmt: skip
        for kind, src, state in origins:
            start = ""
            if src.opt_start_seq:
                start = f"seq {src.opt_start_seq}"
            elif src.opt_start_time is not None:
                start = src.opt_start_time.to_rfc3339nano()
            links.append(
                {
                    "stream": cfg.name,
                    "kind": kind,
                    "origin": src.name,
                    "filters": [src.filter_subject] if src.filter_subject else [],
                    "transforms": [f"{t.src or '>'} => {t.dest}" for t in src.subject_transforms],
                    "start": start,
                    "api": src.external.api if src.external is not None else "",
                    "lag": state.lag if state is not None else 0,
                    "active": state.active_ns if state is not None else -1,
                    "seq": state.seq if state is not None else 0,
                    "error": state.error if state is not None else None,
                }
            )
    return links


def replication_table(links: list[dict[str, Any]]) -> str:
    """The nats CLI's "Replication Report" (Stream, Kind, API Prefix, Source Stream, Filters and
    Transforms, Active, Lag, Error), plus the start position and the last origin sequence taken."""
    with_start = any(link["start"] for link in links)
    headers = ["Stream", "Kind", "API Prefix", "Source Stream", "Filters and Transforms",
               *(["Start"] if with_start else []), "Active", "Lag", "Last Origin Seq", "Error"]  # fmt: skip
    rows = []
    for link in links:
        rows.append([
            link["stream"], link["kind"].capitalize(), link["api"], link["origin"],
            ", ".join(link["filters"] + link["transforms"]), *([link["start"]] if with_start else []),
            active_text(link["active"]), render.count(link["lag"]), render.count(link["seq"]),
            error_text(link["error"]),
        ])  # fmt: skip
    return render.table("Replication Report", headers, rows)


def active_text(active_ns: int) -> str:
    """How long ago an origin's last batch landed (``active``), ``never`` for -1."""
    return "never" if active_ns < 0 else human_duration(active_ns)


def error_text(error: Any) -> str:
    """A ``StreamSourceInfo.error`` (the server's ``ApiError`` JSON) as ``description (err_code)``."""
    if not error:
        return ""
    if isinstance(error, dict):
        desc, code = error.get("description", ""), error.get("err_code") or error.get("code")
        return f"{desc} ({code})" if code else str(desc)
    return str(error)


def replication_dot(infos: list[StreamInfo], links: list[dict[str, Any]]) -> str:
    """GraphViz dot: a box per stream, an edge origin -> stream per mirror/source (mirrors bold,
    with the lag when there is one), and a dotted edge stream -> subjects per ``republish``.

    Origins outside this lake (another API prefix, or a name with no stream here) are drawn
    dashed, so a missing origin stands out in the picture.
    """
    local = {i.config.name for i in infos}
    lines = ['digraph "jsspark replication" {', "  rankdir=LR;", "  node [shape=box];"]
    lines.extend(f"  {_dot_id(name)};" for name in sorted(local))
    outside: set[str] = set()
    for link in links:
        origin = link["origin"] if not link["api"] else f"{link['origin']}@{link['api']}"
        if origin not in local and origin not in outside:
            outside.add(origin)
            lines.append(f"  {_dot_id(origin)} [style=dashed];")
        lag = [f"lag {link['lag']:,}"] if link.get("lag") else []
        label = "\\n".join([link["kind"], *link["filters"], *link["transforms"], *lag])
        style = ", style=bold" if link["kind"] == "mirror" else ""
        lines.append(
            f"  {_dot_id(origin)} -> {_dot_id(link['stream'])} [label={_dot_id(label, raw=True)}{style}];"
        )
    for info in sorted(infos, key=lambda i: i.config.name):
        rp = info.config.republish
        if rp is None:
            continue
        target = f"subjects {rp.dest}"
        lines.append(f"  {_dot_id(target)} [shape=ellipse];")
        label = "\\n".join(["republish", rp.src or ">", *(["headers only"] if rp.headers_only else [])])
        lines.append(
            f"  {_dot_id(info.config.name)} -> {_dot_id(target)} [label={_dot_id(label, raw=True)}, style=dotted];"
        )
    lines.append("}")
    return "\n".join(lines) + "\n"


def _dot_id(text: str, raw: bool = False) -> str:
    """A quoted dot ID; ``raw`` keeps ``\\n`` line breaks already written into a label."""
    escaped = text.replace('"', '\\"') if raw else text.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'
