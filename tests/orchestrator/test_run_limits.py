"""The orchestrator's limits (issue: 40 runs of 1,000 episodes were all accepted in 2.9 s, and
a minute later their lost-job rescans took 11.4 s of CPU per 10 s):

* a run past `max_active_runs_per_tenant`, `max_active_runs` or `max_queued_episodes` is a 429
  with `Retry-After` naming the limit, its use and the setting to raise; an experiment's runs
  wait instead; a running run never queues past `max_queued_episodes`;
* a lost-job rescan's work (Redis commands, counted by the server) does not grow with the
  backlog of the other runs, nor, while Redis lost nothing, with the run's own.

Against a real redis-server, the orchestrator's app in this process (no workers: runs wait)."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from pathlib import Path
from typing import Any

import support.tiny_corridor  # noqa: F401  (registers TinyCorridor)
from fastapi.testclient import TestClient
from support.processes import RedisServer, wait_until

from llmrl.agents import EpisodeJob
from llmrl.common.queues import RedisBroker
from llmrl.common.store import RunStore
from llmrl.orchestrator.executors import QueueExecutor, ResultCollector
from llmrl.orchestrator.service import build_manager, create_app
from llmrl.recipes.progress import RunCancelled

CORRIDOR = {"env": "TinyCorridor", "episodes": 20}


def serve(redis_server: RedisServer, tmp_path: Path, monkeypatch, **limits: int) -> TestClient:
    """The orchestrator's app on a clean Redis, its limits set the way an operator does."""
    with redis_server.client() as client:
        client.flushall()
    for name, value in limits.items():
        monkeypatch.setenv(f"LLMRL_{name.upper()}", str(value))
    manager = build_manager(
        {
            "home": str(tmp_path / "home"),
            "redis_url": redis_server.url,
            "simulator": "local",
            "llm_gateway": "local",
            "learner": "local",
        }
    )
    return TestClient(create_app(manager, token=None, max_body_bytes=1 << 20))


def post(client: TestClient, config: dict[str, Any] = CORRIDOR) -> Any:
    return client.post("/runs", json={"recipe": "evaluate", "config": config})


def assert_refused(response: Any, limit: str, in_use: int, allowed: int) -> None:
    assert response.status_code == 429, response.text
    assert int(response.headers["retry-after"]) > 0
    body = response.json()
    assert (body["limit"], body["in_use"], body["allowed"]) == (limit, in_use, allowed)
    detail = body["detail"]
    assert f"{in_use} of {limit}={allowed}" in detail, detail
    assert f"LLMRL_{limit.upper()}" in detail and f"--set {limit}=N" in detail, detail


def test_runs_past_the_per_tenant_and_total_limits_are_refused(redis_server, tmp_path, monkeypatch):
    with serve(
        redis_server, tmp_path, monkeypatch, max_active_runs=3, max_active_runs_per_tenant=2
    ) as client:
        assert [post(client).status_code for _ in range(2)] == [201, 201]
        refused = post(client)
        assert_refused(refused, "max_active_runs_per_tenant", 2, 2)
        assert "tenant 'default'" in refused.json()["detail"]
        assert len(client.get("/runs").json()) == 2  # nothing was stored for it

        first = client.get("/runs").json()[0]["run_id"]
        assert client.post(f"/runs/{first}/cancel").status_code == 202
        wait_until(lambda: post(client).status_code == 201, 30, "a slot freed by the cancel")

    with serve(
        redis_server, tmp_path / "2", monkeypatch, max_active_runs=2, max_active_runs_per_tenant=5
    ) as client:
        assert [post(client).status_code for _ in range(2)] == [201, 201]
        assert_refused(post(client), "max_active_runs", 2, 2)


def test_runs_past_the_queued_episodes_limit_are_refused_and_runs_queue_no_more(
    redis_server, tmp_path, monkeypatch
):
    with serve(redis_server, tmp_path, monkeypatch, max_queued_episodes=5) as client:
        assert post(client).status_code == 201  # 20 episodes; the queue was empty
        with redis_server.client() as redis_client:
            wait_until(lambda: redis_client.xlen("llmrl:jobs") == 5, 30, "5 jobs queued")
            time.sleep(1.0)
            assert redis_client.xlen("llmrl:jobs") == 5  # the other 15 wait for room
        assert_refused(post(client), "max_queued_episodes", 5, 5)


def test_an_experiments_runs_wait_for_room_instead_of_failing(redis_server, tmp_path, monkeypatch):
    spec = {"recipe": "evaluate", "config": CORRIDOR, "seeds": "0..2", "max_parallel": 3}
    with serve(redis_server, tmp_path, monkeypatch, max_active_runs=1) as client:
        experiment_id = client.post("/experiments", json=spec).json()["experiment_id"]

        def states() -> dict[str, int]:
            return client.get(f"/experiments/{experiment_id}").json()["run_states"]

        wait_until(lambda: states().get("running") == 1, 30, "one run started")
        time.sleep(1.5)  # the scheduler ticks every second
        assert states() == {"running": 1, "queued": 2}


# -- the lost-job rescan ---------------------------------------------------------------------
OWN_JOBS = 50


def jobs_of(run_id: str, count: int) -> list[EpisodeJob]:
    return [
        EpisodeJob(
            run_id, f"evaluate/{i}", "TinyCorridor", i, {"kind": "planner", "name": "oracle"}
        )
        for i in range(count)
    ]


def rescan_commands(
    redis_server: RedisServer, tmp_path: Path, others: int, lose: int = 0
) -> tuple[list[int], int]:
    """A run waiting on OWN_JOBS jobs (no workers), behind `others` jobs of other runs: the
    Redis commands each of its rescans sent (counted by the server), and how many jobs it put
    back. `lose`: that many of its jobs are deleted and Redis restarts (a crash's loss)."""
    with redis_server.client() as client:
        client.flushall()
    prefix = f"t{time.monotonic_ns()}"
    broker = RedisBroker(redis_server.url, prefix=prefix)
    broker.jobs.put_many(
        [{"job": job.to_dict()} for job in jobs_of("other-run", others)] if others else []
    )
    store = RunStore(tmp_path / f"{prefix}.sqlite")
    executor = QueueExecutor(broker, ResultCollector(store, broker), resubmit_after_s=0.01)
    counts: list[int] = []
    resubmitted: list[int] = []
    original = executor._resubmit_lost
    counter = redis_server.client()

    def commands() -> int:
        return int(counter.info("stats")["total_commands_processed"])

    paused = threading.Event()  # while Redis restarts

    def counted(run_id: str, waiting: list[EpisodeJob]) -> None:
        if paused.is_set():
            return
        before = commands()
        original(run_id, waiting)
        counts.append(commands() - before - 1)  # less the INFO of `before`

    executor._resubmit_lost = counted  # type: ignore[method-assign]
    stop = threading.Event()

    def run() -> None:
        with contextlib.suppress(RunCancelled):
            executor.run_jobs(jobs_of("waiting-run", OWN_JOBS), lambda _: None, stop.is_set)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: len(counts) >= 2, 60, "two rescans")
        if lose:
            paused.set()
            time.sleep(0.6)  # a rescan under way ends (the executor waits 0.5 s between them)
            with redis_server.client() as client:
                ids = [i for i, fields in client.xrange(f"{prefix}:jobs") if b"waiting-run" in
                       fields[b"data"]][:lose]  # fmt: skip
                client.xdel(f"{prefix}:jobs", *ids)
            redis_server.stop(signal.SIGTERM)
            redis_server.start()
            counter = redis_server.client()
            seen = len(counts)
            paused.clear()
            wait_until(lambda: len(counts) >= seen + 2, 60, "two rescans after the restart")
            with redis_server.client() as client:
                mine = [
                    f for _, f in client.xrange(f"{prefix}:jobs") if b"waiting-run" in f[b"data"]
                ]
            resubmitted.append(len(mine) - (OWN_JOBS - lose))
            counts[:] = counts[seen:]
        else:
            seen = len(counts)
            wait_until(lambda: len(counts) >= seen + 3, 60, "three more rescans")
            counts[:] = counts[seen:]
    finally:
        stop.set()
        thread.join(10)
        broker.close()
        store.close()
    return counts, (resubmitted[0] if resubmitted else 0)


def test_a_rescan_does_not_grow_with_the_backlog(redis_server, tmp_path):
    small, _ = rescan_commands(redis_server, tmp_path, others=0)
    large, _ = rescan_commands(redis_server, tmp_path, others=30_000)
    print(f"Redis commands per rescan: {small} (no other jobs), {large} (30,000 other jobs)")
    assert max(large) == max(small) <= 3  # a constant few, whatever is queued


def test_after_a_loss_a_rescan_asks_only_about_its_own_jobs(redis_server, tmp_path):
    small, put_back_small = rescan_commands(redis_server, tmp_path, others=0, lose=7)
    large, put_back_large = rescan_commands(redis_server, tmp_path, others=30_000, lose=7)
    print(f"after a restart: {small[0]} commands (no other jobs), {large[0]} (30,000 others)")
    assert put_back_small == put_back_large == 7  # exactly the lost jobs, once
    assert small[0] == large[0] <= 3 + OWN_JOBS + 3 + 7 + 1  # its own jobs, not the backlog
    assert max(small[1:]) <= 3 and max(large[1:]) <= 3  # then quiet again
