"""Silences, by logger and message, the log lines of Ray, Tune and RLlib that a
user cannot act on (start-up notes, RLlib's own deprecation of its internals).

Only the records listed in `KNOWN_NOISE` are dropped, at the logger that emits them;
every other warning and every error (a failing trial's traceback included) still
shows.
"""

from __future__ import annotations

import logging
import re
from typing import Dict, Tuple

# Logger name -> patterns of the messages dropped from it.
KNOWN_NOISE: Dict[str, Tuple[str, ...]] = {
    # ray.init on a local machine: nothing to do about it.
    "ray._private.authentication.authentication_token_setup": (
        r"Token authentication is enabled",
    ),
    # Logged once per algorithm class: the new API stack is the default in 2.60.
    "ray.rllib.algorithms.algorithm_config": (r"You are running \S+ on the new API",),
    # SACConfig.validate() says the same on every validate() (NERS-SAC's too).
    "ray.rllib.algorithms.sac.sac": (r"You are running SAC on the new API",),
    # RLlib's own code builds RLModules the deprecated way.
    "ray._common.deprecation": (r"`RLModule\(config=",),
    # Tune's system monitor on a machine without GPUs.
    "ray.tune.utils.util": (r"Install gputil",),
}


class _DropMatching(logging.Filter):
    def __init__(self, patterns: Tuple[str, ...]):
        super().__init__()
        self.pattern = re.compile("|".join(patterns))

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.pattern.search(record.getMessage())


def silence_known_noise() -> None:
    """Adds the `KNOWN_NOISE` filters to their loggers in this process (once)."""
    for name, patterns in KNOWN_NOISE.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropMatching) for f in logger.filters):
            logger.addFilter(_DropMatching(patterns))
