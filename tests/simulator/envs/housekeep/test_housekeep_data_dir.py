"""Housekeep's data_dir comes from CreateWorld settings and run configs: only LLMRL_HOME and the
configured data roots may be read, and its data.npy never runs code."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from dm_env_rpc.v1 import connection, dm_env_rpc_pb2, error, tensor_utils

from llmrl.common.auth import authenticated_channel
from llmrl.common.paths import DATA_ROOTS_ENV
from llmrl.common.safe_numpy import UnsafePickleError
from llmrl.simulator.envs.housekeep import HousekeepEnv
from llmrl.simulator.envs.housekeep.data import annotations
from llmrl.simulator.errors import WorldError


class _WritesAFile:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def _booby_trapped_data(folder: Path) -> Path:
    """A folder shaped like the Housekeep data whose data.npy would create `pwned` if loaded
    with np.load(allow_pickle=True)."""
    (folder / "episodes").mkdir(parents=True)
    payload = {
        "objects": ["mug"],
        "room_receptacles": ["x"],
        "ranks": _WritesAFile(folder / "pwned"),
    }
    np.save(folder / "data.npy", np.array(payload, dtype=object))
    return folder / "pwned"


@pytest.fixture
def outside() -> Iterator[Path]:
    """A folder outside LLMRL_HOME and every data root (not under pytest's folders)."""
    folder = Path(tempfile.mkdtemp(prefix="llmrl-outside-"))
    yield folder
    shutil.rmtree(folder)


def test_a_data_dir_outside_the_data_roots_is_refused_naming_it(outside, tmp_path):
    marker = _booby_trapped_data(outside)
    link = tmp_path / "data"
    link.symlink_to(outside)  # inside the roots by name, outside once resolved
    for data_dir in (outside, link, f"{tmp_path}/{'../' * len(tmp_path.parts)}{outside}"):
        with pytest.raises(WorldError, match=r"^data_dir: .* outside the folders") as caught:
            HousekeepEnv(data_dir=data_dir)
        assert caught.value.field == "data_dir"
    assert not marker.exists()


def test_configured_data_roots_are_readable_and_pickles_stay_inert(outside, monkeypatch):
    marker = _booby_trapped_data(outside)
    monkeypatch.setenv(DATA_ROOTS_ENV, str(outside))  # the operator allows it
    with pytest.raises(UnsafePickleError, match="refusing to unpickle pathlib"):
        annotations(outside)
    assert not marker.exists()


def test_the_simulator_answers_invalid_argument_naming_data_dir(sim_server, outside):
    marker = _booby_trapped_data(outside)
    channel = authenticated_channel(grpc.insecure_channel(sim_server.address))
    settings = {"env": "Housekeep", "data_dir": str(outside)}
    request = dm_env_rpc_pb2.CreateWorldRequest(
        settings={name: tensor_utils.pack_tensor(value) for name, value in settings.items()}
    )
    try:
        with pytest.raises(error.DmEnvRpcError) as caught:
            connection.Connection(channel).send(request)
    finally:
        channel.close()
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert caught.value.message.startswith("data_dir: ")
    assert not marker.exists()
