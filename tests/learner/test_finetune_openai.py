"""The OpenAI fine-tuning flow through the official client, against a local stand-in server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmrl.learner.finetune_openai import FineTuneError, make_client, openai_finetune, write_job

EXAMPLE = {
    "messages": [
        {"role": "system", "content": "You tidy houses."},
        {"role": "user", "content": "Where does the mug go?"},
        {"role": "assistant", "content": "1. place mug_1 on counter_1"},
    ]
}


def write_data(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_upload_create_poll_and_record_the_model_id(standin, tmp_path, monkeypatch):
    base_url, state = standin
    monkeypatch.setenv("STANDIN_KEY", "sk-test-secret")
    data = write_data(tmp_path / "train.jsonl", [json.dumps(EXAMPLE)] * 3)
    seen = []
    job = openai_finetune(
        data,
        model="gpt-4o-mini-2024-07-18",
        client=make_client(base_url, api_key_env="STANDIN_KEY"),
        suffix="personal",
        epochs=2,
        poll_interval_s=0.01,
        on_status=lambda j: seen.append(j.status),
    )
    assert job.status == "succeeded"
    assert job.fine_tuned_model == f"ft:gpt-4o-mini-2024-07-18:org-standin:personal:{job.job_id}"
    assert seen == ["validating_files", "queued", "running", "succeeded"] == job.statuses
    # the server got exactly our file and our options, with our key
    assert state.files[job.file_id] == data.read_bytes()
    assert state.jobs[job.job_id]["method"]["supervised"]["hyperparameters"]["n_epochs"] == 2
    assert set(state.keys_seen) == {"sk-test-secret"}
    write_job(job, tmp_path / "job.json")
    assert (
        json.loads((tmp_path / "job.json").read_text())["fine_tuned_model"] == job.fine_tuned_model
    )


def test_a_failed_job_raises_with_the_servers_reason(standin, tmp_path, monkeypatch):
    base_url, state = standin
    monkeypatch.setenv("STANDIN_KEY", "sk-test-secret")
    data = write_data(tmp_path / "train.jsonl", [json.dumps(EXAMPLE)])
    client = make_client(base_url, api_key_env="STANDIN_KEY")
    # the file becomes invalid on the server side after upload: the job fails there
    original_create = client.files.create

    def upload_then_corrupt(**kwargs):
        uploaded = original_create(**kwargs)
        state.files[uploaded.id] = b"not json\n"
        return uploaded

    client.files.create = upload_then_corrupt
    with pytest.raises(FineTuneError, match="failed: invalid JSONL"):
        openai_finetune(data, model="gpt-4o-mini", client=client, poll_interval_s=0.01)


def test_invalid_data_is_refused_before_any_upload(standin, tmp_path, monkeypatch):
    base_url, state = standin
    monkeypatch.setenv("STANDIN_KEY", "sk-test-secret")
    bad = {"messages": [{"role": "user", "content": "no answer"}]}
    data = write_data(tmp_path / "bad.jsonl", [json.dumps(bad)])
    client = make_client(base_url, api_key_env="STANDIN_KEY")
    with pytest.raises(FineTuneError, match="line 1: the last message must be an assistant"):
        openai_finetune(data, model="gpt-4o-mini", client=client, poll_interval_s=0.01)
    assert state.files == {}


def test_a_missing_key_is_a_clear_error_without_secrets(monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    with pytest.raises(FineTuneError, match="NO_SUCH_KEY_VAR"):
        make_client("http://127.0.0.1:9/v1", api_key_env="NO_SUCH_KEY_VAR")
