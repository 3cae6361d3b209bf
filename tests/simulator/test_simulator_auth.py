"""With a token, the simulator's gRPC server refuses calls without it (UNAUTHENTICATED) and
serves RemoteWorld and plain dm_env_rpc connections that send it as metadata."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
import support.sim_envs  # noqa: F401  registers the SimTest envs
from dm_env_rpc.v1 import connection, dm_env_rpc_pb2, error

from llmrl.simulator.client import RemoteWorld
from llmrl.simulator.server import SimulatorServicer, create_server

TOKEN = "sim-t0ken"


@pytest.fixture
def guarded_address(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    for name in ("LLMRL_TOKEN", "LLMRL_ORCHESTRATOR_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    servicer = SimulatorServicer()
    server, port = create_server("127.0.0.1", 0, servicer, token=TOKEN)
    yield f"127.0.0.1:{port}"
    server.stop(grace=None)
    servicer.destroy_all()


def _create_world(address: str, metadata: list[tuple[str, str]] | None) -> None:
    with grpc.insecure_channel(address) as channel:
        conn = connection.Connection(channel, metadata=metadata)
        try:
            conn.send(dm_env_rpc_pb2.CreateWorldRequest())
        finally:
            conn.close()


@pytest.mark.parametrize("metadata", [None, [("authorization", "Bearer wrong")]])
def test_a_missing_or_wrong_token_is_unauthenticated(guarded_address, metadata):
    with pytest.raises(grpc.RpcError) as refused:
        _create_world(guarded_address, metadata)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert TOKEN not in (refused.value.details() or "")


def test_remote_world_without_the_token_says_which_variable_to_set(guarded_address):
    with pytest.raises(PermissionError, match="wants its token: set LLMRL_TOKEN"):
        RemoteWorld(guarded_address, "SimTestCorridor")


def test_clients_with_the_token_are_served(guarded_address, monkeypatch):
    monkeypatch.setenv("LLMRL_TOKEN", TOKEN)
    with RemoteWorld(guarded_address, "SimTestCorridor", num_envs=2, seed=1) as world:
        observations = world.reset()
        assert world.num_envs == 2 and observations
    # a plain dm_env_rpc connection passes the token as metadata (it reaches the servicer)
    with pytest.raises(error.DmEnvRpcError):  # an empty CreateWorld: refused by the servicer
        _create_world(guarded_address, [("authorization", f"Bearer {TOKEN}")])
