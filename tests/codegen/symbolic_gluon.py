"""A generated shared-row Gluon kernel run in plain Python on symbolic values, for tests that
compare two kernels' computations without a GPU.

Every value is an expression, interned so that equal expressions have one id; the kernel's
stores (to global memory and to shared memory) are logged as ids. Two kernels whose logs are
equal store the same expressions in the same order: a value that is lost, stale or written to
the wrong place shows. Waits and barriers are no-ops (`test_shared_row.simulate_copies` checks
the copy schedule); `tl.program_id` is 0 and one program runs every row.
"""
from __future__ import annotations

import inspect
import types

_IDS: dict = {}


def _key(value) -> tuple:
    if isinstance(value, Sym):
        return ("sym", value.id)
    if isinstance(value, int) and not isinstance(value, bool):
        return ("int", int(value))
    return ("const", repr(value))


class Sym:
    """An expression: an operation over operands, interned."""
    __slots__ = ("id",)

    def __init__(self, op: str, *operands):
        self.id = _IDS.setdefault((op,) + tuple(_key(o) for o in operands), len(_IDS))

    def __repr__(self):  # (shapes and keywords are keyed by their repr)
        return f"S{self.id}"

    def __bool__(self):
        raise TypeError("the kernel branches on a value: not a symbolic run")

    def __getitem__(self, index):
        return Sym("getitem", self, repr(index))

    def to(self, dtype, *args, **kwargs):
        return Sym("to", self, str(dtype))


def _binary(op: str):
    return (lambda self, other: Sym(op, self, other)), (lambda self, other: Sym(op, other, self))


for _op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "and", "or", "xor", "pow"):
    _f, _rf = _binary(_op)
    setattr(Sym, f"__{_op}__", _f)
    setattr(Sym, f"__r{_op}__", _rf)
for _op in ("lt", "le", "gt", "ge", "eq", "ne"):
    setattr(Sym, f"__{_op}__", _binary(_op)[0])
Sym.__neg__ = lambda self: Sym("neg", self)
Sym.__invert__ = lambda self: Sym("invert", self)


class Index(int):
    """A concrete integer (a row, a chunk) that stays one through arithmetic."""

    def to(self, *args, **kwargs):
        return self


for _op in ("add", "radd", "sub", "rsub", "mul", "rmul", "floordiv", "rfloordiv", "mod", "rmod"):
    setattr(Index, f"__{_op}__", (lambda op: lambda self, other: (
        lambda r: Index(r) if type(r) is int else r)(getattr(int, f"__{op}__")(self, other)))(_op))


class _Shared:
    def __init__(self, log: list, name: str):
        self.log, self.name, self.slots = log, name, {}

    def index(self, i):
        return _Slot(self, int(i))


class _Slot:
    def __init__(self, buffer: _Shared, i: int):
        self.buffer, self.i = buffer, i

    def load(self, layout):
        value = self.buffer.slots.get(self.i)
        return Sym("unwritten", self.buffer.name, self.i) if value is None else value

    def store(self, value):
        self.buffer.log.append(("shared", self.buffer.name, self.i, _key(value)))
        self.buffer.slots[self.i] = value


class _Language(types.ModuleType):
    """`tl`: any function not defined below returns the expression of its call."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *args, **kwargs: Sym(name, *args, *sorted((k, repr(_key(v))) for k, v in kwargs.items()))


def run(source: str, name: str, rows: int = 3, even: bool = True) -> list:
    """The log of kernel `name` of `source` over `rows` rows (EVEN0 and EVEN1 = `even`)."""
    log: list = []
    tl = _Language("tl")
    for dtype in ("float32", "bfloat16", "float16", "int1", "int32", "int64"):
        setattr(tl, dtype, dtype)
    tl.constexpr = "constexpr"
    tl.full = lambda shape, value, dtype, layout=None: Sym("full", repr(shape), repr(value), dtype)
    tl.program_id = lambda axis: Index(0)
    tl.num_programs = lambda axis: Index(1)
    tl.to_tensor = Index
    tl.arange = lambda lo, hi, layout=None: Sym("arange", lo, hi)
    tl.BlockedLayout = tl.SliceLayout = tl.SwizzledSharedLayout = lambda *args: "layout"
    buffers = iter(range(1 << 30))
    tl.allocate_shared_memory = lambda dtype, shape, layout: _Shared(log, f"shared{next(buffers)}")
    tl.store = lambda pointer, value, mask=None, **kw: log.append(("store", _key(pointer), _key(value), _key(mask)))
    tl.load = lambda pointer, mask=None, other=None, **kw: Sym("load", pointer, mask, repr(other))  # (hints aside)
    tl.sum = lambda x, axis=None, keep_dims=False: Sym("sum", x, axis, keep_dims)
    tl.reduce = lambda values, axis, combine, keep_dims=False: tuple(  # (one result per input)
        Sym("reduce", k, *values, combine.__name__, axis) for k in range(len(values)))

    def copy(slot: _Slot, pointer, mask=None):
        slot.buffer.slots[slot.i] = Sym("copy", pointer, mask)
    async_copy = types.SimpleNamespace(async_load=copy, commit_group=lambda: None, wait_group=lambda n: None)
    code = "\n".join(line for line in source.splitlines() if not line.startswith(("import ", "from ")))
    scope = {"tl": tl, "gluon": types.SimpleNamespace(jit=lambda f: f), "async_copy": async_copy, "triton": None}
    exec(compile(code, f"<{name}>", "exec"), scope)
    kernel = scope[name]
    fixed = {"X0": Index(rows), "BLOCK0": 1, "EVEN0": even, "EVEN1": even, "INT64": False}
    kernel(**{p: fixed.get(p, Sym("param", p)) for p in inspect.signature(kernel).parameters})
    return log
