"""A client cannot make the simulator hold unbounded worlds (issue 52, finding 6): one connection
creates at most `max_worlds_per_connection` worlds and the server hosts at most
`max_envs_total` envs, beyond which CreateWorld is RESOURCE_EXHAUSTED naming the setting and
saying what to do; when the connection ends its worlds are destroyed and their memory goes
back to the OS. Worker processes (`max_workers_per_world`, `max_workers_total`) and open
streams (`max_connections`) are bounded across all connections too, each refusal naming the
setting, the current use and the limit. Against real server processes started with those
settings."""

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
from llmrl.simulator.client import RemoteWorld
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


# -- service-wide bounds (issue: caps were per connection and ignored worker processes) ------
WORKERS_PER_WORLD = 2
WORKERS_TOTAL = 3
CONNECTIONS = 3


@pytest.fixture(scope="module")
def bounded() -> Iterator[Server]:
    started = start_server(
        {
            "max_workers_per_world": WORKERS_PER_WORLD,
            "max_workers_total": WORKERS_TOTAL,
            "max_connections": CONNECTIONS,
        }
    )
    yield started
    stop_server(started)


def create_sharded(connection: dm_connection.Connection, num_envs: int, num_workers: int) -> str:
    settings = {"env": "SimpleDoorKey", "num_envs": num_envs, "num_workers": num_workers}
    request = dm_env_rpc_pb2.CreateWorldRequest(
        settings={name: tensor_utils.pack_tensor(value) for name, value in settings.items()}
    )
    return connection.send(request).world_name


def worker_count(server: Server) -> int:
    """The server's child processes but multiprocessing's resource tracker."""
    tasks = Path(f"/proc/{server.process.pid}/task").glob("*/children")
    children = {int(child) for task in tasks for child in task.read_text().split()}
    return sum(
        1
        for child in children
        if Path(f"/proc/{child}").exists()
        and b"resource_tracker" not in Path(f"/proc/{child}/cmdline").read_bytes()
    )


def wait_for_workers(server: Server, count: int) -> int:
    deadline = time.monotonic() + 30
    while (workers := worker_count(server)) != count and time.monotonic() < deadline:
        time.sleep(0.05)
    return workers


def test_a_worlds_worker_processes_are_capped_by_a_setting(bounded):
    connection = connect(bounded)
    try:
        with pytest.raises(error.DmEnvRpcError) as refused:
            create_sharded(connection, 4, WORKERS_PER_WORLD + 1)
        assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        message = refused.value.message
        assert message.startswith("num_workers: ") and f"at most {WORKERS_PER_WORLD}" in message
        assert "max_workers_per_world" in message and f"got {WORKERS_PER_WORLD + 1}" in message
        assert wait_for_workers(bounded, 0) == 0  # nothing was spawned
    finally:
        connection.close()


def test_worker_processes_are_capped_across_connections(bounded):
    first, second = connect(bounded), connect(bounded)
    try:
        name = create_sharded(first, 2, 2)
        with pytest.raises(error.DmEnvRpcError) as refused:  # 2 + 2 > 3, on another connection
            create_sharded(second, 2, 2)
        assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
        message = refused.value.message
        assert message.startswith("max_workers_total: ")
        assert "2 worker processes" in message and f"limit of {WORKERS_TOTAL}" in message
        assert "num_workers" in message and "DestroyWorld" in message  # what to do about it
        create_sharded(second, 2, 1)  # fits: 3 in all
        create_sharded(second, 8, 0)  # no worker process: not counted
        assert worker_count(bounded) == WORKERS_TOTAL
        with pytest.raises(error.DmEnvRpcError, match="max_workers_total"):
            create_sharded(second, 1, 2)  # one env gets one worker at most: still one too many
        first.send(dm_env_rpc_pb2.DestroyWorldRequest(world_name=name))
        create_sharded(second, 2, 2)  # the destroyed world's workers are free again
    finally:
        first.close()
        second.close()
    assert wait_for_workers(bounded, 0) == 0
    assert wait_for_envs(bounded, 0)["envs"] == 0


def test_connections_are_capped_in_total_and_a_closed_one_frees_its_slot(bounded):
    held = [connect(bounded) for _ in range(CONNECTIONS)]
    try:
        for connection in held:  # each stream is open on the server once it answered
            connection.send(dm_env_rpc_pb2.LeaveWorldRequest())
        extra = connect(bounded)
        with pytest.raises(grpc.RpcError) as refused:
            extra.send(dm_env_rpc_pb2.LeaveWorldRequest())
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        details = refused.value.details()
        assert details.startswith("max_connections: ")
        assert f"{CONNECTIONS} connections" in details and f"at most {CONNECTIONS}" in details
        with pytest.raises(ConnectionError, match="max_connections"):  # the client says why
            RemoteWorld(bounded.address, "SimpleDoorKey")
        held.pop().close()
        deadline = time.monotonic() + 10
        while True:  # the server sees the stream end a moment later
            try:
                connect(bounded).send(dm_env_rpc_pb2.LeaveWorldRequest())
                break
            except grpc.RpcError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
    finally:
        for connection in held:
            connection.close()


@pytest.mark.parametrize("name", ["max_workers_per_world", "max_workers_total", "max_connections"])
def test_the_service_wide_bounds_are_settings_checked_at_start(name):
    assert _check_settings({name: 5})[name] == 5
    for bad in (0, True, 2.5, "many"):
        with pytest.raises(ValueError, match=rf"{name}: expected an integer >= 1"):
            _check_settings({name: bad})
