"""One registry for everything that is looked up by name.

In the style of habitat-lab's registry: a component is one file plus one decorator, e.g.

    @registry.register_env("SimpleDoorKey", max_episode_steps=100)
    class SimpleDoorKeyEnv(LlmrlEnv): ...

Kinds: environments, LLM backends, planners, recipes, algorithms, the learner's policy-training
jobs (`register_policy_job`: a job kind a recipe offers the learner service), episode drivers
(`register_driver`: how a policy spec of one kind plays an episode), dataset builders
(`register_dataset`: how the annotator turns episode records into a dataset) and exploration-goal
suggesters (`register_suggester`: ELLM's goal proposers).

Where a component lives is declared as a Python entry point, one per name, in the group
`llmrl.<kind>` (pyproject.toml's `[project.entry-points."llmrl.recipe"]`: `glam =
"llmrl.recipes.glam.recipe"`), so this module names no higher layer and a lookup imports only
the module of the name looked up: a worker that plays GLAM's episodes imports GLAM's driver
and no other recipe, the learner imports the one training job it runs, and `llmrl envs` does
not import torch. Listing a kind imports all of its modules. Any installed package may declare
entry points in these groups; the modules named in LLMRL_PLUGINS (`common/plugins.py`) are
imported before a kind's first lookup, so every process that looks anything up knows them.

Optional packages never break a whole kind:

* a registration may say what it needs, `register_env("CrafterText", requires=("crafter",),
  extra="crafter")`, and import that package lazily; while the package is missing the entry is
  listed as unavailable, and getting it raises `UnavailableError` with the install hint;
* a built-in or plugin module whose import fails on a missing (non-llmrl) package is recorded
  as an `UnloadedModule`; the kind's other modules load, and listings and unknown-name errors
  say which modules were left out and what to install.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

if TYPE_CHECKING:
    from pydantic import BaseModel

Kind = Literal[
    "env",
    "backend",
    "planner",
    "recipe",
    "algorithm",
    "policy_job",
    "driver",
    "dataset",
    "suggester",
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
    "suggester",
)

ENTRY_POINT_GROUP = "llmrl.{kind}"  # e.g. llmrl.recipe: name = module that registers it


def declared_modules(kind: Kind) -> dict[str, str]:
    """Component name -> the module that registers it, for `kind`, as the installed packages
    declare them (entry points of the group `llmrl.<kind>`)."""
    return dict(_declared()[kind])


@functools.cache
def _declared() -> dict[Kind, dict[str, str]]:
    """Every kind's entry points, read once per process: reading the installed packages'
    metadata takes tens of ms, and lookups happen per request."""
    points = importlib.metadata.entry_points()
    return {
        kind: {
            point.name: point.module
            for point in points.select(group=ENTRY_POINT_GROUP.format(kind=kind))
        }
        for kind in KINDS
    }


# Which pip extra a kind's built-ins need, for the hint shown when a module's import fails.
KIND_EXTRA: dict[Kind, str] = {
    "env": "sim",
    "backend": "llm",
    "planner": "all",
    "recipe": "all",
    "algorithm": "learn",
    "policy_job": "all",
    "driver": "all",
    "dataset": "all",
    "suggester": "all",
}

T = TypeVar("T")


@dataclass
class Entry:
    """A registered component: the object itself plus what was said about it.

    `requires` are the import names of the optional packages it needs, `extra` the pip extra
    of llmrl that installs them (the install hint names it when given).
    """

    name: str
    kind: Kind
    obj: Any
    description: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    requires: tuple[str, ...] = ()
    extra: str | None = None

    @property
    def missing(self) -> list[str]:
        """The required packages that are not installed (found without importing them)."""
        return [package for package in self.requires if not is_installed(package)]

    @property
    def available(self) -> bool:
        return not self.missing

    @property
    def install_hint(self) -> str:
        """What to run so that this entry becomes available ("" when it is)."""
        missing = self.missing
        return install_hint(missing, self.extra) if missing else ""

    def require(self) -> Any:
        """The registered object; `UnavailableError` when a required package is missing."""
        missing = self.missing
        if missing:
            raise UnavailableError(
                f"{self.kind} {self.name!r} needs {_packages(missing)}, not installed; "
                f"install with: {install_hint(missing, self.extra)}"
            )
        return self.obj


@dataclass(frozen=True)
class UnloadedModule:
    """A built-in or plugin module whose import failed because a package is missing."""

    module: str
    missing: str  # the package the import did not find
    extra: str | None  # the llmrl extra that installs it, when known

    @property
    def install_hint(self) -> str:
        return install_hint([self.missing], self.extra)

    def __str__(self) -> str:
        return f"{self.module} (needs {self.missing!r}: {self.install_hint})"


def is_installed(package: str) -> bool:
    """Whether `package` can be imported, without importing it (or, for a dotted name, more
    than its parent packages)."""
    if package in sys.modules:
        return True
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a parent package is missing or has no spec
        return False


def _is_within(module: str, package: str | None) -> bool:
    """Whether `module` is `package` or one of its submodules."""
    return bool(package) and (module == package or module.startswith(f"{package}."))


def install_hint(packages: list[str], extra: str | None) -> str:
    if extra:
        return f"pip install 'llmrl[{extra}]'"
    return "pip install " + " ".join(packages)


def _packages(names: list[str]) -> str:
    quoted = ", ".join(repr(name) for name in names)
    return f"the Python package{'s' if len(names) > 1 else ''} {quoted}"


class UnknownNameError(KeyError):
    """Raised for a name that nothing registered; the message lists what is available."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable.
        return str(self.args[0])


class UnavailableError(ImportError):
    """Raised for a registered name whose optional packages are not installed; the message
    names them and the pip command that installs them."""


class Registry:
    """Components by kind and name.

    `modules` maps each kind's component names to the modules that register them (default:
    the installed entry points, `declared_modules`); `plugins` says whether the modules named
    in LLMRL_PLUGINS are imported before a kind's first lookup (the process-wide `registry`
    does; plugin modules register with it).
    """

    def __init__(
        self, modules: Mapping[Kind, Mapping[str, str]] | None = None, plugins: bool = False
    ) -> None:
        self._entries: dict[Kind, dict[str, Entry]] = {kind: {} for kind in KINDS}
        self._modules = None if modules is None else {k: dict(v) for k, v in modules.items()}
        self._loaded: set[Kind] = set()
        self._unloaded: dict[Kind, list[UnloadedModule]] = {kind: [] for kind in KINDS}
        self._plugins = plugins
        self._plugins_tried: set[str] = set()
        self._unloaded_plugins: list[UnloadedModule] = []
        # Held while modules are imported, so that no thread sees a kind half-loaded.
        # Re-entrant: importing one kind's modules may look up another kind.
        self._loading = threading.RLock()

    # -- registration -------------------------------------------------------------------
    def _register(
        self,
        kind: Kind,
        name: str,
        description: str = "",
        requires: tuple[str, ...] = (),
        extra: str | None = None,
        **metadata: Any,
    ) -> Callable[[T], T]:
        if isinstance(requires, str) or not all(isinstance(r, str) for r in requires):
            raise TypeError(
                f"{kind} {name!r}: requires must be a tuple of import names, got {requires!r}"
            )

        def decorator(obj: T) -> T:
            existing = self._entries[kind].get(name)
            if existing is not None and existing.obj is not obj:
                raise ValueError(f"{kind} {name!r} is already registered by {existing.obj!r}")
            doc = description or (getattr(obj, "__doc__", None) or "").strip().split("\n")[0]
            entry = Entry(name, kind, obj, doc, dict(metadata), tuple(requires), extra)
            self._entries[kind][name] = entry
            if kind == "env":
                _register_with_gymnasium(entry)
            return obj

        return decorator

    def register_env(self, name: str, description: str = "", **metadata: Any) -> Callable[[T], T]:
        """Register an environment class or factory returning a `gymnasium.Env`.

        Metadata: `max_episode_steps` (gymnasium TimeLimit), `kwargs` (defaults passed to the
        constructor), `tags` (e.g. ("minigrid", "when2ask")), and, as for every kind,
        `requires` (import names of optional packages, imported lazily by the env) and
        `extra` (the llmrl extra that installs them). The environment is also registered
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
        drivers: decorates `build(spec, resources, job) -> EpisodeDriver`. Metadata
        `spec=Model` (a `llmrl.agents.policy_spec.PolicySpec` subclass) declares the kind's
        fields: specs are validated against it when a run is submitted and before `build`,
        which receives the typed spec."""
        return self._register("driver", name, description, **metadata)

    def register_dataset(
        self, name: str, description: str = "", **metadata: Any
    ) -> Callable[[T], T]:
        """Register a dataset builder the annotator runs by name: decorates
        `build(request) -> result`, with `request` a pydantic model given as metadata
        `request=` so that the annotator validates bodies without importing the recipe."""
        return self._register("dataset", name, description, **metadata)

    def register_suggester(
        self, name: str, description: str = "", **metadata: Any
    ) -> Callable[[T], T]:
        """Register an exploration-goal suggester (ELLM): a class whose instances answer
        `suggest(caption, achieved, state=None) -> list[str]` and `counters()`."""
        return self._register("suggester", name, description, **metadata)

    # -- lookup -------------------------------------------------------------------------
    def load_builtins(self, kind: Kind) -> None:
        """Import the plugins and every built-in module of `kind` so that their decorators
        run; modules left out for a missing package are recorded (`unloaded_modules`)."""
        if kind in self._loaded:
            return
        with self._loading:
            if kind in self._loaded:
                return
            if self._plugins:
                self.load_plugins()
            for module in dict.fromkeys(self.modules(kind).values()):
                self._import_builtin(kind, module)
            self._loaded.add(kind)

    def modules(self, kind: Kind) -> dict[str, str]:
        """Component name -> module of `kind`'s built-ins (not yet imported)."""
        if self._modules is None:
            return declared_modules(kind)
        return dict(self._modules.get(kind, {}))

    def _load_named(self, kind: Kind, name: str) -> None:
        """Import the plugins and the one module declared to register `name`, if any."""
        with self._loading:
            if self._plugins:
                self.load_plugins()
            module = self.modules(kind).get(name)
            if module is not None and name not in self._entries[kind]:
                self._import_builtin(kind, module)

    def load_plugins(self) -> None:
        """Import each module named in LLMRL_PLUGINS that no earlier call tried."""
        from llmrl.common.plugins import PLUGINS_VAR, plugin_modules

        with self._loading:
            for module in plugin_modules():
                if module in self._plugins_tried:
                    continue
                self._plugins_tried.add(module)  # before importing: plugins look things up
                try:
                    unloaded = self._import_module(module, extra=None)
                except ModuleNotFoundError as exc:  # the plugin itself, not one of its packages
                    self._plugins_tried.discard(module)
                    message = f"{PLUGINS_VAR} names {module!r}, which cannot be imported: {exc}"
                    raise ImportError(message) from exc
                if unloaded is not None:
                    self._unloaded_plugins.append(unloaded)

    def _import_builtin(self, kind: Kind, module: str) -> None:
        unloaded = self._import_module(module, KIND_EXTRA[kind])
        if unloaded is not None and unloaded not in self._unloaded[kind]:
            self._unloaded[kind].append(unloaded)

    @staticmethod
    def _import_module(module: str, extra: str | None) -> UnloadedModule | None:
        """Import `module`. A missing third-party package comes back as an UnloadedModule;
        a missing llmrl module (a bug) or `module` itself not existing is raised."""
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            missing = exc.name or ""
            if not missing or _is_within(missing, "llmrl") or _is_within(module, missing):
                raise
            return UnloadedModule(module, missing.split(".")[0], extra)
        return None

    def unloaded_modules(self, kind: Kind) -> list[UnloadedModule]:
        """The built-in modules of `kind` and the plugins left out for a missing package."""
        self.load_builtins(kind)
        unique = dict.fromkeys([*self._unloaded[kind], *self._unloaded_plugins])
        return list(unique)

    def entries(self, kind: Kind) -> dict[str, Entry]:
        self.load_builtins(kind)
        return dict(sorted(self._entries[kind].items()))

    def names(self, kind: Kind) -> list[str]:
        return list(self.entries(kind))

    def entry(self, kind: Kind, name: str) -> Entry:
        """The entry of `name`, available or not (`Entry.require` checks). Only the module
        declared for `name` is imported; an undeclared name loads the whole kind first."""
        found = self._entries[kind].get(name)  # already registered: no import, no lookup
        if found is None and kind not in self._loaded:
            self._load_named(kind, name)
            found = self._entries[kind].get(name)
        if found is not None:
            return found
        entries = self.entries(kind)
        if name not in entries:
            known = ", ".join(entries) or "(none)"
            message = f"unknown {kind} {name!r}; registered {kind}s: {known}"
            unloaded = self.unloaded_modules(kind)
            if unloaded:
                left_out = "; ".join(str(module) for module in unloaded)
                message += f"; modules not loaded for a missing package: {left_out}"
            raise UnknownNameError(message)
        return entries[name]

    def get(self, kind: Kind, name: str) -> Any:
        """The registered object; `UnknownNameError` for an unknown name, `UnavailableError`
        when its optional packages are missing (both messages say what to do)."""
        return self.entry(kind, name).require()

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

    def get_suggester(self, name: str) -> Any:
        return self.get("suggester", name)

    def get_policy_job(self, name: str) -> tuple[type[BaseModel], Callable[..., dict[str, Any]]]:
        """(request model, run function) of a registered policy-training job kind."""
        entry = self.entry("policy_job", name)
        return entry.metadata["request"], entry.require()


def gym_id(name: str) -> str:
    """The gymnasium id under which a registered environment can be made in-process."""
    return f"llmrl/{name}-v0"


class _RequiredPackagesCheck:
    """gymnasium entry point of an env with required packages: checks them, then builds the
    env, so that `gymnasium.make` of an unavailable env says what to install."""

    def __init__(self, entry: Entry) -> None:
        self.entry = entry
        self.metadata = getattr(entry.obj, "metadata", {})  # gymnasium reads render modes

    def __call__(self, **kwargs: Any) -> Any:
        return self.entry.require()(**kwargs)


def _register_with_gymnasium(entry: Entry) -> None:
    try:
        import gymnasium
    except ModuleNotFoundError:  # gymnasium comes with the [sim] extra
        return
    env_id = gym_id(entry.name)
    if env_id in gymnasium.registry:
        return
    gymnasium.register(
        id=env_id,
        entry_point=_RequiredPackagesCheck(entry) if entry.requires else entry.obj,
        max_episode_steps=entry.metadata.get("max_episode_steps"),
        kwargs=dict(entry.metadata.get("kwargs", {})),
    )


registry = Registry(plugins=True)


def registered_name(kind: Kind, name: str) -> str:
    """`name` when something of `kind` is registered under it; else a ValueError (what a
    pydantic validator raises) listing the registered names."""
    try:
        registry.entry(kind, name)
    except UnknownNameError as exc:
        raise ValueError(exc.args[0]) from None
    return name
