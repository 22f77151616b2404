//! `rtapi detect` as a user runs it: the real binary, its JSON, its exit codes and messages.

mod common;

use common::is_root;
use std::os::unix::process::CommandExt;
use std::process::Command;

fn rtapi(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rtapi"));
    c.args(args).env_remove("RTAPI_FLAVOR");
    c
}

use common::run;

#[test]
fn json_has_the_documented_keys_and_a_consistent_flavor() {
    let (code, out, err) = run(&mut rtapi(&["detect", "--json"]));
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("one JSON object");
    for ptr in [
        "/kernel/release",
        "/kernel/version",
        "/kernel/preempt_rt",
        "/kernel/preempt_rt_evidence",
        "/kernel/preemption",
        "/privileges/sched_fifo",
        "/privileges/mlock",
        "/cpus/online",
        "/cpus/isolated",
        "/cpus/rt_cpu",
        "/virtualized",
        "/flavor",
        "/advice",
    ] {
        assert!(v.pointer(ptr).is_some(), "missing {ptr}");
    }
    assert!(v["advice"].is_array());
    assert!(!v["kernel"]["preempt_rt_evidence"]
        .as_array()
        .unwrap()
        .is_empty());
    let fifo = v["privileges"]["sched_fifo"] == true && v["throttling"]["rt_thread_runs"] != false;
    let expected = match (v["kernel"]["preempt_rt"] == true, fifo) {
        (true, true) => "rt-preempt",
        (false, true) => "posix",
        _ => "sim",
    };
    assert_eq!(v["flavor"], expected);
    if let Some(cpu) = v["cpus"]["rt_cpu"].as_u64() {
        let online = v["cpus"]["online"].as_array().unwrap();
        assert!(
            online.iter().any(|c| c.as_u64() == Some(cpu)),
            "rt_cpu must be online"
        );
    }
    if is_root() {
        assert_eq!(
            v["privileges"]["sched_fifo"], true,
            "root may use SCHED_FIFO"
        );
    }
}

#[test]
fn text_report_ends_with_flavor_and_advice() {
    let (code, out, _) = run(&mut rtapi(&["detect"]));
    assert_eq!(code, 0);
    for section in [
        "Kernel",
        "Privileges",
        "Throttling",
        "CPUs",
        "Environment",
        "Tuning",
        "Flavor:",
        "Advice",
    ] {
        assert!(out.contains(section), "missing {section} in\n{out}");
    }
    assert!(out.find("Flavor:").unwrap() > out.find("Environment").unwrap());
}

fn vanilla_fixture() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let put = |rel: &str, text: &str| {
        let p = d.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    put("proc/sys/kernel/osrelease", "6.1.0-25-amd64");
    put(
        "proc/sys/kernel/version",
        "#1 SMP PREEMPT_DYNAMIC Debian 6.1.106-3",
    );
    put("sys/devices/system/cpu/online", "0-1");
    d
}

#[test]
fn forcing_rt_preempt_on_a_vanilla_kernel_exits_2_and_says_use_posix() {
    let fx = vanilla_fixture();
    let sysroot = fx.path().to_str().unwrap();
    let (code, _, err) = run(&mut rtapi(&[
        "detect",
        "--sysroot",
        sysroot,
        "--flavor",
        "rt-preempt",
    ]));
    assert_eq!(code, 2);
    assert!(
        err.contains("not PREEMPT_RT") && err.contains("--flavor posix"),
        "{err}"
    );
    // One line, what to do on it (an escaped `\n` once stood in the middle of it).
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("; what to do: use --flavor posix") && !err.contains("\\n"),
        "{err}"
    );
    let (code, _, err) =
        run(rtapi(&["detect", "--sysroot", sysroot]).env("RTAPI_FLAVOR", "rt-preempt"));
    assert_eq!(code, 2);
    assert!(err.contains("from RTAPI_FLAVOR"), "{err}");
}

#[test]
fn unknown_flavor_exits_2_listing_valid_ones_and_flag_beats_env() {
    let (code, _, err) = run(&mut rtapi(&["detect", "--flavor", "rtai"]));
    assert_eq!(code, 2);
    assert!(
        err.contains("valid flavors are: rt-preempt, posix, sim"),
        "{err}"
    );
    let (code, out, _) =
        run(rtapi(&["detect", "--json", "--flavor", "sim"]).env("RTAPI_FLAVOR", "bogus"));
    assert_eq!(code, 0, "the flag wins over the environment");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["flavor"].as_str(), v["flavor_source"].as_str()),
        (Some("sim"), Some("flag"))
    );
}

#[test]
fn bad_sysroot_exits_2() {
    let (code, _, err) = run(&mut rtapi(&[
        "detect",
        "--sysroot",
        "/nonexistent/rtapi-root",
    ]));
    assert_eq!(code, 2);
    assert!(err.contains("not a directory"), "{err}");
}

/// As an unprivileged user (nobody, no capabilities, RLIMIT_RTPRIO 0) the probe must really fail:
/// auto falls back to sim with a loud warning, and a forced posix names the privilege and the fix.
#[test]
fn unprivileged_user_gets_sim_and_a_fix() {
    if !is_root() {
        return skip!(
            Ci,
            "only root can start a child as the unprivileged user 'nobody'"
        );
    }
    let as_nobody = |args: &[&str]| {
        let mut c = rtapi(args);
        c.uid(65534).gid(65534);
        // Make sure no inherited RT limit grants FIFO to the unprivileged child.
        // SAFETY: pre_exec runs in the forked child before exec; setrlimit is async-signal-safe.
        unsafe {
            c.pre_exec(|| {
                let lim = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                libc::setrlimit(libc::RLIMIT_RTPRIO, &lim);
                Ok(())
            });
        }
        run(&mut c)
    };
    let (code, out, err) = as_nobody(&["detect", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["privileges"]["sched_fifo"], false);
    assert_eq!(v["flavor"], "sim");
    assert!(v["advice"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["id"] == "no-sched-fifo"));
    let (code, _, err) = as_nobody(&["detect"]);
    assert_eq!(code, 0);
    assert!(
        err.contains("NO REAL-TIME") && err.contains("setcap"),
        "{err}"
    );
    let (code, _, err) = as_nobody(&["detect", "--flavor", "posix"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("SCHED_FIFO") && err.contains("setcap cap_sys_nice"),
        "{err}"
    );
}

/// The IRQs `rtapi detect --json` lists as firing on the RT CPUs of this machine, checked against
/// `/proc/interrupts` and `/proc/irq/N/{smp,effective}_affinity_list` read here: every listed IRQ is
/// real, every IRQ that fired on an RT CPU and may still fire there is listed, and whether it can be
/// moved is checked by trying (as root): one whose affinity the kernel refuses to write is not called
/// movable, one it lets write is not called managed.
#[test]
fn json_lists_the_irqs_firing_on_the_rt_cpu() {
    // Read before detect: counts only grow, so an IRQ seen here to have fired on a CPU has when
    // detect reads. Affinities are read before and after; one that changed meanwhile is not judged.
    let before = common::proc_interrupts();
    let affinities = |lines: &[common::InterruptLine]| -> Vec<_> {
        lines
            .iter()
            .map(|l| {
                (
                    common::irq_cpus(l.irq, "smp_affinity_list"),
                    common::irq_cpus(l.irq, "effective_affinity_list"),
                )
            })
            .collect()
    };
    let aff_before = before.as_deref().map(affinities);
    let (code, out, err) = run(&mut rtapi(&["detect", "--json"]));
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rt_cpus: Vec<usize> = v["tuning"]["rt_cpus"]
        .as_array()
        .expect("tuning.rt_cpus")
        .iter()
        .map(|c| c.as_u64().expect("CPU number") as usize)
        .collect();
    if let Some(cpu) = v["cpus"]["rt_cpu"].as_u64() {
        assert!(rt_cpus.contains(&(cpu as usize)), "{rt_cpus:?}");
    }
    let (Some(before), Some(aff_before)) = (before, aff_before) else {
        assert!(v["tuning"]["irqs_on_rt_cpus"].is_null());
        return skip!(Machine, "/proc/interrupts unreadable");
    };
    let aff_after = affinities(&before);
    let after = common::proc_interrupts().expect("/proc/interrupts");
    let irqs = v["tuning"]["irqs_on_rt_cpus"].as_array().expect("an array");
    for irq in irqs {
        let n = irq["irq"].as_u64().expect("irq is a number");
        assert!(
            irq["count_on_rt"].as_u64().expect("count is a number") > 0,
            "{irq}"
        );
        assert!(irq["name"].is_string() && irq["chip"].is_string(), "{irq}");
        for pair in irq["counts"].as_array().unwrap() {
            assert!(pair[0].is_u64() && pair[1].is_u64(), "{irq}");
        }
        assert!(
            ["managed", "probably-managed", "movable"].contains(&irq["managed"].as_str().unwrap()),
            "{irq}"
        );
        assert!(
            after.iter().any(|l| u64::from(l.irq) == n),
            "IRQ {n} is not in /proc/interrupts"
        );
        let advice = v["advice"].as_array().unwrap();
        assert!(
            advice
                .iter()
                .any(|f| f["id"].as_str().unwrap().ends_with("irq-on-rt-cpu")
                    && f["message"]
                        .as_str()
                        .unwrap()
                        .starts_with(&format!("IRQ {n} "))),
            "no finding for IRQ {n}"
        );
    }
    let includes_rt = |a: &Vec<usize>| a.iter().any(|c| rt_cpus.contains(c));
    let (mut expected, mut refused, mut movable) = (0, 0, 0);
    for (i, line) in before.iter().enumerate() {
        let on_rt = line.count_on(&rt_cpus);
        let (Some(aff), Some(eff)) = &aff_before[i] else {
            continue;
        };
        let stable = aff_after[i] == aff_before[i];
        if on_rt == 0 || !stable || !includes_rt(aff) || !includes_rt(eff) {
            continue;
        }
        expected += 1;
        let n = line.irq;
        let listed = irqs
            .iter()
            .find(|i| i["irq"] == n)
            .unwrap_or_else(|| {
                panic!(
                    "IRQ {n} ({}) fired {on_rt} times on RT CPUs {rt_cpus:?} and its affinity \
                     {aff:?} (effective {eff:?}) includes one, but detect does not list it: {irqs:?}",
                    line.rest
                )
            });
        assert_eq!(
            listed["name"]
                .as_str()
                .map(|s| s.ends_with(&line.last_word)),
            Some(true),
            "{listed}"
        );
        if !is_root() {
            continue;
        }
        match common::affinity_write_refused(n) {
            Some(true) => {
                refused += 1;
                assert_ne!(
                    listed["managed"], "movable",
                    "the kernel refuses to write IRQ {n}'s affinity: {listed}"
                );
            }
            Some(false) => {
                movable += 1;
                assert_ne!(
                    listed["managed"], "managed",
                    "the kernel lets IRQ {n}'s affinity be written: {listed}"
                );
                if listed["managed"] == "probably-managed" {
                    eprintln!(
                        "note: IRQ {n} is guessed managed by its name but can be moved: {listed}"
                    );
                }
            }
            None => {}
        }
    }
    eprintln!(
        "{expected} IRQ(s) fire on RT CPUs {rt_cpus:?}, all listed; by trying: {refused} refuse \
         affinity writes, {movable} accept them"
    );
    if expected == 0 {
        return skip!(
            Machine,
            "no IRQ fires on RT CPUs {rt_cpus:?} here: only the IRQs listed were checked"
        );
    }
    if !is_root() {
        skip!(
            Ci,
            "finding managed IRQs by writing their affinity needs root"
        );
    }
}

/// `tuning.idle_states` of `rtapi detect --json` is this machine's cpuidle of the RT CPUs, read here,
/// and `deep-idle-states` is a finding exactly when one of them is enabled and slower than 2 µs.
#[test]
fn json_lists_the_idle_states_of_the_rt_cpus() {
    let (code, out, err) = run(&mut rtapi(&["detect", "--json"]));
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rt_cpus: Vec<u64> = v["tuning"]["rt_cpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .collect();
    let mut expected = Vec::new();
    for cpu in &rt_cpus {
        let dir = format!("/sys/devices/system/cpu/cpu{cpu}/cpuidle");
        let mut states: Vec<u64> = std::fs::read_dir(&dir)
            .map(|d| {
                d.filter_map(|e| {
                    e.ok()?
                        .file_name()
                        .to_str()?
                        .strip_prefix("state")?
                        .parse()
                        .ok()
                })
                .collect()
            })
            .unwrap_or_default();
        states.sort_unstable();
        for k in states {
            let read = |f: &str| {
                std::fs::read_to_string(format!("{dir}/state{k}/{f}"))
                    .unwrap()
                    .trim()
                    .to_string()
            };
            expected.push((*cpu, k, read("name"), read("latency"), read("disable")));
        }
    }
    let listed = &v["tuning"]["idle_states"];
    if expected.is_empty() {
        assert!(listed.is_null(), "{listed}");
        return skip!(Machine, "no cpuidle on the RT CPUs {rt_cpus:?} here");
    }
    let listed = listed.as_array().expect("idle_states");
    assert_eq!(listed.len(), expected.len(), "{listed:?} vs {expected:?}");
    let mut slow = false;
    for (s, (cpu, k, name, latency, disable)) in listed.iter().zip(&expected) {
        assert_eq!(s["cpu"], *cpu, "{s}");
        assert_eq!(s["state"], *k, "{s}");
        assert_eq!(s["name"], name.as_str(), "{s}");
        assert_eq!(s["latency_us"].to_string(), *latency, "{s}");
        assert_eq!(s["disabled"], disable != "0", "{s}");
        slow |= disable == "0" && latency.parse::<u64>().unwrap() > 2;
    }
    let finding = v["advice"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["id"] == "deep-idle-states");
    assert_eq!(finding, slow, "{}", v["advice"]);
}
