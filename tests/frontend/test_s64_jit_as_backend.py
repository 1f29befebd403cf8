"""`torch.compile(f, backend=fuser.jit)`, a slip for `backend="fuser"`: fuser.jit is called with
a graph and its example inputs, and says which backend to pass."""
import pytest
import torch

import fuser


def test_fuser_jit_given_as_torch_compile_s_backend_names_the_backend_to_pass():
    compiled = torch.compile(lambda x: x + 1, backend=fuser.jit)
    with pytest.raises(Exception, match='backend="fuser"'):
        compiled(torch.randn(3))
