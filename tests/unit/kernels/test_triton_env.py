"""The Triton interpreter flag of the CPU kernel tests does not leak into later subprocesses."""

import os
import subprocess
import sys

import declared

declared.present("triton")  # found, not imported: Triton must first load under the flag

from .triton_interpreter import KERNEL_MODULES, interpreted, triton_interpreter  # noqa: E402


def flag_in_a_subprocess() -> str | None:
    probe = "import os; print(os.environ.get('TRITON_INTERPRET', '<unset>'))"
    seen = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    return None if seen == "<unset>" else seen


def test_no_test_module_set_the_flag_for_the_whole_run():
    # set at import (collection) time, it would reach every PNode this run starts
    assert "TRITON_INTERPRET" not in os.environ
    assert flag_in_a_subprocess() is None


def test_the_flag_holds_inside_the_block_and_is_gone_after_it():
    with triton_interpreter():
        assert flag_in_a_subprocess() == "1"
        assert all(interpreted(name) for name in KERNEL_MODULES)
    assert "TRITON_INTERPRET" not in os.environ and flag_in_a_subprocess() is None
