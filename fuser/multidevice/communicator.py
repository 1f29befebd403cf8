"""Collectives over torch.distributed, or over nothing in a single process.

`Communicator.default()` uses the default process group when the program has initialized one;
otherwise, under torchrun (WORLD_SIZE in the environment), it initializes one from the usual
variables with NCCL for CUDA tensors and gloo for CPU tensors; otherwise it is a world of one
process, where every collective over a one-device team is a local copy.

Every collective takes the *team* (the ranks taking part, in mesh order) and returns a Pending
whose `wait()` finishes it. A failure or timeout becomes a CollectiveError naming the
collective, the team and this rank. Team order is mesh order: the k-th chunk of a gather comes
from team[k], whatever the ranks' numbers.
"""
from __future__ import annotations

import atexit
import datetime
import os
import threading
from typing import Callable, Optional, Sequence

import torch

from ..errors import FuserError

_TIMEOUT_ENV = "FUSER_COLLECTIVE_TIMEOUT"  # seconds; the process group's timeout
# whether a collective of this process failed: the group fuser made is then left to the
# process's end, since tearing it down may wait on the peer that never answered
_COLLECTIVE_FAILED = False


def _destroy_at_exit() -> None:
    """Tear down the process group fuser initialized, at exit: left to the interpreter's end,
    gloo's teardown aborted a run that had succeeded now and then ("terminate called without an
    active exception", torchrun's rc 1)."""
    import torch.distributed as dist

    if not _COLLECTIVE_FAILED and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


class CollectiveError(FuserError):
    """A collective failed or timed out; the message names it, its ranks and this rank."""


class Pending:
    """A posted collective. `wait()` blocks (CPU) or orders the current stream after it (CUDA),
    then runs the step that moves the result into place, if any."""

    __slots__ = ("works", "finish", "label", "_comm")

    def __init__(self, comm: "Communicator", label: str, works=(), finish: Optional[Callable] = None):
        self._comm, self.label, self.works, self.finish = comm, label, works, finish

    def wait(self) -> None:
        for w in self.works:
            self._comm._guard(self.label, w.wait)
        if self.finish is not None:
            self.finish()


def _timeout() -> datetime.timedelta:
    """How long a collective, or the making of a group, may wait (FUSER_COLLECTIVE_TIMEOUT)."""
    raw = os.environ.get(_TIMEOUT_ENV, "").strip() or "600"
    try:
        seconds = float(raw)
    except ValueError:
        seconds = float("nan")
    # torch counts whole milliseconds, and its deadline overflows past about 9e9 s
    if not 0.001 <= seconds <= 1e9:
        raise CollectiveError(f"{_TIMEOUT_ENV}={raw!r}: expected a positive number of seconds "
                              f"(from 0.001 to 1e9)")
    return datetime.timedelta(seconds=seconds)


class Communicator:
    _default: Optional["Communicator"] = None
    _lock = threading.Lock()

    def __init__(self, group=None, rank: int = 0, world_size: int = 1, backend: str = "none"):
        """`group`: a torch.distributed process group (None: the default group when
        torch.distributed is initialized, else a world of one process)."""
        self.rank, self.world_size, self.backend = rank, world_size, backend
        self.group = group
        self._subgroups: dict[tuple[int, ...], object] = {}
        self._checked: dict[tuple, tuple[tuple[int, ...], str]] = {}  # (name, team) -> (team, label)

    # -- construction ---------------------------------------------------------------------

    @classmethod
    def default(cls) -> "Communicator":
        found = cls._default
        if found is not None and found.is_distributed:
            return found  # a process group, once made, stays the default: no lock per call
        with cls._lock:
            if cls._default is None or not cls._default._still_valid():
                cls._default = cls._create()
            return cls._default

    @classmethod
    def from_group(cls, group) -> "Communicator":
        """A communicator over an existing process group (for example one with a short timeout)."""
        import torch.distributed as dist

        return cls(group, dist.get_rank(group), dist.get_world_size(group), dist.get_backend(group))

    @classmethod
    def _create(cls) -> "Communicator":
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return cls(None, dist.get_rank(), dist.get_world_size(), str(dist.get_backend()))
        if dist.is_available() and int(os.environ.get("WORLD_SIZE", "1")) > 1:
            backend = "gloo"
            local_rank = int(os.environ.get("LOCAL_RANK", "0"))
            if (torch.cuda.is_available() and dist.is_nccl_available()
                    and local_rank < torch.cuda.device_count()):
                torch.cuda.set_device(local_rank)  # one GPU per process, as NCCL wants
                backend = "cpu:gloo,cuda:nccl"
            timeout = _timeout()  # (a bad setting named as such, not as a failed rendezvous)
            try:
                dist.init_process_group(backend=backend, timeout=timeout)
                atexit.register(_destroy_at_exit)
            except Exception as err:  # noqa: BLE001 - any rendezvous failure
                raise CollectiveError(
                    f"initializing torch.distributed ({backend}) from torchrun's environment "
                    f"(RANK={os.environ.get('RANK')}, WORLD_SIZE={os.environ.get('WORLD_SIZE')}, "
                    f"MASTER_ADDR={os.environ.get('MASTER_ADDR')}, "
                    f"MASTER_PORT={os.environ.get('MASTER_PORT')}) failed: {err}") from err
            return cls(None, dist.get_rank(), dist.get_world_size(), backend)
        return cls()

    def _still_valid(self) -> bool:
        if self.world_size == 1 and self.backend == "none":
            import torch.distributed as dist

            return not (dist.is_available() and dist.is_initialized())
        return True

    @property
    def is_distributed(self) -> bool:
        return self.backend != "none"

    def __repr__(self) -> str:
        return f"Communicator(rank={self.rank}, world_size={self.world_size}, backend={self.backend})"

    # -- teams ----------------------------------------------------------------------------

    def _team_group(self, team: tuple[int, ...]):
        """The process group of `team`: the communicator's own group when the team is all of
        it; otherwise a subgroup made on first use. Only the team's members create it (local
        synchronization), so the teams of a 2-D mesh never wait for each other."""
        import torch.distributed as dist

        if len(team) == self.world_size:
            return self.group
        key = tuple(sorted(team))
        found = self._subgroups.get(key)
        if found is None:
            # (torch's own default for a new group is 30 minutes, whatever the world's is)
            timeout = _timeout()
            try:
                found = dist.new_group([self._global(r) for r in key], timeout=timeout,
                                       use_local_synchronization=True)
            except Exception as err:  # noqa: BLE001 - a member that never came, a store timeout
                raise CollectiveError(
                    f"making the process group of ranks {key} failed: {err}. Every member must "
                    f"reach it, having made as many groups before it as the others (torch names a "
                    f"group by its ranks and that count): a fusion on a mesh that shares only some "
                    f"of these ranks, run before, breaks that") from err
            self._subgroups[key] = found
        return found

    def _global(self, rank: int) -> int:
        """The global rank of a rank of this communicator's group (mesh ids are the latter)."""
        if self.group is None:
            return rank
        import torch.distributed as dist

        return dist.get_global_rank(self.group, rank)

    def _check_team(self, name: str, team: Sequence[int]) -> tuple[int, ...]:
        team = tuple(team)
        if self.rank not in team:
            raise CollectiveError(f"{name} over ranks {team}: this process (rank {self.rank}) is "
                                  f"not one of them")
        if max(team) >= self.world_size:
            raise CollectiveError(
                f"{name} over ranks {team} needs {max(team) + 1} processes, but this world has "
                f"{self.world_size}; launch with torchrun --nproc-per-node={max(team) + 1}")
        return team

    def _guard(self, label: str, fn: Callable):
        try:
            return fn()
        except FuserError:
            raise
        except Exception as err:  # noqa: BLE001 - gloo and NCCL raise RuntimeError and friends
            global _COLLECTIVE_FAILED
            _COLLECTIVE_FAILED = True
            raise CollectiveError(f"{label} failed on rank {self.rank}: {err}") from err

    def _label(self, name: str, team) -> str:
        return f"{name} over ranks {tuple(team)} ({self.backend})"

    def _setup(self, name: str, team: Sequence[int]) -> tuple[tuple[int, ...], str]:
        """The checked team and the label of a collective, made once per (name, team)."""
        key = (name, team if type(team) is tuple else tuple(team))
        found = self._checked.get(key)
        if found is None:
            checked = self._check_team(name, key[1])
            found = self._checked[key] = (checked, self._label(name, checked))
        return found

    @staticmethod
    def _group_order(team: tuple[int, ...]) -> list[int]:
        """Process-group rank of each team member: groups number their ranks in sorted order."""
        ordered = sorted(team)
        return [ordered.index(r) for r in team]

    # -- collectives ----------------------------------------------------------------------

    def allreduce(self, tensor: torch.Tensor, team: Sequence[int], op: str = "sum",
                  async_op: bool = True) -> Pending:
        """Reduce `tensor` over the team, in place."""
        team, label = self._setup("allreduce", team)
        if len(team) == 1:
            return Pending(self, label)
        import torch.distributed as dist

        group = self._team_group(team)
        buf = tensor if tensor.is_contiguous() else tensor.contiguous()
        nans = _nan_flags(buf, op)  # taken before the collective overwrites buf
        works = _works(self._guard(label, lambda: dist.all_reduce(
            buf, op=_REDUCE_OPS[op](), group=group, async_op=async_op)))
        if nans is not None:
            works += _works(self._guard(label, lambda: dist.all_reduce(
                nans, op=dist.ReduceOp.MAX, group=group, async_op=async_op)))
        return Pending(self, label, works, _finish(buf, nans, None if buf is tensor else tensor))

    def allgather(self, out: torch.Tensor, inp: torch.Tensor, team: Sequence[int], axis: int,
                  async_op: bool = True) -> Pending:
        """`out` (the team's shards side by side along `axis`, in team order) from `inp`."""
        team, label = self._setup("allgather", team)
        if len(team) == 1:
            out.copy_(inp)
            return Pending(self, label)
        import torch.distributed as dist

        n = len(team)
        if axis == 0 and out.is_contiguous() and team == tuple(sorted(team)):
            buf, finish = out, None
        else:
            # the shards end to end on dim 0: gloo takes only that form (NCCL also a stacked one)
            buf = torch.empty((n * inp.shape[0], *inp.shape[1:]), dtype=inp.dtype, device=inp.device)
            order = self._group_order(team)

            def finish():
                got = buf.unflatten(0, (n, inp.shape[0]))[order]  # block k from team[k]
                out.copy_(got.movedim(0, axis).flatten(axis, axis + 1))
        src = inp.contiguous()
        work = self._guard(label, lambda: dist.all_gather_into_tensor(
            buf, src, group=self._team_group(team), async_op=async_op))
        return Pending(self, label, _works(work), finish)

    def reduce_scatter(self, out: torch.Tensor, inp: torch.Tensor, team: Sequence[int], axis: int,
                       op: str = "sum", async_op: bool = True) -> Pending:
        """`out` = this rank's block (along `axis`, blocks in team order) of the team's sum."""
        team, label = self._setup("reduce_scatter", team)
        if len(team) == 1:
            out.copy_(inp)
            return Pending(self, label)
        import torch.distributed as dist

        n = len(team)
        blocks = inp.unflatten(axis, (n, inp.shape[axis] // n)).movedim(axis, 0)
        order = self._group_order(team)
        src = torch.empty_like(blocks, memory_format=torch.contiguous_format)
        src[order] = blocks  # group rank g receives block k where order[k] == g
        buf = out if out.is_contiguous() else torch.empty_like(out, memory_format=torch.contiguous_format)
        group = self._team_group(team)
        flags = _nan_flags(src, op)
        works = _works(self._guard(label, lambda: dist.reduce_scatter_tensor(
            buf, _flat_blocks(src), op=_REDUCE_OPS[op](), group=group, async_op=async_op)))
        nans = None
        if flags is not None:
            nans = torch.empty(buf.shape, dtype=flags.dtype, device=flags.device)  # this rank's block
            works += _works(self._guard(label, lambda: dist.reduce_scatter_tensor(
                nans, _flat_blocks(flags), op=dist.ReduceOp.MAX, group=group, async_op=async_op)))
        return Pending(self, label, works, _finish(buf, nans, None if buf is out else out))

    def all_to_all(self, out: torch.Tensor, inp: torch.Tensor, team: Sequence[int], in_axis: int,
                   out_axis: int, async_op: bool = True) -> Pending:
        """From shards along `in_axis` to shards along `out_axis`: block k of `inp` along
        `out_axis` goes to team[k]; what team[k] sends lands as block k along `in_axis`."""
        team, label = self._setup("all_to_all", team)
        if len(team) == 1:
            out.copy_(inp)
            return Pending(self, label)
        import torch.distributed as dist

        n = len(team)
        order = self._group_order(team)
        blocks = inp.unflatten(out_axis, (n, inp.shape[out_axis] // n)).movedim(out_axis, 0)
        send = torch.empty_like(blocks, memory_format=torch.contiguous_format)
        send[order] = blocks
        recv = torch.empty_like(send)

        def finish():
            got = recv[order]  # block k from team[k], in team order
            out.copy_(got.movedim(0, in_axis).flatten(in_axis, in_axis + 1))
        work = self._guard(label, lambda: dist.all_to_all_single(
            recv, send, group=self._team_group(team), async_op=async_op))
        return Pending(self, label, _works(work), finish)

    def broadcast(self, tensor: torch.Tensor, team: Sequence[int], root: int,
                  async_op: bool = True) -> Pending:
        """`tensor` on every team member becomes the root's (`root` is a rank of the team)."""
        team, label = self._setup("broadcast", team)
        label += f" from rank {root}"
        if len(team) == 1:
            return Pending(self, label)
        import torch.distributed as dist

        group = self._team_group(team)
        buf = tensor if tensor.is_contiguous() else tensor.contiguous()
        src = self._global(root)
        work = self._guard(label, lambda: dist.broadcast(buf, src=src, group=group, async_op=async_op))
        finish = None if buf is tensor else (lambda: tensor.copy_(buf))
        return Pending(self, label, _works(work), finish)

    def agree(self, values: Sequence[int], team: Sequence[int], device) -> list[list[int]]:
        """Each team member's `values` (integers, as many on every member), in team order: one
        blocking allgather of int64s on `device` (NCCL takes CUDA tensors only)."""
        team = tuple(sorted(team))
        mine = torch.tensor(list(values), dtype=torch.int64, device=device)
        if len(team) == 1 or not len(values):
            return [mine.tolist()]
        out = torch.empty(len(team) * len(values), dtype=torch.int64, device=device)
        self.allgather(out, mine, team, 0, async_op=False).wait()
        return out.view(len(team), len(values)).tolist()

    def barrier(self) -> None:
        if self.is_distributed:
            import torch.distributed as dist

            self._guard(f"barrier over {self.world_size} ranks", lambda: dist.barrier(group=self.group))


def _works(work) -> tuple:
    """A synchronous collective (`async_op=False`) returns no work: it is already ordered (NCCL
    queued it on the current stream; gloo finished it)."""
    return () if work is None else (work,)


def _flat_blocks(blocks: torch.Tensor) -> torch.Tensor:
    """A reduce-scatter's input: the team's blocks end to end on dim 0."""
    return blocks.flatten(0, 1) if blocks.dim() > 1 else blocks


def _nan_flags(partial: torch.Tensor, op: str) -> Optional[torch.Tensor]:
    """For a max or min of floating values, where `partial` holds NaN, one byte an element;
    else None. gloo's MAX/MIN (NCCL's too, believed) keep a NaN only when it is the receiving
    rank's own, where torch.amax/amin give NaN if any element is NaN: a MAX of these flags over
    the team says where to put NaN back. The cost: a second collective, of one byte an element
    (a quarter of a float32 payload, half of a bfloat16 one), posted right after the first with
    no wait between; sum, product and integers pay nothing."""
    if op not in ("max", "min") or not partial.is_floating_point():
        return None
    return partial.isnan().to(torch.uint8)


def _finish(buf: torch.Tensor, nans: Optional[torch.Tensor], dest: Optional[torch.Tensor]):
    """The step after the wait, if any: NaN where a member's partial had one (`nans`: the MAX
    of the team's flags, this rank's block of it in a reduce-scatter), then `buf` copied into
    `dest` (the caller's tensor, when the collective needed a contiguous buffer)."""
    if nans is None and dest is None:
        return None

    def finish():
        if nans is not None:
            buf.masked_fill_(nans.bool(), float("nan"))
        if dest is not None:
            dest.copy_(buf)
    return finish


def _reduce(name: str):
    def get():
        import torch.distributed as dist

        return getattr(dist.ReduceOp, name)
    return get


_REDUCE_OPS = {"sum": _reduce("SUM"), "add": _reduce("SUM"), "max": _reduce("MAX"),
               "min": _reduce("MIN"), "mul": _reduce("PRODUCT")}
