"""Which runs of a study are training right now, so that none trains twice.

A run in progress holds an exclusive lock (`fcntl.flock`) on `seed<k>.running`
beside its future CSV for as long as its process lives; the file names the host
and pid. `rllib-ners study run` skips a run whose CSV exists or whose claim is
held, so two drivers on one results folder (a second terminal for more cores, or
a driver restarted while a run of a stopped one goes on) never train one run
twice nor overwrite a running run's log. The kernel drops the lock when the
process ends, however it ends: a run killed mid-way leaves a file nobody holds,
and the next driver trains that run again, from scratch.

Locks need a filesystem with `flock` (local disks; NFS v4 on Linux). Where
`fcntl` is missing (Windows) runs are not claimed, and `study run` says so; on a
filesystem that refuses `flock`, the run prints that it trains unclaimed.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Optional

try:
    import fcntl
except ImportError:  # Windows: no flock
    fcntl = None

CLAIM_SUFFIX = ".running"
# `run-one`'s exit status when another process holds the run's claim
# (EX_TEMPFAIL: try again later). The driver counts it as skipped, not failed.
ALREADY_RUNNING = 75
CLAIMS_SUPPORTED = fcntl is not None


class RunAlreadyClaimed(RuntimeError):
    """Another live process holds the run's claim."""

    def __init__(self, csv_path: Path, holder: str):
        super().__init__(f"{csv_path}: {holder} is training this run")
        self.holder = holder


def claim_path(csv_path: Path) -> Path:
    return Path(csv_path).with_suffix(CLAIM_SUFFIX)


def _describe(path: Path) -> str:
    try:
        text = path.read_text().strip()
    except OSError:
        text = ""
    return text or "another process"


def holder(csv_path: Path) -> Optional[str]:
    """Who is training the run of `csv_path` now ("pid 123 on host"), or None."""
    path = claim_path(csv_path)
    if not CLAIMS_SUPPORTED:
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _describe(path)
        except OSError:  # no flock on this filesystem: nobody can hold a claim
            return None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


class RunClaim:
    """Holds the claim on one run while its process trains it:

    with RunClaim(csv_path):   # raises RunAlreadyClaimed if it is held
        ...train, write csv_path...
    """

    def __init__(self, csv_path: Path):
        self.path = claim_path(csv_path)
        self.csv_path = Path(csv_path)
        self._fd: Optional[int] = None

    def __enter__(self) -> RunClaim:
        if not CLAIMS_SUPPORTED:
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise RunAlreadyClaimed(self.csv_path, _describe(self.path)) from None
            except OSError as error:  # e.g. ENOLCK: the filesystem has no flock
                os.close(fd)
                self.path.unlink(missing_ok=True)
                print(
                    f"note: {self.path}: cannot lock it ({error.strerror}), so this "
                    "run trains unclaimed: run one `study run` per results folder",
                    flush=True,
                )
                return self
            # The holder before us may have removed the file between our open
            # and our lock (it removes it when it finishes): then the lock is on
            # a file nobody else will open, so take the one now at the path.
            try:
                same_file = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same_file = False
            if same_file:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
        self._fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is None:
            return
        # Removed while still locked, so a process that opens it after this
        # finds no file, and one that opened it before sees a different file at
        # the path once it gets the lock (the loop above).
        self.path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None
