"""The segmenter: cuts a Fusion into kernel, evaluator and communication segments."""
from .segmenter import segment_fusion
from .segments import Segment, SegmentKind
