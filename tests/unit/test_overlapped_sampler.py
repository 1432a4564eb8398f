"""`OverlappedSampler` against a scripted EnvRunner group (no Ray): which
EnvRunners get requests, the staleness stamped on each fragment, the wait for
stale requests, and a restarted EnvRunner asked again."""

from rllib_ners.algorithms.common.training.overlapped_sampling import (
    SAMPLE_REQUEST_TAG,
    SMALL_REQUEST_ENV_STEPS,
    OverlappedSampler,
    request_size_line,
)


class ScriptedGroup:
    """The EnvRunnerGroup calls the sampler makes. `finish(runner_id, steps)`
    makes that EnvRunner's request ready with a fragment of `steps` env
    steps; `restart(runner_id)` replaces it as RLlib does (same id)."""

    def __init__(self, runner_ids=(1, 2)):
        self.healthy = set(runner_ids)
        self.restarts = 0
        self.requests = []  # runner ids, in the order the requests were sent
        self.ready = []
        self.waits = []  # timeout_seconds of each fetch

    def healthy_worker_ids(self):
        return sorted(self.healthy)

    def num_remote_worker_restarts(self):
        return self.restarts

    def foreach_env_runner_async(self, func, tag=None, *, remote_worker_ids):
        assert tag == SAMPLE_REQUEST_TAG
        self.requests += remote_worker_ids
        return len(remote_worker_ids)

    def fetch_ready_async_reqs(self, *, tags, timeout_seconds):
        assert tags == SAMPLE_REQUEST_TAG
        self.waits.append(timeout_seconds)
        ready, self.ready = self.ready, []
        return ready

    def finish(self, runner_id, steps):
        self.ready.append((runner_id, ([[0] * steps], {"runner": runner_id})))

    def restart(self, runner_id):
        self.restarts += 1
        self.healthy.add(runner_id)


def test_every_idle_healthy_env_runner_gets_one_request():
    group = ScriptedGroup((1, 2, 3))
    sampler = OverlappedSampler(group, timeout_s=5.0)
    sampler.request()
    sampler.request()  # all busy: nothing more
    assert group.requests == [1, 2, 3]
    group.finish(2, 8)
    fragments = sampler.collect(wait=True)
    assert fragments.env_steps == 8 and fragments.metrics == [{"runner": 2}]
    assert group.waits == [5.0]
    sampler.request()
    assert group.requests == [1, 2, 3, 2]
    assert sampler.num_in_flight == 3


def test_fragments_carry_the_updates_made_since_their_request():
    group = ScriptedGroup()
    sampler = OverlappedSampler(group, timeout_s=5.0)
    sampler.request()  # both sent at update 0
    sampler.updates_done = 3
    group.finish(1, 4)
    assert sampler.collect(wait=False).staleness == [3]
    sampler.weights_version = 3  # the weights were synced after update 3
    sampler.request()  # runner 1 again, with them
    sampler.updates_done = 5
    group.finish(1, 4)
    group.finish(2, 4)
    assert sorted(sampler.collect(wait=False).staleness) == [2, 5]
    assert group.waits == [0.0, 0.0]


def test_a_request_is_stamped_with_the_weights_it_samples_with():
    """With `weights_sync_interval` > 1 the EnvRunners can be sent a request
    after updates whose weights they were not sent: its staleness counts from
    the last sync, not from the update count at the request, and the wait for
    stale requests counts the same way."""
    group = ScriptedGroup()
    sampler = OverlappedSampler(group, timeout_s=5.0)
    sampler.updates_done = sampler.weights_version = 4  # synced after update 4
    sampler.request()
    sampler.updates_done = 7  # 3 updates, not synced
    group.finish(1, 4)
    assert sampler.collect(wait=False).staleness == [3]
    sampler.request()  # runner 1 samples with the weights of update 4
    sampler.updates_done = 8
    group.finish(1, 4)
    group.finish(2, 4)
    assert sampler.collect(wait=False).staleness == [4, 4]
    sampler.request()
    # Both requests sample with update 4's weights: one more update makes
    # them 5 stale, so a bound of 4 waits for them.
    assert sampler.wait_for_stale(5).metrics == []
    group.finish(2, 4)
    group.finish(1, 4)
    assert sampler.wait_for_stale(4).staleness == [4, 4]


def test_the_learner_waits_for_a_request_that_would_grow_too_stale():
    group = ScriptedGroup()
    sampler = OverlappedSampler(group, timeout_s=5.0)
    sampler.request()
    sampler.updates_done = 1
    # One more update would make both requests 2 updates stale: with a bound
    # of 2 that is allowed, with a bound of 1 the sampler waits.
    assert sampler.wait_for_stale(2).metrics == []
    assert group.waits == []
    group.finish(1, 4)
    group.finish(2, 4)
    arrived = sampler.wait_for_stale(1)
    assert arrived.env_steps == 8 and arrived.staleness == [1, 1]
    assert sampler.num_in_flight == 0


def test_a_restarted_env_runner_is_asked_again():
    """Its death seen in the last fetch of an iteration and RLlib's restart
    before the next request: the new EnvRunner (same id) gets a request."""
    group = ScriptedGroup()
    sampler = OverlappedSampler(group, timeout_s=5.0)
    sampler.request()
    group.healthy.discard(1)  # its request failed: RLlib marks it unhealthy
    group.restart(1)  # and restarts it before the sampler asks again
    sampler.request()
    assert group.requests == [1, 2, 1, 2]  # runner 2's repeat RLlib refuses


def test_held_fragments_are_taken_once():
    group = ScriptedGroup()
    sampler = OverlappedSampler(group, timeout_s=5.0)
    sampler.request()
    group.finish(1, 4)
    sampler.hold(sampler.collect(wait=False))
    assert sampler.take_held().env_steps == 4
    assert sampler.take_held().env_steps == 0


def test_the_setup_line_suggests_larger_requests_only_where_they_are_small():
    small = request_size_line(12, 4, 1)
    assert small.startswith(
        "Overlapped sampling keeps one sample() request in flight on each of "
        "12 EnvRunner(s), 4 env steps per request (rollout_fragment_length=4 x "
        "num_envs_per_env_runner=1)."
    )
    assert "num_envs_per_env_runner=..." in small
    large = request_size_line(12, SMALL_REQUEST_ENV_STEPS // 4, 4)
    assert f"{SMALL_REQUEST_ENV_STEPS} env steps per request" in large
    assert "fixed overhead" not in large
