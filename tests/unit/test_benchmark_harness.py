"""`benchmarks/harness.py`, the timing harness of every benchmark suite: the arms'
order rotates by one each round, each arm's figure is its median over the
rounds, an arm that fails mid-round is left out where the suite asks (the
others go on), ratios print as the tables quote them, and the method timers count
calls and seconds and put the methods back, and a name of the package that
the timers expect and do not find stops the benchmark."""

import time
from types import SimpleNamespace

import harness
import pytest

from rllib_ners import NERSEpisodeReplayBuffer


def test_the_order_rotates_by_one_arm_per_round():
    names = ["a", "b", "c"]
    assert [harness.rotation(names, i) for i in range(4)] == [
        ["a", "b", "c"],
        ["b", "c", "a"],
        ["c", "a", "b"],
        ["a", "b", "c"],
    ]


def test_take_turns_runs_every_arm_once_a_round_and_keeps_medians():
    calls = []
    values = {"a": iter([3.0, 1.0, 2.0]), "b": iter([10.0, 30.0, 20.0])}

    def chunk(name):
        calls.append(name)
        return {"rate": next(values[name])}

    median = harness.take_turns(["a", "b"], 3, chunk)
    assert calls == ["a", "b", "b", "a", "a", "b"]
    assert median == {"a": {"rate": 2.0}, "b": {"rate": 20.0}}


def test_an_arm_that_fails_mid_round_is_left_out_and_the_others_go_on(capsys):
    calls = []

    def chunk(name):
        calls.append(name)
        if name == "b" and calls.count("b") == 2:
            raise ValueError("NaN actions")
        return {"rate": float(len(calls))}

    median = harness.take_turns(["a", "b", "c"], 3, chunk, leave_out_failures=True)
    # Round 2 starts at b, which fails; round 3 rotates the two arms left.
    assert calls == ["a", "b", "c", "b", "c", "a", "a", "c"]
    assert median == {"a": {"rate": 6.0}, "c": {"rate": 5.0}}
    printed = capsys.readouterr()
    assert "b left out: it failed in round 2" in printed.out
    assert "NaN actions" in printed.err  # the traceback


def test_a_failing_arm_ends_the_rounds_unless_asked_to_leave_it_out():
    def chunk(name):
        raise ValueError("NaN actions")

    with pytest.raises(ValueError, match="NaN actions"):
        harness.take_turns(["a"], 2, chunk)


def test_measure_closes_and_drops_an_arm_that_fails():
    class Failing(harness.Arm):
        closed = False

        def run(self, steps):
            raise RuntimeError("device lost")

        def close(self):
            self.closed = True

    class Fixed(harness.Arm):
        def run(self, steps):
            sum(range(20_000))
            return steps, steps

    failing = Failing()
    arms = {"bad": failing, "good": Fixed()}
    median = harness.measure(arms, rounds=2, steps=10, leave_out_failures=True)
    assert list(median) == ["good"] and list(arms) == ["good"]
    assert failing.closed


def test_measure_gives_wall_cpu_and_update_rates_per_arm():
    class Fixed(harness.Arm):
        def run(self, steps):
            sum(range(20_000))  # some CPU time for the rates' denominators
            return steps, steps // 2

    median = harness.measure({"x": Fixed()}, rounds=2, steps=100)
    assert set(median["x"]) == {"wall", "cpu", "updates"}
    assert median["x"]["updates"] == pytest.approx(median["x"]["wall"] / 2)


def test_ratio_prints_two_decimals_and_an_x():
    assert harness.ratio(3.0, 2.0) == "1.50x"
    assert harness.ratio(1.0, 3.0) == "0.33x"


def test_timed_method_counts_calls_and_puts_the_method_back():
    class Owner:
        def work(self, value):
            time.sleep(0.005)  # sleeps at least this long: a floor, not a timing
            return 2 * value

    owner, tally = Owner(), [0, 0.0]
    put_back = harness.timed_method(owner, "work", tally)
    assert owner.work(3) == 6 and owner.work(4) == 8
    assert tally[0] == 2 and tally[1] >= 0.01
    put_back()
    assert "work" not in vars(owner)
    assert owner.work(5) == 10 and tally[0] == 2


def test_an_instance_attribute_comes_back_as_it_was():
    class Owner:
        pass

    owner = Owner()
    owner.work = lambda: "own"
    own = owner.work
    put_back = harness.timed_method(owner, "work", [0, 0.0])
    assert owner.work is not own and owner.work() == "own"
    put_back()
    assert owner.work is own


def test_loop_section_cells_print_only_the_sections_that_ran():
    labels = harness.loop_section_labels()
    sample, update = list(labels)[2], list(labels)[3]
    tally = {sample: [4, 0.002], update: [0, 0.0]}
    assert harness.loop_section_cells(tally, steps=4) == ["replay sample 0.500"]


def test_header_names_the_command_date_commit_and_machine():
    lines = harness.header().splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "# command",
        "# date",
        "# commit",
        "# machine",
    ]
    assert "cores" in lines[-1] and "torch" in lines[-1]


class OurAlgorithm:
    """Stands for an algorithm of the package on our training loop."""

    __module__ = "rllib_ners.fake"
    uses_replay_loop = True
    overlapped_sampler = None

    def __init__(self, learner=None, buffer=None):
        runner = SimpleNamespace(sample=None)
        self.env_runner_group = SimpleNamespace(
            local_env_runner=runner, sync_weights=None
        )
        # RLlib keeps a local Learner as `_learner` (the seam's local_learner_of).
        self.learner_group = SimpleNamespace(_learner=learner, update=None)
        self.local_replay_buffer = SimpleNamespace(
            add=None, sample_batch=None, update_priorities=None
        )
        if buffer is not None:
            self.local_replay_buffer = buffer


class NERSSampler:
    """Stands for the NERS sampler a Learner holds."""

    def score(self):
        pass

    def reinforce(self):
        pass


class NERSLearner:
    """Stands for a Learner with NERS replay."""

    def __init__(self, sampler=None):
        self.ners = sampler if sampler is not None else NERSSampler()


def renamed(cls, name):
    """`cls` as if the package had renamed its `name`."""
    dropped = (name, "__dict__", "__weakref__")
    kept = {key: value for key, value in vars(cls).items() if key not in dropped}
    return type("Renamed", cls.__bases__, kept)


def test_every_loop_section_of_our_algorithm_is_timed():
    sections = harness.loop_section_methods(OurAlgorithm())
    assert list(sections) == list(harness.loop_section_labels())


@pytest.mark.parametrize("name", ["uses_replay_loop", "overlapped_sampler"])
def test_a_loop_name_missing_on_our_algorithm_stops_the_benchmark(name):
    algo = renamed(OurAlgorithm, name)()
    with pytest.raises(AttributeError, match=f"not timed: Renamed.{name} missing"):
        harness.loop_section_methods(algo)


def test_a_buffer_method_missing_stops_the_benchmark():
    buffer = SimpleNamespace(add=None, sample_batch=None)  # no update_priorities
    with pytest.raises(AttributeError, match="update_priorities missing"):
        harness.loop_section_methods(OurAlgorithm(buffer=buffer))


def test_rllibs_own_algorithm_has_no_loop_sections_to_time():
    rllib = type("DQN", (), {"__module__": "ray.rllib.algorithms.dqn.dqn"})()
    assert harness.loop_section_methods(rllib) == {}


def test_the_ners_sampler_parts_are_timed_with_ners_replay():
    algo = OurAlgorithm(NERSLearner(), NERSEpisodeReplayBuffer(100))
    assert set(harness.time_sampler_parts(algo)) == {"scoring", "REINFORCE"}


@pytest.mark.parametrize("name", ["score", "reinforce"])
def test_a_ners_name_missing_stops_the_benchmark(name):
    learner = NERSLearner(renamed(NERSSampler, name)())
    algo = OurAlgorithm(learner, NERSEpisodeReplayBuffer(100))
    with pytest.raises(AttributeError, match=f"not timed: Renamed.{name} missing"):
        harness.time_sampler_parts(algo)
