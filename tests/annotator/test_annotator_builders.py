"""The annotator runs registered dataset builders by name over real HTTP: `GET /datasets` lists
them with their requests, `POST /datasets/{name}` runs one (a builder registered out of tree
too, with no new endpoint), and an unknown name or a bad body is an error naming what is
allowed; the service keeps serving."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel, ConfigDict, Field
from support.net import free_port

from llmrl.annotator.datasets import load_episodes
from llmrl.annotator.service import create_app
from llmrl.common.chat_format import chat_jsonl_errors
from llmrl.common.episodes import write_jsonl
from llmrl.common.registry import registry
from llmrl.llm_gateway.service import RestServer
from llmrl.recipes.llm_personalize.demonstrations import demonstration_episode


class SuccessCountRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    episodes: list[str] = Field(..., min_length=1)


@registry.register_dataset("test-success-count", request=SuccessCountRequest)
def success_count(request: SuccessCountRequest) -> dict[str, Any]:
    """How many of the logged episodes succeeded (a builder from out of tree)."""
    episodes = load_episodes(request.episodes)
    return {"episodes": len(episodes), "successes": sum(e.success for e in episodes)}


@pytest.fixture
def annotator(tmp_path: Path) -> Iterator[httpx.Client]:
    no_learner = f"http://127.0.0.1:{free_port()}"  # datasets do not need the learner
    server = RestServer(create_app(tmp_path / "jobs", learner_url=no_learner)).start()
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client
    server.stop()


@pytest.fixture
def demonstrations(tmp_path: Path) -> Path:
    path = tmp_path / "demos.jsonl"
    env_kwargs = {"max_steps": 40}
    write_jsonl(path, [demonstration_episode(seed=seed, env_kwargs=env_kwargs) for seed in (0, 1)])
    return path


def test_registered_builders_are_listed_with_their_requests(annotator):
    builders = {b["name"]: b for b in annotator.get("/datasets").json()}
    assert {"bootstrap", "self-training", "test-success-count"} <= set(builders)
    assert "min_placement_gain" in builders["self-training"]["request"]["properties"]
    assert builders["test-success-count"]["description"].startswith("How many")


def test_any_registered_builder_runs_without_an_endpoint_of_its_own(annotator, demonstrations):
    counted = annotator.post(
        "/datasets/test-success-count", json={"episodes": [str(demonstrations)]}
    )
    assert counted.status_code == 200, counted.text
    assert counted.json() == {"episodes": 2, "successes": 2}


def test_the_self_training_builder_by_name(annotator, demonstrations, tmp_path):
    built = annotator.post(
        "/datasets/self-training",
        json={"episodes": [str(demonstrations)], "out_dir": str(tmp_path / "out"), "name": "r1"},
    )
    assert built.status_code == 200, built.text
    result = built.json()
    assert result["data"] == str(tmp_path / "out" / "r1.jsonl")
    assert chat_jsonl_errors(result["data"]) == [] and result["stats"]["examples"] > 0
    assert result["stats"]["kind"] == "self_training"


def test_unknown_builders_and_bad_bodies_name_what_is_allowed(annotator, demonstrations):
    unknown = annotator.post("/datasets/imagined-rollouts", json={"episodes": ["a"]})
    assert unknown.status_code == 404
    detail = unknown.json()["detail"]
    assert "imagined-rollouts" in detail and "bootstrap" in detail and "self-training" in detail
    bad = annotator.post(
        "/datasets/self-training",
        json={"episodes": [str(demonstrations)], "out_dir": "x", "min_placement_gain": -1},
    )
    assert bad.status_code == 422 and "min_placement_gain" in bad.text
    not_an_object = annotator.post("/datasets/bootstrap", json=["not", "an", "object"])
    assert not_an_object.status_code == 422
    assert annotator.get("/health").status_code == 200
