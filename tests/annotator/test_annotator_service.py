"""The annotator service over real HTTP, beside a real learner service: datasets from episode
logs, fine-tuning jobs handed to the learner (which trains and reports status back through the
annotator), a clear 503 while the learner is down, and bad requests answered with the field."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
import yaml
from support.net import free_port
from support.providers import configure_providers
from support.tiny_llm import tiny_gateway_settings

from llmrl.annotator.service import create_app
from llmrl.common.chat_format import chat_jsonl_errors
from llmrl.common.episodes import write_jsonl
from llmrl.learner.service import create_app as create_learner_app
from llmrl.llm_gateway.service import RestServer
from llmrl.recipes.llm_personalize.demonstrations import demonstration_episode


@pytest.fixture
def learner(tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch):
    """A learner service that knows the tiny model (it trains the annotator's jobs)."""
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump(tiny_gateway_settings(tiny_model_dir)))
    monkeypatch.setenv("LLMRL_LLM_GATEWAY_CONFIG", str(config))
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path / "home"))
    server = RestServer(create_learner_app(tmp_path / "learner-jobs")).start()
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client
    server.stop()


@pytest.fixture
def annotator(tmp_path: Path, learner: httpx.Client):
    server = RestServer(create_app(tmp_path / "jobs", learner_url=str(learner.base_url))).start()
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client
    server.stop()


def wait_done(client: httpx.Client, path: str) -> dict:
    for _ in range(1200):
        state = client.get(path).json()
        if state.get("status") in ("succeeded", "failed"):
            return state
        time.sleep(0.1)
    raise AssertionError(f"{path} did not finish: {state}")


def demonstration_log(path: Path, episodes: int = 2) -> Path:
    env_kwargs = {"max_steps": 40}
    write_jsonl(
        path, [demonstration_episode(seed=seed, env_kwargs=env_kwargs) for seed in range(episodes)]
    )
    return path


def test_bootstrap_dataset_then_a_local_fine_tuning_job(annotator, learner, tmp_path):
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
    # one episode logged twice: every query twice by default, once with `dedupe`
    first = log.read_text().splitlines()[0]
    twice = tmp_path / "twice.jsonl"
    twice.write_text(f"{first}\n{first}\n")
    counts = {}
    for dedupe in (False, True):
        request = {"episodes": [str(twice)], "out_dir": str(tmp_path / "data"), "dedupe": dedupe}
        stats = annotator.post("/datasets/bootstrap", json=request).json()["stats"]
        counts[dedupe] = stats["examples"]
    assert counts[False] == 2 * counts[True] > 0

    job = annotator.post(
        "/finetune/jobs",
        json={"data": [built["data"]], "model": "tiny", "adapter": "boot", "version": "1",
              "steps": 2, "lora_r": 4},
    )  # fmt: skip
    assert job.status_code == 202, job.text
    job_id = job.json()["job_id"]

    state = wait_done(annotator, f"/finetune/jobs/{job_id}")
    assert state["status"] == "succeeded", state
    assert state["result"]["model"] == "tiny:boot@1"
    assert state["progress"] == 2  # training steps, as the learner counted them
    assert (Path(state["result"]["adapter_dir"]) / "adapter_config.json").exists()
    assert [j["job_id"] for j in annotator.get("/finetune/jobs").json()] == [job_id]
    # the learner ran it: the job is the learner's, with the same outcome
    assert [j["job_id"] for j in learner.get("/jobs").json()] == [job_id]
    assert learner.get(f"/jobs/{job_id}").json()["result"] == state["result"]
    assert state["learner"] == str(learner.base_url).rstrip("/")

    # a restarted annotator still lists the jobs it started
    again = RestServer(create_app(tmp_path / "jobs", learner_url=str(learner.base_url))).start()
    try:
        listed = httpx.get(f"{again.url}/finetune/jobs", timeout=30).json()
    finally:
        again.stop()
    assert [(j["job_id"], j["status"]) for j in listed] == [(job_id, "succeeded")]


def test_an_openai_job_runs_on_the_learner_and_its_model_id_comes_back(
    annotator, learner, tmp_path, monkeypatch
):
    from support.openai_standin import StandinState, create_standin

    monkeypatch.setenv("STANDIN_KEY", "sk-annotator-secret")
    data = tmp_path / "train.jsonl"
    example = {
        "messages": [
            {"role": "user", "content": "Where does the mug go?"},
            {"role": "assistant", "content": "1. place mug_1 on counter_1"},
        ]
    }
    data.write_text(json.dumps(example) + "\n")
    standin = RestServer(create_standin(StandinState())).start()
    configure_providers(
        monkeypatch,
        tmp_path,
        standin={"base_url": f"{standin.url}/v1", "api_key_env": "STANDIN_KEY"},
    )
    try:
        job = annotator.post(
            "/finetune/jobs",
            json={"backend": "openai", "data": [str(data)], "model": "gpt-4o-mini",
                  "provider": "standin", "suffix": "home", "poll_interval_s": 0.01},
        )  # fmt: skip
        assert job.status_code == 202, job.text
        state = wait_done(annotator, f"/finetune/jobs/{job.json()['job_id']}")
    finally:
        standin.stop()
    assert state["status"] == "succeeded", state
    assert state["result"]["fine_tuned_model"].startswith("ft:gpt-4o-mini:org-standin:home:")
    assert "sk-annotator-secret" not in json.dumps(annotator.get("/finetune/jobs").json())


def test_without_a_learner_jobs_get_a_503_naming_what_to_start(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    server = RestServer(create_app(tmp_path / "jobs", learner_url=url)).start()
    log = demonstration_log(tmp_path / "demos.jsonl", episodes=1)
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            job = client.post("/finetune/jobs", json={"data": [str(log)], "steps": 1})
            assert job.status_code == 503, job.text
            detail = job.json()["detail"]
            assert url in detail and "llmrl serve learner" in detail
            assert "LLMRL_LEARNER_URL" in detail
            assert client.get("/finetune/jobs").status_code == 503
            # datasets do not need the learner; the service keeps serving
            built = client.post(
                "/datasets/bootstrap", json={"episodes": [str(log)], "out_dir": str(tmp_path)}
            )
            assert built.status_code == 200, built.text
            assert client.get("/health").status_code == 200
    finally:
        server.stop()


def test_bad_requests_name_the_field_and_the_service_keeps_serving(annotator, tmp_path):
    nowhere = str(tmp_path / "no" / "such.jsonl")  # inside the data roots, missing
    missing = annotator.post(
        "/datasets/self-training", json={"episodes": [nowhere], "out_dir": str(tmp_path / "x")}
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
    bad_job = annotator.post("/finetune/jobs", json={"data": [nowhere]})
    assert bad_job.status_code == 422 and "no such file" in bad_job.text
    assert annotator.get("/finetune/jobs/ft-nope").status_code == 404
    assert annotator.get("/finetune/jobs/..%2F..%2Fetc").status_code == 404
    assert annotator.get("/health").status_code == 200


def test_datasets_and_jobs_stay_inside_home_and_data_roots(tmp_path, monkeypatch):
    import shutil
    import tempfile

    monkeypatch.setenv("LLMRL_HOME", str(tmp_path / "home"))
    outside = Path(tempfile.mkdtemp(prefix="llmrl-outside-"))  # not under pytest's folders
    escape = tmp_path / "escape"
    escape.symlink_to(outside)  # inside the roots by name, outside once resolved
    log = demonstration_log(tmp_path / "demos.jsonl", episodes=1)
    url = f"http://127.0.0.1:{free_port()}"  # no learner: a job reaching it would be a 503
    server = RestServer(create_app(tmp_path / "jobs", learner_url=url)).start()
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            for out_dir in (str(outside), str(escape / "sub"), "/etc/llmrl-never"):
                refused = client.post(
                    "/datasets/bootstrap", json={"episodes": [str(log)], "out_dir": out_dir}
                )
                assert refused.status_code == 422, refused.text
                [error] = refused.json()["detail"]
                assert error["loc"][-1] == "out_dir" and "outside the folders" in error["msg"]
            shutil.copy(log, outside / "demos.jsonl")
            refused = client.post(
                "/datasets/bootstrap",
                json={"episodes": [str(outside / "demos.jsonl")], "out_dir": str(tmp_path)},
            )
            assert (
                refused.status_code == 422 and refused.json()["detail"][0]["loc"][-1] == "episodes"
            )
            job = {"backend": "openai", "data": [str(log)], "base_url": "http://127.0.0.1:9/v1"}
            refused = client.post("/finetune/jobs", json=job)
            assert refused.status_code == 422
            assert refused.json()["detail"][0]["loc"][-1] == "base_url"
        assert sorted(p.name for p in outside.iterdir()) == ["demos.jsonl"]  # nothing written
    finally:
        server.stop()
        shutil.rmtree(outside)
