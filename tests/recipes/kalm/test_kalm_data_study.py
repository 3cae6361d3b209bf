"""llmrl.recipes.kalm.studies.data replays KALM's released CLEVR-Robot transitions in our physics,
checks its labels against our success function and measures the scripted pusher per level and
noise; its recipe settings (`--scripted-episodes`, `--scripted-noises`…) are KalmConfig's."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from llmrl.recipes.kalm import released

STUDY = "llmrl.recipes.kalm.studies.data"


def run_study(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", STUDY, *argv], capture_output=True, text=True, timeout=300
    )


def test_the_study_measures_the_released_data_and_the_collectors(tmp_path, kalm_data_dir):
    folder = kalm_data_dir
    done = run_study(
        "--released-path", str(folder / released.CLEVR_FILE), "--scripted-episodes", "2",
        "--scripted-noises", "0", "0.5", "--metaworld-episodes", "0", "--out", str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((tmp_path / "results.json").read_text())
    physics, labels = results["physics_agreement"], results["label_agreement"]
    # the released file: 80 trajectories of 2-4 real steps; our physics pushes the same way
    assert labels["trajectories"] == 80 and labels["steps"] == physics["transitions"] > 80
    assert physics["pushes"] > 0 and physics["rate"] > 0.9
    assert labels["steps_agreeing"] > 0.9 * labels["steps"]
    rows = results["clevr_collectors"]
    assert [(row["level"], row["noise"]) for row in rows] == [
        (level, noise) for level in ("training", "rephrased", "unseen-easy", "unseen-hard")
        for noise in (0.0, 0.5)
    ]  # fmt: skip
    for row in rows:
        assert row["episodes"] == 2 and 0 <= row["success"] <= 1 and row["mean_length"] >= 1
    assert results["metaworld_experts"] == []  # --metaworld-episodes 0 skips them
    assert (tmp_path / "physics_agreement.png").is_file()
    assert (tmp_path / "collectors.png").is_file()
    assert "CLEVR-Robot scripted pusher" in done.stdout


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--scripted-episodes", "0"], "--scripted-episodes: Input should be greater than"),
        (["--scripted-noises", "0", "1.5"], "--scripted-noises 1.5: Input should be less than"),
        (["--seed", "-1"], "--seed: Input should be greater than"),
        (["--released-path", "nowhere.npy"], "--released-path: nowhere.npy: no such file"),
    ],
)
def test_a_bad_recipe_value_is_refused_naming_its_option(tmp_path, argv, named):
    done = run_study(*argv, "--metaworld-episodes", "0", "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and named in done.stderr, done.stderr[-2000:]
    assert not (tmp_path / "out").exists()  # refused before anything ran
