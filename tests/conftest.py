"""Fixtures shared by the test modules: one Ray session, one small CartPole
config builder per algorithm family (the builders live in `helpers.py`).

* `ray_session`: a local Ray instance for a test module, with at least the
  module's `RAY_NUM_CPUS` logical CPUs (default 2). Not autouse: a module asks
  for it with `pytest.mark.usefixtures("ray_session")` or as an argument. It
  stays up for the next module that asks (a Ray start and shutdown cost 5-15 s
  on 2 cores, more than many modules' tests) and ends with the test session.
* `ray_down`: Ray shut down, for a test that starts Ray itself.
* `small_dqn(config=None, **settings)`: `helpers.build_small_dqn`, a small
  CartPole DQN-family config (NERS-DQN by default; also stock DQN and Rainbow
  DQN configs).
* `small_acer(replay="uniform", **settings)`: `helpers.build_small_acer`, a
  small CartPole ACER config.
* `small_sac(replay="ners", **settings)`: `helpers.build_small_sac`, a small
  Pendulum NERS-SAC config.
* `small_td3(replay="uniform", **settings)`: `helpers.build_small_td3`, a small
  Pendulum TD3 config.
* `one_torch_thread`: torch runs on one thread in this process during a test
  (a local Learner's small networks gain nothing from more, and on a loaded
  machine torch's spinning worker threads made each op several times slower).

`benchmarks/` is on the import path (after everything else), so that the tests
of the benchmarks' harness, the runners plot and study_costs import them by
name.
"""

import sys
from pathlib import Path

import pytest
import ray
from helpers import build_small_acer, build_small_dqn, build_small_sac, build_small_td3

DEFAULT_RAY_NUM_CPUS = 2

sys.path.append(str(Path(__file__).resolve().parents[1] / "benchmarks"))


@pytest.fixture(scope="module")
def ray_session(request, _ray_ends_with_the_session):
    num_cpus = getattr(request.module, "RAY_NUM_CPUS", DEFAULT_RAY_NUM_CPUS)
    if ray.is_initialized() and ray.cluster_resources().get("CPU", 0) < num_cpus:
        ray.shutdown()
    if not ray.is_initialized():
        ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    yield


@pytest.fixture(scope="session")
def _ray_ends_with_the_session():
    yield
    ray.shutdown()


@pytest.fixture
def ray_down():
    ray.shutdown()


@pytest.fixture
def one_torch_thread():
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def small_dqn():
    """`build_small_dqn`: (config=None, **settings) -> small CartPole DQN config."""
    return build_small_dqn


@pytest.fixture
def small_acer():
    """`build_small_acer`: (replay="uniform", **settings) -> small CartPole ACER
    config."""
    return build_small_acer


@pytest.fixture
def small_sac():
    """`build_small_sac`: (replay="ners", **settings) -> small Pendulum NERS-SAC
    config."""
    return build_small_sac


@pytest.fixture
def small_td3():
    """`build_small_td3`: (replay="uniform", **settings) -> small Pendulum TD3
    config."""
    return build_small_td3
