"""ELLM's suggesters through a real gateway: the `llm` suggester on a scripted chat model
(parsing, de-duplication, the achieved filter, one query per caption), `llm-score` on the tiny
local model, the oracle's prerequisites, all-goals, and `make_suggester`'s errors."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from support.scripted_llm import Script, create_scripted_llm
from support.tiny_llm import TINY_MODEL, tiny_gateway_settings

from llmrl.common.registry import registry
from llmrl.llm_gateway.client import connect
from llmrl.llm_gateway.service import RestServer
from llmrl.recipes.ellm.suggesters import (
    AllGoalsSuggester,
    LlmSuggester,
    OracleSuggester,
    batch_states,
    make_suggester,
)
from llmrl.simulator.envs.crafter.vocabulary import GOALS, INVENTORY_ITEMS, SEMANTIC_IDS

TREE = "you see grass and tree. you are targeting tree."
WATER = "you see grass and water. you are targeting water."


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch, tmp_path) -> Iterator[tuple[Script, Any]]:
    """(script, gateway client): the gateway's default model answers from the script."""
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path))
    script = Script()
    server = RestServer(create_scripted_llm(script)).start()
    monkeypatch.setenv("SCRIPTED_KEY", "sk-scripted")
    model = {"backend": "openai", "base_url": f"{server.url}/v1", "api_key_env": "SCRIPTED_KEY"}
    client = connect(
        models={"scripted": {**model, "max_retries": 0}},
        default_model="scripted",
        cache={"backend": "none"},
    )
    yield script, client
    client.close()
    server.stop()


def test_llm_suggester_parses_dedups_filters_and_asks_once_per_caption(scripted):
    script, llm = scripted
    script.answers += ["- Chop tree\n- Attack cow\n- chop tree\n- Eat cow\n- Drink water", "1. 2."]
    suggester = make_suggester("llm", connect_llm=lambda: llm, llm_defaults={"run_id": "r1"})
    assert suggester.suggest(TREE, ["drink water"]) == ["chop tree", "attack cow"]
    assert suggester.suggest(TREE, ["eat cow"]) == ["chop tree", "drink water"]  # = attack cow
    assert len(script.prompts) == 1  # the same caption is not asked again
    prompt = script.prompts[0]
    assert prompt[-1]["content"].endswith("You are targeting tree. What do you do?")
    assert prompt[0]["content"].startswith("Valid actions: sleep, eat, attack")
    assert suggester.suggest(WATER, []) == []  # "1. 2." is unparsable
    assert suggester.suggest(WATER, []) == []
    assert len(script.prompts) == 2
    counters = suggester.counters()
    assert counters["calls"] == 4 and counters["asked"] == 2
    assert counters["cache_hits"] == 2 and counters["unparsable"] == 1
    assert llm.usage("r1")["model_calls"] == 2


def test_llm_suggester_asks_a_batch_of_unseen_captions_once_each(scripted):
    script, llm = scripted
    script.answers += ["- chop tree"] * 2
    suggester = LlmSuggester(llm=llm)
    answers = suggester.suggest_many([TREE, WATER, TREE], [[], [], ["chop tree"]])
    assert answers == [["chop tree"], ["chop tree"], []]
    assert len(script.prompts) == 2
    assert suggester.counters()["asked"] == 2 and suggester.counters()["cache_hits"] == 1


@pytest.fixture(scope="module")
def tiny_llm(tiny_model_dir, tmp_path_factory) -> Iterator[Any]:
    cache = {"backend": "sqlite", "sqlite_path": str(tmp_path_factory.mktemp("c") / "c.sqlite")}
    client = connect(**tiny_gateway_settings(tiny_model_dir, cache=cache))
    yield client
    client.close()


def test_score_suggester_ranks_the_goal_list_once_per_caption(tiny_llm):
    suggester = make_suggester(
        {"name": "llm-score", "kwargs": {"top_k": 4}}, connect_llm=lambda: tiny_llm
    )
    first = suggester.suggest(TREE)
    assert len(first) == 4 and set(first) <= set(GOALS)
    assert suggester.suggest(TREE, [first[0]]) == [*first[1:], *_next(suggester, TREE, first)]
    other = make_suggester("llm-score", connect_llm=lambda: tiny_llm, model=TINY_MODEL)
    assert other.suggest(TREE) == first[:3]  # the same model and prompt: the gateway's cache
    counters = suggester.counters()
    assert counters["asked"] == 1 and counters["cache_hits"] == 1
    assert other.counters()["gateway_cache_hits"] == 1


def _next(suggester, caption: str, shown: list[str]) -> list[str]:
    """The goal ranked just after `shown` (what moves up when one is achieved)."""
    ranking = suggester.goals_from(suggester._cached(caption))
    return [ranking[len(shown)]]


def state(*things: str, **items: int) -> dict[str, np.ndarray]:
    local_map = np.full((9, 7), SEMANTIC_IDS["grass"])
    for x, thing in enumerate(things):
        local_map[x, 0] = SEMANTIC_IDS[thing]
    inventory = np.array([items.get(item, 9 if i < 4 else 0) for i, item in
                          enumerate(INVENTORY_ITEMS)])  # fmt: skip
    return {"inventory": inventory, "local_map": local_map}


def test_oracle_suggests_the_goals_whose_prerequisites_hold():
    oracle = make_suggester("oracle")
    assert oracle.suggest("", state=state("tree")) == ["chop tree", "chop grass", "sleep"]
    assert "mine stone" not in oracle.suggest("", state=state("stone"))
    assert "mine stone" in oracle.suggest("", state=state("stone", wood_pickaxe=1))
    assert "mine iron" not in oracle.suggest("", state=state("iron", wood_pickaxe=1))
    assert "place crafting table" not in oracle.suggest("", state=state(wood=1))
    with_wood = oracle.suggest("", state=state("table", wood=2))
    assert {"place crafting table", "make wood pickaxe", "make wood sword"} <= set(with_wood)
    assert "make stone pickaxe" not in with_wood
    assert "make iron sword" in oracle.suggest(
        "", state=state("table", "furnace", wood=1, coal=1, iron=1)
    )
    assert "make iron sword" not in oracle.suggest("", state=state("table", wood=1, coal=1, iron=1))
    assert oracle.suggest("", ["chop tree"], state=state("tree", "cow")) == [
        "chop grass",
        "attack cow",
        "sleep",
    ]
    with pytest.raises(ValueError, match=r"^state: "):
        oracle.suggest("you see tree.")
    with pytest.raises(ValueError, match=r"^state: .*'local_map'"):
        oracle.suggest("", state={"inventory": np.zeros(16)})


def test_all_goals_suggests_every_goal_not_achieved():
    suggester = make_suggester("all-goals")
    assert suggester.suggest("anything") == list(GOALS)
    assert suggester.suggest("", ["Eat cow", "sleep"]) == [
        goal for goal in GOALS if goal not in ("attack cow", "sleep")
    ]
    assert AllGoalsSuggester(goals=["sleep", "dance"]).suggest("") == ["sleep", "dance"]


def test_registered_suggesters_and_bad_specs_name_the_key():
    assert {"llm", "llm-score", "oracle", "all-goals"} <= set(registry.names("suggester"))
    with pytest.raises(ValueError, match=r"^suggester: unknown suggester 'gpt'.*all-goals"):
        make_suggester("gpt")
    with pytest.raises(ValueError, match=r"unknown argument\(s\) \['top_k'\]"):
        make_suggester("oracle", top_k=3)
    with pytest.raises(ValueError, match=r"^suggester: expected a name"):
        make_suggester({"kwargs": {}})
    with pytest.raises(ValueError, match=r"^top_k: "):
        make_suggester("llm-score", llm=object(), top_k=0)
    with pytest.raises(ValueError, match=r"^llm: "):
        make_suggester("llm")  # no gateway client and no way to connect one
    with pytest.raises(ValueError, match=r"^goals: "):
        OracleSuggester(goals=["fly"])
    called = []
    make_suggester("oracle", connect_llm=lambda: called.append(1))
    assert not called  # scripted suggesters never connect a gateway client


def test_world_batches_split_into_states():
    rows = [state("tree"), state("water", wood_pickaxe=1)]
    batch = {key: np.stack([row[key] for row in rows]) for key in rows[0]}
    batch["caption"] = np.array(["a", "b"])
    states = batch_states(batch)
    assert [sorted(s) for s in states] == [["inventory", "local_map"]] * 2
    oracle = make_suggester("oracle")
    answers = oracle.suggest_many(["a", "b"], [[], []], states=states)
    assert answers == [oracle.suggest("a", state=rows[0]), oracle.suggest("b", state=rows[1])]
    with pytest.raises(ValueError, match=r"^observation: "):
        batch_states({"caption": batch["caption"]})
