"""One registry for everything that is looked up by name.

In the style of habitat-lab's registry: a component is one file plus one decorator, e.g.

    @registry.register_env("SimpleDoorKey", max_episode_steps=100)
    class SimpleDoorKeyEnv(LlmrlEnv): ...

Kinds: environments, LLM backends, planners, recipes, algorithms, the learner's policy-training
jobs (`register_policy_job`: a job kind a recipe offers the learner service), episode drivers
(`register_driver`: how a policy spec of one kind plays an episode) and dataset builders
(`register_dataset`: how the annotator turns episode records into a dataset). Built-in components
are imported lazily, per kind, the first time that kind is looked up, so that `llmrl envs`
does not import torch and a missing optional extra only matters for the kind that needs it.
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

if TYPE_CHECKING:
    from pydantic import BaseModel

Kind = Literal[
    "env", "backend", "planner", "recipe", "algorithm", "policy_job", "driver", "dataset"
]
KINDS: tuple[Kind, ...] = (
    "env",
    "backend",
    "planner",
    "recipe",
    "algorithm",
    "policy_job",
    "driver",
    "dataset",
)

# Where each kind's built-in components live; every module below is imported on first use.
BUILTIN_PACKAGES: dict[Kind, tuple[str, ...]] = {
    "env": ("llmrl.simulator.envs",),
    "backend": ("llmrl.llm_gateway.backends",),
    "planner": ("llmrl.planners", "llmrl.recipes"),  # shared planners, then recipes' own
    "recipe": ("llmrl.recipes",),
    "algorithm": ("llmrl.learner.algorithms",),
    "policy_job": ("llmrl.recipes",),  # recipes offer the learner their training jobs
    "driver": ("llmrl.agents", "llmrl.recipes"),  # shared drivers, then recipes' own kinds
    "dataset": ("llmrl.annotator", "llmrl.recipes"),
}

# Which pip extra a kind's built-ins need, for the error shown when an import fails.
KIND_EXTRA: dict[Kind, str] = {
    "env": "sim",
    "backend": "llm",
    "planner": "all",
    "recipe": "all",
    "algorithm": "learn",
    "policy_job": "all",
    "driver": "all",
    "dataset": "all",
}

T = TypeVar("T")


@dataclass
class Entry:
    """A registered component: the object itself plus what was said about it."""

    name: str
    kind: Kind
    obj: Any
    description: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)


class UnknownNameError(KeyError):
    """Raised for a name that nothing registered; the message lists what is available."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable.
        return str(self.args[0])


class Registry:
    def __init__(self) -> None:
        self._entries: dict[Kind, dict[str, Entry]] = {kind: {} for kind in KINDS}
        self._loaded: set[Kind] = set()
        # Held while built-ins are imported, so that no thread sees a kind half-loaded.
        # Re-entrant: importing one kind's modules may look up another kind.
        self._loading = threading.RLock()

    # -- registration -------------------------------------------------------------------
    def _register(
        self, kind: Kind, name: str, description: str = "", **metadata: Any
    ) -> Callable[[T], T]:
        def decorator(obj: T) -> T:
            existing = self._entries[kind].get(name)
            if existing is not None and existing.obj is not obj:
                raise ValueError(f"{kind} {name!r} is already registered by {existing.obj!r}")
            doc = description or (getattr(obj, "__doc__", None) or "").strip().split("\n")[0]
            self._entries[kind][name] = Entry(name, kind, obj, doc, dict(metadata))
            if kind == "env":
                _register_with_gymnasium(name, obj, metadata)
            return obj

        return decorator

    def register_env(self, name: str, description: str = "", **metadata: Any) -> Callable[[T], T]:
        """Register an environment class or factory returning a `gymnasium.Env`.

        Metadata: `max_episode_steps` (gymnasium TimeLimit), `kwargs` (defaults passed to the
        constructor), `tags` (e.g. ("minigrid", "when2ask")). The environment is also registered
        with gymnasium as `llmrl/<name>-v0` so that `gymnasium.make` works in-process.
        """
        return self._register("env", name, description, **metadata)

    def register_backend(
        self, name: str, description: str = "", **metadata: Any
    ) -> Callable[[T], T]:
        """Register an LLM backend (maps a gateway request in and a response out)."""
        return self._register("backend", name, description, **metadata)

    def register_planner(
        self, name: str, description: str = "", **metadata: Any
    ) -> Callable[[T], T]:
        """Register a planner: something that turns an observation into a plan of skills."""
        return self._register("planner", name, description, **metadata)

    def register_recipe(
        self, name: str, description: str = "", **metadata: Any
    ) -> Callable[[T], T]:
        """Register a recipe: a resumable sequence of phases that ends in a results table."""
        return self._register("recipe", name, description, **metadata)

    def register_algorithm(
        self, name: str, description: str = "", **metadata: Any
    ) -> Callable[[T], T]:
        """Register a training algorithm (PPO, DQN, LLM-PPO, BC, CQL, SFT...)."""
        return self._register("algorithm", name, description, **metadata)

    def register_policy_job(
        self, name: str, request: type[BaseModel], description: str = "", **metadata: Any
    ) -> Callable[[T], T]:
        """Register a kind of RL training job that the learner service runs (`POST
        /policy-jobs`): decorates `run(request, report) -> result`, where `request` is a
        `request` model instance and `report(n)` adds n training steps to the job's progress.

        `request` must have a `kind` field: requests choose their kind by name (`"kind":
        name`), so the learner never imports the recipes that define them.
        """
        if "kind" not in request.model_fields:
            raise TypeError(f"policy job {name!r}: {request.__name__} needs a `kind` field")
        return self._register("policy_job", name, description, request=request, **metadata)

    def register_driver(
        self, name: str, description: str = "", **metadata: Any
    ) -> Callable[[T], T]:
        """Register how policy specs of kind `name` (`{"kind": name, ...}`) become episode
        drivers: decorates `build(policy, resources, job) -> EpisodeDriver`."""
        return self._register("driver", name, description, **metadata)

    def register_dataset(
        self, name: str, description: str = "", **metadata: Any
    ) -> Callable[[T], T]:
        """Register a dataset builder the annotator runs by name: decorates
        `build(request) -> result`, with `request` a pydantic model given as metadata
        `request=` so that the annotator validates bodies without importing the recipe."""
        return self._register("dataset", name, description, **metadata)

    # -- lookup -------------------------------------------------------------------------
    def load_builtins(self, kind: Kind) -> None:
        """Import every built-in module of `kind` so that its decorators run."""
        if kind in self._loaded:
            return
        with self._loading:
            if kind in self._loaded:
                return
            for package_name in BUILTIN_PACKAGES[kind]:
                self._import_package(kind, package_name)
            self._loaded.add(kind)

    def _import_package(self, kind: Kind, package_name: str) -> None:
        try:
            package = importlib.import_module(package_name)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("llmrl"):
                return  # the package of this kind does not exist yet
            raise _missing_extra(kind, exc) from exc
        for module in pkgutil.walk_packages(package.__path__, package_name + "."):
            if module.name.rsplit(".", 1)[-1].startswith("_"):
                continue
            try:
                importlib.import_module(module.name)
            except ModuleNotFoundError as exc:
                if exc.name and exc.name.startswith("llmrl"):
                    raise
                raise _missing_extra(kind, exc) from exc

    def entries(self, kind: Kind) -> dict[str, Entry]:
        self.load_builtins(kind)
        return dict(sorted(self._entries[kind].items()))

    def names(self, kind: Kind) -> list[str]:
        return list(self.entries(kind))

    def entry(self, kind: Kind, name: str) -> Entry:
        entries = self.entries(kind)
        if name not in entries:
            known = ", ".join(entries) or "(none)"
            raise UnknownNameError(f"unknown {kind} {name!r}; registered {kind}s: {known}")
        return entries[name]

    def get(self, kind: Kind, name: str) -> Any:
        return self.entry(kind, name).obj

    def get_env(self, name: str) -> Any:
        return self.get("env", name)

    def get_backend(self, name: str) -> Any:
        return self.get("backend", name)

    def get_planner(self, name: str) -> Any:
        return self.get("planner", name)

    def get_recipe(self, name: str) -> Any:
        return self.get("recipe", name)

    def get_algorithm(self, name: str) -> Any:
        return self.get("algorithm", name)

    def get_driver(self, name: str) -> Any:
        return self.get("driver", name)

    def get_dataset(self, name: str) -> Any:
        return self.get("dataset", name)

    def get_policy_job(self, name: str) -> tuple[type[BaseModel], Callable[..., dict[str, Any]]]:
        """(request model, run function) of a registered policy-training job kind."""
        entry = self.entry("policy_job", name)
        return entry.metadata["request"], entry.obj


def _missing_extra(kind: Kind, exc: ModuleNotFoundError) -> ImportError:
    return ImportError(
        f"the built-in {kind}s need the Python package {exc.name!r}, which is not installed; "
        f"install it with: pip install 'llmrl[{KIND_EXTRA[kind]}]'"
    )


def gym_id(name: str) -> str:
    """The gymnasium id under which a registered environment can be made in-process."""
    return f"llmrl/{name}-v0"


def _register_with_gymnasium(name: str, obj: Any, metadata: dict[str, Any]) -> None:
    try:
        import gymnasium
    except ModuleNotFoundError:  # gymnasium comes with the [sim] extra
        return
    env_id = gym_id(name)
    if env_id in gymnasium.registry:
        return
    gymnasium.register(
        id=env_id,
        entry_point=obj,
        max_episode_steps=metadata.get("max_episode_steps"),
        kwargs=dict(metadata.get("kwargs", {})),
    )


registry = Registry()
