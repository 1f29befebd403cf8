"""The host program: allocate, loop over stream chunks, take chunk views, launch kernels and
ATen segments, post collectives and wait for them (nodes.py), lowered from a fusion after the
pre-segmentation passes (lower.py) and run by HostRuntime (run.py)."""
from .lower import lower
from .nodes import HostProgram, format_program
from .run import HostRunner, HostRuntime

__all__ = ["lower", "HostProgram", "format_program", "HostRunner", "HostRuntime"]
