"""Host time of one forward + backward of a jitted model, kernels aside.

    python benchmarks/host_model_step.py            # the train_block model, on the CPU
    python benchmarks/host_model_step.py --eager    # and the eager model, for scale

After a first real step, every kernel launch returns the outputs of its first run instead of
launching (so the interpreter's time is out, and the ATen segments still see real values); what
is left is fuser's host work per step (the program's walk, bindings, checks, launch lookups),
Dynamo's guards, AOTAutograd's wrappers and autograd's engine, plus the ATen segments' own
work. The eager row runs the model itself (its tiny kernels included).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.append(ROOT)  # (after PYTHONPATH: a tree to compare comes first)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))


def per_step_ms(step, steps: int) -> float:
    for _ in range(5):
        step()
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(steps):
            step()
        best = min(best, (time.perf_counter() - start) / steps * 1e3)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--eager", action="store_true", help="also time the eager model")
    opts = parser.parse_args()

    import compile_model

    import fuser
    from fuser.codegen import launch

    model, args = compile_model._train_block("cpu")
    jitted = fuser.jit(model)
    jitted(*args).backward()  # the first step compiles and runs every kernel
    first_outputs: dict[int, list] = {}
    launch_for_real = launch.Launch.__call__

    def replay(self, inputs, device, dests=None):
        outs = first_outputs.get(id(self))
        if outs is None:
            outs = first_outputs[id(self)] = launch_for_real(self, inputs, device, dests)
        return outs
    launch.Launch.__call__ = replay
    print(f"fuser.jit, kernels replayed: {per_step_ms(lambda: jitted(*args).backward(), opts.steps):.3f} ms a step")
    if opts.eager:
        print(f"eager: {per_step_ms(lambda: model(*args).backward(), opts.steps):.3f} ms a step")


if __name__ == "__main__":
    main()
