"""Choosing between launch forms by timing them, once per bucket, remembered on disk.

Used only where the heuristics cannot tell which form wins (heuristics.AUTOTUNE_MIN_COLS): an
inner reduction over long rows runs either as one program a row block or as a row loop with
pipelined loads (codegen/inner_outer.py RowLoopWriter). On the H200 the row loop won softmax
forward at 32768 columns (0.88 of copy against 0.73) and lost layernorm and rmsnorm there, and
which one wins follows from the kernel, not from the sizes alone.

The first launch of a bucket times each candidate on the call's own inputs (each candidate
allocates its own outputs, so nothing the caller sees is written twice) and keeps the fastest;
the choice is stored per (kernel digest, bucket, GPU) in memory and in FUSER_CACHE_DIR, so a
later process does not time again. A bucket is the power of two of the row length and of the
row count: sizes that share one compiled kernel.
"""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Callable, Optional, Sequence

import torch

from ..schedulers.heuristics import next_pow2
from .compile import cache_dir

# launches of each candidate before timing, and timed launches (the median is kept)
WARMUP, REPEATS = 2, 7

_lock = threading.Lock()


class Choices:
    """Winners by key: a dict in memory backed by one JSON file (rewritten atomically)."""

    def __init__(self, path: Optional[Path] = None):
        self.path = path
        self.memory: Optional[dict[str, int]] = None

    def _load(self) -> dict[str, int]:
        if self.memory is None:
            self.memory = {}
            path = self.path or cache_dir() / "autotune.json"
            try:
                found = json.loads(path.read_text())
                if isinstance(found, dict):
                    self.memory = {k: v for k, v in found.items() if isinstance(v, int)}
            except (OSError, ValueError):
                pass  # no file yet, or an unreadable one: time again
        return self.memory

    def get(self, key: str) -> Optional[int]:
        with _lock:
            return self._load().get(key)

    def put(self, key: str, choice: int) -> None:
        with _lock:
            memory = self._load()
            memory[key] = choice
            path = self.path or cache_dir() / "autotune.json"
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(json.dumps(memory, indent=0, sort_keys=True))
                os.replace(tmp, path)
            except OSError:
                pass  # a read-only cache: the choice holds for this process


CHOICES = Choices()


def bucket_key(digest: str, rows: int, cols: int, device: torch.device) -> str:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    return f"{digest}|rows<={next_pow2(rows)}|cols<={next_pow2(cols)}|{name}"


def cuda_time_ms(launch: Callable[[], object], device: torch.device) -> float:
    """Median time of `launch` over REPEATS launches, by CUDA events on the current stream."""
    for _ in range(WARMUP):
        launch()
    times = []
    for _ in range(REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        launch()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def fastest(key: str, candidates: Sequence[Callable[[], object]], device: torch.device,
           timer: Optional[Callable] = None) -> int:
    """The index of the fastest candidate for `key`: remembered, or timed now (by `timer`,
    default `cuda_time_ms`)."""
    found = CHOICES.get(key)
    if found is not None and 0 <= found < len(candidates):
        return found
    timer = timer or cuda_time_ms
    times = [timer(c, device) for c in candidates]
    best = min(range(len(candidates)), key=lambda k: times[k])
    CHOICES.put(key, best)
    return best
