"""The micro-batch tree: the one order of every gradient sum, whatever the replica count."""

import pytest

from computeall.protocol.config import DataConfig, SessionConfig
from computeall.protocol.micro_tree import (
    TreeFold, exchanges, replica_block, replica_counts, replica_problem, split,
)


def add(a: str, b: str) -> str:
    return f"({a}+{b})"


def fold(micro_batches: int, block: range) -> str:
    tree = TreeFold(micro_batches, add)
    for m in block:
        tree.push((m, m + 1), str(m))
    node, total = tree.root
    assert node == (block.start, block.stop)
    return total


def with_replicas(micro_batches: int, replicas: int) -> list[str]:
    """What each replica holds after summing its block and running every exchange."""
    held = [fold(micro_batches, replica_block(micro_batches, replicas, r)) for r in range(replicas)]
    for level in range(len(exchanges(micro_batches, replicas, 0))):
        steps = [exchanges(micro_batches, replicas, r)[level] for r in range(replicas)]
        held = [s.combine(held[r], held[s.partner], add) for r, s in enumerate(steps)]
    return held


def test_the_tree_halves_each_range():
    assert fold(4, range(4)) == "((0+1)+(2+3))"
    assert fold(6, range(6)) == "(((0+1)+2)+((3+4)+5))"
    assert split(0, 5) == 3 and fold(5, range(5)) == "(((0+1)+2)+(3+4))"
    assert fold(1, range(1)) == "0"


@pytest.mark.parametrize("micro_batches", [1, 2, 4, 6, 8, 12, 16])
def test_every_allowed_replica_count_adds_in_the_same_order(micro_batches):
    whole = fold(micro_batches, range(micro_batches))
    for replicas in replica_counts(micro_batches):
        assert with_replicas(micro_batches, replicas) == [whole] * replicas, replicas


def test_a_fold_holds_at_most_the_depth_of_partial_sums():
    tree, most = TreeFold(16, add), 0
    for m in range(16):
        tree.push((m, m + 1), str(m))
        most = max(most, tree.partial_sums())
    assert most == 4  # log2(16), not one per micro-batch


def test_nodes_must_come_left_to_right():
    tree = TreeFold(4, add)
    tree.push((0, 1), "0")
    with pytest.raises(ValueError, match="left to right"):
        tree.push((2, 3), "2")


def test_replica_counts_are_powers_of_two_dividing_micro_batches():
    assert replica_counts(8) == [1, 2, 4, 8]
    assert replica_counts(6) == [1, 2]
    assert replica_counts(8, at_most=3) == [1, 2]
    assert replica_problem(8, 4) is None and replica_problem(6, 2) is None
    problem = replica_problem(6, 4)
    assert "power of two that divides micro_batches" in problem and "choose replicas from 1, 2" in problem
    assert "replicas from 1, 2, 4" in replica_problem(12, 3)


def test_the_session_config_refuses_replicas_that_would_change_the_sum():
    data = DataConfig(files=["x.txt"])
    SessionConfig(network_yaml="x", data=data, steps=1, micro_batches=4, replicas=4)
    SessionConfig(network_yaml="x", data=data, steps=1, micro_batches=2, replicas="auto")
    with pytest.raises(ValueError, match="3 replicas cannot share 4 micro-batches"):
        SessionConfig(network_yaml="x", data=data, steps=1, micro_batches=4, replicas=3)
    with pytest.raises(ValueError, match="2 replicas cannot share 1 micro-batches"):
        SessionConfig(network_yaml="x", data=data, steps=1, replicas=2)
