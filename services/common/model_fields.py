"""A pydantic model's fields as rows (key, type, default, description): what `llmrl recipes`
and `llmrl algorithms` print, read from the models that validate the settings."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


def settings_group(annotation: Any) -> type[BaseModel] | None:
    """The model of a field that is a settings group (`ppo: {...}`), else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def owner_model(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model that owns the last key of `loc` (a validation error's location): `model`
    itself, or the settings group the location goes through (`("ppo", "gamma")`); None when
    the location goes through something else (a list item, a plain dict)."""
    owner: type[BaseModel] | None = model
    for part in loc[:-1]:
        field = owner.model_fields.get(str(part)) if owner is not None else None
        owner = settings_group(field.annotation) if field is not None else None
    return owner


def field_rows(model: type[BaseModel], prefix: str = "") -> list[dict[str, str]]:
    """One row per field of `model`, in declaration order; a settings group's fields each
    get their own row under their dotted name (`ppo.learning_rate`)."""
    rows = []
    for name, info in model.model_fields.items():
        annotation: Any = info.annotation
        group = settings_group(annotation)
        if group is not None:
            rows += field_rows(group, f"{prefix}{name}.")
            continue
        kind = getattr(annotation, "__name__", None) or str(annotation)
        default = info.get_default(call_default_factory=True)
        rows.append(
            {
                "name": prefix + name,
                "type": kind.replace("typing.", ""),
                "default": "(required)" if info.is_required() else repr(default),
                "description": info.description or "",
            }
        )
    return rows
