"""A real two-node Ray cluster on this machine, started with `ray start`.

The head node and a second node (custom resource `worker_node: 2`) run as
separate `ray start --block` process groups with their own temp dirs and ports;
EnvRunners ask for `worker_node: 1`, so Ray can only place them on the second
node. NERS-DQN trains there through `ray.init(address=...)` and through the
CLI's `--ray-address`. The fixture tears down exactly the processes it started
(their process groups, then any straggler whose command line names its temp
dir); `ray stop` is never called, since it would stop every Ray on the machine.

Deselected by default (`-m cluster` runs it): it starts ~20 extra processes.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import ray

from rllib_ners import NERSDQNConfig

pytestmark = pytest.mark.cluster
# Functions sent to EnvRunners travel by value (workers cannot import tests).
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

REPO = Path(__file__).resolve().parents[2]
# RLlib's EnvRunner, and ours, which this package's configs start by default.
ENV_RUNNER_CLASSES = ("SingleAgentEnvRunner", "FastSingleAgentEnvRunner")


def _free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _subprocess_env():
    # Our own token-less cluster; rllib_ners importable in every worker.
    return dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(
            filter(None, [str(REPO), os.environ.get("PYTHONPATH")])
        ),
        RAY_AUTH_MODE="disabled",
        RAY_USAGE_STATS_ENABLED="0",
    )


def _pids_naming(text):
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if text.encode() in cmdline:
            pids.append(int(proc.name))
    return pids


def _stop_group(proc, timeout):
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def _wait_for(predicate, procs, what, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        for proc in procs:
            if proc.poll() is not None:
                raise RuntimeError(f"`ray start` exited early while waiting for {what}")
        time.sleep(1.0)
    raise TimeoutError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def two_node_cluster():
    """Yields (gcs address, node id of the second node)."""
    if ray.is_initialized():
        ray.shutdown()
    temp_root = tempfile.mkdtemp(prefix="rn", dir="/tmp")  # short: socket paths
    ports = _free_ports(11)
    env = _subprocess_env()
    address = f"127.0.0.1:{ports[0]}"
    common = ["--block", "--node-ip-address=127.0.0.1", "--disable-usage-stats"]
    head = [
        "ray",
        "start",
        "--head",
        f"--port={ports[0]}",
        "--num-cpus=2",
        "--include-dashboard=false",
        f"--dashboard-port={ports[1]}",
        f"--dashboard-agent-listen-port={ports[2]}",
        f"--dashboard-agent-grpc-port={ports[3]}",
        f"--runtime-env-agent-port={ports[4]}",
        f"--metrics-export-port={ports[5]}",
        f"--temp-dir={temp_root}/head",
        *common,
    ]
    worker = [
        "ray",
        "start",
        f"--address={address}",
        "--num-cpus=2",
        '--resources={"worker_node": 2}',
        f"--dashboard-agent-listen-port={ports[6]}",
        f"--dashboard-agent-grpc-port={ports[7]}",
        f"--runtime-env-agent-port={ports[8]}",
        f"--metrics-export-port={ports[9]}",
        f"--temp-dir={temp_root}/worker",
        *common,
    ]
    procs = []

    def start(cmd, name):
        log = open(f"{temp_root}/{name}.log", "w")
        procs.append(
            subprocess.Popen(
                cmd,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )

    def status():
        out = subprocess.run(
            ["ray", "status", f"--address={address}"],
            env=env,
            capture_output=True,
            text=True,
        )
        return out.returncode, out.stdout

    try:
        start(head, "head")
        _wait_for(lambda: status()[0] == 0, procs, "the head node")
        start(worker, "worker")
        _wait_for(lambda: "worker_node" in status()[1], procs, "the second node")
        ray.init(address=address, log_to_driver=False)
        nodes = [n for n in ray.nodes() if n["Alive"]]
        assert len(nodes) == 2
        (worker_node,) = [n["NodeID"] for n in nodes if "worker_node" in n["Resources"]]
        ray.shutdown()
        yield address, worker_node
    finally:
        if ray.is_initialized():
            ray.shutdown()
        for proc in reversed(procs):
            _stop_group(proc, timeout=20)
        for pid in _pids_naming(temp_root):  # workers that left the group
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(temp_root, ignore_errors=True)


def _config():
    return (
        NERSDQNConfig()
        .environment("CartPole-v1")
        .env_runners(
            num_env_runners=2,
            rollout_fragment_length=8,
            custom_resources_per_env_runner={"worker_node": 1},
        )
        .training(
            n_step=3,
            train_batch_size_per_learner=32,
            num_steps_sampled_before_learning_starts=100,
            replay_buffer_config={"capacity": 5000},
        )
        .reporting(min_sample_timesteps_per_iteration=200)
        .debugging(seed=0)
    )


def _node_id(_=None):
    return ray.get_runtime_context().get_node_id()


def _env_runner_actors(address):
    """EnvRunner actors the cluster has seen (dead ones stay in the GCS table)."""
    ray.init(address=address, log_to_driver=False)
    try:
        return {
            actor_id: actor["Address"]["NodeID"]
            for actor_id, actor in ray._private.state.actors().items()
            if actor["ActorClassName"] in ENV_RUNNER_CLASSES
        }
    finally:
        ray.shutdown()


def test_env_runners_on_the_second_node_via_ray_init_address(two_node_cluster):
    address, worker_node = two_node_cluster
    ray.init(address=address, log_to_driver=False)
    try:
        algo = _config().build_algo()
        try:
            for _ in range(2):
                result = algo.train()
            runner_nodes = algo.env_runner_group.foreach_env_runner(
                _node_id, local_env_runner=False
            )
            assert runner_nodes == [worker_node, worker_node]
            assert _node_id() != worker_node  # the driver, buffer and Learner
            assert result["ners"]["num_sampler_updates_lifetime"] >= 1
            assert len(algo.local_replay_buffer) >= 400
            algo.local_replay_buffer.check_invariants()
        finally:
            algo.stop()
    finally:
        ray.shutdown()


def test_cli_trains_on_the_cluster_via_ray_address(two_node_cluster, tmp_path):
    address, worker_node = two_node_cluster
    runners_before = _env_runner_actors(address)
    overrides = {
        "env_runners": {
            "rollout_fragment_length": 8,
            "custom_resources_per_env_runner": {"worker_node": 1},
        },
        "min_sample_timesteps_per_iteration": 200,
        "num_steps_sampled_before_learning_starts": 100,
    }
    command = [
        sys.executable,
        "-m",
        "rllib_ners.cli",
        "train",
        "--algo",
        "NERS-DQN",
        "--env",
        "CartPole-v1",
        "--ray-address",
        address,
        "--num-env-runners",
        "2",
        "--stop-iters",
        "2",
        "--config",
        json.dumps(overrides),
        "--storage-path",
        str(tmp_path),
        "--name",
        "on_cluster",
    ]
    out = subprocess.run(
        command,
        cwd=REPO,
        env=_subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "done, iter 2" in out.stdout, out.stdout
    # The CLI run's two EnvRunners, dead by now, ran on the second node.
    runners = _env_runner_actors(address)
    new_nodes = [node for key, node in runners.items() if key not in runners_before]
    assert new_nodes == [worker_node, worker_node]
