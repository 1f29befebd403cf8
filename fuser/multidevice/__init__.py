"""Several devices: the DeviceMesh and the sharding math (local sizes <-> logical extents)."""
from ..ir.nodes import DeviceMesh
from .sharding import is_sharded, local_extents, sharding_factors

__all__ = ["DeviceMesh", "local_extents", "sharding_factors", "is_sharded"]
