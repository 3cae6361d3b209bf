"""Writing a file in a folder a request named, never through a link planted there.

`llmrl.common.paths.confine` checks the folder a request names (a dataset's `out_dir`, a job's
`model_path`), not the files then written in it: a link planted at a file's final name
(`<out_dir>/dataset.stats.json -> ~/.bashrc`) or at a temporary name beside it
(`<name>.jsonl.tmp`) would have the service write or truncate whatever the link points to.
Every file a service writes under such a folder goes through `atomic_writer` (or
`write_bytes` / `write_text`):

1. the parent folder is opened once (`O_DIRECTORY`), and with `roots` the real path of that
   open folder (so a link swapped in after the request was checked counts) must lie under one
   of them, else `PathOutsideRootsError` naming `field`;
2. a fresh file `.<name>.<random>.tmp` is created in that open folder with
   `O_CREAT|O_EXCL|O_NOFOLLOW`: never an existing file, never a link;
3. it is written and fsynced, then renamed onto the final name (`os.replace`, which replaces
   a link there rather than following it) and the folder fsynced.

So the file lands as a regular file at its name, whole or not at all, and nothing outside is
opened. Without `roots` (a service's own folder, e.g. its job records) only steps 2-3 apply.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from llmrl.common.paths import PathOutsideRootsError

_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_ATTEMPTS = 16  # fresh temporary names tried (a clash means someone planted that very name)


@contextlib.contextmanager
def atomic_writer(
    path: str | Path,
    *,
    field: str = "path",
    roots: Iterable[Path] | None = None,
    mode: int = 0o666,
) -> Iterator[BinaryIO]:
    """A binary file to write `path`'s new content into (module docstring): on a clean exit
    it replaces `path`; on an error nothing changes at `path` and the temporary file goes.
    `mode` is filtered by the umask, as `open` does."""
    path = Path(path)
    name = path.name
    if name in ("", ".", ".."):
        raise IsADirectoryError(f"{path}: not a file name")
    folder = _open_folder(path.parent, field, roots)
    try:
        temporary, descriptor = _create_temporary(folder, name, mode)
        try:
            with os.fdopen(descriptor, "wb") as handle:
                yield handle  # type: ignore[misc]
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=folder)
            raise
        with contextlib.suppress(OSError):  # not every file system syncs a folder
            os.fsync(folder)
    finally:
        os.close(folder)


def write_bytes(
    path: str | Path, data: bytes, *, field: str = "path", roots: Iterable[Path] | None = None
) -> Path:
    """`data` into file `path`, atomically and through no link (`atomic_writer`)."""
    with atomic_writer(path, field=field, roots=roots) as handle:
        handle.write(data)
    return Path(path)


def write_text(
    path: str | Path,
    text: str,
    *,
    field: str = "path",
    roots: Iterable[Path] | None = None,
    encoding: str = "utf-8",
) -> Path:
    """`text` into file `path`, atomically and through no link (`atomic_writer`)."""
    return write_bytes(path, text.encode(encoding), field=field, roots=roots)


def _open_folder(folder: Path, field: str, roots: Iterable[Path] | None) -> int:
    descriptor = os.open(folder, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
    if roots is None:
        return descriptor
    real = _real_path(descriptor, folder)
    if not any(real.is_relative_to(Path(root).resolve()) for root in roots):
        os.close(descriptor)
        raise PathOutsideRootsError(
            field,
            f"{str(folder)[:200]!r} leads outside the folders this service may use (a link "
            "in the path?); nothing was written",
        )
    return descriptor


def _real_path(descriptor: int, folder: Path) -> Path:
    """Where the open folder really is (not where its name points now)."""
    with contextlib.suppress(OSError):
        return Path(os.readlink(f"/proc/self/fd/{descriptor}"))  # Linux
    try:  # macOS
        import fcntl

        raw = fcntl.fcntl(descriptor, fcntl.F_GETPATH, bytes(1024))
        return Path(os.fsdecode(raw.split(b"\0", 1)[0]))
    except (ImportError, AttributeError, OSError):
        return folder.resolve()


def _create_temporary(folder: int, name: str, mode: int) -> tuple[str, int]:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC
    stem = f".{name[:200]}"
    for attempt in range(_ATTEMPTS):
        temporary = f"{stem}.{secrets.token_hex(6)}.tmp"
        try:
            return temporary, os.open(temporary, flags, mode, dir_fd=folder)
        except FileExistsError:
            if attempt == _ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")
