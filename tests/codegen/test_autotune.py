"""The autotuner's bookkeeping (codegen/autotune.py): the fastest candidate is timed once per
key, remembered in memory and on disk, and a corrupt file is ignored."""
import json

import pytest

import torch

from fuser.codegen import autotune


def test_fastest_is_timed_once_and_remembered_on_disk(tmp_path, monkeypatch):
    path = tmp_path / "autotune.json"
    monkeypatch.setattr(autotune, "CHOICES", autotune.Choices(path))
    timed = []

    def timer(candidate, device):
        timed.append(candidate)
        return candidate()

    candidates = [lambda: 3.0, lambda: 1.0, lambda: 2.0]
    assert autotune.fastest("k", candidates, torch.device("cpu"), timer) == 1
    assert len(timed) == 3
    assert autotune.fastest("k", candidates, torch.device("cpu"), timer) == 1 and len(timed) == 3
    assert json.loads(path.read_text()) == {"k": 1}
    # a new process (a fresh Choices on the same file) does not time again
    monkeypatch.setattr(autotune, "CHOICES", autotune.Choices(path))
    assert autotune.fastest("k", candidates, torch.device("cpu"), timer) == 1 and len(timed) == 3


def test_an_unreadable_file_means_timing_again(tmp_path, monkeypatch):
    path = tmp_path / "autotune.json"
    path.write_text("{not json")
    monkeypatch.setattr(autotune, "CHOICES", autotune.Choices(path))
    assert autotune.fastest("k", [lambda: 2.0, lambda: 1.0], torch.device("cpu"), lambda c, d: c()) == 1
    assert json.loads(path.read_text()) == {"k": 1}


def test_bucket_key_rounds_sizes_to_their_power_of_two():
    cpu = torch.device("cpu")
    assert autotune.bucket_key("d", 3000, 30000, cpu) == autotune.bucket_key("d", 4096, 32768, cpu)
    assert autotune.bucket_key("d", 3000, 30000, cpu) != autotune.bucket_key("d", 3000, 40000, cpu)


@pytest.mark.parametrize("winner", [0, 1])
def test_a_long_row_reduction_runs_the_form_that_timed_fastest(winner, tmp_path, monkeypatch):
    """With tuning allowed on the interpreter and a timer that prefers form `winner` (0: one
    program a row block, 1: the row loop), softmax runs in that form and matches eager; the
    choice is on disk for the next process."""
    from benchmarks import fuser_defs
    from fuser.codegen import launch
    from fuser.schedulers import heuristics

    monkeypatch.setattr(heuristics, "AUTOTUNE_MIN_COLS", 64)
    monkeypatch.setattr(launch, "TUNED_TARGETS", ("interpreter",))
    monkeypatch.setattr(autotune, "CHOICES", autotune.Choices(tmp_path / "autotune.json"))
    order = iter([1.0 if k == winner else 2.0 for k in range(2)])
    monkeypatch.setattr(autotune, "cuda_time_ms", lambda launch_once, device: (launch_once(), next(order))[1])
    fd = fuser_defs.softmax_fwd.__wrapped__()
    x = torch.randn(24, 100, dtype=torch.bfloat16)
    (y,) = fd.execute([x])
    torch.testing.assert_close(y.float(), torch.softmax(x.float(), -1), rtol=2e-2, atol=2e-2)
    assert ("persistent over rows" in fd.last_triton_code()) == (winner == 1)
    assert list(json.loads((tmp_path / "autotune.json").read_text()).values()) == [winner]


def test_short_rows_and_fuser_autotune_0_are_not_tuned(monkeypatch):
    from fuser.schedulers import heuristics

    params = heuristics.choose(heuristics.Template.inner_reduction, 4096, 32768)
    assert heuristics.autotune_row_loop(params, 32768)
    assert not heuristics.autotune_row_loop(heuristics.choose(heuristics.Template.inner_reduction, 4096, 8192), 8192)
    monkeypatch.setenv("FUSER_AUTOTUNE", "0")
    assert not heuristics.autotune_row_loop(params, 32768)


def test_a_remembered_choice_of_the_plain_form_generates_no_row_loop(tmp_path, monkeypatch):
    from benchmarks import fuser_defs
    from fuser.codegen import launch
    from fuser.schedulers import heuristics

    monkeypatch.setattr(heuristics, "AUTOTUNE_MIN_COLS", 64)
    monkeypatch.setattr(launch, "TUNED_TARGETS", ("interpreter",))
    choices = autotune.Choices(tmp_path / "autotune.json")
    monkeypatch.setattr(autotune, "CHOICES", choices)
    monkeypatch.setattr(autotune, "cuda_time_ms", lambda launch_once, device: (launch_once(), 1.0)[1])
    x = torch.randn(24, 100, dtype=torch.bfloat16)
    fuser_defs.softmax_fwd.__wrapped__().execute([x])  # times the forms (equal times: the plain one)
    generated = []
    real = launch.generate_row_loop
    monkeypatch.setattr(launch, "generate_row_loop", lambda *a: generated.append(1) or real(*a))
    monkeypatch.setattr(autotune, "CHOICES", autotune.Choices(tmp_path / "autotune.json"))  # a new process
    fd = fuser_defs.softmax_fwd.__wrapped__()
    (y,) = fd.execute([x])
    assert not generated and "persistent over rows" not in fd.last_triton_code()
    torch.testing.assert_close(y.float(), torch.softmax(x.float(), -1), rtol=2e-2, atol=2e-2)


def test_rows_of_8192_or_more_also_time_fewer_warps(monkeypatch):
    # the best warp count of the persistent kernel depends on the kernel (layernorm forward at
    # 8192 columns wants 4 warps, softmax 16): halves of the default down to 4 warps and up to
    # 64 elements a thread are timed; shorter rows, and FUSER_AUTOTUNE=0, are not tuned
    from fuser.schedulers import heuristics

    choose = heuristics.choose
    params = choose(heuristics.Template.inner_reduction, 16384, 8192)
    assert params.num_warps == 16 and heuristics.tuned_warps(params, 8192) == [8, 4]
    assert heuristics.tuned_warps(choose(heuristics.Template.inner_reduction, 4096, 32768), 32768) == [16]
    assert heuristics.tuned_warps(choose(heuristics.Template.inner_reduction, 16384, 4096), 4096) == []
    monkeypatch.setenv("FUSER_AUTOTUNE", "0")
    assert heuristics.tuned_warps(params, 8192) == []


@pytest.mark.parametrize("winner", [0, 1])
def test_a_row_reduction_runs_the_warp_count_that_timed_fastest(winner, tmp_path, monkeypatch):
    """With the warp forms tuned on the interpreter (rows of 100 columns, 32 rows a block on 8
    warps, so 4 warps are tried too) and a timer that prefers form `winner`, layernorm runs
    with that launch and matches eager; the choice is stored under a key naming the forms."""
    from benchmarks import fuser_defs
    from fuser.codegen import launch
    from fuser.schedulers import heuristics

    monkeypatch.setattr(heuristics, "AUTOTUNE_WARPS_MIN_COLS", 64)
    monkeypatch.setattr(launch, "TUNED_TARGETS", ("interpreter",))
    monkeypatch.setattr(autotune, "CHOICES", autotune.Choices(tmp_path / "autotune.json"))
    launched = []
    real_call = launch.Launch.__call__
    monkeypatch.setattr(launch.Launch, "__call__",
                        lambda self, *a, **k: launched.append(self.steps[0][0].kwargs["num_warps"]) or real_call(self, *a, **k))
    order = iter([1.0 if k == winner else 2.0 for k in range(2)])
    monkeypatch.setattr(autotune, "cuda_time_ms", lambda launch_once, device: (launch_once(), next(order))[1])
    fd = fuser_defs.layernorm_fwd.__wrapped__()
    x, w, b = torch.randn(24, 100, dtype=torch.bfloat16), torch.randn(100, dtype=torch.bfloat16), torch.randn(100, dtype=torch.bfloat16)
    (y,) = fd.execute([x, w, b])
    torch.testing.assert_close(y.float(), torch.nn.functional.layer_norm(x.float(), (100,), w.float(), b.float()),
                               rtol=2e-2, atol=5e-2)
    assert launched[:2] == [8, 4]  # both forms timed, the default first
    assert launched[-1] == (8, 4)[winner]  # the call's own launch: the winner
    fd.execute([x, w, b])
    assert launched[-1] == (8, 4)[winner]
    (key, choice), = json.loads((tmp_path / "autotune.json").read_text()).items()
    assert choice == winner and "default,4 warps" in key


def test_timer_batches_short_launches(monkeypatch):
    """The CUDA timer divides a batch of back-to-back launches by its size, so a short kernel is
    timed over enough launches, each batch queued behind a GPU busy-wait; checked with fake
    events that report 0.1 ms a launch."""
    launched = []

    class FakeEvent:
        def __init__(self, enable_timing=True):
            self.at = None

        def record(self):
            self.at = len(launched)

        def synchronize(self):
            pass

        def elapsed_time(self, end):
            return 0.1 * (end.at - self.at)

    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    holds = []
    monkeypatch.setattr(torch.cuda, "_sleep", holds.append, raising=False)
    ms = autotune.cuda_time_ms(lambda: launched.append(1), torch.device("cpu"))
    assert holds == [autotune.HOLD_CYCLES] * (1 + autotune.REPEATS)  # the GPU held before each sample
    assert ms == pytest.approx(0.1)
    batch = int(autotune.SAMPLE_MS / 0.1)
    assert len(launched) == autotune.WARMUP + 1 + autotune.REPEATS * batch


def test_dump_autotune_prints_each_form(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FUSER_DUMP", "autotune")
    monkeypatch.setattr(autotune, "CHOICES", autotune.Choices(tmp_path / "autotune.json"))
    times = iter([2.0, 1.0])
    best = autotune.fastest("k", [lambda: None, lambda: None], torch.device("cpu"),
                            timer=lambda launch, device: next(times), labels=["default", "one pass"])
    assert best == 1
    out = capsys.readouterr().out
    assert "default 2000.0 us" in out and "one pass 1000.0 us (chosen)" in out


def test_raw_launch_only_for_triton_36_launchers_without_scratch(monkeypatch):
    """The direct launch calls Triton 3.6's C launch function itself where the launcher's Python
    call would only allocate scratch memory (none needed) and pass its flags."""
    import triton
    from triton.backends.nvidia.driver import CudaLauncher as TritonLauncher

    from fuser.codegen import steps

    class GenericLauncher(TritonLauncher):  # fuser's (codegen/launcher.py); Triton's own passes too
        fuser_generic = True

        def __init__(self, scratch):
            self.launch, self.launch_cooperative_grid, self.launch_pdl = print, False, True
            self.global_scratch_size, self.profile_scratch_size = scratch, 0

    CudaLauncher = GenericLauncher

    class Other:  # another launcher class: its own call
        launch, launch_cooperative_grid, launch_pdl, global_scratch_size, profile_scratch_size = print, 0, 0, 0, 0

    class Subclass(TritonLauncher):  # another library's launcher: its call may do more
        __init__ = GenericLauncher.__init__

    monkeypatch.setattr(triton, "__version__", "3.6.0")
    assert steps._raw_launch(CudaLauncher(0)) == (print, False, True)
    assert steps._raw_launch(CudaLauncher(64)) is None  # scratch memory: the launcher's own call
    assert steps._raw_launch(Other()) is None and steps._raw_launch(Subclass(0)) is None
    monkeypatch.setattr(triton, "__version__", "3.7.0")
    assert steps._raw_launch(CudaLauncher(0)) is None


def _timer_preferring(winner: int, forms: int):
    order = iter([1.0 if k == winner else 2.0 for k in range(forms)])
    return lambda launch_once, device: (launch_once(), next(order))[1]


@pytest.mark.parametrize("winner,cols", [(0, 256), (1, 256), (1, 250)])
def test_a_long_row_reduction_also_times_the_looped_form(winner, cols, device, tmp_path, monkeypatch):
    """Rows of AUTOTUNE_MIN_COLS or more time the looped kernel (LOOPED_TUNED_FORMS: chunks
    and warps) beside the persistent one, its trip count a constexpr (LOOP_EXTENT, the row
    length); the chosen form runs and matches eager, and chunks that divide the row carry no
    masks; a row that is no whole number of chunks loops over whole chunks, masked."""
    from benchmarks import fuser_defs
    from fuser.codegen import launch
    from fuser.schedulers import heuristics

    # 256 columns, one row a block (TILE_ELEMENTS), looped in chunks of 64: persistent, row
    # loop, one pass on 4 warps (RELOAD_MIN_COLS), looped
    monkeypatch.setattr(heuristics, "TILE_ELEMENTS", 256)
    monkeypatch.setattr(heuristics, "AUTOTUNE_MIN_COLS", 64)
    monkeypatch.setattr(heuristics, "RELOAD_MIN_COLS", 64)
    monkeypatch.setattr(heuristics, "LOOPED_TUNED_FORMS", ((64, 4),))
    monkeypatch.setattr(launch, "TUNED_TARGETS", ("interpreter", "cuda"))
    monkeypatch.setenv("FUSER_BACKGROUND_COMPILE", "0")  # (on the GPU: timed at the first call)
    monkeypatch.setattr(autotune, "CHOICES", autotune.Choices(tmp_path / "autotune.json"))
    params = heuristics.choose(heuristics.Template.inner_reduction, 6, cols)
    assert [(p.block1, p.num_warps) for p in heuristics.looped_forms(params, 6, cols)] == [(64, 4)]
    forms = 2 + len(heuristics.reload_forms(params, 6, cols)) + 1
    looped = forms - 1
    pick = (0, looped)[winner]
    monkeypatch.setattr(autotune, "cuda_time_ms", _timer_preferring(pick, forms))
    launched = []
    real_call = launch.Launch.__call__
    monkeypatch.setattr(launch.Launch, "__call__",
                        lambda self, *a, **k: launched.append(self.steps[0][0].kwargs) or real_call(self, *a, **k))
    fd = fuser_defs.rmsnorm_fwd.__wrapped__()
    x = torch.randn(6, cols, dtype=torch.bfloat16, device=device)
    w = torch.randn(cols, dtype=torch.bfloat16, device=device)
    (y,) = fd.execute([x, w])
    ref = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * w.float())
    torch.testing.assert_close(y.float(), ref, rtol=2e-2, atol=5e-2)
    code = fd.last_triton_code()
    assert ("for c_start in range" in code) == (winner == 1)
    assert launched[-1]["EVEN1"] == (cols == 256) and ("if EVEN1:" in code)  # 64-column chunks of 256: no masks
    if winner == 1:  # the trip count of whole chunks: 4 for 250 columns as for 256
        assert "range(0, LOOP_EXTENT, BLOCK1)" in code and launched[-1]["LOOP_EXTENT"] == 256
    assert list(json.loads((tmp_path / "autotune.json").read_text()).values()) == [pick]


@pytest.mark.parametrize("extra", [0, 64])
@pytest.mark.parametrize("winner", [0, 1, 2])
def test_a_column_sum_with_a_program_a_processor_also_times_unsplit_forms(winner, extra, device, tmp_path, monkeypatch):
    """A column reduction with at least a column block a multiprocessor (two, made up for the
    interpreter) times its split form against unsplit ones in the tiles of OUTER_TUNED_TILES
    (one of 128 rows, more than the 96 here); the chosen form runs and matches eager. With 64
    columns past whole 128-column blocks, the 64-column tile has no masks and no program past
    the columns (the interpreter's bounds checks would fail a load there)."""
    from benchmarks import fuser_defs
    from fuser.codegen import launch
    from fuser.schedulers import heuristics

    monkeypatch.setattr(launch, "INTERPRETER_PROCESSORS", 2)
    monkeypatch.setattr(launch, "TUNED_TARGETS", ("interpreter", "cuda"))
    monkeypatch.setenv("FUSER_BACKGROUND_COMPILE", "0")  # (on the GPU: timed at the first call)
    monkeypatch.setattr(autotune, "CHOICES", autotune.Choices(tmp_path / "autotune.json"))
    processors = launch._processors(device)
    cols = 128 * (processors + 2) + extra  # a 128-column block a processor and two more
    params = heuristics.choose(heuristics.Template.outer_reduction, 96, cols)
    assert heuristics.split_count(params, 96, processors) > 1  # the default splits
    forms = heuristics.outer_forms(params, processors, cols)
    tiles = [(p.block0, p.block1, p.num_warps) for p in forms]
    assert tiles == list(heuristics.OUTER_TUNED_TILES)
    assert [p.grid for p in forms] == [-(-cols // b1) for _, b1, _ in tiles]
    assert heuristics.outer_forms(params, params.grid + 1, cols) == []  # fewer column blocks than processors
    monkeypatch.setattr(autotune, "cuda_time_ms", _timer_preferring(winner, 3))
    launched = []
    real_call = launch.Launch.__call__
    monkeypatch.setattr(launch.Launch, "__call__",
                        lambda self, *a, **k: launched.append(self) or real_call(self, *a, **k))
    fd = fuser_defs.colsum_fwd.__wrapped__()
    x = torch.randn(96, cols, dtype=torch.bfloat16, device=device)
    (y,) = fd.execute([x])
    torch.testing.assert_close(y, x.float().sum(0), rtol=1e-4, atol=1e-3)
    chosen = launched[-1]
    assert (chosen.semaphores is not None) == (winner == 0)  # the split kernel counts its programs
    kwargs = chosen.steps[0][0].kwargs
    want = [(params.block0, params.block1, params.num_warps)] + tiles
    assert (kwargs["BLOCK0"], kwargs["BLOCK1"], kwargs["num_warps"]) == want[winner]
    x2 = torch.randn(96, cols, dtype=torch.bfloat16, device=device)
    (y2,) = fd.execute([x2])
    assert launched[-1] is chosen
    torch.testing.assert_close(y2, x2.float().sum(0), rtol=1e-4, atol=1e-3)


def test_two_processes_storing_winners_keep_each_others(tmp_path):
    # each wrote the file from its own memory, read once: the other's winners were dropped
    path = tmp_path / "autotune.json"
    first, second = autotune.Choices(path), autotune.Choices(path)
    assert first.get("a") is None and second.get("b") is None  # (both read the empty file)
    second.put("b", 2)
    first.put("a", 1)
    assert json.loads(path.read_text()) == {"a": 1, "b": 2}
    assert first.get("b") == 2  # (what it merged it remembers)
    path.write_text(json.dumps({"c": True, "d": 3}))  # (a bool is no form)
    assert autotune.Choices(path).get("c") is None and autotune.Choices(path).get("d") == 3
