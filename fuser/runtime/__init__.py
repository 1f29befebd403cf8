from .cache import FusionExecutorCache, FusionRuntime, signature
