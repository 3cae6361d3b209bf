"""Worlds on a simulator server, with the same API as an in-process `World`.

    with make_world("SimpleDoorKey", num_envs=8, seed=0, address="127.0.0.1:50051") as world:
        obs = world.reset()
        obs = world.step(action=np.zeros(8, np.int64))
        # a continuous env takes one array per env: world.step(action=np.zeros((8, 2)))

`RemoteWorld` creates its world on the server, joins it over one dm_env_rpc connection and
destroys it on `close()` (the server also destroys it if the connection drops). Bad input
raises `WorldError` naming the field, as in-process.

A simulator that does not listen yet (`llmrl up` starts every service at once, and a run's
first phase may ask for a world before the simulator has loaded its envs) or is restarting is
waited for when a world is created, for up to `LLMRL_SIMULATOR_RETRY_S` seconds (default 120),
then creation fails naming the simulator and the setting. A world whose simulator goes away
later is lost with it (its state lived there): its next call fails.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import grpc
import numpy as np
from dm_env_rpc.v1 import connection as dm_connection
from dm_env_rpc.v1 import dm_env_rpc_pb2, error, tensor_utils
from gymnasium import spaces

from llmrl.common.auth import authenticated_channel
from llmrl.common.config import env_seconds
from llmrl.common.outage import CHANNEL_OPTIONS, DEFAULT_WINDOW_S, Outage
from llmrl.common.tls import client_channel
from llmrl.simulator.actions import as_box_dtype
from llmrl.simulator.specs import (
    ACTION_UIDS,
    privileged_names,
    spaces_from_specs,
    unpack_tensor,
)
from llmrl.simulator.world import World, WorldError

RETRY_VAR = "LLMRL_SIMULATOR_RETRY_S"


def retry_window_s() -> float:
    """How long an unreachable simulator is waited for when a world is created."""
    return env_seconds(RETRY_VAR, DEFAULT_WINDOW_S)


def _as_world_error(exc: error.DmEnvRpcError) -> Exception:
    """Invalid-argument errors become WorldError (same type as in-process); others stay."""
    if exc.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]:
        field, _, message = exc.message.partition(": ")
        return WorldError(field, message or exc.message)
    return exc


class RemoteWorld:
    """A world hosted by a simulator server (see module docstring)."""

    def __init__(
        self,
        address: str,
        env: str,
        num_envs: int = 1,
        seed: int | None = None,
        **env_kwargs: Any,
    ) -> None:
        self.address = address
        self.env = env
        self.num_envs = num_envs
        self.seed = seed
        options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1),
                   *CHANNEL_OPTIONS]  # fmt: skip
        self._channel = authenticated_channel(client_channel(address, options))  # TLS if set
        self.world_name: str | None = None
        outage = Outage("the simulator", "simulator", address, retry_window_s(), RETRY_VAR)
        # dm_env_rpc's stream cannot be tried again once it failed: connect first
        if outage.window_s > 0 and not outage.connected(self._channel):
            self._channel.close()
            raise ConnectionError(outage.gave_up("UNAVAILABLE: nothing listens there"))
        self._connection = dm_connection.Connection(self._channel)
        settings = {"env": env, "num_envs": num_envs, **env_kwargs}
        if seed is not None:
            settings["seed"] = seed
        try:
            response = self._send(
                dm_env_rpc_pb2.CreateWorldRequest(
                    settings={k: _setting_tensor(k, v) for k, v in settings.items()}
                )
            )
            self.world_name = response.world_name
            specs = self._send(dm_env_rpc_pb2.JoinWorldRequest(world_name=self.world_name)).specs
        except ConnectionError as exc:
            self.close()
            raise ConnectionError(f"{exc}; start one with `llmrl serve simulator`") from None
        except BaseException:
            self.close()
            raise
        self.observation_space, self.action_space, self.has_skills = spaces_from_specs(specs)
        self._uids = {spec.name: uid for uid, spec in specs.observations.items()}
        self._names = {uid: name for name, uid in self._uids.items()}
        self.privileged_observations = privileged_names(specs)
        self.default_observations = [
            name
            for name in self.observation_space.spaces
            if name not in self.privileged_observations
        ]
        self._default_uids = [self._uids[name] for name in self.default_observations]
        self._closed = False

    def _send(self, request: Any) -> Any:
        try:
            return self._connection.send(request)
        except error.DmEnvRpcError as exc:
            raise _as_world_error(exc) from None
        except grpc.RpcError as exc:  # the server is unreachable or went away
            if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
                raise PermissionError(
                    f"the simulator at {self.address} wants its token: set LLMRL_TOKEN"
                ) from None
            if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:  # e.g. max_connections
                raise ConnectionError(
                    f"the simulator at {self.address} refused this connection: {exc.details()}"
                ) from None
            raise ConnectionError(
                f"no simulator answers at {self.address} ({exc.code().name})"
            ) from None

    def _requested(self, observations: Iterable[str] | None) -> list[int]:
        if observations is None:
            return self._default_uids
        if isinstance(observations, str):
            observations = [observations]
        uids = []
        for name in dict.fromkeys(observations):
            if name not in self._uids:
                raise WorldError(
                    "observations",
                    f"unknown entry {name!r}; entries: {', '.join(self.observation_space.spaces)}",
                )
            uids.append(self._uids[name])
        return uids

    def _unpack(self, response: dm_env_rpc_pb2.StepResponse) -> dict[str, np.ndarray]:
        names = self._names
        return {names[uid]: unpack_tensor(tensor) for uid, tensor in response.observations.items()}

    def reset(
        self, seed: int | None = None, observations: Iterable[str] | None = None
    ) -> dict[str, np.ndarray]:
        self._check_open()
        uids = self._requested(observations)
        settings = {} if seed is None else {"seed": tensor_utils.pack_tensor(seed)}
        self._send(dm_env_rpc_pb2.ResetRequest(settings=settings))
        # dm_env_rpc: the first step after a reset starts the episodes and ignores actions.
        return self._unpack(self._send(dm_env_rpc_pb2.StepRequest(requested_observations=uids)))

    def step(
        self,
        action: Any = None,
        skill: Any = None,
        observations: Iterable[str] | None = None,
        *,
        active: Any = None,
    ) -> dict[str, np.ndarray]:
        self._check_open()
        request = dm_env_rpc_pb2.StepRequest(requested_observations=self._requested(observations))
        actions = request.actions
        if action is not None:
            value = np.asarray(action)
            if value.dtype.kind in "iu":  # any integer type travels as the spec's INT64
                value = value.astype(np.int64, copy=False)
            elif value.dtype.kind == "f" and isinstance(self.action_space, spaces.Box):
                # any float travels in the spec's dtype, cast as an in-process world casts it
                value = as_box_dtype(value, self.action_space)
            _pack_into(actions[ACTION_UIDS["action"]], "action", value)
        if skill is not None:
            _pack_into(actions[ACTION_UIDS["skill"]], "skill", np.asarray(skill))
        if active is not None:
            _pack_into(actions[ACTION_UIDS["active"]], "active", np.asarray(active))
        return self._unpack(self._send(request))

    def close(self) -> None:
        if getattr(self, "_closed", False):
            return
        self._closed = True
        try:
            if self.world_name is not None:
                self._connection.send(dm_env_rpc_pb2.LeaveWorldRequest())
                self._connection.send(
                    dm_env_rpc_pb2.DestroyWorldRequest(world_name=self.world_name)
                )
        except (error.DmEnvRpcError, grpc.RpcError, ValueError):
            pass  # the server is gone or already dropped the world: nothing left to free
        finally:
            self._connection.close()
            self._channel.close()

    def _check_open(self) -> None:
        if getattr(self, "_closed", False):
            raise WorldError("world", "this world is closed")

    def __enter__(self) -> RemoteWorld:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RemoteWorld({self.address!r}, env={self.env!r}, num_envs={self.num_envs})"


def _setting_tensor(name: str, value: Any) -> dm_env_rpc_pb2.Tensor:
    try:
        return tensor_utils.pack_tensor(value)
    except (TypeError, ValueError):
        raise WorldError(
            name, f"cannot send {value!r} as a setting (numbers, strings, lists)"
        ) from None


def _pack_into(tensor: dm_env_rpc_pb2.Tensor, name: str, value: np.ndarray) -> None:
    """Fill `tensor` with `value` in place (the server checks dtype, shape and range)."""
    if value.dtype == object:  # numpy object arrays would be packed as protos
        value = np.asarray(value.tolist())
    try:
        packer = tensor_utils.get_packer(value.dtype.type)
        packer.pack(tensor, value)
    except (TypeError, ValueError):
        raise WorldError(name, f"cannot send values of dtype {value.dtype}") from None
    tensor.shape.extend(value.shape)


def make_world(
    env: str,
    num_envs: int = 1,
    seed: int | None = None,
    address: str | None = None,
    **env_kwargs: Any,
) -> World | RemoteWorld:
    """An in-process World (address None: embedded mode) or a RemoteWorld on `address`."""
    if address is None:
        return World(env, num_envs=num_envs, seed=seed, **env_kwargs)
    return RemoteWorld(address, env, num_envs=num_envs, seed=seed, **env_kwargs)
