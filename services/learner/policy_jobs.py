"""RL policy training jobs on the learner service (`POST /policy-jobs`).

Recipes train their RL policies here in service mode: the learner trains against its own
configured simulator and gateway and writes the model where the job says (the artifact volume
that the orchestrator and workers share). A job may name those services only as the learner
itself is configured to reach them (it never dials, nor sends its token to, an address a
request chose), and its paths (`model_path`, `tensorboard_dir`) must lie under LLMRL_HOME or a
configured data root: checked here, for every kind. `model_path` (where the job saves models,
pickles that are loaded back) must lie in the artifact store: LLMRL_HOME or
LLMRL_ARTIFACT_ROOTS, never a data root (`llmrl.common.paths.artifact_roots`).
`run_on_learner` is the client side a recipe phase calls (see `llmrl.learner.client`).

Job kinds are registered by recipes (`registry.register_policy_job`, e.g. When2Ask's
"when2ask"); a request names its kind in `kind` and is validated by that kind's request model.
The learner looks kinds up in the registry, so it imports no recipe until a job arrives.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from llmrl.common.registry import registry
from llmrl.learner.client import run_learner_job
from llmrl.learner.jobs import BackgroundJobs, add_status_routes

NOUN = "policy training job"


def policy_jobs(jobs_dir: Any, cancel_grace_s: float = 5.0) -> BackgroundJobs:
    """The learner's policy-training job runner (one job at a time, any registered kind, each
    in its own process: a cancelled job that does not stop is killed)."""
    return BackgroundJobs(
        jobs_dir,
        run=run_policy_job,
        id_prefix="rl",
        cancel_grace_s=cancel_grace_s,
        runner=policy_job_runner,
        restore=parse_policy_job,  # a restarted job's request passes the same checks again
    )


def policy_job_runner(request: Any) -> Callable[[Any, Callable[[int], None]], dict[str, Any]]:
    """A validated request's registered run function."""
    return registry.get_policy_job(request.kind)[1]


def run_policy_job(request: Any, report: Callable[[int], None]) -> dict[str, Any]:
    """Run a validated request with its kind's registered run function."""
    return policy_job_runner(request)(request, report)


class PolicyJobsUnavailable(RuntimeError):
    """The registered policy job kinds could not be loaded (a recipe's package is missing)."""


class PolicyJobError(ValueError):
    """A refused policy job request; `errors` in pydantic's shape (loc, msg, type)."""

    def __init__(self, errors: list[Any]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in errors))


def parse_policy_job(body: Any) -> BaseModel:
    """The request model instance for `body`, chosen by its `kind`; a `PolicyJobError` names
    each bad field (an unknown or missing `kind` lists the known kinds). `PolicyJobsUnavailable`
    when the kinds cannot be loaded: the learner needs no recipe's packages, their jobs may."""
    try:
        kinds = registry.names("policy_job")
    except ImportError as exc:
        raise PolicyJobsUnavailable(f"policy job kinds unavailable: {exc}") from exc
    kind = body.get("kind") if isinstance(body, dict) else None
    if kind not in kinds:
        problem = "missing" if kind is None else f"unknown policy job kind {kind!r}"
        known = ", ".join(kinds) or "(none registered)"
        error = {"loc": ("kind",), "msg": f"{problem}; known kinds: {known}", "type": "value_error"}
        raise PolicyJobError([error])
    request_model, _ = registry.get_policy_job(kind)
    try:
        request = request_model.model_validate(body)
    except ValidationError as exc:
        raise PolicyJobError(exc.errors(include_url=False)) from exc
    errors = _boundary_errors(request)
    if errors:
        raise PolicyJobError(errors)
    return request


SERVICE_FIELDS = ("simulator", "llm_gateway")  # addresses a job may carry
PATH_FIELDS = ("model_path", "tensorboard_dir")  # files a job writes
ARTIFACT_PATH_FIELDS = ("model_path",)  # ...its models among them: in the artifact store only
ARTIFACT_FIELDS = ("init_from",)  # saved checkpoints a job starts from: the project's own only
# a gateway model name, or a local model directory the learner loads: a directory is a path
MODEL_FIELDS = ("model", "base_model")


def _names_a_path(value: Any) -> bool:
    """Whether a model field names a directory rather than a gateway model (whose names
    never hold a separator: llm_gateway/names.py)."""
    if not isinstance(value, str):
        return False
    if "/" in value or "\\" in value or value.startswith(("~", ".")):
        return True
    try:
        return Path(value).is_dir()
    except (OSError, ValueError):  # a name too long or holding a NUL byte is no directory
        return False


def _boundary_errors(request: BaseModel) -> list[dict[str, Any]]:
    """What a request names outside the learner's reach: an address that is not the learner's
    configured service, a path outside its roots (each error names its field)."""
    from llmrl.common import trusted
    from llmrl.common.config import grpc_address
    from llmrl.common.paths import PathOutsideRootsError, artifact_roots, confine

    errors: list[dict[str, Any]] = []
    for field in SERVICE_FIELDS:
        address = getattr(request, field, None)
        if address is not None and address != grpc_address(field):
            message = (
                f"{field} must be null (in-process) or the {field} service this learner is "
                f"configured with (LLMRL_{field.upper()}_ADDRESS on the learner); a job cannot "
                "name another address"
            )
            errors.append({"loc": (field,), "msg": message, "type": "value_error"})
    model_paths = [f for f in MODEL_FIELDS if _names_a_path(getattr(request, f, None))]
    for field in (*PATH_FIELDS, *model_paths):
        path = getattr(request, field, None)
        if path is None:
            continue
        try:
            confine(path, field)
            if field in ARTIFACT_PATH_FIELDS:
                confine(path, field, roots=artifact_roots())
        except PathOutsideRootsError as exc:
            message = str(exc)
            if field in ARTIFACT_PATH_FIELDS and "outside the folders" in message:
                message = (
                    f"{field}: {str(path)[:200]!r} is outside the artifact store: saved models "
                    "are pickles, written and loaded only under LLMRL_HOME (or a folder of "
                    "LLMRL_ARTIFACT_ROOTS), never in a data root"
                )
            errors.append({"loc": (field,), "msg": message, "type": "value_error"})
    for field in ARTIFACT_FIELDS:
        reference = getattr(request, field, None)
        if reference is None:
            continue
        try:
            trusted.resolve_artifact(reference, field)
        except trusted.UntrustedArtifactError as exc:
            errors.append({"loc": (field,), "msg": str(exc), "type": "value_error"})
    return errors


def policy_jobs_router(jobs: BackgroundJobs) -> Any:
    """POST / (202, the job), GET / (all), GET /{job_id} (status, progress, result or error).
    A refused body gets 422 with FastAPI's error shape, each error's `loc` naming the field;
    503 (saying what to install) when the job kinds cannot be loaded."""
    from fastapi import APIRouter, Body, HTTPException
    from fastapi.exceptions import RequestValidationError

    router = APIRouter(tags=["policy training"])

    @router.post("", status_code=202, summary=f"Start a {NOUN} of a registered kind")
    def start_job(
        body: dict[str, Any] = Body(
            ..., description="`kind` (a registered policy job kind) and that kind's fields"
        ),
    ) -> dict[str, Any]:
        try:
            request = parse_policy_job(body)
        except PolicyJobError as exc:
            raise RequestValidationError(
                [{**error, "loc": ("body", *error["loc"])} for error in exc.errors]
            ) from exc
        except PolicyJobsUnavailable as exc:
            raise HTTPException(503, str(exc)) from exc
        return jobs.submit(request)

    add_status_routes(router, jobs, NOUN)
    return router


def run_on_learner(
    job: BaseModel,
    on_progress: Callable[[int], None] | None = None,
    url: str | None = None,
    timeout_s: float | None = None,
) -> dict[str, Any]:
    """Run `job` (a registered kind's request) on the learner service and wait; returns its
    result."""
    return run_learner_job("/policy-jobs", job.model_dump(), on_progress, url, timeout_s)
