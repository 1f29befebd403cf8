"""Random numbers in generated kernels (RNGOp). A mixin of KernelWriter.

Element i of an RNGOp's output, i its row-major index in that output, is drawn by Triton's
philox from key `seed` and counter `offset + i`: the numbers do not depend on the tile, the
block sizes, the launch's folding of axes, or on whether ATen computes them instead
(evaluate/philox.py spells the same operations). The index is computed as a load's offset is,
from the super-axis indices and strides of a dense row-major tensor of the output's extents
(the launcher's "rng_stride" arguments).
"""
from __future__ import annotations

from ..errors import InternalError
from ..evaluate.philox import (DOUBLE_HIGH_SHIFT, DOUBLE_LOW_SHIFT, DOUBLE_SCALE, NORMAL_MIN_UNIFORM,
                                TWO_PI)
from ..ir import DataType, RNGOp, RNGOpType, Scalar, UnaryOpType
from .math import unary_lowering
from .scope import Scope
from .types import compute_type


class RandomEmitter:
    def declare_rng_params(self) -> None:
        from .kernel import ArgSpec

        for e in self.plan.exprs:
            if isinstance(e, RNGOp):
                for j in self.super_axes_of(e.out):
                    self.add_param(f"R{e.out.name}_stride{j}", ArgSpec("rng_stride", e.out, j))

    def emit_rng(self, scope: Scope, e: RNGOp) -> None:
        if not e.seeded:
            raise InternalError(f"{e.op_name} without a seed reached a kernel (passes/seed_random.py seeds it)")
        out = e.out
        name = self.tname(out)
        js = self.super_axes_of(out)
        for j in js:
            scope.owner_of_dim(self.super_dim[j])  # the index must be live in this scope
        index = " + ".join(f"{self.index_code(j)} * R{out.name}_stride{j}" for j in js)
        index = f"({index}).to(tl.int64)" if index else self.block("[1, 1]", "0", "tl.int64")
        seed, offset = (self.rng_integer(scope, v) for v in (e.seed, e.offset))
        scope.lines.append(f"{name}_counter = {index} + {offset}")
        compute = compute_type(out.dtype)
        a, b = (self.operand(scope, v, out.dtype) for v in e.params)
        if compute == "tl.float64":  # 53 random bits a uniform, as a double holds
            w = [f"{name}_w{k}" for k in range(4)]
            scope.lines.append(f"{', '.join(w)} = tl.randint4x({seed}, {name}_counter)")
            if e.kind is RNGOpType.uniform:
                value = self.uniform_double(w[0], w[1])
                code = value if e.standard else f"({a} + ({b} - {a}) * {value})"
            else:
                scope.lines.append(f"{name}_n = {self.standard_normal_double(w)}")
                code = f"{name}_n" if e.standard else f"({a} + {b} * {name}_n)"
        elif e.kind is RNGOpType.uniform:
            value = f"tl.rand({seed}, {name}_counter)"
            if compute != "tl.float32":
                value = f"{value}.to({compute})"
            code = value if e.standard else f"({a} + ({b} - {a}) * {value})"
        else:
            scope.lines.append(f"{name}_u1, {name}_u2, {name}_u3, {name}_u4 = tl.rand4x({seed}, {name}_counter)")
            scope.lines.append(f"{name}_n = {self.standard_normal(f'{name}_u1', f'{name}_u2')}")
            value = f"{name}_n" if compute == "tl.float64" else f"{name}_n.to({compute})"
            code = value if e.standard else f"({a} + {b} * {value})"
        self.bind(scope, out, code)
        narrowed = out.dtype in (DataType.Half, DataType.BFloat16)
        if narrowed:  # held as its storage holds it
            scope.lines.append(f"{name} = {self.narrow(name, out.dtype)}.to(tl.float32)")
        if e.kind is RNGOpType.uniform and (narrowed or not e.standard):
            # a draw rounded up to the upper bound is the lower bound, as eager's GPU uniform
            # does: [a, b) holds (philox.random_tensor spells the same)
            if e.standard:
                upper, lower = "1.0", "0.0"
            else:  # (b may be a literal: made a block to be narrowed as the draw was)
                block = f"(tl.zeros_like({name}) + {b})"
                upper, lower = (f"{self.narrow(block, out.dtype)}.to(tl.float32)" if narrowed else b), a
            scope.lines.append(f"{name} = tl.where({name} == {upper}, {lower}, {name})")

    def rng_integer(self, scope: Scope, v) -> str:
        """A seed or offset as an int64 block (a negative literal or an int32 argument, widened
        first: philox reads the seed's 64 bits)."""
        code = self.operand(scope, v, DataType.Int)
        return self.block("[1, 1]", code, "tl.int64") if isinstance(v, Scalar) and v.is_constant else code

    def uniform_double(self, high: str, low: str) -> str:
        """An fp64 in [0, 1) of two uint32 words' 53 bits (evaluate/philox.py uniform_double)."""
        return (f"((({high} >> {DOUBLE_HIGH_SHIFT}).to(tl.int64) * {2 ** (32 - DOUBLE_LOW_SHIFT)} "
                f"+ ({low} >> {DOUBLE_LOW_SHIFT}).to(tl.int64)).to(tl.float64) * {DOUBLE_SCALE!r})")

    def standard_normal_double(self, words: list) -> str:
        """N(0, 1) in fp64 from four words: Box-Muller on two 53-bit uniforms."""
        u1 = f"tl.maximum({self.uniform_double(words[0], words[1])}, {DOUBLE_SCALE!r})"
        return self.box_muller(u1, self.uniform_double(words[2], words[3]))

    def standard_normal(self, first: str, second: str) -> str:
        """N(0, 1) in fp64 from two fp32 uniforms: Box-Muller as tl.randn, with the
        transcendental part in fp64 (evaluate/philox.py)."""
        return self.box_muller(f"tl.maximum({first}, {NORMAL_MIN_UNIFORM!r}).to(tl.float64)",
                               f"{second}.to(tl.float64)")

    def box_muller(self, u1: str, u2: str) -> str:
        """sqrt(-2 log u1) cos(2 pi u2) of two fp64 uniforms, u1 > 0."""
        log, sqrt, cos = (unary_lowering(k, self.target) for k in (UnaryOpType.log, UnaryOpType.sqrt, UnaryOpType.cos))
        radius = sqrt.format(x=f"(-2.0 * {log.format(x=u1)})")
        return f"{radius} * {cos.format(x=f'({TWO_PI!r} * {u2})')}"
