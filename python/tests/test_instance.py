"""Reading and setting a running instance from Python, compared with the rtapi CLI."""

import os
import stat

import pytest

import rtapi
from conftest import run, until


def cli_value(text):
    """A value as `rtapi getp` prints it, as Python's."""
    t = text.strip()
    if t in ("TRUE", "FALSE"):
        return t == "TRUE"
    try:
        return int(t)
    except ValueError:
        return float(t)


def test_lists_and_get_match_the_cli(instance):
    h = rtapi.Instance(instance.name)
    assert instance.name in rtapi.instances()
    assert h.owner_alive() and h.owner_pid == instance.proc.pid
    pins = {p["name"]: p for p in h.pins()}
    assert pins["not.0.in"]["type"] == "bit" and pins["not.0.in"]["dir"] == "in"
    assert pins["not.0.out"]["owner"] == "not.0" and pins["not.0.out"]["dir"] == "out"
    assert pins["and2.0.in0"]["signal"] == "cmd"
    assert [t["name"] for t in h.threads()] == ["servo"]
    assert {s["name"] for s in h.signals()} == {"cmd"}
    assert len(h.pin_values()) == len(pins)
    # not of an unset input, from the thread's first periods on
    assert h.wait("not.0.out", True, timeout=5) is True
    for name in ("not.0.out", "not.0.in", "cmd"):
        assert h.get(name) == cli_value(run("getp", name, "--instance", instance.name).stdout)


def test_errors_carry_the_cli_message(instance):
    h = rtapi.Instance(instance.name)
    with pytest.raises(rtapi.NotFound) as e:
        h.get("no.such.pin")
    cli = run("getp", "no.such.pin", "--instance", instance.name, check=False)
    assert cli.returncode == 2
    assert cli.stderr.strip() == f"rtapi: {e.value}"
    assert isinstance(e.value, rtapi.Error) and isinstance(e.value, Exception)
    # A near miss gets the same did-you-mean as the CLI, for reads, writes and waits alike.
    for call in (lambda: h.get("not.0.oot"), lambda: h.set("not.0.oot", 1), lambda: h.wait("not.0.oot")):
        with pytest.raises(rtapi.NotFound) as e:
            call()
        assert "did you mean 'not.0.out'?" in str(e.value), e.value
    cli = run("getp", "not.0.oot", "--instance", instance.name, check=False)
    with pytest.raises(rtapi.NotFound) as e:
        h.get("not.0.oot")
    assert cli.stderr.strip() == f"rtapi: {e.value}"

    with pytest.raises(rtapi.NotWritable) as e:
        h.set("not.0.out", 1)
    cli = run("setp", "not.0.out", "1", "--instance", instance.name, check=False)
    assert cli.stderr.strip() == f"rtapi: {e.value}"

    missing = f"nosuch-{os.getpid()}"
    with pytest.raises(rtapi.Error) as e:
        rtapi.Instance(missing)
    cli = run("show", "--instance", missing, check=False)
    assert cli.stderr.strip() == f"rtapi: {e.value}"


def test_set_from_python_read_by_the_cli_and_back(instance):
    h = rtapi.Instance(instance.name)
    # An unconnected IN pin (setp's rule) and a signal without writer (sets').
    h.set("not.0.in", True)
    assert cli_value(run("getp", "not.0.in", "--instance", instance.name).stdout) is True
    # not.0 runs every 1 ms: its output follows.
    assert h.wait("not.0.out", False, timeout=5) is False
    h.set("cmd", 1)
    assert cli_value(run("getp", "cmd", "--instance", instance.name).stdout) is True
    # The other way: the CLI writes, Python reads.
    run("sets", "cmd", "0", "--instance", instance.name)
    assert h.wait("cmd", False, timeout=5) is False
    run("setp", "not.0.in", "0", "--instance", instance.name)
    assert h.wait("not.0.out", True, timeout=5) is True


def test_wait_predicate_change_and_timeout(instance):
    h = rtapi.Instance(instance.name)
    assert h.wait("not.0.out", True, timeout=5) is True
    with pytest.raises(rtapi.Timeout) as e:
        h.wait("not.0.out", False, timeout=0.05)
    assert "not.0.out" in str(e.value)
    with pytest.raises(rtapi.Timeout):
        h.wait("cmd", None, timeout=0.05)
    h.set("not.0.in", 1)
    assert h.wait("not.0.out", lambda v: v is False, timeout=5) is False


def test_thread_stats_count_periods(instance):
    h = rtapi.Instance(instance.name)
    a = h.thread_stats("servo")
    b = until("100 more periods", lambda: (s := h.thread_stats("servo"))["cycles"] >= a["cycles"] + 100 and s)
    assert b["period_ns"] == 1_000_000
    assert b["latency_min_ns"] <= b["latency_mean_ns"] <= b["latency_max_ns"]
    hist = b["histogram"]
    total = sum(hist["counts"]) + hist["underflow"] + hist["overflow"]
    assert abs(total - b["cycles"]) <= 2
    # A thread that runs no I/O function (no Mesa card's hm2 read/write) has no I/O figures.
    assert b["io"] is None
    with pytest.raises(rtapi.NotFound):
        h.thread_stats("nothread")


def test_a_forged_segment_is_refused(tmp_path):
    name = f"forged-{os.getpid()}"
    path = f"/dev/shm/rtapi-{name}"
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    try:
        os.write(fd, b"\0" * 4096)
        os.fchmod(fd, 0o666)  # writable by everyone: not to be believed
        with pytest.raises(rtapi.Untrusted) as e:
            rtapi.Instance(name)
        cli = run("show", "--instance", name, check=False)
        assert cli.stderr.strip() == f"rtapi: {e.value}"
    finally:
        os.close(fd)
        os.unlink(path)
    # A symlink planted at the name is never followed.
    target = tmp_path / "elsewhere"
    target.write_bytes(b"\0" * 4096)
    os.symlink(target, path)
    try:
        with pytest.raises(rtapi.Error):
            rtapi.Instance(name)
    finally:
        os.unlink(path)
    assert stat.S_ISREG(os.stat(target).st_mode)
