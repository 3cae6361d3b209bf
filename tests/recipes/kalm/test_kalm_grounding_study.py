"""llmrl.recipes.kalm.studies.grounding grounds one model per state weight with the learner's own
algorithm and measures its next-state errors on held-out transitions; its recipe settings are
KalmConfig's keys."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

STUDY = "llmrl.recipes.kalm.studies.grounding"

pytest.importorskip("torch")


def run_study(*argv: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", STUDY, *argv], capture_output=True, text=True, timeout=timeout
    )


def test_the_study_measures_every_weight_against_nothing_moved(tiny_model_dir, tmp_path):
    done = run_study(
        "--model", str(tiny_model_dir), "--scripted-episodes", "12", "--test-episodes", "3",
        "--grounding-steps", "2", "--grounding-layers", "none",
        "--grounding-state-weights", "1", "10", "--scripted-goals-per-start", "3",
        "--grounding-action-weight", "2", "--out", str(tmp_path / "out"),
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    rows = results["rows"]
    assert [row["state_loss_weight"] for row in rows] == [1.0, 10.0]
    for row in rows:
        assert row["transitions"] > 0
        errors = [row[f"{kind}_median"] for kind in ("dynamics", "trajectory", "nothing moved")]
        assert all(np.isfinite(errors)) and min(errors) > 0
        assert {"state", "action", "stop", "text"} <= set(row["last_losses"])
    # every setting is measured on the same held-out transitions
    assert rows[0]["nothing moved_median"] == rows[1]["nothing moved_median"]
    assert "one-step error" in done.stdout
    # the recipe's keys reach the grounding as the recipe passes them
    from llmrl.learner.versions import Checkpoint

    grounded = Checkpoint.read(tmp_path / "out" / "w10-trajectory+dynamics+goal+describe" / "1")
    assert grounded.algorithm == "kalm-grounding"
    assert grounded.config["action_loss_weight"] == 2.0 and grounded.config["steps"] == 2
    assert grounded.config["state_loss_weight"] == 10.0 and grounded.config["base_layers"] is None
    assert grounded.config["state_target"] == "delta"  # the study's default
    settings = results["settings"]
    assert settings["grounding_action_weight"] == 2.0 and settings["scripted_episodes"] == 12
    # the training episodes are kept for the instruction probe: 12, their starts shared
    from llmrl.common.offline_dataset import OfflineDataset

    train = OfflineDataset.load(tmp_path / "out" / "train.npz")
    starts = {tuple(e.observations[0]) for e in train.episodes()}
    assert train.num_episodes == 12 and len(starts) < 12


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--grounding-tasks", "dance"], "--grounding-tasks: Value error, unknown grounding task"),
        (["--scripted-goals-per-start", "0"], "--scripted-goals-per-start: Input should be"),
        (["--grounding-layers", "0"], "--grounding-layers: Input should be greater than"),
        (["--state-target", "sideways"], "--state-target: Input should be 'absolute' or"),
        (["--grounding-state-weights", "1", "0"], "--grounding-state-weights 0: Input should"),
    ],
)
def test_a_bad_recipe_value_is_refused_naming_its_option(tmp_path, argv, named):
    done = run_study(*argv, "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and named in done.stderr, done.stderr[-2000:]
    assert not (tmp_path / "out").exists()  # refused before anything ran
