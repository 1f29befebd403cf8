"""`FUSER_DUMP`: what to print while running, a comma-separated list (fusion_ir, segments,
triton, autotune, preseg_passes or a pass name, ...). Importable from every layer, like
`errors.py`."""
from __future__ import annotations

import os


def dump_flags() -> set[str]:
    return {f.strip() for f in os.environ.get("FUSER_DUMP", "").split(",") if f.strip()}
