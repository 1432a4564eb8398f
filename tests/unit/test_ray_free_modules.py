"""The parts that need no Ray never import it, directly or through our modules.

The NERS scorer and settings, the sum tree, the shared networks and the small
helpers are plain numpy/torch code (DESIGN.md: "the sum tree and the scorer are
plain modules with no Ray imports, unit-testable alone"). This walks each one's
imports inside `rllib_ners`, transitively, and fails naming the chain that
reaches Ray. (The package's `__init__` registers with Tune, so importing these
modules through `rllib_ners` loads Ray anyway; what matters is that their own
code does not depend on it.)

The study harness is looser: its modules may import Ray and torch inside the
functions that run a study, never when they are imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parents[2] / "rllib_ners"

RAY_FREE = [
    "rllib_ners.ners.diagnostics",
    "rllib_ners.ners.scorer",
    "rllib_ners.ners.settings",
    "rllib_ners.networks.conv_stack",
    "rllib_ners.replay_buffers.sum_tree",
    "rllib_ners.replay_buffers.ring_storage",
    "rllib_ners.replay_buffers.writer",
    "rllib_ners.replay_buffers.priority_sampler",
    "rllib_ners.replay_buffers.n_step",
    "rllib_ners.replay_buffers.sequences",
    "rllib_ners.replay_buffers.frame_stack",
    "rllib_ners.replay_buffers.bookkeeping",
    "rllib_ners.replay_buffers.buffer_settings",
    "rllib_ners.replay_buffers.buffer_state",
    "rllib_ners.replay_buffers.agent_episodes",
    "rllib_ners.replay_buffers.ners_slot_memory",
    "rllib_ners.replay_buffers.packed_fragments",
    "rllib_ners.replay_buffers.buffer_names",
    "rllib_ners.replay_buffers.device_frames",
    "rllib_ners.replay_buffers.feedback",
    "rllib_ners.replay_buffers.replay_sampler",
    "rllib_ners.replay_buffers.relo_sampler",
    "rllib_ners.replay_buffers.laber_sampler",
    "rllib_ners.replay_buffers.ners_score_sampler",
    "rllib_ners.replay_buffers.sampler_choice",
    "rllib_ners.seam.checkpoints",
    "rllib_ners.seam.learner",
    "rllib_ners.seam.replay",
    "rllib_ners.seam.torch_internals",
    "rllib_ners.seam.torch_modules",
    "rllib_ners.algorithms.common.learner.distributed",
    "rllib_ners.algorithms.common.learner.lap_losses",
    "rllib_ners.algorithms.common.learner.replay_methods",
    "rllib_ners.env.atari",
    "rllib_ners.utils.plotting",
    "rllib_ners.utils.checks",
    "rllib_ners.utils.mixin_order",
    "rllib_ners.utils.episode_info",
    "rllib_ners.utils.malloc",
    "rllib_ners.utils.log_noise",
    "rllib_ners.utils.package_logs",
    "rllib_ners.utils.rng",
    "rllib_ners.utils.spaces",
    "rllib_ners.utils.tensor_conversion",
    "rllib_ners.utils.optimizer_steps",
    "rllib_ners.utils.action_sampling",
    "rllib_ners.utils.mlp_layers",
    "rllib_ners.utils.deferred_metrics",
    "rllib_ners.utils.update_graphs",
]


def _module_path(name: str) -> Path:
    relative = Path(*name.split(".")[1:])
    module = PACKAGE_ROOT / relative.with_suffix(".py")
    return module if module.exists() else PACKAGE_ROOT / relative / "__init__.py"


def _imports(name: str, module_level_only: bool = False):
    """The absolute imports of module `name`: all of them, or with
    `module_level_only` those run when it is imported (not inside functions)."""
    tree = ast.parse(_module_path(name).read_text())
    for node in tree.body if module_level_only else ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def _chain_to_ray(name: str, seen: set) -> list | None:
    seen.add(name)
    for imported in _imports(name):
        if imported == "ray" or imported.startswith("ray."):
            return [name, imported]
        if imported.startswith("rllib_ners.") and imported not in seen:
            if not _module_path(imported).exists():
                continue
            chain = _chain_to_ray(imported, seen)
            if chain:
                return [name, *chain]
    return None


@pytest.mark.parametrize("name", RAY_FREE)
def test_module_never_imports_ray(name):
    assert _module_path(name).exists(), f"{name} moved: update RAY_FREE"
    chain = _chain_to_ray(name, set())
    assert chain is None, "Ray is imported via " + " -> ".join(chain)


def test_every_utils_module_is_checked():
    """`rllib_ners.utils` promises that none of its modules imports Ray."""
    utils = {
        f"rllib_ners.utils.{path.stem}"
        for path in (PACKAGE_ROOT / "utils").glob("*.py")
        if path.stem != "__init__"
    }
    assert sorted(utils - set(RAY_FREE)) == []


def test_the_check_finds_a_ray_import():
    # The walk itself must see Ray where it is imported.
    assert _chain_to_ray("rllib_ners.algorithms.common.training.training_ops", set())


# The study harness imports Ray and torch inside the functions that build and
# run a run's config; reading CSVs and writing a report need neither.
STUDY_MODULES = sorted(
    f"rllib_ners.study.{path.stem}" for path in (PACKAGE_ROOT / "study").glob("*.py")
)


@pytest.mark.parametrize("name", STUDY_MODULES)
def test_study_module_imports_ray_and_torch_only_inside_functions(name):
    """No study module imports Ray, torch or a module of ours outside
    `rllib_ners.study` at module level (the `rllib_ners.study` docstring's
    promise)."""
    heavy = [
        imported
        for imported in _imports(name, module_level_only=True)
        if imported.split(".")[0] in ("ray", "torch", "rllib_ners")
        and not imported.startswith("rllib_ners.study")
    ]
    assert heavy == []


def test_the_study_check_sees_every_study_module():
    assert {"rllib_ners.study.runs", "rllib_ners.study.report"} <= set(STUDY_MODULES)
