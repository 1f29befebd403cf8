"""Check the user's sharding annotations before anything relies on them: every device axis has
a mesh, spans exactly the mesh axis it is parallelized on, and is used once per tensor; the
tensors of one expr share a mesh. Errors name the tensor, the axis and what was expected."""
from __future__ import annotations

from ..errors import FusionDefinitionError, UnsupportedError
from ..ir import Fusion, TensorView
from ..ir.domain import Split
from ..ir.symbolic import is_static


def validate_shardings(fusion: Fusion) -> Fusion:
    for tv in fusion.tensors():
        _check_tensor(tv)
    return validate_meshes(fusion)


def validate_meshes(fusion: Fusion) -> Fusion:
    """The tensors of one expr share a mesh: checked on the user's annotations, and again once
    propagation has given the unannotated tensors theirs (an op between two meshes)."""
    for e in fusion.exprs:
        meshes = {tv.device_mesh for tv in (*e.inputs, *e.outputs)
                  if isinstance(tv, TensorView) and tv.device_mesh is not None}
        if len(meshes) > 1:
            raise UnsupportedError(
                f"{e.op_name}: its tensors live on different meshes {sorted(map(repr, meshes))}; "
                f"moving tensors between meshes is not supported")
    return fusion


def _check_tensor(tv: TensorView) -> None:
    seen = {}
    for d in tv.domain.loop:
        if not d.is_device_dim:
            continue
        pt = d.parallel_type
        if tv.device_mesh is None:
            raise FusionDefinitionError(
                f"T{tv.name} has the device axis {d!r} but no device mesh; call set_device_mesh")
        if pt in seen:
            raise FusionDefinitionError(
                f"T{tv.name}: {seen[pt]!r} and {d!r} are both parallelized on {pt.value}")
        seen[pt] = d
        try:
            n = tv.device_mesh.size_of(pt)
        except FusionDefinitionError as err:
            raise FusionDefinitionError(f"T{tv.name} axis {d!r}: {err}") from None
        if not is_static(d.extent) or int(d.extent) != n:
            raise FusionDefinitionError(
                f"T{tv.name}: the device axis {d!r} has extent {d.extent}, but {tv.device_mesh!r} "
                f"has {n} devices along {pt.value}; split by the mesh size")
        if d.is_broadcast:
            raise FusionDefinitionError(f"T{tv.name}: the broadcast axis {d!r} cannot be sharded")
        if any(isinstance(t, Split) and t.inner is d for t in tv.domain.root_transforms + tv.domain.transforms):
            # each device would hold every n-th element, which the collectives do not lay out
            # (they join and cut contiguous blocks): refused, not silently reordered
            raise UnsupportedError(
                f"T{tv.name}: the device axis {d!r} is the inner output of a split (cyclic sharding: element "
                f"k on device k mod {n}), which is not supported; shard with the device axis outer "
                f"(split(axis, {n}), inner_split=False)")
