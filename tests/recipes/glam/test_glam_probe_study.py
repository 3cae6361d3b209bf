"""llmrl.recipes.glam.studies.probe: the bot's steps are probed at each asked depth, its files
are named by what they hold (another --layers is not served stale states), bad options are
refused by name (the recipe's keys by GlamConfig's checks)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

STUDY = "llmrl.recipes.glam.studies.probe"


def run_probe(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", STUDY, *args], capture_output=True, text=True, timeout=300
    )


def test_probe_reports_every_reader_and_recomputes_for_other_layers(tiny_model_dir, tmp_path):
    common = ["--model", str(tiny_model_dir), "--train-steps", "48", "--test-steps", "24",
              "--num-envs", "4", "--torch-threads", "1", "--out", str(tmp_path)]  # fmt: skip
    first = run_probe(*common, "--layers", "1", "2")
    assert first.returncode == 0, first.stderr
    figures = json.loads(first.stdout.strip().splitlines()[-1])
    assert figures["train_examples"] > 0 and figures["test_examples"] > 0
    assert set(figures["layers"]) == {"1", "2"}
    assert sum(figures["zero_shot"]["mean_policy"].values()) == pytest.approx(1.0, abs=5e-3)
    for row in [figures["bag_of_words"], *figures["layers"].values()]:
        assert 0.0 <= row["test_accuracy"] <= 1.0 and 0.0 <= row["train_accuracy"] <= 1.0
    # the majority reader's accuracy is the held-out share of the training set's commonest action
    test_rows = [json.loads(line) for line in next(tmp_path.glob("bot-test-*.jsonl")).open()]
    majority = max(figures["bot_actions_train"], key=figures["bot_actions_train"].get)
    share = sum(row["messages"][1]["content"] == majority for row in test_rows) / len(test_rows)
    assert figures["majority_test_accuracy"] == share

    second = run_probe(*common, "--layers", "0")
    assert second.returncode == 0, second.stderr
    assert set(json.loads(second.stdout.strip().splitlines()[-1])["layers"]) == {"0"}
    assert len(list(tmp_path.glob("bot-*.jsonl"))) == 2  # the bot's steps were reused
    assert len(list(tmp_path.glob("states-*.npy"))) == 4  # the states were not


def test_bad_options_are_refused_by_name(tiny_model_dir, tmp_path):
    done = run_probe("--train-steps", "0", "--out", str(tmp_path))
    assert done.returncode == 2 and "--train-steps: Input should be greater" in done.stderr
    done = run_probe("--test-steps", "0", "--out", str(tmp_path))
    assert done.returncode == 2 and "--test-steps must be positive" in done.stderr
    done = run_probe("--reduction", "max", "--out", str(tmp_path))
    assert done.returncode == 2 and "--reduction: Input should be 'sum' or 'mean'" in done.stderr
    done = run_probe("--model", str(tiny_model_dir), "--train-steps", "8", "--test-steps", "8",
                     "--layers", "9", "--out", str(tmp_path))  # fmt: skip
    assert done.returncode == 2 and "--layers: [9] outside [0, 2]" in done.stderr
