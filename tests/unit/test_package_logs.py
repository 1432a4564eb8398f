"""`follow_rllib_log_level`: RLlib's `log_level` shows this package's lines too,
never hides what the user chose to see, and adds one handler at most."""

from __future__ import annotations

import logging

import pytest

from rllib_ners.utils.package_logs import PACKAGE_LOGGER, follow_rllib_log_level


@pytest.fixture
def package_logger(monkeypatch):
    """The package logger, as bare as Python leaves it, restored afterwards.
    A test calls `bare_root()` first: pytest adds its capturing handlers to
    the root logger for the test's call itself."""
    package, root = logging.getLogger(PACKAGE_LOGGER), logging.getLogger()
    levels = package.level, root.level
    monkeypatch.setattr(package, "handlers", [])
    package.setLevel(logging.NOTSET)
    root.setLevel(logging.WARNING)
    yield package
    package.setLevel(levels[0])
    root.setLevel(levels[1])


def bare_root(monkeypatch) -> None:
    monkeypatch.setattr(logging.getLogger(), "handlers", [])


def test_info_shows_the_packages_info_lines_in_rays_format(
    package_logger, capfd, monkeypatch
):
    bare_root(monkeypatch)
    logging.getLogger(f"{PACKAGE_LOGGER}.somewhere").info("hidden before")
    follow_rllib_log_level("INFO")
    follow_rllib_log_level("INFO")  # a second algorithm adds no second handler
    logging.getLogger(f"{PACKAGE_LOGGER}.somewhere").info("takes RLlib's path")
    err = capfd.readouterr().err
    assert "hidden before" not in err
    assert err.count("takes RLlib's path") == 1
    assert "INFO test_package_logs.py:" in err and "-- takes RLlib's path" in err
    assert package_logger.level == logging.INFO and len(package_logger.handlers) == 1


@pytest.mark.parametrize("log_level", ["WARN", "ERROR", None, "not a level"])
def test_rllibs_default_and_quieter_levels_change_nothing(
    package_logger, log_level, monkeypatch
):
    bare_root(monkeypatch)
    follow_rllib_log_level(log_level)
    assert package_logger.level == logging.NOTSET and not package_logger.handlers


def test_a_level_or_handler_the_user_set_stays(package_logger, monkeypatch):
    bare_root(monkeypatch)
    package_logger.setLevel(logging.DEBUG)
    follow_rllib_log_level("INFO")  # quieter than the user's DEBUG: left alone
    assert package_logger.level == logging.DEBUG
    package_logger.setLevel(logging.NOTSET)
    logging.getLogger().addHandler(logging.NullHandler())  # e.g. basicConfig()
    follow_rllib_log_level("DEBUG")
    assert package_logger.level == logging.DEBUG and not package_logger.handlers
