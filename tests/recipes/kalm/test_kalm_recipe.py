"""The recipe `kalm` at tiny scale: its phase plan; bad configs and dataset files named; a run
in real `llmrl run` processes killed between phases resumes without redoing completed phases
and ends with the results table (algorithm x level x data) and its PNGs."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from support.tiny_llm import TINY_MODEL, tiny_gateway_settings

from llmrl.common.offline_dataset import OfflineDataset
from llmrl.orchestrator.embedded import run_embedded
from llmrl.recipes.config import ConfigError, validate_config
from llmrl.recipes.kalm.recipe import Kalm
from llmrl.simulator.envs import clevr_robot

pytest.importorskip("d3rlpy")


def random_push_dataset(episodes: int = 8, steps: int = 3, seed: int = 0) -> OfflineDataset:
    """CLEVR-Robot episodes of random pushes (our physics) under training instructions."""
    rng = np.random.default_rng(seed)
    pairs = clevr_robot.instructions("training")
    rows: dict[str, list] = {
        k: []
        for k in ("observations", "actions", "rewards", "terminals", "timeouts", "episode_ids")
    }
    finals, texts, goals = [], [], []
    for episode in range(episodes):
        goal, text = pairs[rng.integers(len(pairs))]
        state = clevr_robot.random_state(rng)
        for t in range(steps):
            action = int(rng.integers(clevr_robot.NUM_ACTIONS))
            after = clevr_robot.push(state, action)
            rows["observations"].append(state)
            rows["actions"].append(action)
            rows["rewards"].append(clevr_robot.reward(state, after, goal))
            rows["terminals"].append(False)
            rows["timeouts"].append(t == steps - 1)
            rows["episode_ids"].append(episode)
            state = after
        finals.append(state)
        texts.append(text)
        goals.append(goal)
    return OfflineDataset.from_arrays(
        env="ClevrRobot",
        source="scripted",
        final_observations=np.stack(finals),
        instructions=np.asarray(texts),
        goals=np.stack(goals),
        **{k: np.asarray(v) for k, v in rows.items()},
    )


def phase_names(**config) -> list[str]:
    return [p.name for p in Kalm(validate_config("kalm", config)).phases()]


def test_phase_plan_follows_variants_algorithms_seeds_and_levels():
    names = phase_names(
        algorithms=["bc"], levels=["training", "unseen-easy"], imagine_levels=["unseen-easy"],
        offline_seeds=2, seed=5,
    )  # fmt: skip
    assert names[:3] == ["data", "ground", "imagine/unseen-easy"]
    assert names[3:6] == ["offline/bc/real/5", "evaluate/bc/real/5/training",
                          "evaluate/bc/real/5/unseen-easy"]  # fmt: skip
    assert "evaluate/bc/real+imagined/6/unseen-easy" in names and names[-1] == "report"
    assert phase_names(variants=["real"], algorithms=["cql"], levels=["training"]) == [
        "data", "offline/cql/real/0", "evaluate/cql/real/0/training", "report"
    ]  # fmt: skip
    metaworld = phase_names(env="MetaWorld", levels=["unseen-hard"], algorithms=["iql"])
    assert metaworld == [
        "data", "ground", "imagine/unseen-easy", "imagine/unseen-hard",
        "offline/iql/real/0", "evaluate/iql/real/0/unseen-hard",
        "offline/iql/real+imagined/0", "evaluate/iql/real+imagined/0/unseen-hard", "report",
    ]  # fmt: skip
    assert phase_names(env="MetaWorld", variants=["real"], levels=["training"]) == [
        "data", "offline/bc/real/0", "evaluate/bc/real/0/training",
        "offline/iql/real/0", "evaluate/iql/real/0/training", "report",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"env": "NoSuchEnv"}, "config.env"),
        ({"levels": ["training", "impossible"]}, "config.levels"),
        ({"imagine_levels": ["training"]}, "config.imagine_levels"),
        ({"algorithms": ["iql"]}, "algorithms"),  # continuous-only on discrete CLEVR-Robot
        ({"algorithms": ["dqn"]}, "algorithms"),
        ({"data": ["internet"]}, "config.data"),
        ({"variants": ["imagined-only"]}, "config.variants"),
        ({"numbers": "roman"}, "config.numbers"),
        ({"state_target": "velocity"}, "config.state_target"),
        ({"numbers": "text", "state_target": "delta"}, "state_target"),
        ({"env": "MetaWorld", "imagine_levels": ["rephrased"]}, "imagine_levels"),
        ({"imagined_filter": "lucky"}, "config.imagined_filter"),
        ({"env": "MetaWorld", "imagined_filter": "replay"}, "imagined_filter"),
        ({"env": "MetaWorld", "levels": ["rephrased"]}, "levels"),
        ({"grounding_steps": 0}, "config.grounding_steps"),
        ({"grounding_state_weight": 0}, "config.grounding_state_weight"),
        ({"grounding_action_weight": 0}, "config.grounding_action_weight"),
        ({"grounding_tasks": ["juggle"]}, "config.grounding_tasks"),
        ({"grounding_tasks": []}, "config.grounding_tasks"),
        ({"scripted_goals_per_start": 0}, "config.scripted_goals_per_start"),
        ({"env": "MetaWorld", "scripted_goals_per_start": 3}, "scripted_goals_per_start"),
        ({"data": ["released"], "scripted_goals_per_start": 3}, "scripted_goals_per_start"),
        ({"imagine_temperature": -0.5}, "config.imagine_temperature"),
        ({"env": "MetaWorld", "imagine_temperature": 1.0}, "imagine_temperature"),
        ({"numbers": "text", "imagine_temperature": 1.0}, "imagine_temperature"),
        ({"dataset": "/etc/passwd"}, "config.dataset"),
    ],
)
def test_bad_config_names_the_key(config, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        validate_config("kalm", config)


def test_a_reused_grounding_must_fit_the_config(tmp_path, monkeypatch):
    from llmrl.learner.versions import save_version

    monkeypatch.setenv("LLMRL_HOME", str(tmp_path))
    settings = {"numbers": "tokens", "state_target": "delta", "action_size": 40}
    grounded = save_version(tmp_path / "g" / "1", lambda d: None, "kalm-grounding", settings)
    other = save_version(tmp_path / "o" / "1", lambda d: None, "bc", settings)
    corrupt = tmp_path / "c" / "1"
    corrupt.mkdir(parents=True)
    (corrupt / "llmrl_checkpoint.json").write_text("{not json")
    ok = validate_config("kalm", {"grounding_from": str(grounded.path), "state_target": "delta"})
    assert ok.grounding_from == str(grounded.path)
    for config, message in (
        ({"grounding_from": str(tmp_path / "missing")}, "names no artifact llmrl saved"),
        ({"grounding_from": str(other.path)}, "holds a bc checkpoint"),
        ({"grounding_from": str(corrupt)}, "names no artifact llmrl saved"),  # not the project's
        ({"grounding_from": str(grounded.path)}, "state_target 'delta'"),  # config: absolute
        ({"grounding_from": "/etc"}, "names no artifact llmrl saved"),
    ):
        with pytest.raises(ConfigError, match="grounding_from") as error:
            validate_config("kalm", config)
        assert message in str(error.value)


def test_a_dataset_file_of_the_wrong_shape_names_the_file_and_field(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path / "home"))
    good = random_push_dataset(episodes=2)
    narrow = tmp_path / "home" / "narrow.npz"  # a valid dataset, but 9 numbers per state
    narrowed = {"observations": good.observations[:, :9]}
    narrowed["final_observations"] = good.final_observations[:, :9]
    OfflineDataset(**{**good.__dict__, **narrowed}).save(narrow)
    broken = tmp_path / "home" / "broken.npz"
    good.save(broken)
    arrays = dict(np.load(broken))
    arrays["goals"] = arrays["goals"][:1]  # one goal for two episodes
    np.savez(broken, **arrays)
    for path, field in ((narrow, "observations"), (broken, "goals")):
        config = {"dataset": str(path), "variants": ["real"], "algorithms": ["bc"]}
        with pytest.raises(RuntimeError) as error:
            run_embedded("kalm", config, out_dir=tmp_path / path.stem, progress=False)
        assert str(path) in str(error.value) and repr(field) in str(error.value)


CONFIG = [
    "model={model}", "dataset={dataset}", "grounding_steps=4", "grounding_batch_size=4",
    "lora_r=2", "imagined_per_level=4", "imagine_max_steps=3", "offline_steps=30",
    "offline_batch_size=16", "eval_episodes=2", "levels=[training,unseen-easy]",
    "imagine_levels=[unseen-easy]", "algorithms=[bc]", "seed=1",
    "grounding_tasks=[trajectory,dynamics]", "grounding_action_weight=2",
]  # fmt: skip


def phases(db: Path) -> dict[str, tuple[str, float | None, str]]:
    if not db.exists():
        return {}
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
        try:
            rows = conn.execute("SELECT phase, status, finished, outputs FROM phases").fetchall()
        except sqlite3.OperationalError:  # the schema is not created yet
            return {}
    return {phase: (status, finished, outputs) for phase, status, finished, outputs in rows}


def start(out: Path, env: dict[str, str], config: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "llmrl.cli", "run", "kalm", *config, "--out", str(out), "--quiet"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip


def test_a_run_killed_between_phases_resumes_and_reports(tiny_model_dir: Path, tmp_path: Path):
    home = tmp_path / "home"
    dataset = random_push_dataset().save(home / "real.npz")
    gateway_config = tmp_path / "gateway.yaml"
    gateway_config.write_text(yaml.safe_dump(tiny_gateway_settings(tiny_model_dir)))
    env = dict(os.environ)
    env.update(
        LLMRL_HOME=str(home),
        LLMRL_LLM_GATEWAY_CONFIG=str(gateway_config),
        LLMRL_LOG_LEVEL="WARNING",
    )
    config = [c.format(model=TINY_MODEL, dataset=dataset) for c in CONFIG]
    out = tmp_path / "run"
    db = out / "run.sqlite"

    first = start(out, env, config)
    try:
        deadline = time.monotonic() + 600
        while phases(db).get("imagine/unseen-easy", ("",))[0] != "completed":
            assert first.poll() is None, f"the run ended early:\n{first.stdout.read()}"
            assert time.monotonic() < deadline, "grounding and imagination did not complete"
            time.sleep(0.1)
        os.killpg(first.pid, signal.SIGKILL)  # killed between imagination and offline RL
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    done_before = {p: v for p, v in phases(db).items() if v[0] == "completed"}
    assert {"data", "ground", "imagine/unseen-easy"} <= set(done_before)
    grounded = Path(json.loads(done_before["ground"][2])["checkpoint"])
    written = (grounded / "grounding.pt").stat().st_mtime
    from llmrl.learner.versions import Checkpoint

    settings = Checkpoint.read(str(grounded)).config  # the recipe's keys reached the SFT
    assert settings["tasks"] == ["trajectory", "dynamics"]
    assert settings["action_loss_weight"] == 2.0

    second = start(out, env, config)
    output, _ = second.communicate(timeout=600)
    assert second.returncode == 0, output
    assert "resuming run" in output
    after = phases(db)
    for phase, value in done_before.items():
        assert after[phase] == value, f"{phase} was run again"
    assert (grounded / "grounding.pt").stat().st_mtime == written
    assert all(status == "completed" for status, _, _ in after.values())

    results = json.loads((out / "results.json").read_text())
    cells = {(r["algorithm"], r["data"], r["level"]) for r in results["rows"]}
    assert cells == {
        ("bc", data, level)
        for data in ("real", "real+imagined")
        for level in ("training", "unseen-easy")
    }
    imagined = json.loads(after["imagine/unseen-easy"][2])
    assert imagined["rollouts"] == 4 and 0 <= imagined["kept_share"] <= 1
    assert any(n.startswith("imagined unseen-easy: 4 rollouts") for n in results["notes"])
    assert set(results["plots"]) == {"success.png", "imagination.png"}
    assert all((out / plot).stat().st_size > 0 for plot in results["plots"])

    # an ablation reusing that grounding: no SFT of its own, the same checkpoint imagines
    ablation = tmp_path / "home" / "ablation"
    third = start(ablation, env, [*config, "imagined_weight=3", f"grounding_from={grounded}"])
    output, _ = third.communicate(timeout=600)
    assert third.returncode == 0, output
    ground = json.loads(phases(ablation / "run.sqlite")["ground"][2])
    assert ground["reused"] and ground["checkpoint"] == str(grounded)
    assert not (ablation / "grounding").exists()
    notes = json.loads((ablation / "results.json").read_text())["notes"]
    assert any("(reused: grounding_from=" in note for note in notes)


def test_offline_job_settings_are_checked_when_the_job_is_parsed(tmp_path, monkeypatch):
    from llmrl.learner.policy_jobs import PolicyJobError, parse_policy_job

    monkeypatch.setenv("LLMRL_HOME", str(tmp_path))
    body = {
        "kind": "kalm-offline", "algorithm": "bc", "datasets": [str(tmp_path / "real.npz")],
        "model_path": str(tmp_path / "policy"),
    }  # fmt: skip
    job = parse_policy_job({**body, "offline": {"learning_rate": 1e-3, "hidden_units": [32]}})
    assert job.offline == {"learning_rate": 1e-3, "hidden_units": [32]}
    for offline, key in (
        ({"learning_rate": -1}, "offline.learning_rate"),
        ({"hidden_units": [0]}, "offline.hidden_units"),
        ({"gamma": 3}, "offline.gamma"),
        ({"steps": 5}, "offline.steps"),  # the job's own field, not a free setting
        ({"epochs": 5}, "offline.epochs"),
    ):
        with pytest.raises(PolicyJobError, match=key.replace(".", r"\.")):
            parse_policy_job({**body, "offline": offline})
    for field, value in (("steps", -1), ("batch_size", 0), ("surprise", 1)):
        with pytest.raises(PolicyJobError, match=field):
            parse_policy_job({**body, field: value})


def test_grounding_job_tasks_are_checked_when_the_job_is_parsed(tmp_path, monkeypatch):
    from llmrl.learner.policy_jobs import PolicyJobError, parse_policy_job

    monkeypatch.setenv("LLMRL_HOME", str(tmp_path))
    body = {
        "kind": "kalm-grounding", "datasets": [str(tmp_path / "real.npz")],
        "model_path": str(tmp_path / "grounding"),
    }  # fmt: skip
    assert parse_policy_job({**body, "tasks": ["trajectory"]}).tasks == ["trajectory"]
    assert parse_policy_job(body).tasks is None  # the algorithm's default: all four
    for tasks in (["juggle"], []):  # an empty list is not "the default"
        with pytest.raises(PolicyJobError, match="tasks"):
            parse_policy_job({**body, "tasks": tasks})


def test_released_files_are_found_in_one_place(tmp_path, monkeypatch):
    from llmrl.recipes.kalm import released

    assert released.released_file("x.npy", tmp_path / "mine.npy") == tmp_path / "mine.npy"
    (tmp_path / released.CLEVR_FILE).write_bytes(b"")
    monkeypatch.setenv(released.DATA_ENV_VAR, str(tmp_path))
    assert released.released_dir() == tmp_path
    assert released.released_file(released.METAWORLD_FILE) == tmp_path / released.METAWORLD_FILE


def test_each_imagined_level_has_its_own_seeded_stream():
    from llmrl.recipes.kalm.imagination import level_rng

    def draws(level: str, seed: int = 0) -> list[int]:
        return level_rng(seed, level).permutation(50).tolist()

    # unseen-easy and unseen-hard have names of equal length: keyed by length they collided
    assert len("unseen-easy") == len("unseen-hard")
    assert draws("unseen-easy") != draws("unseen-hard")
    assert draws("unseen-easy") == draws("unseen-easy")
    assert draws("unseen-easy") != draws("unseen-easy", seed=1)


def test_imagined_dynamics_are_checked_against_the_env():
    """A rollout whose states follow the physics has no one-step error and reaches its goal
    when replayed; one that only claims the goal (its action does something else) is caught."""
    from types import SimpleNamespace

    from llmrl.recipes.kalm.imagination import ClevrImagination, dynamics_fidelity, select
    from llmrl.recipes.kalm.imagine import Rollout
    from llmrl.simulator.envs.clevr_robot import LEVEL_SUCCESS, push, random_state
    from llmrl.simulator.envs.clevr_robot.goals import relation_goal

    real = SimpleNamespace(episodes=lambda: [SimpleNamespace(observations=np.zeros((1, 10)))])
    env = ClevrImagination(real)
    meets = LEVEL_SUCCESS["training"]
    rng = np.random.default_rng(0)
    found = None
    while found is None:  # a start, goal and one push that reaches it, and one that does not
        start = random_state(rng)
        goal = relation_goal(0, 1, int(rng.integers(4)))
        if meets(start, goal):
            continue
        good = [a for a in range(40) if meets(push(start, a), goal)]
        bad = [a for a in range(40) if not meets(push(start, a), goal)]
        if good and bad:
            found = start, goal, good[0], bad[0]
    start, goal, good, bad = found
    reached = push(start, good)
    faithful = Rollout(states=np.stack([start, reached]), actions=np.array([good]), stopped=True)
    claimed = Rollout(states=np.stack([start, reached]), actions=np.array([bad]), stopped=True)

    def success(state, g):
        return bool(meets(state, g))

    figures = dynamics_fidelity([faithful, claimed], [goal, goal], [0, 1], env.step, success)
    wrong = float(np.linalg.norm(push(start, bad) - reached))
    assert wrong > 0
    assert figures["one_step_error"] == pytest.approx(wrong / 2)  # median of 0 and wrong
    assert figures["replay_goal_match_kept"] == 0.5
    assert dynamics_fidelity([faithful], [goal], [], env.step, success) == {
        "one_step_error": 0.0,
        "replay_goal_match_kept": None,
    }
    # both meet the goal in imagination; only the faithful one does when replayed
    both, goals = [faithful, claimed], [goal, goal]
    assert select(both, goals, env.valid_state, success, "goal") == ([0, 1], [0, 1], [0, 1])
    assert select(both, goals, env.valid_state, success, "replay", env.step)[2] == [0]
    with pytest.raises(ValueError, match="imagined_filter"):
        select(both, goals, env.valid_state, success, "replay")  # no dynamics to replay in
