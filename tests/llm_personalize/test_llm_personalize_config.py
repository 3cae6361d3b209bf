"""The recipe's config and plan: phases per round, held-out episodes never trained on, and
config errors that name the field."""

from __future__ import annotations

import pytest

from llmrl.recipes.base import ConfigError, validate_config
from llmrl.recipes.llm_personalize.recipe import LlmPersonalize


def recipe(**config) -> LlmPersonalize:
    return LlmPersonalize(validate_config("llm-personalize", {"data_dir": "procedural", **config}))


def test_phases_are_named_per_round():
    names = [phase.name for phase in recipe(rounds=2).phases()]
    assert names == [
        "evaluate/zero-shot", "demonstrate", "annotate/0", "train/0", "evaluate/0",
        "collect/1", "annotate/1", "train/1", "evaluate/1",
        "collect/2", "annotate/2", "train/2", "evaluate/2", "report",
    ]  # fmt: skip


def test_held_out_episodes_are_not_training_episodes():
    plan = recipe(train_episodes=3, eval_episodes=2)
    items = plan.eval_set()
    train = [episode for _, split, episode in items if split == "train"]
    held_out = [episode for _, split, episode in items if split == "held-out"]
    assert train == [0, 1] and held_out == [3, 4]
    train_seeds = {plan._seed(e) for e in range(3)}
    assert not train_seeds & {plan._seed(e, held_out=True) for e in held_out}


def test_bad_config_names_the_field():
    with pytest.raises(ConfigError, match="rounds"):
        validate_config("llm-personalize", {"data_dir": "procedural", "rounds": -1})
    with pytest.raises(ConfigError, match="scenes"):
        validate_config("llm-personalize", {"data_dir": "procedural", "scenes": ["Ihlen_1_int"]})
    with pytest.raises(ConfigError, match="data_dir"):
        validate_config("llm-personalize", {"data_dir": "/no/such/housekeep"})
    with pytest.raises(ConfigError, match="colour"):
        validate_config("llm-personalize", {"colour": "red"})
