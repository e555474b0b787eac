import torch
import torch.nn.functional as F
from torch import nn


class TiedLMHeadCE(nn.Module):
    """The cost VNode: logits = x @ embedding.T, cross-entropy against the targets.

    Returns the *sum* of token losses: the trainer divides by the step's token count,
    so that any split into micro-batches gives the same gradient.
    """

    def __init__(self, dim: int, vocab_size: int, weight: nn.Parameter) -> None:
        super().__init__()
        self.tied_weight = [weight]  # a list, so the shared Parameter is not registered twice

    @property
    def weight(self) -> nn.Parameter:
        return self.tied_weight[0]

    def reset_parameters(self, generator: torch.Generator) -> None:
        pass

    def forward(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = F.linear(x, self.weight)  # (B, T, V)
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="sum")
