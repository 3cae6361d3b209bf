"""BabyAI-Text: the view in words on hand-built grids, text actions, expert, mixes, seeding."""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from minigrid.core.grid import Grid
from minigrid.core.world_object import Ball, Door, Key, Wall

import llmrl.simulator.envs  # noqa: F401 - registers the environments
from llmrl.common.registry import registry
from llmrl.simulator.envs.babyai_text.describe import describe_view, position_phrase
from llmrl.simulator.envs.babyai_text.mixes import (
    HELD_OUT_OBJECTS,
    TEST_SEQUENCES,
    TRAIN_SEQUENCES,
)
from llmrl.simulator.envs.base import InvalidSkillError, SkillStatus, step_skill

LEVELS = [
    "GoToLocal",
    "GoToLocalS5N2",
    "PickupLoc",
    "PutNextLocal",
    "OpenDoor",
    "MixTrain",
    "MixTestNewObjects",
    "MixTestNewCompositions",
]


def hand_built_view(objects: dict, agent=(3, 6), direction=3, carrying=None) -> np.ndarray:
    """The 7x7 image of an 8x8 walled room holding `objects` ({(x, y): WorldObj})."""
    env = gym.make("llmrl/BabyAIText-GoToLocal-v0").unwrapped
    env.reset(seed=0)
    level = env.level
    level.grid = Grid(level.width, level.height)
    level.grid.wall_rect(0, 0, 8, 8)
    for (x, y), obj in objects.items():
        level.grid.set(x, y, obj)
    level.agent_pos, level.agent_dir, level.carrying = agent, direction, carrying
    return level.gen_obs()["image"]


# -- registration and the gymnasium contract ---------------------------------------------
@pytest.mark.parametrize("level", LEVELS)
def test_env_checker_passes(level):
    check_env(gym.make(f"llmrl/BabyAIText-{level}-v0").unwrapped, skip_render_check=True)


def test_env_checker_passes_with_the_expert():
    check_env(
        gym.make("llmrl/BabyAIText-MixTrain-v0", expert=True).unwrapped, skip_render_check=True
    )


def test_registered_ids_and_spaces():
    names = registry.names("env")
    for level in LEVELS:
        assert f"BabyAIText-{level}" in names
    env = gym.make("llmrl/BabyAIText-PickupLoc-v0")
    assert env.action_space == gym.spaces.Discrete(6)
    obs, _ = env.reset(seed=1)
    assert obs["image"].shape == (7, 7, 3)
    assert set(obs) == {
        *("image", "direction", "mission", "text", "skill_status"),
        *("action_phrases", "mission_tokens"),
    }
    assert obs["mission"].startswith("pick up")
    with pytest.raises(ValueError, match=r"unknown level 'PickupLocal'.*PickupLoc"):
        gym.make("llmrl/BabyAIText-GoToLocal-v0", level="PickupLocal")


# -- the view in words ------------------------------------------------------------------------
def test_position_phrases():
    assert position_phrase(2, 1) == "2 steps left and 1 step forward"
    assert position_phrase(-1, 0) == "1 step right"
    assert position_phrase(0, 3) == "3 steps forward"


def test_text_of_a_hand_built_room():
    image = hand_built_view(
        {
            (1, 5): Ball("red"),
            (3, 4): Key("green"),
            (5, 0): Door("blue", is_locked=True),
        }
    )
    assert describe_view(image, None) == (
        "You see a green key 2 steps forward, a red ball 2 steps left and 1 step forward, "
        "a locked blue door 2 steps right and 6 steps forward, a wall 6 steps forward, "
        "a wall 3 steps left. You carry nothing."
    )


def test_text_hides_what_walls_hide_and_says_what_is_carried():
    # Facing right from (1, 3): a wall across x=3, its closed door ahead, a ball behind it.
    objects = {(3, y): Wall() for y in (1, 2, 4, 5, 6)}
    objects[(3, 3)] = Door("yellow")
    objects[(5, 1)] = Ball("purple")
    image = hand_built_view(objects, agent=(1, 3), direction=0, carrying=Key("grey"))
    assert describe_view(image, ("key", "grey")) == (
        "You see a closed yellow door 2 steps forward, a wall 3 steps left. You carry a grey key."
    )
    objects[(3, 3)] = Door("yellow", is_open=True)
    image = hand_built_view(objects, agent=(1, 3), direction=0)
    assert describe_view(image, None) == (
        "You see an open yellow door 2 steps forward, a purple ball 2 steps left and 4 steps "
        "forward, a wall 6 steps forward, a wall 3 steps left. You carry nothing."
    )


def test_observation_text_matches_the_image():
    env = gym.make("llmrl/BabyAIText-PutNextLocal-v0")
    obs, _ = env.reset(seed=4)
    for action in (3, 2, 1, 3, 2, 2):
        carried = env.unwrapped.level.carrying
        expected = describe_view(obs["image"], carried and (carried.type, carried.color))
        assert obs["text"] == expected
        obs, *_ = env.step(action)


# -- text actions -------------------------------------------------------------------------------
def test_each_text_action_is_one_step_and_done():
    env = gym.make("llmrl/BabyAIText-GoToLocal-v0")
    env.reset(seed=2)
    level = env.unwrapped.level
    direction = level.agent_dir
    obs, _, _, _, info = step_skill(env, "turn left")
    assert info["skill_status"] == SkillStatus.DONE == obs["skill_status"]
    assert level.agent_dir == (direction - 1) % 4 and level.step_count == 1
    step_skill(env, "Turn Right.")
    assert level.agent_dir == direction and level.step_count == 2
    assert env.unwrapped.skill_names() == [
        "turn left",
        "turn right",
        "go forward",
        "pick up",
        "drop",
        "toggle",
    ]


def test_bad_text_action_and_bad_action_are_rejected():
    env = gym.make("llmrl/BabyAIText-GoToLocal-v0")
    env.reset(seed=2)
    with pytest.raises(InvalidSkillError, match="valid actions: turn left, turn right"):
        step_skill(env, "go to the red ball")
    with pytest.raises(ValueError, match=r"integer in \[0, 6\)"):
        env.step(7)


# -- the expert ---------------------------------------------------------------------------------
@pytest.mark.parametrize("level", LEVELS)
def test_expert_solves_levels(level):
    env = gym.make(f"llmrl/BabyAIText-{level}-v0", expert=True)
    for seed in range(4):
        obs, _ = env.reset(seed=seed)
        for _ in range(200):
            obs, reward, terminated, truncated, _ = step_skill(env, obs["oracle_plan"])
            if terminated or truncated:
                break
        assert terminated and reward > 0, (level, seed)


# -- mixes and what they hold out --------------------------------------------------------------
def _named_objects(mission: str) -> set[tuple[str, str]]:
    return {(t, c) for c, t in re.findall(r"the (\w+) (ball|box|key)", mission)}


def test_train_mix_never_shows_held_out_objects():
    env = gym.make("llmrl/BabyAIText-MixTrain-v0").unwrapped
    families = set()
    for seed in range(40):
        obs, _ = env.reset(seed=seed)
        families.add(env.level.task)
        in_room = {(o.type, o.color) for o in env.level.grid.grid if o and o.type != "wall"}
        assert not in_room & set(HELD_OUT_OBJECTS)
        assert not _named_objects(obs["mission"]) & set(HELD_OUT_OBJECTS)
    assert families <= {("goto",), ("pickup",), ("putnext",), ("open",), *TRAIN_SEQUENCES}
    assert len(families) >= 5


def test_new_objects_mix_names_held_out_objects_only():
    env = gym.make("llmrl/BabyAIText-MixTestNewObjects-v0").unwrapped
    for seed in range(20):
        obs, _ = env.reset(seed=seed)
        named = _named_objects(obs["mission"])
        assert named <= set(HELD_OUT_OBJECTS)
        assert named or env.level.task == ("open",)


def test_new_compositions_mix_has_only_untrained_sequences():
    env = gym.make("llmrl/BabyAIText-MixTestNewCompositions-v0").unwrapped
    for seed in range(20):
        obs, _ = env.reset(seed=seed)
        assert env.level.task in TEST_SEQUENCES
        assert env.level.task not in TRAIN_SEQUENCES
        assert ", then " in obs["mission"]


# -- determinism and a clean stdout ----------------------------------------------------------
def test_same_seed_same_episode():
    def rollout(seed: int) -> list[str]:
        env = gym.make("llmrl/BabyAIText-MixTrain-v0")
        obs, _ = env.reset(seed=seed)
        texts = [obs["mission"], obs["text"]]
        for action in (0, 2, 2, 1, 2, 3):
            obs, *_ = env.step(action)
            texts.append(obs["text"])
        return texts

    assert rollout(11) == rollout(11)
    assert rollout(11) != rollout(12)


def test_level_generation_keeps_stdout_clean(capfd):
    env = gym.make("llmrl/BabyAIText-PutNextLocal-v0")
    for seed in range(30):  # PutNextLocal rejects samples now and then, with a bare print
        env.reset(seed=seed)
    assert capfd.readouterr().out == ""
