"""The recipe framework: what a recipe is, what a phase gets, and how results are written.

A recipe is registered by name and has a pydantic config model and an ordered list of
phases:

    class MyConfig(RecipeConfig):
        env: str = Field("SimpleDoorKey", description="registered environment id")
        episodes: int = Field(20, ge=1, description="episodes per evaluation")

    @registry.register_recipe("my-recipe")
    class MyRecipe(Recipe):
        Config = MyConfig

        def phases(self) -> list[Phase]:
            return [Phase("collect", self.collect), Phase("report", self.report)]

        def collect(self, ctx: RunContext) -> dict:
            records = ctx.run_episodes("collect", [ctx.episode_job("collect", i, ...) ...])
            return {"episodes": len(records)}        # the phase's outputs, persisted

Phases run in order (collect → annotate → train → evaluate, repeated per self-training round
with names like "collect/1"); each is resumable. A completed phase is never run again: its
outputs are kept in the run store (`ctx.phase_outputs(name)` reads them in later phases).
Episode jobs are named `<phase>/<index>`, so a phase interrupted half-way and run again only
plays the episodes that are not stored yet. Phases should therefore be deterministic given
the config (seeds derived from `config.seed` and the episode index).

The run context hides the mode: in embedded mode episodes are played in-process, in service
mode they go through the Redis queue to rollout workers; either way `run_episodes` returns
the stored records, in index order. Training likewise: `ctx.train(job, train_here, ...)` runs
a job in this process, or on the learner service where one is configured.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Protocol

import numpy as np
from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, ValidationError

from llmrl.agents.episode import EpisodeJob
from llmrl.common.bounds import BoundedModel
from llmrl.common.episodes import EpisodeRecord, actions_array, write_jsonl
from llmrl.common.memory_fit import MemoryEstimate, OverMemoryError, check_fits
from llmrl.common.model_fields import owner_model
from llmrl.common.numerics import numerics_provenance
from llmrl.common.provenance import describe, machine_provenance
from llmrl.common.registry import registry
from llmrl.common.store import RunStore
from llmrl.recipes.progress import (
    NullProgress,
    ProgressReporter,
    StoppableProgress,
    tracked,
)
from llmrl.recipes.tracking import (
    TRACKERS,
    RunTrackers,
    TrackerName,
    WandbMode,
    checked_trackers,
    checked_tracking_uri,
    result_metrics,
    tracker_list,
    usage_metrics,
)

if TYPE_CHECKING:
    from llmrl.recipes.targets import ConfigResults, Verdict

log = logging.getLogger("llmrl.recipes")


class RecipeConfig(BoundedModel):
    """Base of every recipe's config: unknown keys are errors, field descriptions are docs,
    numbers are finite and int64 (seeds take `llmrl.common.bounds.Seed`)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    # where the run reports (`llmrl.recipes.tracking`): every recipe has these
    tracking: Annotated[
        list[TrackerName], BeforeValidator(tracker_list), AfterValidator(checked_trackers)
    ] = Field(
        default_factory=lambda: ["tensorboard"],
        max_length=len(TRACKERS),
        description="where the run's scalars, settings, results and plots go, like TRL's "
        f"report_to: any of {', '.join(TRACKERS)} (a list, or `tracking=mlflow,wandb` on the "
        "command line), or none; mlflow and wandb need `pip install 'llmrl[tracking]'`",
    )
    mlflow_tracking_uri: Annotated[str | None, AfterValidator(checked_tracking_uri)] = Field(
        None,
        max_length=2048,
        description="MLflow tracking server or store (http://host:5000, sqlite:///path.db); "
        "None: $MLFLOW_TRACKING_URI, else a SQLite store in the run's out dir (mlflow.db). A "
        "server must be one the operator allows ($LLMRL_TRACKING_SERVERS or "
        "$MLFLOW_TRACKING_URI), a store must lie under the folders the service may write",
    )
    mlflow_experiment: str | None = Field(
        None,
        min_length=1,
        max_length=500,
        description="MLflow experiment (None: the recipe's name)",
    )
    wandb_project: str = Field(
        "llmrl", min_length=1, max_length=128, description="Weights & Biases project"
    )
    wandb_mode: WandbMode | None = Field(
        None,
        description="Weights & Biases mode: offline (files in <out>/wandb, `wandb sync` uploads "
        "them), online or disabled; None: $WANDB_MODE, else offline",
    )

    @classmethod
    def unknown_key_message(cls, key: str) -> str:
        """What to say of `key`, which the config does not have (a config whose keys moved
        says where to)."""
        return "unknown config key"

    def memory_estimate(self) -> MemoryEstimate | None:
        """The run's estimated peak memory where it could exceed a machine's (checked at
        submission: `llmrl.common.memory_fit`); None: too small to matter, or not known."""
        return None


# a keyword argument that names a file or folder: data_dir, scene_file, *_path, cache_root...
PATH_KWARG = re.compile(r"(^|_)(dir|dirs|path|paths|file|files|folder|root|roots)$")


def confined_kwargs(value: dict[str, Any], field: str) -> dict[str, Any]:
    """`value` (an env's or a planner's keyword arguments) when each path among them (the
    str, or list of str, of a key that names a file or folder: `PATH_KWARG`) lies under the
    folders a service may use (`llmrl.common.paths.confine`); else the ValueError naming
    `<field>.<key>` and the path as given."""
    from llmrl.common.paths import confine

    for key, item in value.items():
        if not isinstance(key, str) or not PATH_KWARG.search(key):
            continue
        for path in [item] if isinstance(item, str) else item if isinstance(item, list) else []:
            if isinstance(path, str) and path:
                confine(path, f"{field}.{key}")
    return value


def check_planner_model(kwargs: dict[str, Any], field: str = "planner_kwargs") -> None:
    """A planner's `model` keyword is a gateway model name, never a path or a URL."""
    from llmrl.common.names import check_model_name

    model = kwargs.get("model")
    if isinstance(model, str):
        try:
            check_model_name(model)
        except ValueError as exc:
            raise ValueError(f"{field}.model: {exc}") from None


def registered_env(value: str, tag: str | None = None, needs: str = "") -> str:
    """A config's `env` value, checked against the registry (plugins loaded first); with
    `tag`, it must also be an env registered with that tag (`needs`: what the tag promises,
    for the error)."""
    from llmrl.common.plugins import load_plugins

    load_plugins()
    names = registry.names("env")
    if value not in names:
        raise ValueError(f"unknown env {value!r}; registered envs: {', '.join(sorted(names))}")
    if tag is not None:
        tagged = sorted(
            n for n in names if tag in registry.entry("env", n).metadata.get("tags", ())
        )
        if value not in tagged:
            raise ValueError(
                f"{value!r} is not an env this recipe plays ({needs}; registered with tag "
                f"{tag!r}): {', '.join(tagged)}"
            )
    return value


@dataclass
class Phase:
    name: str  # unique within the recipe; "<kind>" or "<kind>/<round>", e.g. "collect/2"
    run: Callable[[RunContext], dict[str, Any] | None]
    description: str = ""


class Recipe(ABC):
    Config: ClassVar[type[RecipeConfig]] = RecipeConfig
    # The results table's columns that experiment reports aggregate over seeds (mean, 95%
    # bootstrap interval, IQM; `llmrl compare`); None: every numeric column.
    headline_metrics: ClassVar[tuple[str, ...] | None] = None

    def __init__(self, config: RecipeConfig) -> None:
        self.config = config

    @abstractmethod
    def phases(self) -> list[Phase]:
        """The ordered phases of a run of this recipe (may depend on the config)."""

    @classmethod
    def targets(cls, results: ConfigResults) -> list[Verdict]:
        """The recipe's claims judged on one config's results over its seeds
        (`llmrl.recipes.targets`); those whose rows the config lacks are left out."""
        return []


# -- configs and schemas --------------------------------------------------------------------
class ConfigError(ValueError):
    """A recipe name or config the recipe does not accept; the message says what and why."""

    def __init__(self, message: str, errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.errors = errors or []


def recipe_class(name: str) -> type[Recipe]:
    from llmrl.common.registry import UnavailableError, UnknownNameError

    try:
        return registry.get_recipe(name)
    except (UnknownNameError, UnavailableError) as exc:
        raise ConfigError(str(exc), [{"loc": ["recipe"], "msg": str(exc)}]) from None


def _unknown_key_message(config: type[RecipeConfig], loc: tuple[Any, ...]) -> str:
    """What to say of a key at `loc` the config lacks: at the top level, the config's word
    on it (a key may have moved into a group); in a settings group, the group's keys."""
    if len(loc) == 1:
        return config.unknown_key_message(str(loc[0]))
    owner = owner_model(config, loc)
    if owner is None:
        return "unknown key"
    return f"unknown key; {'.'.join(map(str, loc[:-1]))}'s keys: {', '.join(owner.model_fields)}"


def validate_config(recipe: str, config: dict[str, Any] | None) -> RecipeConfig:
    """The recipe's config model built from `config`; ConfigError names each bad field."""
    if config is not None and not isinstance(config, dict):
        kind = type(config).__name__
        raise ConfigError(f"config must be a mapping of keys to values, got {kind}")
    cls = recipe_class(recipe)
    try:
        validated = cls.Config(**(config or {}))
    except ValidationError as exc:
        errors = [
            {
                "loc": ["config", *map(str, err["loc"])],
                # a key the config lacks may have moved or been renamed: the config says where
                "msg": _unknown_key_message(cls.Config, err["loc"])
                if err["type"] == "extra_forbidden"
                else err["msg"],
                "type": err["type"],
            }
            for err in exc.errors(include_url=False)
        ]
        allowed = ", ".join(cls.Config.model_fields)
        lines = [f"{'.'.join(e['loc'])}: {e['msg']}" for e in errors]
        raise ConfigError(
            f"invalid config for recipe {recipe!r}: " + "; ".join(lines) + f" (keys: {allowed})",
            errors,
        ) from None
    try:
        check_fits(validated.memory_estimate())
    except OverMemoryError as exc:
        loc = ["config", *exc.setting.split(".")]  # a group's key: ppo.microbatch_size
        error = {"loc": loc, "msg": str(exc), "type": "over_memory"}
        raise ConfigError(f"config.{exc.setting}: {exc}", [error]) from None
    except ValueError as exc:  # the operator's $LLMRL_LIMIT_MEMORY_GIB is no number: say so
        error = {"loc": ["config"], "msg": str(exc), "type": "memory_limit"}
        raise ConfigError(f"this server's memory limit is unusable: {exc}", [error]) from None
    return validated


def config_fields(recipe: str) -> list[dict[str, str]]:
    """The recipe's config keys: name, type, default and description (for `llmrl recipes`)."""
    from llmrl.common.model_fields import field_rows

    return field_rows(recipe_class(recipe).Config)


def recipe_schemas() -> dict[str, dict[str, Any]]:
    """Every registered recipe with its description and its config's JSON schema."""
    return {
        name: {
            "name": name,
            "description": entry.description,
            "config_schema": entry.obj.Config.model_json_schema(),
        }
        for name, entry in registry.entries("recipe").items()
    }


# -- results ----------------------------------------------------------------------------------
@dataclass
class Results:
    """A run's final table (rows of equal keys) plus notes and the plot files beside it."""

    title: str
    rows: list[dict[str, Any]]
    columns: list[str] | None = None  # default: keys of the first row, in order
    notes: list[str] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)  # file names relative to the out dir
    # per-unit values that targets pair across methods, e.g. "held-out/bootstrap": each
    # evaluation episode's success, in the same episode order for every method
    samples: dict[str, list[float]] = field(default_factory=dict)
    # learning curves the experiment report aggregates over seeds: `learning_curve(...)`s,
    # one per panel (a task and a measure) and line (a method)
    curves: list[dict[str, Any]] = field(default_factory=list)
    # where it was measured (`llmrl.common.provenance`): set when the run writes its results
    provenance: dict[str, Any] = field(default_factory=dict)

    def column_names(self) -> list[str]:
        return self.columns or (list(self.rows[0]) if self.rows else [])

    def to_dict(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "columns": self.column_names(),
            "rows": self.rows,
            "notes": self.notes,
            "plots": self.plots,
            **({"samples": self.samples} if self.samples else {}),
            **({"curves": self.curves} if self.curves else {}),
            **({"provenance": self.provenance} if self.provenance else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Results:
        return cls(
            title=data["title"],
            rows=data["rows"],
            columns=data.get("columns"),
            notes=data.get("notes", []),
            plots=data.get("plots", []),
            samples=data.get("samples", {}),
            curves=data.get("curves", []),
            provenance=data.get("provenance", {}),
        )

    def to_markdown(self) -> str:
        columns = self.column_names()
        lines = [f"# {self.title}", ""]
        lines.append("| " + " | ".join(columns) + " |")
        lines.append("|" + "|".join("---" for _ in columns) + "|")
        for row in self.rows:
            lines.append("| " + " | ".join(format_cell(row.get(c)) for c in columns) + " |")
        lines += [""] + [f"- {note}" for note in self.notes]
        if self.provenance:
            lines.append(f"- measured on: {describe(self.provenance)}")
        lines += [f"![{plot}]({plot})" for plot in self.plots]
        return "\n".join(lines).rstrip() + "\n"


CURVE_BINS = 100  # points a run keeps of a curve: binned means, so results.json stays small


def learning_curve(
    panel: str, line: str, x: Sequence[float], y: Sequence[float], bins: int = CURVE_BINS
) -> dict[str, Any]:
    """One learning curve of a run for `Results.curves`: `y` over `x` (e.g. return over
    environment steps), reduced to the means of at most `bins` equal spans of x. The report
    plots one panel per `panel` (e.g. "KeyInBox: return") and a line per `line` (a method),
    smoothed, with the seeds' band."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = np.isfinite(xs) & np.isfinite(ys)
    xs, ys = xs[keep], ys[keep]
    if len(xs) > bins:
        edges = np.linspace(xs.min(), xs.max(), bins + 1)
        index = np.clip(np.searchsorted(edges, xs, side="right") - 1, 0, bins - 1)
        counts = np.bincount(index, minlength=bins)
        filled = counts > 0  # one pass per array, not one per bin
        xs = np.bincount(index, weights=xs, minlength=bins)[filled] / counts[filled]
        ys = np.bincount(index, weights=ys, minlength=bins)[filled] / counts[filled]
    return {"panel": panel, "line": line, "x": xs.tolist(), "y": ys.tolist()}


def finite_or_none(value: Any) -> Any:
    """`value` with every NaN or infinite number (numpy's too) replaced by None, for JSON."""
    if isinstance(value, dict):
        return {key: finite_or_none(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite_or_none(item) for item in value]
    if value is None or isinstance(value, bool | int | str):
        return value
    try:
        return value if math.isfinite(float(value)) else None
    except (TypeError, ValueError):  # not a number: json's default decides
        return value


def format_cell(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        return f"{value:.4g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.2e}"
    return "" if value is None else str(value)


# -- the run context ----------------------------------------------------------------------------
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


def read_results(out_dir: str | Path) -> Results | None:
    path = Path(out_dir) / "results.json"
    return Results.from_dict(json.loads(path.read_text())) if path.exists() else None
