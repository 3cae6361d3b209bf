"""A world belongs to the connection that created it: its name cannot be guessed, and another
connection that names it (JoinWorld, ResetWorld, DestroyWorld) gets NOT_FOUND as for a world
that does not exist, with no list of the server's worlds. Against the session's server."""

from __future__ import annotations

import re

import grpc
import numpy as np
import pytest
from dm_env_rpc.v1 import connection, dm_env_rpc_pb2, error, tensor_utils

from llmrl.common.auth import authenticated_channel

NAME = re.compile(r"world-[A-Za-z0-9_-]{22,}")


@pytest.fixture
def connect(sim_server):
    opened: list[tuple[grpc.Channel, connection.Connection]] = []

    def open_one() -> connection.Connection:
        channel = authenticated_channel(grpc.insecure_channel(sim_server.address))
        opened.append((channel, connection.Connection(channel)))
        return opened[-1][1]

    yield open_one
    for channel, conn in opened:
        conn.close()
        channel.close()


def create(conn: connection.Connection) -> str:
    settings = {"env": tensor_utils.pack_tensor("SimTestCorridor"),
                "num_envs": tensor_utils.pack_tensor(2)}  # fmt: skip
    return conn.send(dm_env_rpc_pb2.CreateWorldRequest(settings=settings)).world_name


def not_found(conn: connection.Connection, request, hidden: list[str]) -> str:
    with pytest.raises(error.DmEnvRpcError) as refused:
        conn.send(request)
    assert refused.value.code == grpc.StatusCode.NOT_FOUND.value[0], refused.value.message
    message = refused.value.message
    assert message.startswith("world_name: no world ")
    for name in hidden:  # no other world is listed
        assert name not in message
    return message


def test_world_names_cannot_be_guessed(connect):
    conn = connect()
    names = [create(conn) for _ in range(3)]
    assert all(NAME.fullmatch(name) for name in names), names
    assert len(set(names)) == 3


def test_another_connection_cannot_join_reset_or_destroy_a_world(connect):
    owner, other = connect(), connect()
    name, sibling = create(owner), create(owner)
    own = create(other)  # the other connection's own world does not help it either
    hidden = [sibling, own]
    requests = [
        dm_env_rpc_pb2.JoinWorldRequest(world_name=name),
        dm_env_rpc_pb2.ResetWorldRequest(world_name=name),
        dm_env_rpc_pb2.DestroyWorldRequest(world_name=name),
    ]
    messages = [not_found(other, request, hidden) for request in requests]
    # the same answer as for a world that does not exist
    unknown = not_found(other, dm_env_rpc_pb2.JoinWorldRequest(world_name="world-x"), hidden)
    assert {m.replace(repr(name), "NAME") for m in messages} == {
        unknown.replace("'world-x'", "NAME")
    }
    with pytest.raises(error.DmEnvRpcError) as refused:  # it joined nothing: nothing to reset
        other.send(dm_env_rpc_pb2.ResetRequest())
    assert refused.value.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
    # the owner's world is untouched: joinable, and it steps
    owner.send(dm_env_rpc_pb2.JoinWorldRequest(world_name=name))
    owner.send(dm_env_rpc_pb2.StepRequest())
    specs = owner.send(dm_env_rpc_pb2.ResetRequest()).specs
    uid = next(u for u, spec in specs.observations.items() if spec.name == "step_type")
    actions = {1: tensor_utils.pack_tensor(np.ones(2, np.int64))}
    step_types = []
    for _ in range(2):
        step = owner.send(dm_env_rpc_pb2.StepRequest(actions=actions, requested_observations=[uid]))
        step_types.append(tensor_utils.unpack_tensor(step.observations[uid]).tolist())
    assert step_types[0] == [0, 0] and len(step_types[1]) == 2  # FIRST, then a step
    owner.send(dm_env_rpc_pb2.LeaveWorldRequest())
    owner.send(dm_env_rpc_pb2.DestroyWorldRequest(world_name=name))  # the owner may
    not_found(owner, dm_env_rpc_pb2.JoinWorldRequest(world_name=name), [sibling, own])
