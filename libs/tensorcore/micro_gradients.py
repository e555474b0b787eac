"""A step's parameter gradients, summed over its micro-batches along the fixed micro-batch tree.

Each VNode's backward of a micro-batch adds its parameters' gradients here (a tied weight gets
one part from each VNode that uses it, in backward order); once the VNode owning a parameter has
run its backward of that micro-batch, the micro-batch's gradient is complete and is folded into
the tree (`computeall.protocol.micro_tree`). When the last micro-batch of this runtime's block is
folded, `p.grad` is the block's sum: the whole step's gradient with one replica, a subtree that
the replicas combine with several. So the gradient has the same bits whatever the replica count,
placement or schedule. Memory: one partial sum per tree level on top of `p.grad` (log2 of the
micro-batches per replica), and the micro-batches whose backward is under way.
"""

from __future__ import annotations

import torch

from computeall.protocol.micro_tree import TreeFold


def add_parts(a: torch.Tensor | None, b: torch.Tensor | None) -> torch.Tensor | None:
    """left + right, where a missing part (no gradient) adds nothing; never in place."""
    if a is None:
        return b
    if b is None:
        return a
    return a + b


class MicroGradients:
    def __init__(self, params: dict[str, torch.nn.Parameter], owner_of: dict[str, str]) -> None:
        self.params = params
        self.owner_of = dict(owner_of)  # parameter -> its VNode
        self.owned: dict[str, list[str]] = {}  # vnode -> the parameters it owns
        for name, vid in owner_of.items():
            self.owned.setdefault(vid, []).append(name)
        self.block = range(0)
        self._micro_batches = 0
        self._parts: dict[int, dict[str, torch.Tensor]] = {}  # micro -> parameter -> gradient so far
        self._folds: dict[str, TreeFold] = {}
        self._folded: dict[str, int] = {}  # parameter -> micro-batches folded

    def start(self, block: range, micro_batches: int) -> None:
        """A new step: this runtime sums micro-batches `block` of a step's `micro_batches`."""
        self.block, self._micro_batches = block, micro_batches
        self._parts.clear()
        self._folds = {name: TreeFold(micro_batches, add_parts) for name in self.params}
        self._folded = {name: 0 for name in self.params}
        for p in self.params.values():
            p.grad = None

    def add(self, micro: int, name: str, grad: torch.Tensor) -> None:
        parts = self._parts.setdefault(micro, {})
        held = parts.get(name)
        # a tied weight's parts of one micro-batch: the first is a backward's own result, held here alone,
        # so the next adds into it (the same bits as a + b): a large table's sum was a third copy of it
        parts[name] = grad if held is None else held.add_(grad)

    def close(self, micro: int, vid: str) -> None:
        """`vid` ran its backward of `micro`: its own parameters' gradients of `micro` are complete."""
        parts = self._parts.get(micro, {})
        for name in self.owned.get(vid, []):
            self._fold(name, micro, parts.pop(name, None))
        if not parts:
            self._parts.pop(micro, None)

    def complete(self, vid: str) -> bool:
        """Every parameter `vid` owns holds its block's sum in `p.grad`."""
        return all(self._folded[n] == len(self.block) for n in self.owned.get(vid, []))

    def finish(self) -> None:
        """Fold what no backward closed (VNodes whose output nothing reads): every `p.grad` is final."""
        for name in self.params:
            while self._folded[name] < len(self.block):
                micro = self.block[self._folded[name]]
                self._fold(name, micro, self._parts.get(micro, {}).pop(name, None))
        self._parts.clear()

    def _fold(self, name: str, micro: int, grad: torch.Tensor | None) -> None:
        if self._folded.get(name, 0) >= len(self.block):
            raise RuntimeError(f"{name}: micro-batch {micro} is not in this step's {self.block} (start_step first)")
        if micro != self.block[self._folded[name]]:
            raise RuntimeError(f"{name}: micro-batch {micro} came before {self.block[self._folded[name]]}")
        fold = self._folds[name]
        fold.push((micro, micro + 1), grad)
        self._folded[name] += 1
        if self._folded[name] == len(self.block):
            root = fold.root
            if root is None or root[0] != (self.block.start, self.block.stop):
                raise RuntimeError(f"micro-batches {self.block} are not one subtree of {self._micro_batches}")
            self.params[name].grad = root[1]
