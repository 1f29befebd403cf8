"""Dynamo's frame hook, per thread: set to None around fuser's own runtime where a call can
arrive inside a frame Dynamo is compiling or running (a definition executed in a compiled
function, a jitted backward run by `loss.backward()` inside one), so that Dynamo neither traces
fuser's runtime (on the CPU, Triton's interpreter, where it failed with an internal error) nor
compiles its frames. Setting it costs about 0.1 us."""
from __future__ import annotations

import warnings
from typing import Any

try:
    from torch._C._dynamo.eval_frame import set_eval_frame
except ImportError:  # pragma: no cover - depends on the torch build
    def set_eval_frame(callback: Any) -> Any:
        return None

# what Dynamo says once when it breaks its graph at the hook: not the user's concern
warnings.filterwarnings("ignore", message=r"Dynamo does not know how to trace the builtin "
                                          r"`torch\._C\._dynamo\.eval_frame\.set_eval_frame")
