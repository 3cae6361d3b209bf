"""A world's cost is bounded (issue 14): CreateWorld settings that would take hours or exhaust
the host (huge rooms, room size × thousands of envs, more envs than the server allows, endless
episodes, non-finite numbers) and settings naming a missing directory are INVALID_ARGUMENT
naming the setting, before any env is built; the server keeps serving."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from llmrl.simulator.client import RemoteWorld
from llmrl.simulator.server import SimulatorServicer, create_server
from llmrl.simulator.world import MAX_WORLD_CELLS, WorldError


@pytest.fixture(scope="module")
def address() -> Iterator[str]:
    servicer = SimulatorServicer(max_envs_per_world=300)
    server, port = create_server("127.0.0.1", 0, servicer)
    yield f"127.0.0.1:{port}"
    servicer.destroy_all()
    server.stop(None)


@pytest.mark.parametrize(
    ("settings", "field", "says"),
    [
        ({"num_envs": 301}, "num_envs", "at most 300"),
        ({"num_envs": 300, "min_room_size": 60, "max_room_size": 64}, "num_envs",
         f"at most {MAX_WORLD_CELLS}"),
        ({"max_room_size": 100_000}, "max_room_size", "at most 64"),
        ({"max_episode_steps": 10**9}, "max_episode_steps", "at most"),
        ({"max_steps": float("inf")}, "max_steps", "finite"),
    ],
)  # fmt: skip
def test_costly_worlds_are_refused_naming_the_setting(address, settings, field, says):
    with pytest.raises(WorldError) as refused:
        RemoteWorld(address, "SimpleDoorKey", **settings)
    assert refused.value.field == field and says in str(refused.value)
    with RemoteWorld(address, "SimpleDoorKey", num_envs=2) as world:  # still serving
        assert world.num_envs == 2


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_missing_data_directory_is_invalid_argument_naming_it(address, tmp_path, num_workers):
    # inside the data roots (tests' temporary folders are), but not there
    with pytest.raises(WorldError) as refused:
        RemoteWorld(
            address, "Housekeep", data_dir=str(tmp_path / "nowhere"), num_workers=num_workers
        )
    assert refused.value.field == "data_dir" and "nowhere" in str(refused.value)


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize(
    ("settings", "field", "says"),
    [({"gib": 512}, "settings", "more memory"), ({"needs_file": "/no/such/file"}, "needs_file",
      "No such file")],
)  # fmt: skip
def test_a_world_out_of_memory_or_files_is_invalid_argument_in_workers_too(
    address, num_workers, settings, field, says
):
    """A worker's MemoryError or OSError while building its envs is the same
    INVALID_ARGUMENT naming the setting as in one process, not INTERNAL."""
    with pytest.raises(WorldError) as refused:
        RemoteWorld(address, "SimTestCostly", num_envs=2, num_workers=num_workers, **settings)
    assert refused.value.field == field and says in str(refused.value)
    with RemoteWorld(address, "SimTestCostly", num_envs=2, num_workers=num_workers) as world:
        assert world.num_envs == 2  # still serving
