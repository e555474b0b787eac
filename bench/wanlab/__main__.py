"""`python -m bench.wanlab cleanup [--all]`: remove labs left behind by a crashed run."""

from __future__ import annotations

import argparse

from .netns import LabUnavailable, check_available, cleanup_stale


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.wanlab", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    clean = sub.add_parser("cleanup", help="remove lab namespaces and veths whose process is gone")
    clean.add_argument("--all", action="store_true", help="also those of labs still running")
    args = parser.parse_args()
    try:
        check_available()
    except LabUnavailable as e:
        parser.exit(2, f"cannot clean up: {e}\n")
    removed = cleanup_stale(include_live=args.all)
    print(f"removed {len(removed)}: {' '.join(removed)}" if removed else "nothing to remove")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
