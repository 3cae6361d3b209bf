"""Typed policy specs: each kind's fields declared once, as a pydantic model its driver owns.

A policy spec travels as JSON (`EpisodeJob.policy`, a recipe config's `policy`), and is
validated against its kind's model (`registry.register_driver(kind, spec=Model)`) both when a
run is submitted and when a driver is built, so a spec that would fail at run time is refused
at submission, each error naming its full key (`policy.ask.model`). Drivers receive the typed
spec, never a dict read with `.get(key, default)`: a default is written once, in the model.

A field that names a saved file or checkpoint is an `ArtifactRef`: it resolves, with
`llmrl.common.trusted.resolve_artifact`, to the path of something the project saved itself
(`run:<run_id>/<file>` or a path under LLMRL_HOME), and is refused otherwise.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from llmrl.common import trusted
from llmrl.common.registry import UnknownNameError, registry

DEFAULT_KIND = "planner"


def _saved_artifact(value: str) -> str:
    try:
        return str(trusted.resolve_artifact(value, "reference"))
    except trusted.UntrustedArtifactError as exc:
        raise ValueError(exc.reason) from None


ArtifactRef = Annotated[
    str,
    Field(description="a saved file or checkpoint: run:<run_id>/<file>, or its path"),
    AfterValidator(_saved_artifact),
]


class PolicySpec(BaseModel):
    """What every spec has; a kind's model adds its own fields. Unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str = Field(DEFAULT_KIND, description="the registered policy kind")
    name: str | None = Field(None, description="the policy's label in results (default: kind)")


class OpenPolicySpec(PolicySpec):
    """The spec of a kind registered without a model (a plugin's): its fields unchecked."""

    model_config = ConfigDict(extra="allow", frozen=True)


def spec_model(kind: str) -> type[PolicySpec]:
    """The spec model of a registered kind; ValueError listing the kinds for another."""
    try:
        entry = registry.entry("driver", kind)
    except UnknownNameError:
        known = ", ".join(registry.names("driver"))
        raise ValueError(f"unknown policy kind {kind!r}; known kinds: {known}") from None
    return entry.metadata.get("spec") or OpenPolicySpec


def parse_policy_spec(policy: Any, field: str = "policy") -> PolicySpec:
    """`policy` (a dict, or a spec already) as its kind's typed spec; a ValueError naming each
    bad key under `field` (e.g. "policy.keys: Field required")."""
    if isinstance(policy, PolicySpec):
        return policy
    if not isinstance(policy, dict):
        raise ValueError(f"{field}: expected a mapping with a 'kind', got {type(policy).__name__}")
    model = spec_model(str(policy.get("kind", DEFAULT_KIND)))
    try:
        return model.model_validate(policy)
    except ValidationError as exc:
        problems = [_problem(field, error) for error in exc.errors(include_url=False)]
        raise ValueError("; ".join(problems)) from None


def _problem(field: str, error: Any) -> str:
    """`policy.<loc>: <message>`; a model validator's "key: ..." message adds its key."""
    loc, message = [field, *map(str, error["loc"])], error["msg"].removeprefix("Value error, ")
    key, colon, rest = message.partition(": ")
    if colon and key.isidentifier():
        loc, message = [*loc, key], rest
    return f"{'.'.join(loc)}: {message}"


def spec_dict(spec: PolicySpec) -> dict[str, Any]:
    """The spec as JSON (what a job carries): the fields given, artifacts as resolved."""
    return spec.model_dump(mode="json", exclude_unset=True)
