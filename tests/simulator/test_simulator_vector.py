"""gymnasium VectorEnv and Stable-Baselines3 VecEnv adapters over worlds."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from llmrl.simulator.client import RemoteWorld
from llmrl.simulator.vector import WorldVecEnv, WorldVectorEnv
from llmrl.simulator.world import World, WorldError

RIGHT, STAY = 1, 2


def test_vector_env_follows_next_step_autoreset():
    envs = WorldVectorEnv(World("SimTestCorridor", num_envs=2, seed=0, length=3))
    assert envs.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    assert set(envs.single_observation_space.spaces) == {"position", "grid", "distance"}
    assert envs.single_action_space == spaces.Discrete(3)
    obs, _ = envs.reset(seed=1)
    assert envs.observation_space.contains(obs)
    done_at = None
    for t in range(10):
        obs, reward, terminated, truncated, _ = envs.step(np.array([RIGHT, STAY]))
        assert not truncated.any() and not terminated[1]
        if terminated[0]:
            done_at = t
            assert reward[0] == 1 and obs["distance"][0] == 0
            break
    assert done_at is not None
    # the next step resets env 0 (its action ignored, reward 0); env 1 steps as usual
    obs, reward, terminated, truncated, _ = envs.step(np.array([RIGHT, STAY]))
    assert reward[0] == 0 and not terminated[0] and obs["distance"][0] > 0
    envs.close()


def test_vector_env_reports_truncation_and_can_select_text():
    world = World("SimTestCorridor", num_envs=2, seed=0, max_episode_steps=2)
    envs = WorldVectorEnv(world, keys=["distance", "text"])
    obs, _ = envs.reset()
    assert obs["text"].dtype.kind == "U"
    envs.step(np.array([0, 0]))
    _, _, terminated, truncated, _ = envs.step(np.array([0, 0]))
    assert truncated.all() and not terminated.any()
    with pytest.raises(WorldError, match="keys: unknown entry 'nope'"):
        WorldVectorEnv(world, keys=["nope"])


def run_vec_env(vec_env, actions: list[np.ndarray]) -> list[tuple]:
    out = [vec_env.reset()]
    for action in actions:
        vec_env.step_async(action)
        out.append(vec_env.step_wait())
    return out


def test_sb3_vec_env_resets_in_the_same_step_with_terminal_observation():
    world = World("SimTestCorridor", num_envs=2, seed=0, length=3)
    vec_env = WorldVecEnv(world, keys=["distance"])
    assert vec_env.observation_space == spaces.Discrete(3)
    obs = vec_env.reset()
    steps = 0
    while True:
        vec_env.step_async(np.array([RIGHT, STAY]))
        obs, rewards, dones, infos = vec_env.step_wait()
        steps += 1
        if dones[0]:
            break
    assert rewards[0] == 1 and not dones[1]
    assert infos[0]["terminal_observation"] == 0  # the goal: distance 0
    assert infos[0]["TimeLimit.truncated"] is False
    assert obs[0] > 0  # already the next episode's first observation
    # env 1 was not stepped by the adapter's extra reset step: it took exactly `steps` steps
    check = World("SimTestCorridor", num_envs=2, seed=0, length=3)
    check.reset()
    for _ in range(steps):
        expected = check.step([RIGHT, STAY])["distance"]
    assert obs[1] == expected[1]
    # the env's next step is a normal step of the new episode, not a reset
    vec_env.step_async(np.array([RIGHT, STAY]))
    obs2, rewards2, dones2, infos2 = vec_env.step_wait()
    if obs[0] == 1:  # one step from the goal: this step ends the new episode
        assert dones2[0] and rewards2[0] == 1 and infos2[0]["terminal_observation"] == 0
    else:
        assert obs2[0] == obs[0] - 1 and rewards2[0] == 0 and not dones2[0]


def test_sb3_vec_env_over_remote_world_matches_in_process(sim_server):
    rng = np.random.default_rng(0)
    actions = [rng.integers(0, 3, 3) for _ in range(40)]
    local = run_vec_env(WorldVecEnv(World("SimTestCorridor", 3, seed=5)), actions)
    with RemoteWorld(sim_server.address, "SimTestCorridor", num_envs=3, seed=5) as world:
        remote = run_vec_env(WorldVecEnv(world), actions)
    for step, (a, b) in enumerate(zip(local[1:], remote[1:], strict=True)):
        for key in a[0]:
            np.testing.assert_array_equal(a[0][key], b[0][key], err_msg=f"step {step}")
        np.testing.assert_array_equal(a[1], b[1])
        np.testing.assert_array_equal(a[2], b[2])
        assert [set(i) for i in a[3]] == [set(i) for i in b[3]]
    assert any(dones.any() for _, _, dones, _ in local[1:])  # episodes did end


def test_sb3_ppo_learns_on_a_world_vec_env():
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecMonitor

    vec_env = VecMonitor(
        WorldVecEnv(World("SimTestCorridor", num_envs=4, seed=0), keys=["grid", "distance"])
    )
    model = PPO(
        "MultiInputPolicy", vec_env, n_steps=16, batch_size=64, n_epochs=1, seed=0, device="cpu"
    )
    model.learn(total_timesteps=256)
    assert model.num_timesteps >= 256
    assert len(model.ep_info_buffer) > 0  # whole episodes went through VecMonitor
    vec_env.close()
