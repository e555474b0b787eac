"""FlashAttention-2 forward and backward as Triton kernels (CUDA; TRITON_INTERPRET=1 on CPU for tests).

Layout: q, k, v, o contiguous (B*H, T, D). One program per (query or key block, head).
Scores are scaled by log2(e) so the kernels use exp2; the stored log-sum-exp is natural-log.
"""

import math

import torch
import triton
import triton.language as tl

from .flash_autograd import flash_function

LOG2E = 1.4426950408889634


@triton.jit
def _program(T, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr, BLOCK_D: tl.constexpr):
    """This program's head, that head's offset in the (B*H, T, D) tensors, its block of positions along T,
    and the head dim's offsets with which of them are real."""
    head = tl.program_id(1).to(tl.int64)
    offs_d = tl.arange(0, BLOCK_D)
    return head, head * T * HEAD_DIM, tl.program_id(0) * BLOCK + tl.arange(0, BLOCK), offs_d, offs_d < HEAD_DIM


@triton.jit
def _tile(X, base, idx, offs_d, mask, HEAD_DIM: tl.constexpr):
    """Rows `idx` of one head's (T, D) matrix at `X + base`, zero where `mask` is off: (len(idx), BD)."""
    return tl.load(X + base + idx[:, None] * HEAD_DIM + offs_d[None, :], mask=mask, other=0.0)


@triton.jit
def _row_stats(LSE, DELTA, head, rows, T):
    """What the backward keeps per query row: the log-sum-exp in log2 units, and rowsum(dO * O)."""
    lse2 = tl.load(LSE + head * T + rows, mask=rows < T, other=0.0) * 1.4426950408889634
    return lse2, tl.load(DELTA + head * T + rows, mask=rows < T, other=0.0)


@triton.jit
def _fwd_kernel(Q, K, V, O, LSE, sm_scale, T, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    pid_m = tl.program_id(0)
    head, base, rows, offs_d, d_ok = _program(T, HEAD_DIM, BLOCK_M, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    q = _tile(Q, base, rows, offs_d, (rows[:, None] < T) & d_ok[None, :], HEAD_DIM)  # (BM, BD)
    qk_scale = sm_scale * 1.4426950408889634
    row_max = tl.full([BLOCK_M], float("-inf"), tl.float32)
    row_sum = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    # Causal: key blocks past this query block are fully masked and never loaded.
    n_end = tl.minimum((pid_m + 1) * BLOCK_M, T) if CAUSAL else T
    for n0 in range(0, n_end, BLOCK_N):
        cols = n0 + offs_n
        kv_mask = (cols[:, None] < T) & d_ok[None, :]
        k = _tile(K, base, cols, offs_d, kv_mask, HEAD_DIM)  # (BN, BD)
        s = tl.dot(q, tl.trans(k)) * qk_scale  # (BM, BN)
        valid = cols[None, :] < T
        if CAUSAL:
            valid = valid & (cols[None, :] <= rows[:, None])
        s = tl.where(valid, s, float("-inf"))
        new_max = tl.maximum(row_max, tl.max(s, 1))
        p = tl.exp2(s - new_max[:, None])  # (BM, BN)
        rescale = tl.exp2(row_max - new_max)
        row_sum = row_sum * rescale + tl.sum(p, 1)
        v = _tile(V, base, cols, offs_d, kv_mask, HEAD_DIM)  # (BN, BD)
        acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v)
        row_max = new_max
    acc = acc / row_sum[:, None]
    row_ok = rows < T
    tl.store(O + base + rows[:, None] * HEAD_DIM + offs_d[None, :], acc.to(O.dtype.element_ty),
             mask=row_ok[:, None] & d_ok[None, :])
    tl.store(LSE + head * T + rows, (row_max + tl.log2(row_sum)) / 1.4426950408889634, mask=row_ok)


@triton.jit
def _recompute_dscores(q, k, v, do, lse2, delta, rows, cols, T, qk_scale, CAUSAL: tl.constexpr):
    """Rebuild P for one tile from the saved log-sum-exp and return (P, dS) in fp32."""
    s = tl.dot(q, tl.trans(k)) * qk_scale  # (BM, BN)
    valid = (rows[:, None] < T) & (cols[None, :] < T)
    if CAUSAL:
        valid = valid & (cols[None, :] <= rows[:, None])
    p = tl.where(valid, tl.exp2(s - lse2[:, None]), 0.0)  # (BM, BN)
    dp = tl.dot(do, tl.trans(v))  # (BM, BN)
    return p, p * (dp - delta[:, None])


@triton.jit
def _bwd_dkdv_kernel(Q, K, V, DO, LSE, DELTA, DK, DV, sm_scale, T, HEAD_DIM: tl.constexpr,
                     BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    pid_n = tl.program_id(0)
    head, base, cols, offs_d, d_ok = _program(T, HEAD_DIM, BLOCK_N, BLOCK_D)
    offs_m = tl.arange(0, BLOCK_M)
    kv_mask = (cols[:, None] < T) & d_ok[None, :]
    k = _tile(K, base, cols, offs_d, kv_mask, HEAD_DIM)  # (BN, BD)
    v = _tile(V, base, cols, offs_d, kv_mask, HEAD_DIM)  # (BN, BD)
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    # Causal: query blocks ending before this key block are fully masked; start at the first that is not.
    m_start = ((pid_n * BLOCK_N) // BLOCK_M) * BLOCK_M if CAUSAL else 0
    for m0 in range(m_start, T, BLOCK_M):
        rows = m0 + offs_m
        q_mask = (rows[:, None] < T) & d_ok[None, :]
        q = _tile(Q, base, rows, offs_d, q_mask, HEAD_DIM)  # (BM, BD)
        do = _tile(DO, base, rows, offs_d, q_mask, HEAD_DIM)  # (BM, BD)
        lse2, delta = _row_stats(LSE, DELTA, head, rows, T)
        p, ds = _recompute_dscores(q, k, v, do, lse2, delta, rows, cols, T, qk_scale, CAUSAL)
        dv += tl.dot(tl.trans(p.to(do.dtype)), do)
        dk += tl.dot(tl.trans(ds.to(q.dtype)), q)
    tl.store(DK + base + cols[:, None] * HEAD_DIM + offs_d[None, :], (dk * sm_scale).to(DK.dtype.element_ty), mask=kv_mask)
    tl.store(DV + base + cols[:, None] * HEAD_DIM + offs_d[None, :], dv.to(DV.dtype.element_ty), mask=kv_mask)


@triton.jit
def _bwd_dq_kernel(Q, K, V, DO, LSE, DELTA, DQ, sm_scale, T, HEAD_DIM: tl.constexpr,
                   BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    pid_m = tl.program_id(0)
    head, base, rows, offs_d, d_ok = _program(T, HEAD_DIM, BLOCK_M, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    q_mask = (rows[:, None] < T) & d_ok[None, :]
    q = _tile(Q, base, rows, offs_d, q_mask, HEAD_DIM)  # (BM, BD)
    do = _tile(DO, base, rows, offs_d, q_mask, HEAD_DIM)  # (BM, BD)
    lse2, delta = _row_stats(LSE, DELTA, head, rows, T)
    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    n_end = tl.minimum((pid_m + 1) * BLOCK_M, T) if CAUSAL else T
    for n0 in range(0, n_end, BLOCK_N):
        cols = n0 + offs_n
        kv_mask = (cols[:, None] < T) & d_ok[None, :]
        k = _tile(K, base, cols, offs_d, kv_mask, HEAD_DIM)  # (BN, BD)
        v = _tile(V, base, cols, offs_d, kv_mask, HEAD_DIM)  # (BN, BD)
        _, ds = _recompute_dscores(q, k, v, do, lse2, delta, rows, cols, T, qk_scale, CAUSAL)
        dq += tl.dot(ds.to(k.dtype), k)
    tl.store(DQ + base + rows[:, None] * HEAD_DIM + offs_d[None, :], (dq * sm_scale).to(DQ.dtype.element_ty), mask=q_mask)


def _launch_args(q: torch.Tensor, block_m: int, block_n: int) -> dict:
    d = q.shape[-1]
    return dict(HEAD_DIM=d, BLOCK_D=max(16, triton.next_power_of_2(d)), BLOCK_M=block_m, BLOCK_N=block_n)


def _forward(q, k, v, causal: bool, block_m: int, block_n: int):
    b, h, t, d = q.shape
    q, k, v = (x.contiguous() for x in (q, k, v))  # (B, H, T, D)
    out = torch.empty_like(q)  # (B, H, T, D)
    lse = torch.empty(b, h, t, dtype=torch.float32, device=q.device)  # (B, H, T)
    grid = (triton.cdiv(t, block_m), b * h)
    _fwd_kernel[grid](q, k, v, out, lse, 1.0 / math.sqrt(d), t, CAUSAL=causal, **_launch_args(q, block_m, block_n))
    return (q, k, v), out, lse


def _backward(q, k, v, out, lse, grad_out, causal: bool, block_m: int, block_n: int):
    b, h, t, d = q.shape
    grad_out = grad_out.contiguous()  # (B, H, T, D)
    delta = (grad_out.float() * out.float()).sum(dim=-1)  # (B, H, T): rowsum(dO * O)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)  # (B, H, T, D) each
    common = dict(CAUSAL=causal, **_launch_args(q, block_m, block_n))
    scale = 1.0 / math.sqrt(d)
    _bwd_dkdv_kernel[(triton.cdiv(t, block_n), b * h)](q, k, v, grad_out, lse, delta, dk, dv, scale, t, **common)
    _bwd_dq_kernel[(triton.cdiv(t, block_m), b * h)](q, k, v, grad_out, lse, delta, dq, scale, t, **common)
    return dq, dk, dv


TritonAttention = flash_function("TritonAttention", _forward, _backward)


def flash_attention_triton(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True, block_m: int = 64, block_n: int = 64
) -> torch.Tensor:
    """q, k, v (B, H, T, D) -> (B, H, T, D) in q's dtype; fp32 accumulation inside the kernels."""
    return TritonAttention.apply(q, k, v, causal, block_m, block_n)
