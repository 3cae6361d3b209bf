"""BabyAI-Text: GLAM's generalisation variants, GoToLocalS5N2, and the symbolic observation."""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import llmrl.simulator.envs  # noqa: F401 - registers the environments
from llmrl.simulator.client import RemoteWorld
from llmrl.simulator.envs.babyai_text.symbolic import (
    MAX_MISSION_WORDS,
    MISSION_VOCABULARY,
    mission_space,
    mission_tokens,
)
from llmrl.simulator.envs.babyai_text.variants import (
    ACTION_PHRASES,
    ACTION_SYNONYMS,
    COLOUR_SYNONYMS,
    FRENCH_ACTIONS,
    INVENTED_ADJECTIVES,
    INVENTED_NOUNS,
    NOUNS,
    VARIANTS,
    fix_articles,
)
from llmrl.simulator.envs.base import InvalidSkillError, step_skill
from llmrl.simulator.errors import WorldError
from llmrl.simulator.world import World

ENGLISH_WORDS = {
    *("ball", "box", "key", "door", "wall", "object"),
    *("red", "green", "blue", "purple", "yellow", "grey"),
    *("open", "closed", "locked", "you", "see", "carry", "nothing", "step", "steps"),
    *("left", "right", "forward", "and", "the", "go", "to", "pick", "up", "put", "next"),
    *("then", "after", "behind", "front", "your"),
}
COLOURS = ("red", "green", "blue", "purple", "yellow", "grey")


def make(level: str = "MixTrain", **kwargs) -> gym.Env:
    return gym.make(f"llmrl/BabyAIText-{level}-v0", **kwargs)


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.lower()))


def paired_rollout(variant: str, level: str, seed: int, actions=(2, 0, 2, 2, 1, 3, 2, 5, 4)):
    """Observations of the same episode in the training words and in `variant`'s words."""
    plain, other = make(level), make(level, variant=variant)
    pairs = [(plain.reset(seed=seed)[0], other.reset(seed=seed)[0])]
    for action in actions:
        pairs.append((plain.step(action)[0], other.step(action)[0]))
    return pairs


# -- every variant ---------------------------------------------------------------------------
@pytest.mark.parametrize("variant", VARIANTS)
def test_env_checker_passes_on_each_variant(variant):
    check_env(make(variant=variant, expert=True).unwrapped, skip_render_check=True)


@pytest.mark.parametrize("variant", VARIANTS)
def test_variant_rewrites_words_of_the_same_episode(variant):
    rewrite = VARIANTS[variant]
    for level in ("MixTrain", "PickupLoc", "PutNextLocal"):
        for plain, other in paired_rollout(variant, level, seed=5):
            np.testing.assert_array_equal(plain["image"], other["image"])
            assert plain["direction"] == other["direction"]
            assert other["text"] == rewrite.text(plain["text"])
            assert other["mission"] == rewrite.goal(plain["mission"])
            assert other["action_phrases"].split("\n") == list(rewrite.actions)


def test_unknown_variant_is_refused_naming_the_variants():
    with pytest.raises(ValueError, match=r"unknown variant 'german'; variants: none, nouns"):
        make(variant="german")


def test_unknown_variant_over_grpc_names_the_variants(sim_server):
    with pytest.raises(WorldError, match=r"unknown variant 'german'; variants: none"):
        RemoteWorld(sim_server.address, "BabyAIText-GoToLocalS5N2", num_envs=1, variant="german")


# -- nouns, colours, invented words, the goal -------------------------------------------------
def test_real_nouns_replace_the_object_nouns():
    seen = set()
    for plain, other in paired_rollout("nouns", "PutNextLocal", seed=0):
        assert not words(other["text"] + " " + other["mission"]) & {"ball", "box", "key"}
        seen |= words(other["text"] + " " + other["mission"])
        for noun, replacement in NOUNS.items():
            count = len(re.findall(rf"\b{noun}\b", plain["text"]))
            assert len(re.findall(rf"\b{replacement}\b", other["text"])) == count
    assert seen & set(NOUNS.values())


def test_colour_synonyms_and_their_articles():
    for _, other in paired_rollout("colours", "PutNextLocal", seed=0):
        assert not words(other["text"] + " " + other["mission"]) & set(COLOURS)
    text = VARIANTS["colours"].text(
        "You see a green key 1 step left, a red ball. You carry nothing."
    )
    assert text == "You see an emerald key 1 step left, a crimson ball. You carry nothing."
    assert set(COLOUR_SYNONYMS) == set(COLOURS)
    assert (
        fix_articles("an dax, a open door, A emerald key") == "a dax, an open door, An emerald key"
    )


def test_invented_words_replace_nouns_and_adjectives():
    invented = set(INVENTED_NOUNS.values()) | set(INVENTED_ADJECTIVES.values())
    seen: set[str] = set()
    for _, other in paired_rollout("invented", "MixTrain", seed=3):
        said = words(other["text"] + " " + other["mission"])
        assert not said & {*INVENTED_NOUNS, *COLOURS}
        seen |= said & invented
    assert len(seen) >= 3
    for _, other in paired_rollout("invented_nouns", "MixTrain", seed=3):
        assert not words(other["text"]) & set(INVENTED_NOUNS)


def test_goal_is_reworded_and_the_view_is_not():
    env = make("MixTrain", variant="goal")
    plain = make("MixTrain")
    for seed in range(6):
        obs, info = env.reset(seed=seed)
        original, _ = plain.reset(seed=seed)
        assert obs["text"] == original["text"]
        assert obs["mission"] != original["mission"] == plain.unwrapped.level.mission
        assert info["mission"] == obs["mission"]
        assert not re.search(r"\b(go to|pick up|put|next to|, then)\b", obs["mission"])


# -- French -----------------------------------------------------------------------------------
def test_french_observations_and_goals_have_no_english_word():
    for level in ("MixTrain", "PickupLoc", "PutNextLocal", "OpenDoor"):
        for seed in range(3):
            for _, other in paired_rollout("french", level, seed=seed):
                english = words(other["text"] + " " + other["mission"]) & ENGLISH_WORDS
                assert not english, (level, seed, other["text"], other["mission"], english)


def test_french_noun_phrases_agree_in_gender_and_order():
    french = VARIANTS["french"]
    view = "You see a locked blue door 2 steps left and 1 step forward, a wall 3 steps right."
    assert french.text(view + " You carry a grey key.") == (
        "Tu vois une porte bleue verrouillee 2 pas a gauche et 1 pas devant, "
        "un mur 3 pas a droite. Tu portes une cle grise."
    )
    assert (
        french.text("You see nothing. You carry nothing.") == "Tu ne vois rien. Tu ne portes rien."
    )
    assert french.goal("pick up the green object behind you, then open the red door") == (
        "ramasse l'objet vert derriere toi, puis ouvre la porte rouge"
    )


# -- actions ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("variant", "phrases"), [("actions", ACTION_SYNONYMS), ("french", FRENCH_ACTIONS)]
)
def test_action_phrases_step_like_their_originals(variant, phrases):
    plain, other = make("MixTrain"), make("MixTrain", variant=variant)
    plain.reset(seed=8)
    other.reset(seed=8)
    assert other.unwrapped.skill_names() == list(phrases)
    for index in (2, 0, 2, 2, 3, 1, 2, 4, 5, 2):
        expected = step_skill(plain, ACTION_PHRASES[index])
        got = step_skill(other, phrases[index])
        np.testing.assert_array_equal(got[0]["image"], expected[0]["image"])
        assert got[0]["direction"] == expected[0]["direction"]
        assert got[1:4] == expected[1:4]
    with pytest.raises(InvalidSkillError, match=re.escape("valid actions: " + ", ".join(phrases))):
        step_skill(other, "turn left")


def test_expert_speaks_and_solves_in_the_variant_words():
    env = make("GoToLocalS5N2", variant="french", expert=True)
    for seed in range(3):
        obs, _ = env.reset(seed=seed)
        for _ in range(50):
            assert obs["oracle_plan"] in FRENCH_ACTIONS
            obs, reward, terminated, truncated, _ = step_skill(env, obs["oracle_plan"])
            if terminated or truncated:
                break
        assert terminated and reward > 0


def test_worlds_return_action_phrases_only_when_asked():
    with World("BabyAIText-GoToLocalS5N2", num_envs=2, seed=0, variant="actions") as world:
        assert "action_phrases" in world.privileged_observations
        assert "action_phrases" not in world.reset()
        phrases = world.reset(observations=["text", "action_phrases"])["action_phrases"]
        assert [p.split("\n") for p in phrases] == [list(ACTION_SYNONYMS)] * 2


# -- GoToLocalS5N2 ----------------------------------------------------------------------------
def test_go_to_local_s5n2_is_a_small_room_with_two_objects():
    # minigrid's "N2" counts every object: the goal is one of the two (one distractor)
    env = make("GoToLocalS5N2")
    for seed in range(5):
        obs, _ = env.reset(seed=seed)
        level = env.unwrapped.level
        objects = [o for o in level.grid.grid if o is not None and o.type != "wall"]
        assert (level.width, level.height) == (5, 5) and len(objects) == 2
        assert obs["mission"].startswith("go to ")


def test_go_to_local_s5n2_steps_in_process_and_over_grpc(sim_server):
    def rollout(world) -> list[dict]:
        results = [world.reset(observations=["text", "mission", "image"])]
        for step in range(20):
            skills = [ACTION_SYNONYMS[(step + i) % 3] for i in range(2)]
            results.append(world.step(skill=skills, observations=["text", "mission", "reward"]))
        return results

    kwargs = {"num_envs": 2, "seed": 4, "variant": "actions"}
    with World("BabyAIText-GoToLocalS5N2", **kwargs) as local:
        expected = rollout(local)
    with RemoteWorld(sim_server.address, "BabyAIText-GoToLocalS5N2", **kwargs) as remote:
        got = rollout(remote)
    for mine, theirs in zip(got, expected, strict=True):
        assert set(mine) == set(theirs)
        for key in mine:
            np.testing.assert_array_equal(mine[key], theirs[key])


# -- the symbolic observation, for Symbolic-PPO ------------------------------------------------
def test_mission_tokens_encode_the_training_words_in_every_variant():
    mission = "pick up the red ball, then go to a grey door on your left"
    tokens = mission_tokens(mission)
    assert tokens.shape == (MAX_MISSION_WORDS,) and mission_space().contains(tokens)
    words_back = [MISSION_VOCABULARY[t] for t in tokens if t]
    assert " ".join(words_back).replace(" ,", ",") == mission
    assert mission_tokens("go to the dax")[3] == 1  # outside the vocabulary
    for plain, other in paired_rollout("french", "MixTrain", seed=2):
        np.testing.assert_array_equal(plain["mission_tokens"], other["mission_tokens"])
        np.testing.assert_array_equal(plain["mission_tokens"], mission_tokens(plain["mission"]))
    for level in ("MixTrain", "MixTestNewCompositions", "PickupLoc", "OpenDoor"):
        env = make(level)
        for seed in range(20):
            assert 1 not in env.reset(seed=seed)[0]["mission_tokens"], level  # all words known


def test_sb3_ppo_trains_on_the_symbolic_observation():
    from stable_baselines3 import PPO

    from llmrl.learner.wrappers import FloatObservations
    from llmrl.simulator.vector import WorldVecEnv

    world = World("BabyAIText-GoToLocalS5N2", num_envs=4, seed=0, variant="french")
    venv = FloatObservations(WorldVecEnv(world, keys=["image", "direction", "mission_tokens"]))
    assert set(venv.observation_space.spaces) == {"image", "direction", "mission_tokens"}
    model = PPO("MultiInputPolicy", venv, n_steps=64, batch_size=64, n_epochs=2, seed=0)
    model.learn(total_timesteps=256)
    assert model.num_timesteps >= 256
    venv.close()
