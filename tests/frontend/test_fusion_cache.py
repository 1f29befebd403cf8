"""nvFuser's LRU cache of compiled definitions (LRUCache, LruFusionCache) and version()."""
import pytest

import fuser
from fuser import FusionDefinition, FusionDefinitionError, LRUCache, LruFusionCache
from tests.helpers import assert_eager, make


def _ratio(fd, flip: bool):
    a, b = fd.define_tensor([-1, -1], contiguity=True), fd.define_tensor([-1, -1], contiguity=True)
    fd.add_output(fd.ops.div(b, a) if flip else fd.ops.div(a, b))


def test_lru_fusion_cache_shares_one_executor_cache_per_structure():
    x, y = make((3, 4)), make((3, 4)) + 3.0

    @LruFusionCache(max_fusions=10)
    def build(flip):
        with FusionDefinition() as fd:
            _ratio(fd, flip)
        return fd

    assert build.stats() == "Max Fusions Allowed: 10\nThe fusion cache is empty.\n"
    caches = {False: set(), True: set()}
    for _ in range(5):
        for flip in (False, True):
            fd = build(flip)
            (out,) = fd.execute([x, y])
            assert_eager(out, y / x if flip else x / y)
            caches[flip].add(id(fd.fec))
    assert len(caches[False]) == len(caches[True]) == 1 and caches[False] != caches[True]
    assert build.num_fusions() == 2
    assert build.stats() == ("Max Fusions Allowed: 10\nTotal Fusions in Cache: 2\n"
                             "Total Unique Fusions Compiled: 2\nCache Hits by LRU ordering:\n"
                             "\t0 -> 4 hits\n\t1 -> 4 hits\nCache Lookups: 10\nCache Hits: 8\nHit Rate: 80%\n")


def test_lru_cache_keys_on_input_order_and_evicts_the_least_recently_used():
    cache = LRUCache(max_fusions=2)
    made = []
    for order in ([0, 1], [1, 0], [0, 1], [1, 0]):
        with FusionDefinition() as fd:
            t = [fd.define_tensor([1, -1], contiguity=[None, True]), fd.define_tensor([-1, -1], contiguity=True)]
            a, b = (t[k] for k in order)  # the same op on inputs defined in the other order
            fd.add_output(fd.ops.sub(a, b))
        fd.fec = cache.cache_compile(fd.fusion)
        del fd._fusion  # (nvFuser's idiom; fuser's definition keeps its fusion)
        made.append(fd)
    assert cache.num_fusions() == 2 and made[0].fec is made[2].fec and made[1].fec is made[3].fec
    row, full = make((1, 4)), make((2, 4))
    assert_eager(made[0].execute([row, full])[0], row - full)
    assert_eager(made[1].execute([row, full])[0], full - row)
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.neg(fd.define_tensor([-1], contiguity=True)))
    cache.cache_compile(fd.fusion)  # a third structure drops the least recently used
    assert cache.num_fusions() == 2
    assert cache.cache_compile(made[0].fusion) is not made[0].fec  # dropped: compiled anew
    assert "Total Unique Fusions Compiled: 4" in cache.stats()


def test_lru_cache_errors():
    with pytest.raises(FusionDefinitionError, match="max_fusions must be a positive int"):
        LRUCache(0)
    with pytest.raises(FusionDefinitionError, match="expected a Fusion"):
        LRUCache(4).cache_compile("not a fusion")
    with FusionDefinition() as fd:
        _ratio(fd, False)
    with FusionDefinition() as other:
        _ratio(other, True)
    with pytest.raises(FusionDefinitionError, match="compiled for another fusion"):
        fd.fec = LRUCache(4).cache_compile(other.fusion)
    with pytest.raises(FusionDefinitionError, match="expected a FusionExecutorCache"):
        fd.fec = 3


def test_version_compares_with_strings_and_versions():
    v = fuser.version()
    assert v == fuser.__version__ and v > "0.0.0" and v < "99.0" and v >= "0.1" and v != "0.0.1+git1234"
    packaging = pytest.importorskip("packaging.version")
    assert v > packaging.Version("0.0.0") and v < packaging.Version("1.0.0")
    with pytest.raises(ValueError, match="cannot compare"):
        v > "latest"
