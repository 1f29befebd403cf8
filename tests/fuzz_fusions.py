"""Random-fusion fuzzer: builds random FusionDefinitions through the public API, runs them with
the generated kernels and with the ATen evaluator on the same random inputs, and (for fusions
that stay in fp32) with eager torch too.

`run_case(seed)` builds and checks one case and raises AssertionError on a mismatch;
`python -m tests.fuzz_fusions START COUNT [PROCESSORS [--forms] [--repeat]]` runs many and prints
the failing seeds; `--forms` runs each under a profile of shrunk heuristic limits (FORM_PROFILES),
`--repeat` calls each definition twice more (new values, then the first inputs again)."""
import functools
import random
import sys
import traceback

import torch

from fuser import DataType, FusionDefinition
from fuser.codegen import launch
from fuser.errors import ExtentConflictError, FuserError, FusionInputError, InternalError
from fuser.evaluate import bind_inputs, evaluate_fusion
from fuser.ir import ReductionOp, ReductionOpType, VarMeanOp
from fuser.runtime import FusionExecutorCache
from fuser.schedulers import heuristics

SIZES = [1, 3, 7, 33]
# with a kernel-form profile (below): one axis long enough for several chunks, heads and
# tails, the others short (Triton's interpreter runs a program at a time)
FORM_SIZES = ([1, 3, 5], [33, 100, 301])
# Heuristic limits shrunk so that small tensors take the forms that production gives long rows
# and many processors: looped rows in chunks of 16 or 64 columns (aligned chunks for rows of any
# start), the inner-outer template's looped form, rows read twice, split inner reductions, small
# pointwise tiles, a row loop. Each is a set the codegen tests use (tests/codegen).
FORM_PROFILES = [
    dict(MAX_PERSISTENT=32, LOOPED_BLOCK=16),
    dict(MAX_PERSISTENT=32, LOOPED_BLOCK=64),
    dict(MAX_PERSISTENT=32, LOOPED_BLOCK=16, ALIGNED_TILE_MIN_COLS=1),
    dict(MAX_PERSISTENT=64, LOOPED_BLOCK=16, ROW_PASS_UNROLL=1),
    dict(INNER_OUTER_MAX_PERSISTENT=32),
    dict(RELOAD_MIN_COLS=64),
    dict(TILE_ELEMENTS=64),
    dict(ALIGNED_TILE_MIN_COLS=1),
    dict(INNER_SPLIT_MIN_COLS=64, INNER_SPLIT_MIN_CHUNK=32, INNER_SPLIT_BLOCK=16),
    dict(ROW_LOOP_MIN_COLS=1),
]
FLOATS = [DataType.Float, DataType.BFloat16, DataType.Half]
TORCH = {DataType.Float: torch.float32, DataType.BFloat16: torch.bfloat16, DataType.Half: torch.float16,
         DataType.Int32: torch.int32, DataType.Int: torch.int64, DataType.Bool: torch.bool,
         DataType.Double: torch.float64}
FLOAT_UNARY = ["neg", "abs", "exp", "sin", "cos", "tanh", "sigmoid", "relu", "silu", "erf", "floor",
               "ceil", "round", "trunc", "sign", "reciprocal", "sqrt", "log", "log1p", "expm1", "rsqrt"]
BOOL_UNARY = ["isnan", "isinf", "isfinite", "logical_not"]
ARITH = ["add", "sub", "mul", "div", "maximum", "minimum", "fmod", "remainder", "atan2", "pow"]
CMP = ["eq", "ne", "lt", "le", "gt", "ge"]
INT_BINARY = ["add", "sub", "mul", "maximum", "minimum", "bitwise_and", "bitwise_or", "bitwise_xor"]


def draw(shape: list[int], dtype: torch.dtype, gen: torch.Generator, scale: float) -> torch.Tensor:
    """Random values of `dtype`: floats normal times `scale` and ints in [-9, 9], never zero; bools."""
    if dtype.is_floating_point:
        t = torch.randn(*shape, generator=gen) * scale
        t = t + 0.01 * torch.sign(t)
    elif dtype is torch.bool:
        t = torch.rand(*shape, generator=gen) < 0.5
    else:
        t = torch.randint(-9, 10, shape, generator=gen)
        t = torch.where(t == 0, torch.ones_like(t), t)
    return t.to(dtype)


class Case:
    def __init__(self, seed: int, sizes: list[int] | tuple[list[int], list[int]] = SIZES):
        self.seed = seed
        self.sizes = sizes
        self.rng = random.Random(seed)
        self.gen = torch.Generator().manual_seed(seed)
        self.lines = []  # a readable transcript of the definition, for minimizing

    # -- inputs -------------------------------------------------------------------------------

    def make_input(self, fd, sizes, dtype):
        rng = self.rng
        rank = len(sizes)
        bcast = [rng.random() < 0.2 for _ in range(rank)]
        shape = [1 if b else -1 for b in bcast]
        real = [1 if b else s for b, s in zip(bcast, sizes)]
        layout = rng.choice(["contig", "contig", "transposed", "sliced", "expanded"]) if rank >= 2 else "contig"
        t = draw(real, TORCH[dtype], self.gen, rng.choice([0.5, 1.0, 3.0]) if dtype.category == 2 else 1.0)
        if layout == "transposed":
            t = t.transpose(0, rank - 1).contiguous().transpose(0, rank - 1)
        elif layout == "sliced":
            big = torch.cat([t, t], dim=rank - 1)
            t = big[..., : real[-1]]
        elif layout == "expanded":
            axes = [k for k in range(rank) if not bcast[k]]
            if axes:
                k = rng.choice(axes)
                idx = [slice(None)] * rank
                idx[k] = slice(0, 1)
                t = t[tuple(idx)].expand(*real)
        if layout == "contig":
            tv = fd.define_tensor(shape=shape, contiguity=True, dtype=dtype)
        else:
            tv = fd.define_tensor(shape=shape, contiguity=False, dtype=dtype)
        self.lines.append(f"T{len(self.lines)} = define_tensor({shape}, {dtype}, {layout}) sizes={tuple(t.shape)} strides={t.stride()}")
        return tv, t

    # -- program ------------------------------------------------------------------------------

    def build(self):
        rng = self.rng
        rank = rng.choice([1, 2, 2, 3])
        if isinstance(self.sizes, tuple):  # (short sizes, long sizes): one long axis
            short, long = self.sizes
            sizes = [rng.choice(short) for _ in range(rank)]
            # mostly the rows' axis (inner reductions), else the columns' (outer ones)
            sizes[rng.choice([rank - 1, rank - 1, 0, rng.randrange(rank)])] = rng.choice(long)
        else:
            sizes = [rng.choice(self.sizes) for _ in range(rank)]
        self.inputs = []
        vals = []  # (tv, eager tensor or None)
        fd = FusionDefinition()
        self.eager_ok = True
        with fd:
            for _ in range(rng.randint(1, 3)):
                dtype = rng.choice(FLOATS + FLOATS + [DataType.Int32, DataType.Int, DataType.Bool])
                tv, t = self.make_input(fd, sizes, dtype)
                self.inputs.append(t)
                vals.append((tv, t))
            if rng.random() < 0.3:
                s = fd.define_scalar(dtype=DataType.Double)
                v = rng.choice([0.5, -1.25, 2.0])
                self.inputs.append(v)
                self.scalar = (s, v)
                self.lines.append(f"S = define_scalar(Double) = {v}")
            else:
                self.scalar = None
            outs = self.extra_outs = []
            for _ in range(rng.randint(1, 7)):
                try:
                    r = self.step(fd, vals)
                except _Skip:
                    continue
                if r is not None:
                    vals.append(r)
                    if rng.random() < 0.15:
                        outs.append(r)
            outs.append(vals[-1])
            seen = set()
            self.outs = []
            for tv, t in outs:
                if id(tv) in seen or tv in [v for v, _ in vals[: len(self.inputs)]]:
                    continue
                seen.add(id(tv))
                fd.add_output(tv)
                self.outs.append((tv, t))
            if not self.outs:
                tv, t = vals[-1]
                r = (fd.ops.neg(tv) if tv.dtype.category >= 1 else fd.ops.logical_not(tv),
                     None if t is None else (-t if t.dtype != torch.bool else ~t))
                fd.add_output(r[0])
                self.outs.append(r)
                self.lines.append("out = neg/not(last)")
        self.fd = fd
        return fd

    def exact(self, fd, *operands):
        """Whether a comparison of these operands is the same with fp32 intermediates as with
        eager's half roundings: the fusion has no half type yet, or both are inputs or scalars;
        and no operand is computed from a sum, whose last bits follow the order of its
        additions (ATen's, the kernel's and a split kernel's differ: seed 803230's remainder
        of a column sum of exps jumped by its divisor)."""
        if any(summed(fd.fusion, v) for v in operands):
            return False
        if coarsest(fd.fusion) == torch.float32:
            return True
        return all(not hasattr(v, "domain") or any(v is i for i in fd.fusion.inputs()) for v in operands)

    def pick(self, vals, pred=lambda tv: True):
        cands = [v for v in vals if pred(v[0])]
        if not cands:
            raise _Skip
        # prefer recent values: chains
        return cands[-1] if self.rng.random() < 0.5 else self.rng.choice(cands)

    def step(self, fd, vals):
        rng = self.rng
        kind = rng.choice(["unary", "unary", "binary", "binary", "binary", "scalar", "ternary", "cast",
                           "cast", "reduce", "reduce", "reduce", "shape", "broadcast", "norm"]
                          + (["reduce", "reduce", "norm", "norm"] if isinstance(self.sizes, tuple) else []))
        ops = fd.ops
        if kind == "norm":
            # a norm backward's shape: a row reduction used along the row, and a column sum of
            # the same rows (the inner-outer template where processors are set)
            x, tx = self.pick(vals, lambda tv: tv.ndim == 2 and tv.dtype.category == 2)
            row_op = rng.choice(["sum", "max"])
            r = getattr(ops, row_op)(x, [1], True)
            y = ops.sub(x, r)
            c = ops.sum(ops.mul(x, y), [0], rng.random() < 0.3)
            self.lines.append(f"norm({x}, {row_op})")
            ey = ec = None
            if tx is not None:
                er = tx.sum(1, keepdim=True) if row_op == "sum" else tx.amax(1, keepdim=True)
                ey = tx - er
                ec = (tx * ey).sum(0, keepdim=c.ndim == 2)
            vals.append((y, ey))
            self.extra_outs.append((y, ey))
            return c, ec
        if kind == "unary":
            tv, t = self.pick(vals, lambda tv: tv.ndim > 0)
            if tv.dtype.category == 2:
                name = rng.choice(FLOAT_UNARY + BOOL_UNARY)
                if name in ("floor", "ceil", "round", "trunc", "sign", "sin", "cos") and not self.exact(fd, tv):
                    raise _Skip  # discontinuous or periodic: see exact
                if name in ("exp", "expm1") and tv.dtype is not DataType.Float:
                    # fuser keeps fp32 intermediates where eager overflows a half to inf: noise
                    raise _Skip
            elif tv.dtype is DataType.Bool:
                name = rng.choice(["logical_not", "bitwise_not"])
            else:
                name = rng.choice(["neg", "abs", "bitwise_not", "sign"])
            out = getattr(ops, name)(tv)
            fn = torch.nn.functional.silu if name == "silu" else getattr(torch, name)
            et = _eager(fn, t)
            self.lines.append(f"{name}({tv})")
            return out, et
        if kind in ("binary", "scalar"):
            a, ta = self.pick(vals, lambda tv: tv.ndim > 0)
            if kind == "scalar":
                if self.scalar is not None and rng.random() < 0.5:
                    b, tb = self.scalar
                else:
                    tb = rng.choice([2, -3, 0.5, 1.5, -0.75]) if a.dtype is not DataType.Bool else rng.choice([1, 2.5])
                    b = tb
            else:
                b, tb = self.pick(vals, lambda tv: tv.ndim == a.ndim or tv.ndim == 0)
            floaty = a.dtype.category == 2 or (isinstance(b, float)) or (hasattr(b, "dtype") and b.dtype.category == 2)
            if floaty:
                name = rng.choice(ARITH + (CMP if self.exact(fd, a, b) else []))
            elif a.dtype is DataType.Bool and (isinstance(b, bool) or getattr(b, "dtype", None) is DataType.Bool):
                name = rng.choice(["logical_and", "logical_or", "eq", "ne", "bitwise_xor"])
            else:
                name = rng.choice(INT_BINARY + CMP + ["logical_and", "logical_or"])
            halfs = {DataType.Half, DataType.BFloat16} & {a.dtype, getattr(b, "dtype", None)}
            if name in ("fmod", "remainder") and (halfs or not self.exact(fd, a, b)):
                # discontinuous: a difference of one half rounding of an operand, or of the order
                # of a sum's additions, jumps by the divisor
                raise _Skip
            if name == "pow" and (not floaty or DataType.Half in (a.dtype, getattr(b, "dtype", None))
                                  or DataType.BFloat16 in (a.dtype, getattr(b, "dtype", None))):
                raise _Skip  # overflow of a half intermediate: see exp
            out = getattr(ops, name)(a, b)
            et = None
            if ta is not None and tb is not None:
                et = _eager(getattr(torch, name), ta, tb if isinstance(tb, torch.Tensor) else torch.tensor(tb))
            self.lines.append(f"{name}({a}, {b if not hasattr(b, 'dtype') else b})")
            return out, et
        if kind == "ternary":
            which = rng.choice(["where", "clamp", "lerp"])
            if which == "where":
                c, tc = self.pick(vals, lambda tv: tv.ndim > 0)
                if c.dtype is not DataType.Bool:
                    if not self.exact(fd, c, 0):
                        raise _Skip
                    c, tc = ops.gt(c, 0), (None if tc is None else tc > 0)
                a, ta = self.pick(vals, lambda tv: tv.ndim == c.ndim)
                if rng.random() < 0.5:
                    b, tb = self.pick(vals, lambda tv: tv.ndim == c.ndim)
                else:
                    b = tb = rng.choice([0.0, -1.5, 3])
                out = ops.where(c, a, b)
                et = None if None in (tc, ta, tb) else torch.where(tc, ta, tb)
                self.lines.append(f"where({c}, {a}, {b})")
                return out, et
            if which == "clamp":
                a, ta = self.pick(vals, lambda tv: tv.ndim > 0 and tv.dtype.category == 2)
                lo, hi = sorted([rng.choice([-1.0, -0.5, 0.0]), rng.choice([0.25, 1.0, 2.0])])
                out = ops.clamp(a, lo, hi)
                self.lines.append(f"clamp({a}, {lo}, {hi})")
                return out, None if ta is None else torch.clamp(ta, lo, hi)
            a, ta = self.pick(vals, lambda tv: tv.ndim > 0 and tv.dtype.category == 2)
            b, tb = self.pick(vals, lambda tv: tv.ndim == a.ndim and tv.dtype == a.dtype)
            w = rng.choice([0.25, 0.75])
            out = ops.lerp(a, b, w)
            self.lines.append(f"lerp({a}, {b}, {w})")
            return out, None if None in (ta, tb) else torch.lerp(ta, tb, w)
        if kind == "cast":
            a, ta = self.pick(vals, lambda tv: tv.ndim > 0)
            dt = rng.choice(FLOATS + [DataType.Int32, DataType.Int, DataType.Bool])
            if dt.category < 2 and a.dtype.category == 2 and coarsest(fd.fusion) != torch.float32:
                # discontinuous: one half rounding of the operand that eager does and the kernels
                # (fp32 intermediates) do not moves a value across an integer
                raise _Skip
            if dt.category < 2 and dt is not DataType.Bool and a.dtype.category == 2:
                # a float-to-int cast of a value out of range is undefined: bound it first
                a = ops.clamp(a, -100.0, 100.0)
                ta = None if ta is None else torch.clamp(ta, -100.0, 100.0)
            out = ops.cast(a, dt)
            self.lines.append(f"cast({a}, {dt})")
            return out, None if ta is None else ta.to(TORCH[dt])
        if kind == "reduce":
            a, ta = self.pick(vals, lambda tv: tv.ndim > 0)
            nd = a.ndim
            choice = rng.choice(["inner", "outer", "several", "all"])
            if choice == "inner" or nd == 1:
                dims = [nd - 1]
            elif choice == "outer":
                dims = [0]
            elif choice == "several":
                dims = sorted(rng.sample(range(nd), rng.randint(1, nd)))
            else:
                dims = list(range(nd))
            keep = rng.random() < 0.5
            name = rng.choice(["sum", "max", "min", "prod", "var_mean", "sum", "max"])
            if name == "var_mean":
                if a.dtype.category != 2:
                    raise _Skip
                # ATen's Welford gives a NaN mean for an infinite element where the kernels give
                # inf (torch.mean's answer): keep infinities out
                a = ops.clamp(a, -1e4, 1e4)
                ta = None if ta is None else torch.clamp(ta, -1e4, 1e4)
                var, mean = ops.var_mean(a, dims, 1, keep)
                if ta is not None:
                    ev, em = torch.var_mean(ta, dims, correction=1, keepdim=keep)
                else:
                    ev = em = None
                vals.append((var, ev))
                self.lines.append(f"var_mean({a}, {dims}, keepdim={keep})")
                return mean, em
            if name == "prod":
                # keep products bounded
                if a.dtype.category == 2:
                    if a.dtype is not DataType.Float:
                        # eager multiplies half types in their own precision, one rounding per element
                        a, ta = ops.cast(a, DataType.Float), None if ta is None else ta.float()
                    a = ops.clamp(a, -1.5, 1.5)
                    ta = None if ta is None else torch.clamp(ta, -1.5, 1.5)
                else:
                    raise _Skip
            if name == "sum" and a.dtype in (DataType.Half, DataType.BFloat16) and len(dims) > 1 and nd == 3:
                # eager sums up to 33**3 halfs less accurately than the kernels' fp32: reduce in fp32
                a, ta = ops.cast(a, DataType.Float), None if ta is None else ta.float()
            if name in ("max", "min") and a.dtype is DataType.Bool:
                raise _Skip
            out = getattr(ops, name)(a, dims, keep)
            self.lines.append(f"{name}({a}, {dims}, keepdim={keep})")
            if ta is None:
                return out, None
            if name in ("max", "min"):
                et = ta
                for d in sorted(dims, reverse=True):
                    et = getattr(torch, "amax" if name == "max" else "amin")(et, d, keepdim=keep)
            elif name == "sum":
                et = torch.sum(ta, dims, keepdim=keep)
            else:
                et = ta
                for d in sorted(dims, reverse=True):
                    et = torch.prod(et, d, keepdim=keep)
            return out, et
        if kind == "broadcast":
            # a reduced (or lower-rank) value broadcast back to the full rank
            full = max(tv.ndim for tv, _ in vals)
            a, ta = self.pick(vals, lambda tv: 0 < tv.ndim < full or tv.ndim == 0)
            missing = full - a.ndim
            flags = [False] * a.ndim
            positions = sorted(rng.sample(range(full), missing))
            flags = []
            it = 0
            for k in range(full):
                if k in positions:
                    flags.append(True)
                else:
                    flags.append(False)
                    it += 1
            out = ops.broadcast(a, flags)
            self.lines.append(f"broadcast({a}, {flags})")
            et = None
            if ta is not None:
                et = ta
                for k in positions:
                    et = et.unsqueeze(k)
            return out, et
        # shape ops
        a, ta = self.pick(vals, lambda tv: tv.ndim > 0)
        nd = a.ndim
        which = rng.choice(["permute", "squeeze", "slice", "pad", "cat", "set"])
        if which == "permute" and nd >= 2:
            perm = list(range(nd))
            rng.shuffle(perm)
            self.lines.append(f"permute({a}, {perm})")
            return ops.permute(a, perm), None if ta is None else ta.permute(perm)
        if which == "squeeze":
            bdims = [k for k, d in enumerate(a.domain.no_reductions()) if d.is_broadcast] if hasattr(a.domain.no_reductions()[0], "is_broadcast") else []
            if not bdims:
                raise _Skip
            self.lines.append(f"squeeze({a}, {bdims[:1]})")
            return ops.squeeze(a, bdims[:1]), None if ta is None else ta.squeeze(bdims[0])
        if which == "slice":
            k = nd - 1 if rng.random() < 0.6 else 0
            start, end = rng.choice([(0, 2), (1, 5), (1, 100)])
            starts = [0] * nd
            ends = [1 << 40] * nd
            starts[k], ends[k] = start, end
            try:
                out = ops.slice(a, starts, ends)
            except Exception:
                raise _Skip
            self.lines.append(f"slice({a}, {starts}, {ends})")
            et = None
            if ta is not None:
                idx = [slice(None)] * nd
                idx[k] = slice(start, end)
                et = ta[tuple(idx)]
            return out, et
        if which == "pad":
            if a.dtype.category != 2:
                raise _Skip
            widths = [rng.choice([0, 1, 2]), rng.choice([0, 1, 3])]
            value = rng.choice([0.0, 1.5])
            out = ops.pad(a, widths, value)
            self.lines.append(f"pad({a}, {widths}, {value})")
            return out, None if ta is None else torch.nn.functional.pad(ta, widths, value=value)
        if which == "cat":
            b, tb = self.pick(vals, lambda tv: tv.ndim == nd and tv.dtype == a.dtype)
            k = nd - 1 if rng.random() < 0.5 else 0
            try:
                out = ops.cat([a, b], k)
            except Exception:
                raise _Skip
            self.lines.append(f"cat([{a}, {b}], {k})")
            return out, None if None in (ta, tb) else torch.cat([ta, tb], k)
        self.lines.append(f"set({a})")
        return ops.set(a), ta


class _Skip(Exception):
    pass


def _eager(fn, *args):
    """The eager result, or None where eager refuses what fuser accepts (sub of bools)."""
    if any(a is None for a in args):
        return None
    try:
        return fn(*args)
    except (RuntimeError, TypeError):
        return None


def tolerance(dtype: torch.dtype):
    if dtype == torch.bfloat16:
        return dict(rtol=2e-2, atol=2e-2)
    if dtype == torch.float16:
        return dict(rtol=5e-3, atol=5e-3)
    if dtype == torch.float32:
        return dict(rtol=1e-4, atol=1e-4)
    return dict(rtol=0, atol=0)


def summed(fusion, v) -> bool:
    """Whether `v` is computed from a sum or product reduction (mean and var among them): a
    max or min is exact whatever its order."""
    if not hasattr(v, "domain"):
        return False
    producer = {id(o): e for e in fusion.exprs for o in e.outputs}
    pending, seen = [v], set()
    while pending:
        e = producer.get(id(pending.pop()))
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, VarMeanOp) or (isinstance(e, ReductionOp) and e.kind in (ReductionOpType.sum, ReductionOpType.prod)):
            return True
        pending += [w for w in e.inputs if hasattr(w, "domain")]
    return False


def coarsest(fusion) -> torch.dtype:
    """The least precise float type anywhere in the fusion: fuser keeps fp32 intermediates where
    eager (and the ATen evaluator) round each bf16 or half result, so an fp32 output computed from
    bf16 values differs by bf16 rounding."""
    dts = {tv.dtype for e in fusion.exprs for tv in list(e.inputs) + list(e.outputs) if hasattr(tv, "domain")}
    for dt in (DataType.BFloat16, DataType.Half):
        if dt in dts:
            return TORCH[dt]
    return torch.float32


def allowed_tolerance(actual, expected, loose=1.0, coarse=torch.float32, sums=False) -> dict:
    """rtol and atol for comparing `actual` with `expected` in a fusion whose coarsest type is
    `coarse`; `sums`: the output is computed from a sum."""
    tol = tolerance(actual.dtype)
    if actual.dtype == torch.float32 and coarse != torch.float32:
        tol = tolerance(coarse)
    tol = {k: v * loose for k, v in tol.items()}
    if (coarse != torch.float32 or sums) and expected.numel() and expected.dtype.is_floating_point:
        # a sum of half values grows with them, and so does its rounding: scale the absolute
        # tolerance by the reference's size (as tests/codegen/test_inner_outer.py does). So
        # does an fp32 sum's where its terms cancel: a column sum of x / sum(x) over three rows
        # of terms near 2000 came to 8.03, its last bits those of the terms (seed 21156)
        big = expected[expected.isfinite()].abs().max().item() if expected.isfinite().any() else 0.0
        tol["atol"] *= max(1.0, big / 4)
    return tol


def compare(actual, expected, what, loose=1.0, coarse=torch.float32, sums=False):
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    tol = allowed_tolerance(actual, expected, loose, coarse, sums)
    if actual.dtype.is_floating_point:
        torch.testing.assert_close(actual, expected, equal_nan=True, msg=lambda m: f"{what}: {m}", **tol)
    else:
        assert torch.equal(actual, expected), f"{what}: values differ\n{actual}\n{expected}"


_NARROW_FLOATS = (DataType.Float, DataType.BFloat16, DataType.Half)


def fp64_reference(fusion, inputs) -> list:
    """The ATen evaluation with every float type taken as float64: the value that both the
    kernels (fp32 intermediates) and the ATen reference (one rounding per op) approximate. Casts
    to bf16 or half do not round in it either: it is the value of the math."""
    table = bind_inputs(fusion, inputs)  # bound with the declared dtypes
    wide = [t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in inputs]
    narrow = DataType.to_torch
    DataType.to_torch = lambda dt: torch.float64 if dt in _NARROW_FLOATS else narrow(dt)
    try:
        return evaluate_fusion(fusion, wide, table, check=False)
    finally:
        DataType.to_torch = narrow


def near_exact(actual, exact, coarse, sums=False) -> bool:
    """Whether the kernels' result is within the tolerance of the fp64 result (infinities and
    NaNs where it has them)."""
    tol = allowed_tolerance(actual, exact, coarse=coarse, sums=sums)
    return bool(torch.isclose(actual.double(), exact, equal_nan=True, **tol).all())


def as_near_as_reference(actual, expected, exact, coarse, sums=False) -> bool:
    """Whether the kernels' result is as near the fp64 one as the ATen reference is (its
    largest distance at most twice the reference's, plus the tolerance), with the same
    infinities and NaNs: a chain through an ill-conditioned op (a division by a sum that nearly
    cancels) carries both results' roundings away from the exact value alike, at different
    elements (seed 51286 with --forms: up to 7.4e-4 and 7.8e-4 from it, 1e-3 from each other)."""
    if actual.dtype != expected.dtype or not actual.dtype.is_floating_point:
        return False
    tol = allowed_tolerance(actual, exact, coarse=coarse, sums=sums)
    a, e = actual.double(), expected.double()
    finite = exact.isfinite()
    if not (torch.equal(finite, a.isfinite()) and torch.equal(finite, e.isfinite())) \
            or not torch.isclose(a[~finite], exact[~finite], equal_nan=True).all():
        return False  # (a reference off the finite values has no distance to compare with)
    a, e, x = a[finite], e[finite], exact[finite]
    if not x.numel():
        return True
    reference_error = (e - x).abs().max()
    return bool(((a - x).abs() <= 2 * reference_error + tol["atol"] + tol["rtol"] * x.abs()).all())


def compare_with_reference(actual, expected, what, coarse, exact_output, sums=False):
    """`compare`; where a float output of the kernels disagrees with the ATen reference, the judge
    is the fp64 result (`exact_output()`, evaluated only then). The reference rounds each op to
    bf16 or half, and along a chain (a norm of a norm: seeds 6039, 6078, 6217, 6536) that drifts
    past the tolerance while the kernels' fp32 intermediates stay near the exact value; a wrong
    kernel is far from both, and farther from the exact value than the reference is.
    """
    try:
        compare(actual, expected, what, coarse=coarse, sums=sums)
    except AssertionError as mismatch:
        if not (actual.dtype.is_floating_point and actual.dtype == expected.dtype
                and actual.shape == expected.shape):
            raise
        exact = exact_output()
        if not (near_exact(actual, exact, coarse, sums) or as_near_as_reference(actual, expected, exact, coarse, sums)):
            error = (actual.double() - exact).abs().nan_to_num(nan=float("inf")).max().item()
            raise AssertionError(f"{mismatch}\nand up to {error:.4g} from the fp64 result") from None


_INNER_SPLIT_LIMITS = dict(INNER_SPLIT_MIN_COLS=16, INNER_SPLIT_BLOCK=4, INNER_SPLIT_MIN_CHUNK=8)


def span(t) -> int:
    """Elements of storage `t`'s sizes and strides reach, from its first."""
    return 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride())) if t.numel() else 0


def on_device(t, device: str):
    """`t` copied to `device` with its sizes and strides (transposed, sliced, expanded)."""
    if not isinstance(t, torch.Tensor) or device == "cpu":
        return t
    return t.as_strided((span(t),), (1,)).to(device).as_strided(t.shape, t.stride())


def fresh_like(t, gen: torch.Generator):
    """New values (drawn as `Case.make_input` draws them) in a new storage, viewed with `t`'s
    sizes, strides and storage offset: a call with the same layout (the ready call replays what
    the first call decided) on other data, at other addresses. Scalars pass through."""
    if not isinstance(t, torch.Tensor):
        return t
    flat = draw([t.storage_offset() + span(t)], t.dtype, gen, 2.0).to(t.device)
    return flat.as_strided(t.shape, t.stride(), t.storage_offset())


def _other_scalar(v):
    return {0.5: -1.25, -1.25: 2.0, 2.0: 0.5}.get(v, v) if isinstance(v, float) else v


def run_case(seed: int, processors: int = 0, eager: bool = True, forms: bool = False, device: str = "cpu",
             repeat: bool = False):
    """`forms`: under one of FORM_PROFILES (chosen by the seed), with FORM_SIZES. `device`:
    where the inputs are ("cuda": compiled kernels; eager's results stay on the CPU). `repeat`:
    then two more calls of the same definition, checked against the ATen evaluator: one on new
    values with the same layouts (and another value of a scalar input), one on the first inputs
    again (each through the ready call its layout made)."""
    case = Case(seed, FORM_SIZES if forms else SIZES)
    try:
        fd = case.build()
    except _Skip:
        return case
    except (RuntimeError, IndexError, FuserError) as e:
        # a definition the op builders refuse (or eager refuses) is not a finding unless internal
        if isinstance(e, InternalError):
            raise
        case.refused = e
        return case
    case.inputs = [on_device(t, device) for t in case.inputs]
    old = launch.INTERPRETER_PROCESSORS
    launch.INTERPRETER_PROCESSORS = processors
    # with processors, inner reductions over rows of 16 columns or more split too (in chunks
    # of 2 blocks of 4 columns or more)
    limits = dict(_INNER_SPLIT_LIMITS) if processors else {}
    if forms:
        limits.update(FORM_PROFILES[seed % len(FORM_PROFILES)])
        case.lines.insert(0, f"heuristics: {limits}")
    saved = {name: getattr(heuristics, name) for name in limits}
    for name, value in limits.items():
        setattr(heuristics, name, value)
    try:
        try:
            expected = FusionExecutorCache(fd.fusion, use_kernels=False).execute(case.inputs)
        except (ExtentConflictError, FusionInputError) as e:  # operands of different extents: refused
            case.refused = e
            return case
        actual = fd.execute(case.inputs)
        calls = [(case.inputs, actual, expected, "")]
        if repeat:
            gen = torch.Generator().manual_seed(seed + 1)
            other = [_other_scalar(fresh_like(t, gen)) for t in case.inputs]
            for inputs, label in ((other, "repeat call on new values"), (case.inputs, "repeat call on the first inputs")):
                want = FusionExecutorCache(fd.fusion, use_kernels=False).execute(inputs)
                calls.append((inputs, fd.execute(inputs), want, f" ({label})"))
    finally:
        launch.INTERPRETER_PROCESSORS = old
        for name, value in saved.items():
            setattr(heuristics, name, value)
    transcript = "\n".join(case.lines)
    sums = [summed(fd.fusion, v) for v in fd.fusion.outputs()]
    for inputs, got, want, label in calls:
        fp64_outputs = functools.cache(lambda inputs=inputs: fp64_reference(fd.fusion, inputs))  # at a mismatch only
        for k, (a, e) in enumerate(zip(got, want)):
            compare_with_reference(a, e, f"seed {seed} output {k} kernels vs ATen{label}\n{transcript}\n",
                                   coarsest(fd.fusion), lambda k=k, f=fp64_outputs: f()[k], sums[k])
    # eager only where the fusion stays in fp32: in half types fuser keeps fp32 intermediates
    # where eager rounds after each op
    if eager and all(t.dtype in (torch.float32, torch.int32, torch.int64, torch.bool)
                     for t in case.inputs if isinstance(t, torch.Tensor)) and all(
            tv.dtype in (DataType.Float, DataType.Int32, DataType.Int, DataType.Bool, DataType.Double)
            for e in case.fd.fusion.exprs for tv in e.outputs if hasattr(tv, "domain")):
        for k, ((tv, et), e) in enumerate(zip(case.outs, expected)):
            if et is None:
                continue
            compare(e.cpu(), et, f"seed {seed} output {k} ATen vs eager\n{transcript}\n", loose=10.0)
    case.checked = True
    return case


if __name__ == "__main__":
    start, count = int(sys.argv[1]), int(sys.argv[2])
    procs = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    forms = "--forms" in sys.argv[4:]
    repeat = "--repeat" in sys.argv[4:]
    bad = []
    clean = 0
    for s in range(start, start + count):
        try:
            c = run_case(s, processors=procs if s % 2 else 0, forms=forms, repeat=repeat)
            clean += getattr(c, "checked", False)
        except Exception as e:
            bad.append(s)
            print(f"=== seed {s}: {type(e).__name__}: {str(e)[:3000]}")
            if not isinstance(e, AssertionError):
                traceback.print_exc(limit=-4)
    print(f"clean {clean} / {count}, failing {bad}")
