"""The shared-row kernel with each row split over a pair of programs (codegen/shared_row_pair.py),
on CPU: the gate that chooses it, its copy schedule and exchange as written, and its source
compiled for sm_90. Its results against float64 run on the GPU (tests/codegen/test_shared_row.py)."""
import re
from dataclasses import replace
from typing import Optional

import pytest
import torch

from fuser.codegen.layout import Layout
from fuser.codegen.shared_row import SharedRowConfig, generate_shared_row, gluon_names
from fuser.schedulers.heuristics import SHARED_ROW_PAIR_VECTOR_BYTES, SHARED_ROW_PAIR_WARPS

from benchmarks.sweep_shared_row import NO_CUOBJDUMP, compile_for_sm90
from tests.codegen.test_shared_row import along_the_row, layernorm_plan, on_a_hopper, rmsnorm_plan

LAYOUT = Layout(((0,),), ((1,),))
PER_THREAD = SHARED_ROW_PAIR_VECTOR_BYTES // 2  # bf16


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


@pytest.mark.parametrize("cols, chunks, per_thread", [(32768, 4, PER_THREAD), (24576, 3, PER_THREAD),
                                                     (28672, 7, PER_THREAD // 2), (20480, 5, PER_THREAD // 2),
                                                     (18432, None, None)])
def test_the_gate_splits_rows_over_pairs_where_one_program_cannot_hold_dw_and_db(cols, chunks, per_thread, monkeypatch):
    """The LayerNorm backward's dw and db at these lengths exceed one program's accumulators:
    each row is split over a pair, each half whole chunks of 16 bytes a thread, or of 8 where
    those leave a part chunk (28672 and 20480 columns: halves of 3.5 and 2.5 chunks of 8 bf16);
    18432 columns leave a part chunk either way: no pair form."""
    config = gate_config(monkeypatch, layernorm_plan(True), cols)
    if chunks is None:
        assert config is None
        return
    assert config.pair and (config.chunks, config.per_thread, config.warps) == (chunks, per_thread, SHARED_ROW_PAIR_WARPS)
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
    """In each iteration: the partner's words of row k loaded first; the words of row k - 1
    zeroed after a barrier (written out right after the first pass's first wait, where the
    chunks' loads need one: every thread has read the words then); row k + 1's sums published
    after its first pass; then the wait for row k's words, and only then row k's last pass
    reads the sums (a word's bits plus one; zero: not yet come). After the loop, a barrier and
    the program's last row's words zeroed."""
    source = pair_source(4)
    head, body = source.split("for row in range(pair, R, NP):\n")
    body, tail = body.split("    async_copy.wait_group(0)\n")
    body = [line.strip() for line in body.splitlines()]

    def first(prefix: str) -> int:
        return next(k for k, line in enumerate(body) if line.startswith(prefix))
    waits = [k for k, line in enumerate(body) if line.startswith("async_copy.wait_group(")]
    zeroed = first("tl.store(SEM_ptr + theirs - 2 * NP * 2 + 1, 0)")
    assert body[waits[0] + 1:waits[0] + 3] == ["BARRIER()", "if row > pair:"]  # (the words of row k - 1)
    order = [first("w0 = tl.load(SEM_ptr + theirs + 0, volatile=True)"), waits[0], zeroed, waits[1],
             first("tl.atomic_xchg(SEM_ptr + (rown * 2 + half) * 2 + 1"), first("while ((w0 == 0) | (w1 == 0))")]
    assert order == sorted(order), order
    uses = [k for k, line in enumerate(body) if "(w0 - 1).to(tl.float32, bitcast=True)" in line]
    assert len(uses) == 1 and uses[0] > first("w0 = w0 * ok")  > first("while ((w0 == 0) | (w1 == 0))")
    tail = [line.strip() for line in tail.splitlines()]
    assert tail[:3] == ["BARRIER()", "last = pair + (R - 1 - pair) // NP * NP", "if pair < R:"]
    assert tail[3:5] == [f"tl.store(SEM_ptr + (last * 2 + 1 - half) * 2 + {i}, 0)" for i in range(2)]
    # the first pass of the next row runs on names of its own, carried to the next iteration
    assert "p0 = p0_n" in body and any(re.fullmatch(r"T\d+_next = T\d+_next_n", line) for line in body)


def _word(line: str, call: str) -> Optional[str]:
    """The word offset (an expression) a line's `call` of SEM_ptr takes, if it has one."""
    m = re.search(re.escape(call) + r"\(SEM_ptr \+ (.+?), ", line)
    return m.group(1) if m else None


@pytest.mark.parametrize("rows, npairs", [(11, 3), (7, 7), (1, 1), (9, 2), (40, 6)])
def test_each_word_is_published_read_and_zeroed_once_a_launch(rows, npairs):
    """The exchange as the source writes it, for every pair's two programs interleaved at
    random over three launches (one row; as many rows as pairs, the most the launch takes;
    several rows a pair): the word offsets of each publish, read and zeroing evaluated from
    the source's expressions, in the source's order of events. Every wait ends on the
    partner's sum of that row from this launch, each word is published, read and zeroed once,
    all are zero after each launch, and none is past the row words (`broken` follows them)."""
    import random

    source = pair_source(2)
    head, body = source.split("for row in range(pair, R, NP):\n")
    body, tail = body.split("    async_copy.wait_group(0)\n")
    first_publish = [_word(line, "tl.atomic_xchg") for line in head.splitlines() if _word(line, "tl.atomic_xchg")]
    theirs = re.search(r"theirs = (.+)", body).group(1)
    publish = [_word(line, "tl.atomic_xchg") for line in body.splitlines() if _word(line, "tl.atomic_xchg")]
    read = [_word(line, "tl.load") for line in body.splitlines() if "volatile=True" in line][:2]
    zero = [_word(line, "tl.store") for line in body.splitlines() if _word(line, "tl.store") and "SEM_ptr" in line
            and "2 * R" not in line]
    last = re.search(r"last = (.+)", tail).group(1)
    zero_last = [_word(line, "tl.store") for line in tail.splitlines() if _word(line, "tl.store") and "SEM_ptr" in line]
    assert len(first_publish) == len(publish) == len(read) == len(zero) == len(zero_last) == 2
    for seed in range(10):
        rng, words, events = random.Random(seed), {}, []
        for launch in range(1, 4):
            def program(pair, half):
                env = dict(pair=pair, half=half, NP=npairs, R=rows)
                for i, at in enumerate(first_publish):
                    events.append(("published", eval(at, env)))
                    words[eval(at, env)] = (launch, pair, 1 - half, i)  # (who reads it: the partner)
                yield
                for row in range(pair, rows, npairs):
                    env.update(row=row, rown=row + npairs)
                    env["theirs"] = eval(theirs, env)
                    if row > pair:
                        for at in zero:
                            events.append(("zeroed", eval(at, env)))
                            words.pop(eval(at, env))
                    if row + npairs < rows:
                        for i, at in enumerate(publish):
                            events.append(("published", eval(at, env)))
                            assert eval(at, env) not in words, "published over a word not yet zeroed"
                            words[eval(at, env)] = (launch, row + npairs, 1 - half, i)
                    yield
                    for i, at in enumerate(read):
                        while eval(at, env) not in words:
                            yield
                        assert words[eval(at, env)] == (launch, row, half, i), (seed, launch, row)
                    yield
                env["last"] = eval(last, env)
                for at in zero_last:
                    events.append(("zeroed", eval(at, env)))
                    words.pop(eval(at, env))
            live = [program(p, h) for p in range(npairs) for h in (0, 1)]
            while live:
                g = rng.choice(live)
                try:
                    next(g)
                except StopIteration:
                    live.remove(g)
            assert not words, (seed, launch, words)
            assert events and all(0 <= at < 2 * rows * 2 for _, at in events)  # below `broken`, at 2 * R * 2


@pytest.mark.skipif(not gluon_names(), reason="this Triton has no Gluon")
@pytest.mark.parametrize("cols, per_thread", [(32768, PER_THREAD), (24576, PER_THREAD), (20480, PER_THREAD // 2)])
def test_the_pair_kernel_compiles_within_shared_memory_and_registers(cols, per_thread, tmp_path, monkeypatch):
    """Compiled for sm_90 as the launch specializes it: three rows' halves of x and dy and a
    half of w within a block's 227 KiB, dw's and db's accumulators in registers with a stack of
    at most 48 bytes (Triton 3.6, the H200's: 8 bytes at 32768 and 24576 columns, none at 20480,
    none spilled in the main loop; 3.9: 16, none and 40), and the barrier written out before the
    words are zeroed merged with the one the first wait needs: the main loop has as many
    barriers as without it."""
    from benchmarks.sweep_shared_row import main_loop

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    plan = layernorm_plan(True)
    cfg = SharedRowConfig(per_thread, 16, cols // 2 // (per_thread * 32 * 16), along_the_row(plan), pair=True)
    ks = generate_shared_row(plan, LAYOUT, f"fuser_pair_{cols}", cfg)
    sass = []
    shared, usage = compile_for_sm90(ks, cfg, sass=sass)
    assert shared <= 227 * 1024
    if usage == NO_CUOBJDUMP:
        pytest.skip(usage)
    assert int(re.search(r"STACK:(\d+)", usage).group(1)) <= 48, usage
    # the same kernel without the written-out barrier of the loop (the epilogue's kept)
    head, loop = ks.source.split("for row in range(pair, R, NP):")
    source = head + "for row in range(pair, R, NP):" + loop.replace(
        "        BARRIER()\n        if row > pair:", "        if row > pair:", 1)
    without = replace(ks, name=f"fuser_pair_{cols}_nb", source=source.replace(f"fuser_pair_{cols}(", f"fuser_pair_{cols}_nb("))
    assert without.source.count("BARRIER()") == ks.source.count("BARRIER()") - 1
    compile_for_sm90(without, cfg, sass=sass)

    def barriers(text: str) -> int:
        return sum(bool(re.search(r"\bBAR\.SYNC", line)) for line in main_loop(text))
    assert barriers(sass[0]) == barriers(sass[1]) > 0


def test_a_refused_cooperative_launch_runs_the_two_kernels_from_then_on():
    """Under MPS or a green context fewer processors may be free than the device counts: the
    driver refuses the pair form's cooperative launch, before anything is enqueued, and that
    launch and the following run the two-kernel form. Any other error is raised."""
    from fuser.codegen.launches import SharedRowLaunch

    class Refused:
        source, compiles, cold = "", 1, False

        def __init__(self, message):
            self.message, self.calls = message, 0

        def __call__(self, inputs, device, dests=None):
            self.calls += 1
            raise RuntimeError(self.message)
    made = []

    def fallback(inputs):
        made.append(inputs)
        return lambda inputs, device, dests=None: ["two kernels"]
    refused = Refused("Triton Error [CUDA]: too many blocks in cooperative launch")
    launch = SharedRowLaunch(refused, fallback, (), cooperative=True)
    assert launch([], None) == ["two kernels"] and launch([], None) == ["two kernels"]
    assert refused.calls == 1 and len(made) == 1
    other = SharedRowLaunch(Refused("Triton Error [CUDA]: an illegal memory access"), fallback, (), cooperative=True)
    with pytest.raises(RuntimeError, match="illegal memory access"):
        other([], None)
    plain = SharedRowLaunch(refused, fallback, ())  # (not cooperative: raised as it comes)
    with pytest.raises(RuntimeError, match="cooperative"):
        plain([], None)


def test_jit_layernorm_backward_takes_the_pair_form_on_a_hopper(monkeypatch):
    """fuser.jit's LayerNorm backward (mean and rstd saved by the forward: two passes) at 32768
    columns, planned on CPU: the gate, as on an H200, splits its rows over pairs, and the pair
    kernel is generated for its plan (the run itself goes on without it, on CPU)."""
    import fuser
    from fuser.codegen import launch, shared_row

    names = shared_row.gluon_names  # (this Triton's: the kernel's names are checked against them)
    gate = on_a_hopper(monkeypatch)
    seen = []

    def spy(plan, layout, cols, tensors, strides, extents, device):
        config = gate(plan, layout, cols, tensors, strides, extents, torch.device("cuda"))
        with monkeypatch.context() as m:
            m.setattr(shared_row, "gluon_names", names)
            seen.append((config, config is not None and generate_shared_row(plan, layout, "k", config) is not None))
        return None
    monkeypatch.setattr(launch, "shared_row_config", spy)

    def layernorm(x, w, b):
        return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b)
    x, w, b = (torch.randn(*shape, dtype=torch.bfloat16, requires_grad=True) for shape in ((4, 32768), (32768,), (32768,)))
    fuser.jit(layernorm)(x, w, b).backward(torch.randn_like(x))
    assert len(seen) == 1 and seen[0][0].pair and seen[0][0].chunks == 4
    assert seen[0][1] or not names()  # (generated, where this Triton has Gluon)


def test_a_first_pass_the_renaming_cannot_follow_is_declined(monkeypatch):
    """`_renamed` follows plain assignments only: a first pass with an augmented or a tuple
    assignment (none is written today) gets no pair form rather than a wrongly renamed one."""
    from fuser.codegen import shared_row_pair

    plan = layernorm_plan(True)
    config = SharedRowConfig(PER_THREAD, 16, 2, along_the_row(plan), pair=True)
    assert generate_shared_row(plan, LAYOUT, "k", config) is not None
    real = shared_row_pair.PairedRowWriter._chunk
    for line in ("acc_x += 1.0", "a, b = f(c)"):
        monkeypatch.setattr(shared_row_pair.PairedRowWriter, "_chunk",
                            lambda self, k, j, buffer, line=line: real(self, k, j, buffer) + [line])
        assert generate_shared_row(plan, LAYOUT, "k", config) is None
