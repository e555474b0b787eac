"""Network YAML: schema, macros, validation, the VNode graph."""

from .graph import Edge, Graph, init_seed
from .loader import NetworkError, load_network, load_network_file
from .schema import NetworkSpec, VNodeSpec

__all__ = ["Edge", "Graph", "NetworkError", "NetworkSpec", "VNodeSpec", "init_seed", "load_network", "load_network_file"]
