"""This package's log lines at RLlib's `log_level`.

RLlib's `Algorithm.setup()` sets the `ray.rllib` logger to
`config.debugging(log_level=...)`, and Ray's own handler prints what passes.
The lines of this package (which fast path a config takes, and why a config
takes RLlib's path instead) go to the `rllib_ners` logger, which neither
touches: with Python's defaults its INFO lines print nowhere.
`follow_rllib_log_level` makes `log_level="INFO"` (or `"DEBUG"`) show them
too, in the format of Ray's lines; it never makes the logger quieter than it
is, so a level or handler the user set stays as it is.
"""

from __future__ import annotations

import logging
from typing import Optional

PACKAGE_LOGGER = "rllib_ners"
# Ray's format for its own lines (`ray._private.ray_logging`), where the
# `ray` logger has no formatter to borrow.
RAY_LOG_FORMAT = "%(asctime)s\t%(levelname)s %(filename)s:%(lineno)s -- %(message)s"


def follow_rllib_log_level(log_level: Optional[str]) -> None:
    """Lowers the `rllib_ners` logger's level to `log_level` (RLlib's config
    setting: "DEBUG", "INFO", "WARN", "ERROR") where that is more verbose than
    its effective level now, and gives it a handler like Ray's where none of
    its own or its ancestors' would print the lines."""
    if not log_level:
        return
    level = logging.getLevelName(str(log_level).upper())
    package = logging.getLogger(PACKAGE_LOGGER)
    if not isinstance(level, int) or level >= package.getEffectiveLevel():
        return
    package.setLevel(level)
    if not _has_handler(package):
        handler = logging.StreamHandler()
        handler.setFormatter(_ray_formatter())
        package.addHandler(handler)


def _has_handler(logger: logging.Logger) -> bool:
    """Whether a record of `logger` reaches a handler (Python's last-resort
    handler, which prints warnings only, aside)."""
    current: Optional[logging.Logger] = logger
    while current is not None:
        if current.handlers:
            return True
        current = current.parent if current.propagate else None
    return False


def _ray_formatter() -> logging.Formatter:
    for handler in logging.getLogger("ray").handlers:
        if handler.formatter is not None:
            return handler.formatter
    return logging.Formatter(RAY_LOG_FORMAT)
