"""dm_env_rpc's own compliance suite against the simulator server (real gRPC, own process):
every class against a world of a discrete skill env, and again against a world of the
continuous env PointReach (Box actions). The server requires a token: the channel sends it."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from dm_env_rpc.v1 import compliance, connection, dm_env_rpc_pb2, tensor_utils

from llmrl.common.auth import authenticated_channel

NUM_ENVS = 3


class _ServerConnection:
    """Gives each compliance test a fresh connection to the session's server."""

    env = "SimTestSkills"  # the env of the test's world

    @pytest.fixture(autouse=True)
    def _connect(self, sim_server):
        self._channel = authenticated_channel(grpc.insecure_channel(sim_server.address))
        self._connection = connection.Connection(self._channel)
        self._world_name = None
        yield
        if self._world_name is not None:
            self._connection.send(dm_env_rpc_pb2.LeaveWorldRequest())
            self._connection.send(dm_env_rpc_pb2.DestroyWorldRequest(world_name=self._world_name))
        self._connection.close()
        self._channel.close()

    @property
    def connection(self):
        return self._connection

    def _create(self) -> str:
        settings = {
            "env": tensor_utils.pack_tensor(self.env),
            "num_envs": tensor_utils.pack_tensor(NUM_ENVS),
            "seed": tensor_utils.pack_tensor(7),
        }
        response = self._connection.send(dm_env_rpc_pb2.CreateWorldRequest(settings=settings))
        self._world_name = response.world_name
        return self._world_name

    @property
    def world_name(self):
        return self._world_name or self._create()


class TestCreateDestroyWorld(_ServerConnection, compliance.CreateDestroyWorld):
    @property
    def required_world_settings(self):
        return {"env": tensor_utils.pack_tensor("SimTestCorridor")}

    @property
    def invalid_world_settings(self):
        return {
            "num_envs": tensor_utils.pack_tensor(0),
            "seed": tensor_utils.pack_tensor("not a number"),
            "no_such_setting": tensor_utils.pack_tensor(1),
            "length": tensor_utils.pack_tensor(1),  # the env's own kwarg, refused by the env
        }

    @property
    def has_multiple_world_support(self):
        return True


class TestJoinLeaveWorld(_ServerConnection, compliance.JoinLeaveWorld):
    @property
    def invalid_join_settings(self):
        return {"no_such_setting": tensor_utils.pack_tensor(1)}


class TestReset(_ServerConnection, compliance.Reset):
    def join_world(self):
        return self.connection.send(
            dm_env_rpc_pb2.JoinWorldRequest(world_name=self.world_name)
        ).specs


class TestResetWorld(_ServerConnection, compliance.ResetWorld):
    pass


class TestStep(_ServerConnection, compliance.Step):
    @pytest.fixture(autouse=True)
    def _join(self, _connect):
        self._specs = self.connection.send(
            dm_env_rpc_pb2.JoinWorldRequest(world_name=self.world_name)
        ).specs

    @property
    def specs(self):
        return self._specs

    @property
    def required_actions(self):
        return {1: tensor_utils.pack_tensor(np.zeros(NUM_ENVS, np.int64))}


class _Continuous:
    env = "PointReach"


class TestCreateDestroyWorldContinuous(_Continuous, TestCreateDestroyWorld):
    @property
    def required_world_settings(self):
        return {"env": tensor_utils.pack_tensor(self.env)}

    @property
    def invalid_world_settings(self):
        return {
            "num_envs": tensor_utils.pack_tensor(0),
            "no_such_setting": tensor_utils.pack_tensor(1),
            "goal_radius": tensor_utils.pack_tensor(0.0),  # the env's own kwarg, refused
        }


class TestJoinLeaveWorldContinuous(_Continuous, TestJoinLeaveWorld):
    pass


class TestResetContinuous(_Continuous, TestReset):
    pass


class TestResetWorldContinuous(_Continuous, TestResetWorld):
    pass


class TestStepContinuous(_Continuous, TestStep):
    @property
    def required_actions(self):
        return {1: tensor_utils.pack_tensor(np.zeros((NUM_ENVS, 2), np.float32))}


class TestStepPerElementBounds(TestStep):
    env = "SimTestSlider"  # float64 actions with different bounds per element

    @property
    def required_actions(self):
        return {1: tensor_utils.pack_tensor(np.zeros((NUM_ENVS, 2), np.float64))}
