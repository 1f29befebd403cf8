"""Choosing between launch forms by timing them, once per bucket, remembered on disk.

Used only where the heuristics cannot tell which form wins (heuristics.AUTOTUNE_MIN_COLS): an
inner reduction over long rows runs either as one program a row block or as a row loop with
pipelined loads (codegen/inner_outer.py RowLoopWriter). On the H200 the row loop won softmax
forward at 32768 columns (0.88 of copy against 0.73) and lost layernorm and rmsnorm there, and
which one wins follows from the kernel, not from the sizes alone.

The first launch of a bucket (on the GPU, the first call after the candidates compiled in the
background: codegen/tuning.py) times each candidate on the call's own inputs (each candidate
allocates its own outputs, so nothing the caller sees is written twice; one that fails is passed
over, the default's failure is raised) and keeps the fastest;
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

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: writes unlocked
    fcntl = None

import torch

from ..dump import dump_flags
from ..schedulers.heuristics import next_pow2
from .compile import cache_dir

# launches of each candidate before timing; timed samples (the median is kept), each of enough
# back-to-back launches to fill SAMPLE_MS of GPU time (at most MAX_BATCH). Each sample starts
# behind a GPU busy-wait of HOLD_CYCLES (about 1 ms), during which the host queues the batch,
# so that the host's time to reach a launch (tens of microseconds on a slow host) is in no
# sample: it would add to a kernel of about 100 us and could decide between forms a few
# percent apart.
WARMUP, REPEATS, SAMPLE_MS, MAX_BATCH, HOLD_CYCLES = 2, 5, 0.5, 32, 2_000_000

_lock = threading.Lock()


class Choices:
    """Winners by key: a dict in memory backed by one JSON file (rewritten atomically)."""

    def __init__(self, path: Optional[Path] = None):
        self.path = path
        self.memory: Optional[dict[str, int]] = None

    def _load(self) -> dict[str, int]:
        if self.memory is None:
            self.memory = self._read()
        return self.memory

    def _read(self) -> dict[str, int]:
        path = self.path or cache_dir() / "autotune.json"
        try:
            found = json.loads(path.read_text())
            if isinstance(found, dict):
                return {k: v for k, v in found.items() if type(v) is int}
        except (OSError, ValueError, RecursionError):  # (json's answer to arrays nested too deep)
            pass  # no file yet, or an unreadable one: time again
        return {}

    def get(self, key: str) -> Optional[int]:
        with _lock:
            return self._load().get(key)

    def put(self, key: str, choice: int) -> None:
        """Stores a winner: in memory, and in the file merged with what other processes stored
        there since this one read it (under a lock file: two jobs tuning at once each rewrote
        the file from their own memory, dropping the other's winners)."""
        with _lock:
            memory = self._load()
            memory[key] = choice
            path = self.path or cache_dir() / "autotune.json"
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(path.with_suffix(".lock"), "a") as lock:
                    if fcntl is not None:
                        fcntl.flock(lock, fcntl.LOCK_EX)
                    merged = {**self._read(), **memory}
                    tmp.write_text(json.dumps(merged, indent=0, sort_keys=True))
                    os.replace(tmp, path)
                memory.update(merged)
            except OSError:
                tmp.unlink(missing_ok=True)  # a read-only or full cache: the choice holds for this process


CHOICES = Choices()


def bucket_key(digest: str, rows: int, cols: int, device: torch.device) -> str:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    return f"{digest}|rows<={next_pow2(rows)}|cols<={next_pow2(cols)}|{name}"


def cuda_time_ms(launch: Callable[[], object], device: torch.device) -> float:
    """Median time of one `launch`, by CUDA events on the current stream around batches of
    back-to-back launches."""
    for _ in range(WARMUP):
        launch()
    once = _events_ms(launch, 1)
    batch = max(1, min(MAX_BATCH, int(SAMPLE_MS / max(once, 1e-3))))
    times = sorted(_events_ms(launch, batch) / batch for _ in range(REPEATS))
    return times[len(times) // 2]


def _events_ms(launch: Callable[[], object], count: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    hold = getattr(torch.cuda, "_sleep", None)
    if hold is not None:
        hold(HOLD_CYCLES)
    start.record()
    for _ in range(count):
        launch()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def _timed(timer: Callable, candidate: Callable[[], object], device: torch.device, default: bool) -> float:
    """The candidate's time; a candidate other than the default (the first) that fails to
    compile or launch is passed over (infinitely slow): the default's failure is raised."""
    try:
        return timer(candidate, device)
    except Exception:
        if default:
            raise
        return float("inf")


def fastest(key: str, candidates: Sequence[Callable[[], object]], device: torch.device,
           timer: Optional[Callable] = None, labels: Optional[Sequence[str]] = None) -> int:
    """The index of the fastest candidate for `key`: remembered, or timed now (by `timer`,
    default `cuda_time_ms`; a candidate other than the first that raises is passed over).
    `FUSER_DUMP=autotune` prints each timing and the choice."""
    found = CHOICES.get(key)
    if found is not None and 0 <= found < len(candidates):
        return found
    timer = timer or cuda_time_ms
    times = [_timed(timer, c, device, k == 0) for k, c in enumerate(candidates)]
    best = min(range(len(candidates)), key=lambda k: times[k])
    if "autotune" in dump_flags():
        names = labels or [str(k) for k in range(len(candidates))]
        print(f"fuser autotune {key}:", ", ".join(
            f"{names[k]} {times[k] * 1e3:.1f} us{' (chosen)' if k == best else ''}" if times[k] != float("inf")
            else f"{names[k]} failed" for k in range(len(times))))
    CHOICES.put(key, best)
    return best
