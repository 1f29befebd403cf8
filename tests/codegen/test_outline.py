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


def test_a_parameter_updated_on_one_branch_only_is_returned():
    f = outline("k_pass0", ["if EVEN1:", "    acc = acc + x"], read_after={"acc"}, module_names=(),
                decorator="@gluon.jit")
    assert f.params == ("EVEN1", "acc", "x") and f.returns == ("acc",)


def test_lines_it_cannot_follow_are_not_outlined():
    from fuser.codegen.outline import NotOutlined

    with pytest.raises(NotOutlined, match=r"\['m'\] assigned on some paths only"):
        outline("k_pass0", ["if EVEN1:", "    m = a"], read_after={"m"}, module_names=(), decorator="")
    with pytest.raises(NotOutlined, match="For"):
        outline("k_pass0", ["for i in range(4):", "    acc = acc + i"], read_after={"acc"}, module_names=(),
                decorator="")


def _kernels(which: str, outlined: bool, monkeypatch, **config):
    from fuser.codegen import shared_row
    from fuser.codegen.layout import Layout
    from tests.codegen.test_shared_row import along_the_row, layernorm_kept_plan, layernorm_plan, rmsnorm_plan

    plan = {"rmsnorm given rstd": lambda: rmsnorm_plan(True), "rmsnorm": lambda: rmsnorm_plan(False),
            "layernorm kept, recomputing": lambda: layernorm_kept_plan(False),
            "layernorm kept, given": lambda: layernorm_kept_plan(True),
            "layernorm, given": lambda: layernorm_plan(True)}[which]()
    monkeypatch.setattr(shared_row, "OUTLINE_PASSES", outlined)
    cfg = shared_row.SharedRowConfig(4, 16, config.pop("chunks", 5), along_the_row(plan), **config)
    return shared_row.generate_shared_row(plan, Layout(((0,),), ((1,),)), "fuser_probe", cfg).source


CONFIGS = [("rmsnorm given rstd", {}), ("rmsnorm", {"ahead": 2, "batch": 2}),
           ("layernorm kept, recomputing", {"ahead": 1, "batch": 2}), ("layernorm kept, given", {"ahead": 5}),
           ("layernorm, given", {"chunks": 3}), ("layernorm, given", {"chunks": 3, "shared_accumulators": (0,)}),
           ("rmsnorm", {"chunks": 1})]


@pytest.mark.parametrize("which, config", CONFIGS, ids=[f"{w} {c}" for w, c in CONFIGS])
@pytest.mark.parametrize("even", [True, False])
def test_the_outlined_kernel_computes_what_the_written_out_one_does(which, config, even, monkeypatch):
    """Run on symbolic values (tests/codegen/symbolic_gluon.py), the kernel with its passes
    outlined stores the same expressions in the same places as with them written out."""
    from tests.codegen import symbolic_gluon

    outlined, written_out = (_kernels(which, flag, monkeypatch, **dict(config)) for flag in (True, False))
    assert "fuser_probe_pass" in outlined and "fuser_probe_pass" not in written_out
    log = symbolic_gluon.run(outlined, "fuser_probe", even=even)
    assert len(log) >= 4 and log == symbolic_gluon.run(written_out, "fuser_probe", even=even)


@pytest.mark.parametrize("broken", ["an accumulator's return", "the column mask's return", "a chunk's accumulator"])
def test_the_symbolic_comparison_finds_a_lost_or_misplaced_value(broken, monkeypatch):
    """The comparison above can fail: an outlined kernel with one value lost or put in the
    wrong chunk logs differently."""
    from tests.codegen import symbolic_gluon

    outlined = _kernels("layernorm kept, recomputing", True, monkeypatch, ahead=1, batch=2)
    written_out = _kernels("layernorm kept, recomputing", False, monkeypatch, ahead=1, batch=2)
    if broken == "an accumulator's return":  # the first pass's last return dropped
        m = re.search(r"def fuser_probe_pass0\(.*?\n    return ([^\n]*)\n", outlined, re.S)
        kept, lost = m.group(1).rsplit(", ", 1)
        bad = (outlined[:m.start(1)] + kept + outlined[m.end(1):]).replace(
            f", {lost} = fuser_probe_pass0(", " = fuser_probe_pass0(")
    elif broken == "the column mask's return":  # the copies after the last pass's chunks read chunk 0's
        bad = re.sub(r"(def fuser_probe_pass2\(.*?\n    return )c, c_mask, ", r"\1", outlined, flags=re.S)
        bad = re.sub(r"c, c_mask, (\w+ = fuser_probe_pass2\()", r"\1", bad)
    else:  # chunk 1's accumulator assigned to chunk 2's
        bad = re.sub(r", acc(\d+)_1 = fuser_probe_pass2\(", r", acc\1_2 = fuser_probe_pass2(", outlined)
    assert bad != outlined
    assert symbolic_gluon.run(bad, "fuser_probe") != symbolic_gluon.run(written_out, "fuser_probe")
