"""Jobs run in the background of the learner service: fine-tuning (local LoRA SFT or the OpenAI
API) by default, or any other kind given a run function (the learner's RL policy jobs). The
annotator hands its fine-tuning jobs to the learner rather than running them.

`BackgroundJobs` keeps the jobs of one process: `submit` validates a request and starts it, in
a child process of its own (`job_process.py`: a cancelled job that does not stop is killed),
one job at a time (training takes the machine); `get`/`list` report status (`queued`,
`running`, `succeeded`, `failed`, `cancelled`), progress (local training steps), the result
(adapter directory and the gateway model name, or the OpenAI model id) or the error. Jobs are
also written as JSON under `<jobs_dir>/<job_id>.json` (progress at most every second), so their
outcome survives a restart.

A job the service did not finish (it was killed, or stopped, while the job was queued or
running) is run again by the next service on the same `jobs_dir`, from its recorded request,
checked again as when it was submitted: an algorithm that saves versions goes on from its
line's latest one (SB3's `resume`, GLAM's and ELLM's checkpoints), any other job starts afresh.
Its record keeps its id, and `restarts` lists each restart (when, and the progress it had);
`progress` goes on counting from there. A job restarted `max_restarts` times (default 3), or
whose request no longer passes, fails naming why; a job cancelled before the stop stays
cancelled.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from llmrl.common import trusted
from llmrl.common.bounds import Seed
from llmrl.common.names import Name, is_safe_name
from llmrl.common.paths import confined_field
from llmrl.common.providers import DEFAULT_PROVIDER, provider
from llmrl.learner.algorithms.base import setting_field
from llmrl.learner.algorithms.sft import SftSettings
from llmrl.learner.job_process import JobCancelled, Outcome, run_in_child

log = logging.getLogger("llmrl.learner.jobs")
MAX_RESTARTS = 3  # a job the service stopped under is run again at most this many times
PROGRESS_SAVE_S = 1.0  # a running job's record is written at most this often


def sft_setting(name: str, description: str | None = None, **bounds: float) -> Any:
    """A field that passes `sft`'s setting `name` on (default, bounds, description)."""
    return setting_field(SftSettings, name, description, **bounds)


class FineTuneRequest(BaseModel):
    """What to fine-tune on what; unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["local", "openai"] = Field("local", description="local LoRA or OpenAI API")
    data: list[str] = Field(..., min_length=1, description="chat fine-tuning JSONL files")
    model: str = Field("smollm2", description="gateway model (local) or OpenAI base model")
    adapter: Name = Field("sft", description="local adapter name")
    version: Name = Field("1", description="local adapter version")
    init_adapter: str | None = Field(None, description="local: continue this adapter directory")
    # the local SFT settings: `sft`'s defaults and bounds (its limits, which an operator raises:
    # llmrl.common.bounds), with the API's own fixed upper limits on epochs and batch size
    steps: int | None = sft_setting("steps")
    epochs: float = sft_setting("epochs", le=100)
    batch_size: int = sft_setting("batch_size", le=512)
    learning_rate: float = sft_setting("learning_rate")
    lora_r: int = sft_setting("lora_r")
    lora_targets: list[str] | None = Field(
        None, description="local: module names LoRA adapts (default: every linear layer)"
    )
    lora_layers: int | None = sft_setting(
        "lora_layers", "local: adapt only the top N decoder layers (None: all)"
    )
    max_length: int = sft_setting("max_length", "local: longer examples dropped", ge=16)
    bf16: bool | None = sft_setting("bf16", "local: bf16 autocast (None: the process's precision)")
    gradient_checkpointing: bool = sft_setting(
        "gradient_checkpointing", "local: recompute activations in backward (far less memory)"
    )
    seed: Seed = 0
    provider: str = Field(
        DEFAULT_PROVIDER,
        description="openai: a configured provider (its URL and key variable are server "
        "configuration, see llmrl.common.providers)",
    )
    suffix: str | None = Field(None, max_length=64, description="openai: model name suffix")
    poll_interval_s: float = Field(10.0, gt=0, le=3600)

    # a job reads only files under LLMRL_HOME or a configured data root (checked before the
    # files' existence, so a refusal says nothing about what exists elsewhere)
    _paths_confined = field_validator("data")(confined_field)

    @field_validator("init_adapter")
    @classmethod
    def _adapter_saved_here(cls, value: str | None) -> str | None:
        # an adapter this project saved (a version under LLMRL_HOME), never a folder elsewhere
        return None if value is None else str(trusted.resolve_artifact(value, "init_adapter"))

    @field_validator("provider")
    @classmethod
    def _provider_configured(cls, name: str) -> str:
        provider(name)  # UnknownProviderError names the field and the configured providers
        return name

    @model_validator(mode="after")
    def _local_names_are_folder_names(self) -> FineTuneRequest:
        # model, adapter and version name the adapter's folder under LLMRL_HOME/adapters
        if self.backend == "local":
            for field in ("model", "adapter", "version"):
                if not is_safe_name(getattr(self, field)):
                    raise ValueError(
                        f"{field}: expected letters, digits, '_', '.', '-' (never '..'), got "
                        f"{getattr(self, field)[:100]!r}"
                    )
        return self

    @model_validator(mode="after")
    def _files_exist(self) -> FineTuneRequest:
        missing = [path for path in self.data if not _is_file(path)]
        if missing:
            raise ValueError(f"data: no such file(s): {', '.join(missing)}")
        if self.backend == "openai" and len(self.data) != 1:
            raise ValueError("data: the openai backend takes exactly one training file")
        return self


def _is_file(path: str) -> bool:
    """Path.is_file, with a name the OS refuses (too long) counted as missing, not raised."""
    try:
        return Path(path).is_file()
    except OSError:
        return False


class BackgroundJobs:
    """Background jobs of one kind. `run(request, report)` does the work; `report(n)` adds n to
    the job's `progress` (e.g. training steps). Default: fine-tuning (`run_finetune`).

    `cancel(job_id)`: a queued job never starts; a running one stops at its next `report`
    (every training loop reports per step or update), with status "cancelled", and one that
    has not stopped `cancel_grace_s` later is killed (its process: `isolated`, the default;
    `run` and the requests must then pickle). What it saved before (adapter versions,
    checkpoints) stays."""

    def __init__(
        self,
        jobs_dir: str | Path,
        run: Callable[[Any, Callable[[int], None]], dict[str, Any]] | None = None,
        id_prefix: str = "ft",
        cancel_grace_s: float = 5.0,
        isolated: bool = True,
        runner: Callable[[Any], Callable[..., dict[str, Any]]] | None = None,
        restore: Callable[[Any], BaseModel] | None = None,
        max_restarts: int = MAX_RESTARTS,
    ) -> None:
        self.run_fn = run or run_finetune
        # the request of a recorded job, checked again (None: an unfinished job cannot restart)
        self.restore = restore or (FineTuneRequest.model_validate if run is None else None)
        self.max_restarts = max_restarts
        # what an isolated job's child runs for a request (default: `run`); the parent resolves
        # it so that the child imports only that function's module
        self.runner = runner or (lambda _request: self.run_fn)
        self.id_prefix = id_prefix
        self.cancel_grace_s = cancel_grace_s
        self.isolated = isolated
        self._closing = threading.Event()
        self.jobs_dir = Path(jobs_dir)
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        self._jobs: dict[str, dict[str, Any]] = {}
        self._saved_at: dict[str, float] = {}  # job id -> when its record was last written
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="finetune")
        unfinished = []
        for path in sorted(self.jobs_dir.glob("*.json")):  # jobs of an earlier process
            try:
                job = json.loads(path.read_text())
                if not isinstance(job, dict) or not {"job_id", "status"} <= job.keys():
                    raise ValueError("no job_id and status")
            except ValueError as exc:  # kept on disk, never fatal
                log.warning("skipping %s: not a job record (%s)", path, exc)
                continue
            if job["status"] in ("queued", "running"):
                unfinished.append(job)
            self._jobs[job["job_id"]] = job
        for job in sorted(unfinished, key=lambda job: job.get("created") or 0):
            self._restart(job)

    def submit(self, request: BaseModel) -> dict[str, Any]:
        job_id = f"{self.id_prefix}-{uuid.uuid4().hex[:12]}"
        job = {
            "job_id": job_id,
            "status": "queued",
            "request": request.model_dump(),
            "created": time.time(),
            "result": None,
            "error": None,
            "progress": 0,
        }
        self._update(job)
        self._pool.submit(self._run, job_id, request)
        return dict(job)

    def get(self, job_id: str) -> dict[str, Any] | None:
        with self._lock:
            job = self._jobs.get(job_id)
            return dict(job) if job else None

    def list(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(job) for job in self._jobs.values()]

    def cancel(self, job_id: str) -> dict[str, Any] | None:
        """Ask job `job_id` to stop (None: no such job). A finished job is left as it ended."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                return None
            if job["status"] in ("queued", "running"):
                job["cancel_requested"] = True  # read by the job's next report
            return dict(job)

    def close(self) -> None:
        """Start no more jobs; a running job's process is killed. Both it and the queued jobs
        stay unfinished on disk: the next service on this `jobs_dir` runs them again."""
        self._closing.set()
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- restarts ----------------------------------------------------------------------------
    def _restart(self, job: dict[str, Any]) -> None:
        """Queue again a job an earlier service left unfinished, or end it saying why not."""
        restarts = list(job.get("restarts") or [])
        why = None
        if job.get("cancel_requested"):
            job.update(status="cancelled", error="cancelled; the service stopped before it ended")
        elif self.restore is None:
            why = "jobs of this kind are not restarted"
        elif len(restarts) >= self.max_restarts:
            why = f"it was restarted {len(restarts)} times already (max_restarts)"
        if why is not None:
            job.update(status="failed", error=f"interrupted: the service stopped; {why}")
        if job["status"] in ("cancelled", "failed"):
            job["finished"] = time.time()
            self._update(job)
            return
        restarts.append(
            {"at": time.time(), "progress": int(job.get("progress") or 0), "was": job["status"]}
        )
        job.update(status="queued", restarts=restarts)
        log.warning("restarting job %s (restart %d)", job["job_id"], len(restarts))
        self._update(job)
        self._pool.submit(self._run_restored, job["job_id"])

    def _run_restored(self, job_id: str) -> None:
        with self._lock:
            job = self._jobs[job_id]
        assert self.restore is not None
        try:
            request = self.restore(job["request"])
        except Exception as exc:  # its kind gone, a path no longer allowed...
            job.update(
                status="failed",
                error="interrupted: the service stopped, and its request no longer passes: "
                f"{type(exc).__name__}: {exc}",
                finished=time.time(),
            )
            self._update(job)
            return
        self._run(job_id, request)

    # -- the worker --------------------------------------------------------------------------
    def _update(self, job: dict[str, Any]) -> None:
        with self._lock:
            self._jobs[job["job_id"]] = job
            snapshot = json.dumps(job, indent=2, default=str)
            self._saved_at[job["job_id"]] = time.monotonic()
        path = self.jobs_dir / f"{job['job_id']}.json"
        path.with_suffix(".tmp").write_text(snapshot + "\n")
        path.with_suffix(".tmp").replace(path)

    def _run(self, job_id: str, request: BaseModel) -> None:
        with self._lock:
            job = self._jobs[job_id]
            stopped_before_start = bool(job.get("cancel_requested"))
        if stopped_before_start:
            job.update(status="cancelled", error="cancelled before it started")
            job["finished"] = time.time()
            self._update(job)
            return
        job.update(status="running", started=time.time())
        self._update(job)

        def add_progress(n: int) -> None:
            with self._lock:
                job["progress"] = job.get("progress", 0) + n  # read by get()
                due = time.monotonic() - self._saved_at.get(job_id, 0.0) >= PROGRESS_SAVE_S
            if due:  # what a restart goes on from
                self._update(job)

        def report(n: int) -> None:
            add_progress(n)
            with self._lock:
                if job.get("cancel_requested"):
                    raise JobCancelled(f"job {job_id} was cancelled")

        if self.isolated:
            try:
                outcome = run_in_child(
                    self.runner(request),
                    request,
                    add_progress,
                    lambda: bool(job.get("cancel_requested")),  # set by cancel()
                    self.cancel_grace_s,
                    self._closing.is_set,
                )
            except Exception as exc:  # no child started (a kind that cannot load, no pickle)
                outcome = Outcome("failed", error=f"{type(exc).__name__}: {exc}")
            log.info("job %s %s at progress %s", job_id, outcome.status, job.get("progress"))
            if outcome.status == "interrupted":  # the service stops: the next one restarts it
                job.update(status="running")
                self._update(job)
                return
            job.update(status=outcome.status, result=outcome.result, error=outcome.error)
            job["finished"] = time.time()
            self._update(job)
            return
        try:
            result = self.run_fn(request, report)
        except JobCancelled:
            log.info("job %s cancelled at progress %s", job_id, job.get("progress"))
            job.update(status="cancelled", error="cancelled by request")
        except Exception as exc:  # a job's failure is its outcome, never the service's
            log.warning("job %s failed: %s", job_id, exc)
            job.update(status="failed", error=f"{type(exc).__name__}: {exc}")
        else:
            job.update(status="succeeded", result=result)
        job["finished"] = time.time()
        self._update(job)


def run_finetune(
    request: FineTuneRequest, report: Callable[[int], None] | None = None
) -> dict[str, Any]:
    """Run one fine-tuning request to completion; returns what it produced. `report(n)`: n
    more local training steps done (the job's progress)."""
    if request.backend == "openai":
        from llmrl.learner.finetune_openai import make_client, openai_finetune

        job = openai_finetune(
            request.data[0],
            model=request.model,
            client=make_client(**provider(request.provider).model_dump()),
            suffix=request.suffix,
            # the API takes whole epochs; steps are a local notion (the API picks its own)
            epochs=None if request.steps else max(1, round(request.epochs)),
            seed=request.seed,
            poll_interval_s=request.poll_interval_s,
        )
        return {"fine_tuned_model": job.fine_tuned_model, "openai_job": job.to_dict()}
    from llmrl.common.registry import registry
    from llmrl.learner.adapters import adapter_versions, base_model_dir, served_name

    checkpoint = registry.get_algorithm("sft").train(
        list(request.data),
        adapter_versions(request.model, request.adapter),
        version=request.version,
        on_progress=report,
        base_model=str(base_model_dir(request.model)),
        init_adapter=request.init_adapter,
        steps=request.steps,
        epochs=request.epochs,
        batch_size=request.batch_size,
        learning_rate=request.learning_rate,
        lora_r=request.lora_r,
        **({"target_modules": list(request.lora_targets)} if request.lora_targets else {}),
        lora_layers=request.lora_layers,
        max_length=request.max_length,
        bf16=request.bf16,
        gradient_checkpointing=request.gradient_checkpointing,
        seed=request.seed,
    )
    return {
        "model": served_name(request.model, request.adapter, request.version),
        "version": checkpoint.version,
        **checkpoint.result,
    }


def jobs_router(
    jobs: BackgroundJobs,
    request_model: type[BaseModel] = FineTuneRequest,
    noun: str = "fine-tuning job",
    tag: str = "fine-tuning",
) -> Any:
    """REST routes over `jobs`: POST / (a `request_model` body; 202, the job), GET / (all),
    GET /{job_id}. Bodies are validated by `request_model` (422 naming the field)."""
    from fastapi import APIRouter

    router = APIRouter(tags=[tag])

    def start_job(request: Any) -> dict[str, Any]:
        return jobs.submit(request)

    start_job.__annotations__ = {"request": request_model, "return": dict[str, Any]}
    router.post("", status_code=202, summary=f"Start a {noun}")(start_job)
    add_status_routes(router, jobs, noun)
    return router


def add_status_routes(router: Any, jobs: BackgroundJobs, noun: str) -> None:
    """GET / (every job), GET /{job_id} (one job; 404 naming `job_id`) and POST
    /{job_id}/cancel (stop it at its next progress report; the job as it stands) on `router`."""
    from fastapi import HTTPException

    @router.get("", summary=f"Every {noun}")
    def list_jobs() -> list[dict[str, Any]]:
        return jobs.list()

    def found(job: dict[str, Any] | None, job_id: str) -> dict[str, Any]:
        if job is None:
            raise HTTPException(404, f"job_id: no {noun} {job_id!r}")
        return job

    @router.get("/{job_id}", summary=f"One {noun}: status, progress, result or error")
    def get_job(job_id: str) -> dict[str, Any]:
        return found(jobs.get(job_id), job_id)

    @router.post("/{job_id}/cancel", summary=f"Stop a {noun} at its next progress report")
    def cancel_job(job_id: str) -> dict[str, Any]:
        return found(jobs.cancel(job_id), job_id)
