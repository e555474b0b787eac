"""FusedAdamW: mixed-precision AdamW over flat per-(device, dtype) buckets.

The optimizer owns fp32 master weights and fp32 moments. At construction each bucket's
parameters are re-pointed into one flat buffer (p.data becomes a view), so one kernel can
update the master and write the low-precision copy back for every parameter of the bucket.
Copying into a parameter (p.copy_) stays fine; re-assigning p.data afterwards detaches it.

Per step: detect overflow on the device, then bucket by bucket gather the gradients into a flat
gradient buffer (one multi-tensor copy; a missing .grad counts as zero) and run the update, which
unscales by the loss scale and leaves everything untouched when found_inf is 1. The flat buffer
lives for its bucket's update only: between updates, backward has that memory (a PNode's peak is
in backward, where a resident buffer would cost as much as the gradients themselves).

Paths: "torch" is torch's fused AdamW kernel on the fp32 master plus one cast back (CPU and
CUDA); "triton" does all of it in a single pass (CUDA). "auto" takes triton where usable.
"""

from dataclasses import dataclass
from typing import Iterable

import torch

from .grad_check import found_nonfinite
from .triton_support import triton_usable

IMPLS = ("torch", "triton", "auto")


@dataclass
class _Bucket:
    names: list[str]
    params: list[torch.Tensor]
    flat_param: torch.Tensor  # (n,) low precision; the parameters are views into it
    master: torch.Tensor  # (n,) fp32; the same tensor as flat_param for fp32 parameters
    exp_avg: torch.Tensor  # (n,) fp32
    exp_avg_sq: torch.Tensor  # (n,) fp32
    grad_dtype: torch.dtype  # of the flat gradient: fp32 for the torch path, the parameters' for triton
    step: torch.Tensor  # () fp32 on the device: the count of applied (non-skipped) steps
    impl: str

    def views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        out, offset = [], 0
        for p in self.params:
            out.append(flat[offset : offset + p.numel()].view_as(p))
            offset += p.numel()
        return out


def _named(params: Iterable) -> list[tuple[str, torch.Tensor]]:
    """Accept model.named_parameters() or plain parameters (named by position)."""
    items = list(params)
    if items and isinstance(items[0], torch.Tensor):
        return [(str(i), p) for i, p in enumerate(items)]
    return [(name, p) for name, p in items]


class FusedAdamW:
    def __init__(
        self,
        params: Iterable,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        impl: str = "auto",
    ) -> None:
        if impl not in IMPLS:
            raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
        self.lr = lr  # the trainer's schedule assigns this before each step
        self.betas = betas
        self.eps = eps
        self.weight_decay = weight_decay
        groups: dict[tuple[torch.device, torch.dtype], list[tuple[str, torch.Tensor]]] = {}
        seen: set[int] = set()
        for name, p in _named(params):
            # A tied parameter listed twice must live (and be updated) once.
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                groups.setdefault((p.device, p.dtype), []).append((name, p))
        self._buckets = [self._make_bucket(device, dtype, named, impl) for (device, dtype), named in groups.items()]

    @staticmethod
    @torch.no_grad()
    def _make_bucket(device, dtype, named, impl) -> _Bucket:
        if impl == "auto":
            impl = "triton" if device.type == "cuda" and triton_usable(device) else "torch"
        names, params = [n for n, _ in named], [p for _, p in named]
        flat_param = torch.cat([p.detach().reshape(-1) for p in params])  # (n,)
        offset = 0
        for p in params:
            p.data = flat_param[offset : offset + p.numel()].view_as(p)
            offset += p.numel()
        master = flat_param if dtype == torch.float32 else flat_param.float()  # (n,)
        grad_dtype = torch.float32 if impl == "torch" else dtype
        return _Bucket(
            names, params, flat_param, master, torch.zeros_like(master), torch.zeros_like(master),
            grad_dtype, torch.zeros((), device=device), impl,
        )

    def zero_grad(self) -> None:
        for bucket in self._buckets:
            for p in bucket.params:
                p.grad = None

    @torch.no_grad()
    def _gathered_grads(self, bucket: _Bucket) -> torch.Tensor:
        """(n,) the bucket's gradients in one flat tensor, in `grad_dtype`."""
        flat = torch.empty(bucket.master.numel(), dtype=bucket.grad_dtype, device=bucket.master.device)
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in bucket.params]
        torch._foreach_copy_(bucket.views(flat), grads)  # upcasts on the torch path
        return flat

    @torch.no_grad()
    def step(self, grad_scale: float | torch.Tensor = 1.0, found_inf: torch.Tensor | None = None) -> torch.Tensor:
        """Apply one step unless found_inf (or a local overflow check) says 1.

        grad_scale: the loss scale the gradients carry; they are divided by it inside.
        found_inf: a 0-dim fp32 overflow flag decided elsewhere (e.g. agreed across nodes);
        when None it is computed here from the gradients. Returns the flag used, on the device.
        """
        if found_inf is None:
            found_inf = found_nonfinite([p.grad for b in self._buckets for p in b.params if p.grad is not None])
        for bucket in self._buckets:
            flat_grad = self._gathered_grads(bucket)
            device = bucket.master.device
            flag = found_inf.to(device=device, dtype=torch.float32, non_blocking=True)
            scale = torch.as_tensor(grad_scale, dtype=torch.float32).to(device, non_blocking=True)
            bucket.step.add_(1 - flag)  # a skipped step does not advance the bias correction
            if bucket.impl == "triton":
                from .adamw_triton import adamw_triton_  # Triton is an optional extra

                adamw_triton_(
                    flat_grad, bucket.master, bucket.exp_avg, bucket.exp_avg_sq, bucket.flat_param,
                    bucket.step, scale, flag, self.lr, self.betas, self.eps, self.weight_decay,
                )
            else:
                torch._fused_adamw_(
                    [bucket.master], [flat_grad], [bucket.exp_avg], [bucket.exp_avg_sq], [], [bucket.step],
                    lr=self.lr, beta1=self.betas[0], beta2=self.betas[1], weight_decay=self.weight_decay,
                    eps=self.eps, amsgrad=False, maximize=False, grad_scale=scale, found_inf=flag,
                )
                if bucket.master is not bucket.flat_param:
                    bucket.flat_param.copy_(bucket.master)  # low-precision write-back, one cast
        return found_inf

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Flat {"<name>.master"|".exp_avg"|".exp_avg_sq"|".step": tensor}: independent tensors, safetensors-ready."""
        state = {}
        for bucket in self._buckets:
            for key, flat in (("master", bucket.master), ("exp_avg", bucket.exp_avg), ("exp_avg_sq", bucket.exp_avg_sq)):
                for name, view in zip(bucket.names, bucket.views(flat)):
                    state[f"{name}.{key}"] = view.detach().clone()
            for name in bucket.names:
                state[f"{name}.step"] = bucket.step.detach().clone()
        return state

    @torch.no_grad()
    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Restore from state_dict() output; the low-precision parameters are rewritten from the masters."""
        for bucket in self._buckets:
            for key, flat in (("master", bucket.master), ("exp_avg", bucket.exp_avg), ("exp_avg_sq", bucket.exp_avg_sq)):
                torch._foreach_copy_(bucket.views(flat), [state[f"{name}.{key}"] for name in bucket.names])
            bucket.step.copy_(state[f"{bucket.names[0]}.step"])
            if bucket.master is not bucket.flat_param:
                bucket.flat_param.copy_(bucket.master)
