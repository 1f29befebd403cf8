"""nn.Linear as AOTAutograd writes it, `addmm(b, x, t(w))`, becomes the IR's `linear(x, w, b)`
on the weight itself: no pair of permutes (`t(w)`, then its transpose) for ATen to run at
every call."""
import torch
import torch.nn as nn

import fuser


def test_a_linear_layer_takes_its_weight_without_permutes():
    torch.manual_seed(1)
    layer = nn.Linear(8, 16)
    x = torch.randn(3, 5, 8)

    def fn(x):
        return torch.relu(layer(x))

    with torch.no_grad():
        (fusion,) = fuser.explain(fn, x).fusions
        torch.testing.assert_close(fuser.jit(fn)(x), fn(x), rtol=1e-5, atol=1e-5)
    assert "= linear(" in fusion.fusion and "permute(" not in fusion.fusion


def test_views_between_fusions_follow_each_call_s_sizes():
    """The ATen view after a linear layer (its 2-D output back to 3-D, the batch a symbol) runs
    as a generated straight-line step: its size list reads the call's sizes."""
    torch.manual_seed(2)
    layer = nn.Linear(8, 16)

    def fn(x):
        return layer(torch.tanh(x) * 2)

    jitted = fuser.jit(fn)
    with torch.no_grad():
        for batch in (3, 5, 3, 7):
            x = torch.randn(batch, 4, 8)
            torch.testing.assert_close(jitted(x), fn(x), rtol=1e-5, atol=1e-5)
        report = fuser.explain(fn, torch.randn(6, 4, 8))
    eager = [op for g in report.graphs for p in g.programs for _, op, _ in p.eager]
    assert any("view" in op for op in eager)
