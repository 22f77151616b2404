"""User-space components: pins in the running instance's segment, netted to real-time components,
gone when their process ends however it ends."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

import rtapi
from conftest import run, until


def comps(instance):
    """Component names as `rtapi show comp --json` lists them."""
    import json

    out = run("show", "comp", "--json", "--instance", instance.name).stdout
    data = json.loads(out)
    return {c["name"] for c in data["components"]}


def test_a_user_component_drives_an_rt_component_and_reads_it_back(instance):
    c = rtapi.component("panel", instance=instance.name)
    assert c.newpin("button", rtapi.BIT, rtapi.OUT) == "panel.button"
    c.newpin("led", rtapi.BIT, rtapi.IN)
    c.newpin("count", rtapi.S32, rtapi.OUT)
    c.newparam("gain", rtapi.FLOAT, rtapi.RW)
    with pytest.raises(rtapi.Error):
        c["button"]  # not ready yet
    c.ready()
    assert "panel" in comps(instance)
    # button → not.0 (1 ms servo thread) → led
    instance.halcmd("net", "btn", "panel.button", "not.0.in")
    instance.halcmd("net", "fb", "not.0.out", "panel.led")
    h = rtapi.Instance(instance.name)
    assert {s["name"]: s["writer"] for s in h.signals()}["btn"] == "panel.button"
    for press in (True, False, True):
        c["button"] = press
        assert h.wait("panel.led", not press, timeout=5) is (not press)
        assert c["led"] is (not press)
        assert c["button"] is press
    # Values reach other processes.
    c["count"] = -42
    assert run("getp", "panel.count", "--instance", instance.name).stdout.strip() == "-42"
    c["gain"] = 2.5
    assert float(run("getp", "panel.gain", "--instance", instance.name).stdout) == 2.5
    run("setp", "panel.gain", "0.25", "--instance", instance.name)
    assert c["gain"] == 0.25
    # HAL's rules hold for the component too.
    with pytest.raises(rtapi.NotWritable) as e:
        c["led"] = 1  # an input on a signal
    assert "connected to signal 'fb'" in str(e.value)
    with pytest.raises(rtapi.NotWritable):
        c["button"] = "maybe"
    with pytest.raises(rtapi.NotFound):
        c["nosuch"]
    with pytest.raises(rtapi.NotWritable):
        h.set("panel.button", 0)  # someone else's OUT pin
    c.exit()
    assert "panel" not in comps(instance)
    signals = {s["name"]: s for s in h.signals()}
    assert signals["btn"]["writer"] is None and signals["fb"]["readers"] == 0
    c.exit()  # idempotent


def test_names_are_checked(instance):
    with rtapi.component("dup", instance=instance.name) as a:
        a.newpin("x", rtapi.FLOAT, rtapi.OUT)
        with pytest.raises(rtapi.Error):
            a.newpin("x", rtapi.FLOAT, rtapi.IN)
        a.ready()
        b = rtapi.component("dup", instance=instance.name)
        with pytest.raises(rtapi.Error) as e:
            b.ready()
        assert "already exists" in str(e.value)
        c = rtapi.component("not.0", instance=instance.name)
        with pytest.raises(rtapi.Error):
            c.ready()
    assert "dup" not in comps(instance)
    with pytest.raises(rtapi.Error):
        rtapi.component("bad name!")


CHILD = textwrap.dedent(
    """
    import sys, time, rtapi
    c = rtapi.component("victim")          # the instance from $RTAPI_INSTANCE
    c.newpin("out", rtapi.BIT, rtapi.OUT)
    c.ready()
    c["out"] = True
    print("ready", flush=True)
    time.sleep(60)
    """
)


def test_a_killed_components_pins_leave_at_once(instance):
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "RTAPI_INSTANCE": instance.name},
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        assert "victim" in comps(instance)
        instance.halcmd("net", "v", "victim.out", "and2.0.in1")
        h = rtapi.Instance(instance.name)
        assert h.get("v") is True
        assert {s["name"]: s["writer"] for s in h.signals()}["v"] == "victim.out"
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        until("the component to go", lambda: "victim" not in comps(instance), timeout=5)
        # This process (another one) no longer sees it, and the signal lost its writer.
        assert "victim" not in {c["name"] for c in h.components()}
        assert not [p for p in h.pins() if p["owner"] == "victim"]
        sig = {s["name"]: s for s in h.signals()}["v"]
        assert sig["writer"] is None and sig["value"] is True
        # The name is free again.
        with rtapi.component("victim", instance=instance.name) as again:
            again.ready()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()


def test_a_component_outliving_its_instance():
    from conftest import BASE_HAL, Halrun

    h = Halrun(BASE_HAL)
    try:
        c = rtapi.component("orphan", instance=h.name)
        c.newpin("out", rtapi.FLOAT, rtapi.OUT)
        c.ready()
        c["out"] = 1.0
    finally:
        h.stop()
    with pytest.raises(rtapi.Error) as e:
        c["out"] = 2.0  # nothing would ever read it
    assert f"HAL instance '{h.name}' is dead" in str(e.value)
    c.exit()  # the component went with the instance: nothing to do
    assert not c.is_ready()
