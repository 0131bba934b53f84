"""``jsspark context ...``: add, ls, select, rm and info for saved contexts (see ``context.py``).

None of these open a lake, so they never import the engine (``add`` only checks its location with
``engine.files.place``).
"""

from __future__ import annotations

import argparse
import os

from jsspark.cli import context, render
from jsspark.cli.errors import CLIError
from jsspark.cli.interact import confirm
from jsspark.cli.session import Session


def register(
    sub: argparse._SubParsersAction, common: argparse.ArgumentParser, json_only: argparse.ArgumentParser
) -> None:
    """Add ``context`` and its verbs; ``add`` takes ``json_only`` as parent because its own
    ``--location`` is the value to save, not the lake to open."""
    ctx = sub.add_parser(
        "context", aliases=["ctx"], help="saved lake locations and server connections", parents=[common]
    )
    verbs = ctx.add_subparsers(dest="verb", metavar="VERB", required=True)

    p = verbs.add_parser("add", aliases=["save"], help="save (or update) a context", parents=[json_only])
    p.add_argument("ctx_name", metavar="NAME")
    p.add_argument("--location", dest="ctx_location", metavar="PATH", help="the lake: a path or URI")
    p.add_argument("--description")
    p.add_argument(
        "--server", metavar="URL", help='nats-server URL; a job names it with {"context": NAME} in origins or republish_to'
    )
    p.add_argument("--user")
    p.add_argument("--password")
    p.add_argument("--token")
    p.add_argument("--creds", metavar="FILE", help="NATS credentials file")
    p.add_argument("--nkey", metavar="FILE", help="NKey seed file")
    p.add_argument("--tlsca", metavar="FILE", help="CA certificate(s) to verify the server with")
    p.add_argument("--tlscert", metavar="FILE", help="client certificate")
    p.add_argument("--tlskey", metavar="FILE", help="client certificate's private key")
    p.add_argument("--tlsfirst", action=argparse.BooleanOptionalAction, default=None,
                   help="TLS handshake before the server's INFO (a server with tls { handshake_first: true })")
    p.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="K=V",
        help="delta-rs storage option (repeatable)",
    )
    p.add_argument("--select", action="store_true", help="also select it")
    p.set_defaults(func=cmd_add)

    p = verbs.add_parser("ls", aliases=["list"], help="list contexts", parents=[common])
    p.set_defaults(func=cmd_ls)

    p = verbs.add_parser("select", help="make a context the default", parents=[common])
    p.add_argument("ctx_name", metavar="NAME")
    p.set_defaults(func=cmd_select)

    p = verbs.add_parser("rm", aliases=["delete"], help="remove a context", parents=[common])
    p.add_argument("ctx_name", metavar="NAME")
    p.add_argument("-f", "--force", action="store_true", help="remove without asking")
    p.set_defaults(func=cmd_rm)

    p = verbs.add_parser("info", aliases=["show"], help="show a context, secrets redacted", parents=[common])
    p.add_argument("ctx_name", nargs="?", metavar="NAME", help="default: the selected context")
    p.set_defaults(func=cmd_info)


def cmd_add(args: argparse.Namespace, session: Session) -> None:
    name = context.check_name(args.ctx_name)
    existing = name in context.names()
    ctx = context.load(name) if existing else context.Context(name=name)
    updates = {
        "location": args.ctx_location, "description": args.description, "url": args.server, "user": args.user,
        "password": args.password, "token": args.token, "creds": args.creds, "nkey": args.nkey,
        "ca": args.tlsca, "cert": args.tlscert, "key": args.tlskey, "tls_first": args.tlsfirst,
    }  # fmt: skip
    for key, value in updates.items():
        if value is not None:
            setattr(ctx, key, value)
    for item in args.storage_option:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CLIError(f"--storage-option takes KEY=VALUE, got {item!r}")
        ctx.storage_options[key] = value
    if not ctx.location and not ctx.url:  # a server alone is what a job's {"context": NAME} names
        raise CLIError(f"context {name!r} needs --location PATH or --server URL")
    if args.ctx_location:  # one no lake can be opened at (s3:/bucket, dbfs: without its mount) is not saved
        from jsspark.engine.files import place

        place(args.ctx_location)
    path = context.save(ctx)
    if args.select:
        context.select(name)
    if session.json:
        render.print_json(ctx.redacted())
        return
    render.print_line(
        f"{'Updated' if existing else 'Saved'} context {name} in {path}"
        + (" (selected)" if args.select else "")
    )


def cmd_ls(args: argparse.Namespace, session: Session) -> None:
    names = context.names()
    chosen = context.selected()
    ctxs, broken = [], {}
    for n in names:  # one unreadable file does not hide the others
        try:
            ctxs.append(context.load(n))
        except CLIError as e:
            broken[n] = str(e)
    if session.json:
        render.print_json([{**c.redacted(), "selected": c.name == chosen} for c in ctxs]
                          + [{"name": n, "error": why} for n, why in broken.items()])
        return
    if not ctxs and not broken:
        render.print_line("No contexts defined (add one with `jsspark context add NAME --location PATH`)")
        return
    rows = [(c.name + (" *" if c.name == chosen else ""), c.location, c.redacted()["url"], c.description)
            for c in ctxs]
    rows += [(n, "", "", f"unreadable: {why}") for n, why in broken.items()]
    render.print_line(render.table("Known Contexts", ["Name", "Location", "Server", "Description"], rows))


def cmd_select(args: argparse.Namespace, session: Session) -> None:
    context.select(args.ctx_name)
    if not session.json:
        render.print_line(f"Selected context {args.ctx_name}")
    else:
        render.print_json({"selected": args.ctx_name})


def cmd_rm(args: argparse.Namespace, session: Session) -> None:
    context.load(args.ctx_name)
    confirm(f"Really remove context {args.ctx_name}?", args.force)
    context.remove(args.ctx_name)
    if session.json:
        render.print_json({"success": True})
    else:
        render.print_line(f"Removed context {args.ctx_name}")


def cmd_info(args: argparse.Namespace, session: Session) -> None:
    name = args.ctx_name or context.selected()
    if not name:
        raise CLIError("no context selected: name one, or select one with `jsspark context select NAME`")
    ctx = context.load(name)
    shown = ctx.redacted()
    if session.json:
        render.print_json({**shown, "selected": name == context.selected()})
        return
    env = os.environ.get(context.ENV_LOCATION)
    render.print_line(f"Context {name}" + (" (selected)" if name == context.selected() else ""))
    render.print_line()
    render.print_line(
        render.sections(
            [
                (None, [
                    ("Location", shown["location"]),
                    ("Description", shown["description"] or None),
                    ("Server URLs", shown["url"] or None),
                    ("Username", shown["user"] or None),
                    ("Password", shown["password"] or None),
                    ("Token", shown["token"] or None),
                    ("Credentials", shown["creds"] or None),
                    ("NKey", shown["nkey"] or None),
                    ("Storage Options", ", ".join(f"{k}={v}" for k, v in shown["storage_options"].items()) or None),
                    ("Path", str(context.config_dir() / "context" / f"{name}.json")),
                ]),
            ]
        )
    )  # fmt: skip
    if env:
        render.print_line()
        render.print_line(
            f"Note: {context.ENV_LOCATION}={env} is set and takes precedence over the selected context."
        )
