"""fuser: a tensor-fusion compiler for PyTorch that generates Triton kernels."""
from . import multidevice
from .errors import (ExtentConflictError, FuserError, FusionDefinitionError, FusionInputError,
                     InternalError, UnsupportedError)
from .frontend import FusionDefinition
from .ir import DataType, Fusion, ParallelType

__version__ = "0.1.0"

__all__ = [
    "FusionDefinition", "DataType", "ParallelType", "Fusion", "multidevice",
    "FuserError", "FusionDefinitionError", "FusionInputError", "ExtentConflictError",
    "UnsupportedError", "InternalError",
]
