"""Reading 10 000 pins: the Python module next to `rtapi show --json` as a process.

Starts an instance with 2 500 `and2` instances (ten `loadrt and2 names=…` lines) (4 pins each: in0, in1, out and the function's
`.time` health pin, plus the thread's own), then times, best and median of several runs:

* `Instance.pins()`: every pin as a dict (name, type, dir, value, owner, signal);
* `Instance.pin_values()`: just the values;
* a user-space component's write and read of its own pin;
* `rtapi show pin --json` and `rtapi show --json`, each a whole process (start, open, read,
  format, exit), as a script without the module would read them.

Usage: python3 python/bench/read_pins.py [RTAPI_BINARY]   (default: target/release/rtapi)
"""

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import rtapi

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def timed(f, runs):
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        r = f()
        times.append(time.perf_counter() - t)
    return r, min(times), statistics.median(times)


def main():
    rtapi_bin = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target", "release", "rtapi")
    name = f"bench-pins-{os.getpid()}"
    with tempfile.TemporaryDirectory() as d:
        hal = os.path.join(d, "pins.hal")
        with open(hal, "w") as f:
            f.write("loadrt threads name1=servo period1=1000000\n")
            # At most 256 instances per loadrt line.
            for block in range(10):
                names = ",".join(f"g{block}.{i}" for i in range(250))
                f.write(f"loadrt and2 names={names}\n")
            f.write("start\n")
        owner = subprocess.Popen(
            [rtapi_bin, "halrun", "--duration", "1h", "--instance", name, "-f", hal],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    h = rtapi.Instance(name)
                    if len(h.pins()) >= 10_000:
                        break
                except rtapi.Error:
                    pass
                if time.monotonic() > deadline or owner.poll() is not None:
                    sys.exit("the instance did not come up")
                time.sleep(0.1)
            pins, best, med = timed(h.pins, 20)
            print(f"pins: {len(pins)}")
            print(f"Instance.pins()                    best {best * 1e3:8.2f} ms  median {med * 1e3:8.2f} ms")
            _, best, med = timed(h.pin_values, 20)
            print(f"Instance.pin_values()              best {best * 1e3:8.2f} ms  median {med * 1e3:8.2f} ms")
            _, best, med = timed(lambda: h.get("g9.249.out"), 200)
            print(f"Instance.get(one pin)              best {best * 1e6:8.2f} us  median {med * 1e6:8.2f} us")
            # A user-space component's write and read of its own pin (a search of 10 000 names and
            # one atomic store / load), with the component declared last.
            c = rtapi.component("bench", instance=name)
            c.newpin("out", rtapi.FLOAT, rtapi.OUT)
            c.ready()
            _, best, med = timed(lambda: c.__setitem__("out", 1.5), 200)
            print(f"component write c['out'] = v      best {best * 1e6:8.2f} us  median {med * 1e6:8.2f} us")
            _, best, med = timed(lambda: c["out"], 200)
            print(f"component read c['out']           best {best * 1e6:8.2f} us  median {med * 1e6:8.2f} us")
            c.exit()
            for what in (["show", "pin", "--json"], ["show", "--json"]):
                cmd = [rtapi_bin, *what, "--instance", name]
                _, best, med = timed(lambda: subprocess.run(cmd, capture_output=True, check=True), 5)
                label = "rtapi " + " ".join(what) + " (process)"
                print(f"{label:<34} best {best * 1e3:8.2f} ms  median {med * 1e3:8.2f} ms")
        finally:
            owner.send_signal(signal.SIGTERM)
            owner.wait(timeout=30)


if __name__ == "__main__":
    main()
