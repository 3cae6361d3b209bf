"""A learner restart no longer loses the runs waiting on it (issue: after a SIGKILL of the
learner during a when2ask training job the run failed at once, "Connection refused", its phase
left "running", and the restarted learner marked the job "interrupted", its progress reset):

* the restarted learner runs an unfinished job again, from its record: SB3 goes on from the
  line's latest version; the record lists the restart and keeps counting progress;
* the run's phase waits for the learner through the restart (connection refused, with backoff)
  and completes with the job's result;
* a learner that does not come back within LLMRL_LEARNER_RETRY_S fails the run clearly, and its
  phase reads "failed", not "running".

The first test uses real processes: `llmrl serve learner`, SIGKILLed mid-job and started again
on the same home and port."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import support.learner_jobs  # noqa: F401  registers the test job kinds (test-count)
from pydantic import Field, field_validator
from support.net import free_port
from support.processes import Service, child_env, wait_until

from llmrl.common import store as states
from llmrl.common.paths import confined_field
from llmrl.common.registry import registry
from llmrl.common.store import RunStore
from llmrl.learner.policy_jobs import policy_jobs
from llmrl.orchestrator.runner import execute_run
from llmrl.recipes.base import Phase, Recipe
from llmrl.recipes.config import RecipeConfig
from llmrl.recipes.context import RunContext
from llmrl.recipes.when2ask.training import PolicyTrainingJob, train_policy

TOTAL, EVERY = 4096, 512  # PPO timesteps, and a version every EVERY of them


class TrainOnLearnerConfig(RecipeConfig):
    model_path: str = Field("m.zip", max_length=4096)
    total_timesteps: int = Field(TOTAL, ge=1, le=100_000)

    # registered for the whole session, so the fuzz suite submits it too: a path it names
    # must lie under the roots, as every product recipe's does
    _confined = field_validator("model_path")(confined_field)


@registry.register_recipe("test-train-on-learner", "one phase: a when2ask job on the learner")
class TrainOnLearner(Recipe):
    Config = TrainOnLearnerConfig

    def phases(self) -> list[Phase]:
        return [Phase("train", self.train)]

    def train(self, ctx: RunContext) -> dict[str, Any]:
        job = PolicyTrainingJob(
            policy="never-ask", env="SimpleDoorKey", n_envs=2, n_steps=64, seed=1,
            total_timesteps=self.config.total_timesteps, checkpoint_every=EVERY,
            model_path=self.config.model_path,
        )  # fmt: skip
        return ctx.train(job, train_policy, "train", job.total_timesteps)


class NoEpisodes:
    def run_jobs(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("this recipe plays no episodes")


def start_run(store: RunStore, config: dict[str, Any], out: Path) -> str:
    return store.create_run("test-train-on-learner", config, out)


def run(store: RunStore, run_id: str, learner: str) -> Any:
    return execute_run(store, run_id, NoEpisodes(), learner=learner)  # type: ignore[arg-type]


def test_a_run_waits_through_a_learner_restart_and_the_job_goes_on_from_its_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    home = tmp_path / "home"
    monkeypatch.setenv("LLMRL_HOME", str(home))
    monkeypatch.setenv("LLMRL_LEARNER_RETRY_S", "300")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    learner = Service(
        "learner",
        ["serve", "learner", "--port", str(port)],
        child_env({"LLMRL_HOME": str(home)}),
        tmp_path,
        health_url=f"{url}/health",
    ).start(timeout=120)
    model = home / "models" / "restart.zip"
    store = RunStore(tmp_path / "runs.sqlite")
    run_id = start_run(store, {"model_path": str(model)}, tmp_path / "out")
    ended: list[Any] = []
    thread = threading.Thread(target=lambda: ended.append(run(store, run_id, url)), daemon=True)
    try:
        thread.start()
        line = home / "models" / "restart"  # the job's checkpoint line (checkpoint_line)

        def job() -> dict[str, Any]:
            jobs = httpx.get(f"{url}/policy-jobs", timeout=10).json()
            return jobs[0] if jobs else {}

        wait_until(
            lambda: (line / "1").is_dir() or not thread.is_alive(),
            600,
            "the job's first version",
            interval=0.05,
        )
        assert thread.is_alive(), ended[0].error
        before = job()
        assert before["status"] == "running" and before["progress"] < TOTAL, before
        learner.kill(signal.SIGKILL)  # mid-job: its child process dies with it
        time.sleep(2.0)  # the run's phase meets "connection refused" meanwhile
        assert thread.is_alive() and not ended  # ...and waits
        phase = store.phases(run_id)[0]
        assert phase["status"] == "running"
        learner.start(timeout=120)  # same home, same port
        thread.join(900)
        assert not thread.is_alive(), "the run did not end"
        final = job()
    finally:
        learner.stop()
    (row,) = ended
    assert row.status == states.COMPLETED, row.error
    outputs = store.phase_outputs(run_id, "train")
    assert outputs is not None and Path(outputs["model"]).is_file()
    assert [p["status"] for p in store.phases(run_id)] == ["completed"]

    # the learner's record: succeeded, restarted once, progress counted on from its record
    assert final["status"] == "succeeded", final
    (restart,) = final["restarts"]
    assert restart["was"] == "running" and 0 < restart["progress"] < TOTAL
    added = final["progress"] - restart["progress"]  # what the restarted job trained
    assert added < TOTAL and added % EVERY == 0, final  # from a saved version, not from 0
    versions = sorted(int(v.name) for v in line.iterdir() if not v.name.startswith("."))
    assert versions == list(range(1, TOTAL // EVERY + 1))  # no version trained twice over
    last = json.loads((line / str(versions[-1]) / "llmrl_checkpoint.json").read_text())
    assert last["result"]["timesteps"] == TOTAL
    print(f"resumed from {TOTAL - added} timesteps, trained {added} more; {final['restarts']}")
    store.close()


def test_a_learner_that_does_not_come_back_fails_the_run_clearly(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMRL_LEARNER_RETRY_S", "1.5")
    url = f"http://127.0.0.1:{free_port()}"  # nobody listens there
    store = RunStore(tmp_path / "runs.sqlite")
    config = {"model_path": str(tmp_path / "m.zip"), "total_timesteps": 8}
    run_id = start_run(store, config, tmp_path)
    row = run(store, run_id, url)
    assert row.status == states.FAILED
    assert f"the learner at {url} has not answered" in row.error, row.error
    assert "LLMRL_LEARNER_RETRY_S" in row.error, row.error
    assert [(p["phase"], p["status"]) for p in store.phases(run_id)] == [("train", "failed")]
    store.close()


# -- the learner's side, in this process ------------------------------------------------------
def record(jobs_dir: Path, job_id: str, status: str, **extra: Any) -> None:
    job = {"job_id": job_id, "status": status, "created": time.time(), "progress": 7,
           "request": {"kind": "test-count", "steps": 3}, "result": None, "error": None,
           **extra}  # fmt: skip
    jobs_dir.mkdir(parents=True, exist_ok=True)
    (jobs_dir / f"{job_id}.json").write_text(json.dumps(job))


def test_unfinished_jobs_of_an_earlier_learner_run_again(tmp_path):
    jobs_dir = tmp_path / "jobs"
    record(jobs_dir, "rl-running", "running")
    record(jobs_dir, "rl-queued", "queued")
    record(jobs_dir, "rl-cancelled", "running", cancel_requested=True)
    record(jobs_dir, "rl-again", "running", restarts=[{"at": 0, "progress": 0, "was": "x"}] * 3)
    record(jobs_dir, "rl-bad", "running", request={"kind": "test-count", "steps": 0})
    jobs = policy_jobs(jobs_dir)  # the learner's own, each job in a process of its own
    try:
        wait_until(
            lambda: all(j["status"] not in ("queued", "running") for j in jobs.list()), 120, "jobs"
        )
        by_id = {job["job_id"]: job for job in jobs.list()}
    finally:
        jobs.close()
    for job_id in ("rl-running", "rl-queued"):
        job = by_id[job_id]
        assert job["status"] == "succeeded" and job["result"]["steps"] == 3, job
        assert job["progress"] == 7 + 3  # counted on from the record
        assert [r["was"] for r in job["restarts"]] == [job_id.split("-")[1]]
    assert by_id["rl-cancelled"]["status"] == "cancelled"
    assert by_id["rl-again"]["status"] == "failed"
    assert "restarted 3 times" in by_id["rl-again"]["error"]
    assert by_id["rl-bad"]["status"] == "failed" and "steps" in by_id["rl-bad"]["error"]
    on_disk = json.loads((jobs_dir / "rl-running.json").read_text())
    assert on_disk["status"] == "succeeded" and len(on_disk["restarts"]) == 1
