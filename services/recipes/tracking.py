"""Where a run's scalars, settings and results go: TensorBoard, MLflow and/or Weights & Biases,
chosen by the `tracking:` setting every recipe config has (like TRL's `report_to`).

    llmrl run evaluate tracking=mlflow                       # a local MLflow store in <out>
    llmrl run evaluate tracking=mlflow,wandb mlflow_tracking_uri=http://mlflow:5000

`RunTrackers` is the fan-out a run writes through (`RunContext.tensorboard` returns it): each
`add_scalar` goes to every selected tracker. At the run's start the flattened config (secrets
left out) and the provenance go to each tracker, `log_results` sends the results table's
numbers, results.json/md and the plots, and at the end the gateway ledger's totals (LLM calls,
cache hits, tokens, cost) and the run's status.

MLflow and W&B are imported only when selected, and each talks to its backend on a thread of
its own: a slow or vanished server never holds up the run, and a tracker that fails warns once
and is dropped for the rest of the run, which goes on (its scalars stay in TensorBoard, its
results in the out dir). TensorBoard is written in the run's thread, as before.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import os
import queue
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from llmrl.common.datasets import portable

log = logging.getLogger("llmrl.tracking")

TRACKERS = ("tensorboard", "mlflow", "wandb")
NONE = "none"
TrackerName = Literal["tensorboard", "mlflow", "wandb", "none"]
WandbMode = Literal["offline", "online", "disabled"]
INSTALL_HINT = "pip install 'llmrl[tracking]'"
# the Python package each tracker needs (TensorBoard comes with the [learn] extra; without it
# runs have always gone on without TensorBoard scalars, so it is not checked here)
PACKAGES = {"mlflow": "mlflow", "wandb": "wandb"}
# the settings of tracking itself: they say where a run reports, not what it computes
TRACKING_KEYS = (
    "tracking",
    "mlflow_tracking_uri",
    "mlflow_experiment",
    "wandb_project",
    "wandb_mode",
)
# MLflow servers a run's config may name: the operator's list (URLs, compared by scheme, host
# and port) besides $MLFLOW_TRACKING_URI. A config is request data in service mode: a URL of
# its own choosing would have the workers connect wherever a tenant likes.
TRACKING_SERVERS_VAR = "LLMRL_TRACKING_SERVERS"
# how long the end of a run waits for a tracker to send what it has queued
CLOSE_WAIT_S = 120.0
# MLflow's limits: a param value's length, the items of one log_batch call
MLFLOW_PARAM_CHARS = 6000
MLFLOW_BATCH = 1000
MLFLOW_PARAMS_BATCH = 100
STATUS = {"completed": "FINISHED", "failed": "FAILED", "cancelled": "KILLED"}


# -- the setting ------------------------------------------------------------------------------
def tracker_list(value: Any) -> Any:
    """`tracking`'s value as a list: a command line gives `tracking=mlflow` or
    `tracking=mlflow,wandb` (a `[...]` there would be a sweep's grid axis); None is none."""
    if value is None:
        return []
    if isinstance(value, str):
        return [part for part in re.split(r"[,\s]+", value.strip()) if part]
    return value


def checked_trackers(value: list[str]) -> list[str]:
    """The selected trackers, each once, in the order given; "none" alone selects none.
    A selected tracker whose package is missing is refused saying what to install."""
    if NONE in value:
        if len(value) > 1:
            raise ValueError(f"{NONE!r} selects no tracker and cannot be combined with others")
        return []
    chosen = list(dict.fromkeys(value))
    missing = [n for n in chosen if n in PACKAGES and not installed(PACKAGES[n])]
    if missing:
        raise ValueError(
            f"{', '.join(missing)} selected but not installed: `{INSTALL_HINT}` installs "
            f"{' and '.join(PACKAGES.values())}"
        )
    return chosen


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:  # a port that is no number: matches no server
        port = -1
    return parts.scheme.lower(), (parts.hostname or "").lower(), port


def allowed_servers() -> list[str]:
    """The MLflow server URLs a run may name: $LLMRL_TRACKING_SERVERS, $MLFLOW_TRACKING_URI."""
    listed = [u.strip() for u in os.environ.get(TRACKING_SERVERS_VAR, "").split(",") if u.strip()]
    default = os.environ.get("MLFLOW_TRACKING_URI", "").strip()
    return [*listed, *([default] if default.lower().startswith(("http://", "https://")) else [])]


def checked_tracking_uri(value: str | None) -> str | None:
    """An MLflow tracking URI a run may use: a server the operator allows (`allowed_servers`),
    or a local store (`sqlite:///<path>`, `file://<path>`, a path) under the folders a service
    may write (`llmrl.common.paths.confine`); ValueError saying which otherwise."""
    if value is None:
        return None
    from llmrl.common.paths import confine

    scheme = urlsplit(value).scheme.lower()
    if scheme in ("http", "https"):
        if _origin(value) in {_origin(url) for url in allowed_servers()}:
            return value
        raise ValueError(
            f"{redact_url(value)!r} is not an allowed MLflow server; the operator lists them in "
            f"${TRACKING_SERVERS_VAR} (comma-separated URLs), or set $MLFLOW_TRACKING_URI "
            "and leave mlflow_tracking_uri unset"
        )
    if scheme == "sqlite":
        path = value.removeprefix("sqlite:///")
    elif scheme == "file":
        path = urlsplit(value).path
    elif not scheme:
        path = value
    else:
        raise ValueError(
            f"expected an http(s) server, sqlite:///<path>, file://<path> or a path; got the "
            f"scheme {scheme!r}"
        )
    confine(path, "mlflow_tracking_uri")  # refuses a store outside the folders it may write
    return value


def identity(config: dict[str, Any]) -> dict[str, Any]:
    """`config` without the tracking settings, and with a dataset's folder on this machine
    written as its variable (`portable`): where a run reports, and where this machine keeps
    the data, are not what it computes, so two configs that differ only there are the same run
    (run ids, resume, kept reports)."""
    return portable({key: value for key, value in config.items() if key not in TRACKING_KEYS})


def installed(package: str) -> bool:
    """Whether `package` can be imported (found without importing it: mlflow takes seconds)."""
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a broken install, or sys.modules[package] = None
        return False


# -- what goes to a tracker as the run's params -----------------------------------------------
SECRET_KEY = re.compile(
    r"(api[_-]?key|apikey|token|secret|passw(or)?d|credential|auth|private[_-]?key|cookie)", re.I
)
REDACTED = "[redacted]"


def redact_url(value: str) -> str:
    """`value` without a URL's user:password and secret-named query parameters."""
    try:
        parts = urlsplit(value)
    except ValueError:
        return value
    if not parts.scheme or not parts.netloc:
        return value
    netloc = parts.netloc.rpartition("@")[2]
    query = urlencode(
        [(k, REDACTED if SECRET_KEY.search(k) else v) for k, v in parse_qsl(parts.query)],
        safe="[]",
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def flat_params(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """The config as `dotted.key: text` pairs; a secret-named key's value is replaced by
    "[redacted]" and URLs lose their credentials: trackers show params to whoever can read
    the experiment, and often keep them on another machine."""
    flat: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if SECRET_KEY.search(str(key)) and value not in (None, "", {}, []):
            flat[name] = REDACTED
        elif isinstance(value, dict) and value:
            flat.update(flat_params(value, f"{name}."))
        elif isinstance(value, str):
            flat[name] = redact_url(value)
        elif isinstance(value, list):
            flat[name] = "[" + ", ".join(_text(item) for item in value) + "]"
        else:
            flat[name] = _text(value)
    return flat


def _text(value: Any) -> str:
    if isinstance(value, str):
        return redact_url(value)
    if isinstance(value, dict):
        return str(flat_params(value))
    return "None" if value is None else str(value)


def metric_name(tag: str) -> str:
    """`tag` with the characters MLflow refuses in a metric name replaced by `_`."""
    return re.sub(r"[^\w\-./ ]", "_", tag)[:250]


def result_metrics(rows: list[dict[str, Any]]) -> dict[str, float]:
    """The results table's numbers as metrics: `results/<column>` for one row,
    `results/<label>/<column>` for several, the label the row's task/method when those tell
    the rows apart, else its index."""
    labels = [str(i) for i in range(len(rows))]
    for keys in (("task", "method"), ("method",), ("task",)):
        named = ["/".join(str(row.get(k)) for k in keys) for row in rows]
        if all(all(k in row for k in keys) for row in rows) and len(set(named)) == len(rows):
            labels = named
            break
    metrics: dict[str, float] = {}
    for label, row in zip(labels, rows, strict=True):
        prefix = "results/" if len(rows) == 1 else f"results/{label}/"
        for column, value in row.items():
            if isinstance(value, bool | int | float) and math.isfinite(float(value)):
                metrics[metric_name(f"{prefix}{column}")] = float(value)
    return metrics


def usage_metrics(usage: dict[str, Any] | None) -> dict[str, float]:
    """The gateway ledger's totals for the run (`LLMClient.usage`) as `llm/...` metrics; zeros
    when no LLM took part."""
    usage = usage or {}
    keys = ("requests", "cache_hits", "model_calls", "errors")
    metrics = {f"llm/{key}": float(usage.get(key) or 0) for key in keys}
    prompt, completion = usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0
    metrics["llm/prompt_tokens"] = float(prompt)
    metrics["llm/completion_tokens"] = float(completion)
    metrics["llm/tokens"] = float(prompt + completion)
    metrics["llm/cost_usd"] = float(usage.get("cost_usd") or 0.0)
    return metrics


# -- the trackers -----------------------------------------------------------------------------
Scalar = tuple[str, float, int, int]  # tag, value, step, wall time in ms


class Tracker(Protocol):
    """One experiment tracker's side of a run. Called from one thread only (`Guarded`)."""

    name: str

    def start(self, params: dict[str, str], provenance: dict[str, str]) -> None: ...
    def log_scalars(self, scalars: list[Scalar]) -> None: ...
    def log_metrics(self, metrics: dict[str, float]) -> None: ...
    def log_artifact(self, path: Path, folder: str) -> None: ...
    def close(self, status: str | None) -> None: ...


class MlflowTracker:
    """An MLflow run in the experiment `experiment`, through an explicit `MlflowClient` (no
    `mlflow.start_run`: its active run is process-wide, and an orchestrator runs several runs
    at once). The same llmrl run (resumed) continues the same MLflow run, found by its
    `llmrl.run_id` tag."""

    name = "mlflow"

    def __init__(self, uri: str, experiment: str, run_id: str, recipe: str, out_dir: Path):
        self.uri, self.experiment, self.run_id, self.recipe = uri, experiment, run_id, recipe
        self.out_dir = out_dir
        self.client: Any = None
        self.mlflow_run_id = ""

    def artifact_location(self) -> str | None:
        """Artifacts of a SQLite store sit beside its database (MLflow's default is ./mlruns in
        whatever folder the process runs from); a server or another database decides its own."""
        if self.uri.startswith("sqlite:///"):
            return (Path(self.uri[len("sqlite:///") :]).parent / "mlartifacts").as_uri()
        return None

    def start(self, params: dict[str, str], provenance: dict[str, str]) -> None:
        from mlflow.entities import Param, RunTag
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=self.uri)
        experiment = self.client.get_experiment_by_name(self.experiment)
        if experiment is not None:
            experiment_id = experiment.experiment_id
        else:
            experiment_id = self.client.create_experiment(
                self.experiment, artifact_location=self.artifact_location()
            )
        quoted = self.run_id.replace("'", "")
        found = self.client.search_runs(
            [experiment_id], filter_string=f"tags.`llmrl.run_id` = '{quoted}'", max_results=1
        )
        if found:
            self.mlflow_run_id = found[0].info.run_id
            self.client.update_run(self.mlflow_run_id, status="RUNNING")
        else:
            tags = {"llmrl.run_id": self.run_id, "llmrl.recipe": self.recipe}
            self.mlflow_run_id = self.client.create_run(
                experiment_id, run_name=self.run_id, tags=tags
            ).info.run_id
        items = [Param(k[:250], v[:MLFLOW_PARAM_CHARS]) for k, v in params.items()]
        for start in range(0, len(items), MLFLOW_PARAMS_BATCH):
            self.client.log_batch(
                self.mlflow_run_id, params=items[start : start + MLFLOW_PARAMS_BATCH]
            )
        # provenance as tags, not params: a resumed run may run on another commit or machine,
        # and MLflow refuses a param logged again with another value
        tags = [RunTag(f"llmrl.provenance.{k}"[:250], v[:5000]) for k, v in provenance.items()]
        self.client.log_batch(self.mlflow_run_id, tags=tags)

    def log_scalars(self, scalars: list[Scalar]) -> None:
        from mlflow.entities import Metric

        # MLflow's REST API has no NaN or infinity; TensorBoard keeps them
        items = [
            Metric(metric_name(tag), value, wall_ms, step)
            for tag, value, step, wall_ms in scalars
            if math.isfinite(value)
        ]
        for start in range(0, len(items), MLFLOW_BATCH):
            self.client.log_batch(self.mlflow_run_id, metrics=items[start : start + MLFLOW_BATCH])

    def log_metrics(self, metrics: dict[str, float]) -> None:
        now = int(time.time() * 1000)
        self.log_scalars([(key, value, 0, now) for key, value in metrics.items()])

    def log_artifact(self, path: Path, folder: str) -> None:
        self.client.log_artifact(self.mlflow_run_id, str(path), artifact_path=folder or None)

    def close(self, status: str | None) -> None:
        if self.mlflow_run_id:
            self.client.set_terminated(
                self.mlflow_run_id, status=STATUS.get(status or "", "KILLED")
            )


class WandbTracker:
    """A W&B run (`wandb.init(dir=<out>)`, offline unless `mode` or $WANDB_MODE says
    otherwise: `wandb sync <out>/wandb/offline-run-*` uploads it later). Each scalar is a
    history row with its step as `global_step`, the x axis of every chart."""

    name = "wandb"

    def __init__(self, project: str, mode: str | None, run_id: str, recipe: str, out_dir: Path):
        self.project, self.run_id, self.recipe, self.out_dir = project, run_id, recipe, out_dir
        self.mode = mode or os.environ.get("WANDB_MODE") or "offline"
        self.run: Any = None

    def start(self, params: dict[str, str], provenance: dict[str, str]) -> None:
        import wandb

        settings = wandb.Settings(
            console="off",  # the run's own output stays the run's (no stdout capture)
            silent=True,
            x_disable_stats=True,
            save_code=False,
            disable_git=True,
            x_save_requirements=False,
        )
        self.run = wandb.init(
            project=self.project,
            mode=self.mode,  # type: ignore[arg-type]
            dir=str(self.out_dir),
            id=re.sub(r"[^\w-]", "-", self.run_id),
            name=self.run_id,
            group=self.recipe,
            config=params,
            resume="allow",
            reinit="create_new",  # several runs of one orchestrator at once
            settings=settings,
        )
        self.run.config.update({"provenance": provenance}, allow_val_change=True)
        self.run.define_metric("global_step")
        self.run.define_metric("*", step_metric="global_step")

    def log_scalars(self, scalars: list[Scalar]) -> None:
        for tag, value, step, _ in scalars:
            self.run.log({tag: value, "global_step": step})

    def log_metrics(self, metrics: dict[str, float]) -> None:
        self.run.summary.update(metrics)

    def log_artifact(self, path: Path, folder: str) -> None:
        # a copy in the run's files: wandb.save would symlink the out dir's file
        target = Path(self.run.dir) / folder / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        self.run.save(str(target), base_path=self.run.dir, policy="now")

    def close(self, status: str | None) -> None:
        if self.run is not None:
            self.run.finish(exit_code=0 if status == "completed" else 1)


class Guarded:
    """A tracker driven from a thread of its own, in call order. Scalars queued while a call is
    under way go in the next batch. The first call that raises ends the tracker for this run
    (one warning); what the run does is not affected either way."""

    def __init__(self, tracker: Tracker) -> None:
        self.tracker = tracker
        self.failed = False
        self._queue: queue.SimpleQueue[tuple[str, Any] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(
            target=self._work, name=f"llmrl-{tracker.name}", daemon=True
        )
        self._thread.start()

    def call(self, method: str, *args: Any) -> None:
        if not self.failed:
            self._queue.put((method, args))

    def scalar(self, item: Scalar) -> None:
        if not self.failed:
            self._queue.put(("scalar", item))

    def close(self, status: str | None, wait_s: float = CLOSE_WAIT_S) -> None:
        self._queue.put(("close", (status,)))
        self._queue.put(None)
        self._thread.join(wait_s)
        if self._thread.is_alive():
            log.warning(
                "%s: still sending after %.0f s; the rest of this run's tracking is dropped",
                self.tracker.name,
                wait_s,
            )

    def _work(self) -> None:
        pending: list[tuple[str, Any] | None] = []
        while True:
            item = pending.pop(0) if pending else self._queue.get()
            if item is None:
                return
            method, args = item
            if method == "scalar":
                batch = [args]
                while True:  # every scalar queued behind this one: one request for all
                    try:
                        nxt = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if nxt is not None and nxt[0] == "scalar":
                        batch.append(nxt[1])
                    else:
                        pending.append(nxt)
                        break
                self._run("log_scalars", (batch,))
            else:
                self._run(method, args)

    def _run(self, method: str, args: tuple[Any, ...]) -> None:
        if self.failed:
            return
        try:
            getattr(self.tracker, method)(*args)
        except Exception as exc:  # a tracker never ends a run: warn once, drop the tracker
            self.failed = True
            log.warning(
                "%s tracking failed (%s: %s); the run goes on without it (its scalars are in "
                "TensorBoard if selected, its results in the out dir)",
                self.tracker.name,
                type(exc).__name__,
                exc,
            )


class RunTrackers:
    """The writer a run's scalars go through: `add_scalar`, `flush` and `close` as TensorBoard's
    SummaryWriter has them, fanned out to TensorBoard (`tensorboard()`: the SummaryWriter, or
    None when TensorBoard is not installed) and each other selected tracker. Other
    SummaryWriter methods (add_histogram, add_text...) go to TensorBoard alone."""

    def __init__(
        self,
        names: Iterable[str],
        *,
        run_id: str,
        recipe: str,
        out_dir: Path,
        tensorboard: Callable[[], Any] | None = None,
        mlflow_tracking_uri: str | None = None,
        mlflow_experiment: str | None = None,
        wandb_project: str = "llmrl",
        wandb_mode: str | None = None,
    ) -> None:
        names = list(names)
        self.out_dir = out_dir
        # TensorBoard's writer is made on first use, as it always was: a run that writes no
        # scalar has no tb folder
        self._tensorboard = tensorboard if "tensorboard" in names else None
        self._writer: Any = None
        self.trackers: list[Guarded] = []
        if "mlflow" in names:
            uri = (
                mlflow_tracking_uri
                or os.environ.get("MLFLOW_TRACKING_URI")
                or f"sqlite:///{out_dir.resolve() / 'mlflow.db'}"
            )
            tracker = MlflowTracker(uri, mlflow_experiment or recipe, run_id, recipe, out_dir)
            self.trackers.append(Guarded(tracker))
        if "wandb" in names:
            tracker_w = WandbTracker(wandb_project, wandb_mode, run_id, recipe, out_dir)
            self.trackers.append(Guarded(tracker_w))
        self.closed = False

    @property
    def writer(self) -> Any:
        """TensorBoard's SummaryWriter; None when not selected or not installed."""
        if self._writer is None and self._tensorboard is not None:
            self._writer = self._tensorboard() or False
        return self._writer or None

    def __bool__(self) -> bool:
        return bool(self.trackers) or self.writer is not None

    def start(self, config: dict[str, Any], provenance: dict[str, Any]) -> None:
        """The run's settings and where it runs, first thing for each tracker."""
        params = flat_params(config)
        where = flat_params(provenance)
        for tracker in self.trackers:
            tracker.call("start", params, where)

    def add_scalar(
        self,
        tag: str,
        scalar_value: Any,
        global_step: int | None = None,
        walltime: float | None = None,
        **kwargs: Any,
    ) -> None:
        if self.writer is not None:
            self.writer.add_scalar(tag, scalar_value, global_step, walltime, **kwargs)
        if self.trackers:
            item = (
                tag,
                float(scalar_value),
                int(global_step or 0),
                int((walltime or time.time()) * 1000),
            )
            for tracker in self.trackers:
                tracker.scalar(item)

    def log_metrics(self, metrics: dict[str, float]) -> None:
        """Figures of the run as a whole (the results table, the LLM totals), step 0."""
        for tracker in self.trackers:
            tracker.call("log_metrics", dict(metrics))

    def log_artifact(self, path: Path, folder: str = "") -> None:
        for tracker in self.trackers:
            tracker.call("log_artifact", Path(path), folder)

    def flush(self) -> None:
        if self.writer is not None:
            self.writer.flush()

    def close(self, status: str | None = None) -> None:
        """End each tracker's run with the llmrl run's status ("completed", "failed",
        "cancelled"; None: interrupted, to be resumed), after what it has queued is sent."""
        if self.closed:
            return
        self.closed = True
        if self._writer:
            self._writer.close()
        for tracker in self.trackers:
            tracker.close(status)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        writer = self.writer
        if writer is not None:
            return getattr(writer, name)
        if name.startswith("add_"):  # add_histogram & co. without TensorBoard: nothing to do
            return lambda *args, **kwargs: None
        raise AttributeError(name)
