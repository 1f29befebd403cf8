"""The collective steps of a host plan (see plan.py): each Communicate of the host program
becomes a closure that posts the collective for one iteration's chunk, and its Wait one that
finishes it (the wait, the copy into the chunk's destination, the output check)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch

from ..errors import FusionInputError, InternalError
from ..evaluate.evaluator import check_output
from ..multidevice.communication import Collective
from ..multidevice.communicator import Pending
from ..multidevice.sharding import mesh_index, team
from .nodes import Communicate, Wait

if TYPE_CHECKING:  # the compiler's types, for annotations only
    from .plan import Step, _Loop


class CommunicationSteps:
    """A mixin of plan.Compiler: it uses the compiler's slots (`read`, `write`, `slot`,
    `expected`), `dests`, `rank`, `table` and `sizes`."""

    def communicate(self, op: Communicate, loop: Optional[_Loop], blocking: bool) -> Step:
        """Post the collective; with `blocking` (its Wait comes right after), also wait for it,
        posting it synchronously (on NCCL: on the current stream, no events)."""
        c_ = op.comm
        members = team(c_.mesh, c_.parallel_type, self.rank)
        kin = self.read(c_.inputs[0], f"Communication {op.number}")
        out_tv = c_.outputs[0]
        kdst = self.slot(out_tv) if op.in_loop and id(out_tv) in self.dests else None
        reduce = c_.reduce.value if c_.reduce is not None else "sum"
        in_place, async_op = op.in_place, not blocking
        kind = c_.collective
        dtype = out_tv.dtype.to_torch()
        shapes = self.expected(out_tv, loop, op.in_loop)
        per_iteration = op.in_loop and loop is not None

        def buffer(c, i, inp, dst):
            if dst is not None:
                return dst
            return torch.empty(shapes[i] if per_iteration else shapes, dtype=dtype, device=inp.device)

        if kind is Collective.allreduce:
            def post(c, i, inp, dst):
                # (not in a view: its base, another value, would be overwritten)
                buf = inp if in_place and inp._base is None else (dst.copy_(inp) if dst is not None else inp.clone())
                return c.comm.allreduce(buf, members, reduce, async_op=async_op), buf
        elif kind is Collective.allgather:
            in_axis = c_.in_axis

            def post(c, i, inp, dst):
                result = buffer(c, i, inp, dst)
                return c.comm.allgather(result, inp, members, in_axis, async_op=async_op), result
        elif kind is Collective.reduce_scatter:
            out_axis = c_.out_axis

            def post(c, i, inp, dst):
                _check_even(c_, inp, out_axis, len(members))
                result = buffer(c, i, inp, dst)
                return c.comm.reduce_scatter(result, inp, members, out_axis, reduce, async_op=async_op), result
        elif kind is Collective.all_to_all:
            in_axis, out_axis = c_.in_axis, c_.out_axis

            def post(c, i, inp, dst):
                _check_even(c_, inp, out_axis, len(members))
                result = buffer(c, i, inp, dst)
                return c.comm.all_to_all(result, inp, members, in_axis, out_axis, async_op=async_op), result
        elif kind is Collective.shard:
            k, out_axis = mesh_index(c_.mesh, c_.parallel_type, self.rank), c_.out_axis

            def post(c, i, inp, dst):
                _check_even(c_, inp, out_axis, len(members))
                n = inp.shape[out_axis] // len(members)
                piece = inp.narrow(out_axis, k * n, n)
                result = dst.copy_(piece) if dst is not None else piece.clone(memory_format=torch.contiguous_format)
                return Pending(c.comm, "shard"), result
        elif kind is Collective.broadcast:
            if loop is None or op.loop_index != loop.index:
                raise InternalError(f"Communication {op.number}: a chunked broadcast outside its loop")
            per_rank = self.table.extent(op.loop_extent) // len(members)
            chunk = self.sizes(out_tv, self.table, True)[c_.out_axis]  # every chunk but a last
            in_axis, out_axis, name, me = c_.in_axis, c_.out_axis, c_.inputs[0].name, self.rank

            def post(c, i, inp, dst):
                result = buffer(c, i, inp, dst)
                if chunk * per_rank != inp.shape[in_axis]:
                    raise FusionInputError(
                        f"T{name} axis {in_axis}: {inp.shape[in_axis]} rows per rank do not split "
                        f"into {per_rank} stream chunks of {chunk}; gathering chunk by chunk needs "
                        f"each chunk on one rank")
                root = members[i // per_rank]
                if me == root:
                    rows = result.shape[out_axis]
                    result.copy_(inp.narrow(in_axis, (i % per_rank) * chunk, rows))
                return c.comm.broadcast(result, members, root, async_op=async_op), result
        else:
            raise InternalError(f"no host implementation of {kind}")

        if not blocking:
            number = op.number

            def communicate(c, i):
                inp = c.v[kin]
                dst = c.d[kdst] if kdst is not None else None
                pending, result = post(c, i, inp, dst)
                c.pending[number] = (pending, result, dst)
            return communicate

        finish = self._finish(op, loop)

        def communicate_and_wait(c, i):
            inp = c.v[kin]
            dst = c.d[kdst] if kdst is not None else None
            pending, result = post(c, i, inp, dst)
            finish(c, i, pending, result, dst)
        return communicate_and_wait

    def wait(self, op: Wait, loop: Optional[_Loop]) -> Step:
        finish, number = self._finish(op.communicate, loop), op.communicate.number

        def wait(c, i):
            found = c.pending.pop(number, None)
            if found is None:
                raise InternalError(f"Wait Communication {number} before it was posted")
            finish(c, i, *found)
        return wait

    def _finish(self, op: Communicate, loop: Optional[_Loop]):
        c_ = op.comm
        out_tv = c_.outputs[0]
        k = self.write(out_tv)
        want = self.expected(out_tv, loop, op.in_loop)
        dtype = out_tv.dtype.to_torch()
        in_loop, per_iteration = op.in_loop, op.in_loop and loop is not None
        label = c_.collective.value
        Tensor = torch.Tensor

        def finish(c, i, pending, result, dst):
            pending.wait()
            if dst is not None and result is not dst:
                result = dst.copy_(result)
            size = want[i] if per_iteration else want
            if not isinstance(result, Tensor) or result.shape != size or result.dtype != dtype:
                check_output(c_, out_tv, result, c.loop_ctx if in_loop else c.ctx)  # raises
            c.v[k] = result
            if c.trace is not None:
                c.trace(label, c_, [result])
        return finish


def _check_even(comm, inp, axis: int, n: int) -> None:
    """A collective that cuts `axis` of its input into one block per team member: a size the
    team does not divide is the user's (the input's extent), reported as such rather than as
    a torch error from the cut or a wrong-sized output."""
    if inp.shape[axis] % n:
        raise FusionInputError(
            f"{comm.collective.value} of T{comm.inputs[0].name}: axis {axis} of size "
            f"{inp.shape[axis]} does not split evenly into {n} shards on "
            f"{comm.parallel_type.value} of {comm.mesh!r}; device splits must divide evenly")
