"""add: the residual connection, two inputs of the same width."""

from .spec import OpParams, OpSpec, no_shape_rules


class AddParams(OpParams):
    pass


OP = OpSpec(
    name="add",
    params=AddParams,
    n_inputs=2,
    out_features=None,  # elementwise
    in_features=None,
    param_count=lambda p: 0,
    check=no_shape_rules,
    flops_per_token=lambda p, site: 4.0 * site.features,
    activation_elements=lambda p, site: site.features,  # its output (its backward reads nothing)
    module="computeall.tensorcore.ops.add:Add",
    llama="residual",
    example={},
    backward_reads_inputs=False,  # d(a + b) is the output's gradient, whatever a and b were
    working_bytes=lambda p, site, tokens, element: 0,
)
