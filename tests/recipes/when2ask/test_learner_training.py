"""In service mode the asking policy trains inside the learner service (real HTTP, real SB3), as
the built-in policy job `when2ask`."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest
import uvicorn

from llmrl.common.registry import registry
from llmrl.learner.policy_jobs import run_on_learner
from llmrl.learner.service import create_app
from llmrl.recipes.when2ask.training import PolicyTrainingJob


@pytest.fixture
def learner_url(tmp_path: Path):
    config = uvicorn.Config(
        create_app(tmp_path / "jobs"), host="127.0.0.1", port=0, log_level="error"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


def test_learner_trains_the_asking_policy_and_reports_progress(learner_url, tmp_path):
    job = PolicyTrainingJob(
        policy="asking", env="SimpleDoorKey", total_timesteps=128, n_envs=2, n_steps=32,
        model_path=str(tmp_path / "models" / "asking.zip"),
    )  # fmt: skip
    steps: list[int] = []
    result = run_on_learner(job, on_progress=steps.append, url=learner_url, timeout_s=300)
    assert Path(result["model"]).is_file()
    assert sum(steps) >= job.total_timesteps  # the learner reported its training steps
    jobs = httpx.get(f"{learner_url}/policy-jobs").json()
    assert [j["status"] for j in jobs] == ["succeeded"]


def test_a_job_trains_on_its_own_thread_count_on_the_learner(learner_url, tmp_path, monkeypatch):
    """The recipe trains its small MLP on one thread embedded; on the learner the job's process
    would take the learner's count (every core, or OMP_NUM_THREADS), and a reduction split
    another way rounds otherwise: the job carries its count, so service mode gives the same
    bits as embedded."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # read by torch in the job's spawned process

    def trained_on(threads: int | None) -> int:
        job = PolicyTrainingJob(
            policy="asking", env="SimpleDoorKey", total_timesteps=64, n_envs=2, n_steps=32,
            model_path=str(tmp_path / f"models-{threads}" / "asking.zip"), torch_threads=threads,
        )  # fmt: skip
        return run_on_learner(job, url=learner_url, timeout_s=300)["torch_threads"]

    assert trained_on(None) == 2  # the learner's own count
    assert trained_on(1) == 1


def test_learner_refuses_a_bad_job_naming_the_field(learner_url, tmp_path):
    bad = {"kind": "when2ask", "policy": "asking", "env": "SimpleDoorKey", "total_timesteps": 0,
           "model_path": "m.zip"}  # fmt: skip
    response = httpx.post(f"{learner_url}/policy-jobs", json=bad)
    assert response.status_code == 422 and "total_timesteps" in response.text
    unknown_key = {**bad, "total_timesteps": 8, "colour": 1}
    unknown = httpx.post(f"{learner_url}/policy-jobs", json=unknown_key)
    assert unknown.status_code == 422 and "colour" in unknown.text
    assert httpx.get(f"{learner_url}/policy-jobs/rl-nope").status_code == 404
    assert httpx.get(f"{learner_url}/policy-jobs").json() == []  # nothing was started
    assert httpx.get(f"{learner_url}/health").status_code == 200


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"simulator": "203.0.113.9:50051"}, "simulator"),  # the learner would send its token
        ({"llm_gateway": "203.0.113.9:50052"}, "llm_gateway"),
        ({"model_path": "/etc/llmrl-owned.zip"}, "model_path"),
        ({"tensorboard_dir": "/etc/llmrl-tb"}, "tensorboard_dir"),
    ],
)
def test_a_job_cannot_name_another_address_or_a_path_outside_the_roots(
    learner_url, tmp_path, change, field
):
    job = {"kind": "when2ask", "policy": "asking", "env": "SimpleDoorKey", "total_timesteps": 8,
           "model_path": str(tmp_path / "m.zip"), **change}  # fmt: skip
    response = httpx.post(f"{learner_url}/policy-jobs", json=job)
    assert response.status_code == 422, response.text
    assert [error["loc"][-1] for error in response.json()["detail"]] == [field]
    assert httpx.get(f"{learner_url}/policy-jobs").json() == []  # nothing was started


@pytest.mark.parametrize("kind", ["asking", None, 3])
def test_learner_refuses_an_unknown_job_kind_listing_the_known_ones(learner_url, kind):
    body = {"policy": "asking", "env": "SimpleDoorKey", "total_timesteps": 8, "model_path": "m.zip"}
    if kind is not None:
        body["kind"] = kind
    response = httpx.post(f"{learner_url}/policy-jobs", json=body)
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "kind"]
    known = error["msg"].partition("known kinds: ")[2].split(", ")
    assert {"glam", "when2ask", "ellm", "kalm-grounding", "kalm-offline"} <= set(known)
    assert httpx.get(f"{learner_url}/policy-jobs").json() == []


def test_a_failing_job_fails_alone(learner_url, tmp_path):
    job = PolicyTrainingJob(
        policy="asking", env="NoSuchEnv", total_timesteps=8, model_path=str(tmp_path / "m.zip")
    )
    with pytest.raises(RuntimeError, match="NoSuchEnv"):
        run_on_learner(job, url=learner_url, timeout_s=60)
    assert httpx.get(f"{learner_url}/health").status_code == 200


def test_when2ask_offers_its_policy_training_as_a_builtin_policy_job():
    from llmrl.recipes.when2ask.training import PolicyTrainingJob, train_policy

    assert "when2ask" in registry.names("policy_job")
    assert registry.get_policy_job("when2ask") == (PolicyTrainingJob, train_policy)
