"""The error a world raises for bad input (in-process, in a worker process, or over gRPC)."""

from __future__ import annotations

from typing import Any


class WorldError(ValueError):
    """Bad input to a world: the message names the field and what is allowed."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field

    def __reduce__(self) -> tuple[Any, ...]:  # keep `field` across process boundaries
        return (type(self), (self.field, str(self).split(": ", 1)[1]))
