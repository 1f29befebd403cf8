"""fuser: a tensor-fusion compiler for PyTorch that generates Triton kernels."""
from . import multidevice
from .codegen.tuning import finish_tuning
from .errors import (ExtentConflictError, FuserError, FusionDefinitionError, FusionIndexError, FusionInputError,
                     InternalError, UnsupportedError, ValidationError)
from .frontend import CacheInfo, ExplainReport, FusionDefinition, explain, jit
from .frontend.definition import compute_tensor_descriptor
from .frontend.fusion_cache import LRUCache, LruFusionCache
from .frontend.profiler import PythonProfiler
from .frontend.backend import register_unless_installed as _register_backend
from .ir import DataType, Fusion, ParallelType
from .version import version

__version__ = str(version())

_register_backend()  # torch.compile(fn, backend="fuser")

__all__ = [
    "FusionDefinition", "jit", "explain", "CacheInfo", "ExplainReport", "DataType", "ParallelType",
    "Fusion", "multidevice", "finish_tuning",
    "FuserError", "FusionDefinitionError", "FusionInputError", "FusionIndexError", "ExtentConflictError",
    "UnsupportedError", "InternalError", "ValidationError", "compute_tensor_descriptor",
    "LRUCache", "LruFusionCache", "PythonProfiler", "version",
]
