"""Worlds with continuous (Box) actions: the PointReach env in-process, sharded and over gRPC,
bad continuous actions, and the gymnasium / Stable-Baselines3 adapters."""

from __future__ import annotations

import re
import warnings

import grpc
import numpy as np
import pytest
from dm_env_rpc.v1 import connection, dm_env_rpc_pb2, error, tensor_utils
from gymnasium import spaces
from support.world_rollouts import assert_same

from llmrl.common.auth import authenticated_channel
from llmrl.simulator.client import RemoteWorld
from llmrl.simulator.vector import WorldVecEnv, WorldVectorEnv
from llmrl.simulator.world import StepType, World, WorldError, make_env

BOX = spaces.Box(-1.0, 1.0, (2,), np.float32)
BOUNDS = r"allowed each element in \[-1, 1\]"


def box_rollout(world, steps: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Random velocities (float64, as a user writes them: worlds cast them to float32)."""
    rng = np.random.default_rng(seed)
    results = [world.reset()]
    for _ in range(steps):
        results.append(world.step(rng.uniform(-1, 1, (world.num_envs, 2))))
    return results


def test_world_remote_world_and_sharded_world_agree_with_box_actions(sim_server):
    settings = {"num_envs": 4, "seed": 3, "max_episode_steps": 8}
    local = World("PointReach", **settings)
    with (
        World("PointReach", num_workers=2, **settings) as sharded,
        RemoteWorld(sim_server.address, "PointReach", **settings) as remote,
    ):
        for world in (local, sharded, remote):
            assert world.action_space == BOX
            assert world.observation_space.keys() == local.observation_space.keys()
            assert world.observation_space["position"] == local.observation_space["position"]
        expected = box_rollout(local, 30)
        assert_same(box_rollout(sharded, 30), expected)
        assert_same(box_rollout(remote, 30), expected)
        # float32 actions, the box's own dtype, are taken as they are
        action = np.full((4, 2), 0.25, np.float32)
        assert_same([remote.step(action)], [local.step(action)])
    step_types = np.stack([result["step_type"] for result in expected])
    assert (step_types == StepType.LAST).sum() >= 4  # episodes ended and auto-reset
    local.close()


def test_point_reach_moves_the_point_and_reaches_the_target():
    with World("PointReach", num_envs=2, seed=0) as world:
        obs = world.reset()
        assert obs["text"][0].startswith("the point is at (")
        for _ in range(60):
            heading = obs["target"] - obs["position"]
            step = np.clip(heading / 0.1, -1, 1)  # straight to the target, at most full speed
            obs = world.step(step)
            if (obs["step_type"] == StepType.LAST).all():
                break
        assert obs["success"].tolist() == [1, 1] and (obs["discount"] == 0).all()
        assert (obs["reward"] > 1).all()  # the last step's progress plus the success bonus


@pytest.mark.parametrize(
    ("action", "message"),
    [
        (np.zeros(3), r"^action: expected shape \(3, 2\) \(one array of shape \(2,\) per env\)"),
        (np.zeros((3, 2, 1)), r"^action: expected shape \(3, 2\)"),
        (np.zeros((3, 2), np.int64), r"^action: expected floats \(float32 .*\[-1, 1\]\)"),
        ([[0, 0], [0, 0], [0.5, 1.5]], rf"^action\[2\]: \[0\.5, 1\.5\] is out of bounds; {BOUNDS}"),
        ([[0, 0], [-2.0, 0], [0, 0]], rf"^action\[1\]: \[-2, 0\] is out of bounds; {BOUNDS}"),
        ([[np.nan, 0], [0, 0], [0, 0]], rf"^action\[0\]: \[nan, 0\] is not finite; {BOUNDS}"),
        ([[0, 0], [0, np.inf], [0, 0]], rf"^action\[1\]: \[0, inf\] is not finite; {BOUNDS}"),
        (None, r"^action: env 0 takes a step and needs an action"),
    ],
)
@pytest.mark.parametrize("where", ["in-process", "sharded", "remote"])
def test_bad_box_actions_are_refused_before_any_env_steps(
    sim_server, bystander, where, action, message
):
    settings = {"num_envs": 3, "seed": 5}
    if where == "remote":
        world = RemoteWorld(sim_server.address, "PointReach", **settings)
    else:
        world = World("PointReach", num_workers=2 if where == "sharded" else 0, **settings)
    with world:
        start = world.reset()["position"]
        with pytest.raises(WorldError, match=message) as info:
            world.step(action)
        assert info.value.field.startswith("action")  # the field survives the wire too
        # nothing moved: a zero velocity leaves every point where the episode started
        np.testing.assert_array_equal(world.step(np.zeros((3, 2)))["position"], start)
    bystander.step([1, 1])  # the server's other worlds keep working


@pytest.fixture
def bystander(sim_server):
    """Another client's (discrete) world on the same server."""
    with RemoteWorld(sim_server.address, "SimTestCorridor", num_envs=2, seed=1) as world:
        world.reset()
        yield world


def test_resetting_envs_ignore_their_box_actions():
    with World("PointReach", num_envs=2, seed=1, max_episode_steps=1) as world:
        world.reset()
        assert (world.step(np.zeros((2, 2)))["step_type"] == StepType.LAST).all()
        # both envs are reset by this step: their (out-of-bounds) actions are not looked at
        restarted = world.step(np.full((2, 2), 5.0))
        assert (restarted["step_type"] == StepType.FIRST).all()


def test_wire_float_actions_come_in_the_specs_dtype_with_bounds(sim_server, bystander):
    channel = authenticated_channel(grpc.insecure_channel(sim_server.address))
    conn = connection.Connection(channel)
    settings = {
        "env": tensor_utils.pack_tensor("PointReach"),
        "num_envs": tensor_utils.pack_tensor(2),
    }
    name = conn.send(dm_env_rpc_pb2.CreateWorldRequest(settings=settings)).world_name
    specs = conn.send(dm_env_rpc_pb2.JoinWorldRequest(world_name=name)).specs
    action_spec = specs.actions[1]
    assert action_spec.name == "action" and list(action_spec.shape) == [2, 2]
    assert action_spec.dtype == dm_env_rpc_pb2.DataType.FLOAT
    assert (action_spec.min.floats.array, action_spec.max.floats.array) == ([-1.0], [1.0])
    conn.send(dm_env_rpc_pb2.StepRequest())  # starts the episodes
    for value, pattern in [
        (np.zeros((2, 2), np.float64), r"^action: expected dtype float32 \(float32 arrays of"),
        (np.full((2, 2), 3, np.float32), r"^action\[0\]: \[3, 3\] is out of bounds"),
    ]:
        with pytest.raises(error.DmEnvRpcError) as info:
            conn.send(dm_env_rpc_pb2.StepRequest(actions={1: tensor_utils.pack_tensor(value)}))
        assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert re.search(pattern, info.value.message), info.value.message
        assert "[-1, 1]" in info.value.message  # the bounds are named
    ok = np.full((2, 2), 0.5, np.float32)
    conn.send(dm_env_rpc_pb2.StepRequest(actions={1: tensor_utils.pack_tensor(ok)}))
    conn.send(dm_env_rpc_pb2.LeaveWorldRequest())
    conn.send(dm_env_rpc_pb2.DestroyWorldRequest(world_name=name))
    channel.close()
    bystander.step([1, 1])


def test_point_reach_passes_the_gymnasium_and_sb3_env_checkers():
    from gymnasium.utils.env_checker import check_env
    from gymnasium.wrappers import FilterObservation
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    check_env(make_env("PointReach").unwrapped, skip_render_check=True)
    # SB3 takes numeric entries only (those its WorldVecEnv returns by default), and warns
    # about anything it would handle badly (e.g. a box that is not [-1, 1])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sb3_check_env(FilterObservation(make_env("PointReach"), ["position", "target", "success"]))
    assert not [str(warning.message) for warning in caught]


def test_vector_env_offers_the_box_and_steps_it():
    envs = WorldVectorEnv(World("PointReach", num_envs=3, seed=0))
    assert envs.single_action_space == BOX
    assert envs.action_space == spaces.Box(-1.0, 1.0, (3, 2), np.float32)
    assert set(envs.single_observation_space.spaces) == {"position", "target", "success"}
    obs, _ = envs.reset(seed=2)
    actions = envs.action_space.sample()
    obs2, reward, terminated, truncated, _ = envs.step(actions)
    np.testing.assert_allclose(obs2["position"], np.clip(obs["position"] + 0.1 * actions, -1, 1))
    assert reward.shape == (3,) and not (terminated | truncated).any()
    envs.close()


def run_vec_env(vec_env, actions: list[np.ndarray]) -> list[tuple]:
    out = [vec_env.reset()]
    for action in actions:
        vec_env.step_async(action)
        out.append(vec_env.step_wait())
    return out


def test_sb3_vec_env_over_remote_box_world_matches_in_process(sim_server):
    rng = np.random.default_rng(0)
    actions = [rng.uniform(-1, 1, (3, 2)).astype(np.float32) for _ in range(30)]
    settings = {"num_envs": 3, "seed": 4, "max_episode_steps": 7}
    local = run_vec_env(WorldVecEnv(World("PointReach", **settings)), actions)
    with RemoteWorld(sim_server.address, "PointReach", **settings) as world:
        vec_env = WorldVecEnv(world)
        assert vec_env.action_space == BOX
        remote = run_vec_env(vec_env, actions)
    for step, (a, b) in enumerate(zip(local[1:], remote[1:], strict=True)):
        for key in a[0]:
            np.testing.assert_array_equal(a[0][key], b[0][key], err_msg=f"step {step}")
        np.testing.assert_array_equal(a[1], b[1])
        np.testing.assert_array_equal(a[2], b[2])
    dones = np.stack([done for _, _, done, _ in local[1:]])
    assert dones.any()  # episodes ended (the time limit), with same-step resets


def test_sb3_ppo_learns_on_a_box_world_vec_env():
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecMonitor

    vec_env = VecMonitor(WorldVecEnv(World("PointReach", num_envs=4, seed=0, max_episode_steps=20)))
    model = PPO(
        "MultiInputPolicy", vec_env, n_steps=32, batch_size=64, n_epochs=1, seed=0, device="cpu"
    )
    model.learn(total_timesteps=256)
    assert model.num_timesteps >= 256
    assert len(model.ep_info_buffer) > 0  # whole episodes went through VecMonitor
    action, _ = model.predict(vec_env.reset(), deterministic=True)
    assert action.shape == (4, 2) and BOX.contains(action[0])
    vec_env.close()


def test_sb3_sac_trains_on_a_remote_box_world(sim_server):
    from stable_baselines3 import SAC

    with RemoteWorld(sim_server.address, "PointReach", num_envs=2, seed=0) as world:
        vec_env = WorldVecEnv(world, keys=["position", "target"])
        model = SAC(
            "MultiInputPolicy",
            vec_env,
            learning_starts=64,
            batch_size=32,
            buffer_size=1_000,
            policy_kwargs={"net_arch": [32, 32]},
            seed=0,
            device="cpu",
        )
        model.learn(total_timesteps=200)
        assert model.num_timesteps >= 200 and model.replay_buffer.size() > 64


def test_per_element_float64_bounds_travel_and_are_checked(sim_server):
    box = spaces.Box(np.array([-1.0, 0.0]), np.array([1.0, 2.0]), (2,), np.float64)
    local = World("SimTestSlider", num_envs=2)
    with RemoteWorld(sim_server.address, "SimTestSlider", num_envs=2) as remote:
        for world in (local, remote):
            assert world.action_space == box
            world.reset()
            # float32 actions are cast to the box's float64, in-process and on the wire alike
            taken = world.step(np.array([[0.5, 1.5], [-1.0, 0.0]], np.float32))["last_action"]
            assert taken.dtype == np.float64 and taken.tolist() == [[0.5, 1.5], [-1.0, 0.0]]
            with pytest.raises(
                WorldError,
                match=r"^action\[1\]: \[0\.5, -0\.5\] is out of bounds; "
                r"allowed elements from low \[-1, 0\] to high \[1, 2\]",
            ):
                world.step([[0.0, 0.0], [0.5, -0.5]])
    local.close()


def test_sb3_vec_env_clips_box_actions_to_the_bounds_but_refuses_nan():
    vec_env = WorldVecEnv(World("SimTestSlider", num_envs=2))
    vec_env.reset()
    # SAC's float32 unscaling of tanh(...) = 1 can land one ulp above a bound
    above = np.nextafter(np.float32(2.0), np.float32(3.0))
    vec_env.step_async(np.array([[1.0, above], [-1.0, 0.0]], np.float32))
    obs, _, _, _ = vec_env.step_wait()
    assert obs.tolist() == [[1.0, 2.0], [-1.0, 0.0]]
    vec_env.step_async(np.array([[np.nan, 0.0], [0.0, 0.0]], np.float32))
    with pytest.raises(WorldError, match=r"^action\[0\]: \[nan, 0\] is not finite"):
        vec_env.step_wait()
