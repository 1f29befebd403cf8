"""Calls fuser.jit runs as the plain function, uncompiled (a global module hook registered, a
torch.func transform, forward AD's dual_level): `fuser.explain` blamed Dynamo for them ("Dynamo
ran it eagerly (a frame it skips, ...)"), and nothing counted them, so a library registering a
global hook turned fuser off silently. The report now names the reason, and `cache_info()`
counts such calls (`uncompiled`)."""
import torch
import torch.autograd.forward_ad as fwAD
import torch.nn as nn

import fuser
from tests.helpers import make


def _f(x):
    return torch.tanh(x) * x.sum(-1, keepdim=True)


def _assert_names(report, reason: str) -> None:
    assert not report.graphs
    text = str(report)
    assert reason in text and "ran the call uncompiled" in text
    assert "Dynamo ran it eagerly" not in text
    assert reason in report._repr_html_()
    assert report.info.uncompiled == 1


def test_explain_under_a_global_module_hook_names_the_hook():
    jitted = fuser.jit(_f)
    x = make((8, 16))
    torch.testing.assert_close(jitted(x), _f(x))
    handle = nn.modules.module.register_module_forward_hook(lambda module, args, out: out)
    try:
        report = fuser.explain(jitted, x)
        torch.testing.assert_close(jitted(x), _f(x))
    finally:
        handle.remove()
    _assert_names(report, "a global module hook is registered")
    # the explained call and the plain one under the hook, both counted
    assert jitted.cache_info().uncompiled == 2
    assert jitted.cache_info().calls == 3


def test_explain_under_forward_ad_names_dual_level():
    jitted, x = fuser.jit(_f), make((8, 16))
    with fwAD.dual_level():
        report = fuser.explain(jitted, x)
    _assert_names(report, "forward_ad.dual_level")


def test_explain_under_a_func_transform_names_the_transform():
    jitted, x = fuser.jit(_f), make((4, 8, 16))
    reports = []

    def explained(row):
        reports.append(fuser.explain(jitted, row))
        return jitted(row)

    got = torch.func.vmap(explained)(x)
    torch.testing.assert_close(got, torch.func.vmap(_f)(x), rtol=1e-5, atol=1e-5)
    _assert_names(reports[0], "torch.func transform")
    assert jitted.cache_info().uncompiled == 2


def test_compiled_calls_count_none_uncompiled():
    jitted, x = fuser.jit(_f), make((8, 16))
    torch.testing.assert_close(jitted(x), _f(x))
    report = fuser.explain(jitted, x)
    assert report.graphs and report.uncompiled is None
    assert jitted.cache_info().uncompiled == 0
