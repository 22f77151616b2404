//! sampler/streamer with the real binary: an instance started by `rtapi halrun -f` (a real RT thread,
//! real shared memory), fed by `rtapi stream` and read by `rtapi sample` in other processes.

mod common;
use common::eventually;
use common::halrun;
use halrun::{halcmd, Halrun as Running, T};

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::text;

fn instance(tag: &str) -> String {
    format!("cap-{tag}-{}", std::process::id())
}

fn getp(instance: &str, name: &str) -> String {
    let (ok, out, err) = halcmd(instance, &["getp", name]);
    assert!(ok, "getp {name}: {err}");
    out.trim().to_string()
}

/// Waits until the servo thread of `instance` has run `n` more periods (from the segment).
fn periods(instance: &str, n: u64) {
    let reader = rtapi_hal::HalReader::open(instance, rtapi_hal::Access::ReadOnly).unwrap();
    let cycles = || reader.thread_stats("servo").unwrap().cycles;
    let at = cycles();
    eventually::until_true(&format!("{n} servo periods"), eventually::GENEROUS, || {
        cycles() >= at + n
    });
}

/// Waits until process `pid` has the FIFO of `instance`'s `sampler.0` mapped (a reader attached to
/// it) and handles SIGTERM.
fn attached(pid: u32, instance: &str) {
    let fifo = format!("/dev/shm/rtapi-{instance}:sampler.0");
    eventually::until_true(
        &format!("the reader {pid} attached to {fifo}"),
        eventually::GENEROUS,
        || {
            let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let term = status
                .lines()
                .find_map(|l| l.strip_prefix("SigCgt:"))
                .and_then(|h| u64::from_str_radix(h.trim(), 16).ok())
                .is_some_and(|m| m & (1 << (libc::SIGTERM - 1)) != 0);
            maps.contains(&fifo) && term
        },
    );
}

fn wait_until(what: &str, mut ok: impl FnMut() -> bool) {
    let until = Instant::now() + T;
    while !ok() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// streamer → (pins) → sampler directly, the sampler enabled only in periods where the streamer had
/// a record.
fn direct(cfg: &str) -> String {
    let mut hal = format!(
        "loadrt threads name1=servo period1=1000000\nloadrt streamer cfg={cfg} depth=64\n\
         loadrt sampler cfg={cfg} depth=4000\nloadrt not\n\
         net empty streamer.0.empty not.0.in\nnet go not.0.out sampler.0.enable\n"
    );
    for m in 0..cfg.len() {
        hal.push_str(&format!("net p{m} streamer.0.pin.{m} sampler.0.pin.{m}\n"));
    }
    hal.push_str("addf streamer.0 servo\naddf not.0 servo\naddf sampler.0 servo\nstart\n");
    hal
}

/// streamer → RT components → sampler, the sampler enabled only in periods where the streamer had a
/// record. Each type goes through components that must keep every value of it exactly: bits through
/// two `not`s, floats through `mux2` (bit-exact: -0, NaN, subnormals), s32 and u32 through a float
/// and back (`conv_*`: exact, every 32-bit integer is a double).
fn loopback(cfg: &str) -> String {
    let chain = |t: char| -> (&str, &str, [&str; 2]) {
        match t {
            // (loadrt lines, extra setup, [first instance, second instance] — "" for one)
            'b' => ("loadrt not names=inv-a,inv-b\n", "", ["inv-a", "inv-b"]),
            'f' => (
                "loadrt mux2 names=pass\n",
                "setp pass.sel 0\n",
                ["pass", ""],
            ),
            's' => (
                "loadrt conv_s32_float names=s2f\nloadrt conv_float_s32 names=f2s\n",
                "",
                ["s2f", "f2s"],
            ),
            'u' => (
                "loadrt conv_u32_float names=u2f\nloadrt conv_float_u32 names=f2u\n",
                "",
                ["u2f", "f2u"],
            ),
            _ => panic!("type {t}"),
        }
    };
    // One channel, so the chain's instance names are those above.
    assert_eq!(cfg.len(), 1);
    let t = cfg.chars().next().unwrap();
    let (load, setup, [a, b]) = chain(t);
    let input = if t == 'f' { "in0" } else { "in" };
    let mut hal = format!(
        "loadrt threads name1=servo period1=1000000\nloadrt streamer cfg={cfg} depth=64\n\
         loadrt sampler cfg={cfg} depth=4000\nloadrt not\n{load}{setup}\
         net empty streamer.0.empty not.0.in\nnet go not.0.out sampler.0.enable\n\
         net raw streamer.0.pin.0 {a}.{input}\naddf streamer.0 servo\naddf {a} servo\n"
    );
    if b.is_empty() {
        hal.push_str(&format!("net done {a}.out sampler.0.pin.0\n"));
    } else {
        hal.push_str(&format!(
            "net mid {a}.out {b}.in\nnet done {b}.out sampler.0.pin.0\naddf {b} servo\n"
        ));
    }
    hal.push_str("addf not.0 servo\naddf sampler.0 servo\nstart\n");
    hal
}

fn stream(instance: &str, input: &str) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rtapi"))
        .args(["stream", "--instance", instance])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// `rtapi sample --instance INSTANCE EXTRA…`, killed (and the test failed) if it runs past `T`.
fn sample(instance: &str, extra: &[&str]) -> (bool, String, String) {
    let mut args = vec!["sample", "--instance", instance];
    args.extend_from_slice(extra);
    let mut child = Command::new(env!("CARGO_BIN_EXE_rtapi"))
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + T;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > until {
            child.kill().unwrap();
            let o = child.wait_with_output().unwrap();
            panic!("rtapi {args:?} still running after {T:?}: {:?}", text(&o));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let o = child.wait_with_output().unwrap();
    let (out, err) = text(&o);
    (o.status.success(), out, err)
}

#[test]
fn a_streamed_file_comes_back_identical_through_rt_components_and_the_sampler_for_every_type() {
    let cases: [(&str, Vec<&str>); 4] = [
        ("b", vec!["0", "1", "1", "0", "1"]),
        (
            "f",
            vec![
                "0",
                "-0",
                "1.5",
                "-2.25",
                "nan",
                "inf",
                "-inf",
                "1.7976931348623157e308",
                "-1.7976931348623157e308",
                "5e-324",
                "2.2250738585072014e-308",
                "0.1",
                "123456789.123",
            ],
        ),
        ("s", vec!["0", "-1", "2147483647", "-2147483648", "12345"]),
        ("u", vec!["0", "1", "4294967295", "2147483648", "77"]),
    ];
    for (cfg, lines) in cases {
        let mut r = Running::start(&format!("cap-rt{cfg}"), &loopback(cfg));
        let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
        let o = stream(&r.name, &input);
        assert!(o.status.success(), "stream {cfg}: {}", text(&o).1);
        let n = lines.len().to_string();
        let (ok, out, err) = sample(&r.name, &["-n", &n]);
        assert!(ok, "sample {cfg}: {err}");
        assert_eq!(out, input, "cfg={cfg}");
        r.stop();
    }
}

#[test]
fn several_channels_csv_tags_and_a_channel_number() {
    let mut r = Running::start(
        "cap-csv",
        &direct("fbsu")
            .replace("sampler cfg=fbsu", "sampler cfg=f,fbsu")
            .replace("sampler.0", "sampler.1"),
    );
    let input = "1.5 1 -7 7\n-0 0 2147483647 4294967295\n# a comment\n\nnan 1 -2147483648 0\n";
    let o = stream(&r.name, input);
    assert!(o.status.success(), "{}", text(&o).1);
    let (ok, out, err) = sample(&r.name, &["-c", "1", "-n", "3", "-t", "--csv"]);
    assert!(ok, "{err}");
    assert_eq!(
        out,
        "sample,sampler.1.pin.0,sampler.1.pin.1,sampler.1.pin.2,sampler.1.pin.3\n\
         0,1.5,1,-7,7\n1,-0,0,2147483647,4294967295\n2,nan,1,-2147483648,0\n"
    );
    r.stop();
}

#[test]
fn a_full_ring_counts_overruns_and_the_reader_marks_the_gap() {
    let mut r = Running::start(
        "cap-over",
        "loadrt threads name1=servo period1=1000000\nloadrt sampler cfg=s depth=10\n\
         addf sampler.0 servo\nstart\n",
    );
    wait_until("overruns", || {
        getp(&r.name, "sampler.0.overruns").parse::<i32>().unwrap() > 5
    });
    assert_eq!(getp(&r.name, "sampler.0.full"), "TRUE");
    assert_eq!(getp(&r.name, "sampler.0.curr-depth"), "10");
    // The ten kept samples are numbers 0..9; the next one read comes after a gap.
    let (ok, out, err) = sample(&r.name, &["-n", "11", "-t"]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    let tags: Vec<String> = (0..10).map(|i| format!("{i} 0")).collect();
    assert_eq!(&lines[..10], tags.as_slice(), "{out}");
    assert_eq!(lines[10], "overrun", "{out}");
    let n: i64 = lines[11].split(' ').next().unwrap().parse().unwrap();
    assert!(n > 10, "{out}");
    r.stop();
}

#[test]
fn enable_false_stops_sampling_and_an_unfed_streamer_counts_underruns() {
    let mut r = Running::start(
        "cap-en",
        "loadrt threads name1=servo period1=1000000\nloadrt sampler cfg=f depth=100000\n\
         loadrt streamer cfg=u depth=4\naddf sampler.0 servo\naddf streamer.0 servo\nstart\n",
    );
    wait_until("samples", || {
        getp(&r.name, "sampler.0.sample-num")
            .parse::<i32>()
            .unwrap()
            > 20
    });
    let (ok, _, err) = halcmd(&r.name, &["setp", "sampler.0.enable", "0"]);
    assert!(ok, "{err}");
    // The period under way may still sample; from the next one on, none does.
    periods(&r.name, 2);
    let a = getp(&r.name, "sampler.0.sample-num");
    let depth = getp(&r.name, "sampler.0.curr-depth");
    periods(&r.name, 200);
    assert_eq!(getp(&r.name, "sampler.0.sample-num"), a);
    assert_eq!(getp(&r.name, "sampler.0.curr-depth"), depth);
    assert_eq!(a, depth, "every sample taken is in the ring");
    // Nothing feeds the streamer: every period is an underrun.
    let u1: i32 = getp(&r.name, "streamer.0.underruns").parse().unwrap();
    periods(&r.name, 100);
    let u2: i32 = getp(&r.name, "streamer.0.underruns").parse().unwrap();
    assert!(
        u1 > 0 && u2 >= u1 + 100,
        "an underrun every period: {u1} {u2}"
    );
    assert_eq!(getp(&r.name, "streamer.0.empty"), "TRUE");
    r.stop();
    for f in ["sampler.0", "streamer.0"] {
        let p = format!("/dev/shm/rtapi-{}:{f}", r.name);
        assert!(!std::path::Path::new(&p).exists(), "{p} left behind");
    }
}

#[test]
fn a_sampler_loaded_into_a_running_instance_works() {
    let mut r = Running::start(
        "cap-live",
        "loadrt threads name1=servo period1=1000000\nloadrt siggen\naddf siggen.0.update servo\nstart\n",
    );
    for cmd in [
        &["loadrt", "sampler", "cfg=ff", "depth=1000"][..],
        &["net", "c", "siggen.0.square", "sampler.0.pin.0"],
        &["setp", "sampler.0.pin.1", "2.5"],
        &["addf", "sampler.0", "servo"],
    ] {
        let (ok, out, err) = halcmd(&r.name, cmd);
        assert!(ok, "{cmd:?}: {out} {err}");
    }
    let (ok, out, err) = sample(&r.name, &["-n", "5"]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 5, "{out}");
    for l in lines {
        let v: Vec<&str> = l.split(' ').collect();
        assert!(v[0] == "1" || v[0] == "-1", "{l}");
        assert_eq!(v[1], "2.5");
    }
    // Unloaded (its function leaves the thread first): its ring's file goes at once, not when the
    // instance ends.
    let fifo = format!("/dev/shm/rtapi-{}:sampler.0", r.name);
    assert!(std::path::Path::new(&fifo).exists());
    let (ok, out, err) = halcmd(&r.name, &["unloadrt", "sampler"]);
    assert!(ok, "unloadrt: {out} {err}");
    assert!(!std::path::Path::new(&fifo).exists(), "{fifo} left behind");
    // Loaded again, with another shape.
    for cmd in [
        &["loadrt", "sampler", "cfg=u", "depth=10"][..],
        &["setp", "sampler.0.pin.0", "4294967295"],
        &["addf", "sampler.0", "servo"],
    ] {
        let (ok, out, err) = halcmd(&r.name, cmd);
        assert!(ok, "{cmd:?}: {out} {err}");
    }
    let (ok, out, err) = sample(&r.name, &["-n", "3"]);
    assert!(ok, "{err}");
    assert_eq!(out, "4294967295\n".repeat(3));
    r.stop();
}

#[test]
fn bad_stream_lines_are_errors_naming_the_line_and_signals_end_the_reader() {
    let mut r = Running::start(
        "cap-bad",
        "loadrt threads name1=servo period1=1000000\nloadrt streamer cfg=fb depth=100\n\
         loadrt sampler cfg=f depth=10\nstart\n",
    );
    let o = stream(&r.name, "1 0\n2 1\n3 2\n");
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("<stdin>:3:") && err.contains("'2' is not a bit: write 0 or 1"),
        "{err}"
    );
    let o = stream(&r.name, "1 0 7\n");
    assert!(text(&o).1.contains("<stdin>:1: 3 values"), "{}", text(&o).1);
    // A FIFO that does not exist.
    let (ok, _, err) = sample(&r.name, &["-c", "5"]);
    assert!(!ok && err.contains("no sampler.5"), "{err}");
    // A reader without -n ends cleanly on SIGTERM (the sampler is not in a thread: nothing comes).
    for (extra, code) in [(&[][..], 0), (&["-n", "3"][..], 1)] {
        let mut args = vec!["sample", "--instance", r.name.as_str()];
        args.extend_from_slice(extra);
        let child = Command::new(env!("CARGO_BIN_EXE_rtapi"))
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        attached(child.id(), &r.name);
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(code), "{extra:?}: {}", text(&o).1);
    }
    r.stop();
}

#[test]
fn the_reader_ends_when_the_instance_ends() {
    let mut r = Running::start(
        "cap-end",
        "loadrt threads name1=servo period1=1000000\nloadrt sampler cfg=f depth=10\nstart\n",
    );
    let child = Command::new(env!("CARGO_BIN_EXE_rtapi"))
        .args(["sample", "--instance", &r.name, "-n", "5"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    attached(child.id(), &r.name);
    r.stop();
    let o = child.wait_with_output().unwrap();
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("ended after 0 of 5"), "{err}");
}

#[test]
fn planted_fifo_files_are_refused() {
    let name = instance("fake");
    let path = format!("/dev/shm/rtapi-{name}:sampler.0");
    // A symlink to a file we own.
    let target = format!("/dev/shm/rtapi-{name}-target");
    std::fs::write(&target, vec![0u8; 4096]).unwrap();
    std::os::unix::fs::symlink(&target, &path).unwrap();
    let (ok, _, err) = sample(&name, &["-n", "1"]);
    assert!(!ok && err.contains("symbolic link"), "{err}");
    std::fs::remove_file(&path).unwrap();
    // A regular file others may write.
    std::fs::write(&path, vec![0u8; 4096]).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let (ok, _, err) = sample(&name, &["-n", "1"]);
    assert!(!ok && err.contains("0666"), "{err}");
    // Ours and 0600, but not a FIFO.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (ok, _, err) = sample(&name, &["-n", "1"]);
    assert!(
        !ok && err.contains("not a usable rtapi sample FIFO"),
        "{err}"
    );
    std::fs::remove_file(&path).unwrap();
    std::fs::remove_file(&target).unwrap();
}
