"""One type for every name a request gives a thing the project keeps on disk: a model, an
adapter, a version, a run, a checkpoint line, an artifact or a dataset.

Each becomes a folder or file name somewhere under LLMRL_HOME, so a name is one plain folder
name: letters, digits, `_`, `.` and `-`, at most 128 characters, never `.` or `..` alone and no
`..` inside. A path (`/abs/dir`, `../../x`) is therefore no name, and is refused by pydantic
naming the field, before anything is looked up or written.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
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


# -- gateway model names ----------------------------------------------------------------------
MODEL_RULE = f"a gateway model name ({NAME_RULE}), or <model>:<adapter>@<version>"


def is_model_name(value: str) -> bool:
    """True for `<model>` or `<model>:<adapter>@<version>`, each part a safe name: never a
    path (no `/`, `\\`, `~`) nor a URL (no `://`)."""
    model, colon, adapter = value.partition(":")
    if not colon:
        return is_safe_name(model)
    name, at, version = adapter.partition("@")
    return bool(at) and all(is_safe_name(part) for part in (model, name, version))


# A study run from the command line (`python -m llmrl.recipes.<recipe>.studies.<name>`) loads
# the model its user names in-process, where a local directory is as good a name as any: the
# user's own process, never a service answering a request, may allow that.
_local_model_paths: ContextVar[bool] = ContextVar("local_model_paths", default=False)


@contextmanager
def local_model_paths_allowed() -> Iterator[None]:
    """Within this block `check_model_name` also takes a local path (not a URL): for a
    command-line study's own options, which load the model in the user's process."""
    token = _local_model_paths.set(True)
    try:
        yield
    finally:
        _local_model_paths.reset(token)


def check_model_name(value: str) -> str:
    """`value` when it is a model name (`is_model_name`); else a ValueError saying that a
    path or a URL is none: the gateway's settings name models and say where they are."""
    if is_model_name(value) or (_local_model_paths.get() and "://" not in value):
        return value
    what = "a URL" if "://" in value else "a path" if any(c in value for c in "/\\~") else ""
    raise ValueError(
        f"expected {MODEL_RULE}, got {value[:100]!r}"
        + (f", {what}, which is no model name" if what else "")
        + "; models are named in the gateway's settings (models: in the file of "
        "$LLMRL_LLM_GATEWAY_CONFIG), which say where each one's weights or endpoint are: name "
        "one of them"
    )


ModelName = Annotated[str, Field(min_length=1, max_length=400), AfterValidator(check_model_name)]
