"""Service mode under faults, with real processes: Redis (AOF), simulator over gRPC, orchestrator
and rollout workers. Each run must end with exactly its episodes stored, each once."""

from __future__ import annotations

import signal

import pytest
from support.processes import Stack, pending_of, wait_until

from llmrl.orchestrator.rest_client import OrchestratorClient

SLOW_CORRIDOR = {"length": 4, "step_delay_s": 0.04}  # ~0.2 s per episode: killable mid-episode


@pytest.fixture
def client(stack: Stack):
    client = OrchestratorClient(stack.url)
    yield client
    client.close()


def submit(client: OrchestratorClient, episodes: int) -> str:
    config = {"env": "TinyCorridor", "env_kwargs": SLOW_CORRIDOR, "episodes": episodes}
    return client.submit("evaluate", config)["run_id"]


def stored_ids(client: OrchestratorClient, run_id: str) -> list[str]:
    page = client.episodes(run_id, limit=1000)
    assert page["total"] == len(page["episodes"])
    return [episode["episode_id"] for episode in page["episodes"]]


def assert_exactly(client: OrchestratorClient, run_id: str, episodes: int) -> None:
    final = client.wait(run_id, timeout=120)
    assert final["status"] == "completed", final
    ids = stored_ids(client, run_id)
    assert sorted(ids) == sorted(f"evaluate/{i}" for i in range(episodes))
    assert final["summary"]["episodes"] == episodes
    assert final["summary"]["success_rate"] == 1.0


def test_sigkilled_worker_mid_episode_loses_and_duplicates_nothing(stack, client):
    run_id = submit(client, 40)
    victim = stack.workers[0]
    wait_until(
        lambda: client.run(run_id)["episodes_stored"] >= 4 and pending_of(stack, victim.name) == 1,
        60,
        "the victim worker holding a job after a few episodes",
        interval=0.01,
    )
    victim.kill(signal.SIGKILL)
    assert pending_of(stack, victim.name) == 1  # it died holding an unacknowledged job
    assert_exactly(client, run_id, 40)
    stack.workers.remove(victim)
    stack.add_worker("w3")


def test_orchestrator_killed_and_restarted_resumes_the_run(stack, client):
    run_id = submit(client, 30)
    wait_until(lambda: client.run(run_id)["episodes_stored"] >= 5, 60, "some episodes stored")
    stack.orchestrator.kill(signal.SIGKILL)
    stack.orchestrator.start()
    resumed = client.run(run_id)
    assert resumed["status"] in ("running", "completed")
    assert_exactly(client, run_id, 30)


def test_redis_restarted_mid_run_loses_nothing(stack, client):
    run_id = submit(client, 30)
    wait_until(lambda: client.run(run_id)["episodes_stored"] >= 5, 60, "some episodes stored")
    stack.redis.stop(signal.SIGTERM)  # AOF is flushed on shutdown; the queued jobs survive
    stack.redis.start()
    assert_exactly(client, run_id, 30)


def test_jobs_lost_by_a_crashed_redis_are_queued_again(stack, client):
    run_id = submit(client, 30)
    wait_until(lambda: client.run(run_id)["episodes_stored"] >= 3, 60, "some episodes stored")
    stack.redis.stop(signal.SIGKILL)  # a crash: the AOF may miss the last second of writes
    stack.redis.start()
    with stack.redis.client() as redis_client:
        redis_client.xtrim("llmrl:jobs", maxlen=0)  # make the loss certain: every queued job
    assert_exactly(client, run_id, 30)


def test_cancel_stops_a_run_and_results_are_downloadable(stack, client):
    run_id = submit(client, 200)
    wait_until(lambda: client.run(run_id)["episodes_stored"] >= 2, 60, "episodes stored")
    assert client.cancel(run_id)["run_id"] == run_id
    final = client.wait(run_id, timeout=60)
    assert final["status"] == "cancelled"
    assert final["episodes_stored"] < 200

    done = submit(client, 4)
    assert client.wait(done, timeout=60)["status"] == "completed"
    names = {a["name"] for a in client.http.get(f"/runs/{done}/artifacts").json()}
    assert {"results.json", "results.md", "evaluate.png"} <= names
    results = client.http.get(f"/runs/{done}/artifacts/results.json").json()
    assert results["rows"][0]["episodes"] == 4
    assert client.http.get(f"/runs/{done}/artifacts/../../etc/passwd").status_code == 404


def test_workers_survive_a_simulator_restart(stack, client):
    first = submit(client, 6)  # both workers now hold a world on the simulator
    assert client.wait(first, timeout=60)["status"] == "completed"
    stack.simulator.stop()
    stack.simulator.start()  # a new process: the workers' cached worlds are gone
    assert_exactly(client, submit(client, 6), 6)
