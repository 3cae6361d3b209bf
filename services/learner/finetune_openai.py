"""Fine-tuning through the OpenAI API (or any server speaking its files + fine_tuning protocol).

The flow of the official client: upload the chat JSONL (`files.create`, purpose
"fine-tune"), create the job (`fine_tuning.jobs.create`), poll it
(`fine_tuning.jobs.retrieve`) until it succeeds, fails or is cancelled, and record the
resulting model id (`ft:<base>:...`), which the gateway can then serve as a remote model.
The file is checked locally first (`chat_jsonl_errors`): a malformed file never costs an
upload. The API key is read from an environment variable and never appears in errors.

    job = openai_finetune("round-1.jsonl", model="gpt-4o-mini-2024-07-18", suffix="personal")
    job.fine_tuned_model   # "ft:gpt-4o-mini-2024-07-18:org:personal:abc123"
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

TERMINAL = ("succeeded", "failed", "cancelled")


class FineTuneError(RuntimeError):
    """A fine-tuning job that did not succeed (or a file that cannot be used)."""


@dataclass
class FineTuneJob:
    job_id: str
    file_id: str
    model: str
    status: str
    fine_tuned_model: str | None = None
    error: str | None = None
    trained_tokens: int | None = None
    statuses: list[str] = field(default_factory=list)  # every status seen while polling
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def make_client(
    base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY", timeout_s: float = 60.0
) -> Any:
    """The official client for `base_url` (None: api.openai.com), key from `api_key_env`."""
    from openai import OpenAI

    api_key = os.environ.get(api_key_env)
    if not api_key:
        raise FineTuneError(f"the environment variable {api_key_env} holding the API key is unset")
    return OpenAI(base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=2)


def openai_finetune(
    data: str | Path,
    *,
    model: str,
    client: Any = None,
    base_url: str | None = None,
    api_key_env: str = "OPENAI_API_KEY",
    suffix: str | None = None,
    epochs: int | None = None,
    seed: int | None = None,
    poll_interval_s: float = 10.0,
    timeout_s: float = 6 * 3600,
    on_status: Callable[[FineTuneJob], None] | None = None,
) -> FineTuneJob:
    """Upload `data`, fine-tune `model` on it, wait for the job; FineTuneError unless it
    succeeds. `on_status` is called whenever the job's status changes (e.g. to persist it)."""
    from llmrl.common.chat_format import chat_jsonl_errors

    errors = chat_jsonl_errors(data)
    if errors:
        shown = "; ".join(errors[:5]) + (
            f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
        )
        raise FineTuneError(f"{data} is not valid chat fine-tuning data: {shown}")
    client = client or make_client(base_url, api_key_env)
    started = time.monotonic()
    with open(data, "rb") as handle:
        uploaded = client.files.create(file=(Path(data).name, handle), purpose="fine-tune")
    options: dict[str, Any] = {}
    if suffix:
        options["suffix"] = suffix
    if seed is not None:
        options["seed"] = seed
    if epochs is not None:
        options["method"] = {
            "type": "supervised",
            "supervised": {"hyperparameters": {"n_epochs": epochs}},
        }
    created = client.fine_tuning.jobs.create(training_file=uploaded.id, model=model, **options)
    job = FineTuneJob(job_id=created.id, file_id=uploaded.id, model=model, status=created.status)
    job.statuses.append(created.status)
    if on_status:
        on_status(job)
    current = created
    while current.status not in TERMINAL:
        if time.monotonic() - started > timeout_s:
            job.seconds = time.monotonic() - started
            raise FineTuneError(
                f"fine-tuning job {job.job_id} still {current.status} after {timeout_s:g} s"
            )
        time.sleep(poll_interval_s)
        current = client.fine_tuning.jobs.retrieve(job.job_id)
        if current.status != job.status:
            job.status = current.status
            job.statuses.append(current.status)
            if on_status:
                on_status(job)
    job.seconds = time.monotonic() - started
    job.fine_tuned_model = current.fine_tuned_model
    job.trained_tokens = getattr(current, "trained_tokens", None)
    if current.status != "succeeded":
        error = getattr(current, "error", None)
        job.error = getattr(error, "message", None) or (str(error) if error else None)
        raise FineTuneError(
            f"fine-tuning job {job.job_id} {current.status}: {job.error or 'no reason given'}"
        )
    if not job.fine_tuned_model:
        raise FineTuneError(f"fine-tuning job {job.job_id} succeeded without a model id")
    return job


def write_job(job: FineTuneJob, path: str | Path) -> None:
    """Record a job (its resulting model id included) as JSON."""
    Path(path).write_text(json.dumps(job.to_dict(), indent=2) + "\n")
