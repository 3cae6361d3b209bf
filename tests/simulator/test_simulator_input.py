"""Malformed input at the gRPC level: bytes that are no EnvironmentRequest (corrupt wire format,
a string field of bad UTF-8) end the stream with INVALID_ARGUMENT, not INTERNAL, and the
server goes on serving; the simulator's time settings (`grace_s`) must be finite numbers,
refused naming the setting otherwise. Against the session's server."""

from __future__ import annotations

import math

import grpc
import pytest
from dm_env_rpc.v1 import dm_env_rpc_pb2

from llmrl.common.auth import authenticated_channel
from llmrl.simulator.client import RemoteWorld
from llmrl.simulator.service import _check_settings

PROCESS = "/dm_env_rpc.v1.Environment/Process"
GOOD = dm_env_rpc_pb2.EnvironmentRequest(
    join_world=dm_env_rpc_pb2.JoinWorldRequest(world_name="x")
).SerializeToString()


def send_raw(address: str, payload: bytes) -> grpc.RpcError:
    """Send `payload` as the stream's one message; the call must fail: returns its error."""
    with grpc.insecure_channel(address) as channel:
        process = authenticated_channel(channel).stream_stream(PROCESS)  # bytes, as they are
        with pytest.raises(grpc.RpcError) as failed:
            list(process(iter([payload]), timeout=30))
    return failed.value


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        (b"\xff\xff\xff\xff", "corrupt"),
        (GOOD.replace(b"x", b"\xff"), "UTF-8"),  # world_name is not UTF-8
        (b"\x12" + b"\x12\x02" * 200, ""),  # truncated nested messages
    ],
)
def test_malformed_request_bytes_are_invalid_argument(sim_server, payload, says):
    failed = send_raw(sim_server.address, payload)
    assert failed.code() == grpc.StatusCode.INVALID_ARGUMENT, (failed.code(), failed.details())
    assert "EnvironmentRequest" in failed.details() and says in failed.details()
    with RemoteWorld(sim_server.address, "SimTestCorridor", num_envs=2) as world:
        assert world.reset()["step_type"].tolist() == [0, 0]  # still serving


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, "inf", -1, True, 10**6])
def test_grace_s_must_be_a_finite_number_of_seconds(value):
    with pytest.raises(ValueError, match=r"^grace_s: expected a finite number of seconds"):
        _check_settings({"grace_s": value})


@pytest.mark.parametrize("value", [0, 2, 2.5])
def test_finite_grace_s_is_kept(value):
    assert _check_settings({"grace_s": value})["grace_s"] == value
