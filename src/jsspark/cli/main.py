"""``jsspark`` entry point: argument parsing, dispatch, and the one place errors become exit codes.

argparse (standard library) rather than click keeps start-up cheap and adds no dependency.
The shared flags ``--location``, ``--context`` and ``-j/--json`` are accepted before or after
the verb (``jsspark -j stream ls`` and ``jsspark stream ls -j``), as the nats CLI accepts its
global flags anywhere.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from jsspark import __version__
from jsspark.cli import consumer, context_verbs, pub, run, stream
from jsspark.cli.errors import CLIError, describe
from jsspark.cli.session import Session

PROG = "jsspark"


def _shared_flags(with_location: bool) -> argparse.ArgumentParser:
    """A parent parser for the global flags; ``SUPPRESS`` defaults let a value given before
    the verb survive the sub-parser's own (absent) copy of the flag."""
    parent = argparse.ArgumentParser(add_help=False)
    if with_location:
        parent.add_argument(
            "--location", default=argparse.SUPPRESS, metavar="PATH",
            help="the lake (path or URI); else $JSSPARK_LOCATION, else the selected context",
        )  # fmt: skip
        parent.add_argument(
            "--context", default=argparse.SUPPRESS, metavar="NAME", help="use this saved context"
        )
    parent.add_argument(
        "-j", "--json", action="store_true", default=argparse.SUPPRESS, help="print the server-shaped JSON"
    )
    return parent


def build_parser() -> argparse.ArgumentParser:
    common = _shared_flags(with_location=True)
    json_only = _shared_flags(with_location=False)
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="NATS JetStream streams kept as Delta tables: the nats CLI's verbs, without a server.",
        parents=[common],
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    stream.register(sub, common)
    consumer.register(sub, common)
    pub.register(sub, common)
    context_verbs.register(sub, common, json_only)
    run.register(sub, json_only)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit code (0 ok, 1 failed, 2 bad usage, 130 interrupted,
    143 ``run`` stopped by SIGTERM).

    User errors (bad input, API errors, missing files) print one ``jsspark: error: ...`` line
    and no traceback; only a bug in jsspark itself shows one.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse has printed usage or help already
        return int(exc.code or 0)
    session = Session(args)
    try:
        code = args.func(args, session)  # None (done) or an exit code (``run``: 130/143 when stopped)
    except CLIError as exc:
        return _fail(str(exc))
    except KeyboardInterrupt:
        sys.stderr.write("\n")
        return 130
    except BrokenPipeError:
        return 0
    except (ValueError, OSError) as exc:
        return _fail(describe(exc))
    finally:
        sys.stdout.flush()
    return int(code or 0)


def entry(argv: Sequence[str] | None = None) -> None:
    """The ``jsspark`` console script: ``main``'s code as the process's exit status. A caller
    that ignores a return value (a platform's wheel task calling the entry point) still sees a
    failed run fail."""
    raise SystemExit(main(argv))


def _fail(message: str) -> int:
    sys.stderr.write(f"{PROG}: error: {message}\n")
    return 1


if __name__ == "__main__":
    sys.exit(main())
