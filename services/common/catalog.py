"""The catalog of embedded runs and sweeps: `$LLMRL_HOME/embedded.sqlite`.

An embedded run keeps its own store in its out dir (`<out>/run.sqlite`), wherever that is;
the catalog only records where each run and sweep lives, so that `llmrl runs` and
`llmrl compare RUN_ID` find them by id. Service-mode runs are in the orchestrator's store
(`$LLMRL_HOME/orchestrator.sqlite`) and need no catalog entry. It lives in `common` because
the loaders of trusted files (`common.trusted`) find a run's folder by id through it too.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from llmrl.common.config import home_dir
from llmrl.common.store import RunStore

log = logging.getLogger("llmrl.catalog")
CATALOG_FILE = "embedded.sqlite"
ORCHESTRATOR_STORE = "orchestrator.sqlite"
RUN, EXPERIMENT = "run", "experiment"


def catalog_path() -> Path:
    return home_dir() / CATALOG_FILE


@contextmanager
def open_catalog() -> Iterator[RunStore]:
    store = RunStore(catalog_path())
    try:
        yield store
    finally:
        store.close()


def record(entry_id: str, kind: str, recipe: str, store: Path, out_dir: Path) -> None:
    """Note where an embedded run or sweep lives; a catalog that cannot be written is skipped."""
    try:
        with open_catalog() as catalog:
            catalog.catalog_add(entry_id, kind, recipe, Path(store).resolve(), out_dir)
    except Exception as exc:  # a read-only LLMRL_HOME must not stop the run itself
        log.warning(
            "cannot record %s %s in the catalog %s: %s", kind, entry_id, catalog_path(), exc
        )


def entries(kind: str | None = None) -> list[dict[str, Any]]:
    """Catalog entries (entry_id, kind, recipe, store, out_dir, created); none if no catalog."""
    if not catalog_path().exists():
        return []
    with open_catalog() as catalog:
        return catalog.catalog(kind)


def find(entry_id: str) -> dict[str, Any] | None:
    return next((entry for entry in entries() if entry["entry_id"] == entry_id), None)


def orchestrator_store_path() -> Path | None:
    """The local orchestrator's run store, when this machine has one."""
    path = home_dir() / ORCHESTRATOR_STORE
    return path if path.exists() else None
