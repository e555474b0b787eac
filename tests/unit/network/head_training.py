"""A PNode-style training loop in one process, for the head-fusion equivalence tests.

Every VNode runs through `VNodeRuntime` (`local_step`: its own autograd call per VNode, gradients
summed in the graph's consumer order) exactly as a PNode's stage drives it, and the optimizer is
the fused AdamW whose state (fp32 masters, moments, step) is a flat dict of named tensors.
"""

from __future__ import annotations

import torch

from computeall.kernels import FusedAdamW
from computeall.network import Graph, NetworkSpec
from computeall.tensorcore.local_step import local_step
from computeall.tensorcore.vnode_runtime import VNodeRuntime


def batches(vocab: int, context: int, steps: int, micro: int, micro_size: int, seed: int = 0) -> list[list[torch.Tensor]]:
    """Rows drawn from a pool of 8 fixed sequences, so the network has something to learn."""
    g = torch.Generator().manual_seed(seed)
    pool = torch.randint(0, vocab, (8, context + 1), generator=g)
    return [[pool[torch.randint(0, 8, (micro_size,), generator=g)] for _ in range(micro)] for _ in range(steps)]


def lr_at(step: int) -> float:
    return 3e-3 * min(1.0, (step + 1) / 3)


class Trainer:
    def __init__(self, spec: NetworkSpec, seed: int) -> None:
        self.graph = Graph(spec)
        self.runtime = VNodeRuntime(self.graph, self.graph.order, seed, torch.device("cpu"))
        self.params = self.runtime.parameters()
        self.optimizer = FusedAdamW(sorted(self.params.items()), betas=(0.9, 0.95), weight_decay=0.1, impl="torch")
        self.calls = 0  # VNode forward + backward calls: the requests a PNode would serve

    def step(self, step: int, micro_batches: list[torch.Tensor]) -> float:
        result = local_step(self.runtime, micro_batches)
        self.calls += result.calls
        self.optimizer.lr = lr_at(step)
        self.optimizer.step()
        self.runtime.zero_grad()
        return result.loss

    def state(self) -> dict[str, torch.Tensor]:
        """A checkpoint: weights under `param/`, optimizer state under `optim/`."""
        out = {f"param/{n}": p.detach().clone() for n, p in self.params.items()}
        out.update({f"optim/{k}": v for k, v in self.optimizer.state_dict().items()})
        return out

    def load(self, state: dict[str, torch.Tensor]) -> None:
        with torch.no_grad():
            for n, p in self.params.items():
                p.copy_(state[f"param/{n}"])
        self.optimizer.load_state_dict({k[len("optim/"):]: v for k, v in state.items() if k.startswith("optim/")})
