"""GET /recipes: every registered recipe with its config's JSON schema."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from llmrl.orchestrator.rest_access import GUARDED
from llmrl.recipes.config import recipe_schemas

router = APIRouter(tags=["recipes"], dependencies=GUARDED)


@router.get("/recipes")
def list_recipes() -> list[dict[str, Any]]:
    return list(recipe_schemas().values())
