"""The annotator service over real HTTP: datasets from episode logs, fine-tuning jobs that
produce a servable adapter, and bad requests answered with the field at fault."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
import yaml
from learner_support import tiny_gateway_settings

from llmrl.annotator.chat_format import chat_jsonl_errors
from llmrl.annotator.demonstrations import demonstration_episode, make_housekeep_env
from llmrl.annotator.service import create_app
from llmrl.common.episodes import write_jsonl
from llmrl.llm_gateway.service import RestServer


@pytest.fixture
def annotator(tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch):
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump(tiny_gateway_settings(tiny_model_dir)))
    monkeypatch.setenv("LLMRL_LLM_GATEWAY_CONFIG", str(config))
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path / "home"))
    server = RestServer(create_app(tmp_path / "jobs")).start()
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client
    server.stop()


def demonstration_log(path: Path, episodes: int = 2) -> Path:
    env = make_housekeep_env(max_steps=40)
    write_jsonl(path, [demonstration_episode(env, seed=seed) for seed in range(episodes)])
    return path


def test_bootstrap_dataset_then_a_local_fine_tuning_job(annotator, tmp_path):
    log = demonstration_log(tmp_path / "demos.jsonl")
    response = annotator.post(
        "/datasets/bootstrap",
        json={"episodes": [str(log)], "out_dir": str(tmp_path / "data"), "name": "boot"},
    )
    assert response.status_code == 200, response.text
    built = response.json()
    assert built["data"] == str(tmp_path / "data" / "boot.jsonl")
    assert chat_jsonl_errors(built["data"]) == []
    assert built["stats"]["episodes"] == 2 and built["stats"]["examples"] > 2

    job = annotator.post(
        "/finetune/jobs",
        json={"data": [built["data"]], "model": "tiny", "adapter": "boot", "version": "1",
              "steps": 2, "lora_r": 4},
    )  # fmt: skip
    assert job.status_code == 202, job.text
    job_id = job.json()["job_id"]

    for _ in range(600):
        state = annotator.get(f"/finetune/jobs/{job_id}").json()
        if state["status"] in ("succeeded", "failed"):
            break
        time.sleep(0.1)
    assert state["status"] == "succeeded", state
    assert state["result"]["model"] == "tiny:boot@1"
    assert (Path(state["result"]["adapter_dir"]) / "adapter_config.json").exists()
    assert [j["job_id"] for j in annotator.get("/finetune/jobs").json()] == [job_id]


def test_bad_requests_name_the_field_and_the_service_keeps_serving(annotator, tmp_path):
    missing = annotator.post(
        "/datasets/self-training", json={"episodes": ["/no/such.jsonl"], "out_dir": "x"}
    )
    assert missing.status_code == 400 and "episodes" in missing.json()["detail"]
    unknown = annotator.post(
        "/datasets/bootstrap", json={"episodes": ["a"], "out_dir": "x", "colour": "red"}
    )
    assert unknown.status_code == 422 and "colour" in unknown.text
    not_episodes = tmp_path / "junk.jsonl"
    not_episodes.write_text('{"hello": 1}\n')
    junk = annotator.post(
        "/datasets/bootstrap", json={"episodes": [str(not_episodes)], "out_dir": str(tmp_path)}
    )
    assert junk.status_code == 400 and junk.json()["detail"].startswith("episodes:")
    bad_job = annotator.post("/finetune/jobs", json={"data": ["/no/such.jsonl"]})
    assert bad_job.status_code == 422 and "no such file" in bad_job.text
    assert annotator.get("/finetune/jobs/ft-nope").status_code == 404
    assert annotator.get("/health").status_code == 200
