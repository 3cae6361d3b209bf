"""llmrl.recipes.kalm.studies.imagination imagines each level at each temperature with the
recipe's own imagination phase, tabulates what the recipe reports, and probes whether the
grounded action head reads the instruction; its recipe settings are KalmConfig's keys."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

STUDY = "llmrl.recipes.kalm.studies.imagination"

pytest.importorskip("torch")
pytest.importorskip("d3rlpy")


def run_study(*argv: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", STUDY, *argv], capture_output=True, text=True, timeout=timeout
    )


def test_the_study_measures_each_level_and_temperature(tiny_model_dir, tmp_path):
    from test_kalm_recipe import random_push_dataset

    from llmrl.learner.versions import save_version
    from llmrl.recipes.kalm.grounded_lm import GroundedLM, GroundingSpec

    real = random_push_dataset()
    data = real.save(tmp_path / "data" / "real.npz")
    spec = GroundingSpec(state_dim=10, action_size=40, state_target="delta")
    model = GroundedLM.create(str(tiny_model_dir), spec, lora_r=2, states=real.observations)
    settings = {"numbers": "tokens", "state_target": "delta", "action_size": 40}
    version = save_version(tmp_path / "grounding" / "1", model.save, "kalm-grounding", settings)
    done = run_study(
        "--grounding-from", str(version.path), "--dataset", str(data),
        "--imagine-levels", "rephrased", "unseen-hard", "--imagine-temperatures", "0", "2",
        "--imagined-per-level", "6", "--imagine-max-steps", "2", "--probe-episodes", "4",
        "--out", str(tmp_path / "out"),
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    rows = results["rows"]
    assert [(r["level"], r["temperature"]) for r in rows] == [
        ("rephrased", 0.0), ("rephrased", 2.0), ("unseen-hard", 0.0), ("unseen-hard", 2.0),
    ]  # fmt: skip
    for row in rows:
        assert 0 <= row["kept_share_valid"] <= 1 and 0 <= row["goal_match"] <= 1
        assert 1 <= row["mean_length"] <= 2
        assert np.isfinite(row["one_step_error"])
        assert 0 <= row["random_pushes_goal"] <= 1
    assert "kept right on replay" in done.stdout
    # the config took the checkpoint's state target (KalmConfig checks grounding_from with it)
    assert results["settings"]["state_target"] == "delta"
    assert results["settings"]["imagined_per_level"] == 6
    # the instruction probe: the data's episodes, and fresh pairs of each single-ball level
    probe = results["instruction_following"]
    assert len(probe) == 9 and all(0 <= share <= 1 for share in probe.values())
    for level in ("training", "rephrased"):  # the best push's ball is one the goal names
        best, ball, named = (
            probe[f"fresh {level} pairs: {what}"]
            for what in ("the scripted pusher's best push", "the ball it pushes",
                         "a ball the goal names (chance 40%)")
        )  # fmt: skip
        assert best <= ball <= named
    assert not any("unseen-hard" in k for k in probe)  # no single best push to compare with
    assert "does the action head read the instruction?" in done.stdout

    # a value KalmConfig refuses is refused naming the study's option, before any imagining
    for argv, named in [
        (["--imagine-temperatures", "0", "11"], "--imagine-temperatures 11: Input should be"),
        (["--imagine-levels", "training"], "--imagine-levels: Value error, unknown level"),
        (["--imagine-max-steps", "0"], "--imagine-max-steps: Input should be greater than"),
    ]:
        done = run_study(
            "--grounding-from", str(version.path), "--dataset", str(data), *argv,
            "--out", str(tmp_path / "refused"),
        )  # fmt: skip
        assert done.returncode == 2 and named in done.stderr, done.stderr[-2000:]
        assert not (tmp_path / "refused").exists()


def test_a_missing_or_foreign_grounding_is_refused_by_name(tmp_path):
    missing = tmp_path / "nope"
    done = run_study("--grounding-from", str(missing), "--dataset", str(missing))
    assert done.returncode == 2
    assert f"--grounding-from: {missing}: no such file or directory" in done.stderr
    foreign = tmp_path / "foreign" / "1"  # a folder no kalm run saved
    foreign.mkdir(parents=True)
    done = run_study("--grounding-from", str(foreign), "--dataset", str(foreign))
    assert done.returncode == 2 and "--grounding-from: " in done.stderr
    assert "names no artifact llmrl saved" in done.stderr
