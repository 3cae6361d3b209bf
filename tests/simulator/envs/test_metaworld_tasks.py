"""The MetaWorld env: KALM's task levels with 20 instructions each, Box(4) actions in worlds
(in-process and over gRPC agree), the scripted expert succeeds, bad settings are named."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from support.world_rollouts import assert_same

from llmrl.simulator.client import RemoteWorld
from llmrl.simulator.envs.text_spaces import TEXT_CHARSET
from llmrl.simulator.world import World, WorldError

pytest.importorskip("metaworld")
mw = pytest.importorskip("llmrl.simulator.envs.metaworld_tasks")


def test_levels_and_instructions():
    assert len(mw.TASK_LEVELS["training"]) == 10 and "coffee-button" in mw.TASK_LEVELS["training"]
    assert {"door-lock", "window-close"} <= set(mw.TASK_LEVELS["unseen-easy"])
    assert {"hammer", "soccer"} <= set(mw.TASK_LEVELS["unseen-hard"])
    for task in mw.TASKS:
        texts = mw.instructions(task)
        assert len(set(texts)) == 20 and all(set(t) <= TEXT_CHARSET for t in texts), task
        mw.expert_policy(task)  # every task has Meta-World's scripted expert
    assert mw.level_of("door-close") == "unseen-easy"


def test_the_expert_solves_a_task_and_the_episode_ends_on_success():
    with World("MetaWorld", num_envs=1, seed=0, task="reach") as world:
        obs = world.reset()
        assert obs["state"].shape == (1, 39) and obs["instruction"][0] in mw.instructions("reach")
        expert = mw.expert_policy("reach")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the experts warn about clipped gains
            for _ in range(mw.MAX_EPISODE_STEPS):
                action = np.clip(expert.get_action(obs["state"][0].astype(np.float64)), -1, 1)
                obs = world.step(action[None])
                if obs["step_type"][0] == 2:
                    break
        assert obs["success"][0] == 1 and obs["discount"][0] == 0.0


def test_worlds_agree_in_process_and_over_grpc(sim_server):
    settings = {"num_envs": 2, "seed": 5, "task": "push", "max_episode_steps": 4}

    def run(world):
        rng = np.random.default_rng(0)
        results = [world.reset()]
        for _ in range(6):  # past the time limit: episodes auto-reset with new placements
            results.append(world.step(rng.uniform(-1, 1, (2, 4)).astype(np.float32)))
        return results

    with (
        World("MetaWorld", **settings) as local,
        RemoteWorld(sim_server.address, "MetaWorld", **settings) as remote,
    ):
        assert remote.action_space.shape == (4,)
        expected = run(local)
        assert_same(run(remote), expected)
    starts = [r["state"][0] for r in expected if r["step_type"][0] == 0]
    assert len(starts) == 2 and not np.array_equal(starts[0][36:], starts[1][36:])  # new goal


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"task": "make-coffee"}, r"^task: unknown task 'make-coffee'; tasks: reach, push"),
        ({"terminate_on_success": "yes"}, r"^terminate_on_success: expected true or false"),
    ],
)
def test_bad_settings_name_the_setting(sim_server, settings, message):
    with pytest.raises(WorldError, match=message):
        World("MetaWorld", num_envs=1, **settings)
    with pytest.raises(WorldError, match=message):
        RemoteWorld(sim_server.address, "MetaWorld", num_envs=1, **settings)
