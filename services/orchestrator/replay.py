"""`llmrl runs export` and `llmrl replay`: a run's LLM calls carried to another machine.

Export bundles one stored run (`llmrl.llm_gateway.replay_bundle`): its recipe and config,
its results.json, the gateway settings it ran with and every call the gateway kept for it
(`llmrl.llm_gateway.call_log`, beside the ledger). Replay plays the bundle's recipe and
config again in embedded mode with no model: an in-process gateway whose every model is the
`replay` backend answers each call from the bundle, and a call the bundle lacks fails the run
naming it. Then each cell of the new results is compared with the recorded one.

Replay with `recompute` asks the other question: does this machine compute the run's LLM
answers as the recording machine did? The run plays with this machine's own models (the
gateway's usual settings), and besides its rows each of its LLM answers is compared, bit for
bit, with the bundle's answer to the same request (matched by cache key).

A bundle is untrusted: besides what `read_bundle` checks, its recipe must be registered here,
its config must validate, and it may name no path. A data-location key (`data_dir`,
`released_path`) holding a path is left out with a warning, so that this machine's own copy
of the benchmark data is used (found as every run finds it); any other value that names a
path, an artifact (`run:<id>/...`) or a checkpoint is refused.
"""

from __future__ import annotations

import copy
import json
import os
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from llmrl.common.console import output_console
from llmrl.common.names import is_safe_name
from llmrl.common.numerics import (
    listed_changes,
    numerics_changes,
    numerics_provenance,
    recorded_settings,
)
from llmrl.common.plugins import load_plugins
from llmrl.common.registry import registry
from llmrl.llm_gateway.replay_bundle import (
    FORMAT,
    VERSION,
    Bundle,
    BundleError,
    prompt_start,
    read_bundle,
    serve_bundle,
    write_bundle,
)
from llmrl.orchestrator.sources import resolve_run
from llmrl.recipes.config import ConfigError, validate_config
from llmrl.recipes.results import differing_cells

# keys that name where benchmark data lies: a path there is left out (this machine's copy is
# used), the listed plain values are kept (llm-personalize's data_dir: "procedural")
DATA_KEYS: dict[str, tuple[str, ...]] = {"data_dir": ("procedural",), "released_path": ()}
# keys that name a file, folder, checkpoint or artifact: any value is refused
PATH_KEYS = frozenset(
    {
        "grounding_from",
        "dataset",
        "datasets",
        "init_from",
        "init_adapter",
        "checkpoint",
        "path",
        "out_dir",
        "adapter_path",
        "model_path",
        "embeddings",
    }
)
_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")


def looks_like_path(value: str) -> bool:
    """Whether a config string names a file or folder rather than a plain value."""
    return (
        "/" in value
        or "\\" in value
        or value.startswith(("~", "run:", "file:"))
        or value in (".", "..")
        or bool(_DRIVE.match(value))
    )


# -- export -------------------------------------------------------------------------------------
@dataclass
class ExportReport:
    path: Path
    run_id: str
    recipe: str
    requests: int
    calls: int
    sampled: int
    size: int


def _flush_in_process_gateway() -> None:
    """Save what this process's embedded gateway has not written yet (a run just made here)."""
    client = sys.modules.get("llmrl.llm_gateway.client")
    gateway = getattr(client, "_shared_gateway", None) if client else None
    if gateway is not None:
        gateway.ledger.flush()


def export_run(reference: str, out: str | Path, gateway_config: str | None = None) -> ExportReport:
    """Bundle the run `reference` names into `out`; BundleError or UnknownReference why not."""
    from llmrl.llm_gateway.gateway import make_ledger_store
    from llmrl.llm_gateway.settings import load_settings

    row, on_services = resolve_run(reference)
    if row.status != "completed":
        raise BundleError(
            f"run {row.run_id} is {row.status}: only a completed run has results a replay can "
            "be checked against"
        )
    results_path = Path(row.out_dir) / "results.json"
    try:
        results = json.loads(results_path.read_text())
    except (OSError, ValueError) as exc:
        raise BundleError(f"run {row.run_id}: cannot read its {results_path}: {exc}") from None
    _flush_in_process_gateway()
    settings = load_settings(config_file=gateway_config)
    store = make_ledger_store(settings.ledger, "service" if on_services else "embedded")
    if store is None:
        raise BundleError(
            "the gateway's ledger is kept in memory (ledger.backend: memory), so no run's calls "
            "outlive its process; name the gateway's settings with --gateway-config"
        )
    try:
        calls, note = store.run_calls(row.run_id)
        state = store.load().get(row.run_id) or {}
    finally:
        store.close()
    requests = int((state.get("totals") or {}).get("requests", 0))
    if requests and not calls:
        raise BundleError(
            f"run {row.run_id} made {requests} LLM calls, but its gateway kept none of them "
            "(a run from before calls were kept, or ledger.record_calls: false, or another "
            "gateway's ledger: --gateway-config names it); run it again to export it"
        )
    sampled = sum(1 for call in calls if call["sampled"])
    document = {
        "format": FORMAT,
        "version": VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "run": {
            "run_id": row.run_id,
            "recipe": row.recipe,
            "config": row.config,
            "status": row.status,
        },
        "results": results,
        "gateway": note,
        "calls": calls,
        "summary": {"requests": requests, "calls": len(calls), "sampled": sampled},
    }
    size = write_bundle(document, out)
    return ExportReport(Path(out), row.run_id, row.recipe, requests, len(calls), sampled, size)


# -- the bundle's config ------------------------------------------------------------------------
def safe_config(config: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The bundle's config with data locations left out (the warnings say which); BundleError
    naming the first key that names a path."""
    config = copy.deepcopy(config)
    warnings: list[str] = []

    def walk(value: Any, where: str) -> None:
        if isinstance(value, dict):
            for key in list(value):
                item, at = value[key], f"{where}.{key}" if where else str(key)
                if key in DATA_KEYS and item is not None:
                    if not (isinstance(item, str) and item in DATA_KEYS[key]):
                        del value[key]
                        warnings.append(
                            f"{at}: left out ({str(item)[:100]!r} is a path of the recorded "
                            "machine); this machine's own copy of the data is used"
                        )
                    continue
                if key in PATH_KEYS and item not in (None, [], {}):
                    raise BundleError(
                        f"the bundle's config names a path or artifact ({at}={str(item)[:100]!r}); "
                        "a replay never opens a path from a bundle"
                    )
                walk(item, at)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                walk(item, f"{where}[{i}]")
        elif isinstance(value, str) and looks_like_path(value):
            raise BundleError(
                f"the bundle's config names a path ({where}={value[:100]!r}); a replay never "
                "opens a path from a bundle"
            )

    walk(config, "")
    return config, warnings


def check_bundle_run(bundle: Bundle) -> tuple[dict[str, Any], list[str]]:
    """The config to replay (validated here) and warnings; BundleError saying what is wrong."""
    recipe = bundle.run.recipe
    if not is_safe_name(recipe) or recipe not in registry.names("recipe"):
        raise BundleError(
            f"the bundle's recipe {recipe[:100]!r} is not registered here "
            f"({', '.join(registry.names('recipe'))})"
        )
    config, warnings = safe_config(bundle.run.config)
    try:
        validate_config(recipe, config)
    except ConfigError as exc:
        raise BundleError(f"the bundle's config is not valid for {recipe} here: {exc}") from None
    recorded = bundle.provenance.get("numerics")
    if isinstance(recorded, dict):
        warnings += numerics_differences(recorded, numerics_provenance())
    return config, warnings


def numerics_differences(recorded: dict[str, Any], here: dict[str, Any]) -> list[str]:
    """A warning naming each stated setting (precision, CPU path pins, Adam's kernel) the
    recorded run computed with and this process does not: what this machine computes itself
    (agents trained around the LLM; with --recompute, the answers too) may part from the
    bundle's for that alone."""
    differ = numerics_changes(recorded, here)
    if not differ:
        return []
    listed, told = listed_changes(differ), recorded_settings(recorded, differ)
    return [
        f"the recorded run computed with other numerics ({listed}): what this machine "
        "computes itself may part from the bundle for that alone"
        + (f"; to compare like with like, run `{told} llmrl replay ...`" if told else "")
    ]


# -- replay -------------------------------------------------------------------------------------
def replay_settings(bundle: Bundle, bundle_path: Path) -> dict[str, Any]:
    """Gateway settings that serve every model the run used, and the built-in ones, from the
    bundle: no model is loaded, and a call to any of them is answered or refused by it."""
    from llmrl.common.config import load_yaml
    from llmrl.llm_gateway.settings import DEFAULTS_FILE

    note = bundle.gateway
    names = set(bundle.model_names()) | set(load_yaml(DEFAULTS_FILE).get("models") or {})
    models = {}
    for name in sorted(names):
        price = note.models[name].price if note and name in note.models else None
        models[name] = {
            "backend": "replay",
            "bundle": str(bundle_path.resolve()),
            # the run's prices: a call the recorded run paid for costs as much again
            "prompt_usd_per_1m": price.prompt if price else 0.0,
            "completion_usd_per_1m": price.completion if price else 0.0,
        }
    if note is not None and note.cache.backend == "none":
        cache: dict[str, Any] = {"backend": "none"}
    else:  # this process's own, empty: a bundle's answers never enter a cache on disk
        cache = {"backend": "sqlite", "sqlite_path": ":memory:", "ttl_s": 0, "memory_entries": 0}
    calls = bundle.model_names()
    return {
        "default_model": note.default_model if note else (calls[0] if calls else "smollm2"),
        "default_embedding_model": note.default_embedding_model if note else "minilm",
        "models": models,
        "cache": cache,
    }


@contextmanager
def replay_gateway(settings_file: Path, index: Any) -> Iterator[Any]:
    """This process's embedded gateway answering from the bundle while the block runs (and
    $LLMRL_LLM_GATEWAY_CONFIG naming its settings, for any gateway made meanwhile)."""
    from llmrl.llm_gateway import client
    from llmrl.llm_gateway.gateway import Gateway
    from llmrl.llm_gateway.settings import CONFIG_ENV_VAR, load_settings

    previous_env = os.environ.get(CONFIG_ENV_VAR)
    os.environ[CONFIG_ENV_VAR] = str(settings_file)
    gateway = Gateway(load_settings(config_file=settings_file))
    # what the recorded run's cache served first, this one's serves first too (at no cost)
    for key, answer in index.cached_first.items():
        gateway.cache.put(key, answer)
    with client._shared_lock:
        previous, client._shared_gateway = client._shared_gateway, gateway
    try:
        yield gateway
    finally:
        with client._shared_lock:
            client._shared_gateway = previous
        gateway.close()
        if previous_env is None:
            os.environ.pop(CONFIG_ENV_VAR, None)
        else:
            os.environ[CONFIG_ENV_VAR] = previous_env


@dataclass
class AnswerCheck:
    """A recomputed run's LLM answers against the bundle's, request by request (deterministic
    calls only: a sampled call without a seed has no one answer to compare)."""

    compared: int  # requests both the bundle and the recomputed run answered
    differing: list[str]  # 'model, op, prompt …: recorded …, here …' (the first few)
    differing_count: int
    only_recorded: int  # requests the recomputed run did not ask (other code, config, model)
    only_here: int

    @property
    def identical(self) -> bool:
        return not (self.differing_count or self.only_recorded or self.only_here)


@dataclass
class ReplayReport:
    run_id: str  # the replay's own run
    out: Path
    rows: int
    differences: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    answers: AnswerCheck | None = None  # with `recompute` only

    @property
    def identical(self) -> bool:
        return not self.differences and (self.answers is None or self.answers.identical)


def replay(
    bundle_path: str | Path,
    out_dir: str | Path | None = None,
    progress: bool = True,
    console: Console | None = None,
    recompute: bool = False,
) -> ReplayReport:
    """Play the bundle's run again here, every LLM call answered from the bundle (with
    `recompute`: by this machine's own models, each answer then compared with the bundle's),
    and compare its results with the recorded ones. Raises BundleError (the bundle is
    refused), `embedded.RunFailed` (the replayed run failed: e.g. a call the bundle lacks)."""
    from llmrl.orchestrator.embedded import run_embedded

    console = console or output_console()
    bundle_path = Path(bundle_path)
    bundle = read_bundle(bundle_path)
    load_plugins()
    config, warnings = check_bundle_run(bundle)
    for warning in warnings:
        console.print(f"warning: {warning}")
    recorded = bundle.run
    summary = bundle.summary
    answered_by = "this machine's models answering" if recompute else "no model loaded"
    console.print(
        f"replaying run {recorded.run_id} ({recorded.recipe}): {summary.calls} recorded LLM "
        f"calls for its {summary.requests} requests, {answered_by}"
    )
    if summary.sampled:
        console.print(
            f"  {summary.sampled} of them sampled without a seed: served in the order recorded "
            "(the same results only if the run asks them in that order)"
        )
    out = Path(out_dir or f"runs/replay-{recorded.run_id}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    answers = None
    if recompute:
        run = run_embedded(recorded.recipe, config, out_dir=out, progress=progress, console=console)
        answers = compare_answers(bundle, recomputed_calls(run.run_id))
    else:
        settings_file = out / "replay-gateway.yaml"
        settings_file.write_text(yaml.safe_dump(replay_settings(bundle, bundle_path)))
        index = serve_bundle(bundle_path, bundle)
        with replay_gateway(settings_file, index):
            run = run_embedded(
                recorded.recipe, config, out_dir=out, progress=progress, console=console
            )
    try:
        replayed = json.loads((out / "results.json").read_text())["rows"]
    except (OSError, ValueError, KeyError) as exc:
        raise BundleError(f"the replayed run wrote no readable results.json: {exc}") from None
    differences = differing_cells(bundle.results.rows, replayed, ("recorded", "replayed"))
    return ReplayReport(run.run_id, out, len(replayed), differences, warnings, answers)


# -- recompute: this machine's answers against the bundle's -------------------------------------
SHOWN_ANSWERS = 3  # differing answers a report names


def recomputed_calls(run_id: str) -> list[dict[str, Any]]:
    """The calls this process's gateway kept for a run it just made (embedded ledger)."""
    from llmrl.llm_gateway.gateway import make_ledger_store
    from llmrl.llm_gateway.settings import load_settings

    _flush_in_process_gateway()
    store = make_ledger_store(load_settings().ledger, "embedded")
    if store is None:
        raise BundleError(
            "the gateway's ledger is kept in memory (ledger.backend: memory), so the "
            "recomputed run's answers cannot be read back; use the default ledger settings"
        )
    try:
        return store.run_calls(run_id)[0]
    finally:
        store.close()


def compare_answers(bundle: Bundle, calls: list[dict[str, Any]]) -> AnswerCheck:
    """The bundle's deterministic answers against a recomputed run's, request by request."""
    recorded = {call.key: call for call in bundle.calls if not call.sampled}
    here = {call["key"]: call for call in calls if not call.get("sampled")}
    both = [key for key in recorded if key in here]
    differing = []
    for key in both:
        mine, theirs = here[key]["answer"], recorded[key].answer
        if json.dumps(mine, sort_keys=True) != json.dumps(theirs, sort_keys=True):
            call = recorded[key]
            prompt = prompt_start(call.op, call.request.params)
            differing.append(
                f"{call.model}, {call.op}, prompt {prompt!r}: {first_difference(theirs, mine)}"
            )
    return AnswerCheck(
        compared=len(both),
        differing=differing[:SHOWN_ANSWERS],
        differing_count=len(differing),
        only_recorded=len(recorded.keys() - here.keys()),
        only_here=len(here.keys() - recorded.keys()),
    )


def first_difference(recorded: Any, here: Any, path: str = "answer") -> str:
    """Where two answers first part, as 'answer.x[i]: recorded A, here B'."""
    if isinstance(recorded, dict) and isinstance(here, dict):
        for name in list(recorded) + [k for k in here if k not in recorded]:
            if name not in recorded or name not in here or recorded[name] != here[name]:
                return first_difference(recorded.get(name), here.get(name), f"{path}.{name}")
    if isinstance(recorded, list) and isinstance(here, list) and len(recorded) == len(here):
        for i, (a, b) in enumerate(zip(recorded, here, strict=True)):
            if a != b:
                return first_difference(a, b, f"{path}[{i}]")
    return f"{path}: recorded {_short(recorded)}, here {_short(here)}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:79] + "…"
