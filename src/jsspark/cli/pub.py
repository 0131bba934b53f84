"""``jsspark pub SUBJECT [BODY]``: store messages the way a JetStream publish would.

The subject picks the stream exactly as the server routes a publish (the stream whose
subjects match), so ``pub`` answers "no responders" where ``nats pub`` would. One message goes
through ``Lake.publish``; ``--count N`` writes in batches of ``BATCH`` (one Delta commit each),
because a commit per message would make ``--count 100000`` take minutes. The outcome is still
that of N separate publishes: a refused message stops it, the ones before it stored.

BODY and header values may use the nats CLI's templates: ``{{ Count }}`` (1-based message
number), ``{{ ID }}`` (a unique id), ``{{ Unix }}``, ``{{ UnixNano }}`` and ``{{ TimeStamp }}``.
"""

from __future__ import annotations

import argparse
import re
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from jsspark.cli import render
from jsspark.cli.errors import CLIError, describe, doing
from jsspark.cli.interact import Progress

if TYPE_CHECKING:
    from jsspark.cli.session import Session

BATCH = 10_000
_TEMPLATE = re.compile(r"\{\{\s*\.?(Count|ID|Unix|UnixNano|TimeStamp)\s*\}\}")


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "pub",
        aliases=["publish"],
        help="publish messages to the stream listening on SUBJECT",
        parents=[common],
    )
    p.add_argument("subject", metavar="SUBJECT")
    p.add_argument(
        "body",
        nargs="?",
        default="",
        metavar="BODY",
        help="message body (templates: {{ Count }}, {{ ID }}, ...)",
    )
    p.add_argument("-H", "--header", action="append", default=[], metavar="K:V", help="a header (repeatable)")
    p.add_argument("--count", type=_positive, default=1, help="publish this many messages")
    p.set_defaults(func=cmd_pub)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid count {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("--count must be at least 1")
    return value


def parse_headers(items: list[str]) -> list[tuple[str, str]]:
    """``-H 'K:V'`` flags as ordered pairs (repeats kept, like NATS headers)."""
    pairs = []
    for item in items:
        key, sep, value = item.partition(":")
        if not sep or not key.strip():
            raise CLIError(f"invalid header {item!r}: use -H 'Key:Value'")
        pairs.append((key.strip(), value.strip()))
    return pairs


def _renderer(template: str) -> Callable[[int], str]:
    """``n -> text`` for one message; a template-free text is returned as is, cheaply."""
    if not _TEMPLATE.search(template):
        return lambda _n: template

    def render_one(n: int) -> str:
        now = time.time_ns()
        values = {
            "Count": str(n),
            "ID": uuid.uuid4().hex,
            "Unix": str(now // 1_000_000_000),
            "UnixNano": str(now),
            "TimeStamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now / 1e9)),
        }
        return _TEMPLATE.sub(lambda m: values[m.group(1)], template)

    return render_one


def cmd_pub(args: argparse.Namespace, session: Session) -> None:
    headers = parse_headers(args.header)
    body = _renderer(args.body)
    header_values = [(k, _renderer(v)) for k, v in headers]

    def message(n: int) -> tuple[bytes, list[tuple[str, str]] | None]:
        pairs = [(k, v(n)) for k, v in header_values]
        return body(n).encode(), pairs or None

    if args.count == 1:
        data, pairs = message(1)
        with doing(f"could not publish to {args.subject}"):
            ack = session.lake.publish(args.subject, data, headers=pairs)
        if session.json:
            doc: dict[str, Any] = {"stream": ack.stream, "seq": ack.seq}
            if ack.duplicate:
                doc["duplicate"] = True
            render.print_json(doc)
        else:
            render.print_line(f'Published {len(data)} bytes to "{args.subject}"')
            render.print_line(
                f">>> Stream: {ack.stream} Sequence: {ack.seq}"
                + (" Duplicate: true" if ack.duplicate else "")
            )
        return
    summary = _publish_many(session, args.subject, args.count, message)
    refused = summary.pop("error", None)
    if session.json:
        render.print_json({**summary, "error": refused.to_dict()} if refused is not None else summary)
    elif summary["count"]:
        # a range only when new sequences were assigned: all duplicates store nothing
        stored = (
            f" sequences {summary['first_seq']:,}..{summary['last_seq']:,}" if summary["last_seq"] else ""
        )
        render.print_line(
            f'Published {summary["count"]:,} messages to "{args.subject}": Stream {summary["stream"]}{stored}'
            + (f" ({summary['duplicates']:,} duplicates)" if summary["duplicates"] else "")
        )
    if refused is not None:  # as ``nats pub --count``: stop at the first failed publish, exit 1
        raise CLIError(
            f"could not publish message {summary['count'] + 1:,} of {args.count:,} to {args.subject}: "
            + describe(refused)
        )


def _publish_many(
    session: Session,
    subject: str,
    total: int,
    message: Callable[[int], tuple[bytes, list[tuple[str, str]] | None]],
) -> dict[str, Any]:
    """Route once, then write ``total`` messages in batches; returns the summary ``-j`` prints.

    The outcome is that of ``total`` separate publishes (``nats pub --count``): a batch is one
    commit, and a batch the stream refuses (a limit with ``discard: new``, an expected-sequence
    header, ...) is split until the refused message is found; the messages before it are
    stored, it and the rest are not, and ``error`` holds the refusal (``nats pub`` stops at the
    first failed publish too). ``count`` is the number of messages published before it.
    """
    import pyarrow as pa

    from jsspark.engine import headers as H
    from jsspark.errors import APIError

    lake = session.lake
    with doing(f"could not publish to {subject}"):
        try:
            stream = lake.stream_listening_on(subject)
        except APIError:
            raise CLIError(
                f"could not publish to {subject}: no responders: no stream listens on subject {subject!r}"
            ) from None
    summary: dict[str, Any] = {
        "stream": stream, "count": 0, "stored": 0, "duplicates": 0, "first_seq": 0, "last_seq": 0,
    }  # fmt: skip

    def store(table: pa.Table) -> APIError | None:
        """Publish ``table``'s rows in order as separate publishes would; the first refusal."""
        try:
            ack = lake.publish_batch(stream, table)
        except APIError as exc:
            if table.num_rows == 1:
                return exc
            half = table.num_rows // 2  # the rows before the refused one are stored
            first = store(table.slice(0, half))
            return first if first is not None else store(table.slice(half))
        new_seqs = ack.seqs[~ack.duplicates.astype(bool)]  # duplicates carry the original's seq
        if len(new_seqs):
            summary["first_seq"] = summary["first_seq"] or int(new_seqs.min())
            summary["last_seq"] = max(summary["last_seq"], int(new_seqs.max()))
        summary["count"] += ack.count
        summary["duplicates"] += int(ack.duplicates.sum())
        summary["stored"] += ack.stored
        progress.advance(ack.count)
        return None

    with doing(f"could not publish to {subject}"), Progress(f"publishing to {subject}", total) as progress:
        for start in range(1, total + 1, BATCH):
            numbers = range(start, min(start + BATCH, total + 1))
            rows = [message(n) for n in numbers]
            table = pa.table(
                {
                    "subject": pa.array([subject] * len(rows), pa.string()),
                    "data": pa.array([r[0] for r in rows], pa.binary()),
                    "headers": H.to_arrow([r[1] for r in rows]),
                }
            )
            refused = store(table)
            if refused is not None:
                summary["error"] = refused
                break
    return summary
