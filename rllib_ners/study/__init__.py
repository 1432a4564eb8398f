"""Studies of replay methods: tasks x arms x seeds, one learning curve each, and
a seeded rliable report computed from the CSVs alone.

* `declarations`: `Task` and `Arm` (checked when declared: `DeclarationError`),
  the built-in ones (`TASKS`, `ARMS`) and `load_declarations()` for your own;
* `agents`: the agent settings the built-in tasks train (RLlib configs);
* `runs`: one run (`run_one`) and a resumable study in child processes
  (`plan_runs`, `run_study`);
* `claims`: which runs are training now (a lock per run), so none trains twice;
* `results`: the finished runs a results folder holds (`load_runs`);
* `status`: where a study stands and the CPU time it has cost and needs;
* `statistics`: every number of the report (`compute`), seeded;
* `report`: `write_report()`, the Markdown and the figure;
* `cli`: `rllib-ners study run|status|report|list`.

Ray and torch are imported inside the functions that build and run a run's
config, never at module level here: reading CSVs and writing a report need
neither. (Importing any of this through the `rllib_ners` package still loads
Ray, because the package's `__init__` registers its algorithms with Tune.)
"""

from rllib_ners.study.declarations import (
    ARMS,
    DEFAULT_SEEDS,
    STUDY_ARMS,
    SUITE,
    TASKS,
    Arm,
    DeclarationError,
    Task,
    load_declarations,
)

__all__ = [
    "ARMS",
    "Arm",
    "DEFAULT_SEEDS",
    "DeclarationError",
    "STUDY_ARMS",
    "SUITE",
    "TASKS",
    "Task",
    "load_declarations",
]
