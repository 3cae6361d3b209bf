"""The intrinsic-reward wrapper over a world of tiny Crafter-text envs: the task reward pays
once when its achievement is unlocked, the reset step after an episode's end pays nothing,
finished episodes are reported with their achievements; novelty rewards are positive and
shrink for a state seen over and over."""

from __future__ import annotations

import json

import numpy as np
import support.tiny_crafter_text  # noqa: F401  (registers TinyCrafterText)
from support.tiny_crafter_text import DO, ENV_ID, LEFT, NOOP, PLACE_TABLE, RIGHT

from llmrl.recipes.ellm.dqn import describe_space
from llmrl.recipes.ellm.intrinsic import AGENT_KEYS
from llmrl.recipes.ellm.novelty import KnnNoveltyReward, RndReward
from llmrl.recipes.ellm.training import EllmEnvSettings, make_env


def test_the_task_pays_once_and_episodes_are_reported():
    settings = EllmEnvSettings(
        env=ENV_ID, num_envs=2, method="none", task="place crafting table", extrinsic_scale=0.0
    )
    envs = make_env(settings)
    try:
        observations, _ = envs.reset(seed=0)
        assert sorted(observations) == sorted(AGENT_KEYS)
        # env 0 chops, places a table, places again; env 1 idles
        script = [RIGHT, RIGHT, DO, PLACE_TABLE, LEFT, DO, PLACE_TABLE]
        rewards = []
        for action in script:
            _, reward, _, _, infos = envs.step(np.array([action, NOOP]))
            rewards.append(reward.tolist())
            assert infos["episodes"] == []
        assert [r[0] for r in rewards] == [0, 0, 0, 1, 0, 0, 0]  # the table, once
        assert all(r[1] == 0 for r in rewards)
        for _ in range(20 - len(script) - 1):
            envs.step(np.array([NOOP, NOOP]))
        _, reward, _, truncated, infos = envs.step(np.array([NOOP, NOOP]))  # step 20: cut
        assert truncated.all()
        ended = {e["env"]: e for e in infos["episodes"]}
        assert ended[0]["unlocked"] == 2 and ended[0]["task_return"] == 1
        assert ended[0]["length"] == 20 and ended[1]["unlocked"] == 0
        assert ended[0]["extrinsic_return"] == 2  # crafter's reward is counted, not paid
        # the next step only resets (NEXT_STEP autoreset): nothing is paid or counted
        _, reward, _, _, infos = envs.step(np.array([PLACE_TABLE, PLACE_TABLE]))
        assert reward.tolist() == [0, 0] and infos["episodes"] == []
    finally:
        envs.close()


def test_fine_tuning_ellm_on_the_task_alone_never_asks_the_suggester():
    # intrinsic reward weighed 0 and no goal in the observation: ELLM's suggester has nothing
    # to give, so the env is built without a gateway and pays exactly what the task pays
    settings = EllmEnvSettings(
        env=ENV_ID, num_envs=2, method="ellm", task="place crafting table", intrinsic_scale=0.0
    )
    envs = make_env(settings)  # llm=None: a suggester would connect to an in-process gateway
    try:
        envs.reset(seed=0)
        script = [RIGHT, RIGHT, DO, PLACE_TABLE, LEFT, DO, PLACE_TABLE]
        rewards = [envs.step(np.array([action, NOOP]))[1].tolist() for action in script]
        assert [r[0] for r in rewards] == [0, 0, 0, 1, 0, 0, 0]
        assert envs.counters().get("asked", 0) == 0
    finally:
        envs.close()


def test_novelty_rewards_fall_for_a_state_seen_again_and_again():
    from gymnasium import spaces

    settings = EllmEnvSettings(env=ENV_ID, num_envs=1, method="none")
    envs = make_env(settings)
    try:
        observations, _ = envs.reset(seed=0)
        described = describe_space(spaces.Dict(envs.single_observation_space.spaces), ())
        described["local_map"]["ids"] = 19
        rnd = RndReward(described, seed=0)
        first = rnd(observations)
        for _ in range(30):
            later = rnd(observations)
        assert first.shape == (1,) and 0 <= later[0] < first[0]
        knn = KnnNoveltyReward(described, seed=0, k=3)
        assert knn(observations)[0] == 0  # nothing remembered yet
        for _ in range(5):
            same = knn(observations)
        moved, *_ = envs.step(np.array([RIGHT]))
        assert same[0] == 0 < knn(moved)[0]  # its k nearest are itself; a new state is not
    finally:
        envs.close()


def test_a_restarted_housekeep_episode_keeps_its_whole_house_text():
    """Procedural houses differ in size: an episode restarted in place (SB3's same-step
    autoreset) may describe a longer house than the last one, and its next step's transition
    is read from that whole text."""
    settings = EllmEnvSettings(
        env="Housekeep", env_kwargs={"max_steps": 1}, num_envs=2, method="none"
    )
    envs = make_env(settings)
    rng = np.random.default_rng(0)
    widths = set()
    try:
        envs.reset(seed=0)
        for _ in range(12):  # every step ends an episode; the next one starts at once
            actions = rng.integers(0, envs.single_action_space.n, size=2)
            _, _, terminated, truncated, _ = envs.step(actions)
            envs.restart(terminated | truncated)
            for text in envs.previous["known_house"]:
                widths.add(len(str(text)))
                assert json.loads(str(text))  # whole, not cut to an older episode's width
    finally:
        envs.close()
    assert len(widths) > 2  # houses of several sizes came by
