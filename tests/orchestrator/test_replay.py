"""`llmrl runs export` and `llmrl replay`: a frozen-LLM run bundled with its LLM calls, played
again in a fresh LLMRL_HOME with the model's weights gone, every cell of its results the
recorded run's; and bundles refused, with a message that says why, for whatever is wrong."""

from __future__ import annotations

import gzip
import json
import pickle
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from support.tiny_llm import tiny_gateway_settings

from llmrl.cli import main
from llmrl.llm_gateway import client as gateway_client
from llmrl.llm_gateway import replay_bundle
from llmrl.llm_gateway.replay_bundle import prompt_start, read_bundle, write_bundle
from llmrl.orchestrator.embedded import run_embedded
from llmrl.orchestrator.replay import safe_config

# When2Ask's LLM planner on SimpleDoorKey: it scores the feasible skills through the gateway
CONFIG = {"env": "SimpleDoorKey", "planner": "when2ask-llm", "episodes": 3, "max_steps": 20}


@dataclass
class Recorded:
    bundle: Path
    run_id: str
    rows: list[dict[str, Any]]
    usage_line: str  # what the run printed about its LLM use


@pytest.fixture(scope="module")
def recorded(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    """An evaluate run of the LLM planner on a copy of the tiny model, exported; then the
    copy is deleted, so that nothing can load it again."""
    root = tmp_path_factory.mktemp("recorded")
    model = shutil.copytree(tiny_model_dir, root / "model")
    settings = tiny_gateway_settings(
        model, cache={"backend": "sqlite", "sqlite_path": str(root / "cache.sqlite")}
    )
    (root / "gateway.yaml").write_text(yaml.safe_dump(settings))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LLMRL_LLM_GATEWAY_CONFIG", str(root / "gateway.yaml"))
        patch.setenv("LLMRL_HOME", str(root / "home"))
        patch.setattr(gateway_client, "_shared_gateway", None)
        run = run_embedded("evaluate", CONFIG, out_dir=root / "run", progress=False)
        usage = gateway_client.connect().usage(run.run_id)
        exported = CliRunner().invoke(
            main, ["runs", "export", run.run_id, "--out", str(root / "run.json.gz")]
        )
        assert exported.exit_code == 0, exported.output
        assert f"LLM calls kept for its {usage['requests']} requests" in exported.output
        gateway_client._shared_gateway.close()
    shutil.rmtree(model)
    rows = json.loads((root / "run" / "results.json").read_text())["rows"]
    hits, requests = usage["cache_hits"], usage["requests"]
    line = f"LLM: {requests} calls through the gateway, {hits} of {requests} served from the cache"
    return Recorded(root / "run.json.gz", run.run_id, rows, line)


@pytest.fixture
def fresh_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Another machine: an empty LLMRL_HOME, no gateway configuration, no gateway yet."""
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path / "elsewhere"))
    monkeypatch.delenv("LLMRL_LLM_GATEWAY_CONFIG", raising=False)
    monkeypatch.setattr(gateway_client, "_shared_gateway", None)
    return tmp_path / "elsewhere"


def bundle_data(recorded: Recorded) -> dict[str, Any]:
    return json.loads(gzip.decompress(recorded.bundle.read_bytes()))


def replay(bundle: Path, out: Path) -> Any:
    return CliRunner().invoke(main, ["replay", str(bundle), "--out", str(out), "--quiet"])


def test_a_frozen_llm_run_replays_cell_for_cell_with_no_model(
    recorded: Recorded, fresh_home: Path, tmp_path: Path
):
    bundle = read_bundle(recorded.bundle)
    assert bundle.run.recipe == "evaluate" and bundle.results.rows == recorded.rows
    assert bundle.results.model_extra["provenance"]["mode"] == "embedded"
    assert bundle.gateway is not None and bundle.gateway.models["tiny"].backend == "hf"
    assert bundle.calls and {call.op for call in bundle.calls} == {"score"}
    assert bundle.summary.calls == len(bundle.calls) <= bundle.summary.requests
    assert not (recorded.bundle.parent / "model").exists()

    result = replay(recorded.bundle, tmp_path / "replay")
    assert result.exit_code == 0, result.output
    assert "identical: every cell of the 1 rows is the recorded run's" in result.output
    assert recorded.usage_line in result.output  # as many calls, as many served by the cache
    replayed = json.loads((tmp_path / "replay" / "results.json").read_text())
    assert replayed["rows"] == recorded.rows
    assert not list(fresh_home.glob("llm_cache*"))  # a bundle's answers enter no cache on disk

    # the replay is a run of this machine's own, which exports in turn: the same calls
    (again,) = [p for p in (tmp_path / "replay").iterdir() if p.name == "run.sqlite"]
    second = tmp_path / "again.json.gz"
    exported = CliRunner().invoke(main, ["runs", "export", str(again.parent), "--out", str(second)])
    assert exported.exit_code == 0, exported.output
    keys = {(c.key, json.dumps(c.answer, sort_keys=True)) for c in read_bundle(second).calls}
    assert keys == {(c.key, json.dumps(c.answer, sort_keys=True)) for c in bundle.calls}


def test_a_call_missing_from_the_bundle_fails_the_replay_naming_it(
    recorded: Recorded, fresh_home: Path, tmp_path: Path
):
    data = bundle_data(recorded)
    removed = data["calls"].pop(0)
    data["summary"]["calls"] -= 1
    write_bundle(data, tmp_path / "short.json.gz")
    result = replay(tmp_path / "short.json.gz", tmp_path / "replay")
    assert result.exit_code == 1
    message = " ".join(result.output.split())
    assert "the replay failed" in message and "no answer in the bundle for this call" in message
    assert "model 'tiny', score, prompt" in message
    shown = prompt_start("score", removed["request"]["params"])
    assert " ".join(shown.split())[:60] in message
    assert not (tmp_path / "replay" / "results.json").exists()


def test_results_that_differ_are_listed_cell_by_cell(
    recorded: Recorded, fresh_home: Path, tmp_path: Path
):
    data = bundle_data(recorded)
    data["results"]["rows"][0]["success_rate"] = 0.75  # as if the run had measured otherwise
    write_bundle(data, tmp_path / "other.json.gz")
    result = replay(tmp_path / "other.json.gz", tmp_path / "replay")
    assert result.exit_code == 1
    replayed = recorded.rows[0]["success_rate"]
    assert f"row 0, success_rate: recorded 0.75, replayed {replayed!r}" in result.output


def write_raw(path: Path, raw: bytes) -> Path:
    path.write_bytes(raw)
    return path


@pytest.mark.parametrize(
    "case, expected",
    [
        ("truncated", "truncated or corrupt gzip"),
        ("pickle", "Python pickle, which llmrl never loads"),
        ("garbage", "not a replay bundle"),
        ("plain json, cut", "not valid JSON"),
        ("another format", 'not a replay bundle (no "format"'),
        ("newer version", "version 2; this llmrl reads version 1 (the bundle is newer"),
        ("answer of the wrong type", "not the answer to a chat call: answer.texts: Field"),
        ("request changed after export", "key is not the hash of the call's request"),
        ("model name with a path", "is not a model name"),
        ("deeply nested", "nested deeper than 64 levels"),
    ],
)
def test_a_bad_bundle_is_refused_saying_why(
    recorded: Recorded, fresh_home: Path, tmp_path: Path, case: str, expected: str
):
    packed = recorded.bundle.read_bytes()
    data = bundle_data(recorded)
    path = tmp_path / "bad.json.gz"
    if case == "truncated":
        write_raw(path, packed[: len(packed) // 2])
    elif case == "pickle":
        write_raw(path, pickle.dumps(data))
    elif case == "garbage":
        write_raw(path, b"\x00\x01binary rubbish\xff")
    elif case == "plain json, cut":
        write_raw(path, json.dumps(data).encode()[:-40])
    else:
        if case == "another format":
            data["format"] = "something-else"
        elif case == "newer version":
            data["version"] = 2
        elif case == "answer of the wrong type":
            data["calls"][0]["op"] = data["calls"][0]["request"]["op"] = "chat"
        elif case == "request changed after export":
            data["calls"][0]["request"]["params"]["candidates"].append("teleport to the goal")
        elif case == "model name with a path":
            data["calls"][0]["model"] = "../../etc"
        elif case == "deeply nested":
            data["run"]["config"]["planner_kwargs"] = {"x": json.loads("[" * 70 + "]" * 70)}
        write_raw(path, gzip.compress(json.dumps(data).encode()))
    result = replay(path, tmp_path / "replay")
    assert result.exit_code == 1, result.output
    assert expected in " ".join(result.output.split()), result.output
    assert not (tmp_path / "replay").exists()  # refused before anything ran


def test_a_bundle_over_the_size_limit_is_refused_packed_or_unpacked(
    recorded: Recorded, fresh_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(replay_bundle, "MAX_BUNDLE_BYTES", 64 * 1024)
    big = write_raw(tmp_path / "big.json.gz", b"\x1f\x8b" + b"\x00" * (65 * 1024))
    result = replay(big, tmp_path / "replay")
    assert result.exit_code == 1 and "over the 0.1 MiB a bundle may have" in result.output
    data = bundle_data(recorded)
    data["results"]["notes"].append(" " * (200 * 1024))  # compresses to almost nothing
    bomb = write_raw(tmp_path / "bomb.json.gz", gzip.compress(json.dumps(data).encode()))
    assert bomb.stat().st_size < 64 * 1024
    result = replay(bomb, tmp_path / "replay")
    assert result.exit_code == 1, result.output
    assert "over 0.1 MiB once decompressed" in " ".join(result.output.split())


@pytest.mark.parametrize(
    "recipe, config, expected",
    [
        ("evaluate", {"planner_kwargs": {"prompt": "/etc/passwd"}}, "planner_kwargs.prompt"),
        ("evaluate", {"policy": {"kind": "sb3", "model": "run:other/model.zip"}}, "policy.model"),
        ("evaluate", {"env_kwargs": {"cache": "~/secrets"}}, "env_kwargs.cache"),
        ("kalm", {"grounding_from": "grounding"}, "grounding_from='grounding'"),
        ("kalm", {"dataset": "data.npz"}, "dataset='data.npz'"),
        ("no-such-recipe", {}, "recipe 'no-such-recipe' is not registered here"),
    ],
)
def test_a_bundle_whose_run_names_a_path_or_an_unknown_recipe_is_refused(
    recorded: Recorded,
    fresh_home: Path,
    tmp_path: Path,
    recipe: str,
    config: dict[str, Any],
    expected: str,
):
    data = bundle_data(recorded)
    data["run"]["recipe"] = recipe
    data["run"]["config"] = {**(data["run"]["config"] if recipe == "evaluate" else {}), **config}
    write_bundle(data, tmp_path / "paths.json.gz")
    result = replay(tmp_path / "paths.json.gz", tmp_path / "replay")
    assert result.exit_code == 1, result.output
    output = " ".join(result.output.split())
    assert expected in output
    if recipe != "no-such-recipe":
        assert "a replay never opens a path from a bundle" in output
    assert not (tmp_path / "replay").exists()


def test_data_locations_are_left_to_this_machine_with_a_warning():
    config = {
        "data_dir": "/home/someone/housekeep",
        "env_kwargs": {"data_dir": "procedural", "length": 10},
        "released_path": "/data/kalm.npy",
        "finetune_from": ["ellm"],  # method names, not paths
    }
    safe, warnings = safe_config(config)
    assert safe == {"env_kwargs": {"data_dir": "procedural", "length": 10},
                    "finetune_from": ["ellm"]}  # fmt: skip
    assert len(warnings) == 2 and all("this machine's own copy" in w for w in warnings)
    assert config["data_dir"] == "/home/someone/housekeep"  # the bundle's own is unchanged


def test_export_names_what_it_cannot_find(fresh_home: Path, tmp_path: Path):
    result = CliRunner().invoke(main, ["runs", "export", "no-such-run", "--out", "x.json.gz"])
    assert result.exit_code == 2 and "'no-such-run' is neither a run directory" in result.output
    assert not Path("x.json.gz").exists()
    listing = CliRunner().invoke(main, ["runs", "--help"])
    assert listing.exit_code == 0 and "export" in listing.output
    helped = CliRunner().invoke(main, ["runs", "export", "--help"])
    assert helped.exit_code == 0 and "--gateway-config" in helped.output
    assert CliRunner().invoke(main, ["replay", "--help"]).exit_code == 0


@pytest.fixture
def model_back(recorded: Recorded, tiny_model_dir: Path, fresh_home: Path, tmp_path: Path):
    """The recorded run's model where it was (its path is in the bundle's cache keys), served
    by a gateway whose cache is new and empty: every answer is computed again."""
    model = shutil.copytree(tiny_model_dir, recorded.bundle.parent / "model")
    settings = tiny_gateway_settings(
        model, cache={"backend": "sqlite", "sqlite_path": str(tmp_path / "new-cache.sqlite")}
    )
    (tmp_path / "gateway.yaml").write_text(yaml.safe_dump(settings))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LLMRL_LLM_GATEWAY_CONFIG", str(tmp_path / "gateway.yaml"))
        try:
            yield model
        finally:
            if gateway_client._shared_gateway is not None:
                gateway_client._shared_gateway.close()
            shutil.rmtree(model)


def recompute(bundle: Path, out: Path) -> Any:
    gateway_client._shared_gateway = None  # each recomputation starts its own gateway
    arguments = ["replay", str(bundle), "--out", str(out), "--quiet", "--recompute"]
    return CliRunner().invoke(main, arguments)


def test_recompute_compares_each_llm_answer_bit_for_bit_with_the_bundles(
    recorded: Recorded, model_back: Path, tmp_path: Path
):
    calls = len(read_bundle(recorded.bundle).calls)
    same = recompute(recorded.bundle, tmp_path / "same")
    assert same.exit_code == 0, same.output
    assert f"LLM answers: {calls} of {calls} requests answered here with the recorded bits; " \
        "0 differ" in same.output  # fmt: skip
    assert "identical: every cell of the 1 rows is the recorded run's" in same.output

    # the recording machine's answer to one request, one float's last bits away from this one's
    data = bundle_data(recorded)
    changed = data["calls"][1]["answer"]["token_logprobs"][0]
    recorded_value = changed[0]
    changed[0] = float(np.nextafter(np.float32(recorded_value), np.float32(0)))
    write_bundle(data, tmp_path / "other-bits.json.gz")
    other = recompute(tmp_path / "other-bits.json.gz", tmp_path / "other")
    assert other.exit_code == 1, other.output
    output = " ".join(other.output.split())
    counted = f"{calls - 1} of {calls} requests answered here with the recorded bits; 1 differ"
    assert counted in output
    shown = " ".join(prompt_start("score", data["calls"][1]["request"]["params"]).split())
    assert f"tiny, score, prompt '{shown[:40]}" in output
    where = "answer.token_logprobs[0][0]"
    assert f"{where}: recorded {changed[0]!r}, here {recorded_value!r}" in output
    assert "every cell of the 1 rows is the recorded run's" in output  # the rows still agree


def test_a_replay_under_other_numerics_than_the_recorded_run_says_which():
    from llmrl.orchestrator.replay import numerics_differences

    recorded = {"precision": "float32", "adam": "fused", "pins": {"MKL_CBWR": "COMPATIBLE"}}
    here = {"precision": "float32", "adam": "torch", "pins": {"MKL_CBWR": "AVX2"}}
    (warning,) = numerics_differences(recorded, here)
    assert "LLMRL_ADAM fused there, torch here" in warning
    assert "MKL_CBWR COMPATIBLE there, AVX2 here" in warning
    assert "`LLMRL_ADAM=fused MKL_CBWR=COMPATIBLE llmrl replay ...`" in warning
    assert numerics_differences(recorded, recorded) == []
    # a run recorded before Adam's kernel was stated says nothing of it
    assert numerics_differences({"precision": "float32"}, here) == []
