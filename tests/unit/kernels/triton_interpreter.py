"""TRITON_INTERPRET=1 for a block of tests only, with Triton and the kernels decorated under it.

Triton reads the flag when `@triton.jit` runs, i.e. when a module with kernels is imported
(triton.language's own helpers such as `tl.zeros` included), and the flag is an environment
variable: set at import time it would reach every subprocess the test run starts (PNodes would
pick the interpreter on the CPU). So the flag is set for the block only, and any of Triton's
Python modules or ours that were decorated without it are imported afresh under it. They stay
loaded afterwards: unloading Triton makes its compiled extension report leaks at exit, and on a
CPU without the flag nothing calls a Triton kernel (`triton_support.triton_usable`).

One repair inside the block: numpy has no bf16, so the interpreter holds bf16 values as their
uint16 bits, and its `tl.dot` multiplies those bits as integers (the attention kernel's bf16 output
came out as garbage of order 1e8). A GPU's tensor cores multiply the bf16 values exactly and
accumulate in fp32; `_bf16_dots` makes the interpreter do the same by widening bf16 operands to fp32
before its matmul (a product of two bf16 values is exact in fp32), so bf16 runs through the same
kernel code as on CUDA.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Iterator

import pytest

KERNEL_MODULES = (
    "computeall.kernels.attention_triton",
    "computeall.kernels.lce_triton",
    "computeall.kernels.adamw_triton",
)
TRITON_MARKER = "triton.language.standard"  # a module of Triton's own @jit helpers


def interpreted(name: str) -> bool:
    """Whether module `name` is loaded with its kernels decorated for the interpreter."""
    module = sys.modules.get(name)
    return module is not None and any(type(v).__name__ == "InterpretedFunction" for v in vars(module).values())


def _drop_modules_decorated_without_the_flag() -> None:
    if TRITON_MARKER in sys.modules and not interpreted(TRITON_MARKER):
        triton = [name for name, module in sys.modules.items() if (name == "triton" or name.startswith("triton."))
                  and (getattr(module, "__file__", None) or "").endswith(".py")]  # the extension stays
        for name in [*triton, *KERNEL_MODULES]:
            sys.modules.pop(name, None)
    for name in KERNEL_MODULES:
        if name in sys.modules and not interpreted(name):
            sys.modules.pop(name)


def _bf16_dots(patch: pytest.MonkeyPatch) -> None:
    import triton.language as tl
    from triton.runtime import interpreter

    multiply = interpreter.InterpreterBuilder.create_dot

    def create_dot(self, a, b, d, *args):
        def widened(x):
            return self.cast_impl(x, tl.float32) if x.dtype.scalar == tl.bfloat16 else x

        return multiply(self, widened(a), widened(b), d, *args)

    patch.setattr(interpreter.InterpreterBuilder, "create_dot", create_dot)


@contextlib.contextmanager
def triton_interpreter() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRITON_INTERPRET", "1")
        _drop_modules_decorated_without_the_flag()
        for name in KERNEL_MODULES:
            importlib.import_module(name)
        _bf16_dots(patch)
        yield
