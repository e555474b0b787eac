"""Benchmarks: `python -m bench.<name> [--quick] [--json PATH]` from the repository root (bench/common.py)."""
