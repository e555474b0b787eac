"""The WAN lab: PNodes in network namespaces behind shaped links, for tests and benchmarks.

A package (not a bench/*.py script) so bench/run_all.py does not run it as a benchmark; tests
and bench/wan.py import it as `bench.wanlab` from the repository root.
"""

from .lab import Node, WanLab
from .netns import LabError, LabUnavailable, cleanup_stale
from .profiles import PROFILES, LinkProfile, profile

__all__ = ["PROFILES", "LabError", "LabUnavailable", "LinkProfile", "Node", "WanLab", "cleanup_stale", "profile"]
