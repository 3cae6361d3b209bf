"""The recipe's config and plan: phases per round, held-out episodes never trained on, and
config errors that name the field."""

from __future__ import annotations

import pytest

from llmrl.recipes.config import ConfigError, validate_config
from llmrl.recipes.llm_personalize.recipe import LlmPersonalize


def recipe(**config) -> LlmPersonalize:
    return LlmPersonalize(validate_config("llm-personalize", {"data_dir": "procedural", **config}))


def test_phases_are_named_per_round():
    names = [phase.name for phase in recipe(rounds=2).phases()]
    assert names == [
        "evaluate/zero-shot", "demonstrate", "annotate/0", "train/0", "evaluate/0",
        "collect/1", "annotate/1", "train/1", "evaluate/1",
        "collect/2", "annotate/2", "train/2", "evaluate/2", "report",
    ]  # fmt: skip


def test_held_out_episodes_are_not_training_episodes():
    plan = recipe(train_episodes=3, eval_episodes=2)
    items = plan.eval_set()
    train = [episode for _, split, episode in items if split == "train"]
    held_out = [episode for _, split, episode in items if split == "held-out"]
    assert train == [0, 1] and held_out == [3, 4]
    train_seeds = {plan._seed(e) for e in range(3)}
    assert not train_seeds & {plan._seed(e, held_out=True) for e in held_out}


def test_more_evaluation_episodes_than_training_ones_evaluate_every_training_episode():
    plan = recipe(train_episodes=2, eval_episodes=3)
    items = plan.eval_set()
    assert [e for _, split, e in items if split == "train"] == [0, 1]
    assert [e for _, split, e in items if split == "held-out"] == [2, 3, 4]
    assert plan.config.train_eval_episodes == 2


def test_bad_config_names_the_field():
    with pytest.raises(ConfigError, match="rounds"):
        validate_config("llm-personalize", {"data_dir": "procedural", "rounds": -1})
    with pytest.raises(ConfigError, match="scenes"):
        validate_config("llm-personalize", {"data_dir": "procedural", "scenes": ["Ihlen_1_int"]})
    with pytest.raises(ConfigError, match="data_dir"):
        validate_config("llm-personalize", {"data_dir": "/no/such/housekeep"})
    with pytest.raises(ConfigError, match="colour"):
        validate_config("llm-personalize", {"colour": "red"})
    with pytest.raises(ConfigError, match=r"collect_episodes: 5 is more than train_episodes \(4\)"):
        recipe(train_episodes=4, collect_episodes=5)


def test_collect_episodes_defaults_to_every_training_episode():
    assert recipe(train_episodes=4).config.collected_episodes == 4
    assert recipe(train_episodes=4, collect_episodes=2).config.collected_episodes == 2


def test_a_data_dir_without_val_scenes_needs_scenes_named(tmp_path):
    (tmp_path / "data.npy").write_bytes(b"")
    (tmp_path / "episodes" / "train").mkdir(parents=True)
    (tmp_path / "episodes" / "train" / "Beechwood_0_int.json.gz").write_bytes(b"")
    with pytest.raises(ConfigError, match="scenes: unset, and no episode files for split 'val'"):
        validate_config("llm-personalize", {"data_dir": str(tmp_path)})
    named = {"data_dir": str(tmp_path), "scenes": ["Beechwood_0_int"]}
    assert validate_config("llm-personalize", named).scene_list() == ["Beechwood_0_int"]


def test_openai_fine_tuning_needs_its_key_and_generate_mode(monkeypatch, tmp_path):
    from support.providers import configure_providers

    monkeypatch.delenv("NO_SUCH_OPENAI_KEY", raising=False)
    openai = {"data_dir": "procedural", "finetune_backend": "openai"}
    with pytest.raises(
        ConfigError, match=r"openai_api_key_env: .* NO_SUCH_OPENAI_KEY, which is unset"
    ):
        validate_config("llm-personalize", {**openai, "openai_api_key_env": "NO_SUCH_OPENAI_KEY"})
    with pytest.raises(ConfigError, match="finetune_backend"):
        validate_config("llm-personalize", {**openai, "finetune_backend": "azure"})
    monkeypatch.setenv("MY_OPENAI_KEY", "sk-config-test")
    openai["openai_api_key_env"] = "MY_OPENAI_KEY"
    with pytest.raises(ConfigError, match="planner_mode: finetune_backend=openai needs"):
        validate_config("llm-personalize", {**openai, "planner_mode": "score"})
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    # that URL with that key is a provider only once the server configures one
    with pytest.raises(ConfigError, match=r"openai_base_url: no configured provider"):
        validate_config("llm-personalize", openai)
    mine = {"base_url": "http://127.0.0.1:9/v1", "api_key_env": "MY_OPENAI_KEY"}
    configure_providers(monkeypatch, tmp_path, mine=mine)
    config = validate_config("llm-personalize", openai)
    assert config.openai_base_url == "http://127.0.0.1:9/v1"  # the official client's variable
    assert config.openai_model == "gpt-4o-mini-2024-07-18"
    assert "sk-config-test" not in str(config.model_dump())
    # the local backend needs no key
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert (
        validate_config("llm-personalize", {"data_dir": "procedural"}).finetune_backend == "local"
    )


def test_guided_decoding_defaults_on_for_local_models_only(monkeypatch, tmp_path):
    from support.providers import configure_providers

    monkeypatch.setenv("MY_OPENAI_KEY", "sk-config-test")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    configure_providers(monkeypatch, tmp_path, mine={"api_key_env": "MY_OPENAI_KEY"})
    local = validate_config("llm-personalize", {"data_dir": "procedural"})
    assert local.guided_decoding
    assert not validate_config(
        "llm-personalize", {"data_dir": "procedural", "guided": False}
    ).guided_decoding
    openai = {
        "data_dir": "procedural",
        "finetune_backend": "openai",
        "openai_api_key_env": "MY_OPENAI_KEY",
    }
    assert not validate_config("llm-personalize", openai).guided_decoding
    with pytest.raises(ConfigError, match="guided: remote OpenAI models cannot guide"):
        validate_config("llm-personalize", {**openai, "guided": True})


def test_the_sft_progress_bar_counts_the_steps_training_will_take(tmp_path):
    from types import SimpleNamespace

    from llmrl.recipes.llm_personalize.train import sft_steps

    files = []
    for name, lines in (("a.jsonl", 5), ("b.jsonl", 4)):
        path = tmp_path / name
        path.write_text("{}\n" * lines + "\n")
        files.append(str(path))
    request = SimpleNamespace(steps=None, epochs=2.0, batch_size=4)
    assert sft_steps(files, request) == 6  # 9 examples: 3 batches per epoch, 2 epochs
    assert sft_steps(files, SimpleNamespace(steps=7, epochs=2.0, batch_size=4)) == 7


def test_named_scenes_validate_without_the_data_and_running_says_how_to_get_it(
    tmp_path, monkeypatch
):
    monkeypatch.delenv("LLMRL_HOUSEKEEP_DATA", raising=False)
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path))  # a fresh machine: no `llmrl data get` copy
    config = validate_config("llm-personalize", {"scenes": ["Ihlen_1_int"]})
    assert config.data_dir == "$LLMRL_HOUSEKEEP_DATA"  # the data, unresolved: never procedural
    with pytest.raises(FileNotFoundError, match=r"llmrl data get housekeep.*data_dir=procedural"):
        LlmPersonalize(config).eval_set()
    unnamed = validate_config("llm-personalize", {})  # no scenes named: the same, not houses
    with pytest.raises(FileNotFoundError, match="llmrl data get housekeep"):
        LlmPersonalize(unnamed).eval_set()
    procedural = validate_config("llm-personalize", {"data_dir": "procedural"})  # asked for
    assert LlmPersonalize(procedural).eval_set()[0][0] == "procedural"
    with pytest.raises(ConfigError, match=r"data_dir.*llmrl data get housekeep"):
        validate_config("llm-personalize", {"data_dir": str(tmp_path / "housekeep")})


def test_the_copy_llmrl_data_get_wrote_is_the_default_data(tmp_path, monkeypatch):
    monkeypatch.delenv("LLMRL_HOUSEKEEP_DATA", raising=False)
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path))
    fetched = tmp_path / "data" / "housekeep"
    (fetched / "episodes" / "val").mkdir(parents=True)
    (fetched / "data.npy").write_bytes(b"")
    (fetched / "episodes" / "val" / "Ihlen_1_int.json.gz").write_bytes(b"")
    config = validate_config("llm-personalize", {"scenes": ["Ihlen_1_int"]})
    assert config.data_dir == str(fetched.resolve())
    assert config.scene_list() == ["Ihlen_1_int"]
