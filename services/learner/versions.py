"""Versioned checkpoints: every algorithm's trained artifacts, saved and found the same way.

A checkpoint *line* is a directory whose children are versions; each version directory holds
what the algorithm wrote (an SB3 `model.zip`, a peft LoRA adapter, a d3rlpy model file...) and
`llmrl_checkpoint.json` (which algorithm wrote it, when, with which settings, what came out):

    $LLMRL_HOME/<kind>/<name...>/<version>/        e.g. adapters/smollm2/sft/2/ (LoRA adapters:
        llmrl_checkpoint.json                          the layout the LLM gateway reads),
        <the algorithm's files>                        policies/doorkey/1/ (RL policies)

A line may also live anywhere else (a run's output folder). Versions are written beside their
final place and renamed into it, so a reader never sees half a version; a version written again
(a re-run of an interrupted phase) replaces the old one whole.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmrl.common import trusted
from llmrl.common.config import home_dir

METADATA_FILE = "llmrl_checkpoint.json"


@dataclass(frozen=True)
class Checkpoint:
    """One saved version: its directory, the algorithm that wrote it (and loads it), its
    version name and metadata (`config`: the training settings, `result`: what came out)."""

    path: Path
    algorithm: str
    version: str
    metadata: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def read(cls, path: str | Path) -> Checkpoint:
        """The checkpoint in version directory `path` (its metadata, where it has some)."""
        path = Path(path)
        if not path.is_dir():
            raise FileNotFoundError(f"checkpoint: no version directory {path}")
        metadata_file = path / METADATA_FILE
        metadata = json.loads(metadata_file.read_text()) if metadata_file.is_file() else {}
        return cls(path, str(metadata.get("algorithm", "")), path.name, metadata)

    @property
    def config(self) -> dict[str, Any]:
        return dict(self.metadata.get("config", {}))

    @property
    def result(self) -> dict[str, Any]:
        return dict(self.metadata.get("result", {}))


def save_version(
    target: str | Path,
    write: Callable[[Path], Any],
    algorithm: str,
    config: dict[str, Any] | None = None,
    result: dict[str, Any] | None = None,
) -> Checkpoint:
    """Save one version into directory `target` (its name is the version): `write(dir)` puts
    the algorithm's files into a staging directory beside it, the metadata is added, then the
    staging directory is renamed to `target` (replacing an earlier `target` whole)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        write(staging)
        metadata = {
            "algorithm": algorithm,
            "version": target.name,
            "created": time.time(),
            "config": config or {},
            "result": result or {},
        }
        (staging / METADATA_FILE).write_text(json.dumps(metadata, indent=2, default=str) + "\n")
        trusted.record_tree(staging)  # only files the project wrote are ever loaded back
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return Checkpoint.read(target)


class Versions:
    """A checkpoint line: the versions saved under one directory.

    Version names are free (`^[A-Za-z0-9_.-]+$`); numbered ones ("1", "2"...) order by number
    and come after named ones, so `latest` is the highest number (or, with no numbered
    version, the newest named one) and `next_version` is one more than the highest number.
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"Versions({str(self.root)!r})"

    def path(self, version: str | int) -> Path:
        version = str(version)
        if not version or version.startswith(".") or "/" in version or "\\" in version:
            raise ValueError(f"version: {version!r} is not a version name (e.g. '1', 'best')")
        return self.root / version

    def versions(self) -> list[str]:
        """Every saved version, oldest first (numbered ones by number, after named ones)."""
        if not self.root.is_dir():
            return []
        found = [p for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")]
        return [p.name for p in sorted(found, key=_order)]

    def latest_version(self) -> str | None:
        versions = self.versions()
        return versions[-1] if versions else None

    def latest(self) -> Checkpoint:
        version = self.latest_version()
        if version is None:
            raise FileNotFoundError(f"checkpoint: no versions saved under {self.root}")
        return Checkpoint.read(self.root / version)

    def next_version(self) -> str:
        numbers = [int(v) for v in self.versions() if v.isdigit()]
        return str(max(numbers, default=0) + 1)

    def get(self, version: str | int) -> Checkpoint:
        return Checkpoint.read(self.path(version))

    def save(
        self,
        write: Callable[[Path], Any],
        algorithm: str,
        version: str | int | None = None,
        config: dict[str, Any] | None = None,
        result: dict[str, Any] | None = None,
    ) -> Checkpoint:
        """Save a version (`version`, or the next number) with `save_version`."""
        target = self.path(self.next_version() if version is None else version)
        return save_version(target, write, algorithm, config, result)


def home_versions(kind: str, *names: str) -> Versions:
    """The line `$LLMRL_HOME/<kind>/<names...>/` (e.g. ("policies", "doorkey"))."""
    return Versions(home_dir().joinpath(kind, *names))


def as_versions(line: Versions | str | Path) -> Versions:
    return line if isinstance(line, Versions) else Versions(line)


def find_checkpoint(path: str | Path | Checkpoint) -> Checkpoint:
    """The checkpoint at `path`: a version directory, or a line (its latest version)."""
    if isinstance(path, Checkpoint):
        return path
    path = Path(path)
    if (path / METADATA_FILE).is_file():
        return Checkpoint.read(path)
    line = Versions(path)
    if line.versions():
        return line.latest()
    return Checkpoint.read(path)  # a version directory without metadata (or a clear error)


def publish(source: str | Path, destination: str | Path, field: str = "model_path") -> Path:
    """Copy a checkpoint's file to `destination` too, a fixed path its users already know
    (e.g. a recipe's `models/<name>.zip`); an earlier file there is replaced atomically. A copy,
    not a link: whoever rewrites the fixed path never alters a saved version. What is copied
    are the bytes of `source` whose digest the project recorded (`trusted.open_verified`), so
    a file swapped in meanwhile is never vouched for by its copy. The copy is written through
    no link planted at `destination` or beside it, into a folder that really lies in the
    artifact store (where alone it can be loaded from; else `PathOutsideRootsError` naming
    `field`): `llmrl.common.safe_write`, and the digest recorded is that of the bytes written."""
    import hashlib

    from llmrl.common.paths import artifact_roots
    from llmrl.common.safe_write import atomic_writer

    source, destination = Path(source), Path(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    sha = hashlib.sha256()
    with (
        trusted.open_verified(source, "checkpoint") as saved,
        atomic_writer(destination, field=field, roots=artifact_roots()) as copy,
    ):
        while block := saved.read(1 << 20):
            sha.update(block)
            copy.write(block)
        trusted.record_digest(sha.hexdigest(), destination)  # so its drivers may load it
    return destination


def _order(path: Path) -> tuple[int, int, float]:
    if path.name.isdigit():
        return (1, int(path.name), 0.0)
    metadata = path / METADATA_FILE
    return (0, 0, (metadata if metadata.exists() else path).stat().st_mtime)
