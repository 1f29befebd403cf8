"""The IR in nvFuser's notation, on the definition of the seed issue (a [-1, 8] bf16 input split
by 3 onto streams and by 1 onto mesh_x) and on small fusions."""
import re

import torch
import torch.nn.functional as F

import fuser
from fuser import DataType, FusionDefinition, ParallelType
from tests.helpers import assert_eager


def seed_definition():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, 8], contiguity=True, dtype=DataType.BFloat16)
        w = fd.define_tensor(shape=[2, 8], contiguity=True, dtype=DataType.BFloat16)
        fd.add_output(fd.ops.linear(x, w))
        mesh = fuser.multidevice.DeviceMesh(torch.arange(1))
        for tv in (x, w):
            tv.set_device_mesh(mesh)
        x.outer_split(0, 3)
        x.axis(0).parallelize(ParallelType.stream)
        x.outer_split(2, 1)
        x.axis(2).parallelize(ParallelType.mesh_x)
        w.outer_split(1, 1)
        w.axis(1).parallelize(ParallelType.mesh_x)
    return fd


def _input_line(text, name):
    lines = text.splitlines()
    start = lines.index("Inputs:")
    return next(l.strip() for l in lines[start:] if l.strip().startswith(name))


def _ids(line):
    return re.findall(r"[irb][A-Za-z.]+\d+\{[^{}]*\}", line)


def test_seed_input_prints_in_nvfuser_notation():
    text = str(seed_definition().fusion)
    t0 = _input_line(text, "T0_")
    assert t0.startswith("T0_g___bfloat[")
    assert "( ceilDiv(i0, 3) )" in t0
    assert "istreamIdx" in t0 and "ideviceIdx.x" in t0
    # the four loop ids of the seed issue, with its numbering
    assert sorted(_ids(t0)) == sorted(["istreamIdx7{3}", "ideviceIdx.x9{1}", "iS8{( ceilDiv(i0, 3) )}", "iS10{8}"])
    assert t0.endswith("(DeviceMesh{0})")
    t1 = _input_line(text, "T1_")
    assert sorted(_ids(t1)) == sorted(["ideviceIdx.x11{1}", "iS2{2}", "iS12{8}"])


def test_seed_print_transforms():
    text = seed_definition().fusion.print_transforms()
    assert text.startswith("TransformPrinter")
    assert "Outer split: iS0{i0} by factor 3 -> istreamIdx7{3}, iS8{( ceilDiv(i0, 3) )}" in text
    assert "Outer split: iS1{8} by factor 1 -> ideviceIdx.x9{1}, iS10{8}" in text
    assert "Outer split: iS3{8} by factor 1 -> ideviceIdx.x11{1}, iS12{8}" in text
    assert " logical domain : (iS0{i0}, iS1{8})" in text
    assert " logical domain : (iS2{2}, iS3{8})" in text
    assert re.search(r" loop domain : \((?=.*istreamIdx7\{3\})(?=.*ideviceIdx\.x9\{1\}).*\)", text)


def test_seed_fusion_prints_linear_and_reduction_axis():
    text = str(seed_definition().fusion)
    assert "%kernel {" in text and "} // %kernel" in text
    assert "= linear(" in text
    out = [l for l in text.splitlines() if l.strip().startswith("T2_")][0]
    assert "rS6{8}" in out and "iS4{i0}" in out and "iS5{2}" in out


def test_seed_definition_executes_like_eager():
    fd = seed_definition()
    x, w = torch.randn(6, 8, dtype=torch.bfloat16), torch.randn(2, 8, dtype=torch.bfloat16)
    (out,) = fd.execute([x, w])
    assert_eager(out, F.linear(x, w))
    # a different number of rows (not a multiple of 3) binds i0 afresh
    x7 = torch.randn(7, 8, dtype=torch.bfloat16)
    assert_eager(fd.execute([x7, w])[0], F.linear(x7, w))


def test_printer_shows_iter_types_and_dtypes():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, 1, 5], contiguity=True, dtype=DataType.Half)
        y = fd.ops.sum(fd.ops.cast(x, DataType.Float), [2])
        fd.add_output(fd.ops.cast(fd.ops.gt(y, 0.0), DataType.Int))
    text = str(fd.fusion)
    assert "T0_g___half[iS0{i0}, bS1{1}, iS2{5}]" in text
    assert "_g_float[" in text and "_g_bool[" in text and "_g_int64_t[" in text
    assert re.search(r"rS\d+\{5\}", text)
    assert "reduction(" in text and "op = add" in text
    assert str(fd) == text


def test_printer_expanded_and_merged_extents():
    with FusionDefinition() as fd:
        a = fd.define_tensor([1, -1], contiguity=True)
        b = fd.define_tensor([-1, -1], contiguity=True)
        e = fd.ops.expand(a, b.shape())
        fd.add_output(fd.ops.add(e, b))
        b.merge(0)
    text = str(fd.fusion)
    # b's second extent was unified with a's by the add: both are i0
    assert re.search(r"bS\d+\{1 ex i1\}", text), text
    assert "Merge: iS2{i1} and iS3{i0} -> iS8{( i0 * i1 )}" in fd.fusion.print_transforms()
    assert "T1_g_float[iS8{( i0 * i1 )}]" in text


def test_inner_split_prints_as_split():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1], contiguity=True)
        fd.add_output(fd.ops.neg(x))
        x.split(0, 4)
    assert "  Split: iS0{i0} by factor 4 -> iS2{( ceilDiv(i0, 4) )}, iS3{4}" in fd.fusion.print_transforms()
    assert "Outer split" not in fd.fusion.print_transforms()


def test_structural_hash():
    def make(dtype=DataType.Float, split=False):
        with FusionDefinition() as fd:
            x = fd.define_tensor([-1, 5], contiguity=True, dtype=dtype)
            fd.add_output(fd.ops.exp(x))
            if split:
                x.split(0, 2)
        return fd.fusion.structural_hash()

    assert make() == make()
    assert make() != make(DataType.Half)
    assert make() != make(split=True)
    assert seed_definition().fusion.structural_hash() == seed_definition().fusion.structural_hash()


def test_binary_op_without_infix_symbol_prints_its_name():
    """maximum, pow, gcd, ... have no infix symbol: printed by name, as nvFuser prints them."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.Int)
        fd.add_output(fd.ops.maximum(fd.ops.gcd(x, 6), x))
    text = str(fd.fusion)
    assert re.search(r"= gcd\(T0_g_int64_t\[iS0\{i0\}\],\s+6\);", text), text
    assert re.search(r"= maximum\(T1_g_int64_t\[iS1\{i0\}\],\s+T0_g_int64_t\[iS0\{i0\}\]\);", text), text
