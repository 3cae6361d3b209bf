"""The learner service over real HTTP: an OpenAI fine-tuning job (against the stand-in) runs in
the background and records the resulting model id; its record survives a restart."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from support.providers import configure_providers

from llmrl.learner.service import create_app
from llmrl.llm_gateway.service import RestServer

EXAMPLE = {
    "messages": [
        {"role": "user", "content": "Where does the mug go?"},
        {"role": "assistant", "content": "1. place mug_1 on counter_1"},
    ]
}


def serve_tiny_model(tiny_model_dir: Path, tmp_path: Path, monkeypatch) -> Path:
    """The gateway config serving the tiny model, a private LLMRL_HOME, and 8 chat examples
    (the data file's path): what a local fine-tuning job on the learner needs."""
    import yaml
    from support.tiny_llm import tiny_gateway_settings

    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump(tiny_gateway_settings(tiny_model_dir)))
    monkeypatch.setenv("LLMRL_LLM_GATEWAY_CONFIG", str(config))
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path / "home"))
    data = tmp_path / "train.jsonl"
    data.write_text((json.dumps(EXAMPLE) + "\n") * 8)
    return data


def wait_done(
    client: httpx.Client, job_id: str, final: tuple[str, ...] = ("succeeded", "failed")
) -> dict:
    for _ in range(300):
        job = client.get(f"/jobs/{job_id}").json()
        if job["status"] in final:
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not finish: {job}")


def test_openai_job_through_the_learner_service(standin, tmp_path: Path, monkeypatch):
    base_url, _ = standin
    monkeypatch.setenv("STANDIN_KEY", "sk-secret-value")
    configure_providers(
        monkeypatch, tmp_path,
        standin={"base_url": base_url, "api_key_env": "STANDIN_KEY"},
        unset={"base_url": base_url, "api_key_env": "UNSET_KEY_VAR"},
    )  # fmt: skip
    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps(EXAMPLE) + "\n")
    request = {"backend": "openai", "data": [str(data)], "model": "gpt-4o-mini",
               "provider": "standin", "suffix": "home", "poll_interval_s": 0.01}  # fmt: skip
    server = RestServer(create_app(tmp_path / "jobs")).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            started = client.post("/jobs", json=request)
            assert started.status_code == 202, started.text
            job = wait_done(client, started.json()["job_id"])
            assert job["status"] == "succeeded", job
            assert job["result"]["fine_tuned_model"].startswith("ft:gpt-4o-mini:org-standin:home:")
            # a job that fails (the key variable is unset) is reported, the service goes on
            failing = client.post("/jobs", json={**request, "provider": "unset"})
            failed = wait_done(client, failing.json()["job_id"])
            assert failed["status"] == "failed" and "UNSET_KEY_VAR" in failed["error"]
            assert "sk-secret-value" not in json.dumps(client.get("/jobs").json())
            assert client.post("/jobs", json={"data": [str(data)], "epochs": -1}).status_code == 422
            missing = client.get("/jobs/ft-nope")
            assert missing.status_code == 404 and "job_id" in missing.json()["detail"]
    finally:
        server.stop()
    # a new service process sees the jobs of the earlier one
    junk = tmp_path / "jobs" / "junk.json"
    junk.write_text('{"hello": 1}\n')  # not a job record: skipped, kept, never fatal
    restarted = create_app(tmp_path / "jobs")
    assert {j["status"] for j in restarted.state.jobs.list()} == {"succeeded", "failed"}
    assert junk.is_file()


def test_local_fine_tuning_job_through_the_learner_client(tiny_model_dir, tmp_path, monkeypatch):
    """What llm-personalize's train phase does in service mode: the learner trains the LoRA."""
    from llmrl.learner.client import run_learner_job
    from llmrl.learner.jobs import FineTuneRequest

    data = serve_tiny_model(tiny_model_dir, tmp_path, monkeypatch)
    request = FineTuneRequest(
        data=[str(data)], model="tiny", adapter="t", version="1", steps=3, batch_size=2,
        max_length=256, lora_targets=["q_proj", "v_proj"],
    )  # fmt: skip
    server = RestServer(create_app(tmp_path / "jobs")).start()
    try:
        steps: list[int] = []  # the job's progress as the client followed it
        result = run_learner_job(
            "/jobs", request.model_dump(), steps.append, url=server.url, timeout_s=300
        )
        job = httpx.get(f"{server.url}/jobs", timeout=30).json()[0]
    finally:
        server.stop()
    assert sum(steps) == job["progress"] == 3  # one per training step
    assert result["model"] == "tiny:t@1"
    assert (Path(result["adapter_dir"]) / "adapter_config.json").is_file()
    assert len(result["losses"]) == 3
    adapter_config = json.loads((Path(result["adapter_dir"]) / "adapter_config.json").read_text())
    assert set(adapter_config["target_modules"]) == {"q_proj", "v_proj"}


class _CountingListener:
    """A local HTTP server that counts every request it gets (where a leaked key would go)."""

    def __init__(self) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        listener = self
        self.requests = 0

        class Handler(BaseHTTPRequestHandler):
            def _count(self) -> None:
                listener.requests += 1
                self.send_response(200)
                self.end_headers()

            do_GET = do_POST = _count

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_job_cannot_send_a_key_to_a_host_of_the_callers_choosing(tmp_path, monkeypatch):
    monkeypatch.setenv("SOME_SERVICE_SECRET", "sk-must-stay-here")
    configure_providers(monkeypatch, tmp_path, standin={"base_url": "http://127.0.0.1:9/v1"})
    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps(EXAMPLE) + "\n")
    listener = _CountingListener()
    server = RestServer(create_app(tmp_path / "jobs")).start()
    request = {"backend": "openai", "data": [str(data)], "model": "gpt-4o-mini"}
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            for field, value in [
                ("base_url", listener.url),
                ("api_key_env", "SOME_SERVICE_SECRET"),
            ]:
                refused = client.post("/jobs", json={**request, field: value})
                assert refused.status_code == 422
                assert [e["loc"][-1] for e in refused.json()["detail"]] == [field]
            unknown = client.post("/jobs", json={**request, "provider": listener.url})
            assert unknown.status_code == 422
            [error] = unknown.json()["detail"]
            assert error["loc"][-1] == "provider"
            assert "configured providers: openai, standin" in error["msg"]
            assert client.get("/jobs").json() == []  # nothing was started
    finally:
        server.stop()
        listener.close()
    assert listener.requests == 0


def test_job_files_outside_home_and_data_roots_are_refused(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setenv("LLMRL_HOME", str(tmp_path / "home"))
    outside = Path(tempfile.mkdtemp(prefix="llmrl-outside-"))  # not under pytest's folders
    try:
        secret = outside / "secret.jsonl"
        secret.write_text(json.dumps(EXAMPLE) + "\n")
        inside = tmp_path / "train.jsonl"
        inside.write_text(json.dumps(EXAMPLE) + "\n")
        link = tmp_path / "innocent.jsonl"
        link.symlink_to(secret)  # inside the roots by name, outside once resolved
        climbing = f"{tmp_path}/{'../' * len(tmp_path.parts)}{str(secret).lstrip('/')}"
        server = RestServer(create_app(tmp_path / "jobs")).start()
        try:
            with httpx.Client(base_url=server.url, timeout=30) as client:
                for field, paths in [
                    ("data", [str(secret)]),
                    ("data", [str(link)]),
                    ("data", [climbing]),
                    ("init_adapter", str(outside)),
                ]:
                    body = {"data": [str(inside)], field: paths}
                    refused = client.post("/jobs", json=body)
                    assert refused.status_code == 422, (field, paths, refused.text)
                    [error] = refused.json()["detail"]
                    # a data file is confined; an adapter must be one llmrl saved
                    refusal = {"init_adapter": "names no artifact"}.get(field, "outside the")
                    assert error["loc"][-1] == field and refusal in error["msg"]
                assert client.get("/jobs").json() == []
        finally:
            server.stop()
    finally:
        import shutil

        shutil.rmtree(outside)


@pytest.mark.parametrize(("field", "value"), [("model", "../../x"), ("version", "..")])
def test_local_jobs_name_folders_only(tmp_path, field, value):
    from llmrl.learner.jobs import FineTuneRequest

    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps(EXAMPLE) + "\n")
    refused = rf"(?s){field}\b.*expected (a name of )?letters"
    with pytest.raises(ValueError, match=refused) as caught:
        FineTuneRequest(data=[str(data)], **{field: value})
    assert str(tmp_path) not in str(caught.value).split("\n", 1)[1]


def test_a_cancelled_wait_cancels_the_learner_job_and_the_service_keeps_serving(
    tiny_model_dir, tmp_path, monkeypatch
):
    """A run cancelled while the learner trains for it (its progress callback raises) stops
    the job there at its next step, instead of letting it train on for nobody."""
    from llmrl.learner.client import run_learner_job
    from llmrl.learner.jobs import FineTuneRequest

    data = serve_tiny_model(tiny_model_dir, tmp_path, monkeypatch)

    def request(steps: int, version: str) -> dict:
        return FineTuneRequest(
            data=[str(data)], model="tiny", adapter="t", version=version, steps=steps,
            batch_size=2, max_length=256,
        ).model_dump()  # fmt: skip

    class Cancelled(Exception):
        pass

    def cancel_at_first_progress(n: int) -> None:
        raise Cancelled

    server = RestServer(create_app(tmp_path / "jobs")).start()
    try:
        with pytest.raises(Cancelled):
            run_learner_job("/jobs", request(100_000, "1"), cancel_at_first_progress, server.url)
        with httpx.Client(base_url=server.url, timeout=30) as client:
            (job,) = client.get("/jobs").json()
            job = wait_done(client, job["job_id"], ("cancelled", "succeeded", "failed"))
            assert job["status"] == "cancelled" and job["error"] == "cancelled by request"
            assert 1 <= job["progress"] < 100_000
            assert client.post("/jobs/ft-nosuchjob/cancel").status_code == 404
            assert "job_id" in client.post("/jobs/ft-nosuchjob/cancel").json()["detail"]
        # the service keeps serving: the next job runs to its end, and cancelling it
        # afterwards leaves it as it ended
        result = run_learner_job("/jobs", request(2, "2"), None, server.url, timeout_s=300)
        assert result["model"] == "tiny:t@2"
        with httpx.Client(base_url=server.url, timeout=30) as client:
            done = [j for j in client.get("/jobs").json() if j["status"] == "succeeded"]
            assert client.post(f"/jobs/{done[0]['job_id']}/cancel").json()["status"] == "succeeded"
    finally:
        server.stop()
