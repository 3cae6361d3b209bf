"""llmrl.recipes.when2ask.studies.wrong_plans: a few mediator steps give one row per step with a
plan, the study prints a row per task and feature set's AUC, and the recipe's keys are checked
by When2AskConfig's rules, naming the option."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from llmrl.recipes.when2ask.config import When2AskConfig
from llmrl.recipes.when2ask.studies.wrong_plans import FEATURE_SETS, collect, main


def test_collect_records_every_step_with_a_plan():
    config = When2AskConfig(planner_noise=0.5, max_steps=10, seed=3)
    x, wrong, queried, episode_ids = collect("SimpleDoorKey", config, steps=60, ask_rate=0.5)
    assert 0 < len(x) <= 60 and x.ndim == 2
    assert len(wrong) == len(queried) == len(episode_ids) == len(x)
    assert wrong.dtype == bool and queried.dtype == bool
    assert np.all(np.diff(episode_ids) >= 0) and episode_ids.max() >= 1  # cap 10: episodes end
    assert wrong.any()  # half the plans are wrong


def test_main_prints_a_row_per_task_and_moment_then_the_figures(capsys):
    argv = ["--envs", "SimpleDoorKey", "--steps", "100", "--planner-noise", "0.5"]
    assert main([*argv, "--max-steps", "10"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    rows = [line for line in lines if line.startswith("| SimpleDoorKey |")]
    assert [row.split(" | ")[2] for row in rows] == ["every step", "after a query"]
    figures = json.loads(lines[-1])
    assert figures["noise"] == 0.5 and figures["noise_mode"] == "fresh"
    (task,) = figures["tasks"].values()
    assert 0 < task["steps"] <= 100 and 0.0 <= task["wrong_share"] <= 1.0
    for when in ("every step", "after a query"):
        assert set(task[when]) == set(FEATURE_SETS)
        assert all(math.isnan(v) or 0.0 <= v <= 1.0 for v in task[when].values())


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--planner-noise", "1.5"], "--planner-noise"),
        (["--envs", "Nowhere"], "--envs"),
        (["--ask-rate", "2"], "--ask-rate"),
    ],
)
def test_bad_options_are_refused_by_name(argv, named, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert f"error: {named}" in capsys.readouterr().err
