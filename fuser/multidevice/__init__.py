"""Several devices: the DeviceMesh, the sharding math (local sizes <-> logical extents), the
Communication expr and the Communicator over torch.distributed.

    mesh = fuser.multidevice.DeviceMesh(torch.arange(d))        # 1-D; a nested list is 2-D
    x_local = fuser.multidevice.shard_tensor(x_full, fd.fusion.inputs()[0])
"""
from typing import Optional

from ..ir.nodes import DeviceMesh
from .communication import Collective, Communication
from .communicator import CollectiveError, Communicator
from .sharding import is_sharded, local_extents, sharding_factors
from .sharding import shard_tensor as _shard_tensor


def shard_tensor(full_tensor, tv, rank: Optional[int] = None):
    """This process's shard of `full_tensor` for the fusion input `tv`, found by replaying the
    device splits of `tv` (a replicated tensor comes back whole). `rank` defaults to this
    process's rank (from torch.distributed, initialized from torchrun's environment if needed)."""
    if rank is None:
        rank = Communicator.default().rank
    return _shard_tensor(full_tensor, tv, rank)


__all__ = ["DeviceMesh", "shard_tensor", "Communicator", "CollectiveError", "Communication",
           "Collective", "local_extents", "sharding_factors", "is_sharded"]
