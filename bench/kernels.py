"""Kernels: what training runs on this device against torch's own best.

    python -m bench.kernels [--quick] [--json PATH] [--device cpu|cuda]

"Ours" is the implementation training runs here, as `computeall.tensorcore.kernel_choice` names it
(on the CPU that is torch's SDPA itself, so the attention rows are 1.0 by construction), and the
optimizer a PNode runs (`FusedAdamW`). The anchors are torch's best for the same work:
`scaled_dot_product_attention`, `F.linear_cross_entropy` (chunked), `torch.optim.AdamW(fused=True)`
(`foreach=True` where fused is not built for the device). The project's own references are
correctness checks in the tests, never anchors. Times are forward + backward (the optimizer: one
step), medians after a warm-up; memory is the peak above the inputs (`computeall.kernels.timing`).
Precision: what training computes in here, fp32 on the CPU and bf16 on CUDA (fp32 masters).
"""

from __future__ import annotations

import sys

import torch

from computeall.kernels import FusedAdamW, flash_attention, linear_cross_entropy
from computeall.kernels.timing import median_seconds, peak_bytes
from computeall.tensorcore.kernel_choice import attention_impl, lce_impl

from .common import Bench, at_most

TIME, MEMORY = at_most(1.1), at_most(1.1)  # ours at most 10% slower or larger than torch's


def fwd_bwd(fn, *inputs):
    """A thunk: forward, then backward of the sum, gradients dropped afterwards."""

    def run():
        fn(*inputs).sum().backward()
        for x in inputs:
            x.grad = None

    return run


def compare(bench: Bench, name: str, ours: str, anchor: str, run: dict, device: torch.device, reps: int) -> None:
    """Time and peak memory of `run[ours]` against `run[anchor]`; the same numbers when they are one."""
    times = {impl: median_seconds(fn, device, reps=reps) for impl, fn in run.items()}
    peaks = {impl: peak_bytes(fn, device) for impl, fn in run.items()}
    label = f"{name} [{ours}]" if ours != anchor else f"{name} [{ours}: torch's own]"
    bench.row(label, "s", times[ours], anchor, times[anchor], TIME)
    bench.row(label, "bytes peak", peaks[ours], anchor, peaks[anchor], MEMORY)


def attention_rows(bench: Bench, device: torch.device, dtype: torch.dtype, seq_lens: list[int], reps: int) -> None:
    for t in seq_lens:
        b, h, d = 4, 8, 64
        q, k, v = (torch.randn(b, h, t, d, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
        ours = attention_impl(device, d)
        run = {impl: fwd_bwd(lambda *x, i=impl: flash_attention(*x, causal=True, impl=i), q, k, v)
               for impl in dict.fromkeys([ours, "sdpa"])}
        compare(bench, f"attention B{b} H{h} T{t} D{d} {str(dtype)[6:]}", ours, "sdpa", run, device, reps)


def lce_rows(bench: Bench, device: torch.device, dtype: torch.dtype, vocabs: list[int], reps: int) -> None:
    n, d = 4096, 512
    for vocab in vocabs:
        x = torch.randn(n, d, device=device, dtype=dtype, requires_grad=True)
        weight = (torch.randn(vocab, d, device=device) / d**0.5).to(dtype).requires_grad_()
        targets = torch.randint(0, vocab, (n,), device=device)
        targets[::7] = -100
        ours = lce_impl(device)
        run = {impl: fwd_bwd(lambda x_, w_, i=impl: linear_cross_entropy(x_, w_, targets, impl=i), x, weight)
               for impl in dict.fromkeys([ours, "builtin"])}
        compare(bench, f"LM head + cross-entropy N{n} D{d} V{vocab} {str(dtype)[6:]}", ours, "builtin", run, device, reps)


def adamw_rows(bench: Bench, device: torch.device, dtype: torch.dtype, reps: int, total: int = 10_000_000) -> None:
    """`total` parameters in 20 tensors, gradients fixed across steps. Ours keeps fp32 masters of
    low-precision parameters; torch's AdamW steps fp32 parameters (the same state in bytes)."""
    sizes = [total // 20] * 20
    params = [torch.randn(s, device=device).to(dtype).requires_grad_() for s in sizes]
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    ours = FusedAdamW(params, lr=1e-4, weight_decay=0.01)
    fp32 = [p.detach().float().requires_grad_() for p in params]
    for p, g in zip(fp32, params):
        p.grad = g.grad.float()
    try:
        theirs, how = torch.optim.AdamW(fp32, lr=1e-4, weight_decay=0.01, fused=True), "AdamW(fused=True)"
        theirs.step()
    except RuntimeError:  # no fused kernel for this device in this build
        theirs, how = torch.optim.AdamW(fp32, lr=1e-4, weight_decay=0.01, foreach=True), "AdamW(foreach=True)"
    name = f"AdamW {total // 1_000_000}M {str(dtype)[6:]} [{ours._buckets[0].impl}]"
    applied = torch.zeros((), device=device)  # as a PNode steps it: the orchestrator decided there was no overflow
    bench.row(name, "s/step", median_seconds(lambda: ours.step(found_inf=applied), device, reps=reps), f"{how} fp32",
              median_seconds(theirs.step, device, reps=reps), TIME)


def main() -> int:
    bench = Bench("kernels", __doc__, quick_help="fewer shapes and repeats (a few minutes on 2 CPU cores)")
    bench.parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = bench.parse()
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    reps = 3 if args.quick else 7
    torch.manual_seed(0)
    print(f"device {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'}), "
          f"{torch.get_num_threads()} threads, torch {torch.__version__}, medians of {reps}")
    attention_rows(bench, device, dtype, [512, 2048] if args.quick else [256, 512, 1024, 2048, 4096], reps)
    lce_rows(bench, device, dtype, [32768] if args.quick else [32768, 131072], reps)
    adamw_rows(bench, device, dtype, reps * 3)
    return bench.finish()


if __name__ == "__main__":
    sys.exit(main())
