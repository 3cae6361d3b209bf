"""The learner service needs only its own algorithms' packages: with the recipes' and
simulator's optional packages missing it starts, lists its algorithms, runs its own job API,
and a policy job that needs a missing package is refused saying which one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# Run in a fresh interpreter, so that hiding packages never touches this test process.
SCRIPT = """
import importlib.abc, json, sys

MISSING = {"minigrid", "crafter", "metaworld", "d3rlpy", "sentence_transformers"}


class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in MISSING:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


sys.meta_path.insert(0, Missing())
from fastapi.testclient import TestClient

from llmrl.common.registry import registry
from llmrl.learner.service import create_app

client = TestClient(create_app(sys.argv[1]))
report = {
    "health": client.get("/health").status_code,
    "jobs": client.get("/jobs").json(),
    "bad_job": client.post("/jobs", json={"data": []}).status_code,
    "recipes_imported": sorted(m for m in sys.modules if m.startswith("llmrl.recipes")),
    "algorithms": registry.names("algorithm"),
}
policy_job = client.post("/policy-jobs", json={"kind": "when2ask"})
report["policy_job"] = [policy_job.status_code, policy_job.text]
report["health_after"] = client.get("/health").status_code
print(json.dumps(report))
"""


def test_the_learner_starts_without_the_recipes_packages(tmp_path: Path):
    completed = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "jobs")],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "LLMRL_HOME": str(tmp_path / "home")},
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    assert report["health"] == 200 and report["jobs"] == [] and report["bad_job"] == 422
    assert report["recipes_imported"] == []  # no recipe is imported to start
    assert {"ppo", "a2c", "dqn", "sft"} <= set(report["algorithms"])
    status, body = report["policy_job"]
    assert status in (422, 503) and "minigrid" in body  # says what is missing, no crash
    assert report["health_after"] == 200
