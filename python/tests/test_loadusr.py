"""halcmd's loadusr: a program started by the owner with RTAPI_INSTANCE, waited for with -Wn, its
component netted by the lines after it, and the program stopped with the instance."""

import os
import sys
import textwrap
import time

import pytest

from conftest import BASE_HAL, Halrun, run, until

import rtapi

PANEL = textwrap.dedent(
    """
    import os, sys, time, rtapi
    c = rtapi.component("panel")           # the instance from $RTAPI_INSTANCE
    c.newpin("button", rtapi.BIT, rtapi.OUT)
    c.ready()
    c["button"] = True
    with open(sys.argv[1], "w") as f:
        f.write(str(os.getpid()))
    while True:
        time.sleep(0.05)
    """
)


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def test_loadusr_waits_for_the_component_and_stops_the_program_with_the_instance(tmp_path):
    panel = tmp_path / "panel.py"
    panel.write_text(PANEL)
    pidfile = tmp_path / "pid"
    h = Halrun(
        BASE_HAL,
        after=f"loadusr -Wn panel {sys.executable} {panel} {pidfile}\n"
        "net btn panel.button not.0.in\n",
    )
    try:
        inst = rtapi.Instance(h.name)
        # The line after loadusr found the component's pin: the file ran to its end.
        assert {s["name"]: s["writer"] for s in inst.signals()}["btn"] == "panel.button"
        assert inst.wait("not.0.out", False, timeout=5) is False
        pid = int(until("the pid file", lambda: pidfile.exists() and pidfile.read_text()))
        assert alive(pid)
    finally:
        h.stop()
    until("the program to be stopped", lambda: not alive(pid), timeout=5)


def test_loadusr_refusals(instance, tmp_path):
    # A program that ends before its component is ready: a clear error, quickly.
    t = time.monotonic()
    p = run("halcmd", "--instance", instance.name, "loadusr", "-Wn", "ghost", "true", check=False)
    assert p.returncode != 0
    assert "loadusr: 'true' exited with status 0 before its component 'ghost' was ready" in p.stderr
    assert time.monotonic() - t < 5
    p = run("halcmd", "--instance", instance.name, "loadusr", "/nonexistent/prog", check=False)
    assert "loadusr: cannot start '/nonexistent/prog'" in p.stderr
    # -w waits for the exit and reports a failure.
    p = run("halcmd", "--instance", instance.name, "loadusr", "-w", "false", check=False)
    assert "loadusr: 'false' exited with status 1" in p.stderr
    assert run("halcmd", "--instance", instance.name, "loadusr", "-w", "-i", "false").returncode == 0
    # Before `start` there is no instance to join.
    f = tmp_path / "early.hal"
    f.write_text("loadrt threads name1=servo period1=1000000\nloadusr -W panel\nstart\n")
    p = run("halrun", "--check", "-f", str(f), check=False)
    assert p.returncode == 2 and "put loadusr after `start`" in p.stderr


def test_unloadusr_ends_the_program_and_removes_its_component(tmp_path):
    panel = tmp_path / "panel.py"
    panel.write_text(PANEL)
    pidfile = tmp_path / "pid"
    h = Halrun(BASE_HAL, after=f"loadusr -Wn panel {sys.executable} {panel} {pidfile}\n")
    try:
        pid = int(until("the pid file", lambda: pidfile.exists() and pidfile.read_text()))
        assert "panel" in run("show", "comp", "--instance", h.name).stdout
        # A real-time component may not take a user component's name.
        p = run("halcmd", "--instance", h.name, "loadrt", "not", "names=panel", check=False)
        assert p.returncode != 0 and "a component named 'panel' already exists" in p.stderr, p.stderr
        # A name that is no user component: the error lists the ones there are.
        bad = run("halcmd", "--instance", h.name, "unloadusr", "nosuch", check=False)
        assert bad.returncode != 0 and "(there are: panel)" in bad.stderr, bad.stderr
        t0 = time.monotonic()
        h.halcmd("unloadusr", "panel")
        # The program took SIGTERM (no grace period needed) and its component is gone. Its exit may
        # come a moment after the reply on a loaded machine (seen under stress-ng): waited for, with
        # the time printed, not bounded at 1.5 s.
        until("the program's exit", lambda: not alive(pid), timeout=60.0)
        print(f"unloadusr: the program ended {time.monotonic() - t0:.3f} s after the command")
        assert "panel" not in run("show", "comp", "--instance", h.name).stdout
    finally:
        h.stop()


WAITED = textwrap.dedent(
    """
    import sys, time, rtapi
    c = rtapi.component(sys.argv[1])
    c.newpin("out", rtapi.FLOAT, rtapi.OUT)
    c.ready()
    time.sleep(float(sys.argv[2]))
    if sys.argv[3] == "exit":
        c.exit()
        time.sleep(0.3)
    elif sys.argv[3] == "drop":
        # The connection ends, and the process takes its time to end after it.
        del c
        time.sleep(0.5)
    sys.exit(int(sys.argv[4]))
    """
)


def test_waitusr_returns_when_the_component_is_gone(tmp_path):
    prog = tmp_path / "waited.py"
    prog.write_text(WAITED)
    h = Halrun(
        BASE_HAL,
        after=f"loadusr -Wn quits {sys.executable} {prog} quits 0.4 exit 0\n"
        f"loadusr -Wn fails {sys.executable} {prog} fails 2 end 3\n"
        f"loadusr -Wn drops {sys.executable} {prog} drops 2 drop 4\n",
    )
    try:
        # exit(): the component leaves while the process still runs; waitusr sees the departure
        # although it holds the session.
        t0 = time.monotonic()
        h.halcmd("waitusr", "quits")
        assert time.monotonic() - t0 < 5
        # A program that ends with status 3: an error naming it, unless -i.
        p = run("halcmd", "--instance", h.name, "waitusr", "fails", check=False)
        assert p.returncode != 0 and "exited with status 3" in p.stderr, p.stderr
        # Its connection ended half a second before its process: that is an ending program, and
        # waitusr waits for its status.
        p = run("halcmd", "--instance", h.name, "waitusr", "drops", check=False)
        assert p.returncode != 0 and "exited with status 4" in p.stderr, p.stderr
        comps = run("show", "comp", "--instance", h.name).stdout
        assert all(n not in comps for n in ("quits", "fails", "drops")), comps
    finally:
        h.stop()
