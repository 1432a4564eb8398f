"""The `gpu` suite runs on a lent GPU machine under a time limit: a failure's
traceback is printed when the test fails, not only in pytest's summary at the
end, which a run stopped at its limit never reaches."""

from __future__ import annotations


def pytest_runtest_logreport(report):
    if report.failed:
        print(f"\n--- {report.nodeid} ({report.when}) failed:\n{report.longreprtext}\n")
