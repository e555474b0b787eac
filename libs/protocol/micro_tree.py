"""The one tree over a step's micro-batch indices that every gradient sum follows.

Floating-point addition is not associative, so a sum over micro-batches has the bits of the
order it was added in. A step's gradient is therefore always the sum over the same binary tree
of micro-batch indices `0 .. micro_batches-1`, whoever computes which part: each node halves its
range (`split`), leaves are single micro-batches. With R data-parallel replicas, replica `r`
owns the contiguous block of micro-batches `replica_block(M, R, r)`, which must be a node of
that tree: it sums its block as the subtree, and the replicas combine their subtrees along the
tree's top levels. So R = 1, 2 or 4 evaluate exactly the same additions, and give the same bits.

That holds when R is a power of two dividing `micro_batches` (`replica_problem` says why not
otherwise). A subtree sum is formed leaf by leaf, left to right, keeping at most the tree's
depth of partial sums (`TreeFold`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Generic, TypeVar

T = TypeVar("T")

Node = tuple[int, int]  # the micro-batches [lo, hi) a partial sum covers


def split(lo: int, hi: int) -> int:
    """Where node [lo, hi) divides into its two children [lo, mid) and [mid, hi)."""
    return lo + (hi - lo + 1) // 2


def replica_problem(micro_batches: int, replicas: int) -> str | None:
    """Why `replicas` cannot share `micro_batches` micro-batches without changing the sum's order, or None."""
    if replicas < 1:
        return f"replicas must be at least 1 (got {replicas})"
    if replicas & (replicas - 1) or micro_batches % replicas:
        fits = ", ".join(str(r) for r in replica_counts(micro_batches))
        return (f"{replicas} replicas cannot share {micro_batches} micro-batches: the replica count must be a power "
                f"of two that divides micro_batches, so that each replica sums a whole subtree of the fixed "
                f"micro-batch tree; with micro_batches={micro_batches} choose replicas from {fits}, "
                f"or change micro_batches (a multiple of the replica count)")
    return None


def replica_counts(micro_batches: int, at_most: int | None = None) -> list[int]:
    """Every replica count that can share `micro_batches` micro-batches, smallest first."""
    counts, r = [], 1
    while micro_batches % r == 0 and (at_most is None or r <= at_most):
        counts.append(r)
        r *= 2
    return counts


def replica_block(micro_batches: int, replicas: int, replica: int) -> range:
    """The micro-batches replica `replica` of `replicas` runs: a node of the tree."""
    size = micro_batches // replicas
    return range(replica * size, (replica + 1) * size)


@dataclass(frozen=True)
class Exchange:
    """One level of the replicas' all-reduce: send the sum of `mine`, receive `theirs` from `partner`."""

    partner: int
    mine: Node
    theirs: Node

    @property
    def parent(self) -> Node:
        return (min(self.mine[0], self.theirs[0]), max(self.mine[1], self.theirs[1]))

    def combine(self, mine: T, theirs: T, add: Callable[[T, T], T]) -> T:
        """left + right, the same addition on both sides of the exchange."""
        return add(mine, theirs) if self.mine[0] < self.theirs[0] else add(theirs, mine)


def exchanges(micro_batches: int, replicas: int, replica: int) -> list[Exchange]:
    """The butterfly over the tree's top levels: at level l, replicas r and r ^ 2**l swap the sums of
    their subtrees (2**l blocks each) and both add left + right, so after log2(R) levels every replica
    holds the whole step's sum, with the bits of one replica summing it all."""
    out, span = [], 1
    while span < replicas:
        partner = replica ^ span
        first, their_first = replica & ~(span - 1), partner & ~(span - 1)
        block = micro_batches // replicas
        out.append(Exchange(partner, (first * block, (first + span) * block),
                            (their_first * block, (their_first + span) * block)))
        span *= 2
    return out


def _parents(micro_batches: int) -> dict[Node, Node]:
    parents: dict[Node, Node] = {}
    todo = [(0, micro_batches)]
    while todo:
        lo, hi = todo.pop()
        if hi - lo > 1:
            mid = split(lo, hi)
            parents[(lo, mid)] = parents[(mid, hi)] = (lo, hi)
            todo += [(lo, mid), (mid, hi)]
    return parents


class TreeFold(Generic[T]):
    """Sums nodes of the tree over `micro_batches`, given left to right, into their parents.

    `push` a leaf (m, m + 1) or a whole subtree's sum; two neighbours that are the children of
    one node are replaced by `add(left, right)` at once. After the last node of a subtree,
    `root` is that subtree's sum. `add` may receive None for a missing part (a parameter no
    micro-batch touched): it then returns the other.
    """

    def __init__(self, micro_batches: int, add: Callable[[T, T], T]) -> None:
        self._parents = _parents(micro_batches)
        self._add = add
        self._stack: list[tuple[Node, T]] = []

    def push(self, node: Node, value: T) -> None:
        if self._stack and self._stack[-1][0][1] != node[0]:
            raise ValueError(f"micro-batches {node} pushed after {self._stack[-1][0]}: nodes come left to right")
        self._stack.append((node, value))
        while len(self._stack) >= 2:
            (left, a), (right, b) = self._stack[-2], self._stack[-1]
            parent = self._parents.get(left)
            if parent is None or parent != self._parents.get(right):
                break
            del self._stack[-2:]
            self._stack.append((parent, self._add(a, b)))

    @property
    def root(self) -> tuple[Node, T] | None:
        """The one subtree folded so far, or None while parts of it are still apart."""
        return self._stack[0] if len(self._stack) == 1 else None

    def partial_sums(self) -> int:
        return len(self._stack)
