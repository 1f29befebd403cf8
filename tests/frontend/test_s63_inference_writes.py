"""An in-place write into an inference tensor outside torch.inference_mode() is refused on every
call, as eager refuses it: a repeat call goes to the executor cache without
FusionDefinition.execute, whose check it must keep (sixty-third session's probe: the first call
raised, the next ones wrote the tensor)."""
import pytest
import torch

import fuser
from fuser.errors import FusionInputError


def _update(buf, w):
    buf.add_(1)
    return buf * w


def _inference_randn(*shape):
    with torch.inference_mode():
        return torch.randn(*shape)


@pytest.mark.parametrize("compiler", ["jit", "torch.compile"])
@pytest.mark.parametrize("first", ["inference", "normal", "inside inference mode"])
def test_every_call_refuses_writing_an_inference_tensor(compiler, first):
    torch._dynamo.reset()
    fn = fuser.jit(_update) if compiler == "jit" else torch.compile(_update, backend="fuser")
    w = torch.randn(6)
    if first == "normal":
        buf = torch.randn(4, 6)
        want = _update(buf.clone(), w)
        torch.testing.assert_close(fn(buf, w), want)
    elif first == "inside inference mode":
        buf = _inference_randn(4, 6)
        with torch.inference_mode():
            written = buf + 1
            torch.testing.assert_close(fn(buf, w), written * w)
            torch.testing.assert_close(buf, written)
    for _ in range(3):
        buf = _inference_randn(4, 6)
        before = buf.clone()
        with pytest.raises(RuntimeError, match="Inplace update to inference tensor"):
            _update(_inference_randn(4, 6), w)  # (eager's verdict)
        with pytest.raises(FusionInputError, match="inference tensor"):
            fn(buf, w)
        assert torch.equal(buf, before)
