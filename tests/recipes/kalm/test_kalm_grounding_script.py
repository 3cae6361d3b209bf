"""evaluation/kalm_grounding.py grounds one model per state weight with the learner's own
algorithm and measures its next-state errors on held-out transitions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "evaluation" / "kalm_grounding.py"

pytest.importorskip("torch")


def test_the_script_measures_every_weight_against_nothing_moved(tiny_model_dir, tmp_path):
    done = subprocess.run(
        [
            sys.executable, str(SCRIPT), "--model", str(tiny_model_dir), "--episodes", "12",
            "--test-episodes", "3", "--steps", "2", "--layers", "0", "--weights", "1", "10",
            "--goals-per-start", "3", "--action-loss-weight", "2", "--out", str(tmp_path / "out"),
        ],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads((tmp_path / "out" / "results.json").read_text())["rows"]
    assert [row["state_loss_weight"] for row in rows] == [1.0, 10.0]
    for row in rows:
        assert row["transitions"] > 0
        errors = [row[f"{kind}_median"] for kind in ("dynamics", "trajectory", "nothing moved")]
        assert all(np.isfinite(errors)) and min(errors) > 0
        assert {"state", "action", "stop", "text"} <= set(row["last_losses"])
    # every setting is measured on the same held-out transitions
    assert rows[0]["nothing moved_median"] == rows[1]["nothing moved_median"]
    assert (tmp_path / "out" / "w10-trajectory+dynamics+goal+describe" / "1").is_dir()
    assert "one-step error" in done.stdout
    # the training episodes are kept for the instruction probe: 12, their starts shared
    from llmrl.common.offline_dataset import OfflineDataset

    train = OfflineDataset.load(tmp_path / "out" / "train.npz")
    starts = {tuple(e.observations[0]) for e in train.episodes()}
    assert train.num_episodes == 12 and len(starts) < 12


def test_an_unknown_task_is_refused_by_name(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--tasks", "dance", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode != 0
    assert "argument --tasks: invalid choice: 'dance'" in done.stderr
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--goals-per-start", "0", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and "--goals-per-start must be >= 1" in done.stderr
