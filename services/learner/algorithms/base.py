"""The contract every training algorithm keeps (see the package docstring), and the one cache
of loaded models."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from llmrl.common.model_fields import owner_model
from llmrl.learner.versions import Checkpoint, Versions

Progress = Callable[[int], None]  # `on_progress(n)`: n more steps done (timesteps, updates)
LearnsFrom = Literal["env", "dataset"]


class Algorithm(ABC):
    """One training algorithm, registered by name (`registry.register_algorithm`).

    `train(source, checkpoints, ...)` learns from `source` (an env for online RL, a dataset
    for offline RL and SFT: `learns_from` says which, the family's docstring says what
    exactly) and saves a new version of the line `checkpoints`; `load(checkpoint)` gives back
    what was trained, ready to use (an SB3 model, a peft model...).
    """

    name: str  # its registered name
    family: str  # e.g. "sb3-on-policy", "sft": the module that implements it
    learns_from: LearnsFrom
    # its settings as a pydantic model (what `train` validates; `llmrl algorithms` lists it)
    settings_model: type[BaseModel] | None = None

    def __repr__(self) -> str:
        return f"<algorithm {self.name!r} ({self.family})>"

    @abstractmethod
    def train(
        self,
        source: Any,
        checkpoints: Versions | str | Path,
        *,
        version: str | int | None = None,
        on_progress: Progress | None = None,
        **settings: Any,
    ) -> Checkpoint:
        """Train on `source`; save and return version `version` (None: the line's next number)
        of `checkpoints`. `settings` are the algorithm's own (hyperparameters...): an unknown
        one is a `ValueError` naming it and the allowed ones."""

    @abstractmethod
    def load(self, checkpoint: Checkpoint | str | Path) -> Any:
        """What `train` saved in `checkpoint` (a Checkpoint, a version directory or a line:
        its latest version), ready to use."""

    def check_written_by_me(self, checkpoint: Checkpoint) -> None:
        """A checkpoint another algorithm wrote is refused (its metadata names the writer)."""
        if checkpoint.algorithm and checkpoint.algorithm != self.name:
            raise ValueError(
                f"checkpoint {checkpoint.path} was written by {checkpoint.algorithm!r}; "
                f"load it with that algorithm, not {self.name!r}"
            )


_cache: dict[tuple[str, str, int], Any] = {}
_cache_lock = threading.Lock()


def load_cached(algorithm: str, checkpoint: str | Path) -> Any:
    """`registry.get_algorithm(algorithm).load(checkpoint)`, loaded once per process.

    Episode drivers build a policy per episode; the model behind it is loaded once. An entry
    is keyed by the path and its modification time, so a re-written checkpoint loads afresh.
    """
    from llmrl.common.registry import registry

    path = Path(checkpoint).resolve()
    key = (algorithm, str(path), path.stat().st_mtime_ns if path.exists() else 0)
    with _cache_lock:  # one load per key, even when several workers ask at once
        if key not in _cache:
            _cache[key] = registry.get_algorithm(algorithm).load(path)
        return _cache[key]


def resumable_version(line: Versions, algorithm: str, state_file: str) -> Checkpoint | None:
    """The line's latest version when `algorithm` wrote it with its training state
    (`state_file`), so a killed run can continue from it; else None (start afresh)."""
    if not line.versions():
        return None
    latest = line.latest()
    if latest.algorithm != algorithm or not (latest.path / state_file).is_file():
        return None
    return latest


# -- settings as pydantic models --------------------------------------------------------------
class AlgorithmSettings(BaseModel):
    """Base of an algorithm's settings model: one `Field(default, description=..., bounds)`
    per setting. Unknown keys are refused, and so are NaN, infinity and values of another
    type (strict: 5.0 is no int, 1 no bool, "1e-4" no number), as the hand-written checks
    did; a tuple field that takes a JSON list says `strict=False` (its items stay strict)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


Settings = TypeVar("Settings", bound=BaseModel)
_SHOWN_VALUE = 80  # characters of a refused value a message repeats


def validate_settings(owner: str, model: type[Settings], settings: Mapping[str, Any]) -> Settings:
    """`settings` as a `model` instance; a ValueError `<owner>: <key>: <problem> (got <value>)`
    for each bad or unknown key otherwise (`settings_error`)."""
    try:
        return model.model_validate(dict(settings))
    except ValidationError as error:
        raise ValueError(f"{owner}: {settings_error(model, error)}") from None


def settings_error(model: type[BaseModel], error: ValidationError, prefix: str = "") -> str:
    """Every problem of `error` on one line, each naming its key (after `prefix`, e.g.
    "offline."): `<key>: <problem> (got <value>)`, `<key>: unknown setting; allowed: ...`,
    `<key>: required (<description>)`."""
    problems = []
    for detail in error.errors(include_url=False):
        key = prefix + ".".join(map(str, detail["loc"]))
        message = detail["msg"].removeprefix("Value error, ")
        if detail["type"] == "extra_forbidden":
            owner = owner_model(model, detail["loc"]) or model  # a settings group's own keys
            problems.append(f"{key}: unknown setting; allowed: {', '.join(owner.model_fields)}")
        elif detail["type"] == "missing":
            owner = owner_model(model, detail["loc"]) or model  # a settings group's own field
            field = owner.model_fields.get(str(detail["loc"][-1]))
            problems.append(f"{key}: required ({field.description if field else 'no default'})")
        elif not detail["loc"] or message.startswith(f"{detail['loc'][-1]}: "):
            # a validator's own message names its key (within its settings group, if any)
            group = "".join(f"{part}." for part in detail["loc"][:-1])
            problems.append(prefix + group + message)
        else:
            shown = repr(detail["input"])
            if len(shown) > _SHOWN_VALUE:
                shown = shown[: _SHOWN_VALUE - 3] + "..."
            problems.append(f"{key}: {message} (got {shown})")
    return "; ".join(problems)


def setting_field(
    model: type[BaseModel], name: str, description: str | None = None, **bounds: Any
) -> Any:
    """A pydantic field for a config or request key that passes setting `name` of `model` on:
    the setting's default, description (unless `description` is given) and bounds, plus
    `bounds` of the key's own (a recipe's upper limits...). Nothing is typed twice."""
    setting = model.model_fields[name]
    default = setting.get_default(call_default_factory=True)  # a plain default: in the schema
    derived = Field(default, description=description or setting.description, **bounds)
    derived.metadata = [*setting.metadata, *derived.metadata]
    return derived


def settings_of(instance: BaseModel, model: type[BaseModel]) -> dict[str, Any]:
    """`instance`'s values of the fields `model` declares, under their names: the settings a
    config or job passes on to the model that owns them (no key renamed on the way)."""
    return {
        name: getattr(instance, name)
        for name in model.model_fields
        if name in type(instance).model_fields
    }


# -- helpers of the hand-written algorithms ---------------------------------------------------
def check_env(env: str) -> None:
    """An env id the registry knows (a ValueError names the key and the known ids)."""
    from llmrl.common.registry import registry

    known = registry.names("env")
    if env not in known:
        raise ValueError(f"env: unknown env {env!r}; registered envs: {', '.join(sorted(known))}")


def tensorboard_writer(directory: str | None) -> Any:
    """A TensorBoard SummaryWriter on `directory` (None: no logging), for the algorithms that
    log CleanRL-style `charts/` and `losses/` scalars themselves."""
    if directory is None:
        return None
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(directory)
