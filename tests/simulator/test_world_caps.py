"""A client cannot make the simulator hold unbounded worlds (issue 52, finding 6): one connection
creates at most `max_worlds_per_connection` worlds and the server hosts at most
`max_envs_total` envs, beyond which CreateWorld is RESOURCE_EXHAUSTED naming the setting and
saying what to do; when the connection ends its worlds are destroyed and their memory goes
back to the OS. Against a real server process started with those settings."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from dm_env_rpc.v1 import connection as dm_connection
from dm_env_rpc.v1 import dm_env_rpc_pb2, error, tensor_utils
from support.sim_server import Server, start_server, stop_server

from llmrl.common.auth import authenticated_channel
from llmrl.simulator.service import _check_settings

PER_CONNECTION = 3
BIG_WORLD = 1536  # SimpleDoorKey envs: about 100 MB each
TOTAL = PER_CONNECTION * BIG_WORLD


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    # the module's own server: its limits are not the session server's defaults
    started = start_server({"max_worlds_per_connection": PER_CONNECTION, "max_envs_total": TOTAL})
    yield started
    stop_server(started)


def connect(server: Server) -> dm_connection.Connection:
    return dm_connection.Connection(authenticated_channel(grpc.insecure_channel(server.address)))


def create(connection: dm_connection.Connection, num_envs: int) -> str:
    settings = {"env": "SimpleDoorKey", "num_envs": num_envs}
    request = dm_env_rpc_pb2.CreateWorldRequest(
        settings={name: tensor_utils.pack_tensor(value) for name, value in settings.items()}
    )
    return connection.send(request).world_name


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def wait_for_envs(server: Server, count: int) -> dict:
    deadline = time.monotonic() + 30
    while (health := server.health())["envs"] != count and time.monotonic() < deadline:
        time.sleep(0.05)
    return health


def test_a_connection_has_at_most_its_worlds_and_gets_a_slot_back_by_destroying_one(server):
    connection = connect(server)
    try:
        names = [create(connection, 2) for _ in range(PER_CONNECTION)]
        with pytest.raises(error.DmEnvRpcError) as refused:
            create(connection, 2)
        assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
        message = refused.value.message
        assert "max_worlds_per_connection" in message and f"at most {PER_CONNECTION}" in message
        assert "DestroyWorld" in message  # what to do about it
        connection.send(dm_env_rpc_pb2.DestroyWorldRequest(world_name=names[0]))
        create(connection, 2)  # the destroyed world's slot is free again
        other = connect(server)  # the limit is per connection
        try:
            create(other, 2)
        finally:
            other.close()
    finally:
        connection.close()
    health = wait_for_envs(server, 0)  # a closed connection's worlds are destroyed
    assert health["worlds"] == 0 and health["envs"] == 0


def test_the_servers_envs_are_capped_and_a_closed_connection_returns_their_memory(server):
    pid = server.process.pid
    before = rss_mb(pid)
    hog = connect(server)
    try:
        for _ in range(PER_CONNECTION):
            create(hog, BIG_WORLD)
        assert server.health()["envs"] == TOTAL
        peak = rss_mb(pid)
        other = connect(server)  # another connection cannot pass the server's total either
        try:
            with pytest.raises(error.DmEnvRpcError) as refused:
                create(other, 1)
            assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
            message = refused.value.message
            assert "max_envs_total" in message and str(TOTAL) in message
            assert "num_envs" in message  # what to do about it
        finally:
            other.close()
    finally:
        hog.close()
    health = wait_for_envs(server, 0)
    assert health["worlds"] == 0 and health["envs"] == 0
    deadline = time.monotonic() + 15  # the memory is handed back just after the last destroy
    while (after := rss_mb(pid)) - before > 0.5 * (peak - before) and time.monotonic() < deadline:
        time.sleep(0.1)
    print(f"simulator RSS (MB): {before:.0f} before, {peak:.0f} at {TOTAL} envs, {after:.0f} after")
    assert peak - before > 100  # the worlds did take memory ...
    assert after - before < 0.5 * (peak - before)  # ... and most of it went back to the OS
    fresh = connect(server)  # and the server's envs are free again
    try:
        create(fresh, BIG_WORLD)
    finally:
        fresh.close()


@pytest.mark.parametrize("name", ["max_worlds_per_connection", "max_envs_total"])
def test_the_limits_are_settings_checked_at_start(name):
    assert _check_settings({name: 5})[name] == 5
    with pytest.raises(ValueError, match=rf"{name}: expected an integer >= 1"):
        _check_settings({name: 0})
