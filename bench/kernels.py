"""Kernel benchmark: flash attention, fused LM-head cross-entropy, fused AdamW against torch anchors.

Usage: python bench/kernels.py [--quick] [--json PATH] [--device cpu|cuda]
Times are medians over reps (after a warmup run); memory is the peak above the inputs
(see computeall.kernels.timing.peak_bytes). Every row carries the dispatcher's choice for that case.
"""

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import RESULTS, median_time, peak_bytes, print_table, row, write_results  # noqa: E402

from computeall.kernels import FusedAdamW, flash_attention, linear_cross_entropy  # noqa: E402
from computeall.kernels.adamw_reference import adamw_reference_step  # noqa: E402
from computeall.kernels.attention import choose_attention  # noqa: E402
from computeall.kernels.lce import choose_linear_cross_entropy  # noqa: E402
from computeall.kernels.triton_support import triton_usable  # noqa: E402


def fwd_bwd(fn, *inputs):
    """A thunk: forward, then backward of the sum, grads dropped afterwards."""

    def run():
        fn(*inputs).sum().backward()
        for x in inputs:
            x.grad = None

    return run


def bench_attention(device, dtype, seq_lens, reps):
    rows = []
    ours = ["tiled"] + (["triton"] if triton_usable(device) and device.type == "cuda" else [])
    for t in seq_lens:
        b, h, d = 4, 8, 64
        q, k, v = (torch.randn(b, h, t, d, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
        shape = f"B{b} H{h} T{t} D{d} {str(dtype)[6:]}"
        choice = choose_attention(q, k, v, True)
        run = {impl: fwd_bwd(lambda *x, i=impl: flash_attention(*x, causal=True, impl=i), q, k, v)
               for impl in ours + ["sdpa", "reference"]}
        times = {impl: median_time(fn, device, reps) for impl, fn in run.items()}
        peaks = {impl: peak_bytes(fn, device) for impl, fn in run.items()}
        for impl in ours + ["sdpa"]:
            name = f"flash_attention[{impl}]"
            if impl != "sdpa":
                rows.append(row(name, shape, "time_s", times[impl], "sdpa", times["sdpa"], dispatch=choice))
            rows.append(row(name, shape, "time_s", times[impl], "naive", times["reference"], dispatch=choice))
            rows.append(row(name, shape, "peak_bytes", peaks[impl], "naive", peaks["reference"], dispatch=choice))
        del q, k, v
    return rows


def bench_lce(device, dtype, vocabs, reps):
    rows = []
    ours = ["chunked"] + (["triton"] if triton_usable(device) and device.type == "cuda" else [])
    n, d = 4096, 512
    for vocab in vocabs:
        x = torch.randn(n, d, device=device, dtype=dtype, requires_grad=True)
        weight = (torch.randn(vocab, d, device=device) / d**0.5).to(dtype).requires_grad_()
        targets = torch.randint(0, vocab, (n,), device=device)
        targets[::7] = -100
        shape = f"N{n} D{d} V{vocab} {str(dtype)[6:]}"
        choice = choose_linear_cross_entropy(x, weight, targets)
        run = {impl: fwd_bwd(lambda x_, w_, i=impl: linear_cross_entropy(x_, w_, targets, impl=i), x, weight)
               for impl in ours + ["builtin", "reference"]}
        times = {impl: median_time(fn, device, reps) for impl, fn in run.items()}
        peaks = {impl: peak_bytes(fn, device) for impl, fn in run.items()}
        anchors = {"builtin": "F.lce(chunked)", "reference": "logits+CE"}
        for impl in ours:
            for anchor, label in anchors.items():
                for metric, values in (("time_s", times), ("peak_bytes", peaks)):
                    rows.append(row(f"linear_cross_entropy[{impl}]", shape, metric, values[impl], label, values[anchor],
                                    dispatch=choice))
        del x, weight
    return rows


def bench_adamw(device, reps, total=10_000_000):
    """10M bf16 parameters in 20 tensors, fp32 masters; gradients fixed across reps."""
    sizes = [total // 20] * 20
    low = [torch.randn(s, device=device).bfloat16().requires_grad_() for s in sizes]
    for p in low:
        p.grad = torch.randn_like(p) * 1e-3
    fused = FusedAdamW(low, lr=1e-4, weight_decay=0.01)

    unfused_params = [p.detach().clone().requires_grad_() for p in low]
    for p, g in zip(unfused_params, low):
        p.grad = g.grad.clone()
    masters = [p.detach().float() for p in unfused_params]
    exp_avgs = [torch.zeros_like(m) for m in masters]
    exp_avg_sqs = [torch.zeros_like(m) for m in masters]
    counter = iter(range(1, 10**9))

    def unfused():  # upcast, AdamW, downcast: one tensor at a time
        adamw_reference_step(unfused_params, masters, exp_avgs, exp_avg_sqs, next(counter), 1e-4, weight_decay=0.01)

    fp32 = [p.detach().float().requires_grad_() for p in low]
    for p, g in zip(fp32, low):
        p.grad = g.grad.float()
    foreach = torch.optim.AdamW(fp32, lr=1e-4, weight_decay=0.01, foreach=True)

    shape = f"{total // 1_000_000}M bf16 + fp32 master"
    choice = fused._buckets[0].impl
    t_fused = median_time(fused.step, device, reps)
    t_unfused = median_time(unfused, device, reps)
    t_foreach = median_time(foreach.step, device, reps)
    return [
        row("fused_adamw", shape, "time_s", t_fused, "unfused", t_unfused, dispatch=choice),
        row("fused_adamw", shape, "time_s", t_fused, "AdamW(foreach) fp32", t_foreach, dispatch=choice),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer shapes and reps (a few minutes on 2 CPU cores)")
    parser.add_argument("--json", type=Path, default=RESULTS / "kernels.json", help="where to write the result rows")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    # On CUDA the low-precision dtype is the interesting case; on CPU fp32 is what runs fast.
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    reps = 2 if args.quick else 3
    seq_lens = [512, 1024, 2048] if args.quick else [512, 1024, 2048, 4096]
    vocabs = [32768] if args.quick else [32768, 131072]
    torch.manual_seed(0)
    rows = bench_attention(device, dtype, seq_lens, reps)
    rows += bench_lce(device, dtype, vocabs, reps)
    rows += bench_adamw(device, reps * 3)
    print(f"device: {device}, threads: {torch.get_num_threads()}, torch {torch.__version__}, medians of {reps} reps")
    print_table(rows)
    write_results(rows, args.json)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
