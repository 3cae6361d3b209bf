"""A service's own folders kept out of what it answers: the absolute path of LLMRL_HOME, of a
data or artifact root, or of the home folder of the user it runs as says how a server is laid
out, which no client needs to know. `redact_server_paths` writes each of them as the variable
that sets it (`$LLMRL_HOME/runs/x`, `$LLMRL_HOUSEKEEP_DATA/episodes`, `~/...`), so a refusal
or a run's error still says which file, relative to a folder the operator knows.

Errors a service answers (a config's refusal, a failed run's error) go through it; what a
local command prints is left as it is (its user is the server's).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from llmrl.common.config import home_dir
from llmrl.common.datasets import DATASETS

# the variables that name further folders of the server (llmrl.common.paths reads them)
DATA_ROOTS_ENV = "LLMRL_DATA_ROOTS"
ARTIFACT_ROOTS_ENV = "LLMRL_ARTIFACT_ROOTS"


def server_folders() -> list[tuple[str, str]]:
    """(absolute path, how it is written instead) of each of the server's folders, the
    longest path first (so that a folder inside another is written by its own name); each
    path in its given and its resolved form."""
    named: list[tuple[Path, str]] = [(home_dir(), "$LLMRL_HOME")]
    for dataset in DATASETS.values():
        if value := os.environ.get(dataset.env_var):
            named.append((Path(value), f"${dataset.env_var}"))
    for variable in (DATA_ROOTS_ENV, ARTIFACT_ROOTS_ENV):
        for i, value in enumerate(p for p in os.environ.get(variable, "").split(os.pathsep) if p):
            named.append((Path(value), f"${variable}[{i}]"))
    with contextlib.suppress(KeyError, RuntimeError):  # no home folder known for this user
        named.append((Path.home(), "~"))
    pairs: dict[str, str] = {}
    for path, name in named:
        for form in (path.expanduser(), _resolved(path)):
            text = str(form)
            if form.is_absolute() and text != os.sep and text not in pairs:
                pairs[text] = name
    return sorted(pairs.items(), key=lambda pair: len(pair[0]), reverse=True)


def _resolved(path: Path) -> Path:
    try:
        return path.expanduser().resolve()
    except (OSError, RuntimeError):
        return path


def redact_server_paths(text: str) -> str:
    """`text` with each absolute path of a server folder (`server_folders`) written as the
    variable that sets it; a path elsewhere (one a client gave) is left as it is."""
    if not text or os.sep not in text:
        return text
    for path, name in server_folders():
        text = _replace_folder(text, path, name)
    return text


def _replace_folder(text: str, path: str, name: str) -> str:
    """Each occurrence of `path` as a whole folder (followed by a separator, a quote, a space
    or the end; not `/srv/home2` for `/srv/home`) replaced by `name`."""
    parts = text.split(path)
    if len(parts) == 1:
        return text
    out = [parts[0]]
    for part in parts[1:]:
        out.append((name if _ends_a_name(part) else path) + part)
    return "".join(out)


def _ends_a_name(rest: str) -> bool:
    """Whether a path followed by `rest` ends there (not `/srv/home2` for `/srv/home`; a
    full stop that ends a sentence ends it too)."""
    if not rest:
        return True
    if rest[0] == "." and (len(rest) == 1 or not (rest[1].isalnum() or rest[1] in "_-.")):
        return True
    return not (rest[0].isalnum() or rest[0] in "_-.")
