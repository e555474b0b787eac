import pytest
import torch


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def pytest_collection_modifyitems(config, items):
    """`triton_grid` cases run only when `-m` asks for them: the interpreter is slow, and one case of
    each size runs by default (test_triton_interpret.py). Deselected, not skipped: they are not run
    for want of anything."""
    if "triton_grid" in (config.option.markexpr or ""):
        return
    grid = [item for item in items if item.get_closest_marker("triton_grid")]
    if grid:
        config.hook.pytest_deselected(items=grid)
        items[:] = [item for item in items if not item.get_closest_marker("triton_grid")]
