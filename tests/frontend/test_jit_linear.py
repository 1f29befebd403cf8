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
