"""dm_env_rpc TensorSpecs of a world, and the gymnasium spaces they describe.

The server turns a world's per-env gymnasium spaces into specs with a leading dimension N;
the client turns them back into per-env spaces, so that `RemoteWorld` offers the same
`observation_space`/`action_space` as an in-process `World`. Strings carry no bounds (a
dm_env_rpc STRING spec cannot hold them). The `action` spec is INT64 with min/max for a
`Discrete` action space, and FLOAT or DOUBLE of shape (N, *box.shape) with the box's bounds for
a `Box` (uniform bounds as scalars, others per element; a bound with an infinite element is left
out).
"""

from __future__ import annotations

import itertools
import math
import string
from typing import Any

import numpy as np
from dm_env_rpc.v1 import dm_env_rpc_pb2, tensor_spec_utils, tensor_utils
from gymnasium import spaces

from llmrl.simulator.actions import ActionSpace

# Action uids are fixed: clients may rely on them.
ACTION_UIDS: dict[str, int] = {"action": 1, "skill": 2, "active": 3}
# Observation uids above this are privileged entries (only returned when asked for by name):
# that is how a client learns which entries are privileged from the specs alone.
PRIVILEGED_UID_BASE = 1000
# What a client-side spaces.Text accepts (the wire does not describe a charset).
TEXT_CHARSET = string.printable
TEXT_MAX_LENGTH = 100_000


def tensor_spec(name: str, space: spaces.Space, num_envs: int) -> dm_env_rpc_pb2.TensorSpec:
    """The spec of a batch of `num_envs` values of `space`."""
    if isinstance(space, spaces.Text):
        return dm_env_rpc_pb2.TensorSpec(
            name=name, shape=[num_envs], dtype=dm_env_rpc_pb2.DataType.STRING
        )
    if isinstance(space, spaces.Discrete):
        spec = dm_env_rpc_pb2.TensorSpec(
            name=name, shape=[num_envs], dtype=dm_env_rpc_pb2.DataType.INT64
        )
        start = int(space.start)
        tensor_spec_utils.set_bounds(spec, start, start + int(space.n) - 1)
        return spec
    if isinstance(space, spaces.MultiBinary | spaces.Box):
        dtype = np.dtype(space.dtype)
        spec = dm_env_rpc_pb2.TensorSpec(
            name=name,
            shape=[num_envs, *space.shape],
            dtype=tensor_utils.np_type_to_data_type(dtype),
        )
        low, high = (0, 1) if isinstance(space, spaces.MultiBinary) else (space.low, space.high)
        tensor_spec_utils.set_bounds(
            spec, _bound(low, spec.shape, dtype), _bound(high, spec.shape, dtype)
        )
        return spec
    raise TypeError(f"{name}: unsupported space {space!r}")


def _bound(value: Any, shape: Any, dtype: np.dtype) -> Any:
    """A scalar bound when uniform, else one per element; None when unbounded."""
    array = np.asarray(value)
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        return None
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if (array <= info.min).all() or (array >= info.max).all():
            return None
    flat = array.ravel()
    if flat.size == 0 or (flat == flat[0]).all():
        return flat[0] if flat.size else None
    return np.broadcast_to(array, tuple(shape))


def world_specs(
    observation_space: spaces.Dict,
    action_space: ActionSpace,
    has_skills: bool,
    num_envs: int,
    privileged: tuple[str, ...] = (),
) -> dm_env_rpc_pb2.ActionObservationSpecs:
    """Specs of a world; privileged entries get uids from PRIVILEGED_UID_BASE + 1 on."""
    specs = dm_env_rpc_pb2.ActionObservationSpecs()
    ordinary = itertools.count(1)
    special = itertools.count(PRIVILEGED_UID_BASE + 1)
    for name, space in observation_space.spaces.items():
        uid = next(special if name in privileged else ordinary)
        specs.observations[uid].CopyFrom(tensor_spec(name, space, num_envs))
    specs.actions[ACTION_UIDS["action"]].CopyFrom(tensor_spec("action", action_space, num_envs))
    if has_skills:
        specs.actions[ACTION_UIDS["skill"]].CopyFrom(
            tensor_spec("skill", spaces.Text(TEXT_MAX_LENGTH), num_envs)
        )
    specs.actions[ACTION_UIDS["active"]].CopyFrom(
        dm_env_rpc_pb2.TensorSpec(
            name="active", shape=[num_envs], dtype=dm_env_rpc_pb2.DataType.BOOL
        )
    )
    return specs


def space_from_spec(spec: dm_env_rpc_pb2.TensorSpec) -> spaces.Space:
    """The per-env space of a batched spec (its leading dimension dropped)."""
    dtype = tensor_utils.data_type_to_np_type(spec.dtype)
    shape = tuple(spec.shape[1:])
    if spec.dtype == dm_env_rpc_pb2.DataType.STRING:
        return spaces.Text(TEXT_MAX_LENGTH, charset=TEXT_CHARSET)
    bounds = tensor_spec_utils.bounds(spec)
    low, high = _row(bounds.min), _row(bounds.max)
    if spec.dtype == dm_env_rpc_pb2.DataType.INT64 and not shape and spec.HasField("max"):
        return spaces.Discrete(int(high) - int(low) + 1, start=int(low))
    if spec.dtype == dm_env_rpc_pb2.DataType.BOOL:
        return spaces.MultiBinary(shape or 1)
    if dtype.kind == "f":
        low = low if spec.HasField("min") else -np.inf
        high = high if spec.HasField("max") else np.inf
    return spaces.Box(
        np.broadcast_to(np.asarray(low, dtype), shape),
        np.broadcast_to(np.asarray(high, dtype), shape),
        shape,
        dtype,
    )


def _row(bound: Any) -> Any:
    array = np.asarray(bound)
    return array[0] if array.ndim > 0 else array


def privileged_names(specs: dm_env_rpc_pb2.ActionObservationSpecs) -> tuple[str, ...]:
    return tuple(
        spec.name for uid, spec in sorted(specs.observations.items()) if uid > PRIVILEGED_UID_BASE
    )


def spaces_from_specs(
    specs: dm_env_rpc_pb2.ActionObservationSpecs,
) -> tuple[spaces.Dict, ActionSpace, bool]:
    observation_space = spaces.Dict(
        {spec.name: space_from_spec(spec) for spec in specs.observations.values()}
    )
    action_space = space_from_spec(specs.actions[ACTION_UIDS["action"]])
    return observation_space, action_space, ACTION_UIDS["skill"] in specs.actions  # type: ignore[return-value]


def unpack_tensor(tensor: dm_env_rpc_pb2.Tensor) -> Any:
    """`tensor_utils.unpack_tensor`, with a fast path for the common case (no broadcasting).

    Raises ValueError/TypeError as the package does for malformed tensors.
    """
    flat = tensor_utils.unpack_proto(tensor)
    shape = tuple(tensor.shape)
    if shape and flat.size == math.prod(shape) and min(shape) >= 0:
        return flat.reshape(shape)
    return tensor_utils.reshape_array(flat, tensor.shape)  # scalars, broadcasts, -1 dims
