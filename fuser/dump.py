"""fuser's environment settings, read in one way everywhere. Importable from every layer, like
`errors.py`.

- `FUSER_DUMP`: what to print while running, a comma-separated list (`DUMP_NAMES`, or a
  pre-segmentation pass's name). A name it does not know is warned about once.
- On/off switches (`env_switch`): 1/true/on/yes or 0/false/off/no, any case; empty is the
  default; anything else is warned about once and read as the default.
- Counts (`env_int`): a positive integer; anything else is warned about once and read as the
  default.
- A `FUSER_*` name that is none of `SETTINGS` (a misspelling, one letter swapped) is warned about
  once, at import, with the closest known name: it would otherwise be ignored without a word.
"""
from __future__ import annotations

import difflib
import os
import warnings

# Every FUSER_* name fuser, its scripts and its test runner read (tests/test_s66_settings.py
# checks this against the source tree).
SETTINGS = frozenset({
    "FUSER_AUTOTUNE", "FUSER_BACKGROUND_COMPILE", "FUSER_CACHE_DIR", "FUSER_CHECK_SHARDS",
    "FUSER_COLLECTIVE_TIMEOUT", "FUSER_COMPILE_AHEAD", "FUSER_COMPILE_THREADS", "FUSER_COMPILE_WORKERS",
    "FUSER_CPU_KERNELS", "FUSER_DUMP", "FUSER_GENERIC_LAUNCHER", "FUSER_MAX_STREAMS",
    "FUSER_PARALLEL_COMPILE", "FUSER_PHASE_TIMES", "FUSER_SHARED_ROW", "FUSER_TRITON_KEY_CACHE",
    # scripts/, benchmarks/ and the test runner
    "FUSER_BENCH_ONE_PROCESS", "FUSER_SYSTEM_PYTHON", "FUSER_TEST_BOUNDS", "FUSER_TEST_WORKERS",
})
DUMP_NAMES = {"fusion_ir", "segments", "triton", "autotune", "host_ir", "preseg_passes"}
_pass_names: set[str] = set()
_warned: set[tuple[str, str]] = set()


def register_dump_names(names) -> None:
    """Names `FUSER_DUMP` also takes (the pre-segmentation passes register theirs)."""
    _pass_names.update(names)


def dump_flags() -> set[str]:
    flags = {f.strip() for f in os.environ.get("FUSER_DUMP", "").split(",") if f.strip()}
    unknown = flags - DUMP_NAMES - _pass_names
    if unknown:
        _warn_once("FUSER_DUMP", ",".join(sorted(unknown)),
                   f"prints nothing for {', '.join(sorted(unknown))}; it takes "
                   f"{', '.join(sorted(DUMP_NAMES | _pass_names))}")
    return flags


def env_switch(name: str, default: bool) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if raw in ("1", "true", "on", "yes"):
        return True
    if raw in ("0", "false", "off", "no"):
        return False
    if raw:
        _warn_once(name, raw, f"is not one of 1/true/on/yes or 0/false/off/no; read as {int(default)}")
    return default


def env_int(name: str, default: int, minimum: int = 1) -> int:
    raw = os.environ.get(name, "").strip()
    if raw.isdecimal() and int(raw) >= minimum:  # (isdigit takes "²", which int() refuses)
        return int(raw)
    if raw:
        what = "a positive integer" if minimum == 1 else f"an integer of at least {minimum}"
        _warn_once(name, raw, f"is not {what}; read as {default}")
    return default


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = os.environ.get(name, "").strip().lower()
    if raw in choices:
        return raw
    if raw:
        _warn_once(name, raw, f"is not one of {', '.join(choices)}; read as {default}")
    return default


def _warn_once(name: str, raw: str, why: str) -> None:
    if (name, raw) not in _warned:
        _warned.add((name, raw))
        warnings.warn(f"fuser: {name}={raw!r} {why}", stacklevel=3)


def warn_unknown_settings(environ=os.environ) -> None:
    """One warning for each FUSER_* name in `environ` that fuser does not read."""
    for name in sorted(n for n in environ if n.startswith("FUSER_") and n not in SETTINGS):
        # (the known names are upper case: FUSER_cpu_kernels is matched as FUSER_CPU_KERNELS)
        close = difflib.get_close_matches(name.upper(), SETTINGS, n=1)
        hint = f"did you mean {close[0]}?" if close else f"the settings are {', '.join(sorted(SETTINGS))}"
        _warn_once(name, environ[name], f"is no fuser setting and is ignored; {hint}")


warn_unknown_settings()  # (at import: once a process)
