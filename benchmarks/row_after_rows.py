"""One suite row timed after other rows ran in the same process, beside the state of fuser's call
path: for a row that reads slower in the suite than alone (docs/performance.md, open lead 3:
the jitted softmax backward at 16384x4096 read 0.42-0.49 of copy in run 29 and in the
forty-second session, 0.99 alone).

It runs the `--after` rows at the row's shape with every `--contenders` column, as
`scripts/bench` does, then the row itself the same way, then times a fresh fuser.jit call of
the row (do_bench's median, three times; for a backward row also the host's time a call with
the GPU kept busy, and the part of it fuser's autograd node takes) and prints:

- the cProfile of 200 calls (`--calls`) (where a slow call's Python goes);
- `call_path_state()`: fuser's executor caches with and without a ready call, the ready calls
  that launch inline or through the launch objects, the tuned launches not settled, the
  launch steps that fell back to Triton's entry point, whether a Triton launch hook is set,
  and whether background compiles are still under way.

    FUSER_SYSTEM_PYTHON=1 PYTHONPATH=. python3 benchmarks/row_after_rows.py 'softmax_bwd[16384x4096]' \\
        --after colsum_fwd,rmsnorm_bwd,layernorm_bwd [--contenders eager,torch.compile,fuser,fuser-fd]
"""
from __future__ import annotations

import argparse
import gc
import os
import sys

import torch

sys.path.append(os.path.join(os.path.dirname(__file__), ".."))  # (after PYTHONPATH: a tree to compare comes first)

from benchmarks import harness, suite  # noqa: E402


def call_path_state() -> dict:
    """Counts of what fuser's call path holds now, over every live object (see the module doc)."""
    from fuser.codegen import tuning
    from fuser.codegen.steps import _DirectStep
    from fuser.runtime.cache import FusionExecutorCache
    from fuser.runtime.ready import ReadyCall

    state = dict(caches=0, caches_without_ready_call=0, ready_inline=0, ready_through_launch=0,
                 tuned_launches=0, tuned_not_settled=0, steps=0, steps_on_triton_entry=0)
    for obj in gc.get_objects():
        kind = type(obj)  # (a dead weak proxy's type is read without touching its referent)
        if kind is FusionExecutorCache:
            state["caches"] += 1
            state["caches_without_ready_call"] += not obj.ready_calls()
        elif kind is ReadyCall:
            state["ready_through_launch" if obj.run == obj._call else "ready_inline"] += 1
        elif kind is tuning.TuningLaunch:
            state["tuned_launches"] += 1
            state["tuned_not_settled"] += not obj.settled
        elif kind is _DirectStep and obj.compiled is not None:
            state["steps"] += 1
            state["steps_on_triton_entry"] += not obj.usable or obj.raw is None
    try:
        from triton import knobs
        hooks = (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook)
        state["launch_hooks"] = sum(bool(getattr(h, "calls", h)) for h in hooks if h is not None)
    except ImportError:
        state["launch_hooks"] = 0
    state["background_compiles_done"] = tuning.wait_for_compiles(0.0)
    return state


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("row", help="a case, kernel[MxN], e.g. softmax_bwd[16384x4096]")
    p.add_argument("--after", default="", help="kernels run first at the row's shape, comma-separated")
    p.add_argument("--contenders", default="eager,torch.compile,fuser,fuser-fd")
    p.add_argument("--device", default="cuda")
    p.add_argument("--calls", type=int, default=200, help="calls profiled")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    kernel, shape = args.row.rstrip("]").split("[")
    m, n = (int(v) for v in shape.split("x"))
    contenders = args.contenders.split(",")
    copy_gbps = harness.copy_bandwidth(device)["gbps"]
    for name in [k for k in args.after.split(",") if k] + [kernel]:
        harness.run_case(suite.make_case(name, m, n), contenders, device, copy_gbps, 0, True)

    case = suite.make_case(kernel, m, n)
    impl = harness.CONTENDERS["fuser"](case)
    inputs = case.make_inputs(device, 0)
    with impl.context():
        run = suite.make_runner(case, impl.fn, inputs)
        run()
        harness.settle(run, device)
        for _ in range(3):
            ms = harness.measure_ms(run, device)
            print(f"{case.name} fuser.jit, a fresh call after the rows: {ms * 1e3:.1f} us, "
                  f"{case.bytes_moved / ms / 1e6 / copy_gbps:.3f} of copy", flush=True)
        if case.backward and device.type == "cuda":
            from benchmarks.backward_host import NodeTimer
            with NodeTimer() as timer:
                host, node = harness.busy_times(run, device, timer=timer)
            print(f"host {host:.1f} us a call, fuser's autograd node {node:.1f} us of it", flush=True)
        print(harness.profile_calls(run, device, args.calls), flush=True)
        for key, value in call_path_state().items():
            print(f"{key:28s} {value}", flush=True)


if __name__ == "__main__":
    main()
