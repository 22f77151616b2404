//! Planning, applying and reverting on temporary trees that fake `/proc` and `/sys`.

use super::apply::tunable_path;
use super::*;
use crate::detect::{Limit, Privileges, Probe};
use std::path::Path;

struct NoProbe;

impl Probe for NoProbe {
    fn clock_resolution_ns(&self) -> Option<u64> {
        Some(1)
    }
    fn privileges(&self) -> Privileges {
        Privileges {
            sched_fifo: Some(true),
            sched_fifo_error: None,
            max_priority: Some(99),
            rlimit_rtprio: Some(Limit::Value(0)),
            cap_sys_nice: Some(true),
            mlock: Some(true),
            rlimit_memlock: Some(Limit::Unlimited),
            cap_ipc_lock: Some(true),
            dma_latency: Some(true),
            port_io: Some(true),
            port_io_error: None,
        }
    }
    fn rt_thread_runs(&self, _cpu: Option<usize>) -> Option<bool> {
        Some(true)
    }
}

struct Tree(tempfile::TempDir);

impl Tree {
    fn new() -> Tree {
        Tree(tempfile::tempdir().unwrap())
    }
    /// Files end in a newline, as the kernel prints them.
    fn file(self, rel: &str, text: &str) -> Tree {
        let p = self.0.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, format!("{text}\n")).unwrap();
        self
    }
    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.0.path().join(rel)).unwrap()
    }
    fn root(&self) -> SysRoot {
        SysRoot::new(self.0.path())
    }
    fn plan(&self, cpus: Option<&[usize]>) -> Result<Plan, PlanError> {
        let report = SystemReport::detect(&self.root(), &NoProbe);
        plan(&report, &self.root(), cpus)
    }
    fn snapshot(&self) -> Vec<(PathBuf, Vec<u8>)> {
        fn walk(dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    walk(&p, out);
                } else {
                    out.push((p.clone(), std::fs::read(&p).unwrap()));
                }
            }
        }
        let mut out = Vec::new();
        walk(self.0.path(), &mut out);
        out.sort();
        out
    }
}

use std::path::PathBuf;

const INTERRUPTS: &str = "           CPU0       CPU1       CPU2       CPU3
 26:          0         14          0          0  IO-APIC   4-edge      ttyS0
 36:          0     671928          0          0  PCI-MSIX-0000:00:02.0   1-edge      virtio1-req.0
 41:       5475          0          0          0  PCI-MSIX-0000:00:04.0   1-edge      virtio3-rx
 42:          0      16576          0          0  PCI-MSIX-0000:00:04.0   2-edge      virtio3-tx
 43:          1          0          0          0  PCI-MSIX-0000:00:04.0   3-edge      virtio3-event
NMI:          0          0          0          0   Non-maskable interrupts";

/// Four CPUs, CPU 3 isolated; a vanilla PREEMPT_DYNAMIC kernel running `none`, without NO_HZ_FULL.
fn machine() -> Tree {
    Tree::new()
        .file("proc/sys/kernel/osrelease", "6.8.0")
        .file("proc/sys/kernel/version", "#1 SMP PREEMPT_DYNAMIC")
        .file(
            "boot/config-6.8.0",
            "CONFIG_PREEMPT_DYNAMIC=y\nCONFIG_PREEMPT_NONE=y\n# CONFIG_NO_HZ_FULL is not set\n",
        )
        .file("proc/cmdline", "quiet isolcpus=3")
        .file("sys/devices/system/cpu/online", "0-3")
        .file("sys/devices/system/cpu/isolated", "3")
        .file("proc/interrupts", INTERRUPTS)
        .file("proc/irq/26/smp_affinity_list", "0-3")
        .file("proc/irq/36/smp_affinity_list", "3")
        .file("proc/irq/41/smp_affinity_list", "0-2")
        .file("proc/irq/42/smp_affinity_list", "1,3")
        .file("proc/irq/43/smp_affinity_list", "3")
        .file("proc/irq/default_smp_affinity", "f")
        .file("sys/devices/virtual/workqueue/cpumask", "f")
        .file("proc/sys/kernel/timer_migration", "1")
        .file("proc/sys/kernel/watchdog", "1")
        .file("proc/sys/kernel/nmi_watchdog", "0")
        .file(
            "sys/kernel/mm/transparent_hugepage/enabled",
            "[always] madvise never",
        )
        .file(
            "sys/devices/system/cpu/cpu3/cpufreq/scaling_governor",
            "powersave",
        )
        .file(
            "sys/devices/system/cpu/cpu3/cpufreq/scaling_available_governors",
            "performance powersave",
        )
        .file("sys/devices/system/cpu/cpu3/cpuidle/state0/name", "POLL")
        .file("sys/devices/system/cpu/cpu3/cpuidle/state0/latency", "0")
        .file("sys/devices/system/cpu/cpu3/cpuidle/state0/disable", "0")
        .file("sys/devices/system/cpu/cpu3/cpuidle/state1/name", "C1")
        .file("sys/devices/system/cpu/cpu3/cpuidle/state1/latency", "2")
        .file("sys/devices/system/cpu/cpu3/cpuidle/state1/disable", "0")
        .file("sys/devices/system/cpu/cpu3/cpuidle/state2/name", "C6")
        .file("sys/devices/system/cpu/cpu3/cpuidle/state2/latency", "133")
        .file("sys/devices/system/cpu/cpu3/cpuidle/state2/disable", "0")
        // Not an RT CPU: left alone.
        .file("sys/devices/system/cpu/cpu0/cpuidle/state2/name", "C6")
        .file("sys/devices/system/cpu/cpu0/cpuidle/state2/latency", "133")
        .file("sys/devices/system/cpu/cpu0/cpuidle/state2/disable", "0")
}

fn commands(p: &Plan) -> Vec<String> {
    p.changes.iter().map(Change::command).collect()
}

#[test]
fn the_plan_covers_every_run_time_fix_and_only_those() {
    let t = machine();
    let p = t.plan(None).unwrap();
    assert_eq!(p.rt_cpus, [3]);
    assert_eq!(p.housekeeping, [0, 1, 2]);
    assert_eq!(
        commands(&p),
        [
            "echo 0-2 > /proc/irq/26/smp_affinity_list",
            "echo 1 > /proc/irq/42/smp_affinity_list",
            "echo 0-2 > /proc/irq/43/smp_affinity_list",
            "echo 7 > /proc/irq/default_smp_affinity",
            "echo 7 > /sys/devices/virtual/workqueue/cpumask",
            "sysctl -w kernel.timer_migration=0",
            "sysctl -w kernel.watchdog=0",
            "echo performance > /sys/devices/system/cpu/cpu3/cpufreq/scaling_governor",
            "echo 1 > /sys/devices/system/cpu/cpu3/cpuidle/state2/disable",
            "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled",
        ]
    );
    // The watchdog says what is lost.
    let wd = p
        .changes
        .iter()
        .find(|c| c.path.ends_with("kernel/watchdog"))
        .unwrap();
    assert!(wd.cost.as_deref().unwrap().contains("lockup"), "{wd:?}");
    // The managed queue IRQ is a boot reason, never a write; the kernel has no NO_HZ_FULL, and
    // `none` preemption on a dynamic kernel wants preempt=full.
    assert_eq!(
        p.boot_params,
        [
            "isolcpus=managed_irq,domain,3",
            "rcu_nocbs=3",
            "preempt=full"
        ]
    );
    assert!(
        p.boot_reasons
            .iter()
            .any(|r| r.contains("IRQ 36 virtio1-req.0") && r.contains("managed")),
        "{:?}",
        p.boot_reasons
    );
    assert!(p.notes.iter().any(|n| n.contains("CONFIG_NO_HZ_FULL")));
    let text = p.render("/run/rtapi/tune-revert.json");
    assert!(
        text.contains("\nisolcpus=managed_irq,domain,3 rcu_nocbs=3 preempt=full\n"),
        "{text}"
    );
    assert!(text.contains("GRUB_CMDLINE_LINUX"), "{text}");
    assert!(text.contains("was 0-3; IRQ 26 ttyS0"), "{text}");
}

#[test]
fn irqs_the_kernel_never_moves_are_noted_not_written() {
    let t = machine()
        .file(
            "proc/interrupts",
            "  CPU0 CPU1 CPU2 CPU3\n  0: 40 0 0 0 IO-APIC 2-edge timer\n  9: 0 0 0 3 IO-APIC 9-fasteoi acpi\n 42: 0 0 0 5 PCI-MSIX 2-edge virtio3-tx\n",
        )
        .file("proc/irq/0/smp_affinity_list", "0-3")
        .file("proc/irq/9/smp_affinity_list", "0-3")
        .file("proc/irq/42/smp_affinity_list", "0-3");
    let c = commands(&t.plan(None).unwrap());
    assert!(!c.iter().any(|c| c.contains("/proc/irq/0/")), "{c:?}");
    assert!(
        c.contains(&"echo 0-2 > /proc/irq/9/smp_affinity_list".to_string()),
        "{c:?}"
    );
    let p = t.plan(None).unwrap();
    assert!(
        p.notes
            .iter()
            .any(|n| n.starts_with("IRQ 0 timer") && n.contains("refuses")),
        "{:?}",
        p.notes
    );
    // With debugfs, its flags decide.
    let t = t
        .file(
            "sys/kernel/debug/irq/irqs/0",
            "dstate: 0x0\n IRQD_ACTIVATED\n",
        )
        .file(
            "sys/kernel/debug/irq/irqs/42",
            "dstate: 0x0\n IRQD_PER_CPU\n IRQD_NO_BALANCING\n",
        );
    let p = t.plan(None).unwrap();
    let c = commands(&p);
    assert!(
        c.contains(&"echo 0-2 > /proc/irq/0/smp_affinity_list".to_string()),
        "{c:?}"
    );
    assert!(!c.iter().any(|c| c.contains("/proc/irq/42/")), "{c:?}");
    assert!(
        p.notes
            .iter()
            .any(|n| n.starts_with("IRQ 42 virtio3-tx") && n.contains("per-CPU")),
        "{:?}",
        p.notes
    );
}

#[test]
fn settings_already_right_are_not_planned() {
    let t = machine()
        .file(
            "proc/cmdline",
            "isolcpus=managed_irq,domain,3 rcu_nocbs=3 preempt=full",
        )
        .file("proc/irq/26/smp_affinity_list", "0-2")
        .file("proc/irq/42/smp_affinity_list", "1")
        .file("proc/irq/43/smp_affinity_list", "0")
        .file("proc/irq/default_smp_affinity", "7")
        .file("sys/devices/virtual/workqueue/cpumask", "00000007")
        .file("proc/sys/kernel/timer_migration", "0")
        .file("proc/sys/kernel/watchdog", "0")
        .file(
            "sys/kernel/mm/transparent_hugepage/enabled",
            "always [madvise] never",
        )
        .file(
            "sys/devices/system/cpu/cpu3/cpufreq/scaling_governor",
            "performance",
        )
        .file("sys/devices/system/cpu/cpu3/cpuidle/state2/disable", "1");
    let p = t.plan(None).unwrap();
    assert!(p.changes.is_empty(), "{:?}", commands(&p));
    assert!(p.boot_params.is_empty(), "{:?}", p.boot_params);
    assert!(p.render("x").contains("nothing to change"));
}

#[test]
fn boot_parameters_complete_what_the_command_line_lacks() {
    // managed_irq without domain isolates nothing from the scheduler; rcu_nocbs is already right.
    let p = machine()
        .file(
            "proc/cmdline",
            "isolcpus=managed_irq,3 rcu_nocbs=3 preempt=full",
        )
        .plan(None)
        .unwrap();
    assert_eq!(p.boot_params, ["isolcpus=managed_irq,domain,3"]);
    // An isolcpus list without the RT CPU is widened, not replaced.
    let p = machine()
        .file("proc/cmdline", "isolcpus=domain,managed_irq,1 rcu_nocbs=1")
        .plan(Some(&[3]))
        .unwrap();
    assert_eq!(
        p.boot_params,
        [
            "isolcpus=managed_irq,domain,1,3",
            "rcu_nocbs=1,3",
            "preempt=full"
        ]
    );
}

#[test]
fn cpu_override_is_checked_and_used() {
    let t = machine();
    let p = t.plan(Some(&[2, 3])).unwrap();
    assert_eq!(p.housekeeping, [0, 1]);
    let c = commands(&p);
    assert!(
        c.contains(&"echo 0-1 > /proc/irq/26/smp_affinity_list".to_string()),
        "{c:?}"
    );
    // virtio3-rx (0-2) now includes an RT CPU too.
    assert!(
        c.contains(&"echo 0-1 > /proc/irq/41/smp_affinity_list".to_string()),
        "{c:?}"
    );
    assert!(
        c.contains(&"echo 3 > /sys/devices/virtual/workqueue/cpumask".to_string()),
        "{c:?}"
    );
    assert!(
        p.boot_params
            .contains(&"isolcpus=managed_irq,domain,2-3".to_string()),
        "{:?}",
        p.boot_params
    );

    let err = |cpus: &[usize]| t.plan(Some(cpus)).unwrap_err().to_string();
    assert!(
        err(&[7]).contains("CPU 7 is not online (online: 0-3)"),
        "{}",
        err(&[7])
    );
    assert!(
        err(&[0, 1, 2, 3]).contains("every online CPU"),
        "{}",
        err(&[0, 1, 2, 3])
    );
    assert!(err(&[]).contains("empty"), "{}", err(&[]));
}

#[test]
fn formats_compare_what_the_kernel_prints_with_what_was_written() {
    assert!(Format::CpuList.same("0-1", "0,1"));
    assert!(!Format::CpuList.same("0-1", "0"));
    assert!(Format::HexMask.same("00000003", "3"));
    assert!(Format::HexMask.same("0,00000001", "1"));
    assert!(Format::Choice.same("always [madvise] never", "madvise"));
    assert_eq!(
        Format::Choice.restore_form("[always] madvise never"),
        "always"
    );
    assert_eq!(Format::Plain.restore_form(" 1 "), "1");
    assert!(!Format::Plain.same("1", "0"));
    let c = |path: &str| Change {
        path: path.into(),
        format: Format::Plain,
        current: "1".into(),
        value: "0".into(),
        why: String::new(),
        cost: None,
    };
    assert_eq!(
        c("/proc/sys/kernel/nmi_watchdog").command(),
        "sysctl -w kernel.nmi_watchdog=0"
    );
    assert_eq!(
        c("/proc/irq/5/smp_affinity_list").command(),
        "echo 0 > /proc/irq/5/smp_affinity_list"
    );
}

#[test]
fn apply_records_first_and_revert_restores_every_byte() {
    let t = machine();
    let before = t.snapshot();
    let p = t.plan(None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let rf = dir.path().join("sub/revert.json");
    let mut seen = Vec::new();
    let out = apply(&t.root(), &p, &rf, &mut |c, r| {
        seen.push((c.path.clone(), r.is_ok()))
    })
    .unwrap();
    assert_eq!(out.applied.len(), p.changes.len());
    assert!(out.failed.is_empty() && out.stopped.is_none() && out.revert_file_kept);
    assert_eq!(seen.len(), p.changes.len());
    assert_eq!(t.read("proc/irq/42/smp_affinity_list"), "1\n");
    assert_eq!(t.read("proc/sys/kernel/timer_migration"), "0\n");
    assert_eq!(
        t.read("sys/kernel/mm/transparent_hugepage/enabled"),
        "madvise\n"
    );
    let file = load(&rf).unwrap();
    assert_eq!(file.entries.len(), p.changes.len());
    assert!(file.entries.iter().all(|e| e.applied));
    let thp = file
        .entries
        .iter()
        .find(|e| e.path.contains("transparent"))
        .unwrap();
    assert_eq!(
        (thp.before.as_str(), thp.written.as_str()),
        ("always", "madvise")
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&rf).unwrap().permissions().mode() & 0o777,
        0o600
    );

    // A second tune refuses and writes nothing.
    let during = t.snapshot();
    let again = apply(&t.root(), &p, &rf, &mut |_, _| {
        panic!("nothing may be written")
    });
    assert!(
        matches!(again, Err(ApplyError::RevertFileExists(_))),
        "{again:?}"
    );
    assert!(again
        .unwrap_err()
        .to_string()
        .contains("--revert --revert-file"));
    assert_eq!(t.snapshot(), during);

    let r = revert(&rf, false).unwrap();
    assert_eq!(r.restored.len(), p.changes.len());
    assert!(r.file_removed && !rf.exists());
    // The restored order is the reverse of the writes.
    assert_eq!(
        r.restored.first().unwrap().path,
        p.changes.last().unwrap().path
    );
    // THP is written back as its selected word and reads back as the kernel's list; here (a plain
    // file) it reads back as written.
    let mut expected = before.clone();
    for (path, bytes) in &mut expected {
        if path.ends_with("transparent_hugepage/enabled") {
            *bytes = b"always\n".to_vec();
        }
    }
    assert_eq!(t.snapshot(), expected);
    assert!(matches!(revert(&rf, false), Err(RevertError::Missing(_))));
}

/// A plan with a change at `at` to a file that reads but cannot be written, even by root: the tree's
/// `osrelease` is a link to the real read-only sysctl (EACCES).
fn with_unwritable(t: &Tree, at: usize) -> Plan {
    let mut p = t.plan(None).unwrap();
    let ro = t.0.path().join("proc/sys/kernel/osrelease");
    std::fs::remove_file(&ro).unwrap();
    std::os::unix::fs::symlink("/proc/sys/kernel/osrelease", &ro).unwrap();
    p.changes.insert(
        at,
        Change {
            path: "/proc/sys/kernel/osrelease".into(),
            format: Format::Plain,
            current: String::new(),
            value: "9.9".into(),
            why: "test".into(),
            cost: None,
        },
    );
    p
}

#[test]
fn a_first_write_refused_for_access_stops_with_nothing_changed() {
    let t = machine();
    let p = with_unwritable(&t, 0);
    let before = t.snapshot();
    let dir = tempfile::tempdir().unwrap();
    let rf = dir.path().join("revert.json");
    let out = apply(&t.root(), &p, &rf, &mut |_, _| {}).unwrap();
    assert!(out.applied.is_empty());
    let why = out.stopped.as_deref().expect("stopped");
    assert!(
        why.contains("needs root") && why.contains("EACCES"),
        "{why}"
    );
    assert!(!rf.exists() && !out.revert_file_kept);
    assert_eq!(t.snapshot(), before);
}

#[test]
fn a_failed_write_is_reported_and_the_rest_applied_and_recorded() {
    let t = machine();
    let p = with_unwritable(&t, 1);
    let dir = tempfile::tempdir().unwrap();
    let rf = dir.path().join("revert.json");
    let out = apply(&t.root(), &p, &rf, &mut |_, _| {}).unwrap();
    assert_eq!(out.failed.len(), 1, "{:?}", out.failed);
    assert_eq!(out.failed[0].path, "/proc/sys/kernel/osrelease");
    assert!(
        out.failed[0].error.starts_with("EACCES") || out.failed[0].error.starts_with("EPERM"),
        "{:?}",
        out.failed
    );
    assert_eq!(out.applied.len(), p.changes.len() - 1);
    let file = load(&rf).unwrap();
    assert_eq!(file.entries.len(), p.changes.len() - 1);
    assert!(!file.entries.iter().any(|e| e.path.contains("osrelease")));
    assert_eq!(t.read("proc/sys/kernel/timer_migration"), "0\n");
    revert(&rf, false).unwrap();
    assert_eq!(t.read("proc/sys/kernel/timer_migration"), "1\n");
}

#[test]
fn revert_leaves_a_value_someone_else_changed_unless_forced() {
    let t = machine();
    let p = t.plan(None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let rf = dir.path().join("revert.json");
    apply(&t.root(), &p, &rf, &mut |_, _| {}).unwrap();
    // Someone else sets IRQ 42 to CPU 2 and puts timer_migration back by hand.
    let t = t
        .file("proc/irq/42/smp_affinity_list", "2")
        .file("proc/sys/kernel/timer_migration", "1");
    let r = revert(&rf, false).unwrap();
    assert_eq!(r.skipped.len(), 1, "{:?}", r.skipped);
    assert_eq!(r.skipped[0].entry.path, "/proc/irq/42/smp_affinity_list");
    assert_eq!(r.skipped[0].now, "2");
    assert_eq!(r.already.len(), 1);
    assert_eq!(r.restored.len(), p.changes.len() - 2);
    assert!(!r.file_removed);
    assert_eq!(t.read("proc/irq/42/smp_affinity_list"), "2\n");
    // Only the skipped value stays in the file; --force restores it.
    let left = load(&rf).unwrap();
    assert_eq!(left.entries.len(), 1);
    let r = revert(&rf, true).unwrap();
    assert_eq!(r.restored.len(), 1);
    assert!(r.file_removed);
    assert_eq!(t.read("proc/irq/42/smp_affinity_list"), "1,3\n");
}

#[test]
fn nothing_to_change_leaves_no_revert_file() {
    let t = machine();
    let mut p = t.plan(None).unwrap();
    p.changes.clear();
    let dir = tempfile::tempdir().unwrap();
    let rf = dir.path().join("revert.json");
    let out = apply(&t.root(), &p, &rf, &mut |_, _| {}).unwrap();
    assert!(!out.revert_file_kept && !rf.exists());
}

#[test]
fn a_revert_file_others_could_write_or_naming_other_files_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let t = machine();
    let p = t.plan(None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let rf = dir.path().join("revert.json");
    apply(&t.root(), &p, &rf, &mut |_, _| {}).unwrap();
    let tuned = t.snapshot();

    // World-writable: refused, nothing restored, the file kept.
    std::fs::set_permissions(&rf, std::fs::Permissions::from_mode(0o666)).unwrap();
    let e = revert(&rf, false).unwrap_err().to_string();
    assert!(e.contains("mode 666") && e.contains("any file"), "{e}");
    assert_eq!(t.snapshot(), tuned);
    std::fs::set_permissions(&rf, std::fs::Permissions::from_mode(0o600)).unwrap();

    // A symbolic link to it: refused.
    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink(&rf, &link).unwrap();
    let e = revert(&link, false).unwrap_err().to_string();
    assert!(e.contains("symbolic link"), "{e}");

    // An entry outside the places tune writes (or climbing out of them): refused as a whole.
    let good = std::fs::read_to_string(&rf).unwrap();
    for bad in ["/etc/passwd", "/proc/irq/../../etc/passwd"] {
        let text = good.replacen("/proc/irq/26/smp_affinity_list", bad, 1);
        assert_ne!(text, good);
        std::fs::write(&rf, &text).unwrap();
        let e = revert(&rf, false).unwrap_err().to_string();
        assert!(e.contains("never writes"), "{e}");
        assert_eq!(t.snapshot(), tuned);
    }
    std::fs::write(&rf, &good).unwrap();
    assert!(revert(&rf, false).unwrap().file_removed);
    // Nor does apply write such a place.
    let mut p = p;
    p.changes.truncate(1);
    p.changes[0].path = "/etc/hostname".into();
    let out = apply(&t.root(), &p, &rf, &mut |_, _| {}).unwrap();
    assert_eq!(out.failed.len(), 1, "{:?}", out.failed);
    assert!(!rf.exists());
    assert!(tunable_path("/proc/sys/kernel/watchdog"));
    assert!(!tunable_path("/proc/sys/vm/swappiness"));
}
