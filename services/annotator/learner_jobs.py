"""The annotator's fine-tuning jobs, handed to the learner service (the learner trains).

`LearnerJobs.submit` starts a checked `FineTuneRequest` on the learner (`POST /jobs`) and
records the job's id under `jobs_dir`, so that the annotator lists the jobs it started, across
its own restarts; `get`/`list` read their status, progress, result and error from the learner
(and keep the last state seen beside the id). Failures to reach the learner are
`LearnerUnavailable` (the service answers 503 naming what to start); the learner's own refusals
are `LearnerRefused` with its status code and detail.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx

from llmrl.common.auth import auth_headers
from llmrl.common.safe_write import write_text
from llmrl.learner.jobs import FineTuneRequest

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 30.0


class LearnerUnavailable(RuntimeError):
    """The learner service cannot be reached (or failed): nothing was started or read."""


class LearnerRefused(RuntimeError):
    """The learner answered with an error status; `status_code` and `detail` are its own."""

    def __init__(self, status_code: int, detail: Any) -> None:
        super().__init__(f"the learner refused ({status_code}): {detail}")
        self.status_code = status_code
        self.detail = detail


class LearnerJobs:
    """Fine-tuning jobs this annotator started on the learner service at `learner_url`."""

    def __init__(self, jobs_dir: str | Path, learner_url: str) -> None:
        self.learner_url = learner_url.rstrip("/")
        self.jobs_dir = Path(jobs_dir)
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        self._client = httpx.Client(
            base_url=self.learner_url,
            headers=auth_headers(),
            timeout=httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
        )

    def unavailable(self, exc: Exception) -> LearnerUnavailable:
        return LearnerUnavailable(
            f"the learner service at {self.learner_url} is unreachable ({type(exc).__name__}); "
            "the annotator hands fine-tuning jobs to it: start it with `llmrl serve learner` "
            "(or `llmrl up`), or point the annotator at it with LLMRL_LEARNER_URL or the "
            "annotator setting learner_url"
        )

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._client.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise self.unavailable(exc) from None
        if response.status_code >= 500:
            raise LearnerUnavailable(
                f"the learner service at {self.learner_url} failed "
                f"({response.status_code}): {response.text[:500]}"
            )
        if response.status_code >= 400:
            try:
                detail = response.json().get("detail", response.text)
            except ValueError:
                detail = response.text
            raise LearnerRefused(response.status_code, detail)
        return response.json()

    # -- jobs -----------------------------------------------------------------------------------
    def submit(self, request: FineTuneRequest) -> dict[str, Any]:
        job = self._call("POST", "/jobs", json=request.model_dump())
        self._remember(job, submitted=time.time())
        return self._view(job)

    def known(self, job_id: str) -> bool:
        return self._record_path(job_id).is_file()

    def get(self, job_id: str) -> dict[str, Any] | None:
        """The learner's view of one of our jobs; None when it is not one of ours."""
        if not self.known(job_id):
            return None
        try:
            job = self._call("GET", f"/jobs/{job_id}")
        except LearnerRefused as exc:
            if exc.status_code != 404:
                raise
            raise LearnerRefused(
                404, f"job_id: the learner at {self.learner_url} no longer has job {job_id!r}"
            ) from None
        self._remember(job)
        return self._view(job)

    def list(self) -> list[dict[str, Any]]:
        """Our jobs in the order they were started, as the learner reports them (the last
        state seen for any the learner no longer has)."""
        records = sorted(
            (json.loads(path.read_text()) for path in self.jobs_dir.glob("*.json")),
            key=lambda record: record["submitted"],
        )
        current = {job["job_id"]: job for job in self._call("GET", "/jobs")}
        jobs = []
        for record in records:
            job = current.get(record["job_id"])
            if job is None:
                jobs.append({**record["job"], "learner": self.learner_url, "lost": True})
                continue
            self._remember(job, submitted=record["submitted"])  # already read: no re-read
            jobs.append(self._view(job))
        return jobs

    def close(self) -> None:
        self._client.close()

    # -- records --------------------------------------------------------------------------------
    def _view(self, job: dict[str, Any]) -> dict[str, Any]:
        return {**job, "learner": self.learner_url}

    def _record_path(self, job_id: str) -> Path:
        if not job_id.replace("-", "").replace("_", "").isalnum():  # never a path elsewhere
            return self.jobs_dir / "invalid-job-id"
        return self.jobs_dir / f"{job_id}.json"

    def _remember(self, job: dict[str, Any], submitted: float | None = None) -> None:
        path = self._record_path(str(job["job_id"]))
        if submitted is None:
            submitted = json.loads(path.read_text())["submitted"]
        record = {"job_id": job["job_id"], "submitted": submitted, "job": job}
        write_text(path, json.dumps(record, indent=2, default=str) + "\n")  # through no link
