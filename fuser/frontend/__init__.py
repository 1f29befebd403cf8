from .definition import FusionDefinition
from .explain import ExplainReport, explain
from .jit import CacheInfo, jit
