"""The documentation: the MkDocs site builds strictly, the README stays short, and no file
outside docs/ cites the internal design notes the project was started from."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 300
# Built from pieces, so that this file does not match itself.
INTERNAL_NOTES = ("FACTS" + ".md", "DESIGN" + ".md")


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """`mkdocs build --strict`: a broken link or anchor, a page missing from `nav` or a bad
    config fails the build."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's banner, not a build warning
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}{result.stderr}"
    assert (tmp_path / "site" / "index.html").is_file()


def test_the_readme_is_short_and_keeps_the_two_setup_commands() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move the detail into docs/"
    )
    assert "make demo" in text
    assert "make test" in text


def tracked_files() -> list[Path]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    result = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
    )
    return [ROOT / name for name in result.stdout.decode().split("\0") if name]


def test_no_file_outside_docs_cites_the_internal_notes() -> None:
    citing = []
    for path in tracked_files():
        relative = path.relative_to(ROOT)
        if relative.parts[0] == "docs" or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:  # binary
            continue
        text = data.decode("utf-8", errors="replace")
        citing += [f"{relative}: {name}" for name in INTERNAL_NOTES if name in text]
    assert not citing, "files citing internal notes (say the fact instead):\n" + "\n".join(citing)
