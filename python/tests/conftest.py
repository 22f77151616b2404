"""Fixtures of the rtapi module's tests: a real instance (`rtapi halrun` in a child process) and the
`rtapi` binary to compare with."""

import itertools
import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

_count = itertools.count()


def rtapi_bin():
    """The rtapi binary: $RTAPI_BIN (set by tests/python.rs), else the workspace's release or debug
    build, else the one on PATH."""
    env = os.environ.get("RTAPI_BIN")
    if env:
        return env
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for kind in ("release", "debug"):
        path = os.path.join(root, "target", kind, "rtapi")
        if os.access(path, os.X_OK):
            return path
    found = shutil.which("rtapi")
    if not found:
        pytest.fail("no rtapi binary: set RTAPI_BIN or build it (cargo build --release)")
    return found


def run(*args, check=True):
    """`rtapi ARGS`: the completed process (text)."""
    p = subprocess.run([rtapi_bin(), *args], capture_output=True, text=True, timeout=30)
    if check and p.returncode != 0:
        raise AssertionError(f"rtapi {' '.join(args)} failed ({p.returncode}): {p.stderr}")
    return p


def until(what, ok, timeout=10.0, interval=0.01):
    """Polls `ok()` until it returns something true (and returns it), failing after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        v = ok()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


class Halrun:
    """`rtapi halrun -f FILE` of `body` + `start` + `after`, running until stop()."""

    def __init__(self, body, after=""):
        self.name = f"py-{os.getpid()}-{next(_count)}"
        self.dir = tempfile.TemporaryDirectory()
        path = os.path.join(self.dir.name, "x.hal")
        with open(path, "w") as f:
            f.write(body.rstrip("\n") + "\nstart\n" + after)
        self.proc = subprocess.Popen(
            [rtapi_bin(), "halrun", "--duration", "1h", "--instance", self.name, "-f", path],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={**os.environ, "RUST_LOG": "error"},
        )
        until(
            f"instance {self.name} to take commands",
            lambda: self.proc.poll() is not None
            or run("halcmd", "--instance", self.name, "status", check=False).returncode == 0,
        )
        if self.proc.poll() is not None:
            raise AssertionError(f"halrun failed: {self.proc.stderr.read().decode()}")

    def halcmd(self, *args):
        return run("halcmd", "--instance", self.name, *args)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stderr.close()
        self.dir.cleanup()
        assert not os.path.exists(f"/dev/shm/rtapi-{self.name}"), "the segment was left behind"


# A 1 ms servo thread with a `not` and an `and2`; `cmd` is a signal without writer feeding and2.
BASE_HAL = """
loadrt threads name1=servo period1=1000000
loadrt not
loadrt and2
addf not.0 servo
addf and2.0 servo
net cmd and2.0.in0
"""


@pytest.fixture
def instance():
    h = Halrun(BASE_HAL)
    try:
        yield h
    finally:
        h.stop()
