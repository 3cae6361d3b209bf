"""ELLM's intrinsic reward with the gateway's real embedding model (all-MiniLM-L6-v2): a goal
pays once per episode, nothing below the threshold, equivalent phrasings are one goal, and
embeddings are batched and cached."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from llmrl.llm_gateway.client import connect
from llmrl.recipes.ellm.reward import (
    DEFAULT_THRESHOLD,
    CachedEmbedder,
    SuggestionReward,
    gateway_embedder,
)


@pytest.fixture(scope="module")
def llm(tmp_path_factory) -> Iterator[Any]:
    cache = {"backend": "sqlite", "sqlite_path": str(tmp_path_factory.mktemp("e") / "c.sqlite")}
    client = connect(cache=cache)
    yield client
    client.close()


class CountingEmbed:
    """The gateway's embed, counting the batches and texts it is sent."""

    def __init__(self, llm: Any) -> None:
        self.embed = gateway_embedder(llm, run_id="reward-test")
        self.batches: list[list[str]] = []

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.batches.append(list(texts))
        return self.embed(texts)


def test_a_goal_pays_once_per_episode(llm):
    reward = SuggestionReward(gateway_embedder(llm))
    suggestions = ["chop tree", "drink water"]
    assert reward.reward("chop tree", suggestions) == (1.0, "chop tree")
    assert reward.reward("chop tree", suggestions) == (0.0, None)
    assert reward.achieved == ["chop tree"]
    value, goal = reward.reward("drink water", suggestions)
    assert (value, goal) == (1.0, "drink water")
    reward.reset()
    assert reward.achieved == []
    assert reward.reward("chop tree", suggestions) == (1.0, "chop tree")


def test_nothing_below_the_threshold(llm):
    reward = SuggestionReward(gateway_embedder(llm))
    assert reward.threshold == DEFAULT_THRESHOLD
    # distinct goals: the closest pair of Crafter goals (cos 0.77) stays below 0.8
    assert reward.similarities("mine stone", ["mine diamond"])[0] < DEFAULT_THRESHOLD
    assert reward.reward("mine stone", ["mine diamond", "drink water"]) == (0.0, None)
    assert reward.reward("", ["chop tree"]) == (0.0, None)
    assert reward.reward("chop tree", []) == (0.0, None)
    lenient = SuggestionReward(gateway_embedder(llm), threshold=0.7)
    value, goal = lenient.reward("mine stone", ["mine diamond", "drink water"])
    assert goal == "mine diamond" and 0.7 <= value < 1.0


def test_a_paraphrase_pays_its_similarity(llm):
    reward = SuggestionReward(gateway_embedder(llm))
    cosine = float(reward.similarities("sleep", ["go to sleep"])[0])
    assert DEFAULT_THRESHOLD <= cosine < 0.99
    value, goal = reward.reward("sleep", ["chop tree", "go to sleep"])
    assert goal == "go to sleep" and value == pytest.approx(cosine)
    assert reward.reward("sleep", ["sleep"]) == (0.0, None)  # that goal has paid


def test_equivalent_phrasings_are_one_goal(llm):
    reward = SuggestionReward(gateway_embedder(llm))
    assert reward.reward("attack cow", ["eat cow"]) == (1.0, "eat cow")
    assert reward.reward("attack cow", ["attack cow", "eat cow"]) == (0.0, None)
    assert reward.reward("place crafting table", ["make crafting table"])[0] == 1.0
    assert reward.achieved == ["attack cow", "place crafting table"]


def test_embeddings_are_batched_and_cached(llm):
    embed = CountingEmbed(llm)
    shared = CachedEmbedder(embed)
    first, second = SuggestionReward(shared), SuggestionReward(shared)
    first.reward("chop tree", ["drink water", "attack cow", "sleep"])
    assert embed.batches == [["chop tree", "drink water", "attack cow", "sleep"]]
    second.reward("drink water", ["chop tree", "sleep", "mine stone"])
    assert embed.batches[1:] == [["mine stone"]]  # one batch of the texts never seen
    assert shared.counters() == {"embedded": 5, "cache_hits": 3}


@pytest.mark.parametrize("threshold", [-0.1, 1.5, True, "0.8", float("nan")])
def test_threshold_outside_0_1_is_refused_naming_it(llm, threshold):
    with pytest.raises(ValueError, match=r"^threshold: expected a number in \[0, 1\]"):
        SuggestionReward(gateway_embedder(llm), threshold=threshold)
