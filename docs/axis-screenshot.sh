#!/bin/bash
# The README's AXIS screenshot: LinuxCNC 2.9's configs/sim/axis with its AXIS display, on rtapi
# (`rtapi linuxcnc`), on a private Xvfb, driven with LinuxCNC's `linuxcnc` Python module: estop
# reset, machine on, home all, run the config's own program; mid-program the screen is saved with
# `rtapi show thread --instance linuxcnc` beside it. Then SIGTERM to the launcher ends it all.
#
#   sudo docs/axis-screenshot.sh [RTAPI] [OUT.png]     (RTAPI: target/release/rtapi)
#
# Needs Xvfb, LinuxCNC 2.9 (linuxcnc-uspace) and Debian's /usr/bin/python3 with PIL (python3-pil).
# As root it runs LinuxCNC as `nobody`, as LinuxCNC's own rtapi_app wants an ordinary user.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rtapi=$(realpath "${1:-$here/../target/release/rtapi}")
out=$(realpath -m "${2:-$here/axis-on-rtapi.png}")
[ -x "$rtapi" ] || { echo "no rtapi binary at $rtapi: cargo build --release first" >&2; exit 2; }
command -v Xvfb >/dev/null || { echo "Xvfb is missing: apt-get install xvfb" >&2; exit 2; }
/usr/bin/python3 -c 'import PIL.ImageGrab, linuxcnc' 2>/dev/null ||
    { echo "/usr/bin/python3 needs PIL and LinuxCNC's linuxcnc module: apt-get install python3-pil linuxcnc-uspace" >&2; exit 2; }

# LinuxCNC's SysV keys are fixed: one session at a time, with the tests' LinuxCNC lock.
exec 9>/tmp/rtapi-linuxcnc-diff.lock
flock 9

work=$(mktemp -d /tmp/axis-shot.XXXXXX)
chmod 755 "$work"
# As LinuxCNC's own `linuxcnc` copies a config: configs/NAME and nc_files side by side, so the
# INI's PROGRAM_PREFIX (../../nc_files/) finds the programs.
mkdir -p "$work/configs"
cp -r /usr/share/doc/linuxcnc/examples/sample-configs/sim/axis "$work/configs/axis"
cp -r /usr/share/doc/linuxcnc/examples/nc_files "$work/nc_files"
as_user=()
if [ "$(id -u)" = 0 ]; then
    chown -R nobody "$work"
    as_user=(runuser -u nobody --)
fi

xpid=""
lpid=""
finish() {
    [ -n "$lpid" ] && kill -TERM "$lpid" 2>/dev/null && wait "$lpid" 2>/dev/null || true
    [ -n "${KEEP_LOG:-}" ] && cp "$work/linuxcnc.log" /tmp/axis-shot.log
    [ -n "$xpid" ] && kill -TERM "$xpid" 2>/dev/null || true
    rm -rf "$work"
}
trap finish EXIT

# Xvfb writes its display number to fd 3 once it accepts clients.
Xvfb -displayfd 3 -nolisten tcp -screen 0 1600x900x24 3>"$work/display" 2>/dev/null &
xpid=$!
for _ in $(seq 100); do [ -s "$work/display" ] && break; sleep 0.1; done
[ -s "$work/display" ] || { echo "Xvfb did not come up" >&2; exit 1; }
export DISPLAY=":$(cat "$work/display")"

cd "$work/configs/axis"
# As root the launcher keeps root for the master (SCHED_FIFO) and runs LinuxCNC as nobody
# (docs/guide/linuxcnc.md: RTAPI_UID); otherwise as the caller, with whatever privileges the master has.
launch=(env HOME="$work" DISPLAY="$DISPLAY")
[ "$(id -u)" = 0 ] && launch+=(RTAPI_UID="$(id -u nobody)")
"${launch[@]}" "$rtapi" linuxcnc axis.ini > "$work/linuxcnc.log" 2>&1 &
lpid=$!

"${as_user[@]}" env HOME="$work" DISPLAY="$DISPLAY" /usr/bin/python3 - "$rtapi" "$work/shot.png" <<'EOF'
import subprocess, sys, time
import linuxcnc
from PIL import Image, ImageDraw, ImageFont, ImageGrab

rtapi, out = sys.argv[1], sys.argv[2]

def until(what, check, seconds=60):
    last = [None]
    t = time.monotonic()
    while time.monotonic() - t < seconds:
        try:
            if check():
                return
        except (linuxcnc.error, SystemError) as e:  # poll() before LinuxCNC is up
            last[0] = e
        time.sleep(0.2)
    sys.exit("axis-screenshot: %s did not happen within %d s (last: %r)" % (what, seconds, last[0]))

# AXIS makes its HAL component `axisui` once its window is built (after task is up). Only then
# the first linuxcnc.stat(): 2.9's module looks for task's tool table once, at the first one.
until("AXIS up", lambda: "axisui" in subprocess.run(
    ["halcmd", "show", "comp"], capture_output=True, text=True).stdout)
s = linuxcnc.stat()
c = linuxcnc.command()
until("LinuxCNC answering", lambda: s.poll() is None)
c.state(linuxcnc.STATE_ESTOP_RESET)
c.state(linuxcnc.STATE_ON)
until("machine on", lambda: (s.poll(), s.task_state == linuxcnc.STATE_ON)[1])
c.mode(linuxcnc.MODE_MANUAL)
c.home(-1)
until("homing", lambda: (s.poll(), all(s.homed[:s.joints]))[1], 120)
c.mode(linuxcnc.MODE_AUTO)
until("a program open", lambda: (s.poll(), bool(s.file))[1])
c.auto(linuxcnc.AUTO_RUN, 0)
until("the program running", lambda: (s.poll(), s.interp_state != linuxcnc.INTERP_IDLE)[1])
time.sleep(8)
shot = ImageGrab.grab(xdisplay=None)
show = subprocess.run([rtapi, "show", "thread", "--instance", "linuxcnc"],
                      capture_output=True, text=True).stdout
c.abort()
# The rtapi table under the screen, in a fixed-width font.
try:
    font = ImageFont.truetype("DejaVuSansMono.ttf", 15)
except OSError:
    font = ImageFont.load_default()
lines = ["$ rtapi show thread --instance linuxcnc"] + show.rstrip().splitlines()
h = 20 * len(lines) + 20
# The screen cut to the windows on it (the root window is black), and wide enough for the table.
shot = shot.crop(shot.getbbox() or (0, 0, shot.width, shot.height))
width = max(shot.width, 20 + max(int(font.getlength(l)) for l in lines))
img = Image.new("RGB", (width, shot.height + h), "black")
img.paste(shot, (0, 0))
d = ImageDraw.Draw(img)
for i, l in enumerate(lines):
    d.text((10, shot.height + 10 + 20 * i), l, fill="white", font=font)
img.save(out, format="PNG")
print(show)
EOF
cp "$work/shot.png" "$out"
kill -TERM "$lpid"
wait "$lpid" || true
lpid=""
echo "saved $out"
