"""A cancelled learner job frees its slot (issue 52, finding 7): a job that never reports
progress is killed a grace period after its cancel, and the job queued behind it runs; a job
that reports stops at its next report. Against the real learner app over HTTP."""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import pytest
import support.learner_jobs  # noqa: F401  registers the test job kinds

from llmrl.learner.service import create_app
from llmrl.llm_gateway.service import RestServer

GRACE_S = 1.0
FINAL = ("succeeded", "failed", "cancelled")


def wait_for(client: httpx.Client, job_id: str, statuses: tuple[str, ...], limit_s: float = 120):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        job = client.get(f"/policy-jobs/{job_id}").json()
        if job["status"] in statuses:
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} is still {job['status']}: {job}")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"  # a zombie is dead


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path / "home"))
    server = RestServer(create_app(tmp_path / "jobs", cancel_grace_s=GRACE_S)).start()
    try:
        # the first policy job loads every recipe's kinds: minutes on a busy machine
        with httpx.Client(base_url=server.url, timeout=300) as client:
            yield client
    finally:
        server.stop()


def test_a_cancelled_job_that_never_reports_is_killed_and_the_next_job_runs(client, tmp_path):
    marker = tmp_path / "blocker.pid"
    blocker = client.post("/policy-jobs", json={"kind": "test-block", "marker": str(marker)})
    assert blocker.status_code == 202, blocker.text
    blocker_id = blocker.json()["job_id"]
    queued = client.post("/policy-jobs", json={"kind": "test-count", "steps": 3})
    queued_id = queued.json()["job_id"]
    wait_for(client, blocker_id, ("running",))
    deadline = time.monotonic() + 120
    while not marker.exists() and time.monotonic() < deadline:  # its work began
        time.sleep(0.05)
    pid = int(marker.read_text())
    assert client.get(f"/policy-jobs/{queued_id}").json()["status"] == "queued"  # it waits

    cancelled_at = time.monotonic()
    asked = client.post(f"/policy-jobs/{blocker_id}/cancel").json()
    assert asked["cancel_requested"] and asked["status"] == "running"
    job = wait_for(client, blocker_id, FINAL, limit_s=60)
    freed_s = time.monotonic() - cancelled_at
    print(f"the blocked job left 'running' {freed_s:.1f} s after its cancel")
    assert job["status"] == "cancelled" and "killed" in job["error"], job
    assert job["progress"] == 0 and job["result"] is None  # as it stood
    assert not alive(pid)  # its process is gone, not left behind holding the machine

    after = wait_for(client, queued_id, FINAL)  # the job behind it gets the slot
    assert after["status"] == "succeeded", after
    assert after["progress"] == 3 and after["result"]["steps"] == 3
    assert after["result"]["pid"] != os.getpid()  # it ran in a process of its own


def test_a_job_that_reports_stops_at_its_next_report(client):
    body = {"kind": "test-count", "steps": 100_000, "step_s": 0.01}
    started = client.post("/policy-jobs", json=body)
    job_id = started.json()["job_id"]
    deadline = time.monotonic() + 120
    while client.get(f"/policy-jobs/{job_id}").json()["progress"] < 5:
        assert time.monotonic() < deadline, "the job never reported"
        time.sleep(0.05)
    client.post(f"/policy-jobs/{job_id}/cancel")
    job = wait_for(client, job_id, FINAL, limit_s=60)
    assert job["status"] == "cancelled" and job["error"] == "cancelled by request", job
    assert 5 <= job["progress"] < 100_000
    # a failing or finished job is reported as before, across the process boundary
    refused = client.post("/policy-jobs", json={"kind": "test-count", "steps": 0})
    assert refused.status_code == 422
    again = client.post("/policy-jobs", json={"kind": "test-count", "steps": 2})
    done = wait_for(client, again.json()["job_id"], FINAL)
    assert done["status"] == "succeeded" and done["result"]["steps"] == 2
