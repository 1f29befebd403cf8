"""The shared-row kernel with each row split over a pair of programs (codegen/shared_row_pair.py),
on CPU: the gate that chooses it, its copy schedule and exchange as written, and its source
compiled for sm_90. Its results against float64 run on the GPU (tests/codegen/test_shared_row.py)."""
import re

import pytest
import torch

from fuser.codegen.layout import Layout
from fuser.codegen.shared_row import SharedRowConfig, generate_shared_row, gluon_names
from fuser.schedulers.heuristics import SHARED_ROW_PAIR_VECTOR_BYTES, SHARED_ROW_WARPS

from benchmarks.sweep_shared_row import NO_CUOBJDUMP, compile_for_sm90
from tests.codegen.test_inner_outer import layernorm_bwd_fd
from tests.codegen.test_shared_row import along_the_row, inputs, on_a_hopper, rmsnorm_plan

LAYOUT = Layout(((0,),), ((1,),))
PER_THREAD = SHARED_ROW_PAIR_VECTOR_BYTES // 2  # bf16


def layernorm_plan(stats_given: bool):
    """The whole LayerNorm backward's inner-outer plan (dx, dw and db), planned on CPU."""
    fd = layernorm_bwd_fd(torch.bfloat16, stats_as_inputs=stats_given)
    x, w, dy = inputs(8, 256, "cpu")
    args = [x, w, dy]
    if stats_given:
        var, mean = torch.var_mean(x.float(), -1, correction=0, keepdim=True)
        args += [mean, torch.rsqrt(var + 1e-5)]
    fd.execute(args)
    (launcher,) = [k for k in fd.cache.last_runtime.launchers.values() if k.plan.parts is not None]
    return launcher.plan


def gate_config(monkeypatch, plan, cols):
    """shared_row_config for contiguous [4, cols] row inputs, [cols] column inputs and [4, 1]
    row values, in the order of the plan's kernel inputs, as on an H200."""
    from fuser.ir import TensorView

    gate = on_a_hopper(monkeypatch)
    tensors, strides = [], []
    for v in plan.parts.persistent.inputs:
        if isinstance(v, TensorView):
            axes = plan.parts.persistent.axes.spans(v)
            rows, along = 0 in axes, 1 in axes
            strides.append([cols if along else 1, 1] if rows else [0, 1])
            if rows and not along:
                strides[-1] = [1, 0]
            tensors.append(torch.empty(4 if rows else 1, cols if along else 1, dtype=v.dtype.to_torch()))
    return gate(plan, LAYOUT, cols, tensors, strides, [4, cols], torch.device("cuda"))


@pytest.mark.parametrize("cols, chunks", [(32768, 4), (24576, 3), (8192 * 3 + 4096, None)])
def test_the_gate_splits_rows_over_pairs_where_one_program_cannot_hold_dw_and_db(cols, chunks, monkeypatch):
    """The LayerNorm backward's dw and db at these lengths exceed one program's accumulators:
    each row is split over a pair, each half whole chunks of 16 bytes a thread (28672 columns
    leave a half of 3.5 chunks: no pair form)."""
    config = gate_config(monkeypatch, layernorm_plan(True), cols)
    if chunks is None:
        assert config is None
        return
    assert config.pair and (config.chunks, config.per_thread, config.warps) == (chunks, PER_THREAD, SHARED_ROW_WARPS)
    assert config.ahead == 0


def test_a_row_one_program_holds_is_not_split_and_pairs_can_be_turned_off(monkeypatch):
    from fuser.codegen import shared_row

    plain = gate_config(monkeypatch, rmsnorm_plan(False), 32768)
    assert plain is not None and not plain.pair  # (the RMSNorm backward: one column sum)
    monkeypatch.setattr(shared_row, "PAIRS", False)
    assert gate_config(monkeypatch, layernorm_plan(True), 32768) is None


def test_a_plan_of_three_passes_has_no_pair_form():
    """Recomputing mean and rstd puts a pass before the row sums': the pair form exchanges one
    set of sums, so the generator declines it (the launch keeps db apart or two kernels)."""
    plan = layernorm_plan(False)
    assert generate_shared_row(plan, LAYOUT, "k", SharedRowConfig(8, 16, 4, along_the_row(plan), pair=True)) is None


def pair_source(chunks: int) -> str:
    plan = layernorm_plan(True)
    ks = generate_shared_row(plan, LAYOUT, "k", SharedRowConfig(PER_THREAD, 16, chunks, along_the_row(plan), pair=True))
    assert ks is not None and ks.args[-1].kind == "semaphore" and ks.args[-1].dim == 2  # two sums a row half
    return ks.source


_COPY = re.compile(r"COPY\((T\w+)_smem\.index\((.+?)\), T\w+_ptr \+ (.+?) \* T\w+_stride0 \+ \(col0 \+ (\d+) \*")
_LOAD = re.compile(r"(T\w+)_smem\.index\((\w+) \* (\d+) \+ (\d+)\)\.load\(")
_WAIT = re.compile(r"async_copy\.wait_group\((\d+)\)")


@pytest.mark.parametrize("chunks", [1, 3, 4])
def test_every_load_finds_its_row_half_copied_and_waited_for(chunks):
    """The copies, waits and loads of one program over six rows, as the hardware may run them:
    a copy lands any time until a wait leaves its group out of the last N. Each first pass must
    read row k + 1 and each last pass row k, landed, from the buffer of three that holds it."""
    head, body = pair_source(chunks).split("    for row in range(pair, R, NP):\n")
    rows_of = {"pair": 0, "(pair + NP)": 1}
    slots, groups = {}, [[]]

    def run(lines, env, k):
        read = 0
        for line in lines:
            if (m := _COPY.search(line)) is not None:
                name, index, row, j = m.groups()
                row = k + 2 if row == "far" else rows_of[row]
                content = [row, int(j), False]
                slots[(name, eval(index, dict(env)))] = content
                groups[-1].append(content)
            elif "async_copy.commit_group()" in line:
                groups.append([])
            elif (m := _WAIT.search(line)) is not None:
                n = int(m.group(1))
                done = groups[:-1][:len(groups) - 1 - n] if n else groups[:-1]
                for content in (c for g in done for c in g):
                    content[2] = True
                del groups[:len(done)]
            for name, buffer, n, j in _LOAD.findall(line):
                if name not in copied_rows:
                    continue  # (the weight: copied once, checked by the base form's tests)
                assert int(n) == chunks
                want = k + 1 if buffer in ("nb", "0") and k >= 0 else k
                want = 0 if buffer == "0" else want
                got = slots.get((name, eval(f"{buffer} * {n} + {j}", dict(env))))
                assert got == [want, int(j), True], f"row {k}: {name}[{buffer} * {n} + {j}] holds {got}"
                read += 1
        return read
    copied_rows = {m.group(1) for m in _COPY.finditer(head) if "pair" in m.group(3)}
    assert len(copied_rows) == 2  # x and dy
    # a half is whole chunks: a row's copies are masked by the row alone (a column bound cost
    # each copy compares the compiler could not fold)
    row_copies = [line for line in (head + body).splitlines() if "_stride0 + (col0 + " in line and "COPY(" in line]
    assert row_copies and all(re.search(r"mask=\(cols >= 0\) & \(.+ < R\)\)$", line) for line in row_copies)
    assert run(head.splitlines(), {}, -1) == 2 * chunks  # the first row's first pass
    # the buffers of an iteration, as the source computes them from k
    picks = {m.group(1): m.group(2) for m in re.finditer(r"(this|nb|free) = \(?(.+?)\)?\.to\(tl\.int32\)", body)}
    assert len(picks) == 3
    for k in range(6):
        env = {name: eval(expr, {"k": k}) for name, expr in picks.items()}
        assert run(body.splitlines(), env, k) == 2 * 2 * chunks  # row k + 1's first pass, row k's last


def test_the_sums_are_published_before_the_partners_are_awaited_and_zeroed_once_all_read_them():
    """In each iteration: the partner's words of row k loaded first, the last row's words zeroed
    once the first pass has read its first chunk (past the barrier Gluon puts after that wait:
    every thread has read them), row k + 1's sums published after that pass, then the wait for
    row k's words, and only then row k's last pass reads the sums (a word's bits plus one;
    zero: not yet come). After the loop, a barrier and the program's last row's words zeroed:
    every word read is left zero for the next launch."""
    source = pair_source(4)
    head, body = source.split("for row in range(pair, R, NP):\n")
    body, tail = body.split("    async_copy.wait_group(0)\n")
    body = [line.strip() for line in body.splitlines()]
    def first(prefix: str) -> int:
        return next(k for k, line in enumerate(body) if line.startswith(prefix))
    waits = [k for k, line in enumerate(body) if line.startswith("async_copy.wait_group(")]
    zeroed = first("tl.store(SEM_ptr + theirs - 2 * NP * 2 + 1, 0)")
    order = [first("w0 = tl.load(SEM_ptr + theirs + 0, volatile=True)"), waits[0], zeroed, waits[1],
             first("tl.atomic_xchg(SEM_ptr + (rown * 2 + half) * 2 + 1"), first("while ((w0 == 0) | (w1 == 0))")]
    assert order == sorted(order), order
    assert any(".load(" in line and "nb * 4 + 0" in line for line in body[waits[0]:zeroed])  # (past the barrier)
    assert body[zeroed - 2] == "if row > pair:"  # (the words of row k - 1)
    uses = [k for k, line in enumerate(body) if "(w0 - 1).to(tl.float32, bitcast=True)" in line]
    assert len(uses) == 1 and uses[0] > first("while ((w0 == 0) | (w1 == 0))")
    assert "theirs = (row * 2 + 1 - half) * 2" in body
    tail = [line.strip() for line in tail.splitlines()]
    assert tail[:2] == ["BARRIER()", "last = pair + (R - 1 - pair) // NP * NP"]
    assert tail[2:4] == [f"tl.store(SEM_ptr + (last * 2 + 1 - half) * 2 + {i}, 0)" for i in range(2)]
    assert "BARRIER()" not in "\n".join(body)  # (none a row: the first pass's waits put theirs)
    # the first pass of the next row runs on names of its own, carried to the next iteration
    assert "p0 = p0_n" in body and any(re.fullmatch(r"T\d+_next = T\d+_next_n", line) for line in body)


def test_each_word_read_is_zero_again_after_the_launch():
    """The exchange of one pair over rows pair, pair + NP, ... (each program's events in the
    source's order, the two programs interleaved at random): every poll ends on the partner's
    sum of that row from this launch, and every word is zero after it, over three launches."""
    import random

    rows, npairs = 11, 3
    for seed in range(20):
        rng, words = random.Random(seed), {}
        for launch in range(1, 4):
            def program(pair, half):
                row_list = list(range(pair, rows, npairs))
                words[(pair, half)] = (launch, pair)  # the prologue's publish (value: launch, row)
                yield
                for k, row in enumerate(row_list):
                    nxt = row + npairs
                    if nxt < rows:
                        words[(nxt, half)] = (launch, nxt)
                    yield
                    if k > 0:
                        words.pop((row - npairs, 1 - half), None)
                    while words.get((row, 1 - half)) is None:
                        yield
                    assert words[(row, 1 - half)] == (launch, row), (seed, launch, row)
                    yield
                words.pop((row_list[-1], 1 - half), None)  # (after the barrier)
            live = [program(p, h) for p in range(npairs) for h in (0, 1)]
            while live:
                g = rng.choice(live)
                try:
                    next(g)
                except StopIteration:
                    live.remove(g)
            assert not words, (seed, launch, words)


@pytest.mark.skipif(not gluon_names(), reason="this Triton has no Gluon")
@pytest.mark.parametrize("cols", [32768, 24576])
def test_the_pair_kernel_compiles_within_shared_memory_and_registers(cols, tmp_path, monkeypatch):
    """Compiled for sm_90 as the launch specializes it: three rows' halves of x and dy and a
    half of w within a block's 227 KiB, dw's and db's accumulators in registers, with at most a
    16-byte stack (Triton 3.9; loading the next rows' statistics after the first pass, which
    took 326 -> 304 us on the H200 with Triton 3.6, spills that much at 32768 columns)."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    plan = layernorm_plan(True)
    cfg = SharedRowConfig(PER_THREAD, 16, cols // 2 // (PER_THREAD * 32 * 16), along_the_row(plan), pair=True)
    ks = generate_shared_row(plan, LAYOUT, f"fuser_pair_{cols}", cfg)
    shared, usage = compile_for_sm90(ks, cfg)
    assert shared <= 227 * 1024
    if usage == NO_CUOBJDUMP:
        pytest.skip(usage)
    assert int(re.search(r"STACK:(\d+)", usage).group(1)) <= 16, usage
