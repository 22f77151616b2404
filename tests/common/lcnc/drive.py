#!/usr/bin/python3
"""The headless display of tests/common/lcnc_machine.rs.

LinuxCNC starts it as `[DISPLAY]DISPLAY -ini INI`. It reads its job from `job.json` next to the INI
and drives the machine through LinuxCNC's `linuxcnc` module: estop reset, machine on, home all
joints, then each G-code program in AUTO mode, one after the other. Meanwhile a thread reads the
`sampler` FIFO (joint pos-fb of every servo period, plus the phase column this script sets) at full
precision. When it is done it writes the samples and `result.json` and exits, which makes LinuxCNC
shut down.

Each program starts with the feed held (feed and rapid override 0) and the feed is released once the
motion queue has stopped growing: LinuxCNC's planner plans a blended segment's acceleration from the
segments queued behind it, and milltask queues them on its own wall clock, so a program that starts
moving while it is still being queued moves differently from run to run. A dwell (`G4`, timed by
milltask) ends a queue; the feed is held again while it runs and released once what follows it is
queued. Every stage has a generous deadline; a stage that does not finish in time fails the run,
and `result.json` names it. Exit status: 0 when every stage finished, 1 otherwise.
"""
import json
import os
import subprocess
import sys
import threading
import time
import traceback

import hal
import linuxcnc

INI = sys.argv[sys.argv.index("-ini") + 1]
DIR = os.path.dirname(os.path.abspath(INI))
JOB = json.load(open(os.path.join(DIR, "job.json")))
T0 = time.monotonic()
RESULT = {"stages": [], "errors": [], "messages": [], "ok": False}


def log(text):
    print("drive.py [%7.3f s] %s" % (time.monotonic() - T0, text), flush=True)


class Failed(Exception):
    pass


class Sampler(threading.Thread):
    """Drains sampler FIFO 0 into a list; `rows_after(n)` waits until n more rows came in."""

    def __init__(self, comp, cfg):
        super().__init__(daemon=True)
        self.stream = hal.stream(comp, hal.sampler_base, cfg)
        self.rows = []
        self.lock = threading.Lock()
        self.stop = False
        self.failure = None

    def run(self):
        try:
            while not self.stop:
                r = self.stream.read()
                if r is None:
                    time.sleep(0.002)
                    continue
                with self.lock:
                    self.rows.append(r)
        except Exception as e:  # reported by the main thread
            self.failure = "sampler reader: %r" % e

    def count(self):
        with self.lock:
            return len(self.rows)


S = linuxcnc.stat()
C = linuxcnc.command()
E = linuxcnc.error_channel()


def drain_errors():
    while True:
        e = E.poll()
        if not e:
            return
        kind, text = e
        # 2.9's rtapi_app reports its first late period (SCHED_FIFO only) as an error: a fact of
        # the timing, which the sampler's data counts, not a fault of the machine's run.
        # Likewise a Mesa card's reply that came after hm2_eth's read deadline (what follows it
        # decides the run), and the card's watchdog bite when the job provokes one.
        if kind in (linuxcnc.NML_ERROR, linuxcnc.OPERATOR_ERROR) and \
                not text.startswith("Unexpected realtime delay") and \
                "error finishing read" not in text and \
                not (JOB.get("estop_recovery") and "Watchdog has bit" in text):
            RESULT["errors"].append(text)
            log("LinuxCNC error: %s" % text)
        else:
            RESULT["messages"].append(text)
            log("LinuxCNC message: %s" % text)


def stage(name, limit, done):
    """Polls `done()` (every 10 ms) until it is true; fails after `limit` seconds or on an error."""
    t = time.monotonic()
    log("stage %s: start" % name)
    while True:
        S.poll()
        drain_errors()
        if RESULT["errors"]:
            raise Failed("stage %s: LinuxCNC reported: %s" % (name, "; ".join(RESULT["errors"])))
        if done():
            took = time.monotonic() - t
            RESULT["stages"].append({"stage": name, "seconds": took})
            log("stage %s: done after %.3f s" % (name, took))
            return
        if time.monotonic() - t > limit:
            raise Failed("stage %s: not done after %.1f s (stuck there: task_state %d, interp_state %d, "
                         "exec_state %d, homed %s, queue %d)" % (
                             name, limit, S.task_state, S.interp_state, S.exec_state,
                             list(S.homed[:JOB["joints"]]), S.queue))
        time.sleep(0.01)


# How long the motion queue must stay unchanged, feed held, before the feed is released.
SETTLE = 0.25


def hold(on):
    """Feed and rapid override 0 (on) or 1: the planner then sees the whole queue before it moves.

    Confirmed from the status, not with `wait_complete()`: during a program that waits until milltask
    is idle again, i.e. the end of the program."""
    want = 0.0 if on else 1.0
    C.feedrate(want)
    C.rapidrate(want)
    t = time.monotonic()
    while True:
        S.poll()
        if S.feedrate == want and S.rapidrate == want:
            break
        if time.monotonic() - t > 5:
            raise Failed("feed override %s not applied after 5 s (feedrate %r, rapidrate %r)" % (
                want, S.feedrate, S.rapidrate))
        time.sleep(0.002)
    log("feed %s after %.3f s (queue %d, exec_state %d)" % (
        "held" if on else "released", time.monotonic() - t, S.queue, S.exec_state))


def idle():
    return (S.interp_state == linuxcnc.INTERP_IDLE and S.queue == 0 and S.inpos
            and S.state != linuxcnc.RCS_EXEC)


def estop_recovery(pin, limit, joints):
    """The machine is on and homed: say so in `estop_armed`, wait for LinuxCNC to go to E-stop by
    itself (the test stops the realtime master long enough for the card's watchdog to bite; what
    LinuxCNC reports meanwhile is kept as messages, not errors), then clear `pin` (the card's
    `watchdog.has_bit`, through its signal `estop_recovery_signal`), reset the E-stop and turn the
    machine on again."""
    open(JOB["estop_armed"], "w").close()
    log("machine on and homed; waiting for E-stop (%s)" % pin)
    t = time.monotonic()
    while True:
        S.poll()
        while True:
            e = E.poll()
            if not e:
                break
            RESULT["messages"].append(e[1])
            log("LinuxCNC message while waiting for E-stop: %s" % e[1])
        if S.task_state == linuxcnc.STATE_ESTOP:
            break
        if time.monotonic() - t > limit:
            raise Failed("stage wait for E-stop: still task_state %d after %.1f s" % (S.task_state, limit))
        time.sleep(0.005)
    took = time.monotonic() - t
    RESULT["stages"].append({"stage": "wait for E-stop", "seconds": took})
    RESULT["estop"] = {"has_bit": hal.get_value(pin), "homed": list(S.homed[:joints])}
    log("E-stop after %.3f s; %s = %r" % (took, pin, RESULT["estop"]["has_bit"]))
    # Reset before clearing: refused while the watchdog's bit still holds the chain open.
    C.state(linuxcnc.STATE_ESTOP_RESET)
    C.wait_complete(5.0)
    S.poll()
    RESULT["estop"]["reset_refused_while_bitten"] = S.task_state == linuxcnc.STATE_ESTOP
    # The pin is on a signal (the E-stop chain's input): cleared as an operator would, with halcmd.
    sig = JOB["estop_recovery_signal"]
    subprocess.run(["halcmd", "sets", sig, "0"], check=True)
    stage("watchdog bit cleared", limit, lambda: not hal.get_value(pin))
    C.state(linuxcnc.STATE_ESTOP_RESET)
    stage("estop reset after the bite", limit, lambda: S.task_state == linuxcnc.STATE_ESTOP_RESET)
    C.state(linuxcnc.STATE_ON)
    stage("machine on after the bite", limit, lambda: S.task_state == linuxcnc.STATE_ON)
    RESULT["estop"]["homed_after"] = list(S.homed[:joints])


def main():
    joints = JOB["joints"]
    limit = JOB["stage_seconds"]
    comp = hal.component("lcref-drive")
    comp.ready()
    sampler = None
    if JOB.get("sampler_cfg"):
        sampler = Sampler(comp, JOB["sampler_cfg"])
        sampler.start()
    phase_pin = JOB.get("phase_pin")

    def phase(n):
        if phase_pin:
            hal.set_p(phase_pin, str(n))
        log("phase %d" % n)

    t = time.monotonic()
    while True:  # the NML channels answer once milltask is up
        try:
            S.poll()
            break
        except linuxcnc.error as e:
            if time.monotonic() - t > limit:
                raise Failed("stage task up: linuxcnc.stat() does not answer after %.1f s: %s" % (limit, e))
            time.sleep(0.05)
    stage("task up", limit, lambda: True)
    C.state(linuxcnc.STATE_ESTOP_RESET)
    stage("estop reset", limit, lambda: S.task_state == linuxcnc.STATE_ESTOP_RESET)
    C.state(linuxcnc.STATE_ON)
    stage("machine on", limit, lambda: S.task_state == linuxcnc.STATE_ON)
    if JOB.get("hang"):
        log("hanging, as the job says (the harness must end this run)")
        while True:
            time.sleep(1)
    if JOB.get("up_only"):
        return
    if JOB["home"]:
        phase(1)
        C.mode(linuxcnc.MODE_MANUAL)
        C.wait_complete()
        C.teleop_enable(0)
        C.wait_complete()
        C.home(-1)
        stage("home all joints", limit, lambda: all(S.homed[:joints]) and idle())
    if JOB.get("estop_recovery"):
        estop_recovery(JOB["estop_recovery"], limit, joints)
    for k, prog in enumerate(JOB["programs"]):
        phase(k + 2)
        C.mode(linuxcnc.MODE_AUTO)
        C.wait_complete()
        stage("auto mode for %s" % prog["name"], limit, lambda: S.task_mode == linuxcnc.MODE_AUTO)
        C.program_open(prog["path"])
        C.wait_complete()
        hold(True)
        C.auto(linuxcnc.AUTO_RUN, 0)
        serial = C.serial
        st = {"running": False, "held": True, "queue": None, "since": 0.0, "releases": 0}

        def finished():
            now = time.monotonic()
            if S.interp_state != linuxcnc.INTERP_IDLE:
                st["running"] = True
            if st["held"]:
                # Release once milltask has queued all it will before the next wait point: the
                # motion queue is not empty and has not changed for SETTLE seconds.
                if S.queue > 0 and S.exec_state != linuxcnc.EXEC_WAITING_FOR_DELAY:
                    if S.queue != st["queue"]:
                        st["queue"], st["since"] = S.queue, now
                    elif now - st["since"] >= SETTLE:
                        hold(False)
                        st["held"] = False
                        st["releases"] += 1
            elif S.exec_state == linuxcnc.EXEC_WAITING_FOR_DELAY:
                # A dwell: motion is done, milltask waits on its clock, then queues what follows.
                hold(True)
                st["held"], st["queue"] = True, None
            return st["running"] and S.echo_serial_number >= serial and idle()

        stage("program %s" % prog["name"], limit, finished)
        hold(False)
        RESULT["stages"][-1]["feed_releases"] = st["releases"]
    if JOB["hold_seconds"] > 0:
        phase(len(JOB["programs"]) + 2)
        open(JOB["holding"], "w").close()
        until = time.monotonic() + JOB["hold_seconds"]
        stage("hold %.0f s" % JOB["hold_seconds"], JOB["hold_seconds"] + limit,
              lambda: time.monotonic() >= until)
    phase(0)
    if sampler is not None:
        # A tail of rest after the last move, so the last move's end is in the samples.
        n = sampler.count() + JOB["tail_periods"]
        stage("sample tail", limit, lambda: sampler.count() >= n or sampler.failure)
        sampler.stop = True
        sampler.join(5)
        if sampler.failure:
            raise Failed(sampler.failure)
        over = sampler.stream.num_overruns
        if over:
            raise Failed("sampler FIFO overrun (%d samples lost)" % over)
        tmp = JOB["samples"] + ".tmp"
        with open(tmp, "w") as f:
            for r in sampler.rows:
                f.write(" ".join(repr(v) for v in r) + "\n")
        os.rename(tmp, JOB["samples"])
        RESULT["sample_count"] = len(sampler.rows)
    S.poll()
    RESULT["final"] = {
        "actual_position": list(S.actual_position),
        "position": list(S.position),
        "joint_actual_position": list(S.joint_actual_position[:joints]),
        "joint_position": list(S.joint_position[:joints]),
        "homed": list(S.homed[:joints]),
    }


try:
    main()
    RESULT["ok"] = True
except Failed as e:
    RESULT["failure"] = str(e)
    log("FAILED: %s" % e)
except Exception as e:
    RESULT["failure"] = "drive.py crashed: %s" % traceback.format_exc()
    log(RESULT["failure"])
RESULT["seconds"] = time.monotonic() - T0
tmp = JOB["result"] + ".tmp"
with open(tmp, "w") as f:
    json.dump(RESULT, f, indent=1)
os.rename(tmp, JOB["result"])
sys.exit(0 if RESULT["ok"] else 1)
