"""A service that crashes leaves its faulthandler stack at the end of its log; the supervisor shows it."""

import signal
import subprocess
import sys

from computeall.cli.supervisor import CRASH_SIGNALS, log_tail


def test_the_tail_of_a_crashed_process_log_holds_its_stack(tmp_path):
    logfile = tmp_path / "pnode-0.log"
    crash = "import faulthandler, os; faulthandler.enable(); print('ready', flush=True); os.kill(os.getpid(), 11)"
    with open(logfile, "wb") as out:
        code = subprocess.run([sys.executable, "-c", crash], stdout=out, stderr=subprocess.STDOUT).returncode
    assert -code in CRASH_SIGNALS and not {signal.SIGKILL, signal.SIGTERM} & CRASH_SIGNALS
    tail = log_tail(logfile)
    assert "ready" in tail and "Fatal Python error: Segmentation fault" in tail
    assert log_tail(logfile, lines=1) == tail.splitlines()[-1]
    assert log_tail(tmp_path / "missing.log").startswith("(unreadable")
