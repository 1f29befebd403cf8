"""The IR: a small dataclass graph whose extents are sympy expressions."""
from .domain import IterDomain, Merge, Split, TensorDomain
from .fusion import Fusion, tensor_domain
from .nodes import *  # noqa: F401,F403 - the node classes are the IR's vocabulary
from .nodes import DeviceMesh, Expr, Scalar, TensorView, Val
from .symbolic import ceilDiv, format_extent
from .types import DataType, IterType, MemoryType, ParallelType, promote
