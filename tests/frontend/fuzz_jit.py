"""A random-program fuzzer for `fuser.jit`.

`make_program(seed)` builds a small PyTorch function as Python source from common ops
(pointwise math, comparisons, casts, broadcasting, reductions, norms, views, cat/stack,
gather/index_select, matmul). Each op is kept only if eager runs it on every shape set, so the
program is valid for the two sets of sizes it is later called with (dynamic shapes).
`run_program(prog)` compiles it with `fuser.jit` (or `torch.compile(backend="fuser")`) and
compares against eager: forward and gradients on fresh inputs, the same shapes twice, other
shapes, and under `no_grad`.

Run many seeds: `python tests/frontend/fuzz_jit.py START COUNT [--forms]`; a failure prints the
program. `--forms`: rows of 37 to 301 columns, each seed under one of tests/fuzz_fusions.py's
FORM_PROFILES (heuristic limits shrunk so that such rows take the forms of long rows).
"""
from __future__ import annotations

import random
import sys
import traceback
from dataclasses import dataclass

import torch
import torch.nn.functional as F

try:
    from tests.frontend.jit_helpers import TOL, as_tuple, clone_args, assert_close_to_eager
except ImportError:  # run as a script
    sys.path.insert(0, __file__.rsplit("/tests/", 1)[0])
    from tests.frontend.jit_helpers import TOL, as_tuple, clone_args, assert_close_to_eager

FLOATS = (torch.float32, torch.bfloat16, torch.float16)
DTYPE_NAMES = {torch.float32: "torch.float32", torch.bfloat16: "torch.bfloat16",
               torch.float16: "torch.float16", torch.int32: "torch.int32",
               torch.int64: "torch.int64", torch.bool: "torch.bool"}

# size symbols: A (outer), B (rows), N (row length), K (index count, fixed)
SHAPE_SETS = ({"A": 3, "B": 5, "N": 7}, {"A": 2, "B": 9, "N": 13}, {"A": 4, "B": 6, "N": 11})
FORM_SHAPE_SETS = ({"A": 3, "B": 5, "N": 100}, {"A": 2, "B": 3, "N": 301}, {"A": 2, "B": 4, "N": 37})
# index values: below every size of every set, so that an index valid in one set is in all
# (a program indexing A with 2 passed its check at A = 3, and eager failed at A = 2)
INDEX_BOUND = min(min(s.values()) for s in SHAPE_SETS)


@dataclass
class Input:
    name: str
    dims: tuple           # size symbols or ints
    dtype: torch.dtype
    grad: bool = False
    transposed: bool = False  # made non-contiguous: the last two dims swapped in memory
    kind: str = "randn"   # randn | index | mask

    def make(self, sizes, gen: torch.Generator):
        shape = [sizes[d] if isinstance(d, str) else d for d in self.dims]
        if self.kind == "index":
            return torch.randint(0, INDEX_BOUND, shape, generator=gen)
        if self.kind == "mask":
            return torch.rand(shape, generator=gen) > 0.5
        phys = list(shape)
        transposed = self.transposed and len(phys) >= 2
        if transposed:
            phys[-1], phys[-2] = phys[-2], phys[-1]
        t = torch.randn(phys, generator=gen)
        t = t + 0.05 * torch.sign(t)  # never exactly zero, away from 0 for comparisons
        if transposed:
            t = t.transpose(-1, -2)
        return t.to(self.dtype).requires_grad_(self.grad)


@dataclass
class Program:
    seed: int
    inputs: list
    lines: list
    returns: str
    backend: str = "jit"  # jit | compile
    source: str = ""
    fn: object = None
    reference_dtype: object = None
    low: object = None  # the lowest float precision the program computes in, if below fp32

    def __post_init__(self):
        args = ", ".join(i.name for i in self.inputs)
        body = "".join(f"    {ln}\n" for ln in self.lines)
        self.source = f"def fuzz_fn({args}):\n{body}    return {self.returns}\n"
        self.fn = compile_source(self.source, self.seed)
        text = self.source + " ".join(str(i.dtype) for i in self.inputs)
        self.low = (torch.bfloat16 if "bfloat16" in text else
                    torch.float16 if ("float16" in text or "half" in text) else None)

    def describe(self) -> str:
        ins = ", ".join(f"{i.name}: {list(i.dims)} {i.dtype}{' grad' if i.grad else ''}"
                        f"{' transposed' if i.transposed else ''}{' ' + i.kind if i.kind != 'randn' else ''}"
                        for i in self.inputs)
        return f"# seed {self.seed}, backend {self.backend}\n# inputs {ins}\n{self.source}"


def compile_source(source: str, seed: int):
    namespace = {"torch": torch, "F": F}
    code = compile(source, f"<fuzz_jit {seed}>", "exec")
    exec(code, namespace)
    return namespace["fuzz_fn"]


class _Builder:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.seed = seed
        self.inputs: list[Input] = []
        self.lines: list[str] = []
        self.vars: dict[str, list] = {}   # name -> example value per shape set
        self.leaf: set[str] = set()       # inputs: exact values, safe for comparisons and int casts
        self.count = 0
        gen = torch.Generator().manual_seed(seed)
        self.gen = gen

    def add_input(self, inp: Input):
        self.inputs.append(inp)
        self.vars[inp.name] = [inp.make(s, self.gen) for s in SHAPE_SETS]
        if inp.kind == "randn":
            self.leaf.add(inp.name)

    def try_line(self, expr: str) -> str | None:
        name = f"t{self.count}"
        ns = {"torch": torch, "F": F}
        values = []
        for k in range(len(SHAPE_SETS)):
            env = dict(ns, **{v: vals[k] for v, vals in self.vars.items()})
            try:
                with torch.no_grad():
                    out = eval(expr, env)
            except Exception:
                return None
            if not isinstance(out, torch.Tensor) or out.numel() == 0 or out.numel() > 20000:
                return None
            if out.is_floating_point() and not torch.isfinite(out).all():
                return None
            if out.is_floating_point() and out.abs().max() > 1e4:
                return None
            values.append(out)
        self.count += 1
        self.vars[name] = values
        self.lines.append(f"{name} = {expr}")
        return name

    # picking operands
    def pick(self, pred=lambda v: True, recent=True):
        names = [n for n in self.vars if pred(self.vars[n][0])]
        if not names:
            return None
        if recent and self.rng.random() < 0.6:
            return names[-1] if self.rng.random() < 0.5 else self.rng.choice(names[-3:])
        return self.rng.choice(names)

    def floats(self):
        return lambda t: t.is_floating_point()


def _unary(b: _Builder, v: str) -> str:
    r = b.rng
    return r.choice([
        f"torch.exp({v}.clamp(-4, 4))", f"torch.log({v}.abs() + 0.5)", f"torch.sigmoid({v})",
        f"torch.tanh({v})", f"F.gelu({v})", f"F.gelu({v}, approximate='tanh')", f"F.silu({v})",
        f"F.softplus({v})", f"{v}.pow(2)", f"({v}.abs() + 0.1).pow(1.5)", f"torch.rsqrt({v}.abs() + 1)",
        f"torch.sqrt({v}.abs() + 0.01)", f"{v}.clamp(min=-0.5, max=0.7)", f"{v}.clamp(min=0.1)",
        f"torch.relu({v})", f"-{v}", f"{v} * 0.5 + 1.25", f"2.0 - {v}", f"torch.where({v} > 0, {v}, 0.1 * {v})",
        f"torch.sin({v})", f"torch.erf({v})", f"torch.reciprocal({v}.abs() + 1)", f"{v}.float()",
        f"{v}.to(torch.bfloat16)", f"{v}.half()", f"F.leaky_relu({v}, 0.2)", f"F.elu({v})",
        f"torch.abs({v})", f"{v} / 3", f"{v} ** 3", f"torch.nan_to_num({v})", f"F.hardtanh({v})",
        f"torch.clamp({v}, -1.0, 1.0) * {v}", f"torch.exp2({v}.clamp(-3, 3))", f"torch.expm1({v}.clamp(max=2))",
        f"torch.log1p({v}.abs())", f"torch.square({v})", f"F.relu6({v} * 3)", f"F.mish({v})",
    ])


def _binary(b: _Builder, a: str, c: str) -> str:
    return b.rng.choice([
        f"{a} + {c}", f"{a} * {c}", f"{a} - {c}", f"{a} / ({c}.abs() + 1)", f"torch.maximum({a}, {c})",
        f"torch.minimum({a}, {c})", f"torch.where({a} > {c}, {a}, {c})", f"{a} * torch.sigmoid({c})",
        f"torch.addcmul({a}, {c}, {c}, value=0.5)", f"torch.lerp({a}, {c}, 0.3)",
        f"{a} + 2 * {c}", f"torch.atan2({a}, {c}.abs() + 0.5)",
    ])


def _reduction(b: _Builder, v: str, ndim: int) -> str:
    r = b.rng
    d = r.randrange(-ndim, ndim) if ndim else 0
    k = r.choice([True, False])
    return r.choice([
        f"{v}.sum({d}, keepdim={k})", f"{v}.mean({d}, keepdim={k})", f"{v}.amax({d}, keepdim={k})",
        f"{v}.amin({d}, keepdim={k})", f"{v}.var({d}, keepdim={k})", f"{v}.std({d}, keepdim={k})",
        f"{v}.var({d}, keepdim={k}, correction=0)", f"torch.logsumexp({v}, {d}, keepdim={k})",
        f"torch.softmax({v}, {d})", f"torch.log_softmax({v}, {d})", f"{v}.softmax({d}, dtype=torch.float32)",
        f"{v}.sum()", f"{v}.mean()", f"{v}.float().sum({d}, keepdim={k})", f"{v}.max({d}).values",
        f"torch.sum({v}, dim=({d}, -1))" if ndim >= 2 else f"{v}.sum(-1)", f"{v}.norm(dim=-1)",
        f"{v}.prod({d})" if ndim else f"{v}.prod()",
    ])


def _norm(b: _Builder, v: str) -> str:
    r = b.rng
    weights = [i.name for i in b.inputs if i.kind == "randn" and len(i.dims) == 1]
    w = r.choice(weights) if weights else None
    opts = [f"F.layer_norm({v}, {v}.shape[-1:])",
            f"{v} * torch.rsqrt({v}.pow(2).mean(-1, keepdim=True) + 1e-6)",
            f"({v}.float() * torch.rsqrt({v}.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to({v}.dtype)",
            f"({v} - {v}.mean(-1, keepdim=True)) / ({v}.std(-1, keepdim=True) + 1e-3)",
            f"F.normalize({v}, dim=-1)"]
    if w:
        opts += [f"F.layer_norm({v}, {v}.shape[-1:], {w}, {w} * 0.5)",
                 f"F.rms_norm({v}, {v}.shape[-1:], {w})",
                 f"{v} * torch.rsqrt({v}.pow(2).mean(-1, keepdim=True) + 1e-5) * {w}"]
    return r.choice(opts)


def _view(b: _Builder, v: str, t: torch.Tensor) -> str:
    r = b.rng
    n = t.dim()
    opts = [f"{v}.unsqueeze(0)", f"{v}.unsqueeze(-1)", f"{v}.reshape(-1)", f"{v}.flip(-1)",
            f"{v}.contiguous()", f"{v}[..., 1:]", f"{v}[..., :-1]", f"{v}[..., ::2]",
            f"{v}.expand(2, *{v}.shape)", f"torch.cat([{v}, {v} * 2], -1)", f"torch.stack([{v}, -{v}])",
            f"torch.stack([{v}, {v}.exp().clamp(max=5)], -1)", f"{v}.view(-1)"]
    if n >= 2:
        opts += [f"{v}.transpose(0, 1)", f"{v}.transpose(-1, -2)", f"{v}.t()" if n == 2 else f"{v}.mT",
                 f"{v}.permute({', '.join(map(str, r.sample(range(n), n)))})",
                 f"{v}.reshape({v}.shape[0], -1)", f"{v}.flatten(0, 1)", f"{v}[1:, :]", f"{v}[:, 2:5]",
                 f"torch.cat([{v}, {v}[:1]], 0)", f"{v}.flip(0)", f"{v}.flip(0, -1)", f"{v}[:, None]",
                 f"{v}.unflatten(0, ({v}.shape[0], 1))", f"{v}.view({v}.shape[0], 1, -1)",
                 f"{v}.unbind(0)[0]", f"{v}.narrow(-1, 1, 2)", f"{v}.select(0, 1)", f"{v}[0]",
                 f"{v}.roll(1, -1)", f"{v}.repeat(2, 1{', 1' * (n - 2)})", f"{v}.tril()",
                 f"{v}.split(2, -1)[0]", f"{v}.chunk(2, 0)[-1]"]
    if n >= 1 and t.shape[0] == 1:
        opts.append(f"{v}.squeeze(0)")
    if n >= 1:
        opts.append(f"{v}.unsqueeze(1).squeeze(1)")
    return r.choice(opts)


def _index(b: _Builder, v: str, t: torch.Tensor) -> str | None:
    idx = [i.name for i in b.inputs if i.kind == "index"]
    if not idx:
        return None
    i = idx[0]
    return b.rng.choice([
        f"{v}.index_select(-1, {i})", f"{v}.index_select(0, {i})", f"{v}[..., {i}]", f"{v}[{i}]",
        f"torch.gather({v}, -1, {i}.expand(*{v}.shape[:-1], {i}.shape[0]))",
        f"{v}.gather(-1, {i}[:1].expand(*{v}.shape[:-1], 1)).squeeze(-1)",
        f"torch.take_along_dim({v}, {i}.expand(*{v}.shape[:-1], {i}.shape[0]), -1)",
    ])


def _matmul(b: _Builder, v: str, t: torch.Tensor) -> str:
    mats = [i.name for i in b.inputs if i.kind == "randn" and len(i.dims) == 2]
    opts = [f"{v} @ {v}.transpose(-1, -2)" if t.dim() >= 2 else f"{v} @ {v}",
            f"torch.matmul({v}.transpose(-1, -2), {v})" if t.dim() >= 2 else f"torch.dot({v}, {v})"]
    for m in mats:
        opts += [f"{v} @ {m}.t()", f"F.linear({v}, {m})", f"torch.matmul({v}, {m})",
                 f"F.linear({v}, {m}[:3])", f"{v} @ {m}.to({v}.dtype).t()"]
    return b.rng.choice(opts)


def _cast(b: _Builder, v: str, leaf: bool) -> str:
    r = b.rng
    opts = [f"{v}.float()", f"{v}.to(torch.bfloat16)", f"{v}.to(torch.float16)", f"{v}.double().float()",
            f"{v}.to(torch.float16).to(torch.float32)"]
    if leaf:  # exact inputs (scaled by powers of 2): comparisons and truncations give the same
        # answer in fuser and eager, which keeps half-precision intermediates in fp32
        opts += [f"({v} > 0)", f"({v} <= 0.3).float()", f"{v}.to(torch.int32)", f"({v} * 4).long()",
                 f"({v} > 0).sum(-1)", f"torch.where({v} > 0, 1, 0)", f"({v} > 0) & ({v} < 1)",
                 f"({v} > 0).to({v}.dtype) * {v}", f"torch.where({v} < 0, {v}, 0.0)",
                 f"({v} * 2).to(torch.int32).to(torch.float32)", f"torch.floor({v} * 2)",
                 f"torch.sign({v})", f"({v} != {v}.flip(-1))", f"({v} > 0).any(-1)", f"({v} > 0).all()",
                 f"(({v} * 2).long() % 2 == 0)", f"({v} * 4).int() // 2", f"~({v} > 0)",
                 f"{v}.masked_fill({v} > 0.5, 0.25)", f"{v}.argmax(-1)", f"torch.round({v} * 4)",
                 f"{v}.argmin(0)", f"{v}.argmax()", f"torch.max({v}, -1)[0]", f"torch.min({v}, 0, keepdim=True)[1]"]
    return r.choice(opts)


def make_program(seed: int) -> Program:
    b = _Builder(seed)
    r = b.rng
    main_dtype = r.choices(FLOATS, weights=[6, 2, 2])[0]
    grad = r.random() < 0.5
    rank3 = r.random() < 0.3
    dims = ("A", "B", "N") if rank3 else ("B", "N")
    b.add_input(Input("x", dims, main_dtype, grad=grad, transposed=r.random() < 0.25))
    if r.random() < 0.6:
        b.add_input(Input("y", r.choice([dims, ("N",), ("B", 1), dims[-2:]]),
                          r.choice([main_dtype, main_dtype, torch.float32]), grad=grad and r.random() < 0.7,
                          transposed=r.random() < 0.2 and len(dims) >= 2))
    if r.random() < 0.4:
        b.add_input(Input("w", ("N",), main_dtype, grad=grad and r.random() < 0.7))
    if r.random() < 0.25:
        b.add_input(Input("m", (4, "N"), main_dtype, grad=grad and r.random() < 0.5))
    if r.random() < 0.2:
        b.add_input(Input("idx", (4,), torch.int64, kind="index"))
    if r.random() < 0.1:
        b.add_input(Input("mask", dims, torch.bool, kind="mask"))

    nops = r.randint(2, 7)
    attempts = 0
    while b.count < nops and attempts < 60:
        attempts += 1
        kind = r.choices(["unary", "binary", "reduction", "norm", "view", "index", "matmul", "cast",
                          "where_mask"], weights=[10, 8, 6, 2, 5, 1, 1, 3, 1])[0]
        v = b.pick(lambda t: t.is_floating_point())
        if v is None:
            v = b.pick()
        t = b.vars[v][0]
        if kind == "unary":
            expr = _unary(b, v)
        elif kind == "binary":
            c = b.pick(lambda t: t.is_floating_point(), recent=False) or v
            if r.random() < 0.2:
                c = r.choice(["1.5", "0.25", "3"])
            expr = _binary(b, v, c) if r.random() < 0.8 else _binary(b, c, v)
        elif kind == "reduction":
            expr = _reduction(b, v, t.dim())
        elif kind == "norm":
            expr = _norm(b, v)
        elif kind == "view":
            expr = _view(b, v, t)
        elif kind == "index":
            expr = _index(b, v, t)
        elif kind == "matmul":
            if r.random() < 0.5:
                expr = _matmul(b, v, t)
            else:
                continue
        elif kind == "cast":
            leafs = [n for n in b.leaf]
            lv = r.choice(leafs) if leafs and r.random() < 0.7 else v
            expr = _cast(b, lv, lv in b.leaf)
        else:
            masks = [n for n, vals in b.vars.items() if vals[0].dtype == torch.bool]
            if not masks:
                continue
            mk = r.choice(masks)
            expr = r.choice([f"torch.where({mk}, {v}, -{v})", f"{v}.masked_fill({mk}, -1.0)",
                             f"{v} * {mk}", f"torch.where({mk}, {v}, 0.5)"])
        if expr is not None:
            b.try_line(expr)

    names = list(b.vars)
    computed = [n for n in names if n.startswith("t")] or [names[0]]
    outs = [computed[-1]]
    if r.random() < 0.4 and len(computed) > 1:
        outs.append(r.choice(computed[:-1]))
    extra = r.random()
    if extra < 0.08:
        outs.append("x")
    elif extra < 0.16:
        outs.append("x.transpose(-1, -2)" if len(dims) >= 2 else "x[1:]")
    elif extra < 0.22:
        outs.append("x.shape[-1]")
    elif extra < 0.26:
        outs.append("None")
    elif extra < 0.30:
        outs.append("3")
    returns = outs[0] if len(outs) == 1 and r.random() < 0.7 else "(" + ", ".join(outs) + ",)"
    prog = Program(seed, b.inputs, b.lines, returns,
                   backend="compile" if r.random() < 0.25 else "jit",
                   reference_dtype=torch.float64 if main_dtype != torch.float32 else None)
    if prog.reference_dtype is not None and not _reference_runs(prog):
        prog.reference_dtype = None
    return prog


def _reference_runs(prog: Program) -> bool:
    """Whether eager runs the program on inputs in its reference dtype: a cast to a half type
    inside it can meet a float64 operand where eager refuses mixed dtypes (layer_norm)."""
    args = [i.make(SHAPE_SETS[0], torch.Generator().manual_seed(0)) for i in prog.inputs]
    try:
        prog.fn(*[a.detach().to(prog.reference_dtype) if a.is_floating_point() else a for a in args])
    except RuntimeError:
        return False
    return True


def _compare_plain(got, want):
    """Outputs that are not tensors (ints, None) compare equal; tensors by dtype tolerances."""
    g, w = as_tuple(got), as_tuple(want)
    assert len(g) == len(w), (len(g), len(w))
    tg = [a for a in g if isinstance(a, torch.Tensor)]
    tw = [a for a in w if isinstance(a, torch.Tensor)]
    assert [type(a) for a in g] == [type(a) for a in w], ([type(a) for a in g], [type(a) for a in w])
    assert [a for a in g if not isinstance(a, torch.Tensor)] == [a for a in w if not isinstance(a, torch.Tensor)]
    return tg, tw


def _close(actual, expected, reference, low):
    """assert_close_to_eager, except that an fp32 result of a program computing in a half type
    (fuser keeps half intermediates in fp32 where eager rounds each) gets that type's tolerance,
    or the reference rule when there is a float64 reference."""
    for k, (a, e) in enumerate(zip(actual, expected)):
        r = None if reference is None else reference[k]
        # an fp16 result of values that passed through bf16 (a cast in the program) is known to
        # bf16's resolution: a rounding there may fall either way (seed 900690)
        through_bf16 = low is torch.bfloat16 and e.dtype == torch.float16 and r is None
        if low is not None and (e.dtype == torch.float32 or through_bf16):
            assert a.dtype == e.dtype and a.shape == e.shape, (a.dtype, a.shape, e.dtype, e.shape)
            if r is not None and r.dtype == torch.float64:
                err = (a.double() - r).abs().max().item()
                eager_err = (e.double() - r).abs().max().item()
                scale = r.abs().max().item() + 1e-6
                assert err <= 2.5 * eager_err + 1e-2 * scale, (err, eager_err, scale)
            else:
                rtol, atol = TOL[low]
                torch.testing.assert_close(a, e, rtol=rtol, atol=atol)
        else:
            assert_close_to_eager(a, e, r)


def _grad_check(fn, compiled, args, reference_dtype, low=None):
    """check_forward_backward from jit_helpers, with unused inputs allowed (their gradient must
    be None in both) and non-tensor outputs compared for equality."""
    ours, theirs = clone_args(args), clone_args(args)
    got, want = compiled(*ours), fn(*theirs)
    tg, tw = _compare_plain(got, want)
    high = None
    if reference_dtype is not None:
        hi_args = [a.detach().to(reference_dtype).requires_grad_(a.requires_grad)
                   if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
        high = [o for o in as_tuple(fn(*hi_args)) if isinstance(o, torch.Tensor)]
    _close(tg, tw, high, low)
    wrt = [k for k, a in enumerate(args) if isinstance(a, torch.Tensor) and a.requires_grad]
    pairs = [(o, e) for o, e in zip(tg, tw) if e.requires_grad]
    assert [o.requires_grad for o in tg] == [e.requires_grad for e in tw]
    if not wrt or not pairs:
        return
    grads = [torch.randn_like(e) for _, e in pairs]
    g_ours = torch.autograd.grad([o for o, _ in pairs], [ours[k] for k in wrt], grads, allow_unused=True)
    g_eager = torch.autograd.grad([e for _, e in pairs], [theirs[k] for k in wrt], grads, allow_unused=True)
    assert [g is None for g in g_ours] == [g is None for g in g_eager]
    g_ours = tuple(g for g in g_ours if g is not None)
    g_eager = tuple(g for g in g_eager if g is not None)
    g_high = None
    if high is not None:
        hpairs = [h for h, e in zip(high, tw) if e.requires_grad]
        hi_in = [hi_args[k] for k in wrt]
        g_high = torch.autograd.grad(hpairs, hi_in, [g.to(reference_dtype) for g in grads], allow_unused=True)
        g_high = tuple(g for g in g_high if g is not None)
    _close(g_ours, g_eager, g_high, low)


def run_program(prog: Program, calls: int = 2):
    """Compile and compare; raises AssertionError (with the program) or the error fuser raised."""
    import fuser
    torch._dynamo.reset() if prog.backend == "compile" else None
    if prog.backend == "compile":
        compiled = torch.compile(prog.fn, backend="fuser", dynamic=True)
    else:
        compiled = fuser.jit(prog.fn)
    gen = torch.Generator().manual_seed(prog.seed + 1)
    order = [0] * calls + [1, 2][: max(1, calls - 1)]
    for k in order:
        args = [i.make(SHAPE_SETS[k], gen) for i in prog.inputs]
        _grad_check(prog.fn, compiled, args, prog.reference_dtype, prog.low)
    with torch.no_grad():
        for k in (0, 1):
            args = [i.make(SHAPE_SETS[k], gen) for i in prog.inputs]
            got, want = compiled(*clone_args(args)), prog.fn(*clone_args(args))
            tg, tw = _compare_plain(got, want)
            high = None
            if prog.reference_dtype is not None:
                high = tuple(t for t in as_tuple(prog.fn(*[
                    a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]))
                    if isinstance(t, torch.Tensor))
            _close(tg, tw, high, prog.low)


def run_in_forms(seed: int) -> None:
    """make_program and run_program on FORM_SHAPE_SETS, under FORM_PROFILES[seed % len]."""
    from fuser.schedulers import heuristics
    from tests.fuzz_fusions import FORM_PROFILES

    global SHAPE_SETS
    profile = FORM_PROFILES[seed % len(FORM_PROFILES)]
    saved = SHAPE_SETS, {name: getattr(heuristics, name) for name in profile}
    SHAPE_SETS = FORM_SHAPE_SETS
    for name, value in profile.items():
        setattr(heuristics, name, value)
    try:
        prog = make_program(seed)
        try:
            run_program(prog)
        except Exception as e:
            raise AssertionError(f"under {profile}:\n{prog.describe()}") from e
    finally:
        SHAPE_SETS = saved[0]
        for name, value in saved[1].items():
            setattr(heuristics, name, value)


def run_seed(seed: int) -> None:
    """make_program and run_program; a failure raises with the program described."""
    prog = make_program(seed)
    try:
        run_program(prog)
    except Exception as e:
        raise AssertionError(prog.describe()) from e


def main(argv):
    import warnings
    warnings.filterwarnings("ignore")
    start, count = int(argv[1]), int(argv[2])
    run = run_in_forms if "--forms" in argv else run_seed
    failures = 0
    for seed in range(start, start + count):
        try:
            run(seed)
            print(f"seed {seed}: ok", flush=True)
        except AssertionError as e:
            failures += 1
            cause = e.__cause__
            print(f"===== seed {seed}: FAIL {type(cause).__name__}: {str(cause)[:800]}\n{e}", flush=True)
            if "-v" in argv:
                traceback.print_exception(cause)
    print(f"{count - failures}/{count} clean")


if __name__ == "__main__":
    main(sys.argv)
