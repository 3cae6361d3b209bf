"""RemoteWorld against a real server process: equivalence, bad input, disconnects, service."""

from __future__ import annotations

import re
import subprocess
import threading
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
from dm_env_rpc.v1 import connection, dm_env_rpc_pb2, error, tensor_utils
from support.net import free_port
from support.sim_server import LLMRL, start_server, stop_server
from support.world_rollouts import assert_same, rollout

from llmrl.common.auth import authenticated_channel
from llmrl.simulator.client import RETRY_VAR, RemoteWorld, make_world
from llmrl.simulator.world import StepType, World, WorldError


@pytest.fixture
def bystander(sim_server):
    """Another client's world on the same server: it must keep stepping after every error."""
    with RemoteWorld(sim_server.address, "SimTestCorridor", num_envs=2, seed=1) as world:
        world.reset()
        yield world


def still_serving(world) -> None:
    result = world.step(np.ones(world.num_envs, np.int64))
    assert result["step_type"].shape == (world.num_envs,)


def raw_connection(address: str) -> tuple[grpc.Channel, connection.Connection]:
    channel = authenticated_channel(grpc.insecure_channel(address))
    return channel, connection.Connection(channel)


def refused(conn: connection.Connection, request, pattern: str) -> error.DmEnvRpcError:
    """Send `request`; it must fail with a dm_env_rpc error whose message matches `pattern`."""
    with pytest.raises(error.DmEnvRpcError) as info:
        conn.send(request)
    assert re.search(pattern, info.value.message), info.value.message
    return info.value


def create_settings(**settings) -> dict:
    return {name: tensor_utils.pack_tensor(value) for name, value in settings.items()}


def test_remote_world_equals_in_process_world(sim_server):
    with RemoteWorld(sim_server.address, "SimTestSkills", num_envs=4, seed=9) as remote:
        local = World("SimTestSkills", num_envs=4, seed=9)
        assert remote.observation_space.keys() == local.observation_space.keys()
        assert remote.action_space == local.action_space and remote.has_skills
        assert_same(rollout(remote, 40), rollout(local, 40))
        skills = ["go to the goal", "", "go to the start", ""]
        for _ in range(5):
            assert_same([remote.step([0, 1, 0, 2], skills)], [local.step([0, 1, 0, 2], skills)])
        wanted = ["oracle_plan", "step_type"]
        assert_same(
            [remote.step([2] * 4, observations=wanted)], [local.step([2] * 4, observations=wanted)]
        )
        assert_same([remote.reset(seed=4)], [local.reset(seed=4)])


def test_privileged_entries_only_on_request_remotely_too(sim_server):
    local = World("SimTestSkills", num_envs=2, seed=0)
    with RemoteWorld(sim_server.address, "SimTestSkills", num_envs=2, seed=0) as remote:
        for world in (local, remote):
            assert set(world.privileged_observations) == {"oracle_plan", "goal_position"}
            assert "goal_position" not in world.reset()
            wanted = world.step([1, 1], observations=["goal_position", "oracle_plan"])
            assert wanted["goal_position"].tolist() == [5, 5]
        assert remote.default_observations == local.default_observations


def test_sharded_remote_world_equals_in_process_world(sim_server):
    with make_world(
        "SimTestCorridor", 5, seed=2, address=sim_server.address, num_workers=2
    ) as remote:
        assert_same(rollout(remote, 30), rollout(World("SimTestCorridor", 5, seed=2), 30))


def test_auto_reset_over_the_wire(sim_server):
    with RemoteWorld(sim_server.address, "SimTestCorridor", num_envs=1, seed=0, length=3) as world:
        obs = world.reset()
        while obs["step_type"][0] != StepType.LAST:
            obs = world.step([1])
        assert obs["discount"][0] == 0 and obs["reward"][0] == 1
        restarted = world.step([1])
        assert restarted["step_type"][0] == StepType.FIRST and restarted["reward"][0] == 0


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"env": "NoSuchEnv"}, r"env: unknown env 'NoSuchEnv'; registered envs: .*SimTestCorridor"),
        ({"env": "SimTestCorridor", "colour": "red"}, r"colour: unknown setting.*length"),
        ({"num_envs": 2}, r"env: required setting"),
        ({"env": "SimTestCorridor", "num_envs": -3}, r"num_envs: expected an integer >= 1"),
        ({"env": "SimTestCorridor", "length": 1}, r"refused its settings.*length"),
        ({"env": "SimTestCorridor", "num_envs": 10**6}, r"num_envs: at most 4096"),
        ({"env": "SimTestCorridor", "num_workers": 10**4}, r"num_workers: at most \d+"),
    ],
)
def test_bad_world_settings_get_errors(sim_server, bystander, settings, message):
    channel, conn = raw_connection(sim_server.address)
    request = dm_env_rpc_pb2.CreateWorldRequest(settings=create_settings(**settings))
    assert refused(conn, request, message).code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    channel.close()
    still_serving(bystander)


@pytest.mark.parametrize(
    ("step", "message"),
    [
        ({"action": np.zeros(3)}, r"^action: expected integers, got dtype float64"),
        ({"action": np.zeros((3, 1), np.int64)}, r"^action: expected shape \(3,\)"),
        ({"action": np.zeros(2, np.int64)}, r"^action: expected shape \(3,\)"),
        ({"action": [0, 5, 0]}, r"^action\[1\]: 5 is out of range; allowed 0\.\.2"),
        (
            {"action": [0, 0, 0], "skill": ["go to the goal", "", "dance"]},
            r"^skill\[2\]: .*dance.*go to the goal",
        ),
        ({"action": [0, 0, 0], "skill": np.zeros(3, np.int32)}, r"^skill: expected strings"),
        ({"action": [0, 0, 0], "observations": ["nope"]}, r"^observations: unknown entry 'nope'"),
    ],
)
def test_bad_actions_get_errors_and_nothing_steps(sim_server, bystander, step, message):
    with RemoteWorld(sim_server.address, "SimTestSkills", num_envs=3, seed=4) as world:
        start = world.reset()["distance"]
        with pytest.raises(WorldError, match=message):
            world.step(**step)
        np.testing.assert_array_equal(world.step([2, 2, 2])["distance"], start)
    still_serving(bystander)


def test_wire_level_errors_name_the_uid(sim_server, bystander):
    channel, conn = raw_connection(sim_server.address)
    name = conn.send(
        dm_env_rpc_pb2.CreateWorldRequest(settings=create_settings(env="SimTestCorridor"))
    ).world_name
    conn.send(dm_env_rpc_pb2.JoinWorldRequest(world_name=name))
    conn.send(dm_env_rpc_pb2.StepRequest())
    refused(
        conn,
        dm_env_rpc_pb2.StepRequest(actions={42: tensor_utils.pack_tensor([0])}),
        "unknown action uid 42",
    )
    refused(
        conn,
        dm_env_rpc_pb2.StepRequest(actions={2: tensor_utils.pack_tensor(["go"])}),
        "unknown action uid 2",
    )
    refused(
        conn, dm_env_rpc_pb2.StepRequest(requested_observations=[99]), "unknown observation uid 99"
    )
    channel.close()
    still_serving(bystander)


def test_step_on_a_destroyed_world_is_an_error(sim_server, bystander):
    channel, conn = raw_connection(sim_server.address)
    name = conn.send(
        dm_env_rpc_pb2.CreateWorldRequest(settings=create_settings(env="SimTestCorridor"))
    ).world_name
    conn.send(dm_env_rpc_pb2.JoinWorldRequest(world_name=name))
    conn.send(dm_env_rpc_pb2.StepRequest())
    conn.send(dm_env_rpc_pb2.DestroyWorldRequest(world_name=name))
    refused(
        conn,
        dm_env_rpc_pb2.StepRequest(actions={1: tensor_utils.pack_tensor([0])}),
        f"world {name!r} was destroyed",
    )
    refused(conn, dm_env_rpc_pb2.JoinWorldRequest(world_name=name), f"no world {name!r}")
    channel.close()
    still_serving(bystander)


def test_unreachable_server_and_unsendable_settings(sim_server, monkeypatch):
    monkeypatch.setenv(RETRY_VAR, "0")  # told not to wait: the first refusal is the answer
    with pytest.raises(
        ConnectionError, match=r"no simulator answers at 127\.0\.0\.1:1 .*llmrl serve"
    ):
        RemoteWorld("127.0.0.1:1", "SimTestCorridor")
    with pytest.raises(WorldError, match=r"^length: cannot send"):
        RemoteWorld(sim_server.address, "SimTestCorridor", length={"a": 1})


def test_a_simulator_that_starts_late_is_waited_for(monkeypatch):
    """`llmrl up` starts every service at once: a run's first phase may ask for a world
    before the simulator listens (ELLM's pretraining did, in CI). Creating it waits for the
    simulator and gets the world; with nothing listening past the window it fails naming the
    simulator and the setting."""
    monkeypatch.setenv(RETRY_VAR, "120")
    port = free_port()
    asked: dict = {}

    def ask_for_a_world() -> None:  # the run's first phase, before the simulator listens
        started = time.monotonic()
        try:
            with RemoteWorld(f"127.0.0.1:{port}", "SimTestCorridor", num_envs=2, seed=0) as world:
                asked["waited_s"] = time.monotonic() - started
                asked["step_types"] = world.reset()["step_type"].shape
        except Exception as error:  # re-raised below, in the test's thread
            asked["error"] = error

    # The server starts in this thread: it is stopped when the thread that started it ends.
    run = threading.Thread(target=ask_for_a_world)
    run.start()
    time.sleep(1.5)
    server = start_server(grpc_port=port)
    try:
        run.join()
    finally:
        stop_server(server)
    if "error" in asked:
        raise asked["error"]
    assert asked["waited_s"] >= 1.5  # it asked before the simulator listened, and waited
    assert asked["step_types"] == (2,)

    monkeypatch.setenv(RETRY_VAR, "1")
    nowhere = f"127.0.0.1:{free_port()}"
    with pytest.raises(
        ConnectionError,
        match=rf"simulator at {nowhere} could not be reached for 1 s.*llmrl serve simulator.*"
        rf"{RETRY_VAR}",
    ):
        RemoteWorld(nowhere, "SimTestCorridor")


def test_server_going_away_mid_episode_raises_connection_error():
    server = start_server()
    world = RemoteWorld(server.address, "SimTestCorridor", num_envs=2)
    world.reset()
    stop_server(server)
    with pytest.raises(ConnectionError, match="no simulator answers"):
        world.step([0, 0])
    world.close()  # still safe


def wait_for_worlds(server, count: int) -> int:
    deadline = time.monotonic() + 10
    while (worlds := server.health()["worlds"]) != count and time.monotonic() < deadline:
        time.sleep(0.05)
    return worlds


def test_client_disconnecting_mid_episode_frees_its_world(sim_server, bystander):
    before = sim_server.health()["worlds"]
    processes_before = worker_pids(sim_server.process.pid)
    channel, conn = raw_connection(sim_server.address)
    name = conn.send(
        dm_env_rpc_pb2.CreateWorldRequest(
            settings=create_settings(env="SimTestCorridor", num_envs=4, num_workers=2)
        )
    ).world_name
    workers = worker_pids(sim_server.process.pid) - processes_before
    assert len(workers) == 2 and all(running(pid) for pid in workers)
    conn.send(dm_env_rpc_pb2.JoinWorldRequest(world_name=name))
    conn.send(dm_env_rpc_pb2.StepRequest())
    conn.send(
        dm_env_rpc_pb2.StepRequest(actions={1: tensor_utils.pack_tensor(np.ones(4, np.int64))})
    )
    assert sim_server.health()["worlds"] == before + 1
    channel.close()  # gone mid-episode, without LeaveWorld or DestroyWorld
    assert wait_for_worlds(sim_server, before) == before
    assert not wait_until_ended(workers)  # its worker processes ended too
    still_serving(bystander)


def test_health_and_metrics(sim_server, bystander):
    still_serving(bystander)
    assert sim_server.health()["status"] == "ok"
    metrics = sim_server.metrics()
    for name in (
        "llmrl_simulator_worlds",
        "llmrl_simulator_env_steps_total",
        "llmrl_simulator_errors_total",
    ):
        assert name in metrics


def worker_pids(pid: int) -> set[int]:
    """Children of every thread of process `pid` but multiprocessing's resource tracker."""
    tasks = Path(f"/proc/{pid}/task").glob("*/children")
    children = {int(child) for task in tasks for child in task.read_text().split()}
    return {
        c for c in children if b"resource_tracker" not in Path(f"/proc/{c}/cmdline").read_bytes()
    }


def wait_until_ended(pids: set[int], timeout: float = 10) -> list[int]:
    """The pids still running after up to `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while any(running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [pid for pid in pids if running(pid)]


def running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie, dead but not yet reaped, is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_server_stops_gracefully_on_sigterm():
    server = start_server()
    with (
        RemoteWorld(server.address, "SimTestCorridor", num_envs=2) as world,
        RemoteWorld(server.address, "SimTestCorridor", num_envs=4, num_workers=2) as sharded,
    ):
        world.reset()
        sharded.reset()
        workers = worker_pids(server.process.pid)
        assert len(workers) >= 2  # the sharded world's worker processes
        code, stdout, stderr = stop_server(server)
    assert code == 0 and stdout == ""
    assert '"msg": "simulator stopped"' in stderr
    assert not wait_until_ended(workers)  # no orphaned worker processes


def test_serve_refuses_bad_settings_and_busy_ports_with_a_message(sim_server):
    busy_http = sim_server.http.rsplit(":", 1)[1]
    for args, message in [
        (["--set", "colour=red"], "unknown simulator setting(s) colour"),
        (["--set", "grace_s=.inf"], "grace_s: expected a finite number"),
        (["--port", busy_http], "cannot serve HTTP"),
    ]:
        result = subprocess.run(
            [str(LLMRL), "serve", "simulator", "--grpc-port", str(free_port()), *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 1 and message in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
