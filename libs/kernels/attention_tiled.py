"""Tiled flash attention in plain torch: the memory-saving CPU path.

FlashAttention-2 schedule expressed with block matmuls: the forward walks key blocks with an
online softmax and keeps only the output and the per-row log-sum-exp; the backward recomputes
each score tile from them. No tensor larger than (B*H, block_m, block_n) is ever built, and
blocks entirely above the causal diagonal are never visited.
"""

import math

import torch

from .flash_autograd import flash_function

# Wide key blocks amortize Python overhead per tile; 128 x 256 fp32 tiles stay in L2 per head.
BLOCK_M = 128
BLOCK_N = 256


def _causal_tile_mask(m0: int, m1: int, n0: int, n1: int, device: torch.device) -> torch.Tensor:
    """True where key index > query index inside the tile [m0, m1) x [n0, n1)."""
    rows = torch.arange(m0, m1, device=device)  # (bm,)
    cols = torch.arange(n0, n1, device=device)  # (bn,)
    return cols[None, :] > rows[:, None]  # (bm, bn)


def _crosses_diagonal(m0: int, n1: int) -> bool:
    """A causal tile needs masking iff its last key lies beyond its first query."""
    return n1 - 1 > m0


def tiled_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, block_m: int, block_n: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """q, k, v (BH, T, D) fp32 -> output (BH, T, D) fp32 and log-sum-exp (BH, T) fp32."""
    bh, t, d = q.shape
    scale = 1.0 / math.sqrt(d)
    out = torch.empty_like(q)  # (BH, T, D)
    lse = torch.empty(bh, t, dtype=torch.float32, device=q.device)  # (BH, T)
    for m0 in range(0, t, block_m):
        m1 = min(m0 + block_m, t)
        q_tile = q[:, m0:m1] * scale  # (BH, bm, D)
        row_max = torch.full((bh, m1 - m0), float("-inf"), device=q.device)  # (BH, bm)
        row_sum = torch.zeros(bh, m1 - m0, device=q.device)  # (BH, bm)
        acc = torch.zeros(bh, m1 - m0, d, device=q.device)  # (BH, bm, D)
        # Causal: keys past the last query of this block are fully masked, so stop there.
        n_end = m1 if causal else t
        for n0 in range(0, n_end, block_n):
            n1 = min(n0 + block_n, n_end)
            scores = torch.bmm(q_tile, k[:, n0:n1].transpose(1, 2))  # (BH, bm, bn)
            if causal and _crosses_diagonal(m0, n1):
                scores.masked_fill_(_causal_tile_mask(m0, m1, n0, n1, q.device), float("-inf"))
            # Every row sees key 0 in its first tile, so row_max is finite from then on.
            new_max = torch.maximum(row_max, scores.amax(dim=-1))  # (BH, bm)
            probs = scores.sub_(new_max[..., None]).exp_()  # (BH, bm, bn)
            rescale = (row_max - new_max).exp_()  # (BH, bm)
            row_sum.mul_(rescale).add_(probs.sum(dim=-1))
            acc.mul_(rescale[..., None]).baddbmm_(probs, v[:, n0:n1])
            row_max = new_max
        out[:, m0:m1] = acc.div_(row_sum[..., None])
        lse[:, m0:m1] = row_max + row_sum.log()
    return out, lse


def tiled_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    grad_out: torch.Tensor,
    causal: bool,
    block_m: int,
    block_n: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """All (BH, T, D) fp32 plus lse (BH, T) -> dq, dk, dv (BH, T, D) fp32, tiles recomputed."""
    bh, t, d = q.shape
    scale = 1.0 / math.sqrt(d)
    # delta_i = sum_j P_ij dP_ij = rowsum(dO * O): the softmax-Jacobian term, one scalar per row.
    delta = (grad_out * out).sum(dim=-1)  # (BH, T)
    dq = torch.zeros_like(q)  # (BH, T, D)
    dk = torch.empty_like(k)  # (BH, T, D)
    dv = torch.empty_like(v)  # (BH, T, D)
    for n0 in range(0, t, block_n):
        n1 = min(n0 + block_n, t)
        k_tile, v_tile = k[:, n0:n1], v[:, n0:n1]  # (BH, bn, D)
        dk_tile = torch.zeros_like(k_tile)  # (BH, bn, D)
        dv_tile = torch.zeros_like(v_tile)  # (BH, bn, D)
        # Causal: query blocks that end before key n0 are fully masked; start at the first that is not.
        m_start = (n0 // block_m) * block_m if causal else 0
        for m0 in range(m_start, t, block_m):
            m1 = min(m0 + block_m, t)
            q_tile, do_tile = q[:, m0:m1], grad_out[:, m0:m1]  # (BH, bm, D)
            scores = torch.bmm(q_tile, k_tile.transpose(1, 2)).mul_(scale)  # (BH, bm, bn)
            if causal and _crosses_diagonal(m0, n1):
                scores.masked_fill_(_causal_tile_mask(m0, m1, n0, n1, q.device), float("-inf"))
            probs = scores.sub_(lse[:, m0:m1, None]).exp_()  # (BH, bm, bn)
            dv_tile.baddbmm_(probs.transpose(1, 2), do_tile)
            dprobs = torch.bmm(do_tile, v_tile.transpose(1, 2))  # (BH, bm, bn)
            dscores = probs.mul_(dprobs.sub_(delta[:, m0:m1, None]))  # (BH, bm, bn)
            dk_tile.baddbmm_(dscores.transpose(1, 2), q_tile)
            dq[:, m0:m1] += torch.bmm(dscores, k_tile)
        dk[:, n0:n1] = dk_tile.mul_(scale)
        dv[:, n0:n1] = dv_tile
    return dq.mul_(scale), dk, dv


def _forward(q, k, v, causal: bool, block_m: int, block_n: int):
    b, h, t, d = q.shape
    # fp32 accumulation: low-precision inputs are upcast once (O(T*D), never O(T^2)).
    q32, k32, v32 = (x.reshape(b * h, t, d).float() for x in (q, k, v))  # (BH, T, D)
    out32, lse = tiled_forward(q32, k32, v32, causal, block_m, block_n)
    return (q, k, v), out32.to(q.dtype).reshape(b, h, t, d), lse  # out (B, H, T, D)


def _backward(q, k, v, out, lse, grad_out, causal: bool, block_m: int, block_n: int):
    b, h, t, d = q.shape
    flat = [x.reshape(b * h, t, d).float() for x in (q, k, v, out, grad_out)]  # (BH, T, D) each
    grads = tiled_backward(*flat[:3], flat[3], lse, flat[4], causal, block_m, block_n)
    return tuple(g.reshape(b, h, t, d).to(q.dtype) for g in grads)  # dq, dk, dv (B, H, T, D) each


TiledAttention = flash_function("TiledAttention", _forward, _backward)


def flash_attention_tiled(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True, block_m: int = BLOCK_M, block_n: int = BLOCK_N
) -> torch.Tensor:
    """q, k, v (B, H, T, D) -> (B, H, T, D) in q's dtype."""
    return TiledAttention.apply(q, k, v, causal, block_m, block_n)
