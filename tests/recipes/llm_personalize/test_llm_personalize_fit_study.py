"""The study `llmrl.recipes.llm_personalize.studies.fit`: every line of every plan gives one
skill decision, every line but the last a go-on decision and every plan one stop; an adapter is
read beside the base model; bad options (the recipe's keys among them) are refused by name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

STUDY = "llmrl.recipes.llm_personalize.studies.fit"


def run_fit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", STUDY, *args], capture_output=True, text=True, timeout=300
    )


def bootstrap_data(tmp_path: Path) -> tuple[Path, list[str]]:
    from llmrl.annotator.datasets import write_dataset
    from llmrl.recipes.llm_personalize.datasets import bootstrap_dataset
    from llmrl.recipes.llm_personalize.demonstrations import demonstration_episode

    demos = [demonstration_episode(seed=seed, env_kwargs={"max_steps": 20}) for seed in range(2)]
    dataset = bootstrap_dataset(demos)
    paths = write_dataset(dataset, tmp_path, "bootstrap")
    return Path(paths["data"]), [e.messages[-1]["content"] for e in dataset.examples]


def test_every_plan_line_is_read_as_its_decisions(tiny_model_dir, tmp_path):
    from llmrl.learner.algorithms.sft import SftConfig, train_lora_sft

    data, plans = bootstrap_data(tmp_path)
    adapter = tmp_path / "adapter"
    train_lora_sft(SftConfig(base_model=str(tiny_model_dir), data=[str(data)],
                             out_dir=str(adapter), steps=2, lora_r=4))  # fmt: skip
    done = run_fit("--data", str(data), "--adapter", str(adapter), "--model",
                   str(tiny_model_dir), "--examples", "1000")  # fmt: skip
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["examples"] == len(plans)
    lines = [plan.split("\n") for plan in plans]
    for reader in ("base", "adapter"):
        rows = figures[reader]
        assert rows["stop"]["count"] == len(plans)
        assert rows["skill"]["count"] == sum(len(plan) for plan in lines)
        assert rows.get("go on", {"count": 0})["count"] == sum(len(p) - 1 for p in lines)
        words = {line.split(" ")[1] for plan in lines for line in plan}
        assert {k.split(":")[1] for k in rows if k.startswith("skill:")} == words
        for row in rows.values():
            assert 0.0 <= row["argmax_right"] <= 1.0 and 0.0 <= row["mean_probability"] <= 1.0
    assert figures["base"]["other"]["count"] > figures["base"]["skill"]["count"]


def test_bad_options_are_refused_by_name(tiny_model_dir, tmp_path):
    done = run_fit("--data", str(tmp_path / "none.jsonl"))
    assert done.returncode == 2 and "--data: no such file" in done.stderr
    data = tmp_path / "d.jsonl"
    data.write_text("")
    done = run_fit("--data", str(data), "--adapter", str(tmp_path))
    assert (
        done.returncode == 2 and "--adapter" in done.stderr and "adapter_config.json" in done.stderr
    )
    done = run_fit("--data", str(data), "--examples", "0")
    assert done.returncode == 2 and "--examples must be positive" in done.stderr
    tiny = ["--model", str(tiny_model_dir)]
    done = run_fit("--data", str(data), *tiny)
    assert done.returncode == 2 and "holds no examples" in done.stderr
    data.write_text("{not json\n")
    done = run_fit("--data", str(data), *tiny)
    assert done.returncode == 2 and "--data:" in done.stderr and "line 1: not JSON" in done.stderr
    unanswered = {"messages": [{"role": "user", "content": "plan?"}]}
    data.write_text(json.dumps(unanswered) + "\n")
    done = run_fit("--data", str(data), *tiny)
    assert done.returncode == 2 and "--data:" in done.stderr and "assistant" in done.stderr
    untrained = [*unanswered["messages"], {"role": "assistant", "content": "1. go", "weight": 0}]
    data.write_text(json.dumps({"messages": untrained}) + "\n")
    done = run_fit("--data", str(data), *tiny)
    assert done.returncode == 2 and "weight 0" in done.stderr
    untrained[-1]["weight"] = 1
    data.write_text(json.dumps({"messages": untrained}) + "\n")
    done = run_fit("--data", str(data), "--model", "no-such-model")
    assert done.returncode == 2 and "--model:" in done.stderr and "no-such-model" in done.stderr
    done = run_fit("--data", str(data), *tiny, "--seed", "-1")  # the recipe's key, its check
    assert done.returncode == 2 and "--seed:" in done.stderr and "greater than" in done.stderr


def test_the_recipe_keys_are_options_of_the_config_model():
    done = run_fit("--help")
    assert done.returncode == 0
    recipe = " ".join(done.stdout.split()).split("settings (LlmPersonalizeConfig's keys)")[1]
    assert "--model" in recipe and "--seed" in recipe
