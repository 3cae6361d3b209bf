"""The built-in environments through worlds: in-process, sharded and over gRPC agree."""

from __future__ import annotations

import numpy as np
import pytest
from support.world_rollouts import assert_same

from llmrl.simulator.client import RemoteWorld
from llmrl.simulator.world import World, WorldError

# env id -> skills to mix into random play
REAL_ENVS = {
    "SimpleDoorKey": ["explore", "go to the goal"],
    "BabyAIText-GoToLocal": ["turn left", "go forward"],
}


def random_rollout(world, steps: int, skills: list[str] | None = None) -> list[dict]:
    """Random low-level actions, and (when given) random skills in half of the envs."""
    rng = np.random.default_rng(1)
    out = [world.reset(observations=[*world.default_observations, *world.privileged_observations])]
    for _ in range(steps):
        action = rng.integers(0, world.action_space.n, world.num_envs)
        skill = None
        if skills:
            skill = np.where(
                rng.random(world.num_envs) < 0.5, rng.choice(skills, world.num_envs), ""
            )
        out.append(world.step(action, skill))
    return out


@pytest.mark.parametrize("env", REAL_ENVS)
def test_remote_and_sharded_worlds_equal_in_process_world(sim_server, env):
    local = World(env, num_envs=3, seed=11)
    skills = REAL_ENVS[env] if local.has_skills else None
    expected = random_rollout(local, 25, skills)
    assert "text" in expected[0] and expected[0]["text"].dtype.kind == "U"
    with RemoteWorld(sim_server.address, env, num_envs=3, seed=11) as remote:
        assert_same(random_rollout(remote, 25, skills), expected)
    with World(env, num_envs=3, seed=11, num_workers=2) as sharded:
        assert_same(random_rollout(sharded, 25, skills), expected)


def test_when2ask_unknown_skill_is_refused_with_the_skill_list(sim_server):
    with RemoteWorld(sim_server.address, "SimpleDoorKey", num_envs=2, seed=0) as world:
        world.reset()
        with pytest.raises(WorldError, match=r"^skill\[1\]: .*fly to the moon") as info:
            world.step([0, 0], ["explore", "fly to the moon"])
        assert "explore" in str(info.value)
        assert world.step([0, 0], ["explore", ""])["step_type"].shape == (2,)
