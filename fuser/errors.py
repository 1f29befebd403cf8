"""Every user-facing failure of fuser is one of these classes.

User errors (a bad definition, bad inputs, something unsupported) and internal errors (fuser
broke its own invariants) are different classes, so a caller can tell "fix your program" from
"report a bug".
"""


class FuserError(RuntimeError):
    """Base class of all fuser errors. A RuntimeError, as nvFuser's errors are in Python, so
    that code written against nvfuser_direct (`except RuntimeError`, `pytest.raises(RuntimeError)`)
    still catches them."""


class FusionDefinitionError(FuserError):
    """The definition itself is invalid: an op given incompatible operands, a bad axis or factor."""


class FusionInputError(FuserError):
    """The inputs given to `execute` do not fit the definition (count, type, dtype, rank, size)."""


class FusionIndexError(FusionInputError, IndexError):
    """An index value past the size it indexes (index_select, gather, embedding): also an
    IndexError, as eager PyTorch raises one, so that `except IndexError` catches it."""


class ExtentConflictError(FusionInputError):
    """Two sources gave different values for the same extent symbol in one execution."""


class UnsupportedError(FuserError):
    """A valid request that fuser does not implement (yet)."""


class InternalError(FuserError):
    """fuser broke one of its own invariants; the message shows the IR involved. Please report."""


class ValidationError(FuserError):
    """`fd.validate`: an output differs from its reference beyond the tolerance of its dtype."""
