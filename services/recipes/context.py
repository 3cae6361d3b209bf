"""What a phase gets: the run context (`RunContext`), which hides embedded and service mode:
episodes played in-process or on rollout workers, training here or on the learner, the
gateway, TensorBoard, artifacts, and the run's trackers."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from llmrl.agents.episode import EpisodeJob
from llmrl.common.episodes import EpisodeRecord, actions_array, write_jsonl
from llmrl.common.numerics import numerics_provenance
from llmrl.common.provenance import machine_provenance
from llmrl.common.store import RunStore
from llmrl.recipes.config import RecipeConfig
from llmrl.recipes.progress import (
    NullProgress,
    ProgressReporter,
    StoppableProgress,
    tracked,
)
from llmrl.recipes.results import Results, finite_or_none
from llmrl.recipes.tracking import (
    RunTrackers,
    result_metrics,
    usage_metrics,
)

log = logging.getLogger("llmrl.recipes")


class EpisodeExecutor(Protocol):
    """Plays episode jobs somewhere and stores their records; the orchestrator, which runs
    recipes, passes one that plays them in-process or one that queues them for rollout workers."""

    def run_jobs(
        self,
        jobs: Sequence[EpisodeJob],
        on_record: Callable[[EpisodeRecord], None],
        should_stop: Callable[[], bool],
        parallel: int = 1,
    ) -> None: ...


class RunContext:
    """What a phase gets: config, out dir, store, episodes, world/LLM factories, outputs."""

    def __init__(
        self,
        *,
        run_id: str,
        recipe: str,
        config: RecipeConfig,
        out_dir: Path,
        store: RunStore,
        executor: EpisodeExecutor,
        simulator: str | None = None,
        llm_gateway: str | None = None,
        learner: str | None = None,
        progress: ProgressReporter | None = None,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> None:
        self.run_id = run_id
        self.recipe = recipe
        self.config = config
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.store = store
        self.executor = executor
        self.simulator = simulator  # None: in-process worlds (embedded mode)
        self.llm_gateway = llm_gateway  # None: in-process gateway (embedded mode)
        self.learner = learner  # the learner service's URL; None: training runs here
        self.progress = StoppableProgress(progress or NullProgress(), should_stop)
        self.should_stop = should_stop
        self._llm: Any = None
        self._trackers: RunTrackers | None = None
        self._tb_step = 0
        # read when the first run of the process starts, so the commit is the code that runs
        # even if the checkout moves on before the results are written
        self._machine = machine_provenance()

    # -- episodes ---------------------------------------------------------------------------
    def episode_job(
        self,
        phase: str,
        index: int,
        *,
        env: str,
        seed: int,
        policy: dict[str, Any],
        env_kwargs: dict[str, Any] | None = None,
        max_steps: int | None = None,
    ) -> EpisodeJob:
        return EpisodeJob(
            run_id=self.run_id,
            episode_id=f"{phase}/{index}",
            env=env,
            seed=seed,
            policy=policy,
            env_kwargs=dict(env_kwargs or {}),
            max_steps=max_steps,
        )

    def run_episodes(
        self, phase: str, jobs: Sequence[EpisodeJob], parallel: int = 1
    ) -> list[EpisodeRecord]:
        """Play the jobs not stored yet, wait for all, and return every record in index order.

        `parallel`: episodes played at once in embedded mode (threads, each with its own
        world); in service mode the number of rollout workers decides.

        Also appends them to `<out>/episodes/<phase>.jsonl` and logs CleanRL-style TensorBoard
        scalars (`charts/episodic_return`, `charts/episodic_length`, `charts/success`).
        """
        ids = [job.episode_id for job in jobs]
        if len(set(ids)) != len(ids):
            raise ValueError(f"phase {phase!r}: episode ids are not unique")
        stored = self.store.stored_episode_ids(self.run_id, ids)
        missing = [job for job in jobs if job.episode_id not in stored]
        self.progress.start(phase, len(jobs), done=len(stored))

        def on_record(record: EpisodeRecord) -> None:
            self.progress.count(1)  # the executor stops on should_stop itself
            self._log_episode(record)

        try:
            if missing:
                self.executor.run_jobs(missing, on_record, self.should_stop, parallel)
        finally:
            self.progress.finish()
        records = sorted(
            self.store.episodes(self.run_id, episode_ids=ids),
            key=lambda r: int(r.episode_id.rpartition("/")[2]),
        )
        if len(records) != len(ids):
            raise RuntimeError(f"phase {phase!r}: {len(records)} of {len(ids)} episodes stored")
        self._export_episodes(phase, records)
        return records

    def _export_episodes(self, phase: str, records: list[EpisodeRecord]) -> None:
        path = self.out_dir / "episodes" / f"{phase.replace('/', '-')}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)  # rewritten whole: the store is the source of truth
        write_jsonl(path, records)
        self.add_artifact(str(path.relative_to(self.out_dir)), path, kind="episodes")
        arrays = path.with_suffix(".npz")
        save_episode_arrays(arrays, records)
        self.add_artifact(str(arrays.relative_to(self.out_dir)), arrays, kind="episodes")

    def _log_episode(self, record: EpisodeRecord) -> None:
        writer = self.tensorboard
        if writer is None:
            return
        self._tb_step += 1
        writer.add_scalar("charts/episodic_return", record.episode_return, self._tb_step)
        writer.add_scalar("charts/episodic_length", record.length, self._tb_step)
        writer.add_scalar("charts/success", float(record.success), self._tb_step)
        if record.llm_calls:
            writer.add_scalar("charts/llm_calls", len(record.llm_calls), self._tb_step)

    # -- training -----------------------------------------------------------------------------
    def train(
        self,
        job: Any,
        train_here: Callable[..., dict[str, Any]],
        phase: str,
        total: int,
        *,
        unit: str = "steps",
        endpoint: str = "/policy-jobs",
        threads: int | None = None,
    ) -> dict[str, Any]:
        """Run a training job with the phase's progress bar: in this process
        (`train_here(job, on_progress=...)`) when no learner service is configured (embedded
        mode), else on the learner (`endpoint`: "/policy-jobs" for a registered policy job's
        request, "/jobs" for fine-tuning), which runs the same function. `threads`: torch's
        thread count for in-process training (the learner keeps its own setting: a job that
        must train on a fixed count carries it as `torch_threads`, `llmrl.common.threads`)."""
        from contextlib import nullcontext

        from llmrl.common.threads import torch_threads

        with tracked(self.progress, phase, total, unit=unit):
            if self.learner is None:
                with torch_threads(threads) if threads else nullcontext():
                    return train_here(job, on_progress=self.progress.advance)
            from llmrl.learner.client import run_learner_job

            return run_learner_job(
                endpoint, job.model_dump(), on_progress=self.progress.advance, url=self.learner
            )

    @contextmanager
    def training_here(self) -> Iterator[None]:
        """Within it, `train` runs every job in this process even where a learner service is
        configured: for a method whose comparison is this process's CPU time (GRPO against
        GLAM), or whose job no learner kind runs. Episodes still go where they went."""
        learner, self.learner = self.learner, None
        try:
            yield
        finally:
            self.learner = learner

    # -- services -----------------------------------------------------------------------------
    def make_world(self, env: str, num_envs: int = 1, seed: int | None = None, **env_kwargs: Any):
        """A simulator world (in-process in embedded mode, over gRPC in service mode)."""
        from llmrl.simulator.client import make_world

        return make_world(env, num_envs=num_envs, seed=seed, address=self.simulator, **env_kwargs)

    @property
    def llm(self) -> Any:
        """The LLM gateway client (contract 3), connected on first use."""
        if self._llm is None:
            from llmrl.llm_gateway.client import connect

            self._llm = connect(self.llm_gateway)
        return self._llm

    @property
    def trackers(self) -> RunTrackers:
        """The run's writer to the trackers its `tracking` setting selects (created on first
        use): TensorBoard on `<out>/tb` (when tensorboard is installed), MLflow, W&B."""
        if self._trackers is None:
            config = self.config
            self._trackers = RunTrackers(
                getattr(config, "tracking", ["tensorboard"]),
                run_id=self.run_id,
                recipe=self.recipe,
                out_dir=self.out_dir,
                tensorboard=self._tensorboard_writer,
                mlflow_tracking_uri=getattr(config, "mlflow_tracking_uri", None),
                mlflow_experiment=getattr(config, "mlflow_experiment", None),
                wandb_project=getattr(config, "wandb_project", "llmrl"),
                wandb_mode=getattr(config, "wandb_mode", None),
            )
        return self._trackers

    @property
    def tensorboard(self) -> Any:
        """Where scalars go: `add_scalar(tag, value, step)`, `flush()` as on TensorBoard's
        SummaryWriter, fanned out to every tracker selected (`RunTrackers`); None when none is
        (`tracking: none`, or only TensorBoard and it is not installed)."""
        return self.trackers or None

    def _tensorboard_writer(self) -> Any:
        """A TensorBoard SummaryWriter on `<out>/tb`, or None when tensorboard is missing."""
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # tensorboard comes with the [learn] extra
            return None
        writer = SummaryWriter(str(self.out_dir / "tb"))
        link_tensorboard(self.run_id, self.out_dir / "tb")
        return writer

    def start_tracking(self) -> None:
        """The run's config (flattened, secrets left out) and provenance to each tracker."""
        self.trackers.start(self.config.model_dump(mode="json"), self.provenance())

    def provenance(self) -> dict[str, Any]:
        """Where the run is measured: the machine, the mode, the numerics."""
        embedded = self.simulator is None and self.llm_gateway is None and self.learner is None
        return {
            **self._machine,
            "mode": "embedded" if embedded else "services",
            "numerics": numerics_provenance(),
        }

    def llm_usage(self) -> dict[str, Any] | None:
        """The gateway ledger's totals for this run; None when no LLM client was used here."""
        import sys

        if self._llm is not None:
            return self._llm.usage(self.run_id)
        if self.llm_gateway is None and "llmrl.llm_gateway.client" in sys.modules:
            # embedded: the episodes' planners share this process's gateway
            return sys.modules["llmrl.llm_gateway.client"].connect().usage(self.run_id)
        if self.llm_gateway is not None:
            from llmrl.llm_gateway.client import connect

            client = connect(self.llm_gateway, timeout_s=10.0)
            try:
                return client.usage(self.run_id)
            finally:
                client.close()
        return None

    # -- outputs ------------------------------------------------------------------------------
    def phase_outputs(self, phase: str) -> dict[str, Any]:
        outputs = self.store.phase_outputs(self.run_id, phase)
        if outputs is None:
            raise KeyError(f"phase {phase!r} of run {self.run_id} has not completed")
        return outputs

    def add_artifact(self, name: str, path: str | Path, kind: str = "file") -> None:
        self.store.add_artifact(self.run_id, name, Path(path), kind)

    def set_summary(self, **metrics: Any) -> None:
        """Summary figures shown by GET /runs/{id} (merged into what is there)."""
        run = self.store.get_run(self.run_id, with_phases=False)
        summary = dict(run.summary if run else {})
        summary.update(metrics)
        self.store.update_run(self.run_id, summary=summary)

    def plot_path(self, name: str) -> Path:
        return self.out_dir / name

    def write_results(self, results: Results) -> None:
        """results.json (the table as data, with where it was measured) and results.md, both
        registered as artifacts."""
        if not results.provenance:
            results.provenance = self.provenance()
        json_path = self.out_dir / "results.json"
        data = finite_or_none(results.to_dict())  # strict JSON: a missing cell is null, not NaN
        json_path.write_text(json.dumps(data, indent=2, default=float, allow_nan=False) + "\n")
        md_path = self.out_dir / "results.md"
        md_path.write_text(results.to_markdown())
        self.add_artifact("results.json", json_path, kind="results")
        self.add_artifact("results.md", md_path, kind="results")
        for plot in results.plots:
            self.add_artifact(plot, self.out_dir / plot, kind="plot")
        if self.trackers.trackers:  # the table's numbers, the files and the plots
            self.trackers.log_metrics(result_metrics(results.rows))
            self.trackers.log_artifact(json_path, "results")
            self.trackers.log_artifact(md_path, "results")
            for plot in results.plots:
                if (self.out_dir / plot).is_file():
                    self.trackers.log_artifact(self.out_dir / plot, "plots")

    def close(self, status: str | None = None) -> None:
        """End the run's trackers (`status`: the run's, None when it was interrupted, with the
        LLM ledger's totals first) and its LLM client."""
        if self._trackers is not None:
            if self._trackers.trackers:
                try:
                    usage = self.llm_usage()
                except Exception as exc:  # the totals are a report: never fail the run's end
                    log.warning("cannot read the run's LLM totals for tracking: %s", exc)
                else:
                    self._trackers.log_metrics(usage_metrics(usage))
            self._trackers.close(status)
        if self._llm is not None and hasattr(self._llm, "close"):
            self._llm.close()


def tensorboard_root() -> Path:
    """One TensorBoard log root for every run: `$LLMRL_HOME/tensorboard/<run_id>`."""
    from llmrl.common.config import home_dir

    return home_dir() / "tensorboard"


def link_tensorboard(run_id: str, tb_dir: Path) -> None:
    """Make `<root>/<run_id>` point at the run's own `<out>/tb` (the newest run of an id wins)."""
    link = tensorboard_root() / run_id
    try:
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() and Path(os.readlink(link)) == tb_dir.resolve():
            return
        if link.is_symlink():
            link.unlink()
        link.symlink_to(tb_dir.resolve(), target_is_directory=True)
    except OSError as exc:  # read-only home, no symlinks: the run's own tb dir still works
        log.warning("cannot link %s into the TensorBoard root: %s", tb_dir, exc)


def save_episode_arrays(path: Path, records: list[EpisodeRecord]) -> None:
    """The episodes as numpy arrays (one .npz): per-episode figures, and per-step rewards,
    actions (`actions_array`: int64 with -1 for none, or float rows with NaN for none) and
    skills concatenated, episode i's steps at offsets[i]:offsets[i+1]."""
    steps = [step for record in records for step in record.steps]
    offsets = np.cumsum([0] + [len(record.steps) for record in records])
    np.savez_compressed(
        path,
        episode_ids=np.array([r.episode_id for r in records], dtype=str),
        seeds=np.array([r.seed for r in records], dtype=np.int64),
        returns=np.array([r.episode_return for r in records], dtype=np.float32),
        lengths=np.array([r.length for r in records], dtype=np.int64),
        success=np.array([r.success for r in records], dtype=bool),
        llm_calls=np.array([len(r.llm_calls) for r in records], dtype=np.int64),
        offsets=offsets.astype(np.int64),
        rewards=np.array([step.reward for step in steps], dtype=np.float32),
        actions=actions_array(steps),
        skills=np.array([s.skill or "" for s in steps], dtype=str),
    )
