"""The documentation: the MkDocs site builds strictly, the README stays short, and no file
outside docs/ cites the internal design notes the project was started from."""

from __future__ import annotations

import importlib.util
import os
import re
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


# -- research notes: each says how its figures are reproduced ---------------------------------
NOTES = ROOT / "docs" / "notes"
REPRODUCE = "*Reproduce:*"
NOT_NOW = "not with the current code:"  # a note whose setting the code no longer has, and why
REPO_PATH = re.compile(r"\b((?:services/recipes|research|bench)/[\w./-]+\.(?:yaml|py))\b")
MODULE = re.compile(r"python -m (llmrl(?:\.\w+)+)")


def reproduce_paragraph(note: Path) -> str:
    """The note's paragraph that starts with `*Reproduce:*` (empty when it has none)."""
    paragraphs = note.read_text(encoding="utf-8").split("\n\n")
    found = [p for p in paragraphs if p.lstrip().startswith(REPRODUCE)]
    return " ".join(found[0].split()) if found else ""


@pytest.mark.parametrize(
    "note", sorted(NOTES.glob("*/*.md")), ids=lambda p: str(p.relative_to(NOTES))
)
def test_every_research_note_names_what_reproduces_its_figures(note: Path) -> None:
    """A dated note names the experiment file (or bench script, or study module) that
    reproduces its figures, and what it names exists; or says why the current code cannot."""
    paragraph = reproduce_paragraph(note)
    assert paragraph, f"{note}: no paragraph starting {REPRODUCE!r}"
    paths, modules = REPO_PATH.findall(paragraph), MODULE.findall(paragraph)
    if not paths and not modules:
        reason = paragraph.partition(NOT_NOW)[2].strip()
        assert reason, f"{note}: {REPRODUCE} names no file or module, nor why ({NOT_NOW} ...)"
    missing = [p for p in paths if not (ROOT / p).is_file()]
    missing += [m for m in modules if importlib.util.find_spec(m) is None]
    assert not missing, f"{note}: {REPRODUCE} names what does not exist: {missing}"


def test_every_history_experiment_file_belongs_to_a_note() -> None:
    """The research record's files (research/<recipe>/experiments/) are the notes' settings."""
    named = {p for note in NOTES.glob("*/*.md") for p in REPO_PATH.findall(note.read_text())}
    history = sorted(ROOT.glob("research/*/experiments/*.yaml"))
    assert history, "no research/<recipe>/experiments/*.yaml"
    orphans = [str(p.relative_to(ROOT)) for p in history if str(p.relative_to(ROOT)) not in named]
    assert not orphans, f"history experiment files no note names: {orphans}"
