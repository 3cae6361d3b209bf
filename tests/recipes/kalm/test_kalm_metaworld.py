"""KALM's imagination on Meta-World: the success test on observations agrees with Meta-World's
own flag on its experts' episodes, the validity check keeps real states and drops impossible
ones, a tiny random grounded model imagines Box actions of the right shape inside the Box, and
the recipe at a tiny budget runs ground -> imagine -> offline (bc) -> evaluate on real and on
real + imagined data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from support.tiny_llm import TINY_MODEL, tiny_gateway_settings

import llmrl.llm_gateway.client as gateway_client
from llmrl.common.offline_dataset import OfflineDataset
from llmrl.recipes.kalm import metaworld_goals

pytest.importorskip("metaworld")


def random_reach_dataset(episodes: int = 4, steps: int = 5, seed: int = 0) -> OfflineDataset:
    """Meta-World reach-v3 episodes of random actions, as the real data of a tiny run."""
    from llmrl.simulator.envs.metaworld_tasks import instructions, make_task_env

    env, rng = make_task_env("reach"), np.random.default_rng(seed)
    texts = instructions("reach")
    rows: dict[str, list] = {
        k: []
        for k in ("observations", "actions", "rewards", "terminals", "timeouts", "episode_ids")
    }
    finals, goals, chosen = [], [], []
    for episode in range(episodes):
        env.seed(seed + episode)
        state, _ = env.reset()
        goals.append(state[36:39])
        chosen.append(texts[episode % len(texts)])
        for t in range(steps):
            action = rng.uniform(-1, 1, 4).astype(np.float32)
            after, reward, *_ = env.step(action)
            rows["observations"].append(state)
            rows["actions"].append(action)
            rows["rewards"].append(reward)
            rows["terminals"].append(False)
            rows["timeouts"].append(t == steps - 1)
            rows["episode_ids"].append(episode)
            state = after
        finals.append(state)
    env.close()
    return OfflineDataset.from_arrays(
        env="MetaWorld",
        source="scripted",
        final_observations=np.stack(finals),
        instructions=np.asarray(chosen),
        goals=np.stack(goals),
        **{k: np.asarray(v) for k, v in rows.items()},
    )


def test_hand_bounds_are_meta_worlds_own():
    from metaworld.sawyer_xyz_env import SawyerXYZEnv

    np.testing.assert_allclose(metaworld_goals.HAND_LOW, SawyerXYZEnv._HAND_SPACE.low, atol=1e-6)
    np.testing.assert_allclose(metaworld_goals.HAND_HIGH, SawyerXYZEnv._HAND_SPACE.high, atol=1e-6)


@pytest.mark.parametrize("task", ["door-close", "basketball", "window-close"])
def test_success_on_observations_agrees_with_meta_world(task):
    assert metaworld_goals.expert_agreement(task, episodes=1, steps=120) >= 0.95


def test_validity_keeps_real_states_and_drops_impossible_ones():
    real = random_reach_dataset(episodes=2)
    assert all(metaworld_goals.valid_state(s) for s in real.observations)
    state = real.observations[0].copy()
    for index, value in ((0, 2.0), (3, 1.5), (5, 3.0), (8, 1.2), (37, -2.0), (10, np.nan)):
        broken = state.copy()
        broken[index] = value  # hand off its space, gripper, object, quaternion, goal, NaN
        assert not metaworld_goals.valid_state(broken), index
    assert not metaworld_goals.valid_state(state[:38])


def test_a_tiny_grounded_model_imagines_box_actions_inside_the_box(tiny_model_dir):
    import torch

    from llmrl.recipes.kalm.grounded_lm import GroundedLM, GroundingSpec
    from llmrl.recipes.kalm.imagination import MetaWorldImagination, imagine_level
    from llmrl.recipes.kalm.imagine import imagine

    real = random_reach_dataset(episodes=2)
    model = GroundedLM.create(
        str(tiny_model_dir),
        GroundingSpec(state_dim=39, action_dim=4),
        lora_r=2,
        states=real.observations,
    )
    with torch.no_grad():  # an action head far outside the Box, so that clipping shows
        model.modules["action_out"].bias.copy_(torch.tensor([3.0, -3.0, 0.0, 3.0]))
    model.train(False)
    starts = real.observations[:2]
    rollouts = imagine(model, starts, ["reach the goal"] * 2, max_steps=3, action_bounds=(-1, 1))
    for rollout in rollouts:
        steps = len(rollout.actions)
        assert 1 <= steps <= 3 and rollout.actions.shape == (steps, 4)
        assert rollout.states.shape == (steps + 1, 39)
        assert np.all(np.abs(rollout.actions) <= 1.0)
        assert np.all(rollout.actions[:, 0] == 1.0) and np.all(rollout.actions[:, 1] == -1.0)
    env = MetaWorldImagination()
    try:
        for imagined_filter in ("valid", "goal"):
            dataset, figures = imagine_level(
                model, real, env, "unseen-hard", count=3, max_steps=3, seed=1,
                imagined_filter=imagined_filter,
            )  # fmt: skip
            assert figures["rollouts"] == 3 and figures["filter"] == imagined_filter
            assert 0 <= figures["kept_share_goal"] <= figures["kept_share_valid"] <= 1
            if dataset is not None:
                assert dataset.actions.shape[1:] == (4,) and dataset.actions.dtype == np.float32
                assert np.all(np.abs(dataset.actions) <= 1.0)
                assert dataset.goals.shape[1:] == (3,) and dataset.env == "MetaWorld"
                assert all(metaworld_goals.valid_state(s) for s in dataset.observations)
                if imagined_filter == "goal":  # each kept rollout is labelled a success
                    assert figures["imagined_success_share"] == 1.0
    finally:
        env.close()


def test_the_recipe_imagines_and_trains_on_both_data_variants(
    tiny_model_dir, tmp_path, monkeypatch
):
    from llmrl.orchestrator.embedded import run_embedded

    home = tmp_path / "home"
    gateway = tmp_path / "gateway.yaml"
    gateway.write_text(yaml.safe_dump(tiny_gateway_settings(tiny_model_dir)))
    monkeypatch.setenv("LLMRL_HOME", str(home))
    monkeypatch.setenv("LLMRL_LLM_GATEWAY_CONFIG", str(gateway))
    monkeypatch.setattr(gateway_client, "_shared_gateway", None)
    dataset = random_reach_dataset().save(home / "real.npz")
    config = {
        "env": "MetaWorld", "model": TINY_MODEL, "dataset": str(dataset),
        "grounding_steps": 2, "grounding_batch_size": 2, "lora_r": 2,
        "imagined_per_level": 4, "imagine_max_steps": 3, "imagine_levels": ["unseen-easy"],
        "imagined_filter": "valid", "offline_steps": 10, "offline_batch_size": 8,
        "eval_episodes": 2, "levels": ["unseen-easy"], "algorithms": ["bc"], "seed": 2,
    }  # fmt: skip
    out = tmp_path / "run"
    run_embedded("kalm", config, out_dir=out, progress=False)
    results = json.loads((out / "results.json").read_text())
    cells = {(r["algorithm"], r["data"], r["level"]) for r in results["rows"]}
    assert cells == {("bc", "real", "unseen-easy"), ("bc", "real+imagined", "unseen-easy")}
    assert any(n.startswith("imagined unseen-easy: 4 rollouts") for n in results["notes"])
    assert (Path(out) / "imagination.png").stat().st_size > 0


def test_imagined_meta_world_rollouts_join_the_real_data():
    from llmrl.recipes.kalm.imagination import MetaWorldImagination, to_dataset
    from llmrl.recipes.kalm.imagine import Rollout

    real = random_reach_dataset(episodes=2, steps=3)
    env = MetaWorldImagination()
    states = real.observations[:4]
    goal = ("reach", states[0, 36:39])
    reached = states.copy()
    reached[2, 0:3] = goal[1]  # the hand on the goal at the second step: the rollout ends there
    rollouts = [Rollout(states, real.actions[:3], True), Rollout(reached, real.actions[:3], True)]
    imagined = to_dataset(
        "MetaWorld", rollouts, [goal, goal], ["reach the goal"] * 2, env, "training",
        lambda s, g: env.success("training", s, g),
    )  # fmt: skip
    assert imagined.source == "imagined" and imagined.num_episodes == 2
    assert imagined.terminals.tolist() == [False, False, False, False, True]
    assert imagined.rewards.tolist() == [0.0, 0.0, 0.0, 0.0, 10.0]
    joined = OfflineDataset.concatenate(real, imagined)
    assert joined.num_episodes == 4 and not joined.discrete
