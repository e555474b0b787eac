"""bottleneck_down and bottleneck_up: a learned low-rank bottleneck, written where a pipeline is meant to be cut.

`bottleneck_down` projects the residual stream (`dim` features) to `rank`, `bottleneck_up` projects it
back: the edge between them is `rank` wide, and so is the gradient that comes back over it, so a cut
there sends dim/rank times fewer elements each way (the down VNode's `wire` setting shrinks each element
further). Both start as the same fixed projection (`computeall.tensorcore.ops.bottleneck`), so at init
up(down(x)) is x projected onto `rank` directions: a low-rank identity path that training then bends,
as in ResBM. What a rank-r path cannot carry, each token's own identity, a network adds back after it
from data.tokens with an embedding (examples/networks/tiny-gpt-wan.yaml; docs/decisions.md).
"""

from pydantic import Field

from .spec import OpParams, OpSpec, Problem, weights_flops


class BottleneckParams(OpParams):
    dim: int = Field(..., ge=1)  # the wide side: the residual stream
    rank: int = Field(..., ge=1)  # the narrow side: what crosses the cut


def check(p: BottleneckParams, inputs: list[str]) -> list[Problem]:
    if p.rank > p.dim:
        return [Problem("rank", f"rank {p.rank} is wider than dim {p.dim}; a bottleneck narrows the stream")]
    return []


def param_count(p: BottleneckParams) -> int:
    return p.dim * p.rank


def _bottleneck(name: str, module: str, in_width: str, out_width: str) -> OpSpec:
    return OpSpec(
        name=name,
        params=BottleneckParams,
        n_inputs=1,
        in_features=lambda p: getattr(p, in_width),
        out_features=lambda p: getattr(p, out_width),
        in_field=in_width,
        param_count=param_count,
        check=check,
        flops_per_token=weights_flops(param_count),
        activation_elements=lambda p, site: p.dim + p.rank,  # its input, kept for the weight's gradient, and its output
        module=f"computeall.tensorcore.ops.bottleneck:{module}",
        example={"dim": 8, "rank": 2},
    )


DOWN = _bottleneck("bottleneck_down", "BottleneckDown", "dim", "rank")
UP = _bottleneck("bottleneck_up", "BottleneckUp", "rank", "dim")
