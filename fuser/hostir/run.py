"""Running a host program: HostRuntime is the per-signature runtime of a multi-device or
stream-parallel fusion (FusionExecutorCache picks it), HostRunner executes the program.

The runner compiles the program once per set of sizes (the binding table's values, the rank,
the device) into a Plan (`plan.py`): closures whose sizes, chunk bounds, expected output sizes,
scalars and teams are constants. A call then runs those closures over a list of values. On
CUDA, each iteration of a stream loop runs on its own stream (a pool indexed by
`i % numberOfStreams`, `streams.py`), after waiting for the caller's stream; the caller's
stream waits for all of them after the loop. On the CPU the same steps run in order.
"""
from __future__ import annotations

import hashlib
from typing import Any, Callable, Optional, Sequence

import torch

from ..codegen import KernelLauncher, target_for
from ..codegen.kernel import can_emit
from ..dump import dump_flags, env_switch
from ..errors import ExtentConflictError, FuserError, FusionInputError, UnsupportedError
from ..evaluate.binding import BindingTable
from ..ir import DeviceMesh, Fusion, Scalar, TensorView
from ..ir.symbolic import is_symbol
from ..multidevice.communicator import Communicator, Pending
from ..multidevice.sharding import LocalSizes
from ..schedulers.plan import plan_kernel
from ..segment import segment_fusion
from .lower import lower
from .nodes import Evaluate, ForLoop, HostProgram, LaunchKernel
from .plan import Plan, compile_program, run_plan
from .streams import MAX_STREAMS, streams_for

# (what ran: "Evaluate", "LaunchKernel", a collective's name; its expr; the values it produced)
Trace = Callable[[str, Any, list], None]

__all__ = ["HostRunner", "HostRuntime", "MAX_STREAMS", "ShapeOnlyCommunicator", "Trace"]


class HostRunner:
    def __init__(self, program: HostProgram, device: torch.device, streams=None):
        """`streams`: the stream calls to make (default: CUDA's on a CUDA device, none else)."""
        self.program = program
        self.device = device
        self.streams = streams if streams is not None else streams_for(device)
        self._meshes = _meshes_of(program)
        self._checked_rank: Optional[tuple[int, int]] = None  # (world size, rank) the meshes fit
        self.sizes = LocalSizes()  # every tensor's local sizes, compiled on first use
        self._plans: dict[tuple, Plan] = {}
        # FUSER_CHECK_SHARDS=1: the extents bound from tensor inputs, compared across the
        # meshes' ranks before each call (ranks that pass shards of different sizes would
        # otherwise each run with a table of their own: a wrong mean, a hang)
        self.check_shards = env_switch("FUSER_CHECK_SHARDS", False)
        self._program_hash: Optional[int] = None
        self._shard_extents = list(dict.fromkeys(
            d.extent.name for tv in program.inputs if isinstance(tv, TensorView)
            for d in tv.domain.no_reductions() if is_symbol(d.extent)))
        self._team = sorted({r for tv in program.inputs + program.outputs
                             for r in getattr(getattr(tv, "device_mesh", None), "devices", ())})

    @staticmethod
    def values_key(table: BindingTable) -> tuple:
        """What `run` looks a table's plan up by, besides the rank and the device."""
        return _values_key(table.values)

    def run(self, args: Sequence[Any], table: BindingTable, comm: Optional[Communicator] = None,
            device=None, trace: Optional[Trace] = None, values_key: Optional[tuple] = None) -> list:
        """`values_key`: `values_key(table)`, where the caller keeps it for this table."""
        comm = comm or Communicator.default()
        if self._checked_rank != (comm.world_size, comm.rank):
            self._check_meshes(comm)
        device = device or self.device
        if self.check_shards and len(self._team) > 1 and comm.is_distributed and device.type != "meta":
            self._check_shards(table, comm, device)
        key = (values_key if values_key is not None else _values_key(table.values), comm.rank, device)
        plan = self._plans.get(key)
        if plan is None:
            plan = self.plan(table, comm.rank, device)
            if len(self._plans) >= 64:  # many sizes: start over rather than grow
                self._plans.clear()
            self._plans[key] = plan
        streams = self.streams if device == self.device else streams_for(device)
        return run_plan(plan, args, table, comm, device, trace, self.sizes, streams)

    def plan(self, table: BindingTable, rank: int, device=None) -> Plan:
        """The program compiled for the sizes of `table` (what `run` caches per table values)."""
        device = device or self.device
        streams = self.streams if device == self.device else streams_for(device)
        return compile_program(self.program, table, rank, device, streams, self.sizes)

    def _check_shards(self, table: BindingTable, comm: Communicator, device) -> None:
        """Raise ExtentConflictError on every rank where the ranks bound an extent to different
        values (one blocking allgather of the extents)."""
        names = self._shard_extents
        # first who runs what: a rank whose input was refused before its exchange (caught, and
        # on to the next fusion) or that runs its fusions in another order would pair this
        # exchange with another fusion's, and their collectives after it (wrong values, no error)
        heads = comm.agree([self._fingerprint(), len(names)], self._team, device)
        if len({tuple(h) for h in heads}) > 1:
            raise FusionInputError(
                f"the ranks {self._team} reached this fusion's shard check from different fusions (a rank "
                f"whose input was refused before it, or that runs its fusions in another order): every "
                f"rank must run the same fusions in the same order (FUSER_CHECK_SHARDS)")
        rows = comm.agree([table.values[n] for n in names], self._team, device)
        for k, name in enumerate(names):
            seen = [row[k] for row in rows]
            if len(set(seen)) > 1:
                each = ", ".join(f"rank {r}: {v}" for r, v in zip(self._team, seen))
                raise ExtentConflictError(
                    f"extent {name} differs between ranks ({each}; on rank {comm.rank} from "
                    f"{table.sources.get(name, '?')}): every rank must pass shards of one size "
                    f"(FUSER_CHECK_SHARDS)")

    def _fingerprint(self) -> int:
        """The program's printed form hashed to 60 bits: the same on every rank of one program
        (Python's own hash of a string differs per process)."""
        if self._program_hash is None:
            self._program_hash = int(hashlib.sha256(str(self.program).encode()).hexdigest()[:15], 16)
        return self._program_hash

    def _check_meshes(self, comm: Communicator) -> None:
        """Every mesh of the program fits the world and holds this rank. A rank outside a
        tensor's mesh does not hold that tensor (nvFuser leaves it undefined there); fuser runs
        no idle ranks, so such a rank is refused rather than computing as if it were in the
        mesh. Meshes that differ are refused on every rank of them alike (each rank reads the
        same program): refused on the rank outside one mesh alone, the ranks in every mesh went
        on into a collective and waited for it."""
        for mesh, tv in self._meshes.items():
            if max(mesh.devices) >= comm.world_size:
                raise FuserError(
                    f"T{tv.name} lives on {mesh!r}, which needs {max(mesh.devices) + 1} processes, "
                    f"but this program runs {comm.world_size}; launch it with "
                    f"torchrun --nproc-per-node={max(mesh.devices) + 1}, or use a mesh of one device")
        ranks = sorted({d for mesh in self._meshes for d in mesh.devices})
        for mesh, tv in self._meshes.items():
            outside = [r for r in ranks if r not in mesh.devices]
            if outside:
                raise UnsupportedError(
                    f"T{tv.name} lives on {mesh!r}, which does not hold rank{'s' if len(outside) > 1 else ''} "
                    f"{', '.join(map(str, outside))} of the fusion's other meshes: a rank outside a tensor's "
                    f"mesh does not hold that tensor, and fuser runs no idle ranks; put every tensor of "
                    f"the fusion on one mesh, or split it into fusions of one mesh each")
        for mesh, tv in self._meshes.items():
            if comm.rank not in mesh.devices:
                raise UnsupportedError(
                    f"T{tv.name} lives on {mesh!r}, which does not hold rank {comm.rank}: a rank "
                    f"outside a tensor's mesh does not hold that tensor, and fuser runs no idle ranks; "
                    f"run this fusion on the ranks {list(mesh.devices)} only, or put T{tv.name} on a "
                    f"mesh of every rank that runs it")
        self._checked_rank = (comm.world_size, comm.rank)


def _meshes_of(program: HostProgram) -> dict[DeviceMesh, TensorView]:
    """Each mesh of the program's tensors (inputs, outputs, those of its segments), with the
    first tensor found on it: the one an error names."""
    tvs = list(program.inputs) + list(program.outputs)
    for seg in program.segments:
        for e in seg.exprs:
            tvs += list(e.inputs) + list(e.outputs)
    found: dict[DeviceMesh, TensorView] = {}
    for tv in tvs:
        mesh = getattr(tv, "device_mesh", None)
        if mesh is not None:
            found.setdefault(mesh, tv)
    return found


def _values_key(values) -> tuple:
    """The plan key of a table's values. A plan bakes the scalars it was made with, so values
    that compare equal but compute differently (0.0 and -0.0, 2 and 2.0) get plans of their own;
    repr also makes NaN equal to itself, so a NaN scalar reuses its plan."""
    return tuple((k, v) if type(v) is int else (k, type(v), repr(v)) for k, v in values.items())


class ShapeOnlyCommunicator(Communicator):
    """Collectives that only produce the right shapes: for shape inference on meta tensors."""

    def __init__(self, rank: int, world_size: int):
        super().__init__(None, rank, world_size, "meta")

    def _noop(self, *args, **kwargs) -> Pending:
        return Pending(self, "meta")

    allreduce = allgather = reduce_scatter = all_to_all = broadcast = _noop


class HostRuntime:
    """The runtime of one input signature of a multi-device or stream-parallel fusion."""

    def __init__(self, fusion: Fusion, device: torch.device, use_kernels: bool = True):
        self.fusion = fusion
        self.device = device
        self.target = target_for(device)
        self.launchers: list[KernelLauncher] = []
        segment_kernels = None
        if use_kernels:
            target = self.target
            segment_kernels = lambda sub: segment_fusion(  # noqa: E731
                sub, lambda exprs, i, o: plan_kernel(exprs, i, o, lambda e: can_emit(e, target)),
                lambda e: can_emit(e, target))
        self.program = lower(fusion, self._make_launcher, segment_kernels)
        self.segments = self.program.segments
        self.runner = HostRunner(self.program, device)
        flags = dump_flags()
        self.dump_triton = "triton" in flags
        self._printed: dict[int, str] = {}  # per launcher: the source printed last
        if "fusion_ir" in flags:
            print(fusion)
        if "host_ir" in flags:
            print(self.program)
        if "segments" in flags:
            print("\n\n".join(s.describe() for s in self.segments))

    def _make_launcher(self, seg) -> LaunchKernel:
        first = seg.outputs[0].name if seg.outputs else len(self.launchers)
        launcher = KernelLauncher(seg.params, f"fuser_{seg.params.template.name}_T{first}")
        self.launchers.append(launcher)
        found = {id(v): v for e in seg.exprs for v in e.inputs if isinstance(v, Scalar) and not v.is_constant}
        return LaunchKernel(seg, launcher, list(found.values()))

    def run(self, args: Sequence[Any], table: BindingTable, comm: Optional[Communicator] = None,
            values_key: Optional[tuple] = None) -> list:
        outs = self.runner.run(args, table, comm, values_key=values_key)
        if self.dump_triton:  # each kernel's source once per change, as the single-device runtime
            for k, launcher in enumerate(self.launchers):
                if launcher.last_source and self._printed.get(k) is not launcher.last_source:
                    self._printed[k] = launcher.last_source
                    print(launcher.last_source)
        return outs

    def infer_meta(self, args: Sequence[Any], table: BindingTable, rank: int = 0, world_size: int = 1,
                   trace: Optional[Trace] = None) -> list:
        """Run the host program on meta tensors: every op, in loops too, on chunk-shaped meta
        tensors, each result checked against the IR; collectives only shape their outputs."""
        metas = [torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device="meta")
                 if isinstance(a, torch.Tensor) else a for a in args]
        runner = HostRunner(_aten_only(self.program), torch.device("meta"))
        return runner.run(metas, table, ShapeOnlyCommunicator(rank, world_size),
                          torch.device("meta"), trace)

    def triton_code(self) -> list[str]:
        return [l.last_source for l in self.launchers if l.last_source]


def _aten_only(program: HostProgram) -> HostProgram:
    """The program with its kernel launches replaced by ATen evaluation of the same exprs."""
    def swap(ops):
        out = []
        for op in ops:
            if isinstance(op, LaunchKernel):
                out.append(Evaluate(op.segment, in_loop=op.in_loop))
            elif isinstance(op, ForLoop):
                out.append(ForLoop(op.index, op.extent, swap(op.body)))
            else:
                out.append(op)
        return out
    return HostProgram(program.inputs, program.outputs, swap(program.body), program.segments)
