"""evaluation/kalm_imagination.py imagines each level at each temperature with the recipe's own
imagination phase, tabulates what the recipe reports, and probes whether the grounded action
head reads the instruction."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "evaluation" / "kalm_imagination.py"

pytest.importorskip("torch")
pytest.importorskip("d3rlpy")


def test_the_script_measures_each_level_and_temperature(tiny_model_dir, tmp_path):
    from test_kalm_recipe import random_push_dataset

    from llmrl.learner.llm.grounding import GroundedLM, GroundingSpec
    from llmrl.learner.versions import save_version

    real = random_push_dataset()
    data = real.save(tmp_path / "data" / "real.npz")
    spec = GroundingSpec(state_dim=10, action_size=40, state_target="delta")
    model = GroundedLM.create(str(tiny_model_dir), spec, lora_r=2, states=real.observations)
    settings = {"numbers": "tokens", "state_target": "delta", "action_size": 40}
    version = save_version(tmp_path / "grounding" / "1", model.save, "kalm-grounding", settings)
    done = subprocess.run(
        [
            sys.executable, str(SCRIPT), "--grounding", str(version.path), "--data", str(data),
            "--levels", "rephrased", "unseen-hard", "--temperatures", "0", "2", "--count", "6",
            "--max-steps", "2", "--probe-episodes", "4", "--out", str(tmp_path / "out"),
        ],
        capture_output=True, text=True, timeout=300,
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


def test_a_missing_grounding_is_refused_by_name(tmp_path):
    missing = tmp_path / "nope"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--grounding", str(missing), "--data", str(missing)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode != 0
    assert f"{missing}: no such file or directory" in done.stderr
