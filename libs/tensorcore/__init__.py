"""Tensor runtime: devices, precisions, VNode op implementations, wire conversion, persistence."""
