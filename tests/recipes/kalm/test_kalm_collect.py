"""KALM's scripted collectors: CLEVR-Robot's noisy pusher and Meta-World's noisy experts play
worlds and return complete episodes as OfflineDatasets that d3rlpy takes."""

from __future__ import annotations

import numpy as np
import pytest

from llmrl.common.offline_dataset import OfflineDataset
from llmrl.recipes.kalm import collect
from llmrl.recipes.kalm.data import record_episodes
from llmrl.simulator.envs import clevr_robot
from llmrl.simulator.world import World


def test_the_pusher_reaches_goals_of_every_level_and_noise_makes_it_wander():
    for level in clevr_robot.LEVELS:
        dataset = collect.collect_clevr(6, level=level, noise=0.0, seed=1, num_envs=3)
        assert dataset.num_episodes == 6 and dataset.source == "scripted"
        for episode in dataset.episodes():
            assert episode.terminals[-1]
            assert clevr_robot.LEVEL_SUCCESS[level](episode.final_observation, episode.goal)
            assert episode.instruction in clevr_robot.phrasings(episode.goal, level)
    noisy = collect.ScriptedPusher(noise=1.0, seed=0)
    clean = collect.ScriptedPusher(noise=0.0, seed=0)
    with World("ClevrRobot", num_envs=16, seed=0) as world:
        obs = world.reset()
        assert (noisy(obs) != clean(obs)).any()


def test_goals_per_start_records_one_start_under_several_instructions():
    dataset = collect.collect_clevr(12, noise=0.0, seed=2, num_envs=2, goals_per_start=3)
    episodes = list(dataset.episodes())
    starts = {}
    for episode in episodes:
        starts.setdefault(tuple(episode.observations[0]), []).append(episode)
    assert len(starts) < len(episodes)  # starts are shared ...
    shared = [group for group in starts.values() if len(group) > 1]
    # ... under different goals, where the pusher's first push follows the goal, not the start
    assert any(len({tuple(e.goal) for e in group}) > 1 for group in shared)
    assert any(len({int(e.actions[0]) for e in group}) > 1 for group in shared)
    with (
        World("ClevrRobot", num_envs=1, seed=0) as world,
        pytest.raises(ValueError, match="goals_per_start"),
    ):
        collect.collect_clevr(2, world=world, goals_per_start=2)


def test_recorded_episodes_are_complete_and_convert_for_d3rlpy(tmp_path):
    # a time limit of 2 steps: most episodes end in a timeout, some in success
    with World("ClevrRobot", num_envs=4, seed=3, max_episode_steps=2) as world:
        dataset = record_episodes(world, collect.ScriptedPusher(0.3, seed=0), 12, env="ClevrRobot")
    assert dataset.num_episodes == 12
    lengths = np.bincount(dataset.episode_ids)
    assert (lengths <= 2).all()
    ends = dataset.episode_bounds()[1:] - 1
    assert (dataset.terminals[ends] ^ dataset.timeouts[ends]).all()
    assert dataset.timeouts.any()
    for episode in dataset.episodes():  # each row's next state is the following row's state
        states = np.vstack([episode.observations, episode.final_observation])
        replayed = [
            clevr_robot.push(s, int(a)) for s, a in zip(states[:-1], episode.actions, strict=True)
        ]
        np.testing.assert_allclose(replayed, states[1:], atol=1e-6)
    loaded = OfflineDataset.load(dataset.save(tmp_path / "clevr.npz"))
    pytest.importorskip("d3rlpy")
    mdp = loaded.to_mdp_dataset(action_size=clevr_robot.NUM_ACTIONS)
    assert len(mdp.episodes) == 12


def test_metaworld_experts_with_noise_levels():
    pytest.importorskip("metaworld")
    dataset = collect.collect_metaworld(["reach"], 2, noise_levels=(0.0, 0.5), seed=0)
    assert dataset.env == "MetaWorld" and dataset.num_episodes == 2
    assert dataset.observations.shape[1] == 39 and dataset.actions.shape[1] == 4
    assert np.abs(dataset.actions).max() <= 1.0
    np.testing.assert_allclose(dataset.goals, dataset.final_observations[:, -3:])
    assert dataset.terminals[dataset.episode_bounds()[1] - 1]  # the noiseless expert succeeds
    with pytest.raises(ValueError, match="noise: expected a number"):
        collect.MetaWorldExpert("reach", noise=-1)
