"""The optimizer a PNode runs on its own parameters: fused AdamW with fp32 masters and weight-decay groups.

Parameters may be fp32, bf16 or fp16 (each VNode's precision). The optimizer keeps an fp32
master copy of every low-precision parameter and fp32 Adam moments; one fused pass per
(device, dtype) bucket unscales the gradients by the loss scale, updates the master and writes
the low-precision copy back (`computeall.kernels.FusedAdamW`). fp32 parameters are their own
master. The parameters become views into the optimizer's flat buffers: load into them with
`p.copy_(...)`, never `p.data = ...`.
"""

from __future__ import annotations

import torch

from computeall.kernels import FusedAdamW
from computeall.protocol.config import DecayGroup, OptimizerConfig

_MOMENTS = ("exp_avg", "exp_avg_sq")


class VNodeOptimizer:
    """AdamW over one PNode's parameters, named `<vnode>.<param>`.

    Groups and buckets are built in name order, so every placement builds the same optimizer;
    the update is elementwise, so a parameter gets the same update whoever hosts it.
    """

    def __init__(
        self,
        params: dict[str, torch.nn.Parameter],
        config: OptimizerConfig,
        groups: dict[str, DecayGroup],
        impl: str = "auto",
    ) -> None:
        """`groups`: every parameter's weight-decay group (`VNodeRuntime.decay_groups()`); those in
        `config.no_decay` get none."""
        missing = sorted(set(params) - set(groups))
        if missing:
            raise ValueError(f"no weight-decay group for parameters {missing}")
        self.params = params
        names = sorted(params)
        split = (
            ([(n, params[n]) for n in names if groups[n] not in config.no_decay], config.weight_decay),
            ([(n, params[n]) for n in names if groups[n] in config.no_decay], 0.0),
        )
        self._fused = [
            FusedAdamW(named, lr=0.0, betas=config.betas, eps=config.eps, weight_decay=decay, impl=impl)
            for named, decay in split
            if named
        ]

    def _buckets(self):
        return [b for opt in self._fused for b in opt._buckets]

    def step(self, lr: float, loss_scale: float = 1.0, clip_factor: float = 1.0) -> None:
        """Update with learning rate `lr`; the gradients carry `loss_scale` and are multiplied by
        `clip_factor` (global norm clipping), both inside the update's one unscaling divide.

        Whether to apply at all is the orchestrator's call (every PNode applies or skips the same
        step), so no overflow check runs here.
        """
        for opt in self._fused:
            opt.lr = lr
            opt.step(grad_scale=loss_scale / clip_factor, found_inf=torch.zeros(()))

    def zero_grad(self) -> None:
        for p in self.params.values():
            p.grad = None

    def masters(self) -> dict[str, torch.Tensor]:
        """Every parameter's fp32 master (the parameter itself when it is fp32), as views into the
        optimizer's buffers: change them in place, then `masters_changed()` writes the parameters."""
        out: dict[str, torch.Tensor] = {}
        for b in self._buckets():
            out.update(zip(b.names, b.views(b.master)))
        return out

    @torch.no_grad()
    def masters_changed(self) -> None:
        for b in self._buckets():
            if b.master is not b.flat_param:
                b.flat_param.copy_(b.master)  # the low-precision copies, one cast

    # -- persistence ---------------------------------------------------------------
    def state_dict(self, names: list[str] | None = None, copy: bool = True) -> dict[str, torch.Tensor]:
        """Flat, safetensors-ready: `{param}.exp_avg`, `.exp_avg_sq`, `.step` (fp32), and `.master` for
        low-precision parameters, for `names` (all by default). Independent tensors, not views; with
        `copy=False` the moments and masters are views into the optimizer's buffers, for a caller
        that serializes them before the next update (a checkpoint: a copy of the state less at its peak)."""
        wanted = set(self.params if names is None else names)
        out: dict[str, torch.Tensor] = {}
        for b in self._buckets():
            own_master = b.master is not b.flat_param
            views = {key: b.views(getattr(b, key)) for key in _MOMENTS + (("master",) if own_master else ())}
            for i, name in enumerate(b.names):
                if name not in wanted:
                    continue
                for key, vs in views.items():
                    out[f"{name}.{key}"] = vs[i].detach().clone() if copy else vs[i].detach()
                out[f"{name}.step"] = b.step.detach().clone()  # one per bucket, shared: always a copy
        return out

    @torch.no_grad()
    def load_state_dict(self, flat: dict[str, torch.Tensor]) -> None:
        """Inverse of `state_dict`, for any subset of parameters. A parameter without a saved master
        (saved from an fp32 run) takes its master from its current value; a saved master wins over
        the parameter (it is the more precise copy), and the parameter is rewritten from it."""
        for b in self._buckets():
            masters, params = b.views(b.master), b.views(b.flat_param)
            moments = {key: b.views(getattr(b, key)) for key in _MOMENTS}
            for i, name in enumerate(b.names):
                if f"{name}.exp_avg" not in flat and f"{name}.master" not in flat:
                    continue
                for key, vs in moments.items():
                    if f"{name}.{key}" in flat:
                        vs[i].copy_(flat[f"{name}.{key}"])
                if f"{name}.master" in flat:
                    masters[i].copy_(flat[f"{name}.master"])
                elif b.master is not b.flat_param:
                    masters[i].copy_(params[i])
                if b.master is not b.flat_param:
                    params[i].copy_(masters[i])
                if f"{name}.step" in flat:
                    b.step.copy_(flat[f"{name}.step"])

    # -- memory ------------------------------------------------------------------------
    def state_bytes(self) -> dict[str, int]:
        """Bytes the optimizer holds between updates, by category: fp32 masters of low-precision
        parameters (fp32 parameters are their own master: 0), Adam moments and step counters."""
        master = optimizer = 0
        for b in self._buckets():
            if b.master is not b.flat_param:
                master += b.master.numel() * b.master.element_size()
            optimizer += sum(t.numel() * t.element_size() for t in (b.exp_avg, b.exp_avg_sq, b.step))
        return {"master": master, "optimizer": optimizer}
