"""Study options generated from a recipe's config model: each setting declared once."""

from __future__ import annotations

import argparse

import pytest

from llmrl.recipes.config import ConfigError
from llmrl.recipes.options import add_model_options, model_from_options
from llmrl.recipes.when2ask.config import When2AskConfig

FIELDS = ["planner_noise", "planner_noise_mode", "envs", "mediator_sees_knowledge", "seed"]


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_model_options(parser, When2AskConfig, FIELDS, defaults={"planner_noise": 0.3})
    parser.add_argument("--steps", type=int, default=10, help="the study's own setting")
    return parser


def test_options_take_the_models_types_defaults_and_help():
    args = parser().parse_args([])
    config = model_from_options(When2AskConfig, args)
    assert config.planner_noise == 0.3 and config.planner_noise_mode == "fresh"
    assert config.envs == When2AskConfig().envs and config.mediator_sees_knowledge is False
    text = " ".join(parser().format_help().split())  # unwrapped
    assert "--planner-noise" in text and "this script's default; the recipe's is 0.2" in text
    description = When2AskConfig.model_fields["planner_noise_mode"].description
    assert " ".join(description.split()[:6]) in text


def test_values_are_parsed_and_validated_by_the_model():
    args = parser().parse_args(
        ["--planner-noise", "0.1", "--envs", "KeyInBox", "ColoredDoorKey",
         "--mediator-sees-knowledge", "--seed", "7", "--steps", "3"]
    )  # fmt: skip
    config = model_from_options(When2AskConfig, args)
    assert config.planner_noise == 0.1 and config.envs == ["KeyInBox", "ColoredDoorKey"]
    assert config.mediator_sees_knowledge is True and config.seed == 7 and args.steps == 3


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--planner-noise", "1.5"], "--planner-noise"),
        (["--planner-noise-mode", "sometimes"], "--planner-noise-mode"),
        (["--envs", "Nowhere"], "--envs"),
    ],
)
def test_a_bad_value_names_its_option(argv, named):
    with pytest.raises(ConfigError, match=named):
        model_from_options(When2AskConfig, parser().parse_args(argv))


def test_a_field_the_model_lacks_is_a_programming_error():
    with pytest.raises(ValueError, match="no field"):
        add_model_options(argparse.ArgumentParser(), When2AskConfig, ["colour"])
