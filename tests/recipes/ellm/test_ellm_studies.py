"""ellm's studies (`llmrl.recipes.ellm.studies`), each at a size that runs in seconds: the
Housekeep placement pairs and the judge's figures (the tiny house, the tiny local model, and
the real val scenes where the data is present), the suggesters on random-play captions, the
threshold study's cosines with the gateway's real embedding model; and their recipe options,
generated from `EllmConfig`, refusing a bad value by the option's name."""

from __future__ import annotations

import random
from collections.abc import Iterator
from math import comb
from typing import Any

import pytest
from support.housekeep import tiny_house
from support.tiny_llm import TINY_MODEL, tiny_gateway_settings

from llmrl.llm_gateway.client import connect
from llmrl.recipes.ellm.housekeep import PlacementJudge, kind
from llmrl.recipes.ellm.reward import DEFAULT_THRESHOLD
from llmrl.recipes.ellm.studies import housekeep, suggesters, threshold
from llmrl.simulator.envs.crafter.vocabulary import GOALS


@pytest.fixture(scope="module")
def tiny_llm(tiny_model_dir) -> Iterator[Any]:
    client = connect(**tiny_gateway_settings(tiny_model_dir))
    yield client
    client.close()


def test_housekeep_pairs_each_object_with_its_truth_and_the_judge_is_scored(tiny_llm):
    # tiny house: mug_1 belongs on counter_1, book_1 on bed_1 or shelf_1, apple_1 on counter_1
    # or fridge_1; mug_1 and book_1 start misplaced, apple_1 on the fridge
    pairs, labels, starts = housekeep.placement_pairs([tiny_house()], random.Random(0))
    assert len(pairs) == 13 and sum(labels) == 6  # 1+1+1, 2+2+1, 2+2+1 pairs
    assert [(pairs[i][:2], misplaced) for i, misplaced in starts] == [
        (("mug_1", "bed_1"), True),
        (("book_1", "counter_1"), True),
        (("apple_1", "fridge_1"), False),
    ]
    assert pairs[0] == ("mug_1", "counter_1", "kitchen_0") and labels[0]
    assert [labels[i] for i, misplaced in starts] == [not m for _, m in starts]

    judge = PlacementJudge(tiny_llm, TINY_MODEL, "test-ellm-studies")
    values = housekeep.judge_pairs(judge, pairs, batch=4)
    assert len(values) == len(pairs) and all(0.0 <= v <= 1.0 for v in values)
    assert judge.asked == len({tuple(map(kind, pair)) for pair in pairs})  # asked once a kind
    figures = housekeep.judge_figures(values, labels, starts, 0.5)
    assert figures["pairs"] == 13 and figures["positives"] == 6 and figures["threshold"] == 0.5
    assert figures["misplaced_share_at_start"] == round(2 / 3, 3)
    assert 0.0 <= figures["accuracy"] <= figures["best_accuracy"] <= 1.0

    perfect = housekeep.judge_figures([float(x) for x in labels], labels, starts, 0.5)
    assert perfect["accuracy"] == perfect["roc_auc"] == perfect["best_accuracy"] == 1.0
    assert perfect["precision_belongs"] == perfect["recall_belongs"] == 1.0
    assert perfect["pick_up_suggestions_at_start"] == 2 and perfect["pick_up_precision"] == 1.0
    inverted = housekeep.judge_figures([1.0 - x for x in labels], labels, starts, 0.5)
    assert inverted["accuracy"] == inverted["roc_auc"] == 0.0


def test_housekeep_reads_the_real_val_scenes(data_dir):
    houses = housekeep.val_houses(data_dir, 1)
    assert len(houses) == 2  # one episode of each val scene
    pairs, labels, starts = housekeep.placement_pairs(houses, random.Random(0))
    assert len(starts) == sum(len(house.objects) for house in houses)
    assert [labels[i] for i, misplaced in starts] == [not m for _, m in starts]
    again = housekeep.placement_pairs(houses, random.Random(0))
    assert again == (pairs, labels, starts)  # the seed decides the negatives


def test_suggesters_study_on_random_play_captions(tiny_llm):
    samples = suggesters.collect(3, seed=0)
    assert len({caption for caption, _ in samples}) == 3
    assert all({"inventory", "local_map"} <= set(state) for _, state in samples)
    rows = suggesters.suggester_figures(tiny_llm, samples, TINY_MODEL)
    assert list(rows) == list(suggesters.SUGGESTERS)
    oracle, every = rows["oracle"], rows["all-goals"]
    assert oracle["llm_queries"] == every["llm_queries"] == 0
    assert oracle["feasible_share"] in (None, 1.0)  # the oracle suggests feasible goals only
    assert every["goals_per_caption"] == len(GOALS)
    # all-goals holds every feasible goal: its captions with one are the oracle's
    assert every["captions_with_a_feasible_goal"] == oracle["captions_with_a_feasible_goal"]
    for name in ("llm", "llm-score"):  # one query per caption at most (cached by caption)
        assert 1 <= rows[name]["llm_queries"] <= len(samples)
        assert 0.0 <= rows[name]["captions_with_a_feasible_goal"] <= 1.0


def test_threshold_study_measures_the_recipes_default_threshold():
    with connect() as llm:  # the gateway's default embedding model, all-MiniLM-L6-v2
        vector = threshold.unit_vectors(llm, None)
    found = threshold.similarities(vector)
    goals = threshold.GOAL_CAPTIONS
    assert len(found["distinct"]) == comb(len(goals), 2)
    assert len(found["paraphrases"]) == sum(map(len, threshold.PARAPHRASES.values()))
    summary = threshold.summary(found, None)
    # the recipe's default threshold pays no goal for another (docs/recipes/ellm.md: 0.766)
    assert summary["max_distinct_goal_cosine"] < DEFAULT_THRESHOLD
    assert summary["distinct_goal_pairs_accepted"][str(DEFAULT_THRESHOLD)] == 0
    shares = list(summary["accepted_share_of_paraphrases"].values())
    assert shares == sorted(shares, reverse=True) and 0.0 < shares[0] <= 1.0
    for text, goal, other in found["confused"]:
        assert vector[other] @ vector[text] > vector[goal] @ vector[text]


@pytest.mark.parametrize(
    ("study", "argv", "named"),
    [
        (housekeep, ["--seed", "-1"], "--seed"),
        (suggesters, ["--seed", "-1"], "--seed"),
        (housekeep, ["--p-yes-threshold", "1.5"], "--p-yes-threshold"),
        (housekeep, ["--episodes", "0"], "--episodes"),
        (suggesters, ["--captions", "0"], "--captions"),
        (threshold, ["--model", "minilm"], "unrecognized arguments: --model"),  # --embed-model
    ],
)
def test_a_bad_option_is_refused_by_name(study, argv, named, capsys):
    with pytest.raises(SystemExit) as exited:
        study.main(argv)
    assert exited.value.code == 2 and named in capsys.readouterr().err


@pytest.mark.parametrize(
    ("study", "options"),
    [
        (housekeep, ["--model", "--seed"]),
        (suggesters, ["--model", "--seed"]),
        (threshold, ["--embed-model"]),
    ],
)
def test_the_recipe_options_come_from_the_config_model(study, options, capsys):
    with pytest.raises(SystemExit):
        study.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "settings (EllmConfig's keys)" in text
    for option in options:
        assert option in text.split("settings (EllmConfig's keys)")[1]
    assert [option[2:].replace("-", "_") for option in options] == study.RECIPE_KEYS
