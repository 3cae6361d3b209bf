"""llmrl.recipes.glam.studies.signal: the bot's turn is worth more than the other one, a
view-blind policy that moves beats one that never does, and bad options are refused by name
(the recipe's keys by GlamConfig's checks)."""

from __future__ import annotations

import json
import subprocess
import sys

from llmrl.recipes.glam.studies.signal import blind_success

STUDY = "llmrl.recipes.glam.studies.signal"


def run_signal(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", STUDY, *args], capture_output=True, text=True, timeout=300
    )


def test_the_bots_turn_pays_and_a_moving_blind_policy_succeeds(tmp_path):
    done = run_signal("--behaviour", "uniform", "--states", "60", "--rollouts", "16",
                      "--blind-episodes", "30", "--blind-policy", "still=0,0,0,0,1,1",
                      "--out", str(tmp_path))  # fmt: skip
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures == json.loads((tmp_path / "signal.json").read_text())
    assert figures["settings"]["env"] == "BabyAIText-GoToLocalS5N2"
    assert figures["settings"]["num_envs"] == "8"  # the study's default, not the recipe's 16
    (uniform,) = figures["results"]
    assert uniform["turn_states"] == 60
    # the bot's turn reaches the goal sooner more often than not: the signal PPO could use
    assert uniform["mean_return_right_turn"] > uniform["mean_return_wrong_turn"]
    assert uniform["share_of_states_right_turn_better"] > 0.5
    assert 0 < uniform["noise_within_state"] <= uniform["noise_over_states"] * 1.5
    assert all(v > 0 for v in uniform["labelled_examples_per_turn_decision"].values())
    rows = figures["view_blind_search"]
    assert [row["policy"] for row in rows][:2] == ["uniform", "still"]  # then the grid
    assert rows[1]["success"] < max(row["success"] for row in rows)  # never moving loses
    blind = {row["forward"]: row["success"] for row in rows if row["forward"] is not None}
    assert len(blind) == 9 and all(0.0 <= s <= 1.0 for s in blind.values())
    assert max(blind.values()) > 0.2


def test_a_policy_that_never_moves_never_arrives():
    toggling = blind_success("GoToLocalS5N2", [0, 0, 0, 0, 0, 1.0], 20, 1_000_000)
    walking = blind_success("GoToLocalS5N2", [0.25, 0.25, 0.5, 0, 0, 0], 20, 1_000_000)
    assert toggling < walking and walking > 0.2


def test_bad_options_are_refused_by_name(tmp_path):
    done = run_signal("--rollouts", "1", "--out", str(tmp_path))
    assert done.returncode == 2 and "--rollouts must be at least 2" in done.stderr
    done = run_signal("--gamma", "1.5", "--out", str(tmp_path))
    assert (
        done.returncode == 2 and "--gamma: Input should be less than or equal to 1" in done.stderr
    )
    done = run_signal("--blind-policy", "mine=0.5,0.5", "--out", str(tmp_path))
    assert done.returncode == 2 and "--blind-policy 'mine=0.5,0.5': expected NAME=" in done.stderr
    done = run_signal("--bc-turn-labels", "0", "--out", str(tmp_path))
    assert done.returncode == 2 and "--bc-turn-labels must be at least 1" in done.stderr
    done = run_signal("--env", "GoToNowhere", "--out", str(tmp_path))
    assert done.returncode == 2 and "--env: Value error, unknown env 'GoToNowhere'" in done.stderr
    done = run_signal("--num-envs", "0", "--out", str(tmp_path))
    assert done.returncode == 2 and "--num-envs: Input should be greater" in done.stderr
    done = run_signal("--behaviour", "greedy", "--out", str(tmp_path))
    assert done.returncode == 2 and "--behaviour" in done.stderr
