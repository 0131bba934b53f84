"""``jsspark consumer ...``: durable lake consumers, with the nats CLI's verbs and flags.

add, info, ls, rm, reset, pause and resume. A lake consumer is a position kept in the catalog
(delivered, ack floor); Spark jobs and ``next_seqs``/``ack`` move it, these verbs create,
inspect, reset and pause it.
"""

from __future__ import annotations

import argparse
import re
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from jsspark.cli import render
from jsspark.cli.documents import read_config
from jsspark.cli.errors import CLIError, doing
from jsspark.cli.interact import confirm, defaults_flag
from jsspark.cli.units import duration_arg, human_duration, parse_duration, size_arg, uint_arg
from jsspark.config.durations import format_go_duration
from jsspark.config.timestamps import UTCTime

if TYPE_CHECKING:
    from jsspark.cli.session import Session
    from jsspark.engine.api import ConsumerInfo

_DELIVER = {
    "all": "all",
    "last": "last",
    "new": "new",
    "last_per_subject": "last_per_subject",
    "subject": "last_per_subject",
}
_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T")


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add ``consumer`` and its verbs (alias ``con`` as in the nats CLI)."""
    consumer = sub.add_parser("consumer", aliases=["con"], help="manage consumers", parents=[common])
    verbs = consumer.add_subparsers(dest="verb", metavar="VERB", required=True)

    p = verbs.add_parser(
        "add", aliases=["create", "new"], help="create or update a consumer", parents=[common]
    )
    p.add_argument("stream", metavar="STREAM")
    p.add_argument("name", nargs="?", metavar="NAME", help="durable name (or the config's)")
    _consumer_flags(p)
    defaults_flag(p)
    p.set_defaults(func=cmd_add)

    p = verbs.add_parser("info", help="show a consumer's config and position", parents=[common])
    p.add_argument("stream", metavar="STREAM")
    p.add_argument("name", metavar="NAME")
    p.set_defaults(func=cmd_info)

    p = verbs.add_parser("ls", aliases=["list"], help="list a stream's consumers", parents=[common])
    p.add_argument("stream", metavar="STREAM")
    p.add_argument("-n", "--names", action="store_true", help="names only")
    p.set_defaults(func=cmd_ls)

    p = verbs.add_parser("rm", aliases=["delete"], help="delete a consumer", parents=[common])
    p.add_argument("stream", metavar="STREAM")
    p.add_argument("name", metavar="NAME")
    p.add_argument("-f", "--force", action="store_true", help="delete without asking")
    p.set_defaults(func=cmd_rm)

    p = verbs.add_parser("reset", help="move a consumer back (or forward) to a sequence", parents=[common])
    p.add_argument("stream", metavar="STREAM")
    p.add_argument("name", metavar="NAME")
    p.add_argument(
        "--seq", type=uint_arg, help="the next sequence to deliver (default: just above the ack floor, as the server)"
    )
    p.set_defaults(func=cmd_reset)

    p = verbs.add_parser("pause", help="pause a consumer until a time", parents=[common])
    p.add_argument("stream", metavar="STREAM")
    p.add_argument("name", metavar="NAME")
    p.add_argument("until", metavar="UNTIL",
                   help="a duration from now (1h30m) or a UTC time (RFC3339, or 'YYYY-MM-DD HH:MM:SS')")
    p.add_argument("-f", "--force", action="store_true", help="pause without asking")
    p.set_defaults(func=cmd_pause)

    p = verbs.add_parser("resume", aliases=["unpause"], help="resume a paused consumer", parents=[common])
    p.add_argument("stream", metavar="STREAM")
    p.add_argument("name", metavar="NAME")
    p.add_argument("-f", "--force", action="store_true", help="resume without asking")
    p.set_defaults(func=cmd_resume)


def _consumer_flags(p: argparse.ArgumentParser) -> None:
    bool_flag = argparse.BooleanOptionalAction
    p.add_argument("--config", metavar="FILE", help="JSON or YAML consumer config; '-' for stdin")
    p.add_argument(
        "--filter", action="append", metavar="SUBJECT", help="only messages on SUBJECT (repeatable)"
    )
    p.add_argument(
        "--deliver", metavar="POLICY",
        help="where to start: all, last, new, last_per_subject, a sequence (42), "
        "a time ago (1h) or an RFC3339 time",
    )  # fmt: skip
    p.add_argument(
        "--ack", choices=["none", "all", "explicit", "flow_control"], help="ack policy (default explicit)"
    )
    p.add_argument("--pull", action="store_true", help="a pull consumer (the default)")
    p.add_argument("--target", metavar="SUBJECT", help="push: deliver to SUBJECT")
    p.add_argument("--deliver-group", metavar="GROUP", help="push: queue group")
    p.add_argument("--replay", choices=["instant", "original"])
    p.add_argument("--wait", type=duration_arg, metavar="DURATION", help="ack wait: 30s")
    p.add_argument("--max-deliver", type=int, help="delivery attempts per message (-1 unlimited)")
    p.add_argument("--max-pending", type=int, help="max outstanding acks")
    p.add_argument("--max-waiting", type=int, help="max waiting pull requests")
    p.add_argument("--max-pull-batch", type=int, help="largest pull batch")
    p.add_argument("--max-pull-expire", type=duration_arg, metavar="DURATION", help="longest pull expiry")
    p.add_argument("--max-pull-bytes", type=size_arg, metavar="SIZE", help="largest pull in bytes")
    p.add_argument("--inactive-threshold", type=duration_arg, metavar="DURATION")
    p.add_argument("--backoff", metavar="DURATIONS", help="redelivery backoff: 1s,5s,30s")
    p.add_argument("--heartbeat", type=duration_arg, metavar="DURATION", help="push: idle heartbeat")
    p.add_argument("--flow-control", action=bool_flag, help="push: flow control")
    p.add_argument("--headers-only", action=bool_flag, help="deliver headers only")
    p.add_argument("--sample", type=int, metavar="PERCENT", help="percentage of acks to sample (0-100)")
    p.add_argument("--description")
    p.add_argument("--metadata", action="append", metavar="K=V", help="metadata entry (repeatable)")
    p.add_argument("--ephemeral", action="store_true", help="no durable name: the lake names it")




def deliver_wire(text: str) -> dict[str, Any]:
    """``--deliver`` as wire fields: a policy name, a start sequence, a start time (RFC3339),
    or a duration meaning "that long ago" (as ``nats consumer add --deliver 1h``)."""
    key = text.strip().lower()
    if key in _DELIVER:
        return {"deliver_policy": _DELIVER[key]}
    if key.isdigit():
        return {"deliver_policy": "by_start_sequence", "opt_start_seq": int(key)}
    if _TIMESTAMP.match(text.strip()):
        return {"deliver_policy": "by_start_time", "opt_start_time": text.strip()}
    try:
        ago = parse_duration(key)
    except ValueError:
        raise CLIError(
            f"invalid --deliver {text!r}: use all, last, new, last_per_subject, a sequence, a duration or an RFC3339 time"
        ) from None
    from jsspark.engine.api import rfc3339nano

    return {"deliver_policy": "by_start_time", "opt_start_time": rfc3339nano(time.time_ns() - ago)}


def _flag_wire(args: argparse.Namespace) -> dict[str, Any]:
    wire: dict[str, Any] = {}
    if args.filter:
        filters = [f.strip() for item in args.filter for f in item.split(",") if f.strip()]
        if len(filters) == 1:
            wire["filter_subject"] = filters[0]
        else:
            wire["filter_subjects"] = filters
    if args.deliver:
        wire.update(deliver_wire(args.deliver))
    direct = {
        "ack": "ack_policy", "target": "deliver_subject", "deliver_group": "deliver_group", "replay": "replay_policy",
        "wait": "ack_wait", "max_deliver": "max_deliver", "max_pending": "max_ack_pending",
        "max_waiting": "max_waiting", "max_pull_batch": "max_batch", "max_pull_expire": "max_expires",
        "max_pull_bytes": "max_bytes", "inactive_threshold": "inactive_threshold", "heartbeat": "idle_heartbeat",
        "flow_control": "flow_control", "headers_only": "headers_only", "description": "description",
    }  # fmt: skip
    for attr, key in direct.items():
        value = getattr(args, attr)
        if value is not None:
            wire[key] = value
    if args.sample is not None:  # as the nats CLI: 0 samples nothing, a percentage is stored without '%'
        if not 0 <= args.sample <= 100:
            raise CLIError("sample percent is not between 0 and 100")
        if args.sample:
            wire["sample_freq"] = str(args.sample)
    if args.backoff:
        try:
            wire["backoff"] = [parse_duration(b) for b in args.backoff.split(",") if b.strip()]
        except ValueError as exc:
            raise CLIError(f"invalid --backoff: {exc}") from None
    if args.metadata:
        meta: dict[str, str] = {}
        for item in args.metadata:
            k, sep, v = item.partition("=")
            if not sep or not k:
                raise CLIError(f"--metadata takes KEY=VALUE, got {item!r}")
            meta[k] = v
        wire["metadata"] = meta
    return wire


# -- verbs -------------------------------------------------------------------------------------
def cmd_add(args: argparse.Namespace, session: Session) -> None:
    from jsspark.config import ConsumerConfig

    if args.pull and args.target:
        raise CLIError("--pull and --target (push) exclude each other")
    wire: dict[str, Any] = {}
    if args.config:
        with doing(f"could not read consumer config {args.config}"):
            wire = read_config(args.config)
    else:
        wire = {"deliver_policy": "all", "ack_policy": "explicit"}  # the nats CLI's defaults
    wire.update(_flag_wire(args))
    configured = wire.get("durable_name") or wire.get("name")
    if args.name and configured and args.name != configured:
        raise CLIError(f"consumer name {args.name!r} does not match the name {configured!r} in {args.config}")
    name = args.name or configured
    if args.ephemeral:
        if wire.get("durable_name"):
            raise CLIError("--ephemeral takes no durable name")
        if name:
            wire["name"] = name
    elif name:
        wire["durable_name"] = name
    else:
        raise CLIError(
            'a consumer needs a NAME (as an argument, or "durable_name" in --config); or pass --ephemeral'
        )
    with doing(f"could not create consumer {name or '(ephemeral)'} on stream {args.stream}"):
        info = session.lake.add_consumer(args.stream, ConsumerConfig.from_json(wire))
    show_info(info, session.json)


def cmd_info(args: argparse.Namespace, session: Session) -> None:
    with doing(f"could not get info for consumer {args.name} on stream {args.stream}"):
        info = session.lake.consumer_info(args.stream, args.name)
    show_info(info, session.json)


def show_info(info: ConsumerInfo, as_json: bool) -> None:
    """A consumer info answer: the server's JSON, or the nats CLI's sections."""
    if as_json:
        render.print_json(info.to_json())
        return
    cfg = info.config
    start = {
        "by_start_sequence": f"from sequence {cfg.opt_start_seq}",
        "by_start_time": f"from {cfg.opt_start_time.to_rfc3339nano() if cfg.opt_start_time else ''}",
    }.get(cfg.deliver_policy.value, cfg.deliver_policy.value)
    filters = cfg.filter_subjects or ([cfg.filter_subject] if cfg.filter_subject else [])
    max_pending = cfg.max_ack_pending
    render.print_line(
        f"Information for Consumer {info.stream_name} > {info.name} created {render.when(info.created_ns)}"
    )
    render.print_line()
    render.print_line(
        render.sections(
            [
                ("Configuration:", [
                    ("Name", info.name),
                    ("Durable", cfg.is_durable),
                    ("Description", cfg.description or None),
                    ("Pull Mode", not cfg.is_push),
                    ("Delivery Subject", cfg.deliver_subject or None),
                    ("Deliver Group", cfg.deliver_group or None),
                    ("Filter Subjects" if len(filters) > 1 else "Filter Subject", ", ".join(filters) or None),
                    ("Deliver Policy", start),
                    ("Ack Policy", cfg.ack_policy.value),
                    ("Ack Wait", human_duration(cfg.ack_wait) if cfg.ack_wait else None),
                    ("Replay Policy", cfg.replay_policy.value),
                    ("Maximum Deliveries", render.limit(cfg.max_deliver)),
                    ("Max Ack Pending", render.limit(max_pending)),
                    ("Max Waiting Pulls", cfg.max_waiting or None),
                    ("Inactive Threshold", human_duration(cfg.inactive_threshold) if cfg.inactive_threshold else None),
                    ("Backoff", ", ".join(human_duration(b) for b in cfg.backoff) or None),
                    ("Headers Only", True if cfg.headers_only else None),
                    ("Metadata", ", ".join(f"{k}={v}" for k, v in cfg.metadata.items()) or None),
                ]),
                ("State:", [
                    ("Last Delivered Message", f"Consumer sequence: {info.delivered.consumer_seq:,} Stream sequence: {info.delivered.stream_seq:,}"),
                    ("Acknowledgment Floor", f"Consumer sequence: {info.ack_floor.consumer_seq:,} Stream sequence: {info.ack_floor.stream_seq:,}"),
                    ("Outstanding Acks", f"{info.num_ack_pending:,}" + (f" out of maximum {max_pending:,}" if max_pending > 0 else "")),
                    ("Redelivered Messages", render.count(info.num_redelivered)),
                    ("Unprocessed Messages", render.count(info.num_pending)),
                    ("Reset To Sequence", info.reset_seq),
                ]),
            ]
        )
    )  # fmt: skip


def cmd_ls(args: argparse.Namespace, session: Session) -> None:
    with doing(f"could not list consumers of stream {args.stream}"):
        infos = sorted(session.lake.consumers_info(args.stream), key=lambda i: i.name)
    if args.names:
        render.print_names([i.name for i in infos], session.json)
        return
    if session.json:
        render.print_list_json("consumers", infos)
        return
    if not infos:
        render.print_line(f"No Consumers defined on Stream {args.stream}")
        return
    now = time.time_ns()
    rows = [
        (
            i.name,
            i.config.description,
            render.when(i.created_ns),
            render.count(i.num_ack_pending),
            render.count(i.num_pending),
            human_duration(now - i.delivered.last_active_ns) if i.delivered.last_active_ns else "never",
        )
        for i in infos
    ]
    render.print_line(
        render.table(
            f"Consumers for Stream {args.stream} ({len(infos)})",
            ["Name", "Description", "Created", "Ack Pending", "Unprocessed", "Last Delivery"],
            rows,
        )
    )


def cmd_rm(args: argparse.Namespace, session: Session) -> None:
    action = f"could not delete consumer {args.name} on stream {args.stream}"
    with doing(action):
        session.lake.consumer_info(args.stream, args.name)
    confirm(f"Really delete Consumer {args.stream} > {args.name}?", args.force)
    with doing(action):
        session.lake.delete_consumer(args.stream, args.name)
    if session.json:
        render.print_json({"success": True})
    else:
        render.print_line(f"Deleted consumer {args.stream} > {args.name}")


def cmd_reset(args: argparse.Namespace, session: Session) -> None:
    with doing(f"could not reset consumer {args.name} on stream {args.stream}"):
        info = session.lake.reset_consumer(args.stream, args.name, seq=args.seq)
    show_info(info, session.json)


def pause_until(text: str) -> datetime:
    """``pause``'s UNTIL as the nats CLI takes it: a duration from now, or a time (RFC3339, or
    ``YYYY-MM-DD HH:MM:SS``, read as UTC)."""
    t = text.strip()
    for parse in (lambda v: datetime.fromisoformat(v.replace("Z", "+00:00")),
                  lambda v: datetime.strptime(v, "%Y-%m-%d %H:%M:%S")):
        try:
            when = parse(t)
        except ValueError:
            continue
        return when if when.tzinfo else when.replace(tzinfo=UTC)
    try:
        ns = parse_duration(t)
    except ValueError:
        raise CLIError(f"invalid pause time {text!r}: use a duration (1h30m) or a time (2030-01-02 15:04:05)") from None
    return datetime.now(UTC) + timedelta(microseconds=ns // 1000)


def _shown(t: str) -> str:
    """An RFC3339 time from the API as the nats CLI prints times (``2006-01-02 15:04:05``)."""
    return UTCTime.parse(t).strftime("%Y-%m-%d %H:%M:%S")


def cmd_pause(args: argparse.Namespace, session: Session) -> None:
    until = pause_until(args.until)
    action = f"could not pause consumer {args.name} on stream {args.stream}"
    with doing(action):
        session.lake.consumer_info(args.stream, args.name)
    confirm(f"Really pause Consumer {args.stream} > {args.name} until {until:%Y-%m-%d %H:%M:%S}", args.force)
    with doing(action):
        reply = session.lake.pause_consumer(args.stream, args.name, until)
    if not reply["paused"]:  # as the nats CLI: the server takes a time in the past, but nothing is paused
        raise CLIError(f"{action}: consumer failed to pause, perhaps a time in the past was given")
    if session.json:
        render.print_json(reply)
    else:
        left = format_go_duration(round(reply["pause_remaining"] / 1e9) * 1_000_000_000)
        render.print_line(f"Paused {args.stream} > {args.name} until {_shown(reply['pause_until'])} ({left})")


def cmd_resume(args: argparse.Namespace, session: Session) -> None:
    action = f"could not resume consumer {args.name} on stream {args.stream}"
    with doing(action):
        info = session.lake.consumer_info(args.stream, args.name)
    if not info.paused or info.config.pause_until is None:
        raise CLIError(f"{action}: consumer is not paused")
    confirm(f"Really resume Consumer {args.stream} > {args.name}", args.force)
    with doing(action):
        reply = session.lake.pause_consumer(args.stream, args.name, None)
    if session.json:
        render.print_json(reply)
    else:
        render.print_line(f"Consumer {args.stream} > {args.name} was resumed while previously paused until "
                          f"{_shown(info.config.pause_until.to_rfc3339nano())}")
