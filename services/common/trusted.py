"""The files this project wrote itself: the only pickles it opens, the only artifacts a request
may name.

Stable-Baselines3 zips, d3rlpy models and other pickle-based formats run code when loaded, so
a process loads one only when the project itself saved it: whenever llmrl writes a checkpoint
(`llmrl.learner.versions.save_version`, `publish`, a bare SB3 `.zip`) it records the SHA-256
digest of each pickle and of the checkpoint's metadata (not of its weights) as a marker under
its home:

    $LLMRL_HOME/trusted/<sha256>          (the file's first path and time, for audits)

and every load of such a format goes through `open_verified`: the file is opened once, its
bytes hashed as they are read, and the loader is handed those bytes (a file object), never
the path, so what is loaded is exactly what was checked (a file swapped after the check, even
for one of the same size and modification time, is not what loads). A marker is
content-addressed, so a copy of a saved file (a recipe's `models/<name>.zip`) is trusted too,
and anything else (a file a client placed, a model from another machine) is refused until the
user who runs llmrl vouches for it (`llmrl trust PATH`). Pickles load only from the artifact
store, `llmrl.common.paths.artifact_roots` (LLMRL_HOME, LLMRL_ARTIFACT_ROOTS, the process's own
output folders), never from a data root, which others may be able to write.

`resolve_artifact` is the one place a reference a request names (a policy spec's `model` or
`checkpoint`, a job's `init_from`...) becomes a path. A reference is a run's id and a file of
that run, `run:<run_id>/<name>/...` (e.g. `run:3f2a9c1b/models/SimpleDoorKey-never_ask.zip`,
the names `GET /runs/{id}/artifacts` lists, or a checkpoint folder such as
`run:<id>/checkpoints/pretrain/ellm`: each part a plain name, joined to the folder the run's
store records), or a path under the artifact roots (`llmrl.common.paths.artifact_roots`). Either
way it must be a file the project recorded, or a checkpoint version (or line) whose metadata
it recorded. Every refusal reads the same whether the path is missing, elsewhere or foreign,
so an error never tells a caller whether some file exists.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from llmrl.common.config import home_dir

TRUSTED_DIR = "trusted"
RUN_PREFIX = "run:"  # `run:<run_id>/<file of that run>`
METADATA_FILE = "llmrl_checkpoint.json"  # a checkpoint version's metadata (learner.versions)
# what is loaded on trust, so recorded: pickle-based formats (SB3 zips, d3rlpy's .d3) and the
# checkpoint metadata `resolve_artifact` vouches for a folder by; weights (safetensors, torch
# files read with weights_only=True) hold no code and can be GBs: never hashed
_TRUSTED_SUFFIXES = (".zip", ".d3", ".pkl", ".pickle")
_CHUNK = 1 << 20
_IN_MEMORY = 256 << 20  # a verified file up to this size is held in memory, else in a temp file

# (path, device, inode, size, mtime, ctime) -> sha256, per process: `os.utime` restores an
# mtime, never a ctime, and a file put in place by rename is another inode. Only the checks of
# references use it; a load hashes the very bytes it loads (`open_verified`)
_DigestKey = tuple[str, int, int, int, int, int]
_digests: dict[_DigestKey, str] = {}
_digests_lock = threading.Lock()


class UntrustedArtifactError(ValueError):
    """A reference names nothing this project saved (or a file it did not write); names the
    field. The message is the same whatever the path holds."""

    def __init__(self, field: str, reference: object) -> None:
        self.reason = (
            f"{str(reference)[:200]!r} names no artifact llmrl saved under this LLMRL_HOME; "
            "name a file or checkpoint a run or job wrote (run:<run_id>/<file>, e.g. a run's "
            "models/ or checkpoints/ folder, a checkpoint line or one of its versions). A "
            "model from elsewhere is loaded only after the user who runs llmrl vouches for it: "
            "`llmrl trust PATH`"
        )
        super().__init__(f"{field}: {self.reason}")
        self.field = field


def trusted_dir() -> Path:
    return home_dir() / TRUSTED_DIR


def digest(path: str | Path) -> str:
    """The SHA-256 of file `path` (remembered per inode, size, modification and change time)."""
    path = Path(path)
    info = path.stat()
    key = (
        str(path.resolve()),
        info.st_dev,
        info.st_ino,
        info.st_size,
        info.st_mtime_ns,
        info.st_ctime_ns,
    )
    with _digests_lock:
        known = _digests.get(key)
    if known is not None:
        return known
    sha = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(_CHUNK):
            sha.update(block)
    value = sha.hexdigest()
    with _digests_lock:
        _digests[key] = value
    return value


def record(path: str | Path) -> str:
    """Mark file `path` as written by the project; returns its digest."""
    path = Path(path)
    return record_digest(digest(path), path)


def record_digest(value: str, path: str | Path) -> str:
    """Mark the content of SHA-256 `value` (bytes the project itself wrote, now at `path`) as
    the project's: for a writer that hashed what it wrote, so that no later read of `path`
    (which another could have swapped meanwhile) decides what is trusted."""
    from llmrl.common.safe_write import write_text

    marker = trusted_dir() / value
    if not marker.exists():
        marker.parent.mkdir(parents=True, exist_ok=True)
        audit = {"path": str(Path(path).resolve()), "recorded": time.time()}
        write_text(marker, json.dumps(audit))  # a fresh file renamed onto it: through no link
    return value


def record_tree(folder: str | Path) -> list[str]:
    """Mark every file under `folder` that is loaded on trust (a checkpoint version being
    saved: its pickles and metadata)."""
    return [record(path) for path in _files(Path(folder))]


def is_recorded(path: str | Path) -> bool:
    try:
        return (trusted_dir() / digest(path)).is_file()
    except OSError:
        return False


def open_verified(path: str | Path, field: str = "checkpoint") -> io.BufferedIOBase:
    """The bytes of file `path` as a file object positioned at 0, read from one open of the
    file and hashed as read, when their digest is recorded and the file lies in the artifact
    store (`llmrl.common.paths.artifact_roots`: never a data root); else
    UntrustedArtifactError naming `field` and the file. Load every pickle-based format from
    what this returns (SB3's `load`, `set_parameters`, `load_replay_buffer` take it), never
    from the path again: a file swapped after the check is then not what loads."""
    from llmrl.common.paths import artifact_roots

    given = Path(path)
    try:
        resolved = given.resolve(strict=True)
    except (OSError, RuntimeError, ValueError):  # missing, a link loop, a NUL byte
        raise UntrustedArtifactError(field, given) from None
    if not any(resolved.is_relative_to(root.resolve()) for root in artifact_roots()):
        raise UntrustedArtifactError(field, given)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(resolved, flags)
    except OSError:
        raise UntrustedArtifactError(field, given) from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise UntrustedArtifactError(field, given)
        copy: io.BufferedIOBase = (
            io.BytesIO() if info.st_size <= _IN_MEMORY else tempfile.TemporaryFile()  # noqa: SIM115
        )
        sha = hashlib.sha256()
        while block := handle.read(_CHUNK):
            sha.update(block)
            copy.write(block)
    if not (trusted_dir() / sha.hexdigest()).is_file():
        copy.close()
        raise UntrustedArtifactError(field, given)
    copy.seek(0)
    return copy


def require_file(path: str | Path, field: str = "checkpoint") -> Path:
    """`path` when `open_verified` would load it (a recorded file in the artifact store),
    else UntrustedArtifactError naming `field`: a check ahead of time (e.g. before a long
    job starts); the load itself must still go through `open_verified`."""
    open_verified(path, field).close()
    return Path(path)


def resolve_artifact(reference: str | Path, field: str) -> Path:
    """The path of the saved artifact `reference` names (a file the project recorded, or a
    checkpoint version or line with recorded metadata), inside the artifact roots (never a
    data root); else UntrustedArtifactError naming `field` (one message for missing,
    elsewhere and foreign)."""
    from llmrl.common.paths import PathOutsideRootsError, artifact_roots, confine

    if not isinstance(reference, (str, Path)) or not str(reference).strip():
        raise UntrustedArtifactError(field, reference)
    named = _run_file(str(reference), field) if str(reference).startswith(RUN_PREFIX) else None
    try:
        path = confine(named or reference, field, roots=artifact_roots())
    except PathOutsideRootsError:
        raise UntrustedArtifactError(field, reference) from None
    if path.is_file() and is_recorded(path):
        return path
    if path.is_dir() and _is_saved_checkpoint(path):
        return path
    raise UntrustedArtifactError(field, reference)


def _run_file(reference: str, field: str) -> Path:
    """`run:<run_id>/<part>/...` joined to that run's folder (an embedded run's, from the
    catalog, or a service run's, from the orchestrator's store under LLMRL_HOME)."""
    from llmrl.common.names import is_safe_name

    run_id, _, rest = reference.removeprefix(RUN_PREFIX).partition("/")
    parts = rest.split("/")
    if not is_safe_name(run_id) or not all(is_safe_name(part) for part in parts):
        raise UntrustedArtifactError(field, reference)
    folder = _run_folder(run_id)
    if folder is None:
        raise UntrustedArtifactError(field, reference)
    return Path(folder, *parts)


def _run_folder(run_id: str) -> str | None:
    # imported here: loading a trusted file seldom needs the run index (SQLite)
    from llmrl.common import catalog
    from llmrl.common.store import RunStore

    entry = catalog.find(run_id)
    if entry is not None:
        return str(entry["out_dir"])
    store_path = catalog.orchestrator_store_path()
    if store_path is None:
        return None
    store = RunStore(store_path)
    try:
        run = store.get_run(run_id, with_phases=False)
    finally:
        store.close()
    return run.out_dir if run is not None else None


def _is_saved_checkpoint(folder: Path) -> bool:
    """A version directory whose metadata the project recorded, or a line holding one."""
    if (folder / METADATA_FILE).is_file():
        return is_recorded(folder / METADATA_FILE)
    try:
        versions = [child for child in folder.iterdir() if child.is_dir()]
    except OSError:
        return False
    return any(
        (child / METADATA_FILE).is_file() and is_recorded(child / METADATA_FILE)
        for child in versions
        if not child.name.startswith(".")
    )


def _files(folder: Path) -> Iterable[Path]:
    for path in sorted(folder.rglob("*")):
        if path.is_file() and (path.suffix in _TRUSTED_SUFFIXES or path.name == METADATA_FILE):
            yield path
