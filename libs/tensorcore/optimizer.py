"""The optimizer a PNode runs on its own parameters: AdamW with weight-decay groups, its state as the
session's `optimizer.state` says.

Parameters may be fp32, bf16 or fp16 (each VNode's precision).
- "fp32": an fp32 master copy of every low-precision parameter and fp32 Adam moments; one fused pass
  per (device, dtype) bucket unscales the gradients by the loss scale, updates the master and
  writes the low-precision copy back (`computeall.kernels.FusedAdamW`). fp32 parameters are their
  own master. The parameters become views into the optimizer's flat buffers: load into them with
  `p.copy_(...)`, never `p.data = ...`.
- "int8": 8-bit blockwise moments and a bf16 weight's master as its low half, updated parameter by
  parameter in chunks (`computeall.kernels.AdamW8bit`): no flat buffer, no gradient copy.
- "int8-sr": the same, and a bf16 weight keeps no master: the update rounds it stochastically.
"""

from __future__ import annotations

import torch

from computeall.kernels import AdamW8bit, FusedAdamW
from computeall.kernels.adamw_8bit import fp32_state
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
        self.state = config.state
        self._fused: list[FusedAdamW] = []
        self._int8: list[AdamW8bit] = []
        for named, decay in split:
            if not named:
                continue
            if config.state in ("int8", "int8-sr"):
                self._int8.append(AdamW8bit(named, lr=0.0, betas=config.betas, eps=config.eps, weight_decay=decay,
                                            stochastic_rounding=config.state == "int8-sr"))
            else:
                self._fused.append(FusedAdamW(named, lr=0.0, betas=config.betas, eps=config.eps, weight_decay=decay,
                                              impl=impl))

    def _buckets(self):
        return [b for opt in self._fused for b in opt._buckets]

    def step(self, lr: float, loss_scale: float = 1.0, clip_factor: float = 1.0) -> None:
        """Update with learning rate `lr`; the gradients carry `loss_scale` and are multiplied by
        `clip_factor` (global norm clipping), both inside the update's one unscaling divide.

        Whether to apply at all is the orchestrator's call (every PNode applies or skips the same
        step), so no overflow check runs here.
        """
        self._step(lr, loss_scale / clip_factor)

    def _step(self, lr: float, grad_scale: float, measure: dict[str, tuple[float, float]] | None = None) -> None:
        for opt in self._fused:
            opt.lr = lr
            opt.step(grad_scale=grad_scale, found_inf=torch.zeros(()))
        for opt8 in self._int8:
            opt8.lr = lr
            opt8.step(grad_scale, measure)

    @torch.no_grad()
    def measured_step(self, lr: float, loss_scale: float = 1.0, clip_factor: float = 1.0) -> dict[str, tuple[float, float]]:
        """`step`, and each parameter's (|update|^2, |master before|^2) of it, in float64. The 8-bit
        state measures chunk by chunk inside its update; the fp32 state keeps a copy of its masters
        for the update's length (one fp32 word per parameter)."""
        measure: dict[str, tuple[float, float]] = {}
        masters = self.masters()
        names = sorted(masters)
        before = [masters[n].clone() for n in names]
        weights = [float(w) ** 2 for w in torch._foreach_norm(before)] if before else []
        self._step(lr, loss_scale / clip_factor, measure)
        if before:
            torch._foreach_sub_(before, [masters[n] for n in names])  # before - after: the update, negated
            updates = [float(u) ** 2 for u in torch._foreach_norm(before)]
            measure.update({n: (u, w) for n, u, w in zip(names, updates, weights)})
        return measure

    def zero_grad(self) -> None:
        for p in self.params.values():
            p.grad = None

    def masters(self) -> dict[str, torch.Tensor]:
        """Every parameter's fp32 master (the parameter itself when it is fp32), as views into the
        optimizer's buffers: change them in place, then `masters_changed()` writes the parameters.
        The fp32 state only (an 8-bit state keeps no fp32 master to view: none here)."""
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
        for opt8 in self._int8:
            out.update(opt8.state_dict([n for n in opt8.states if n in wanted], copy))
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
        the parameter (it is the more precise copy), and the parameter is rewritten from it. Either
        state loads what the other saved (8-bit moments are dequantized, fp32 ones quantized)."""
        for opt8 in self._int8:
            opt8.load_state_dict(flat)
        if self._fused:
            flat = fp32_state(flat, self.params)
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
    def parameter_state_bytes(self) -> dict[str, dict[str, int]]:
        """Each parameter's bytes held between updates, by category: "master" (the fp32 copy of a
        low-precision parameter, or a bf16 weight's low half; an fp32 parameter is its own: 0) and
        "optimizer" (Adam moments, with their blocks' scales). The step counters, a word per bucket,
        are nobody's: `state_bytes` adds them."""
        out: dict[str, dict[str, int]] = {}
        for opt8 in self._int8:
            out.update(opt8.parameter_state_bytes())
        for b in self._buckets():
            word = b.master.element_size()
            for name, p in zip(b.names, b.params):
                master = p.numel() * word if b.master is not b.flat_param else 0
                out[name] = {"master": master, "optimizer": p.numel() * (b.exp_avg.element_size() + b.exp_avg_sq.element_size())}
        return out

    def state_bytes(self) -> dict[str, int]:
        """Bytes the optimizer holds between updates, by category: every parameter's
        (`parameter_state_bytes`), and the step counters ("optimizer")."""
        held = self.parameter_state_bytes().values()
        steps = sum(b.step.numel() * b.step.element_size() for b in self._buckets()) + 4 * len(self._int8)
        return {"master": sum(h["master"] for h in held), "optimizer": sum(h["optimizer"] for h in held) + steps}
