"""`llmrl data get`: a dataset fetched over a real local HTTP server or copied from a folder,
every file verified, nothing half-written on failure; and where `dataset_dir` finds a copy.

The datasets here are small fakes built in tmp_path with their own checksums: no real benchmark
data is read or needed."""

from __future__ import annotations

import hashlib
import http.server
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

from llmrl.cli import main
from llmrl.common import datasets
from llmrl.common.data_fetch import FetchError, fetch_dataset, variable_advice
from llmrl.common.datasets import DataFile, Dataset, dataset_dir, default_location

CONTENTS = {
    "clevr_robot.npy": b"fake clevr robot trajectories " * 40,
    "meta_world.npy": b"fake meta world trajectories " * 25,
    "episodes/train/Scene_0_int.json.gz": bytes(range(256)) * 3,
}


def fake_dataset(name: str = "kalm", source: str | None = None) -> Dataset:
    """A dataset of CONTENTS' files with their real sizes and checksums."""
    files = tuple(
        DataFile(path, len(data), hashlib.sha256(data).hexdigest())
        for path, data in CONTENTS.items()
    )
    return Dataset(
        name=name,
        env_var=f"LLMRL_{name.upper()}_DATA",
        marker="clevr_robot.npy",
        files=files,
        source=source,
        source_note="a fake dataset built by the test",
    )


def write_tree(folder: Path, contents: dict[str, bytes]) -> Path:
    for path, data in contents.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_bytes(data)
    return folder


@dataclass
class Server:
    """A served folder: its base URL, the paths requested, and per-path misbehaviour."""

    url: str
    root: Path
    requests: list[str] = field(default_factory=list)
    # path -> ("status", code) | ("extra", bytes sent past the file, no Content-Length)
    #       | ("short", bytes announced but never sent)
    #       | ("redirect", 0) to redirects[path]
    faults: dict[str, tuple[str, int]] = field(default_factory=dict)
    redirects: dict[str, str] = field(default_factory=dict)


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    """A ThreadingHTTPServer on 127.0.0.1 serving tmp_path/served (the fake dataset)."""
    monkeypatch.setenv("no_proxy", "127.0.0.1")  # a proxy configured here must not intercept
    root = write_tree(tmp_path / "served", CONTENTS)
    state = Server(url="", root=root)

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, format: str, *args: object) -> None:  # quiet test output
            pass

        def do_GET(self) -> None:
            path = self.path.lstrip("/")
            state.requests.append(path)
            kind, amount = state.faults.get(path, ("", 0))
            if kind == "status":
                self.send_error(amount)
                return
            if kind == "redirect":
                self.send_response(302)
                self.send_header("Location", state.redirects[path])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if kind in ("extra", "short"):
                self.send_raw((root / path).read_bytes(), kind, amount)
                return
            super().do_GET()

        def send_raw(self, data: bytes, kind: str, amount: int) -> None:
            self.send_response(200)
            if kind == "short":  # announces more than it sends, then closes
                self.send_header("Content-Length", str(len(data) + amount))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data + (b"x" * amount if kind == "extra" else b""))
            self.close_connection = True

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}/"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def assert_complete(folder: Path) -> None:
    for path, data in CONTENTS.items():
        assert (folder / path).read_bytes() == data


def leftovers(folder: Path) -> list[str]:
    """Temporary files a fetch left behind."""
    return sorted(p.name for p in folder.rglob("*.part"))


def test_a_dataset_is_fetched_over_http_into_a_fresh_folder(server: Server, tmp_path: Path):
    dataset = fake_dataset()
    lines: list[str] = []
    report = fetch_dataset(dataset, server.url, tmp_path / "out", progress=lines.append)
    assert_complete(tmp_path / "out")
    assert report.fetched == tuple(CONTENTS) and report.present == ()
    assert len(lines) == len(CONTENTS) and all(line.startswith("fetched") for line in lines)
    advice = variable_advice(dataset, report.destination)
    assert f"export LLMRL_KALM_DATA={tmp_path / 'out'}" in advice
    assert not leftovers(tmp_path / "out")


def test_a_folder_outside_the_data_roots_is_said_to_need_adding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """With LLMRL_DATA_ROOTS set, the dataset's variable no longer makes its folder readable
    by services: the advice says to add it."""
    monkeypatch.setenv("LLMRL_DATA_ROOTS", str(tmp_path / "roots"))
    advice = variable_advice(fake_dataset(), tmp_path / "out")
    assert any("LLMRL_DATA_ROOTS" in line and str(tmp_path / "out") in line for line in advice)
    monkeypatch.setenv("LLMRL_DATA_ROOTS", str(tmp_path))
    assert not any(
        "LLMRL_DATA_ROOTS" in line for line in variable_advice(fake_dataset(), tmp_path / "out")
    )


def test_a_dataset_is_copied_from_a_local_folder(tmp_path: Path):
    source = write_tree(tmp_path / "unpacked", CONTENTS)
    report = fetch_dataset(fake_dataset(), str(source), tmp_path / "out")
    assert_complete(tmp_path / "out")
    assert report.fetched == tuple(CONTENTS)


def test_a_file_missing_from_the_local_folder_is_named(tmp_path: Path):
    source = write_tree(tmp_path / "unpacked", CONTENTS)
    (source / "meta_world.npy").unlink()
    with pytest.raises(FetchError, match=r"meta_world\.npy .*not found in the local folder"):
        fetch_dataset(fake_dataset(), str(source), tmp_path / "out")
    assert not (tmp_path / "out" / "meta_world.npy").exists()


def refused(server: Server, out: Path, path: str) -> str:
    """Fetch the fake dataset, expecting a refusal at `path`: the message; checks that nothing
    is at `path`'s final name and no temporary file stayed."""
    with pytest.raises(FetchError) as caught:
        fetch_dataset(fake_dataset(), server.url, out)
    message = str(caught.value)
    assert path in message
    assert not (out / path).exists()
    assert not leftovers(out)
    return message


def test_a_truncated_file_is_refused(server: Server, tmp_path: Path):
    data = CONTENTS["meta_world.npy"]
    (server.root / "meta_world.npy").write_bytes(data[:-10])
    message = refused(server, tmp_path / "out", "meta_world.npy")
    assert f"expected {len(data):,} bytes" in message
    assert f"{len(data) - 10:,}" in message


def test_a_connection_closed_before_the_announced_length_is_refused(server: Server, tmp_path: Path):
    path = "episodes/train/Scene_0_int.json.gz"
    data = CONTENTS[path]
    (server.root / path).write_bytes(data[:100])
    server.faults[path] = ("short", len(data) - 100)  # announces the right size, sends 100
    message = refused(server, tmp_path / "out", path)
    assert "got 100 bytes" in message


def test_a_wrong_checksum_is_refused(server: Server, tmp_path: Path):
    data = bytearray(CONTENTS["clevr_robot.npy"])
    data[5] ^= 0xFF  # same size, one byte changed
    (server.root / "clevr_robot.npy").write_bytes(bytes(data))
    message = refused(server, tmp_path / "out", "clevr_robot.npy")
    expected = hashlib.sha256(CONTENTS["clevr_robot.npy"]).hexdigest()
    got = hashlib.sha256(bytes(data)).hexdigest()
    assert expected in message and got in message


def test_a_404_names_the_file(server: Server, tmp_path: Path):
    server.faults["meta_world.npy"] = ("status", 404)
    message = refused(server, tmp_path / "out", "meta_world.npy")
    assert "HTTP 404" in message
    assert "clevr_robot.npy" in message  # the file fetched before it is said to be in place
    assert (tmp_path / "out" / "clevr_robot.npy").read_bytes() == CONTENTS["clevr_robot.npy"]


def test_more_bytes_than_expected_are_refused_without_content_length(
    server: Server, tmp_path: Path
):
    server.faults["meta_world.npy"] = ("extra", 1_000_000)  # streamed, no length announced
    message = refused(server, tmp_path / "out", "meta_world.npy")
    assert "got more than" in message


def test_a_longer_file_announced_by_content_length_is_refused(server: Server, tmp_path: Path):
    (server.root / "meta_world.npy").write_bytes(CONTENTS["meta_world.npy"] + b"more")
    message = refused(server, tmp_path / "out", "meta_world.npy")
    assert "announces" in message


def test_a_redirect_is_followed_to_http_only(server: Server, tmp_path: Path):
    (server.root / "moved").mkdir()
    (server.root / "meta_world.npy").rename(server.root / "moved" / "meta_world.npy")
    server.faults["meta_world.npy"] = ("redirect", 0)
    server.redirects["meta_world.npy"] = server.url + "moved/meta_world.npy"
    fetch_dataset(fake_dataset(), server.url, tmp_path / "out")
    assert_complete(tmp_path / "out")
    server.redirects["meta_world.npy"] = "ftp://127.0.0.1/meta_world.npy"
    message = refused(server, tmp_path / "out2", "meta_world.npy")
    assert "redirect to ftp://127.0.0.1/meta_world.npy refused" in message


def test_a_second_run_keeps_the_files_already_present(server: Server, tmp_path: Path):
    dataset = fake_dataset()
    fetch_dataset(dataset, server.url, tmp_path / "out")
    assert len(server.requests) == len(CONTENTS)
    (tmp_path / "out" / "meta_world.npy").unlink()
    lines: list[str] = []
    report = fetch_dataset(dataset, server.url, tmp_path / "out", progress=lines.append)
    assert report.fetched == ("meta_world.npy",)
    assert set(report.present) == set(CONTENTS) - {"meta_world.npy"}
    assert len(server.requests) == len(CONTENTS) + 1  # only the missing file was asked for
    assert sum(line.startswith("already present") for line in lines) == len(CONTENTS) - 1


def test_a_wrong_file_already_there_is_replaced(server: Server, tmp_path: Path):
    out = write_tree(tmp_path / "out", {"clevr_robot.npy": b"stale"})
    report = fetch_dataset(fake_dataset(), server.url, out)
    assert "clevr_robot.npy" in report.fetched
    assert_complete(out)


def test_a_symlink_at_a_final_name_is_not_followed(server: Server, tmp_path: Path):
    outside = tmp_path / "precious.txt"
    outside.write_bytes(b"not to be overwritten")
    out = tmp_path / "out"
    out.mkdir()
    (out / "clevr_robot.npy").symlink_to(outside)
    fetch_dataset(fake_dataset(), server.url, out)
    assert outside.read_bytes() == b"not to be overwritten"
    assert not (out / "clevr_robot.npy").is_symlink()
    assert_complete(out)


def test_a_symlink_to_a_right_copy_is_not_taken_for_one(server: Server, tmp_path: Path):
    """A link is replaced, not read: what it points at is nothing the fetch vouches for."""
    elsewhere = write_tree(tmp_path / "elsewhere", CONTENTS)
    out = tmp_path / "out"
    out.mkdir()
    (out / "clevr_robot.npy").symlink_to(elsewhere / "clevr_robot.npy")
    report = fetch_dataset(fake_dataset(), server.url, out)
    assert "clevr_robot.npy" in report.fetched
    assert not (out / "clevr_robot.npy").is_symlink()


def test_a_folder_linking_outside_the_destination_is_refused(server: Server, tmp_path: Path):
    outside = tmp_path / "outside"
    outside.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / "episodes").symlink_to(outside)
    with pytest.raises(FetchError, match="links outside"):
        fetch_dataset(fake_dataset(), server.url, out)
    assert not any(outside.iterdir())  # not even a folder was created through the link


def test_a_fifo_at_a_final_name_is_replaced_not_waited_on(server: Server, tmp_path: Path):
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "meta_world.npy")
    fetch_dataset(fake_dataset(), server.url, out)
    assert_complete(out)


@pytest.mark.parametrize("source", ["file:///etc", "ftp://example.org/data", "data:text,x"])
def test_only_http_and_local_folders_are_accepted(source: str, tmp_path: Path):
    with pytest.raises(FetchError, match=r"only http:// or https:// URLs and local folders"):
        fetch_dataset(fake_dataset(), source, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_dataset_without_a_source_needs_from(tmp_path: Path):
    with pytest.raises(FetchError, match=r"a fake dataset built by the test.*--from DIR"):
        fetch_dataset(fake_dataset(source=None), None, tmp_path / "out")


def test_the_default_location_needs_no_variable(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("LLMRL_KALM_DATA", raising=False)
    dataset = fake_dataset()
    report = fetch_dataset(dataset, server.url)
    assert report.destination == tmp_path / "home" / "data" / "kalm"
    advice = " ".join(variable_advice(dataset, report.destination))
    assert "no variable is needed" in advice and "export" not in advice


# --- the command line ---------------------------------------------------------------------


def test_cli_refuses_an_unknown_dataset_naming_the_known_ones():
    result = CliRunner().invoke(main, ["data", "get", "nosuch"])
    assert result.exit_code != 0
    assert "housekeep" in result.output and "kalm" in result.output


def test_cli_housekeep_without_from_says_where_it_is_published(tmp_path: Path):
    result = CliRunner().invoke(main, ["data", "get", "housekeep", "--to", str(tmp_path)])
    assert result.exit_code != 0
    assert "github.com/yashkant/housekeep" in result.output
    assert "--from DIR" in result.output


def test_cli_fetches_a_served_copy(server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(datasets.DATASETS, "kalm", fake_dataset())
    monkeypatch.delenv("LLMRL_KALM_DATA", raising=False)
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["data", "get", "kalm", "--from", server.url, "--to", out])
    assert result.exit_code == 0, result.output
    assert_complete(out)
    assert f"export LLMRL_KALM_DATA={out}" in result.output
    for path in CONTENTS:
        assert f"fetched          {path}" in result.output
    again = CliRunner().invoke(main, ["data", "get", "kalm", "--from", server.url, "--to", out])
    assert again.exit_code == 0
    assert again.output.count("already present  ") == len(CONTENTS)


def test_cli_reports_a_failure_with_a_nonzero_exit(server: Server, tmp_path: Path, monkeypatch):
    monkeypatch.setitem(datasets.DATASETS, "kalm", fake_dataset())
    server.faults["clevr_robot.npy"] = ("status", 404)
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["data", "get", "kalm", "--from", server.url, "--to", out])
    assert result.exit_code == 1
    assert "clevr_robot.npy" in result.output and "HTTP 404" in result.output


def test_cli_lists_the_datasets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path))
    monkeypatch.delenv("LLMRL_HOUSEKEEP_DATA", raising=False)
    monkeypatch.setenv("LLMRL_KALM_DATA", str(tmp_path / "kalm-copy"))
    result = CliRunner().invoke(main, ["data", "list"])
    assert result.exit_code == 0, result.output
    assert "$LLMRL_HOUSEKEEP_DATA" in result.output
    assert "not found: get it with `llmrl data get housekeep`" in result.output
    assert f"{tmp_path / 'kalm-copy'} (incomplete" in result.output


# --- where readers find a dataset ---------------------------------------------------------


def test_dataset_dir_prefers_the_variable_then_llmrl_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("LLMRL_KALM_DATA", raising=False)
    assert dataset_dir("kalm") is None
    fetched = default_location(datasets.KALM)
    assert fetched == tmp_path / "home" / "data" / "kalm"
    fetched.mkdir(parents=True)
    assert dataset_dir("kalm") is None  # a folder without the marker file is no copy
    (fetched / datasets.KALM.marker).write_bytes(b"")
    assert dataset_dir("kalm") == fetched
    monkeypatch.setenv("LLMRL_KALM_DATA", str(tmp_path / "mine"))
    assert dataset_dir("kalm") == tmp_path / "mine"


def test_a_config_names_this_machines_data_folder_by_its_variable(tmp_path, monkeypatch):
    """`portable`: where the data lies is the machine's, so a config's folder that is the one
    llmrl finds (by any spelling of it) becomes `$VARIABLE`; any other string stays."""
    data = tmp_path / "housekeep"
    data.mkdir()
    (tmp_path / "link").symlink_to(data)
    monkeypatch.setenv("LLMRL_HOUSEKEEP_DATA", str(data))
    monkeypatch.delenv("LLMRL_KALM_DATA", raising=False)
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path / "home"))
    config = {
        "data_dir": str(data),
        "nested": [{"copy": str(tmp_path / "link")}],
        "other": str(tmp_path / "other"),
        "odd": "/with\x00nul",
        "count": 3,
    }
    assert datasets.portable(config) == {
        "data_dir": "$LLMRL_HOUSEKEEP_DATA",
        "nested": [{"copy": "$LLMRL_HOUSEKEEP_DATA"}],
        "other": str(tmp_path / "other"),
        "odd": "/with\x00nul",
        "count": 3,
    }
