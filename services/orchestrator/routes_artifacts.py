"""A run's files: GET /runs/{id}/artifacts lists them, GET /runs/{id}/artifacts/{name}
downloads one (only registered artifacts are served)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse

from llmrl.orchestrator.rest_access import GUARDED, ManagerDep

router = APIRouter(tags=["artifacts"], dependencies=GUARDED)


@router.get("/runs/{run_id}/artifacts")
def list_artifacts(run_id: str, manager: ManagerDep) -> list[dict[str, Any]]:
    manager.get(run_id)
    return [
        {
            "name": a["name"],
            "kind": a["kind"],
            "size": a["size"],
            "url": f"/runs/{run_id}/artifacts/{a['name']}",
        }
        for a in manager.store.artifacts(run_id)
    ]


@router.get("/runs/{run_id}/artifacts/{name:path}")
def download_artifact(run_id: str, name: str, manager: ManagerDep) -> FileResponse:
    manager.get(run_id)
    # Only registered artifacts are served: a name is looked up, never joined to a path.
    found = {a["name"]: a for a in manager.store.artifacts(run_id)}
    if name not in found:
        known = ", ".join(found) or "(none yet)"
        raise HTTPException(404, f"run {run_id} has no artifact {name!r}; artifacts: {known}")
    path = Path(found[name]["path"])
    if not path.is_file():
        raise HTTPException(404, f"artifact {name!r} of run {run_id} is no longer on disk")
    return FileResponse(path, filename=path.name)
