"""One type for every name a request gives a thing the project keeps on disk: a model, an
adapter, a version, a run, a checkpoint line, an artifact or a dataset.

Each becomes a folder or file name somewhere under LLMRL_HOME, so a name is one plain folder
name: letters, digits, `_`, `.` and `-`, at most 128 characters, never `.` or `..` alone and no
`..` inside. A path (`/abs/dir`, `../../x`) is therefore no name, and is refused by pydantic
naming the field, before anything is looked up or written.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field

NAME_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,128}")
NAME_RULE = "letters, digits, '_', '.', '-' (at most 128, never '..')"


def is_safe_name(part: str) -> bool:
    """True when `part` matches NAME_PATTERN and holds no `..` (so it is one folder name)."""
    return bool(NAME_PATTERN.fullmatch(part)) and ".." not in part and part != "."


def check_name(value: str) -> str:
    if not is_safe_name(value):
        raise ValueError(f"expected a name of {NAME_RULE}, got {value[:100]!r}")
    return value


Name = Annotated[
    str,
    Field(min_length=1, max_length=128, json_schema_extra={"pattern": NAME_PATTERN.pattern}),
    AfterValidator(check_name),
]
