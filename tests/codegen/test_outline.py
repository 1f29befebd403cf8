"""Generated lines outlined into a jit function (codegen/outline.py): parameters, returns and the
call, and the shared-row kernel's passes compiled as before."""
import re

import pytest

from fuser.codegen.outline import free_reads, names_read, outline


def test_parameters_are_the_names_read_before_assigned_and_returns_those_read_after():
    lines = ["c = chunk * BLOCK1 + cols",
             "if EVEN1:",
             "    m = tl.full([1, BLOCK1], 1, tl.int1, LAYOUT)",
             "else:",
             "    m = c < C",
             "t = T0_smem.index(chunk).load(LAYOUT)",
             "acc = acc + tl.where(m, _helper(t), 0.0)",
             "s += t"]
    f = outline("k_pass0", lines, read_after={"m", "unrelated"}, module_names={"tl"}, decorator="@gluon.jit")
    # read first, in order of first use: the chunk, the constexprs, the row's values and the
    # accumulators; `_helper` is called (a module function), `tl` the module's
    assert f.params == ("chunk", "BLOCK1", "cols", "EVEN1", "LAYOUT", "C", "T0_smem", "acc", "s")
    # the accumulators (read before assigned) and the mask the code after reads; not `c`, `t`
    assert f.returns == ("m", "acc", "s")
    assert f.call({"chunk": "tl.to_tensor(3)", "acc": "acc_3"}, {"acc": "acc_3"}) == (
        "m, acc_3, s = k_pass0(tl.to_tensor(3), BLOCK1, cols, EVEN1, LAYOUT, C, T0_smem, acc_3, s)")
    assert f.source.startswith("@gluon.jit\ndef k_pass0(chunk, BLOCK1, cols, EVEN1, LAYOUT, C, T0_smem, acc, s):\n")
    assert f.source.endswith("\n    return m, acc, s")
    compile(f.source, "outlined", "exec")


def test_a_name_assigned_on_one_branch_only_is_read_from_the_caller():
    lines = ["if EVEN1:", "    m = a", "x = m + 1"]
    assert free_reads(lines) == {"EVEN1", "a", "m"}
    assert free_reads(["if EVEN1:", "    m = a", "else:", "    m = b", "x = m + 1"]) == {"EVEN1", "a", "b"}


def test_a_function_that_returns_nothing_is_called_alone():
    f = outline("k_pass1", ["tl.store(T1_ptr + c, x)"], read_after=set(), module_names={"tl"}, decorator="@gluon.jit")
    assert f.returns == () and f.call() == "k_pass1(T1_ptr, c, x)"


def test_kernels_alike_but_for_their_tensors_names_outline_alike():
    """Parameters in order of first use, not of name: canonical.py renumbers tensor names in
    order of first use, so two layers' kernels share one compile."""
    from fuser.codegen.canonical import canonical_form

    def source(a: int, b: int) -> str:
        f = outline("fuser_k_pass0", [f"x = T{a}_smem.index(chunk).load(LAYOUT) + T{b}_smem.index(chunk).load(LAYOUT)", f"acc{a} = acc{a} + x"],
                    read_after=set(), module_names=set(), decorator="@gluon.jit")
        return f.source + "\n\n\ndef fuser_k(" + ", ".join(f.params) + "):\n    " + f.call() + "\n"
    digest = lambda text: str(hash(text))  # noqa: E731
    assert canonical_form("fuser_k", source(9, 10), [], digest) == canonical_form("fuser_k", source(109, 110), [], digest)


def test_names_read_parses_a_block_with_compound_statements():
    assert names_read(["if EVEN0:", "    r = row", "else:", "    r = row < R"]) == {"EVEN0", "row", "R"}


@pytest.mark.parametrize("which", ["layernorm recomputing", "layernorm given", "rmsnorm given rstd"])
def test_the_shared_row_kernels_outline_their_unrolled_passes(which):
    """The first and last passes of a shared-row kernel are functions of the chunk, called once a
    chunk; inlined (as Triton does), the kernel is the one unrolled by hand."""
    from fuser.codegen.layout import Layout
    from fuser.codegen.shared_row import SharedRowConfig, generate_shared_row
    from tests.codegen.test_shared_row import along_the_row, inline_outlined, layernorm_kept_plan, rmsnorm_plan

    plan = {"layernorm recomputing": lambda: layernorm_kept_plan(False),
            "layernorm given": lambda: layernorm_kept_plan(True),
            "rmsnorm given rstd": lambda: rmsnorm_plan(True)}[which]()
    cfg = SharedRowConfig(4, 16, 8, along_the_row(plan))
    ks = generate_shared_row(plan, Layout(((0,),), ((1,),)), "fuser_probe", cfg)
    defs = re.findall(r"def (fuser_probe_pass\d+)\(", ks.source)
    assert len(defs) == 2  # the first pass and the last
    for name in defs:
        assert len(re.findall(rf"\b{name}\(", ks.source)) == 1 + 8  # defined, then called a chunk
    inlined = inline_outlined(ks.source)
    assert "_pass" not in inlined and inlined.count("c_start = 7 * BLOCK1") == 2
    compile(ks.source, "kernel", "exec")
