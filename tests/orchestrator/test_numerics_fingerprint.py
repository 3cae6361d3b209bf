"""`llmrl numerics fingerprint` (issue 71, item 3): the bits of each op runs compute with, so
that two machines' fingerprints name the ops whose bits differ between them."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from llmrl.cli import main
from llmrl.orchestrator.numerics_fingerprint import FORMAT, compare, fingerprint, read_fingerprint


@pytest.fixture(scope="module")
def kernels_only() -> dict:
    return fingerprint(models=False)


def test_each_op_gives_the_same_bits_twice_in_one_process(kernels_only):
    again = fingerprint(models=False)
    assert again["ops"] == kernels_only["ops"]
    assert len(kernels_only["ops"]) >= 25
    assert not [name for name, d in kernels_only["ops"].items() if d.startswith("error")]
    assert kernels_only["numerics"]["precision"] == "float32"
    assert kernels_only["numerics"]["pins"]["MKL_CBWR"] == "AVX2", "the pins it ran under"


def test_the_local_models_are_fingerprinted_too():
    ops = fingerprint(models=True)["ops"]
    models = {name: d for name, d in ops.items() if "SmolLM2" in name or "MiniLM" in name}
    assert len(models) == 4 and not [d for d in models.values() if d.startswith("error")]


def test_another_machines_fingerprint_names_the_ops_that_differ(kernels_only, tmp_path):
    there = json.loads(json.dumps(kernels_only))
    there["cpu"] = "another CPU"
    there["ops"]["log_softmax over 49152"] = "0123456789abcdef"  # as another ISA might give
    there["ops"]["SmolLM2 logits, last 4 positions of a prompt"] = "fedcba9876543210"
    rows = {name: same for name, _, _, same in compare(kernels_only, there)}
    assert rows["log_softmax over 49152"] is False and rows["exp"] is True
    assert rows["SmolLM2 logits, last 4 positions of a prompt"] is None, "not run here"

    path = tmp_path / "there.json"
    path.write_text(json.dumps(there))
    result = CliRunner().invoke(main, ["numerics", "fingerprint", "--no-models", "--against", path])
    assert result.exit_code == 1, result.output
    assert "differ: log_softmax over 49152" in result.output
    assert "another CPU" in result.output


def test_the_same_machines_fingerprint_passes_and_can_be_written(kernels_only, tmp_path):
    mine = tmp_path / "mine.json"
    written = tmp_path / "again.json"
    mine.write_text(json.dumps(kernels_only))
    args = ["numerics", "fingerprint", "--no-models", "--against", mine, "--out", written]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert read_fingerprint(written)["ops"] == kernels_only["ops"]


@pytest.mark.parametrize(
    "content, message",
    [
        ("not json", "not JSON"),
        (json.dumps({"format": "other", "ops": {}}), "not a fingerprint"),
        (json.dumps({"format": FORMAT, "ops": {"exp": 1}}), "map each op"),
        (json.dumps([1, 2]), "not a fingerprint"),
        ("[" + "0," * 600_000 + "0]", "larger than"),
    ],
)
def test_a_fingerprint_file_is_untrusted_input(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        read_fingerprint(path)
    result = CliRunner().invoke(main, ["numerics", "fingerprint", "--no-models", "--against", path])
    assert result.exit_code == 2 and message in result.output


def test_every_file_at_the_top_of_research_numerics_is_a_fingerprint():
    """bench/across_cpus.py reads each one as a fingerprint; other figures (bench/cpu_paths.py's,
    bench/sqrt_rounding.py's) live in a folder of their own beside them."""
    from pathlib import Path

    kept = Path(__file__).resolve().parents[2] / "research" / "numerics"
    files = sorted(kept.glob("*.json"))
    assert files
    for path in files:
        assert read_fingerprint(path)["ops"], path.name
