"""The learner service needs only its own algorithms' packages: with the recipes' and
simulator's optional packages missing it starts, lists its algorithms, runs its own job API,
and a policy job that needs a missing package says which one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# Hides the packages in every interpreter that starts with it on PYTHONPATH (a
# sitecustomize): the learner's process and the process each of its jobs runs in.
HIDE = """
import importlib.abc, sys

MISSING = {"minigrid", "crafter", "metaworld", "d3rlpy", "sentence_transformers"}


class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in MISSING:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


sys.meta_path.insert(0, Missing())
"""
# Run in a fresh interpreter, so that hiding packages never touches this test process.
SCRIPT = """
import json, sys, time

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
job = {"kind": "when2ask", "policy": "never-ask", "env": "SimpleDoorKey", "total_timesteps": 8,
       "model_path": sys.argv[1] + "/m.zip"}
answer = client.post("/policy-jobs", json=job)
report["policy_job"] = [answer.status_code, answer.text]
if answer.status_code == 202:  # accepted: the job itself then fails, saying what is missing
    for _ in range(2400):
        state = client.get(f"/policy-jobs/{answer.json()['job_id']}").json()
        if state["status"] in ("succeeded", "failed"):
            break
        time.sleep(0.05)
    report["policy_job"] = [state["status"], state["error"] or ""]
report["health_after"] = client.get("/health").status_code
print(json.dumps(report))
"""


def test_the_learner_starts_without_the_recipes_packages(tmp_path: Path):
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(HIDE)
    path = os.pathsep.join(filter(None, [str(hide), os.environ.get("PYTHONPATH")]))
    completed = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "jobs")],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "LLMRL_HOME": str(tmp_path / "home"), "PYTHONPATH": path},
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    assert report["health"] == 200 and report["jobs"] == [] and report["bad_job"] == 422
    assert report["recipes_imported"] == []  # no recipe is imported to start
    assert {"ppo", "a2c", "dqn", "sft", "llm-ppo"} <= set(report["algorithms"])
    # a job that needs a missing package is refused (503), or accepted and fails, either way
    # saying what to install; the service goes on
    status, message = report["policy_job"]
    assert status in (503, "failed"), report["policy_job"]
    assert "minigrid" in message or "pip install" in message
    assert report["health_after"] == 200
