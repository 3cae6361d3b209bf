"""Where a service may read and write the files a request names.

A request (a fine-tuning job's data, a dataset's `out_dir`, an env's `data_dir`) may only name
paths under the service's home (LLMRL_HOME) or a configured data root: LLMRL_DATA_ROOTS, a list
of folders separated by `os.pathsep` (default: the Housekeep and KALM data folders the project
knows, i.e. $LLMRL_HOUSEKEEP_DATA and $LLMRL_KALM_DATA; `llmrl data get` writes under
LLMRL_HOME, which is always allowed). `confine` resolves a
path (`..` and symlinks, whether or not it exists yet) and refuses it, naming the field, when the
result leaves every root: so a caller cannot have a service read or overwrite any file it can.
An embedded run (`llmrl run --out DIR`) adds its own output folder (`allow_root`).

Pickle-based files (SB3 zips, d3rlpy models, replay buffers) are loaded from a narrower set,
`artifact_roots`: LLMRL_HOME (the service's own artifact store), the folders this process chose
(`allow_root`) and LLMRL_ARTIFACT_ROOTS (folders only llmrl writes), never a data root, which
others may be able to write (`llmrl.common.trusted.open_verified`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from llmrl.common.config import home_dir
from llmrl.common.datasets import DATASETS

DATA_ROOTS_ENV = "LLMRL_DATA_ROOTS"
# folders besides LLMRL_HOME holding models llmrl saved (written by llmrl only): pickles load
# from LLMRL_HOME, these and the process's own folders, never from a data root
ARTIFACT_ROOTS_ENV = "LLMRL_ARTIFACT_ROOTS"
# data folders the project already reads from, when no LLMRL_DATA_ROOTS is set
KNOWN_DATA_ENV = tuple(dataset.env_var for dataset in DATASETS.values())
NAME_MAX = 255  # the longest file name Linux and macOS file systems take


# folders this process itself chose (an embedded run's output folder, named on the command
# line by the user who runs it): requests the process makes to itself may use them too
_process_roots: list[Path] = []


def allow_root(folder: str | Path) -> None:
    """Let this process's own requests use `folder` (e.g. `llmrl run --out DIR`): a process
    serving others never calls this with a folder a request named."""
    resolved = Path(folder).expanduser().resolve()
    if resolved not in _process_roots:
        _process_roots.append(resolved)


class PathOutsideRootsError(ValueError):
    """A path a request names resolves outside the allowed folders; names the field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def data_roots() -> list[Path]:
    """The folders requests may name paths under: LLMRL_HOME, then the configured data roots."""
    configured = os.environ.get(DATA_ROOTS_ENV)
    if configured:
        extra = [Path(p) for p in configured.split(os.pathsep) if p]
    else:
        extra = [Path(v) for name in KNOWN_DATA_ENV if (v := os.environ.get(name))]
    return [home_dir(), *(p.expanduser().resolve() for p in extra), *_process_roots]


def artifact_roots() -> list[Path]:
    """Where the project's own saved pickles may be loaded from: LLMRL_HOME, the folders of
    LLMRL_ARTIFACT_ROOTS and the folders this process chose (`allow_root`); never a data root."""
    configured = os.environ.get(ARTIFACT_ROOTS_ENV) or ""
    extra = [Path(p).expanduser().resolve() for p in configured.split(os.pathsep) if p]
    return [home_dir(), *extra, *_process_roots]


def confine(path: str | Path, field: str, roots: Iterable[Path] | None = None) -> Path:
    """`path` resolved (symlinks followed), or PathOutsideRootsError naming `field` when it
    lies outside every root (default: `data_roots()`)."""
    if isinstance(path, str) and not path.strip():
        raise PathOutsideRootsError(field, "expected a path, got an empty string")
    if any(len(part) > NAME_MAX for part in Path(str(path)).parts):
        raise PathOutsideRootsError(
            field, f"{str(path)[:200]!r} is not a usable path (a name over {NAME_MAX} characters)"
        )
    try:
        resolved = Path(path).expanduser().resolve()
    except (OSError, RuntimeError, ValueError) as exc:  # ~nouser, a NUL byte, a name too long
        raise PathOutsideRootsError(
            field, f"{str(path)[:200]!r} is not a usable path ({exc})"
        ) from None
    allowed = list(roots) if roots is not None else data_roots()
    if any(resolved.is_relative_to(root.resolve()) for root in allowed):
        return resolved
    raise PathOutsideRootsError(
        field,
        f"{str(path)!r} is outside the folders this service may use; allowed: paths under "
        f"LLMRL_HOME or a folder of {DATA_ROOTS_ENV} ({os.pathsep}-separated)",
    )


def confined_field(value: Any, info: Any) -> Any:
    """A pydantic field validator (`field_validator("out_dir", "data")(confined_field)`): each
    path the field holds (a str, a list of them, or None) must lie under the allowed roots; the
    refusal names the field."""
    paths = [] if value is None else [value] if isinstance(value, (str, Path)) else value
    for path in paths:
        confine(path, info.field_name)
    return value
