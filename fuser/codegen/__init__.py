"""Triton code generation: math lowering per target, kernel source, compile cache, launch."""
from .kernel import KernelSource, generate
from .launch import KernelLauncher, target_for
from .math import CUDA, INTERPRETER
