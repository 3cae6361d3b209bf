"""Episode records round-trip through JSON lines (a bad line is named); they carry discrete and
continuous actions, through JSON and into arrays."""

from __future__ import annotations

import numpy as np
import pytest

from llmrl.common.episodes import (
    EpisodeRecord,
    LlmCall,
    StepRecord,
    actions_array,
    read_jsonl,
    write_jsonl,
)


def episode(*actions) -> EpisodeRecord:
    steps = [StepRecord(t=t, action=action) for t, action in enumerate(actions)]
    return EpisodeRecord("run", "collect/0", "PointReach", 0, "ppo", steps=steps)


def test_actions_keep_their_kind_through_json(tmp_path):
    record = episode(np.int64(2), np.array([0.5, -0.25], np.float32), [1, 0], np.float64(0.75))
    assert [step.action for step in record.steps] == [2, [0.5, -0.25], [1.0, 0.0], [0.75]]
    assert type(record.steps[0].action) is int
    write_jsonl(tmp_path / "episodes.jsonl", [record])
    (loaded,) = read_jsonl(tmp_path / "episodes.jsonl")
    assert loaded == record
    assert EpisodeRecord.from_json(record.to_json()).steps[1].action == [0.5, -0.25]


@pytest.mark.parametrize("bad", [True, "left", [[1.0], [2.0, 3.0]]])
def test_an_action_that_is_no_number_is_refused_naming_the_field(bad):
    with pytest.raises(TypeError, match=r"^action: expected an integer or numbers"):
        StepRecord(t=0, action=bad)


def test_actions_array_is_int_for_discrete_and_float_rows_for_continuous():
    discrete = actions_array(episode(1, None, 3).steps)
    assert discrete.dtype == np.int64 and discrete.tolist() == [1, -1, 3]
    continuous = actions_array(episode([0.5, -1.0], None, [0.0, 1.0]).steps)
    assert continuous.dtype == np.float32 and continuous.shape == (3, 2)
    np.testing.assert_array_equal(continuous[[0, 2]], [[0.5, -1.0], [0.0, 1.0]])
    assert np.isnan(continuous[1]).all()  # no action at that step
    assert actions_array([]).shape == (0,)
    with pytest.raises(ValueError, match="mix discrete and continuous"):
        actions_array(episode(1, [0.5]).steps)
    with pytest.raises(ValueError, match=r"differ in size: \[1, 2\]"):
        actions_array(episode([0.5], [0.5, 0.5]).steps)


def test_episode_records_round_trip(tmp_path):
    record = EpisodeRecord(
        run_id="r1",
        episode_id="evaluate/0",
        env="SimpleDoorKey",
        seed=3,
        policy="oracle",
        steps=[StepRecord(t=0, text="you see a key", skill="go to the key", reward=0.0)],
        llm_calls=[LlmCall(t=0, messages=[{"role": "user", "content": "hi"}], response="x")],
        episode_return=0.9,
        length=1,
        success=True,
    )
    path = tmp_path / "episodes.jsonl"
    assert write_jsonl(path, [record, record]) == 2
    assert list(read_jsonl(path)) == [record, record]
    path.write_text("not json\n")
    with pytest.raises(ValueError, match=r"episodes\.jsonl:1"):
        list(read_jsonl(path))
