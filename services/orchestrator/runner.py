"""Drives one run through its recipe's phases, skipping those the store says are complete.

Used by the embedded runner (`llmrl run`) and by the orchestrator service (one thread per run).
A run interrupted by a shutdown keeps its "running" status and its completed phases, so
calling `execute_run` again on it (after a restart) resumes from the first unfinished phase.
A run that fails or is cancelled ends its phase under way the same way (its status "failed" or
"cancelled"), so no phase of an ended run reads "running".
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from pathlib import Path

from llmrl.common import store as states
from llmrl.common.logs import log_event
from llmrl.common.store import RunRow, RunStore
from llmrl.orchestrator import metrics
from llmrl.orchestrator.executors import RunInterrupted
from llmrl.recipes.config import recipe_class, validate_config
from llmrl.recipes.context import EpisodeExecutor, RunContext
from llmrl.recipes.progress import ProgressReporter, RunCancelled

log = logging.getLogger("llmrl.orchestrator")


def execute_run(
    store: RunStore,
    run_id: str,
    executor: EpisodeExecutor,
    *,
    simulator: str | None = None,
    llm_gateway: str | None = None,
    learner: str | None = None,
    progress: ProgressReporter | None = None,
    interrupted: Callable[[], bool] = lambda: False,
) -> RunRow:
    """Run (or resume) `run_id` until it completes, fails, is cancelled or interrupted.

    `interrupted()` true means the process is shutting down: the run stops where it is and
    stays unfinished (status "running"), to be resumed by the next `execute_run`.
    """
    run = store.get_run(run_id)
    if run is None:
        raise KeyError(f"unknown run id {run_id!r}")
    config = validate_config(run.recipe, run.config)
    recipe = recipe_class(run.recipe)(config)

    def cancelled() -> bool:
        current = store.get_run(run_id, with_phases=False)
        return bool(current and current.cancel_requested)

    ctx = RunContext(
        run_id=run_id,
        recipe=run.recipe,
        config=config,
        out_dir=Path(run.out_dir),
        store=store,
        executor=executor,
        simulator=simulator,
        llm_gateway=llm_gateway,
        learner=learner,
        progress=progress,
        should_stop=cancelled,
    )
    store.update_run(run_id, status=states.RUNNING, error=None)
    log_event(log, "run started", run_id=run_id, recipe=run.recipe)
    ctx.start_tracking()  # the config and provenance to MLflow / W&B when selected
    metrics.RUNS_ACTIVE.inc()
    final: str | None = None
    current: str | None = None  # the phase under way
    try:
        for phase in recipe.phases():
            if store.phase_outputs(run_id, phase.name) is not None:
                continue  # completed before a restart
            if interrupted():
                raise RunInterrupted(run_id)
            if cancelled():
                raise RunCancelled(run_id)
            store.start_phase(run_id, phase.name)
            current = phase.name
            log_event(log, "phase started", run_id=run_id, phase=phase.name)
            outputs = phase.run(ctx) or {}
            store.complete_phase(run_id, phase.name, outputs)
            current = None
        final = states.COMPLETED
        store.update_run(run_id, status=final, current_phase=None)
    except RunInterrupted:
        log_event(log, "run interrupted; it resumes at restart", run_id=run_id)
    except RunCancelled:
        final = states.CANCELLED
        if current is not None:
            store.end_phase(run_id, current, final)
        store.update_run(run_id, status=final)
    except Exception as exc:  # the run fails, the orchestrator keeps serving
        if interrupted():  # a shutdown that surfaced as another error: resume later
            log_event(log, "run interrupted; it resumes at restart", run_id=run_id)
        else:
            final = states.FAILED
            if current is not None:
                store.end_phase(run_id, current, final)
            store.update_run(run_id, status=final, error=f"{type(exc).__name__}: {exc}")
            log_event(
                log,
                "run failed",
                logging.ERROR,
                run_id=run_id,
                error=str(exc),
                trace=traceback.format_exc(limit=8),
            )
    finally:
        metrics.RUNS_ACTIVE.dec()
        ctx.close(final)  # the trackers' runs end with the run's status
    if final is not None:
        metrics.RUNS.labels(recipe=run.recipe, status=final).inc()
        log_event(log, "run ended", run_id=run_id, status=final)
    return store.get_run(run_id)
