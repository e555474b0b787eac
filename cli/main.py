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
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug output")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"computeall.cli.commands.{name.replace('-', '_')}")
        except ModuleNotFoundError as exc:
            if exc.name == f"computeall.cli.commands.{name.replace('-', '_')}":
                continue  # a command not built yet
            raise
        module.register(sub)
    return parser


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
