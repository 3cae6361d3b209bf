"""The recipe `ellm` end to end in embedded mode on the tiny Crafter-text stand-in (novelty
baselines, fine-tuning from pretrained and from scratch); its config errors name the key; a
pretraining killed half-way resumes from its checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import support.tiny_crafter_text  # noqa: F401  (registers TinyCrafterText)
import yaml
from support.tiny_crafter_text import ENV_ID
from support.tiny_llm import TINY_MODEL, tiny_gateway_settings

import llmrl.llm_gateway.client as gateway_client
from llmrl.orchestrator.embedded import run_embedded
from llmrl.recipes.config import ConfigError, validate_config
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
    assert any("unlocking 'place crafting table' (place_table)" in n for n in results["notes"])
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


@pytest.fixture
def tiny_gateway(tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The process's embedded gateway serves the tiny model as "tiny" (and, from the
    defaults, all-MiniLM-L6-v2 for embeddings), with its cache in tmp."""
    settings = tiny_gateway_settings(
        tiny_model_dir, cache={"backend": "sqlite", "sqlite_path": str(tmp_path / "c.sqlite")}
    )
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump(settings))
    monkeypatch.setenv("LLMRL_LLM_GATEWAY_CONFIG", str(config))
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(gateway_client, "_shared_gateway", None)


def test_ellm_and_the_oracle_are_paid_for_suggested_goals(tiny_gateway, tmp_path: Path):
    out = tmp_path / "run"
    config = {
        **TINY,
        "methods": ["ellm", "oracle"],
        "suggester": "llm-score",
        "model": TINY_MODEL,
        "conditioning": "suggestions",
        "learning_starts": 1_000,  # random play throughout: the rewards are the point here
        "finetune_frames": 0,
        "finetune_from": [],
    }
    run_embedded("ellm", config, out_dir=out, progress=False)
    rows = {row["method"]: row for row in json.loads((out / "results.json").read_text())["rows"]}
    oracle = [json.loads(t) for t in (out / "checkpoints/pretrain/oracle/episodes.jsonl").open()]
    # the oracle suggests "chop tree" and "drink water" in view: random play earns some
    assert sum(e["intrinsic_return"] for e in oracle) > 0
    ellm = rows["ellm"]
    assert ellm["llm_requests"] > 0 and ellm["suggester_asked"] > 0
    # one score call per distinct caption: the strip has few, so the cache answers the rest
    assert ellm["caption_cache_hit_rate"] > 0.5
    assert rows["oracle"]["llm_model_calls"] > 0  # embeddings only: no generation
    assert rows["oracle"]["suggester_asked"] == 0
