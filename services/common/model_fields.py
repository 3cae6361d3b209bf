"""A pydantic model's fields as rows (key, type, default, description): what `llmrl recipes`
and `llmrl algorithms` print, read from the models that validate the settings."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


def field_rows(model: type[BaseModel]) -> list[dict[str, str]]:
    """One row per field of `model`, in declaration order."""
    rows = []
    for name, info in model.model_fields.items():
        annotation: Any = info.annotation
        kind = getattr(annotation, "__name__", None) or str(annotation)
        default = info.get_default(call_default_factory=True)
        rows.append(
            {
                "name": name,
                "type": kind.replace("typing.", ""),
                "default": "(required)" if info.is_required() else repr(default),
                "description": info.description or "",
            }
        )
    return rows
