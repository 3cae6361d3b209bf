"""The recipe `ellm` end to end in embedded mode on the tiny Crafter-text stand-in (novelty
baselines, fine-tuning from pretrained and from scratch); its config errors name the key; a
pretraining killed half-way resumes from its checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import support.tiny_crafter_text  # noqa: F401  (registers TinyCrafterText)
from support.tiny_crafter_text import ENV_ID

from llmrl.orchestrator.embedded import run_embedded
from llmrl.recipes.base import ConfigError, validate_config
from llmrl.recipes.ellm.recipe import Ellm
from llmrl.recipes.ellm.report import crafter_score

TINY = {
    "env": ENV_ID,
    "num_envs": 4,
    "pretrain_frames": 420,  # 4 envs x 105 steps: 5 episodes of 20 steps each, the last
    "finetune_frames": 420,  # ending in the last 10% of the frames
    "eval_episodes": 4,
    "learning_starts": 100,
    "buffer_size": 2_000,
    "target_network_frequency": 100,
    "hidden": 32,
    "checkpoint_every": 200,
    "learning_rate": 1e-3,
}


def test_phase_plan_follows_methods_and_finetuning():
    config = validate_config("ellm", {"methods": ["ellm", "none"], "finetune_from": ["ellm"]})
    assert [p.name for p in Ellm(config).phases()] == [
        "pretrain/ellm",
        "evaluate/ellm",
        "pretrain/none",
        "evaluate/none",
        "finetune/ellm",
        "finetune/scratch",
        "report",
    ]
    config = validate_config(
        "ellm", {"methods": ["rnd"], "finetune_frames": 0, "finetune_from": []}
    )
    assert [p.name for p in Ellm(config).phases()] == ["pretrain/rnd", "evaluate/rnd", "report"]


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"suggester": "gpt-9"}, "suggester"),
        ({"threshold": 1.5}, "threshold"),
        ({"threshold": -0.1}, "threshold"),
        ({"finetune_task": "collect diamond"}, "finetune_task"),
        ({"methods": ["ellm", "curiosity"]}, "methods"),
        ({"conditioning": "pixels"}, "conditioning"),
        ({"env": "NoSuchEnv"}, "env"),
        ({"pretrain_frames": 0}, "pretrain_frames"),
        ({"methods": ["none"], "finetune_from": ["ellm"]}, "finetune_from"),
    ],
)
def test_bad_config_names_the_key(config, key):
    with pytest.raises(ConfigError, match=key):
        validate_config("ellm", config)


def test_crafter_score_is_the_geometric_mean_of_success_rates():
    import numpy as np

    assert crafter_score(np.zeros(22)) == 0.0
    assert crafter_score(np.full(22, 100.0)) == pytest.approx(100.0)
    rates = np.array([99.0] + [0.0] * 21)  # ln(100) / 22
    assert crafter_score(rates) == pytest.approx(np.exp(np.log(100.0) / 22) - 1)


def test_a_tiny_run_pretrains_evaluates_finetunes_and_reports(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path / "home"))
    out = tmp_path / "run"
    config = {**TINY, "methods": ["none", "rnd", "knn"], "finetune_from": ["rnd"]}
    run_embedded("ellm", config, out_dir=out, progress=False)
    results = json.loads((out / "results.json").read_text())
    by_method = {row["method"]: row for row in results["rows"]}
    assert sorted(by_method) == ["knn", "none", "rnd", "scratch"]
    for method in ("none", "rnd", "knn"):
        row = by_method[method]
        assert row["frames"] == 420 and row["episodes"] == 4 * 5
        assert 0 <= row["achievements_last10"] <= 3 and 0 <= row["eval_achievements"] <= 3
        assert row["crafter_score"] >= 0
    assert 0 <= by_method["rnd"]["finetune_success"] <= 1
    assert 0 <= by_method["scratch"]["finetune_success"] <= 1
    assert results["plots"] == ["achievements.png", "success_rates.png", "finetune.png"]
    assert "rnd" in json.loads((out / "success_rates.json").read_text())
    for plot in results["plots"]:
        assert (out / plot).stat().st_size > 0
    # every pretraining episode logged with its frame, within the budget
    episodes = [
        json.loads(line) for line in (out / "checkpoints/pretrain/rnd/episodes.jsonl").open()
    ]
    assert episodes and all(0 < e["frames"] <= 420 for e in episodes)
    assert all(e["extrinsic_return"] >= 0 and e["intrinsic_return"] > 0 for e in episodes)
