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


def run_eagerly_once() -> Any:
    """What a frame callback returns to have Dynamo run the frame as it is, this once, and call
    the callback again at its next call (Dynamo's own return on a failure skips the code for
    good); None where this torch has no such return."""
    try:
        from torch._dynamo.types import ConvertFrameReturn, FrameAction, FrameExecStrategy
    except ImportError:  # pragma: no cover - depends on the torch version
        return None
    return ConvertFrameReturn(frame_exec_strategy=FrameExecStrategy(FrameAction.DEFAULT, FrameAction.DEFAULT),
                              apply_to_code=False, skip_reason="fuser: tracing failed; run as it is, once")


def compile_again(code: Any) -> None:
    """Undoes the mark Dynamo leaves on a code object it traced no graph from (run it
    uncompiled from then on: a frame that raised the user's error), so that its next call is
    compiled; a torch without the setting keeps the mark."""
    try:
        from torch._C._dynamo.eval_frame import set_code_exec_strategy
        from torch._dynamo.types import FrameAction, FrameExecStrategy
    except ImportError:  # pragma: no cover - depends on the torch version
        return
    set_code_exec_strategy(code, FrameExecStrategy(FrameAction.DEFAULT, FrameAction.DEFAULT))

