import torch
from torch import nn

from computeall.kernels import linear_cross_entropy

from ..kernel_choice import lce_impl


class TiedLMHeadCE(nn.Module):
    """The cost VNode: cross-entropy of x @ embedding.T against the targets, fused and chunked.

    Returns the *sum* of token losses (fp32, whatever the VNode's precision): the trainer divides
    by the step's token count, so that any split into micro-batches gives the same gradient. The
    (tokens x vocab) logits never exist; the tied weight's gradient is computed in the forward
    (accumulated in fp32) and added to the embedding's own gradient by the runtime.
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
        w = self.weight if self.weight.dtype == x.dtype else self.weight.to(x.dtype)  # head in its own precision
        return linear_cross_entropy(x, w, targets.long(), reduction="sum", impl=lce_impl(x.device))
