"""KALM's grounded LM (`llmrl.recipes.kalm.grounded_lm`) on the tiny random Llama: the state head
reproduces a state after a few SFT steps; every task builds; the numbers-as-text ablation
trains under the text loss; a saved model loads back with the same predictions."""

from __future__ import annotations

import random

import numpy as np
import pytest

from llmrl.recipes.kalm.grounded_lm import TASKS, GroundedLM, GroundingSpec, task_items

torch = pytest.importorskip("torch")


def small_episode(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    states = rng.uniform(-0.5, 0.5, size=(4, 10)).astype(np.float32)
    return states, np.array([3, 17, 39])


def fit(model: GroundedLM, batches, steps: int, lr: float = 3e-3) -> list[float]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    losses = []
    for i in range(steps):
        loss, _ = model.loss(batches[i % len(batches)])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    model.train(False)
    return losses


def test_state_head_reproduces_a_state_after_a_few_steps(tiny_model_dir):
    torch.manual_seed(0)
    states, actions = small_episode()
    model = GroundedLM.create(
        str(tiny_model_dir), GroundingSpec(state_dim=10, action_size=40), lora_r=4, states=states
    )
    rng = random.Random(0)
    example = task_items("goal", "push the red ball behind the blue ball", states, actions, rng)
    prompt = example[:-1]  # everything before the final state: the model must predict it
    before = np.abs(model.predict_state(model.last_hidden([prompt]))[0] - states[-1]).max()
    losses = fit(model, [[example] * 2], steps=60)
    after = model.predict_state(model.last_hidden([prompt]))[0]
    assert losses[-1] < 0.1 * losses[0]
    assert np.abs(after - states[-1]).max() < 0.05 < before


def test_every_task_trains_and_saves(tiny_model_dir, tmp_path):
    states, actions = small_episode(1)
    rng = random.Random(1)
    model = GroundedLM.create(
        str(tiny_model_dir), GroundingSpec(state_dim=10, action_size=40), lora_r=4, states=states
    )
    batch = [task_items(task, "push the red ball", states, actions, rng) for task in TASKS]
    _, parts = model.loss(batch)
    assert set(parts) == {"state", "action", "stop", "text"}
    losses = fit(model, [batch], steps=30)
    assert losses[-1] < losses[0]
    model.save(tmp_path / "g")
    again = GroundedLM.load(tmp_path / "g")
    prompt = batch[0][:2]
    same = [m.predict_action(m.last_hidden([prompt]))[0][0] for m in (model, again)]
    assert same[0] == same[1]
    with pytest.raises(ValueError, match="unknown grounding task"):
        task_items("dance", "x", states, actions, rng)


def test_a_loss_weight_scales_its_loss_alone(tiny_model_dir):
    states, actions = small_episode(3)
    model = GroundedLM.create(
        str(tiny_model_dir), GroundingSpec(state_dim=10, action_size=40), lora_r=4, states=states
    )
    model.train(False)
    rng = random.Random(3)
    batch = [task_items(task, "push the red ball", states, actions, rng) for task in TASKS]
    with torch.no_grad():
        plain, parts = model.loss(batch)
        weighted, same_parts = model.loss(batch, {"state": 5.0})
    assert same_parts == parts  # each loss is reported unweighted
    assert float(plain) == pytest.approx(sum(parts.values()), rel=1e-5)
    assert float(weighted) == pytest.approx(float(plain) + 4 * parts["state"], rel=1e-5)


def test_a_heavier_state_loss_learns_the_state_faster_under_the_gradient_clip(tiny_model_dir):
    """The grounding clips the summed gradient; the cross-entropies then dominate it, and
    weighting the state MSE up is what lets the state head learn (the README's kalm probe)."""
    states, actions = small_episode(4)
    rng = random.Random(4)
    batch = [task_items(task, "push the red ball", states, actions, rng) for task in TASKS]
    state_losses = {}
    for weight in (1.0, 50.0):
        torch.manual_seed(0)
        model = GroundedLM.create(
            str(tiny_model_dir), GroundingSpec(state_dim=10, action_size=40), lora_r=4,
            states=states,
        )  # fmt: skip
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        model.train()
        for _ in range(40):
            loss, _ = model.loss(batch, {"state": weight})
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        model.train(False)
        with torch.no_grad():
            state_losses[weight] = model.loss(batch)[1]["state"]
    assert state_losses[50.0] < 0.5 * state_losses[1.0]


def test_numbers_as_text_ablation_uses_the_text_loss_only(tiny_model_dir):
    states, actions = small_episode(2)
    model = GroundedLM.create(
        str(tiny_model_dir),
        GroundingSpec(state_dim=10, action_size=40, numbers="text"),
        lora_r=4,
        states=states,
    )
    batch = [task_items("trajectory", "push it", states, actions, random.Random(0))]
    _, parts = model.loss(batch)
    assert set(parts) == {"text"}
    assert model.number_text("action", 17) == " a17"
    assert model.number_text("state", [0.125, -0.5]) == " [0.12, -0.50]"


def test_registered_grounding_sft_learns_from_an_offline_dataset(tiny_model_dir, tmp_path):
    from llmrl.common.offline_dataset import OfflineDataset
    from llmrl.common.registry import registry
    from llmrl.learner.versions import Versions

    rng = np.random.default_rng(4)
    dataset = OfflineDataset.from_arrays(
        env="ClevrRobot",
        source="scripted",
        observations=rng.uniform(-0.5, 0.5, size=(6, 10)),
        actions=np.array([1, 2, 3, 4, 5, 6]),
        rewards=np.zeros(6),
        terminals=np.array([False, False, True, False, False, True]),
        timeouts=np.zeros(6, bool),
        episode_ids=np.array([0, 0, 0, 1, 1, 1]),
        instructions=np.array(["push the red ball", "push the blue ball"]),
        goals=np.zeros((2, 6)),
        final_observations=rng.uniform(-0.5, 0.5, size=(2, 10)),
    )
    grounding = registry.get_algorithm("kalm-grounding")
    progress = []
    checkpoint = grounding.train(
        dataset, Versions(tmp_path / "g"), on_progress=progress.append,
        base_model=str(tiny_model_dir), steps=3, batch_size=4, lora_r=2, action_size=40,
        base_layers=1,
    )  # fmt: skip
    assert checkpoint.version == "1" and sum(progress) == 3
    assert checkpoint.result["episodes"] == 2 and checkpoint.result["spec"]["action_size"] == 40
    model = grounding.load(tmp_path / "g")
    assert model.spec.base_layers == 1 and len(model.causal_lm.model.layers) == 1
    with pytest.raises(ValueError, match="tasks"):
        grounding.train(dataset, Versions(tmp_path / "x"), tasks=["sing"])
    with pytest.raises(ValueError, match=r"action_size: 5 is too small.*up to 6"):
        grounding.train(dataset, Versions(tmp_path / "y"), base_model=str(tiny_model_dir),
                        action_size=5)  # fmt: skip


def test_the_job_weights_the_action_loss_it_is_given(tiny_model_dir, tmp_path):
    """One step from the same seed: the summed loss grows by (weight - 1) x the action loss,
    which is itself reported unweighted."""
    from llmrl.common.registry import registry
    from llmrl.learner.versions import Versions

    grounding = registry.get_algorithm("kalm-grounding")
    first = {}
    for weight in (1.0, 4.0):
        checkpoint = grounding.train(
            small_dataset(5), Versions(tmp_path / str(weight)), base_model=str(tiny_model_dir),
            steps=1, batch_size=4, lora_r=2, action_size=40, base_layers=1,
            action_loss_weight=weight, tasks=["trajectory"],
        )  # fmt: skip
        first[weight] = checkpoint.result["first_losses"]
        assert checkpoint.config["action_loss_weight"] == weight
    assert first[4.0]["action"] == pytest.approx(first[1.0]["action"], rel=1e-5)
    assert first[4.0]["loss"] == pytest.approx(
        first[1.0]["loss"] + 3 * first[1.0]["action"], rel=1e-4
    )


def small_dataset(seed: int, actions: np.ndarray | None = None, state_dim: int = 10):
    from llmrl.common.offline_dataset import OfflineDataset

    rng = np.random.default_rng(seed)
    return OfflineDataset.from_arrays(
        env="ClevrRobot",
        source="scripted",
        observations=rng.uniform(-0.5, 0.5, size=(4, state_dim)),
        actions=np.array([1, 2, 3, 4]) if actions is None else actions,
        rewards=np.zeros(4),
        terminals=np.array([False, True, False, True]),
        timeouts=np.zeros(4, bool),
        episode_ids=np.array([0, 0, 1, 1]),
        instructions=np.array(["push the red ball", "push the blue ball"]),
        goals=np.zeros((2, 6)),
        final_observations=rng.uniform(-0.5, 0.5, size=(2, state_dim)),
    )


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"steps": 0}, "steps"),
        ({"batch_size": 2.5}, "batch_size"),
        ({"learning_rate": float("nan")}, "learning_rate"),
        ({"learning_rate": "3e-4"}, "learning_rate"),
        ({"head_learning_rate": -1.0}, "head_learning_rate"),
        ({"state_loss_weight": 0.0}, "state_loss_weight"),
        ({"action_loss_weight": -2.0}, "action_loss_weight"),
        ({"action_loss_weight": float("inf")}, "action_loss_weight"),
        ({"lora_layers": 0}, "lora_layers"),
        ({"base_layers": "two"}, "base_layers"),
        ({"seed": -1}, "seed"),
        ({"continue_training": "yes"}, "continue_training"),
        ({"numbers": "words"}, "numbers"),
        ({"state_target": "velocity"}, "state_target"),
        ({"numbers": "text", "state_target": "delta"}, "state_target"),
        ({"tasks": ["trajectory", "sing"]}, "tasks"),
        ({"device": "gpu"}, "device"),
        ({"epochs": 3}, "epochs"),  # unknown
    ],
)
def test_grounding_sft_refuses_bad_settings_by_name(tmp_path, settings, named):
    from llmrl.common.registry import registry
    from llmrl.learner.versions import Versions

    grounding = registry.get_algorithm("kalm-grounding")
    with pytest.raises(ValueError, match=rf"^kalm-grounding: {named}: "):
        grounding.train(small_dataset(0), Versions(tmp_path / "g"), **settings)
    assert not (tmp_path / "g").exists() or not Versions(tmp_path / "g").versions()


def test_grounding_sft_refuses_datasets_of_another_layout_before_training(tmp_path):
    from llmrl.common.registry import registry
    from llmrl.learner.versions import Versions

    grounding = registry.get_algorithm("kalm-grounding")
    box = small_dataset(1, actions=np.zeros((4, 4), np.float32))
    with pytest.raises(ValueError, match=r"source\[1\]: continuous \(Box\) actions"):
        grounding.train([small_dataset(0), box], Versions(tmp_path / "g"))
    wider = small_dataset(2, state_dim=12)
    with pytest.raises(ValueError, match=r"source\[1\]\.observations: shape \(12,\)"):
        grounding.train([small_dataset(0), wider], Versions(tmp_path / "g"))


def test_continue_training_continues_the_same_model_and_refuses_a_changed_one(
    tiny_model_dir, tmp_path
):
    from llmrl.common.registry import registry
    from llmrl.learner.versions import Versions

    grounding = registry.get_algorithm("kalm-grounding")
    line = Versions(tmp_path / "g")
    base = {"base_model": str(tiny_model_dir), "steps": 1, "batch_size": 2, "lora_r": 2}
    grounding.train(small_dataset(0), line, **base, base_layers=1, action_size=40)
    # the same model, more steps: version 2, with the first version's action ids
    second = grounding.train(small_dataset(1), line, **base, base_layers=1, continue_training=True)
    assert second.version == "2" and second.result["spec"]["action_size"] == 40
    with pytest.raises(ValueError, match=r"^numbers: 'text' differs from 'tokens' of version 2"):
        grounding.train(
            small_dataset(1), line, **base, base_layers=1, numbers="text", continue_training=True
        )
    with pytest.raises(ValueError, match=r"^state_target: 'delta' differs from 'absolute'"):
        grounding.train(
            small_dataset(1), line, **base, base_layers=1, state_target="delta",
            continue_training=True,
        )  # fmt: skip
    with pytest.raises(ValueError, match=r"^base_layers: 2 differs from 1"):
        grounding.train(small_dataset(1), line, **base, base_layers=2, continue_training=True)
    with pytest.raises(ValueError, match=r"^source: state_dim 12 differs from 10"):
        grounding.train(
            small_dataset(1, state_dim=12), line, **base, base_layers=1, continue_training=True
        )
    assert line.versions() == ["1", "2"]


def test_a_delta_head_predicts_the_change_and_starts_at_nothing_moved(tiny_model_dir, tmp_path):
    """state_target=delta: the head's zero means "the state before it, unchanged" (so an
    untrained head already predicts that), it trains towards the change, and a saved model
    keeps the setting."""
    torch.manual_seed(0)
    states, actions = small_episode(3)
    spec = GroundingSpec(state_dim=10, action_size=40, state_target="delta")
    model = GroundedLM.create(str(tiny_model_dir), spec, lora_r=4, states=states)
    with torch.no_grad():
        model.modules["state_out"].weight.zero_()
        model.modules["state_out"].bias.zero_()
    example = task_items("dynamics", "", states, actions, random.Random(0))
    before, after_state = example[1][1], example[-1][1]
    prompt = example[:-1]
    unchanged = model.predict_state(model.last_hidden([prompt]), before[None])[0]
    np.testing.assert_allclose(unchanged, before, atol=1e-5)
    # the trained target is the normalised change, not the normalised state
    _, _, targets = model.embed([example])
    norm = model.modules["norm"]
    change = norm(torch.as_tensor(after_state)) - norm(torch.as_tensor(before))
    np.testing.assert_allclose(targets[0]["state"][0][1].detach().numpy(), change, atol=1e-6)
    fit(model, [[example] * 2], steps=60)
    predicted = model.predict_state(model.last_hidden([prompt]), before[None])[0]
    assert np.abs(predicted - after_state).max() < 0.05
    with pytest.raises(ValueError, match="needs the previous states"):
        model.predict_state(model.last_hidden([prompt]))
    model.save(tmp_path / "d")
    assert GroundedLM.load(tmp_path / "d").spec.state_target == "delta"


def test_state_target_settings_are_checked():
    with pytest.raises(ValueError, match="state_target: expected one of absolute, delta"):
        GroundingSpec(state_dim=10, action_size=40, state_target="velocity")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="state_target: delta needs the state head"):
        GroundingSpec(state_dim=10, action_size=40, numbers="text", state_target="delta")
