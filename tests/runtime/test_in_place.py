"""Aliased outputs written by their kernel into the input (runtime/in_place.py): where it is
safe, and the copy after the run where it is not; each checked against eager."""
import pytest
import torch

from fuser import DataType, FusionDefinition, FusionInputError
from fuser.codegen.inline import Disjoint, span_lengths
from fuser.runtime.in_place import write_back
from tests.helpers import make

# the ready call's inline launch (codegen/inline.py) on a GPU, the prepared launch elsewhere
DEVICES = pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")])])


def _dense(fd, rank: int = 1):
    """A contiguous fp32 input of `rank` symbolic extents."""
    return fd.define_tensor(shape=[-1] * rank, contiguity=[True] * rank, dtype=DataType.Float)


def _sgd(rank: int = 2, contiguous: bool = True):
    with FusionDefinition() as fd:
        p = fd.define_tensor(shape=[-1] * rank, contiguity=[contiguous] * rank, dtype=DataType.Float)
        g = fd.define_tensor(shape=[-1] * rank, contiguity=[True] * rank, dtype=DataType.Float)
        new = fd.ops.sub(p, fd.ops.mul(g, 0.1))
        fd.add_output(new, alias_input=p)
        fd.add_output(fd.ops.mul(new, 2.0))
    return fd


@DEVICES
def test_a_pointwise_update_is_written_into_its_input(written_in_place, device):
    fd = _sgd()
    p, g = make((16, 8)).to(device), make((16, 8)).to(device)
    for _ in range(3):  # (the first call, then the ready call)
        before, version = p.clone(), p._version
        (doubled,) = fd.execute([p, g])
        torch.testing.assert_close(p, before - g * 0.1)
        torch.testing.assert_close(doubled, 2 * p)
        assert p._version > version  # (as copy_ bumps it: autograd sees the write)
    assert written_in_place == [True] * 3


def test_an_input_overlapping_the_written_one_gets_a_copy_instead(written_in_place):
    fd = _sgd()
    base = make((17 * 8,))
    p, g = base[8:].view(16, 8), base[:128].view(16, 8)  # (g is p one row earlier)
    expected = p - g * 0.1
    fd.execute([p, g])
    torch.testing.assert_close(p, expected)
    assert written_in_place == [False]


@DEVICES
def test_arguments_that_overlap_on_a_later_call_get_a_copy_then(written_in_place, device):
    fd = _sgd()
    base = make((17 * 8,)).to(device)
    apart = (make((16, 8)).to(device), make((16, 8)).to(device))
    for k in range(5):  # (ready calls remember their last arguments' overlap by address)
        p, g = apart if k % 2 == 0 else (base[8:].view(16, 8), base[:128].view(16, 8))
        expected = p - g * 0.1
        fd.execute([p, g])
        torch.testing.assert_close(p, expected)
    assert written_in_place == [True, False, True, False, True]


def test_the_overlap_check_remembers_its_answer_by_address_alone():
    a, b = make((16,)), make((16,))
    both = torch.cat([a, b])
    check = Disjoint(span_lengths([a, b, 2.0]))  # (a number spans nothing)
    assert check([a, b, 2.0]) and check([a, b, 3.0])
    assert not check([a, a, 2.0])
    assert not check([both[:16], both[4:20], 2.0]) and check([both[:16], both[16:], 2.0])
    assert check([a, b, 2.0])
    assert not check([both[:16], both[4:20], 2.0])


def test_write_backs_are_one_foreach_copy_and_read_the_inputs_old_values(monkeypatch):
    calls = []
    foreach_copy = torch._foreach_copy_
    monkeypatch.setattr(torch, "_foreach_copy_", lambda d, v: calls.append(len(d)) or foreach_copy(d, v))
    dsts, values = [make((8,)), make(()), make((2, 3))], [make((8,)), make(()), make((2, 3))]
    versions = [d._version for d in dsts]
    write_back([], dsts, values)
    assert calls == [3] and all(d._version > v for d, v in zip(dsts, versions))
    for d, v in zip(dsts, values):
        torch.testing.assert_close(d, v)
    # the second value is the first input: it gets the first input's old contents, as every
    # output is computed from the inputs as they came (a copy in order would hand on the new)
    first, second = make((8,)), make((8,))
    new, old = make((8,)), first.clone()
    write_back([], [first, second], [new, first])
    torch.testing.assert_close(first, new)
    torch.testing.assert_close(second, old)
    # a swap
    a, b = make((8,)), make((8,))
    old_a, old_b = a.clone(), b.clone()
    write_back([], [a, b], [b, a])
    torch.testing.assert_close(a, old_b)
    torch.testing.assert_close(b, old_a)
    written = make((4,))
    version = written._version
    write_back([written], [], [])
    assert written._version > version


@DEVICES
def test_the_same_tensor_passed_twice_gets_a_copy(written_in_place, device):
    fd = _sgd()
    for _ in range(2):  # (the first call, then the ready call)
        p = make((16, 8)).to(device)
        expected = p - p * 0.1
        fd.execute([p, p])
        torch.testing.assert_close(p, expected)
    assert written_in_place == [False, False]


@pytest.mark.parametrize("twice", [False, True], ids=["one input", "the same tensor as two inputs"])
def test_an_input_read_transposed_is_not_written_in_place(written_in_place, twice):
    # (the transpose, a view of x, overlaps it)
    with FusionDefinition() as fd:
        x = _dense(fd, 2)
        other = _dense(fd, 2) if twice else x
        fd.add_output(fd.ops.add(x, fd.ops.permute(other, [1, 0])), alias_input=x)
    for _ in range(2):
        x = make((64, 64))
        expected = x + x.t()
        fd.execute([x, x] if twice else [x])
        torch.testing.assert_close(x, expected)
    assert True not in written_in_place


def test_another_input_read_by_a_later_segment_keeps_the_old_values(written_in_place):
    with FusionDefinition() as fd:
        a = _dense(fd, 2)
        b = _dense(fd, 2)
        y = fd.ops.exp(a)
        fd.add_output(y, alias_input=a)
        fd.add_output(fd.ops.matmul(b, y))  # (an ATen segment reading b after y is written)
    for same in (True, False):
        x = make((16, 16))
        b = x if same else x.clone()
        expected = x @ x.exp()
        (total,) = fd.execute([x, b])
        torch.testing.assert_close(total, expected)
    assert written_in_place == [False, True]


def test_a_misaligned_or_strided_input_gets_a_copy(written_in_place):
    fd = _sgd(1, contiguous=False)
    for p in (make((65,))[1:], make((128,))[::2]):
        g = make((64,))
        expected = p - g * 0.1
        fd.execute([p, g])
        torch.testing.assert_close(p, expected)
    assert True not in written_in_place


def test_an_input_read_by_a_later_kernel_is_not_written_early(written_in_place):
    with FusionDefinition() as fd:
        x = _dense(fd, 2)
        y = fd.ops.exp(x)
        fd.add_output(y, alias_input=x)
        fd.add_output(fd.ops.sum(fd.ops.mul(x, y), [1]))  # (reads x after y is made)
    x = make((8, 16))
    y = x.exp()
    expected = (x * y).sum(1)
    (total,) = fd.execute([x])
    torch.testing.assert_close(x, y)
    torch.testing.assert_close(total, expected)


def test_a_write_before_a_saved_read_is_caught_by_autograd():
    fd = _sgd()
    w = make((4, 4)).requires_grad_()
    loss = (w * w).sum()  # (saves w)
    with torch.no_grad():
        fd.execute([w.detach(), make((4, 4))])
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_a_cache_that_writes_in_place_is_refused_by_a_definition_without_the_alias():
    from fuser import FusionDefinitionError

    with_alias = _sgd()
    with FusionDefinition() as without:
        p = without.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        g = without.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        new = without.ops.sub(p, without.ops.mul(g, 0.1))
        without.add_output(new)
        without.add_output(without.ops.mul(new, 2.0))
    with_alias.execute([make((4, 4)), make((4, 4))])
    with pytest.raises(FusionDefinitionError, match="writes outputs into inputs"):
        without.fec = with_alias.fec


def test_an_aliased_output_not_computed_from_its_input_is_copied(written_in_place):
    # (stored once computed, it would come before the load of the input for the other output)
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, 6], contiguity=[True, True], dtype=DataType.Float)
        a = fd.define_tensor(shape=[-1, 6], contiguity=[True, True], dtype=DataType.Float)
        copied = fd.ops.set(a)
        product = fd.ops.mul(fd.ops.sin(x), a)
        fd.add_output(copied)
        fd.add_output(product)
        fd.add_output(copied, alias_input=x)
    for _ in range(3):
        xs, y = make((4, 6)), make((4, 6))
        expected = xs.sin() * y
        _, got = fd.execute([xs, y])
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(xs, y)
    assert True not in written_in_place


@pytest.mark.parametrize("case", ["swap", "handed_on_first", "handed_on_last", "view_handed_on"])
@DEVICES
def test_an_input_handed_to_another_alias_gives_its_old_value(case, device, written_in_place):
    """Every output is computed from the inputs as they came: an input handed to another
    input's alias (itself or a view of it) gives its old value, where the input is updated in
    the same call too (its kernel then does not write it in place)."""
    with FusionDefinition() as fd:
        a, b = _dense(fd), _dense(fd, 1 if case != "view_handed_on" else 2)
        if case == "swap":
            fd.add_output(b, alias_input=a)
            fd.add_output(a, alias_input=b)
        elif case == "view_handed_on":
            fd.add_output(fd.ops.reshape(b, [64]), alias_input=a)
            fd.add_output(fd.ops.mul(b, 3.0), alias_input=b)
        else:
            pairs = [(b, a), (fd.ops.mul(b, 3.0), b)]
            for value, target in pairs if case == "handed_on_first" else pairs[::-1]:
                fd.add_output(value, alias_input=target)
    for _ in range(3):
        x = make((64,)).to(device)
        y = make((8, 8) if case == "view_handed_on" else (64,)).to(device)
        old_x, old_y = x.clone(), y.clone()
        fd.execute([x, y])
        torch.testing.assert_close(x, old_y.reshape(64))
        torch.testing.assert_close(y, old_x if case == "swap" else 3 * old_y)
    assert True not in written_in_place


@DEVICES
def test_a_strided_input_handed_on_gives_its_old_value_where_its_span_meets_a_written_one(device):
    """x, a column slice of a buffer, spans rows that y, a later row slice of it, covers:
    x handed to z is copied as it came, before y's new value is written (x's `nbytes` alone
    ends before y begins)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[False, True], dtype=DataType.Float)
        y, z, v = (fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float) for _ in range(3))
        fd.add_output(fd.ops.mul(v, 2.0), alias_input=y)
        fd.add_output(x, alias_input=z)
    for _ in range(3):
        buffer = make((8, 8)).to(device)
        x, y = buffer[:, :4], buffer[6:8, :]
        z, v = make((8, 4)).to(device), make((2, 8)).to(device)
        old_x = x.clone()
        fd.execute([x, y, z, v])
        torch.testing.assert_close(z, old_x)
        torch.testing.assert_close(y, 2 * v)


@DEVICES
def test_one_value_aliased_to_two_inputs_is_written_into_both(device):
    """The second alias of one output gets a copy of its own (the first kept one destination
    per output, and the other input stayed as it came)."""
    with FusionDefinition() as fd:
        p, q = _dense(fd), _dense(fd)
        new = fd.ops.add(p, q)
        fd.add_output(new, alias_input=p)
        fd.add_output(new, alias_input=q)
        fd.add_output(new)
    assert "fd.ops.set(" in repr(fd)
    for layout in (lambda: make((64,)), lambda: make((65,))[1:]):  # (written in place, copied)
        for _ in range(3):
            x, y = layout().to(device), layout().to(device)
            expected = x + y
            (returned,) = fd.execute([x, y])
            torch.testing.assert_close(x, expected)
            torch.testing.assert_close(y, expected)
            assert returned is x  # (an output that is an aliased one returns its input)


def test_an_expanded_alias_is_refused_before_another_alias_is_written():
    with FusionDefinition() as fd:
        p = _dense(fd, 2)
        q = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        fd.add_output(fd.ops.mul(p, 2.0), alias_input=p)
        fd.add_output(fd.ops.mul(q, 2.0), alias_input=q)
    for _ in range(3):
        x = make((4, 8))
        before, version = x.clone(), x._version
        with pytest.raises(FusionInputError, match=r"input 1 .* is written in place .* but is expanded"):
            fd.execute([x, make((1, 8)).expand(4, 8)])
        assert torch.equal(x, before) and x._version == version
        fd.execute([x, make((4, 8))])  # (and a dense one runs)
        torch.testing.assert_close(x, 2 * before)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_an_alias_of_a_cpu_scalar_beside_gpu_tensors_is_written_into_the_callers_tensor():
    """The scalar is copied to the GPU for the kernels; its new value goes back into the
    CPU tensor the caller passed (it went into that copy, and was lost)."""
    with FusionDefinition() as fd:
        x = _dense(fd)
        count = fd.define_tensor(shape=[], dtype=DataType.Float, is_cpu=True)
        step = fd.define_tensor(shape=[], dtype=DataType.Float, is_cpu=True)
        fd.add_output(fd.ops.mul(x, count))
        fd.add_output(fd.ops.add(count, 1.0), alias_input=count)
        fd.add_output(fd.ops.add(step, 2.0), alias_input=step)
    x, count, step = make((8,)).cuda(), torch.tensor(2.0), torch.tensor(5.0)
    for k in range(3):
        (out,) = fd.execute([x, count, step])
        torch.testing.assert_close(out, x * (2.0 + k))
        assert count.device.type == "cpu" and count.item() == 3.0 + k and step.item() == 5.0 + 2 * (k + 1)


def test_an_inference_tensor_alias_is_refused_outside_inference_mode_as_eager_refuses():
    fd = _sgd(rank=1)
    for layout in (lambda: make((64,)), lambda: make((65,))[1:]):  # (written in place, copied)
        with torch.inference_mode():
            p, g = layout(), make((64,))
        before = p.clone()
        with pytest.raises(FusionInputError, match="is an inference tensor"):
            fd.execute([p, g])
        assert torch.equal(p, before)
        with torch.inference_mode():
            fd.execute([p, g])
        torch.testing.assert_close(p, before - g * 0.1)


def test_an_empty_expanded_alias_runs_as_eager_runs_it():
    fd = _sgd(rank=2, contiguous=False)
    p, g = torch.empty(1, 0).expand(3, 0), torch.empty(3, 0)
    (doubled,) = fd.execute([p, g])
    assert doubled.shape == (3, 0)
