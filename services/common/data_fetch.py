"""Get a benchmark dataset into a folder, every file verified (`llmrl data get NAME`).

A dataset (`llmrl.common.datasets.Dataset`) lists its files with their sizes and SHA-256. Each
file comes from an http(s) base URL (the file's relative path appended) or from a local folder
laid out like the dataset, and is written to a temporary file beside its final name (created
exclusively, so no symlink planted there is followed) while its size and checksum are checked;
only a file that matches is renamed into place. A file already there with the right checksum is
kept. So a failed or interrupted run leaves the files it finished, verified, and nothing
half-written: running it again fetches only what is missing.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import shlex
import stat
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from email.message import Message
from pathlib import Path, PurePosixPath
from typing import IO, BinaryIO

from llmrl.common.datasets import DataFile, Dataset, default_location
from llmrl.common.paths import DATA_ROOTS_ENV, data_roots

ALLOWED_SCHEMES = ("http", "https")
TIMEOUT_S = 60.0  # per blocking read or connect: a stalled server fails instead of hanging
CHUNK = 1 << 16
FILE_MODE = 0o644  # public data; mkstemp's 0600 would hide it from other users of a shared home


class FetchError(Exception):
    """A dataset could not be fetched; the message names the file and what went wrong."""


@dataclass(frozen=True)
class FetchReport:
    """What `fetch_dataset` did: the destination, and which files it wrote or found there."""

    dataset: Dataset
    destination: Path
    fetched: tuple[str, ...]
    present: tuple[str, ...]


Source = str | Path  # an http(s) base URL, or a local folder laid out like the dataset
Progress = Callable[[str], None]


def resolve_source(dataset: Dataset, source: str | None) -> Source:
    """The base URL or local folder to read `dataset` from: `source` (--from) when given, else
    the dataset's own; a FetchError when there is none or it is of a kind not accepted."""
    if source is None:
        if dataset.source is None:
            raise FetchError(
                f"{dataset.name} cannot be downloaded file by file: it is published as a whole "
                f"by {dataset.source_note}. Download and unpack it, then give the unpacked "
                f"folder with --from DIR (or serve that folder and give its http(s) URL)"
            )
        source = dataset.source
    scheme = urllib.parse.urlsplit(source).scheme.lower()
    if scheme in ALLOWED_SCHEMES:
        return source
    # "C:" style drive letters aside (one letter), anything with a scheme is a URL we refuse
    if "://" in source or (len(scheme) > 1 and source.startswith(f"{scheme}:")):
        raise FetchError(
            f"--from {source!r}: only http:// or https:// URLs and local folders are accepted"
        )
    folder = Path(source).expanduser()
    if not folder.is_dir():
        raise FetchError(
            f"--from {source!r} is neither an http(s) URL nor an existing folder "
            f"(a local copy must be a folder laid out like the dataset)"
        )
    return folder.resolve()


def fetch_dataset(
    dataset: Dataset,
    source: str | None = None,
    destination: Path | None = None,
    progress: Progress | None = None,
) -> FetchReport:
    """Write every file of `dataset` into `destination` (default: `default_location`), read
    from `source` (see `resolve_source`), each verified; files already there and right are
    kept. `progress` gets one line per file. Stops at the first file that fails (FetchError)."""
    origin = resolve_source(dataset, source)
    target = (destination or default_location(dataset)).expanduser().resolve()
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise FetchError(f"cannot create the destination {target}: {exc}") from None
    say = progress or (lambda _line: None)
    fetched: list[str] = []
    present: list[str] = []
    for file in dataset.files:
        try:
            wrote = _fetch_one(origin, target, file)
        except FetchError as exc:
            kept = fetched + present
            done = (
                f" (the files before it are in place, verified: {', '.join(kept)})" if kept else ""
            )
            raise FetchError(
                f"{dataset.name}: {file.path} from {_location(origin, file.path)}: {exc}; "
                f"nothing was written at {target / file.path}{done}"
            ) from None
        if wrote:
            fetched.append(file.path)
            say(f"fetched          {file.path} ({file.size:,} bytes, checksum verified)")
        else:
            present.append(file.path)
            say(f"already present  {file.path} (checksum verified)")
    return FetchReport(dataset, target, tuple(fetched), tuple(present))


def _fetch_one(origin: Source, destination: Path, file: DataFile) -> bool:
    """Put `file` into `destination` unless a verified copy is there: True when it was
    written, False when it was already present; a FetchError saying what went wrong."""
    try:
        final = _final_path(destination, file.path)
        if _verified_copy(final, file.size, file.sha256):
            return False
        with _open_source(origin, file.path) as stream:
            _write_verified(stream, final, file.size, file.sha256)
    except OSError as exc:  # the destination: permissions, a full disk, a folder at that name
        raise FetchError(f"could not write it: {exc}") from None
    return True


def _final_path(destination: Path, relative: str) -> Path:
    """Where file `relative` goes, its folders created; refuses a path that would leave
    `destination` (an absolute or `..` path, or a folder there that links elsewhere)."""
    parts = PurePosixPath(relative)
    if parts.is_absolute() or ".." in parts.parts or not parts.parts:
        raise FetchError(f"{relative!r} is not a relative path inside the dataset")
    folder = destination
    for part in parts.parts[:-1]:  # one level at a time: nothing is created through a link out
        folder = folder / part
        folder.mkdir(exist_ok=True)
        if not folder.resolve().is_relative_to(destination):
            raise FetchError(f"{relative}: its folder {folder} links outside {destination}")
    return folder / parts.name


def _verified_copy(path: Path, size: int, sha256: str) -> bool:
    """Whether `path` is a regular file (not a symlink: it is not followed) of this size and
    checksum, i.e. a copy a previous run left that need not be fetched again."""
    try:
        # O_NONBLOCK: a FIFO planted there is not waited on (and fails the regular-file test)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:  # absent, or a symlink (ELOOP): to be written
        return False
    with open(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size != size:
            return False
        digest = hashlib.sha256()
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest() == sha256


def _location(origin: Source, relative: str) -> str:
    """The URL or local path file `relative` is read from."""
    if isinstance(origin, Path):
        return str(origin.joinpath(*PurePosixPath(relative).parts))
    return origin.rstrip("/") + "/" + urllib.parse.quote(relative)


@contextlib.contextmanager
def _open_source(origin: Source, relative: str) -> Iterator[BinaryIO]:
    """A binary stream of file `relative` from a local folder or over http(s)."""
    location = _location(origin, relative)
    if isinstance(origin, Path):
        path = Path(location)
        if not path.is_file():
            raise FetchError(f"not found in the local folder {origin}")
        try:
            handle = path.open("rb")
        except OSError as exc:
            raise FetchError(f"could not read it: {exc}") from None
        with handle:
            yield handle
        return
    try:
        response = _opener().open(location, timeout=TIMEOUT_S)
    except urllib.error.HTTPError as exc:
        raise FetchError(f"the server answered HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", exc)
        raise FetchError(f"could not connect: {reason}") from None
    with response:
        yield response


class _HttpOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only to another http(s) URL (urllib would also follow one to ftp)."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: Message,
        newurl: str,
    ) -> urllib.request.Request | None:
        if urllib.parse.urlsplit(newurl).scheme.lower() not in ALLOWED_SCHEMES:
            raise urllib.error.HTTPError(newurl, code, f"redirect to {newurl} refused", headers, fp)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(_HttpOnlyRedirects)


def _write_verified(stream: BinaryIO, final: Path, size: int, sha256: str) -> None:
    """Copy `stream` to a temporary file beside `final`, checking its size and SHA-256 as it
    goes, and rename it to `final` only when both match; the temporary file never stays."""
    announced = _announced_length(stream)
    if announced is not None and announced != size:
        raise FetchError(f"expected {size:,} bytes, the server announces {announced:,}")
    # mkstemp creates the file with O_EXCL under a fresh random name: nothing planted at that
    # name (or at `final`) is followed, and os.replace swaps a symlink at `final` itself out
    fd, temporary = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".part", dir=final.parent)
    try:
        with open(fd, "wb") as out:
            got, digest = _copy_at_most(stream, out, size)
            if got > size:
                raise FetchError(
                    f"expected {size:,} bytes with SHA-256 {sha256}, got more than {size:,} bytes"
                )
            if got != size or digest != sha256:
                raise FetchError(
                    f"expected {size:,} bytes with SHA-256 {sha256}, "
                    f"got {got:,} bytes with SHA-256 {digest}"
                )
            os.fchmod(out.fileno(), FILE_MODE)
            out.flush()
            os.fsync(out.fileno())  # the data is on disk before the name points at it
        os.replace(temporary, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def _announced_length(stream: BinaryIO) -> int | None:
    """The Content-Length an http response announces, None for a local file or none sent."""
    headers = getattr(stream, "headers", None)
    value = headers.get("Content-Length") if headers is not None else None
    try:
        return int(value) if value is not None else None
    except ValueError:
        raise FetchError(f"the server sent an invalid Content-Length {value!r}") from None


def _copy_at_most(stream: BinaryIO, out: BinaryIO, size: int) -> tuple[int, str]:
    """Copy `stream` into `out` up to `size` + 1 bytes (one more tells a longer file apart
    without reading all of it); the byte count and the SHA-256 of what was copied."""
    digest = hashlib.sha256()
    got = 0
    while got <= size:
        try:
            chunk = stream.read(min(CHUNK, size + 1 - got))
        except http.client.IncompleteRead as exc:  # the server closed before Content-Length
            chunk = exc.partial
            digest.update(chunk)
            got += len(chunk)
            break
        except OSError as exc:  # a timeout or a reset mid-transfer
            raise FetchError(
                f"the transfer failed after {got:,} of {size:,} bytes: {exc}"
            ) from None
        if not chunk:
            break
        digest.update(chunk)
        got += len(chunk)
        if got <= size:
            out.write(chunk)
    return got, digest.hexdigest()


def variable_advice(dataset: Dataset, destination: Path) -> list[str]:
    """What a user must set, if anything, for llmrl to read `dataset` from `destination`."""
    destination = destination.resolve()
    configured = os.environ.get(dataset.env_var)
    pointed = Path(configured).expanduser().resolve() if configured else None
    if destination == default_location(dataset).resolve():
        lines = [
            f"Written to the default location {destination}: llmrl finds it there, "
            f"no variable is needed."
        ]
        if pointed is not None and pointed != destination:
            lines.append(
                f"But ${dataset.env_var} is set (to {configured}) and takes precedence: "
                f"unset it to use this copy (unset {dataset.env_var})."
            )
        return lines
    if pointed == destination:
        return [f"${dataset.env_var} already points at {destination}: nothing to set."]
    return [
        "Point llmrl at this copy:",
        f"export {dataset.env_var}={shlex.quote(str(destination))}",
        *_roots_advice(destination),
    ]


def _roots_advice(destination: Path) -> list[str]:
    """A line when services would refuse to read `destination`: with LLMRL_DATA_ROOTS unset the
    dataset's variable makes its folder a root, but a set LLMRL_DATA_ROOTS replaces that."""
    if not os.environ.get(DATA_ROOTS_ENV):
        return []
    if any(destination.is_relative_to(root) for root in data_roots()):
        return []
    return [
        f"${DATA_ROOTS_ENV} is set and does not cover it: add {destination} to it too "
        f"(services read data only under LLMRL_HOME and those folders)."
    ]


def incomplete_files(dataset: Dataset, folder: Path) -> list[str]:
    """The files of `dataset` absent from `folder` or of the wrong size (a quick look: sizes
    only, no checksums), for `llmrl data list`."""
    missing = []
    for file in dataset.files:
        path = folder.joinpath(*PurePosixPath(file.path).parts)
        if not path.is_file() or path.stat().st_size != file.size:
            missing.append(file.path)
    return missing
