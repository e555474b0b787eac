"""`computeall`: the command line. Each subcommand lives in `computeall.cli.commands.<name>`."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from .errors import UserError

COMMANDS = ["up", "run", "status", "pnode", "session", "dataset", "user", "replay", "network", "generate", "export",
            "invite", "compose-env"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="computeall", description="Train transformer LMs on a network of machines.")
    _add_verbose(parser, default=False)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"computeall.cli.commands.{name.replace('-', '_')}")
        except ModuleNotFoundError as exc:
            if exc.name == f"computeall.cli.commands.{name.replace('-', '_')}":
                continue  # a command not built yet
            raise
        module.register(sub)
    _verbose_everywhere(parser)
    return parser


def _add_verbose(parser: argparse.ArgumentParser, default) -> None:
    parser.add_argument("-v", "--verbose", action="store_true", default=default, help="log debug output")


def _verbose_everywhere(parser: argparse.ArgumentParser) -> None:
    """`-v` anywhere on the line (`computeall session list -v` as well as `computeall -v session list`):
    every subcommand takes it too, without a default of its own that would undo the one before it."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for subparser in action.choices.values():
                _add_verbose(subparser, default=argparse.SUPPRESS)
                _verbose_everywhere(subparser)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    try:
        return int(args.func(args) or 0)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
