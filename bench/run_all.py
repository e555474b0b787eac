"""`make bench`: every benchmark in bench/, each printing ratios against its anchor and writing bench/results/*.json."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
SKIP = {"run_all.py", "common.py"}


def main() -> int:
    extra = sys.argv[1:]  # e.g. --quick
    failed = []
    for script in sorted(HERE.glob("*.py")):
        if script.name in SKIP:
            continue
        print(f"\n=== {script.name} {' '.join(extra)}", flush=True)
        if subprocess.run([sys.executable, str(script), *extra]).returncode != 0:
            failed.append(script.name)
    print(f"\nresults in {HERE / 'results'}" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
