"""AdamW8bit: AdamW with 8-bit blockwise moments and, for bf16 weights, only the master's low half.

What a parameter costs between updates, besides its weight and gradient: its two moments as one
byte each (`blockwise_8bit`: bitsandbytes' dynamic map, a scale per 256 elements), and its fp32
master as the 16 bits the bf16 weight lacks (`split_master`): the weight is the master's upper half,
rounded, so the pair is the fp32 master exactly, in 2 bytes instead of 4. fp16 weights keep a whole
fp32 master (fp16 is no half of an fp32); fp32 weights are their own. With `stochastic_rounding`, a
bf16 weight keeps no master at all: the update rounds it to bf16 up or down with the odds of the
dropped fraction (`stochastic_bf16`), unbiased, so small updates survive on average; 2 bytes a
parameter less for a noisier weight.

The update runs parameter by parameter in chunks of whole blocks: dequantize the chunk's moments,
join its master, the AdamW step in fp32 (torch's fused kernel's order of operations), quantize the
moments again and write the weight and the low half back. So nothing flat is built over the
parameters (no gradient copy), a chunk's fp32 temporaries are all the update adds, and every element
is updated from its own values and its block's scales only: the same bits whoever hosts the
parameter and however many threads run. `adamw_8bit_reference` is the readable ground truth: the
same step on whole tensors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

import torch

from .blockwise_8bit import BLOCK, blocks_of, dequantize, quantize

# elements updated at once: its temporaries (fp32, and int64 for stochastic rounding's hash) peak at
# 6.5 MiB. Measured on seed-64heads' shapes, int8-sr: 2048 blocks took 26 MiB, a process's fixed cost
# that weighed 6 bytes a parameter on tiny-gpt, for no speed (544 ms a step against 504 with 512;
# 256: 562 ms; 128: 816 ms, torch's per-op cost then showing)
CHUNK = 512 * BLOCK


# -- the fp32 master as a bf16 weight and a low half ------------------------------------------
def split_master(master: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 -> (bf16: the upper half rounded to nearest, ties away from zero; int16: the low half)."""
    bits = master.view(torch.int32)
    high = ((bits + 0x8000) >> 16).to(torch.int16).view(torch.bfloat16)
    low = ((bits << 16) >> 16).to(torch.int16)
    return high, low


def join_master(high: torch.Tensor, low: torch.Tensor) -> torch.Tensor:
    """The fp32 `split_master` split, exactly: the upper half less the carry its rounding added."""
    lo = low.to(torch.int32) & 0xFFFF
    hi = high.view(torch.int16).to(torch.int32) - (lo >= 0x8000).to(torch.int32)
    return ((hi << 16) | lo).view(torch.float32)


# -- a bf16 weight without a master: stochastic rounding ---------------------------------------
_MASK32 = 0xFFFFFFFF


def _mix32(h: torch.Tensor) -> torch.Tensor:
    """murmur3's finalizer on 32-bit values held in int64, in place: every input bit moves every output bit."""
    h ^= h >> 16
    h.mul_(0x85EBCA6B).bitwise_and_(_MASK32)
    h ^= h >> 13
    h.mul_(0xC2B2AE35).bitwise_and_(_MASK32)
    h ^= h >> 16
    return h


def stochastic_bf16(values: torch.Tensor, step: int) -> torch.Tensor:
    """fp32 -> bf16, rounded away from zero with the odds of the 16 dropped bits: they are added to a
    dither and the sum truncated. The dither is a hash of the value's own bits and the step, not a
    generator's stream: it depends on nothing but the element, so the bits are the same however the
    parameters are split (vocabulary shards, heads), placed, chunked or threaded. In place where it can:
    the int64 hash of a chunk is the update's largest temporary."""
    bits = values.view(torch.int32)
    salt = _mix32(torch.tensor(step * 0x9E3779B1 & _MASK32, dtype=torch.int64))
    key = bits.to(torch.int64).bitwise_and_(_MASK32).bitwise_xor_(salt)
    dither = _mix32(key).bitwise_and_(0xFFFF).to(torch.int32)
    del key
    dither += bits
    dither >>= 16
    return dither.to(torch.int16).view(torch.bfloat16)


@dataclass
class _Moment:
    codes: torch.Tensor  # (n,) uint8
    scale: torch.Tensor  # (blocks,) fp32
    signed: bool

    @classmethod
    def zeros(cls, n: int, signed: bool, device: torch.device) -> "_Moment":
        """Zero moments: every block's codes and scale are those `quantize` gives a block of zeros, so one
        element is quantized and its code and scale repeated (quantizing n zeros took fp32 temporaries
        of n elements each, a large parameter's state several times over, at the start of a session)."""
        code, scale = quantize(torch.zeros(1, device=device), signed)
        return cls(code.expand(n).clone(), scale.expand(blocks_of(n)).clone(), signed)

    def read(self, start: int, stop: int) -> torch.Tensor:
        blocks = slice(start // BLOCK, blocks_of(stop))
        return dequantize(self.codes[start:stop], self.scale[blocks], self.signed)

    def write(self, start: int, stop: int, values: torch.Tensor) -> None:
        quantize(values, self.signed, self.codes[start:stop], self.scale[start // BLOCK: blocks_of(stop)])

    def nbytes(self) -> int:
        return self.codes.numel() + self.scale.numel() * 4


@dataclass
class ParamState:
    param: torch.Tensor  # the weight, updated in place
    low: torch.Tensor | None  # (n,) int16: a bf16 weight's master's low half
    master: torch.Tensor | None  # (n,) fp32: an fp16 weight's master
    exp_avg: _Moment
    exp_avg_sq: _Moment
    stochastic: bool = False  # a bf16 weight without a master: rounded stochastically

    def read_master(self, start: int = 0, stop: int | None = None) -> torch.Tensor:
        """fp32 master of elements [start, stop): a new tensor (a view of `master` for fp16)."""
        flat = self.param.detach().view(-1)
        stop = flat.numel() if stop is None else stop
        if self.low is not None:
            return join_master(flat[start:stop], self.low[start:stop])
        if self.master is not None:
            return self.master[start:stop]
        return flat[start:stop].float()  # fp32: a view; a bf16 weight without master: its value

    @torch.no_grad()
    def write_master(self, start: int, values: torch.Tensor, step: int | None = None) -> None:
        """The weights of elements [start, ...) from their fp32 master; a weight without a master is
        rounded stochastically when the update at `step` writes it, to nearest when a state loads."""
        flat = self.param.detach().view(-1)
        stop = start + values.numel()
        if self.stochastic and step is not None:
            flat[start:stop].copy_(stochastic_bf16(values, step))
            return
        if self.low is not None:
            high, low = split_master(values)
            flat[start:stop].copy_(high)
            self.low[start:stop].copy_(low)
            return
        if self.master is not None:
            self.master[start:stop].copy_(values)
        flat[start:stop].copy_(values)  # fp32: in place already; fp16: one cast


class AdamW8bit:
    """AdamW over named parameters, the state per parameter (module docstring)."""

    def __init__(self, params: Iterable[tuple[str, torch.Tensor]], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 stochastic_rounding: bool = False) -> None:
        self.lr, self.betas, self.eps, self.weight_decay = lr, betas, eps, weight_decay
        self.states: dict[str, ParamState] = {}
        seen: set[int] = set()
        for name, p in params:
            if not p.requires_grad or id(p) in seen:  # a tied parameter listed twice lives once
                continue
            if not p.is_contiguous():
                raise ValueError(f"{name}: AdamW8bit updates contiguous parameters in place")
            seen.add(id(p))
            n, device = p.numel(), p.device
            bf16 = p.dtype == torch.bfloat16
            self.states[name] = ParamState(
                p,
                torch.zeros(n, dtype=torch.int16, device=device) if bf16 and not stochastic_rounding else None,
                p.detach().reshape(-1).float() if p.dtype == torch.float16 else None,
                _Moment.zeros(n, True, device), _Moment.zeros(n, False, device),
                stochastic=bf16 and stochastic_rounding,
            )
        device = next(iter(self.states.values())).param.device if self.states else torch.device("cpu")
        self.step_count = torch.zeros((), device=device)  # applied steps, fp32 as FusedAdamW keeps it

    @torch.no_grad()
    def step(self, grad_scale: float = 1.0,
             measure: dict[str, tuple[float, float]] | None = None) -> None:
        """One update; the gradients carry `grad_scale` (divided out here). `measure`, when given, gets
        each parameter's (|update|^2, |master before|^2), summed chunk by chunk."""
        self.step_count += 1
        step = int(self.step_count.item())
        step_size = self.lr / (1 - self.betas[0]**step)
        bias2_sqrt = math.sqrt(1 - self.betas[1]**step)
        for name, s in self.states.items():
            grad = None if s.param.grad is None else s.param.grad.reshape(-1)
            sums = [0.0, 0.0] if measure is not None else None
            for start in range(0, s.param.numel(), CHUNK):
                stop = min(start + CHUNK, s.param.numel())
                self._update_chunk(s, grad, start, stop, grad_scale, step_size, bias2_sqrt, step, sums)
            if sums is not None:
                measure[name] = (sums[0], sums[1])

    def _update_chunk(self, s: ParamState, grad: torch.Tensor | None, start: int, stop: int, grad_scale: float,
                      step_size: float, bias2_sqrt: float, step: int, sums: list[float] | None) -> None:
        """Elements [start, stop) of one parameter. Its temporaries go as soon as they are used, and all
        of them on return: the update of the largest parameter is often a step's peak."""
        beta1, beta2 = self.betas
        g = torch.zeros(stop - start, device=s.param.device) if grad is None else grad[start:stop].float()
        g.div_(grad_scale)
        m, v = s.exp_avg.read(start, stop), s.exp_avg_sq.read(start, stop)
        master = s.read_master(start, stop)
        before = master.clone() if sums is not None else None
        master.mul_(1 - self.lr * self.weight_decay)
        m.lerp_(g, 1 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        denom = v.sqrt().div_(bias2_sqrt).add_(self.eps)
        master.addcdiv_(m, denom, value=-step_size)
        del g, denom
        s.exp_avg.write(start, stop, m)
        s.exp_avg_sq.write(start, stop, v)
        del m, v
        s.write_master(start, master, step)
        if before is not None:
            sums[1] += float(torch.linalg.vector_norm(before, dtype=torch.float64)) ** 2
            sums[0] += float(torch.linalg.vector_norm(before.sub_(s.read_master(start, stop)), dtype=torch.float64)) ** 2

    def zero_grad(self) -> None:
        for s in self.states.values():
            s.param.grad = None

    # -- persistence: flat, safetensors-ready ----------------------------------------------------
    def state_dict(self, names: Iterable[str] | None = None, copy: bool = True) -> dict[str, torch.Tensor]:
        """`{name}.exp_avg.codes`/`.scale`, `.exp_avg_sq.codes`/`.scale`, `.step`, and the master:
        `.master_low` (int16, shaped like the weight) for bf16, `.master` for fp16. With `copy=False`
        the tensors are views of the state, for a caller that serializes them before the next update."""
        take = (lambda t: t.detach().clone()) if copy else (lambda t: t.detach())
        out: dict[str, torch.Tensor] = {}
        for name in self.states if names is None else names:
            s = self.states[name]
            for key, moment in (("exp_avg", s.exp_avg), ("exp_avg_sq", s.exp_avg_sq)):
                out[f"{name}.{key}.codes"] = take(moment.codes)
                out[f"{name}.{key}.scale"] = take(moment.scale)
            if s.low is not None:
                out[f"{name}.master_low"] = take(s.low.view(s.param.shape))
            if s.master is not None:
                out[f"{name}.master"] = take(s.master.view(s.param.shape))
            out[f"{name}.step"] = self.step_count.detach().clone()
        return out

    @torch.no_grad()
    def load_state_dict(self, flat: dict[str, torch.Tensor]) -> None:
        """Inverse of `state_dict`, for any subset of parameters; fp32 moments (`.exp_avg`) are
        quantized and an fp32 `.master` split, so a state kept in fp32 loads too. A parameter without
        a saved master takes it from its weight, as it is now."""
        for name, s in self.states.items():
            if not any(f"{name}.{key}" in flat for key in ("exp_avg", "exp_avg.codes", "master", "master_low")):
                continue
            for key, moment in (("exp_avg", s.exp_avg), ("exp_avg_sq", s.exp_avg_sq)):
                if f"{name}.{key}.codes" in flat:
                    scale = flat[f"{name}.{key}.scale"]
                    if scale.shape != moment.scale.shape:
                        raise ValueError(
                            f"{name}.{key}: its 8-bit state was saved in {scale.numel()} blocks, this version keeps "
                            f"{moment.scale.numel()} (blocks of {BLOCK} elements): it was written by an earlier version "
                            "of computeall; resume it with that version, or start the session again")
                    moment.codes.copy_(flat[f"{name}.{key}.codes"].reshape(-1))
                    moment.scale.copy_(scale)
                elif f"{name}.{key}" in flat:
                    quantize(flat[f"{name}.{key}"].float().reshape(-1), moment.signed, moment.codes, moment.scale)
            if f"{name}.master_low" in flat and s.low is not None:
                s.low.copy_(flat[f"{name}.master_low"].reshape(-1))
            else:
                master = flat.get(f"{name}.master")
                s.write_master(0, s.param.detach().reshape(-1).float() if master is None else master.float().reshape(-1))
            if f"{name}.step" in flat:
                self.step_count.copy_(flat[f"{name}.step"])

    def parameter_state_bytes(self) -> dict[str, dict[str, int]]:
        """Each parameter's bytes held between updates: "master" (a low half, an fp16 weight's master),
        "optimizer" (moments and their scales)."""
        return {name: {"master": sum(t.numel() * t.element_size() for t in (s.low, s.master) if t is not None),
                       "optimizer": s.exp_avg.nbytes() + s.exp_avg_sq.nbytes()} for name, s in self.states.items()}

    def state_bytes(self) -> dict[str, int]:
        """Bytes held between updates: every parameter's, and the step count's word ("optimizer")."""
        held = self.parameter_state_bytes().values()
        return {"master": sum(h["master"] for h in held), "optimizer": sum(h["optimizer"] for h in held) + 4}


def fp32_state(flat: dict[str, torch.Tensor], weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A flat optimizer state with every 8-bit moment dequantized (`.exp_avg`, shaped like its weight)
    and every `.master_low` joined with its weight into `.master`; the rest as it is. `weights`: each
    parameter's weight by name (the upper halves)."""
    out = dict(flat)
    for key in [k for k in flat if k.endswith(".codes")]:
        stem = key[: -len(".codes")]  # <name>.exp_avg or <name>.exp_avg_sq
        name, moment = stem.rsplit(".", 1)
        values = dequantize(out.pop(key).reshape(-1), out.pop(f"{stem}.scale"), signed=moment == "exp_avg")
        out[stem] = values.view(weights[name].shape)
    for key in [k for k in flat if k.endswith(".master_low")]:
        name = key[: -len(".master_low")]
        low = out.pop(key)
        out[f"{name}.master"] = join_master(weights[name].detach().to(torch.bfloat16).reshape(-1), low.reshape(-1)).view(low.shape)
    return out


@torch.no_grad()
def adamw_8bit_reference(weight: torch.Tensor, grad: torch.Tensor, state: dict[str, torch.Tensor], step: int,
                         lr: float, betas: tuple[float, float], eps: float, weight_decay: float) -> None:
    """The same update on one whole tensor, readably: `state` holds `master` (fp32) and `exp_avg`,
    `exp_avg_sq` as (codes, scale) pairs; all are replaced, and `weight` takes the master's rounding."""
    m, v = dequantize(*state["exp_avg"], signed=True), dequantize(*state["exp_avg_sq"], signed=False)
    g = grad.reshape(-1).float()
    master = state["master"]
    master.mul_(1 - lr * weight_decay)
    m.lerp_(g, 1 - betas[0])
    v.mul_(betas[1]).addcmul_(g, g, value=1 - betas[1])
    denom = (v.sqrt() / math.sqrt(1 - betas[1] ** step)).add_(eps)
    master.addcdiv_(m, denom, value=-lr / (1 - betas[0] ** step))
    state["exp_avg"], state["exp_avg_sq"] = quantize(m, signed=True), quantize(v, signed=False)
    weight.copy_((split_master(master)[0] if weight.dtype == torch.bfloat16 else master).view_as(weight))
