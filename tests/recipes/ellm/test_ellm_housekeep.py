"""ELLM on Housekeep: the yes/no placement judge through a real gateway (tiny local model),
the tidying suggestions of the judge and of the oracle, and transition captions that the
suggestion reward pays, on the Housekeep env's hand-built tiny house."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from support.housekeep import tiny_house
from support.tiny_llm import tiny_gateway_settings

from llmrl.llm_gateway.client import connect
from llmrl.recipes.ellm.housekeep import PlacementJudge, placement_question, transition_caption
from llmrl.recipes.ellm.reward import SuggestionReward
from llmrl.recipes.ellm.suggesters import make_suggester
from llmrl.simulator.envs.base import step_skill
from llmrl.simulator.envs.housekeep.env import HousekeepEnv


@pytest.fixture(scope="module")
def tiny_llm(tiny_model_dir, tmp_path_factory) -> Iterator[Any]:
    cache = {"backend": "sqlite", "sqlite_path": str(tmp_path_factory.mktemp("h") / "c.sqlite")}
    client = connect(**tiny_gateway_settings(tiny_model_dir, cache=cache))
    yield client
    client.close()


def words(texts: list[str]) -> np.ndarray:
    """A bag-of-words embedding (hashing the words): enough for exact phrases."""
    vectors = np.zeros((len(texts), 64), np.float32)
    for row, text in enumerate(texts):
        for word in text.split():
            vectors[row, sum(map(ord, word)) % 64] += 1
    return vectors


def do(env: HousekeepEnv, skill: str) -> dict:
    obs, *_ = step_skill(env, skill)
    assert obs["skill_status"] == 2, env.last_feedback  # DONE
    return obs


def test_oracle_suggests_tidying_and_the_reward_pays_the_transition():
    env = HousekeepEnv()
    obs, _ = env.reset(options={"house": tiny_house()})
    oracle = make_suggester("housekeep-oracle")
    assert oracle.suggest(obs["text"], state=obs) == []  # nothing found yet
    obs = do(env, "go to room bedroom_0")
    assert oracle.suggest(obs["text"], state=obs) == ["pick up mug_1"]
    obs = do(env, "go to room kitchen_0")
    suggestions = oracle.suggest(obs["text"], state=obs)
    assert suggestions == ["pick up mug_1", "pick up book_1"]  # apple_1 is on the fridge
    reward = SuggestionReward(words)
    before = obs["known_house"]
    obs = do(env, "go to mug_1")
    assert transition_caption(before, obs["known_house"]) == ""
    before = obs["known_house"]
    obs = do(env, "pick up mug_1")
    caption = transition_caption(before, obs["known_house"])
    assert caption == "pick up mug_1"
    assert reward.reward(caption, suggestions) == (1.0, "pick up mug_1")
    held = oracle.suggest(obs["text"], reward.achieved, state=obs)
    assert held == ["place mug_1 on counter_1"]
    do(env, "go to counter_1")
    before = env.observe()["known_house"]
    obs = do(env, "place mug_1 on counter_1")
    caption = transition_caption(before, obs["known_house"])
    assert caption == "place mug_1 on counter_1"
    assert reward.reward(caption, held) == (1.0, "place mug_1 on counter_1")
    assert reward.reward(caption, held) == (0.0, None)  # once per episode
    with pytest.raises(ValueError, match=r"^state: .*correct_receptacles"):
        oracle.suggest("", state={"known_house": obs["known_house"]})


def test_judge_renormalises_yes_over_no_and_caches_by_kind(tiny_llm):
    judge = PlacementJudge(tiny_llm, run_id="judge-test")
    pairs = [("book_1", "shelf_1", "bedroom_0"), ("book_2", "shelf_3", "bedroom_1")]
    first, second = judge.p_yes(pairs)
    assert 0.0 < first < 1.0 and first == second  # one kind of pair: asked once
    assert judge.asked == 1
    assert judge.p_yes([("book_7", "shelf_2", "bedroom_0")]) == [first]
    assert judge.asked == 1
    assert placement_question("apple_1", "bottom_cabinet_7", "kitchen_0") == (
        "Does an apple belong on the bottom cabinet in the kitchen?"
    )


def test_llm_suggester_follows_its_threshold(tiny_llm):
    env = HousekeepEnv()
    env.reset(options={"house": tiny_house()})
    obs = do(env, "go to room kitchen_0")
    lenient = make_suggester("housekeep-llm", connect_llm=lambda: tiny_llm, threshold=0.0)
    strict = make_suggester("housekeep-llm", llm=tiny_llm, threshold=1.0)
    assert lenient.suggest("", state=obs) == []  # everything belongs somewhere
    assert strict.suggest("", state=obs) == ["pick up book_1", "pick up apple_1"]
    known = json.loads(obs["known_house"])
    assert set(known["objects"]) == {"book_1", "apple_1"}
    counters = strict.counters()
    assert counters["calls"] == 1 and counters["asked"] == 2
    do(env, "go to book_1")
    obs = do(env, "pick up book_1")
    assert strict.suggest("", state=obs) == []
    assert lenient.suggest("", state=obs) == [
        "place book_1 on counter_1",
        "place book_1 on fridge_1",
    ]
    with pytest.raises(ValueError, match=r"^threshold: "):
        make_suggester("housekeep-llm", llm=tiny_llm, threshold=2)
    with pytest.raises(ValueError, match=r"^state: .*known_house"):
        strict.suggest("", state={})
