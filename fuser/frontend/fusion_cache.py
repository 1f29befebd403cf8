"""nvFuser's LRU cache of compiled definitions: `LRUCache.cache_compile(fusion)` gives one
FusionExecutorCache per fusion structure (its printed IR and transforms), so that definitions
rebuilt for each call share their compiled runtimes; `LruFusionCache` wraps a function that
builds a definition. The least recently used entry is dropped past `max_fusions`."""
from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

from ..errors import FusionDefinitionError
from ..ir import Fusion
from ..runtime import FusionExecutorCache


@dataclass
class _Entry:
    cache: FusionExecutorCache
    visits: int = 0  # lookups that found it


class LRUCache:
    def __init__(self, max_fusions: int = 16384):
        if not isinstance(max_fusions, int) or max_fusions < 1:
            raise FusionDefinitionError(f"LRUCache: max_fusions must be a positive int, got {max_fusions!r}")
        self.max_fusions = max_fusions
        self._entries: OrderedDict[str, _Entry] = OrderedDict()  # most recently used first
        self._compiled = self._lookups = self._hits = 0
        self._lock = threading.Lock()

    def cache_compile(self, fusion: Fusion) -> FusionExecutorCache:
        """The executor cache of `fusion`'s structure: found (and made the most recently used),
        or made for `fusion`, dropping the least recently used entry if the cache is full."""
        if not isinstance(fusion, Fusion):
            raise FusionDefinitionError(f"LRUCache.cache_compile: expected a Fusion (fd.fusion), got "
                                        f"{type(fusion).__name__}")
        if not fusion.outputs():
            raise FusionDefinitionError("LRUCache.cache_compile: the fusion has no outputs")
        key = fusion.structural_hash()
        with self._lock:
            self._lookups += 1
            entry = self._entries.get(key)
            if entry is not None:
                self._hits += 1
                entry.visits += 1
                self._entries.move_to_end(key, last=False)
                return entry.cache
            if len(self._entries) == self.max_fusions:
                self._entries.popitem(last=True)
            entry = _Entry(FusionExecutorCache(fusion))
            self._compiled += 1
            self._entries[key] = entry
            self._entries.move_to_end(key, last=False)
            return entry.cache

    def num_fusions(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return (f"LRUCache(max_fusions={self.max_fusions}, fusions={self.num_fusions()}, "
                f"lookups={self._lookups}, hits={self._hits})")

    def stats(self) -> str:
        """nvFuser's report: size, compiles, each entry's hits from the most recently used, hit rate."""
        with self._lock:
            lines = [f"Max Fusions Allowed: {self.max_fusions}"]
            if not self._entries:
                return "\n".join(lines + ["The fusion cache is empty.", ""])
            lines += [f"Total Fusions in Cache: {len(self._entries)}",
                      f"Total Unique Fusions Compiled: {self._compiled}", "Cache Hits by LRU ordering:"]
            lines += [f"\t{k} -> {e.visits} hits" for k, e in enumerate(self._entries.values())]
            rate = 100.0 * self._hits / self._lookups if self._lookups else 0.0
            lines += [f"Cache Lookups: {self._lookups}", f"Cache Hits: {self._hits}", f"Hit Rate: {rate:g}%", ""]
            return "\n".join(lines)


class LruFusionCache:
    """A decorator for a function that builds and returns a FusionDefinition: each definition it
    returns executes through the LRUCache entry of its structure (`fd.fec`). The wrapped
    function has `stats()` and `num_fusions()`."""

    def __init__(self, max_fusions: int = 16384):
        self.cache = LRUCache(max_fusions)

    def __call__(self, create_fusion_definition: Callable) -> Callable:
        @functools.wraps(create_fusion_definition)
        def wrapper(*args, **kwargs):
            fd = create_fusion_definition(*args, **kwargs)
            if fd.fec is None:
                fd.fec = self.cache.cache_compile(fd.fusion)
            return fd

        wrapper.stats = self.cache.stats
        wrapper.num_fusions = self.cache.num_fusions
        return wrapper
