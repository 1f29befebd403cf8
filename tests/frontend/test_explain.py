"""`fuser.explain`: the captured graphs, the fusions in nvFuser notation, the segments and why
they were cut, the generated Triton, and the ATen ops run between fusions."""
import pytest
import torch
import torch._dynamo

import fuser


def softmax_cumsum(x, w):
    y = torch.softmax(x * w, dim=-1)
    return torch.logcumsumexp(y, dim=-1) * 2.0  # (no lowering: runs between fusions)


def test_explain_text_shows_every_layer():
    x, w = torch.randn(4, 8), torch.randn(8)
    report = fuser.explain(softmax_cumsum, x, w)
    text = str(report)
    assert "captured by Dynamo" in text
    assert "inference: ATen graph" in text and "torch.ops.aten.amax" in text  # softmax, decomposed
    assert "T0_g_float[iS0{i0}, iS1{8}]" in text  # a fusion input, in nvFuser notation (rows symbolic)
    assert "kernel segment" in text and "inner reduction" in text
    assert "import triton" in text and "tl.store" in text
    assert "aten.logcumsumexp.default: no lowering" in text
    assert report.info.fallback_ops == 1
    assert len(report.fusions) == 2


def test_explain_runs_the_backward_without_touching_grads():
    x = torch.randn(4, 8, requires_grad=True)
    w = torch.randn(8, requires_grad=True)
    report = fuser.explain(lambda a, b: torch.tanh(a * b).sum(-1), x, w)
    text = str(report)
    assert "forward: ATen graph" in text and "backward: ATen graph" in text
    assert x.grad is None and w.grad is None
    assert {p.kind for g in report.graphs for p in g.programs} == {"forward", "backward"}


def test_explain_html_for_notebooks():
    report = fuser.explain(softmax_cumsum, torch.randn(3, 5), torch.randn(5))
    html = report._repr_html_()
    assert html.startswith("<div>") and html.endswith("</div>")
    assert "<details" in html and "&lt;" not in html.split("<pre")[0]
    assert "tl.store" in html and "logcumsumexp" in html


def test_explain_a_jitted_module_reuses_its_program():
    model = fuser.jit(torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.GELU()))
    x = torch.randn(3, 6)
    model(x)
    report = fuser.explain(model, x)
    assert report.info.graphs == 1
    assert "aten.addmm" in str(report) or "aten.mm" in str(report)


def test_the_report_splits_the_calls_time_between_fuser_and_the_rest():
    from fuser import timing

    def f(x):
        return torch.softmax(x * 1.5, -1)

    was_on = timing.enabled()
    report = fuser.explain(f, torch.randn(3, 9))
    assert timing.enabled() == was_on  # switched on for the explained call only
    times = report.times
    assert times["total"] > 0 and times["codegen"] > 0 and times["planning"] > 0
    assert sum(v for k, v in times.items() if k not in ("total", "other")) < times["total"]
    line = str(report).splitlines()[1]
    assert line.startswith("this call: ") and "codegen" in line and "Dynamo, AOTAutograd" in line
    assert "this call: " in report._repr_html_()


def test_explain_of_a_jitted_function_that_ran_reports_what_its_call_runs():
    """A jitted function that has run before keeps a remembered entry (its calls skip Dynamo's
    frame); explaining it still reports the graph its call runs, not an empty report."""
    jitted = fuser.jit(lambda a, b: torch.tanh(a * b).sum(-1))
    for rows in (3, 5):
        jitted(torch.randn(rows, 8), torch.randn(8))
    report = fuser.explain(jitted, torch.randn(4, 8), torch.randn(8))
    assert report.info.graphs == 1 and len(report.fusions) == 1, report.info
    assert "tl.store" in str(report)
    assert jitted.cache_info().graphs == 1  # (no new trace: the explained call reused the graph)


def test_a_call_dynamo_runs_eagerly_is_reported_so():
    # past the recompile limit (a new float each call) no graph runs: the report said only
    # "0 captured graph(s)" and "none (compiled before)"
    def f(x, a):
        return (x * a).exp()
    jitted, x = fuser.jit(f), torch.randn(3, 4)
    with torch._dynamo.config.patch(recompile_limit=1):
        jitted(x, 0.5)
        report = fuser.explain(jitted, x, 1.5)
    assert not report.graphs
    text = str(report)
    assert "no graph of this call ran through fuser: Dynamo ran it eagerly" in text
    assert "compiled before" not in text
    assert "ran it eagerly" in report._repr_html_()


def test_a_function_fuser_failed_on_is_reported_as_fusers_failure():
    # with fallback="eager", a function fuser failed to compile runs eagerly: the report's note
    # blamed Dynamo ("Dynamo ran it eagerly ... TORCH_LOGS says which"), which logged nothing
    @torch.library.custom_op("fuser_tests::explain_twice_no_fake", mutates_args=())
    def twice(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    def f(x):
        return twice(x).relu() + 1
    jitted, x = fuser.jit(f, fallback="eager"), torch.randn(4, 5)
    with pytest.warns(UserWarning, match="running it eagerly"):
        jitted(x)
    report = fuser.explain(jitted, x)
    assert not report.graphs
    text = str(report)
    assert "fuser could not compile the function" in text and "Dynamo ran it eagerly" not in text


def test_the_explained_function_may_take_a_keyword_named_fn():
    def f(x, fn=None):
        return (fn or torch.sin)(x) * 2
    x = torch.randn(3, 4)
    report = fuser.explain(f, x, fn=torch.cos)
    assert len(report.graphs) == 1
    torch.testing.assert_close(fuser.jit(f)(x, fn=torch.cos), torch.cos(x) * 2)
