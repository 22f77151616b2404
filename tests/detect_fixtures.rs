//! Detection against fixture sysroots: kernels we must classify right, broken trees we must survive.

use flate2::write::GzEncoder;
use rtapi::detect::{
    CoKernel, Limit, Preemption, Privileges, Probe, Severity, SysRoot, SystemReport,
};
use rtapi::flavor::{self, Flavor, FlavorError, Source};
use std::io::Write;
use std::path::Path;

/// A probe that reports what the test says instead of trying things.
#[derive(Clone)]
struct FakeProbe {
    fifo: Option<bool>,
    rt_runs: Option<bool>,
    res_ns: Option<u64>,
}

const ROOT_LIKE: FakeProbe = FakeProbe {
    fifo: Some(true),
    rt_runs: Some(true),
    res_ns: Some(1),
};
const UNPRIVILEGED: FakeProbe = FakeProbe {
    fifo: Some(false),
    rt_runs: None,
    res_ns: Some(1),
};

impl Probe for FakeProbe {
    fn clock_resolution_ns(&self) -> Option<u64> {
        self.res_ns
    }
    fn privileges(&self) -> Privileges {
        Privileges {
            sched_fifo: self.fifo,
            sched_fifo_error: (self.fifo == Some(false)).then(|| "Operation not permitted".into()),
            max_priority: (self.fifo == Some(true)).then_some(99),
            rlimit_rtprio: Some(Limit::Value(0)),
            cap_sys_nice: self.fifo,
            mlock: self.fifo,
            rlimit_memlock: Some(Limit::Value(8 << 20)),
            cap_ipc_lock: self.fifo,
            dma_latency: self.fifo,
            port_io: self.fifo,
            port_io_error: (self.fifo == Some(false))
                .then(|| "ioperm: Operation not permitted; port I/O needs root".into()),
        }
    }
    fn rt_thread_runs(&self, _cpu: Option<usize>) -> Option<bool> {
        self.rt_runs
    }
}

/// A fixture tree in a temporary directory.
struct Tree(tempfile::TempDir);

impl Tree {
    fn new() -> Tree {
        Tree(tempfile::tempdir().unwrap())
    }
    fn file(self, rel: &str, text: &str) -> Tree {
        self.bytes(rel, text.as_bytes())
    }
    fn bytes(self, rel: &str, data: &[u8]) -> Tree {
        let p = self.0.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, data).unwrap();
        self
    }
    fn dir(self, rel: &str) -> Tree {
        std::fs::create_dir_all(self.0.path().join(rel)).unwrap();
        self
    }
    fn config_gz(self, text: &str) -> Tree {
        let mut enc = GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(text.as_bytes()).unwrap();
        let gz = enc.finish().unwrap();
        self.bytes("proc/config.gz", &gz)
    }
    fn cpus(self, online: &str, isolated: &str) -> Tree {
        self.file("sys/devices/system/cpu/online", online)
            .file("sys/devices/system/cpu/isolated", isolated)
    }
    fn path(&self) -> &Path {
        self.0.path()
    }
    fn detect(&self, probe: &FakeProbe) -> SystemReport {
        SystemReport::detect(&SysRoot::new(self.path()), probe)
    }
}

fn vanilla_dynamic() -> Tree {
    Tree::new()
        .file("proc/sys/kernel/osrelease", "6.8.0-45-generic")
        .file("proc/sys/kernel/version", "#45-Ubuntu SMP PREEMPT_DYNAMIC Fri Aug 30 12:02:04 UTC 2024")
        .config_gz("CONFIG_PREEMPT_DYNAMIC=y\nCONFIG_PREEMPT_VOLUNTARY=y\n# CONFIG_PREEMPT_RT is not set\nCONFIG_HZ=1000\n")
        .file("proc/sys/kernel/sched_rt_runtime_us", "950000")
        .file("proc/sys/kernel/sched_rt_period_us", "1000000")
        .file("proc/cmdline", "BOOT_IMAGE=/vmlinuz quiet splash")
        .cpus("0-3", "")
}

fn ids(r: &SystemReport) -> Vec<&'static str> {
    r.advice().iter().map(|f| f.id).collect()
}

#[test]
fn mainline_preempt_rt_without_sys_kernel_realtime() {
    let t = Tree::new()
        .file("proc/sys/kernel/osrelease", "6.12.9-rt-amd64")
        .file(
            "proc/sys/kernel/version",
            "#1 SMP PREEMPT_RT Debian 6.12.9-1 (2025-01-10)",
        )
        .config_gz("CONFIG_PREEMPT_RT=y\nCONFIG_HZ=1000\nCONFIG_NO_HZ_FULL=y\n")
        .cpus("0-3", "3");
    let r = t.detect(&ROOT_LIKE);
    assert_eq!(r.kernel.preempt_rt, Some(true));
    assert_eq!(r.kernel.preemption, Some(Preemption::Rt));
    let ev = r.kernel.preempt_rt_evidence.join("\n");
    assert!(ev.contains("version string says PREEMPT_RT"), "{ev}");
    assert!(ev.contains("/sys/kernel/realtime absent"), "{ev}");
    assert!(
        ev.contains("CONFIG_PREEMPT_RT=y in /proc/config.gz"),
        "{ev}"
    );
    assert_eq!(r.kernel.hz, Some(1000));
    assert_eq!(r.kernel.no_hz_full, Some(true));
    assert_eq!(r.cpus.rt_cpu, Some(3));
    let sel = flavor::select(&r, None, None).unwrap();
    assert_eq!((sel.flavor, sel.source), (Flavor::RtPreempt, Source::Auto));
    assert!(!ids(&r).contains(&"not-preempt-rt"));
    assert!(!ids(&r).contains(&"no-isolated-cpu"));
}

#[test]
fn rt_only_in_config_is_enough() {
    let t = Tree::new()
        .file("proc/sys/kernel/osrelease", "6.13.0")
        .file("proc/sys/kernel/version", "#1 SMP")
        .file("boot/config-6.13.0", "CONFIG_PREEMPT_RT=y\n");
    let r = t.detect(&ROOT_LIKE);
    assert_eq!(r.kernel.preempt_rt, Some(true));
    assert!(r
        .kernel
        .preempt_rt_evidence
        .iter()
        .any(|e| e.contains("/boot/config-6.13.0")));
}

#[test]
fn older_rt_patched_kernel_with_sys_kernel_realtime() {
    let t = Tree::new()
        .file("proc/sys/kernel/osrelease", "4.19.0-21-rt-amd64")
        .file(
            "proc/sys/kernel/version",
            "#1 SMP PREEMPT Debian 4.19.249-2",
        )
        .file("sys/kernel/realtime", "1")
        .file(
            "boot/config-4.19.0-21-rt-amd64",
            "CONFIG_PREEMPT_RT_FULL=y\n",
        )
        .cpus("0-1", "");
    let r = t.detect(&ROOT_LIKE);
    assert_eq!(r.kernel.preempt_rt, Some(true));
    let ev = r.kernel.preempt_rt_evidence.join("\n");
    assert!(ev.contains("/sys/kernel/realtime = 1"), "{ev}");
    assert!(ev.contains("CONFIG_PREEMPT_RT_FULL=y"), "{ev}");
    assert_eq!(
        flavor::select(&r, None, None).unwrap().flavor,
        Flavor::RtPreempt
    );
}

#[test]
fn vanilla_preempt_dynamic_is_posix_with_advice() {
    let r = vanilla_dynamic().detect(&ROOT_LIKE);
    assert_eq!(r.kernel.preempt_rt, Some(false));
    assert!(r.kernel.preempt_dynamic);
    assert_eq!(r.kernel.preemption, Some(Preemption::Voluntary));
    assert!(r.kernel.preemption_source.contains("boot default"));
    assert_eq!(r.throttling.throttled, Some(true));
    assert_eq!(r.cpus.rt_cpu, Some(3));
    let sel = flavor::select(&r, None, None).unwrap();
    assert_eq!(sel.flavor, Flavor::Posix);
    assert!(sel.warnings.is_empty());
    let ids = ids(&r);
    for id in [
        "not-preempt-rt",
        "preemption-model",
        "no-isolated-cpu",
        "rt-throttling",
    ] {
        assert!(ids.contains(&id), "missing {id} in {ids:?}");
    }
    let iso = r
        .advice()
        .into_iter()
        .find(|f| f.id == "no-isolated-cpu")
        .unwrap();
    // The vanilla config has no CONFIG_NO_HZ_FULL: nohz_full= would do nothing and is left out.
    assert_eq!(
        iso.fix.as_deref(),
        Some("add `isolcpus=managed_irq,domain,3 rcu_nocbs=3` to the kernel command line and reboot (no nohz_full=: this kernel lacks CONFIG_NO_HZ_FULL)")
    );
}

#[test]
fn dynamic_mode_from_cmdline_and_debugfs() {
    let t = vanilla_dynamic().file("proc/cmdline", "quiet preempt=full");
    let r = t.detect(&ROOT_LIKE);
    assert_eq!(r.kernel.preemption, Some(Preemption::Full));
    assert!(r.kernel.preemption_source.contains("preempt="));
    let t = t.file(
        "sys/kernel/debug/sched/preempt",
        "none voluntary full (lazy)",
    );
    let r = t.detect(&ROOT_LIKE);
    assert_eq!(r.kernel.preemption, Some(Preemption::Lazy));
    assert!(!ids(&r).contains(&"preemption-model"));
}

#[test]
fn xenomai_evl_and_rtai_are_reported_not_supported() {
    let r = vanilla_dynamic().dir("proc/xenomai").detect(&ROOT_LIKE);
    assert_eq!(r.kernel.co_kernel, Some(CoKernel::Xenomai));
    let f = r
        .advice()
        .into_iter()
        .find(|f| f.id == "co-kernel")
        .unwrap();
    assert!(f.message.contains("not supported"));
    assert_eq!(
        vanilla_dynamic()
            .dir("dev/evl")
            .detect(&ROOT_LIKE)
            .kernel
            .co_kernel,
        Some(CoKernel::Evl)
    );
    let rtai = vanilla_dynamic()
        .file("proc/sys/kernel/osrelease", "3.4.55-rtai")
        .detect(&ROOT_LIKE);
    assert_eq!(rtai.kernel.co_kernel, Some(CoKernel::Rtai));
    assert_eq!(vanilla_dynamic().detect(&ROOT_LIKE).kernel.co_kernel, None);
}

#[test]
fn isolated_cpus_with_highest_offline() {
    let t = vanilla_dynamic()
        .cpus("0-2", "2-3")
        .file("sys/devices/system/cpu/offline", "3")
        .file(
            "proc/cmdline",
            "isolcpus=domain,managed_irq,2-3 nohz_full=2-3 rcu_nocbs=2-3",
        );
    let r = t.detect(&ROOT_LIKE);
    assert_eq!(r.cpus.isolated, vec![2, 3]);
    assert_eq!(r.cpus.offline, vec![3]);
    assert_eq!(r.cpus.rt_cpu, Some(2), "never the offline CPU 3");
    assert_eq!(r.cpus.isolcpus, Some(vec![2, 3]));
    assert_eq!(r.cpus.nohz_full, Some(vec![2, 3]));
    // Only offline isolated CPUs: fall back to the highest online one, and say why.
    let r = vanilla_dynamic()
        .cpus("0-2", "3")
        .file("sys/devices/system/cpu/offline", "3")
        .detect(&ROOT_LIKE);
    assert_eq!(r.cpus.rt_cpu, Some(2));
    assert!(r.cpus.rt_cpu_reason.contains("offline"));
    assert!(ids(&r).contains(&"isolated-cpu-unusable"));
}

#[test]
fn governor_and_smt_sibling_advice() {
    let t = vanilla_dynamic()
        .cpus("0-3", "3")
        .file(
            "sys/devices/system/cpu/cpu3/cpufreq/scaling_governor",
            "powersave",
        )
        .file(
            "sys/devices/system/cpu/cpu3/topology/thread_siblings_list",
            "1,3",
        )
        .file(
            "sys/devices/system/cpu/cpu1/topology/thread_siblings_list",
            "1,3",
        );
    let r = t.detect(&ROOT_LIKE);
    let advice = r.advice();
    let gov = advice.iter().find(|f| f.id == "governor").unwrap();
    assert!(gov
        .fix
        .as_ref()
        .unwrap()
        .contains("cpu3/cpufreq/scaling_governor"));
    let smt = advice.iter().find(|f| f.id == "smt-sibling").unwrap();
    assert!(smt.message.contains("CPU 1"), "{}", smt.message);

    // Every isolated CPU may carry an RT thread: each one's governor is checked.
    let r = vanilla_dynamic()
        .cpus("0-3", "2-3")
        .file(
            "sys/devices/system/cpu/cpu2/cpufreq/scaling_governor",
            "schedutil",
        )
        .file(
            "sys/devices/system/cpu/cpu3/cpufreq/scaling_governor",
            "performance",
        )
        .file(
            "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor",
            "powersave",
        )
        .detect(&ROOT_LIKE);
    let govs: Vec<String> = r
        .advice()
        .into_iter()
        .filter(|f| f.id == "governor")
        .map(|f| f.message)
        .collect();
    assert_eq!(govs.len(), 1, "{govs:?}");
    assert!(
        govs[0].starts_with("CPU 2 runs the 'schedutil' governor"),
        "{govs:?}"
    );
}

#[test]
fn throttled_and_unthrottled() {
    let r = vanilla_dynamic().detect(&ROOT_LIKE);
    assert_eq!(r.throttling.throttled, Some(true));
    assert_eq!(r.throttling.rt_share(), Some(0.95));
    let f = r
        .advice()
        .into_iter()
        .find(|f| f.id == "rt-throttling")
        .unwrap();
    assert!(f.message.contains("50 ms"), "{}", f.message);

    let r = vanilla_dynamic()
        .file("proc/sys/kernel/sched_rt_runtime_us", "-1")
        .detect(&ROOT_LIKE);
    assert_eq!(r.throttling.throttled, Some(false));
    assert!(!ids(&r).contains(&"rt-throttling"));
}

#[test]
fn cgroup_without_rt_budget_blocks_fifo() {
    let t = vanilla_dynamic()
        .config_gz("CONFIG_RT_GROUP_SCHED=y\nCONFIG_PREEMPT_DYNAMIC=y\n")
        .file(
            "proc/self/cgroup",
            "4:memory:/x\n1:cpu,cpuacct:/machine/job7\n0::/",
        )
        .file(
            "sys/fs/cgroup/cpu,cpuacct/machine/job7/cpu.rt_runtime_us",
            "0",
        );
    let r = t.detect(&ROOT_LIKE);
    assert_eq!(r.throttling.cgroup.as_deref(), Some("/machine/job7"));
    assert_eq!(r.throttling.cgroup_rt_runtime_us, Some(0));
    assert!(ids(&r).contains(&"cgroup-no-rt-budget"));

    // The policy is accepted, but the probe thread never runs: posix must refuse, auto must fall to sim.
    let starved = FakeProbe {
        rt_runs: Some(false),
        ..ROOT_LIKE
    };
    let r = t.detect(&starved);
    assert!(ids(&r).contains(&"rt-thread-starved"));
    let err = flavor::select(&r, Some("posix"), None).unwrap_err();
    assert!(err.to_string().contains("never ran"), "{err}");
    assert!(err.to_string().contains("/machine/job7"), "{err}");
    assert_eq!(flavor::select(&r, None, None).unwrap().flavor, Flavor::Sim);
}

#[test]
fn virtualization_from_dmi_and_cpuinfo() {
    let r = vanilla_dynamic()
        .file("sys/class/dmi/id/sys_vendor", "QEMU")
        .detect(&ROOT_LIKE);
    assert_eq!(r.virtualized, Some(true));
    assert_eq!(r.environment.hypervisor.as_deref(), Some("QEMU"));
    let r = vanilla_dynamic()
        .file(
            "proc/cpuinfo",
            "processor\t: 0\nflags\t\t: fpu vme hypervisor sse\n",
        )
        .detect(&ROOT_LIKE);
    assert_eq!(r.virtualized, Some(true));
    assert!(ids(&r).contains(&"virtualized"));
    let r = vanilla_dynamic()
        .file("proc/cpuinfo", "processor\t: 0\nflags\t\t: fpu vme sse\n")
        .file("sys/class/dmi/id/sys_vendor", "Dell Inc.")
        .detect(&ROOT_LIKE);
    assert_eq!(r.virtualized, Some(false));
    assert_eq!(
        vanilla_dynamic().detect(&ROOT_LIKE).virtualized,
        None,
        "nothing read: unknown"
    );
}

#[test]
fn empty_tree_is_all_unknown_without_panic() {
    let t = Tree::new();
    let r = t.detect(&FakeProbe {
        fifo: None,
        rt_runs: None,
        res_ns: None,
    });
    assert_eq!(r.kernel.release, None);
    assert_eq!(r.kernel.preempt_rt, None);
    assert_eq!(r.kernel.preemption, None);
    assert_eq!(r.cpus.online, None);
    assert_eq!(r.cpus.rt_cpu, None);
    assert_eq!(r.throttling.throttled, None);
    assert_eq!(r.virtualized, None);
    assert!(ids(&r).contains(&"preempt-rt-unknown"));
    let text = r.render_text("sim", &r.advice());
    assert!(text.contains("unknown"));
    // Unknown privileges are not a licence for FIFO.
    assert_eq!(flavor::select(&r, None, None).unwrap().flavor, Flavor::Sim);
}

#[test]
fn unreadable_files_are_unknown() {
    // A directory where a file should be cannot be read as one; neither can invalid UTF-8.
    let t = Tree::new()
        .dir("proc/sys/kernel/osrelease")
        .bytes("proc/sys/kernel/version", &[0xff, 0xfe, 0x00, 0x80])
        .dir("sys/devices/system/cpu/online")
        .dir("proc/config.gz");
    let r = t.detect(&ROOT_LIKE);
    assert_eq!(r.kernel.release, None);
    assert_eq!(r.kernel.version, None);
    assert_eq!(r.kernel.preempt_rt, None);
    assert_eq!(r.cpus.online, None);
}

#[test]
fn garbage_everywhere_never_panics() {
    let paths = [
        "proc/sys/kernel/osrelease",
        "proc/sys/kernel/version",
        "sys/kernel/realtime",
        "proc/config.gz",
        "sys/kernel/debug/sched/preempt",
        "proc/cmdline",
        "proc/sys/kernel/sched_rt_runtime_us",
        "proc/sys/kernel/sched_rt_period_us",
        "proc/self/cgroup",
        "proc/self/status",
        "sys/devices/system/cpu/online",
        "sys/devices/system/cpu/offline",
        "sys/devices/system/cpu/present",
        "sys/devices/system/cpu/isolated",
        "sys/devices/system/cpu/smt/active",
        "sys/devices/system/cpu/cpu0/topology/thread_siblings_list",
        "sys/devices/system/clocksource/clocksource0/current_clocksource",
        "sys/devices/system/clocksource/clocksource0/available_clocksource",
        "sys/kernel/mm/transparent_hugepage/enabled",
        "proc/swaps",
        "proc/meminfo",
        "proc/cpuinfo",
        "sys/class/dmi/id/sys_vendor",
        "sys/hypervisor/type",
        "proc/interrupts",
        "proc/irq/36/smp_affinity_list",
        "proc/irq/36/effective_affinity_list",
        "sys/kernel/debug/irq/irqs/36",
        "proc/1/comm",
        "proc/sys/kernel/timer_migration",
        "proc/sys/kernel/watchdog",
        "proc/sys/kernel/nmi_watchdog",
        "sys/devices/virtual/workqueue/cpumask",
    ];
    let garbage: [&[u8]; 9] = [
        b"",
        b"\n\n\n",
        b"-",
        b"99999999999999999999999999",
        b"0-4294967295",
        b"5-2,,,x",
        b"[[[ ]]] ( ) :::",
        b"\x1f\x8b\x08\x00garbage-gzip",
        &[0xc3, 0x28, 0xa0, 0xa1],
    ];
    for (i, g) in garbage.iter().enumerate() {
        let mut t = Tree::new();
        for p in paths {
            t = t.bytes(p, g);
        }
        let r = t.detect(&ROOT_LIKE);
        let _ = r.advice();
        let _ = r.render_text("posix", &r.advice());
        let _ = serde_json::to_string(&r).unwrap();
        assert!(
            r.cpus.rt_cpu.is_none() || r.cpus.online.is_some(),
            "garbage #{i}"
        );
    }
}

/// Garbage in every file tune and the new checks read, on a tree whose CPUs are known (so the RT CPU
/// is 1 and its files are read): detection, advice and tune's plan survive it.
#[test]
fn garbage_in_tuning_files_never_panics_detect_or_the_tune_plan() {
    let paths = [
        "proc/interrupts",
        "proc/irq/42/smp_affinity_list",
        "proc/irq/default_smp_affinity",
        "sys/devices/virtual/workqueue/cpumask",
        "proc/sys/kernel/timer_migration",
        "proc/cmdline",
        "sys/kernel/mm/transparent_hugepage/enabled",
        "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor",
        "sys/devices/system/cpu/cpu1/cpufreq/scaling_available_governors",
        "sys/devices/system/cpu/cpu1/cpuidle/state3/name",
        "sys/devices/system/cpu/cpu1/cpuidle/state3/latency",
        "sys/devices/system/cpu/cpu1/cpuidle/state3/disable",
        "sys/devices/system/cpu/cpu1/cpuidle/stateX/latency",
    ];
    let garbage: [&[u8]; 6] = [
        b"",
        b"-",
        b"99999999999999999999999999",
        b"5-2,,,x",
        b"[[[ ]]] ( ) ::: isolcpus=,,x nohz_full=9999999",
        &[0xc3, 0x28, 0xa0, 0xa1],
    ];
    for g in garbage {
        let mut t = Tree::new().cpus("0-1", "");
        for p in paths {
            t = t.bytes(p, g);
        }
        let r = t.detect(&ROOT_LIKE);
        assert_eq!(r.cpus.rt_cpu, Some(1));
        let _ = r.render_text("posix", &r.advice());
        let _ = serde_json::to_string(&r).unwrap();
        let root = SysRoot::new(t.path());
        let plan = rtapi::tune::plan(&r, &root, None).unwrap();
        let _ = plan.render("x");
        let _ = rtapi::tune::plan(&r, &root, Some(&[0]));
    }
}

#[test]
fn flag_beats_env_and_env_beats_auto() {
    let r = vanilla_dynamic().detect(&ROOT_LIKE);
    let sel = flavor::select(&r, Some("sim"), Some("posix")).unwrap();
    assert_eq!((sel.flavor, sel.source), (Flavor::Sim, Source::Flag));
    assert!(sel.warnings[0].contains("NOT real time"));
    let sel = flavor::select(&r, None, Some("sim")).unwrap();
    assert_eq!((sel.flavor, sel.source), (Flavor::Sim, Source::Env));
    let sel = flavor::select(&r, None, Some("")).unwrap();
    assert_eq!((sel.flavor, sel.source), (Flavor::Posix, Source::Auto));
}

#[test]
fn forced_flavor_errors_say_what_is_missing() {
    let r = vanilla_dynamic().detect(&ROOT_LIKE);
    let err = flavor::select(&r, Some("rt-preempt"), None).unwrap_err();
    assert!(matches!(
        err,
        FlavorError::Unavailable {
            flavor: Flavor::RtPreempt,
            ..
        }
    ));
    let msg = err.to_string();
    assert!(
        msg.contains("not PREEMPT_RT") && msg.contains("--flavor posix"),
        "{msg}"
    );

    let r = vanilla_dynamic().detect(&UNPRIVILEGED);
    let msg = flavor::select(&r, Some("posix"), None)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("SCHED_FIFO") && msg.contains("setcap cap_sys_nice"),
        "{msg}"
    );
    assert!(msg.contains("rtprio"), "{msg}");
    // The same machine falls back to sim on its own, loudly.
    let sel = flavor::select(&r, None, None).unwrap();
    assert_eq!(sel.flavor, Flavor::Sim);
    assert!(sel.warnings[0].contains("NO REAL-TIME") && sel.warnings[0].contains("setcap"));

    let err = flavor::select(&r, None, Some("xenomai")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown flavor 'xenomai' (from RTAPI_FLAVOR); valid flavors are: rt-preempt, posix, sim"
    );
}

/// A two-CPU machine like the development VM: CPU 1 is the RT CPU, nothing isolated.
const INTERRUPTS: &str = "           CPU0       CPU1
  0:         40          0   IO-APIC   2-edge      timer
 26:          0         14   IO-APIC   4-edge      ttyS0
 36:         12     160000   PCI-MSIX-0000:00:05.0   0-edge      virtio1-req.0
 41:       4156          0   PCI-MSIX-0000:00:04.0   1-edge      virtio3-rx
 42:          0      11864   PCI-MSIX-0000:00:04.0   2-edge      virtio3-tx
 50:          0        999   PCI-MSIX-0000:00:04.0   3-edge      moved-away
NMI:          0          0   Non-maskable interrupts
LOC:    1603906   43454599   Local timer interrupts
ERR:          0
";

fn irq_tree() -> Tree {
    let mut t = vanilla_dynamic()
        .cpus("0-1", "")
        .file("proc/interrupts", INTERRUPTS);
    for n in [0, 26, 36, 41, 42, 50] {
        t = t.file(&format!("proc/irq/{n}/smp_affinity_list"), "0-1");
    }
    t.file("proc/irq/26/effective_affinity_list", "1")
        .file("proc/irq/36/effective_affinity_list", "1")
        .file("proc/irq/42/effective_affinity_list", "1")
        // Moved to CPU 0 after firing on CPU 1: not on the RT CPU any more.
        .file("proc/irq/50/effective_affinity_list", "0")
}

fn finding<'a>(
    advice: &'a [rtapi::detect::Finding],
    id: &str,
    needle: &str,
) -> Option<&'a rtapi::detect::Finding> {
    advice
        .iter()
        .find(|f| f.id == id && f.message.contains(needle))
}

#[test]
fn irqs_firing_on_the_rt_cpu_each_get_a_finding_and_a_fix() {
    let r = irq_tree().detect(&ROOT_LIKE);
    assert_eq!(r.cpus.rt_cpu, Some(1));
    let advice = r.advice();
    let tx = finding(&advice, "irq-on-rt-cpu", "IRQ 42 ").expect("virtio3-tx");
    assert!(
        tx.message.contains("virtio3-tx") && tx.message.contains("11864 times on CPU 1"),
        "{}",
        tx.message
    );
    assert_eq!(
        tx.fix.as_deref(),
        Some("echo 0 > /proc/irq/42/smp_affinity_list")
    );
    assert!(finding(&advice, "irq-on-rt-cpu", "IRQ 26 ").is_some());
    // Managed (guessed from the name, no debugfs): boot parameter, not an echo.
    let req = finding(&advice, "managed-irq-on-rt-cpu", "IRQ 36 ").expect("virtio1-req.0");
    assert!(
        req.message.contains("160000") && req.message.contains("probably"),
        "{}",
        req.message
    );
    assert_eq!(
        req.fix.as_deref(),
        Some("boot with isolcpus=managed_irq,domain,1 (managed IRQs cannot be moved at run time)")
    );
    assert!(finding(&advice, "irq-on-rt-cpu", "IRQ 36 ").is_none());
    // Never on CPU 1, or moved away since: no finding.
    for n in ["IRQ 0 ", "IRQ 41 ", "IRQ 50 "] {
        assert!(!advice.iter().any(|f| f.message.contains(n)), "{n}");
    }
    // Just moved (rtapi tune): smp_affinity_list says CPU 0, the effective affinity follows at the
    // IRQ's next interrupt. Not listed either.
    let moved = irq_tree()
        .file("proc/irq/42/smp_affinity_list", "0")
        .detect(&ROOT_LIKE);
    assert!(finding(&moved.advice(), "irq-on-rt-cpu", "IRQ 42 ").is_none());
    assert!(finding(&moved.advice(), "irq-on-rt-cpu", "IRQ 26 ").is_some());
    let v = serde_json::to_value(&r).unwrap();
    let irqs = v["tuning"]["irqs_on_rt_cpus"].as_array().unwrap();
    let names: Vec<&str> = irqs.iter().map(|i| i["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["virtio1-req.0", "virtio3-tx", "ttyS0"]);
    assert_eq!(irqs[0]["count_on_rt"], 160000);
    assert_eq!(irqs[0]["managed"], "probably-managed");
    assert_eq!(irqs[1]["managed"], "movable");
    assert_eq!(v["tuning"]["rt_cpus"], serde_json::json!([1]));
    let text = r.render_text("posix", &advice);
    assert!(
        text.contains("virtio1-req.0") && text.contains("probably managed"),
        "{text}"
    );
}

#[test]
fn debugfs_decides_whether_an_irq_is_managed() {
    let r = irq_tree()
        .file("sys/kernel/debug/irq/irqs/36", "handler:  handle_edge_irq\ndstate:   0x3760a200\n            IRQD_ACTIVATED\n            IRQD_AFFINITY_MANAGED\n")
        .file("sys/kernel/debug/irq/irqs/42", "handler:  handle_edge_irq\ndstate:   0x00400000\n            IRQD_ACTIVATED\n")
        .detect(&ROOT_LIKE);
    let advice = r.advice();
    let req = finding(&advice, "managed-irq-on-rt-cpu", "IRQ 36 ").unwrap();
    assert!(
        req.message.contains("IRQD_AFFINITY_MANAGED"),
        "{}",
        req.message
    );
    assert!(finding(&advice, "irq-on-rt-cpu", "IRQ 42 ").is_some());
    // debugfs says a name that looks managed is not: it is movable.
    let r = irq_tree()
        .file(
            "sys/kernel/debug/irq/irqs/36",
            "dstate: 0x0\n IRQD_ACTIVATED\n",
        )
        .detect(&ROOT_LIKE);
    assert!(finding(&r.advice(), "irq-on-rt-cpu", "IRQ 36 ").is_some());
}

#[test]
fn isolated_cpus_count_as_rt_cpus_and_the_fix_leaves_them_out() {
    let r = irq_tree()
        .cpus("0-3", "2-3")
        .file(
            "proc/interrupts",
            "  CPU0 CPU1 CPU2 CPU3\n 42: 1 2 30 40 PCI-MSIX-0000:00:04.0 2-edge virtio3-tx\n",
        )
        .file("proc/irq/42/smp_affinity_list", "0-3")
        .file("proc/irq/42/effective_affinity_list", "2")
        .detect(&ROOT_LIKE);
    assert_eq!(r.cpus.rt_cpu, Some(3));
    let advice = r.advice();
    let f = finding(&advice, "irq-on-rt-cpu", "IRQ 42 ").unwrap();
    assert!(
        f.message.contains("70 times on RT CPUs 2-3"),
        "{}",
        f.message
    );
    assert_eq!(
        f.fix.as_deref(),
        Some("echo 0-1 > /proc/irq/42/smp_affinity_list")
    );
}

#[test]
fn no_interrupts_file_or_no_irq_on_the_rt_cpu_says_nothing() {
    let r = vanilla_dynamic().detect(&ROOT_LIKE);
    let v = serde_json::to_value(&r).unwrap();
    assert!(v["tuning"]["irqs_on_rt_cpus"].is_null());
    let r = irq_tree()
        .file(
            "proc/interrupts",
            "   CPU0 CPU1\n 41: 4156 0 PCI-MSIX 1-edge virtio3-rx\n",
        )
        .detect(&ROOT_LIKE);
    assert!(
        !ids(&r).iter().any(|id| id.contains("irq")),
        "{:?}",
        ids(&r)
    );
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(v["tuning"]["irqs_on_rt_cpus"], serde_json::json!([]));
    assert!(r
        .render_text("posix", &[])
        .contains("IRQs firing on RT CPUs 1: none"));
}

#[test]
fn irqbalance_running_or_not() {
    let t = irq_tree()
        .file("proc/1/comm", "systemd")
        .file("proc/812/comm", "irqbalance")
        .file("proc/self/comm", "irqbalance")
        .dir("proc/sys");
    let r = t.detect(&ROOT_LIKE);
    let advice = r.advice();
    let f = advice.iter().find(|f| f.id == "irqbalance").unwrap();
    assert!(f.message.contains("PID 812"), "{}", f.message);
    assert!(f
        .fix
        .as_deref()
        .unwrap()
        .contains("IRQBALANCE_BANNED_CPULIST=1"));
    let r = irq_tree().file("proc/1/comm", "systemd").detect(&ROOT_LIKE);
    assert!(!ids(&r).contains(&"irqbalance"));
}

#[test]
fn sysctls_thp_swap_and_workqueue_findings() {
    let on = irq_tree()
        .file(
            "sys/kernel/mm/transparent_hugepage/enabled",
            "[always] madvise never",
        )
        .file(
            "proc/swaps",
            "Filename\tType\tSize\tUsed\tPriority\n/swapfile file 2097148 0 -2\n",
        )
        .file("proc/meminfo", "SwapTotal:       2097148 kB\n")
        .file("proc/sys/kernel/timer_migration", "1")
        .file("proc/sys/kernel/watchdog", "1")
        .file("proc/sys/kernel/nmi_watchdog", "1")
        .file("sys/devices/virtual/workqueue/cpumask", "3")
        .detect(&ROOT_LIKE);
    let advice = on.advice();
    let get = |id: &str| {
        advice
            .iter()
            .find(|f| f.id == id)
            .unwrap_or_else(|| panic!("{id}"))
    };
    assert_eq!(get("thp-always").severity, Severity::Warn);
    assert!(get("thp-always")
        .fix
        .as_deref()
        .unwrap()
        .contains("echo madvise > /sys/kernel/mm/transparent_hugepage/enabled"));
    assert!(get("swap-active").message.contains("2097148 KiB"));
    assert_eq!(
        get("swap-active").fix.as_deref(),
        Some("swapoff -a, and remove the swap entries from /etc/fstab")
    );
    assert_eq!(
        get("timer-migration").fix.as_deref(),
        Some("sysctl -w kernel.timer_migration=0")
    );
    assert!(get("soft-watchdog")
        .fix
        .as_deref()
        .unwrap()
        .starts_with("sysctl -w kernel.watchdog=0"));
    assert_eq!(get("nmi-watchdog").severity, Severity::Warn);
    assert!(get("nmi-watchdog")
        .fix
        .as_deref()
        .unwrap()
        .starts_with("sysctl -w kernel.nmi_watchdog=0"));
    let wq = get("workqueue-cpumask");
    assert!(
        wq.message.contains("CPU 1") && wq.message.contains("cpumask 0-1"),
        "{}",
        wq.message
    );
    assert_eq!(
        wq.fix.as_deref(),
        Some("echo 1 > /sys/devices/virtual/workqueue/cpumask")
    );

    let off = irq_tree()
        .file(
            "sys/kernel/mm/transparent_hugepage/enabled",
            "always [madvise] never",
        )
        .file("proc/swaps", "Filename\tType\tSize\tUsed\tPriority\n")
        .file("proc/sys/kernel/timer_migration", "0")
        .file("proc/sys/kernel/watchdog", "0")
        .file("proc/sys/kernel/nmi_watchdog", "0")
        .file("sys/devices/virtual/workqueue/cpumask", "1")
        .detect(&ROOT_LIKE);
    let garbled = irq_tree()
        .file("sys/kernel/mm/transparent_hugepage/enabled", "always")
        .file("proc/sys/kernel/timer_migration", "yes")
        .file("proc/sys/kernel/watchdog", "2")
        .file("proc/sys/kernel/nmi_watchdog", "")
        .file("sys/devices/virtual/workqueue/cpumask", "0-1")
        .detect(&ROOT_LIKE);
    for r in [off, garbled] {
        let ids = ids(&r);
        for id in [
            "thp-always",
            "swap-active",
            "timer-migration",
            "soft-watchdog",
            "nmi-watchdog",
            "workqueue-cpumask",
        ] {
            assert!(!ids.contains(&id), "{id} in {ids:?}");
        }
    }
}

#[test]
fn workqueue_mask_wider_than_32_cpus() {
    let r = irq_tree()
        .cpus("0-39", "39")
        .file("sys/devices/virtual/workqueue/cpumask", "ff,ffffffff")
        .detect(&ROOT_LIKE);
    let f = r
        .advice()
        .into_iter()
        .find(|f| f.id == "workqueue-cpumask")
        .unwrap();
    assert!(f.message.contains("CPU 39"), "{}", f.message);
    assert_eq!(
        f.fix.as_deref(),
        Some("echo 7f,ffffffff > /sys/devices/virtual/workqueue/cpumask")
    );
}

#[test]
fn managed_irq_already_isolated_gets_no_boot_parameter_fix() {
    let r = irq_tree()
        .file("proc/cmdline", "quiet isolcpus=managed_irq,domain,1")
        .cpus("0-1", "1")
        .detect(&ROOT_LIKE);
    let advice = r.advice();
    let req = finding(&advice, "managed-irq-on-rt-cpu", "IRQ 36 ").unwrap();
    assert!(req.message.contains("already given"), "{}", req.message);
    assert!(req.fix.as_deref().unwrap().starts_with("no run-time fix"));
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(v["tuning"]["managed_irq_isolation"], true);
}

/// A PREEMPT_RT kernel with CONFIG_NO_HZ_FULL, four CPUs, the given isolated CPUs and command line.
fn rt_tree(isolated: &str, cmdline: &str) -> Tree {
    Tree::new()
        .file("proc/sys/kernel/osrelease", "6.12.9-rt-amd64")
        .file(
            "proc/sys/kernel/version",
            "#1 SMP PREEMPT_RT Debian 6.12.9-1 (2025-01-10)",
        )
        .config_gz("CONFIG_PREEMPT_RT=y\nCONFIG_HZ=1000\nCONFIG_NO_HZ_FULL=y\n")
        .file("proc/cmdline", cmdline)
        .cpus("0-3", isolated)
}

fn idle_state(t: Tree, cpu: usize, k: usize, name: &str, latency: &str, disable: &str) -> Tree {
    let d = format!("sys/devices/system/cpu/cpu{cpu}/cpuidle/state{k}");
    t.file(&format!("{d}/name"), name)
        .file(&format!("{d}/latency"), latency)
        .file(&format!("{d}/disable"), disable)
}

fn idle_tree() -> Tree {
    let mut t = rt_tree("3", "isolcpus=managed_irq,domain,3 nohz_full=3 rcu_nocbs=3");
    for (k, name, lat, dis) in [
        (0, "POLL", "0", "0"),
        (1, "C1", "2", "0"),
        (2, "C1E", "10", "0"),
        (3, "C6", "133", "1"),
        (4, "C10", "890", "0"),
    ] {
        t = idle_state(t, 3, k, name, lat, dis);
    }
    // CPU 0 is not an RT CPU: its deep states are not this check's business.
    idle_state(t, 0, 3, "C6", "133", "0")
}

#[test]
fn slow_idle_states_of_the_rt_cpu_are_a_finding_with_both_fixes() {
    let r = idle_tree().detect(&ROOT_LIKE);
    assert_eq!(r.cpus.rt_cpu, Some(3));
    let advice = r.advice();
    let f = advice
        .iter()
        .find(|f| f.id == "deep-idle-states")
        .expect("deep-idle-states");
    // This process may hold /dev/cpu_dma_latency: runs are covered, so it is worth knowing only.
    assert_eq!(f.severity, Severity::Info);
    assert!(
        f.message.contains("cpu3 C1E (10 µs), cpu3 C10 (890 µs)"),
        "{}",
        f.message
    );
    assert!(
        f.message.contains("/dev/cpu_dma_latency at 0"),
        "{}",
        f.message
    );
    // C1 (2 µs) is fast enough, C6 is already disabled, CPU 0 is not an RT CPU.
    for absent in ["C1 ", "C6", "cpu0"] {
        assert!(!f.message.contains(absent), "{absent}: {}", f.message);
    }
    let fix = f.fix.as_deref().unwrap();
    assert!(
        fix.contains("echo 1 > /sys/devices/system/cpu/cpu3/cpuidle/state2/disable; echo 1 > /sys/devices/system/cpu/cpu3/cpuidle/state4/disable"),
        "{fix}"
    );
    assert!(
        fix.contains("processor.max_cstate=1 intel_idle.max_cstate=0") && fix.contains("idle=poll"),
        "{fix}"
    );
    let v = serde_json::to_value(&r).unwrap();
    let states = v["tuning"]["idle_states"].as_array().unwrap();
    assert_eq!(states.len(), 5, "only the RT CPU's states: {states:?}");
    assert_eq!(states[4]["name"], "C10");
    assert_eq!(states[4]["latency_us"], 890);
    assert_eq!(states[3]["disabled"], true);
    let text = r.render_text("rt-preempt", &advice);
    assert!(text.contains("C10") && text.contains("(slow)"), "{text}");

    // Without /dev/cpu_dma_latency nothing keeps the CPU out of them while running: a warning.
    let r = idle_tree().detect(&UNPRIVILEGED);
    let f = r
        .advice()
        .into_iter()
        .find(|f| f.id == "deep-idle-states")
        .unwrap();
    assert_eq!(f.severity, Severity::Warn);
    assert!(f.message.contains("not writable"), "{}", f.message);
}

#[test]
fn no_cpuidle_or_only_fast_states_say_nothing() {
    let r = rt_tree("3", "isolcpus=3 nohz_full=3 rcu_nocbs=3").detect(&ROOT_LIKE);
    let v = serde_json::to_value(&r).unwrap();
    assert!(v["tuning"]["idle_states"].is_null());
    assert!(!ids(&r).contains(&"deep-idle-states"));
    assert!(r
        .render_text("rt-preempt", &[])
        .contains("no cpuidle on RT CPUs 3"));
    // This VM's states (POLL 0 µs, haltpoll 1 µs) and a garbled latency are not findings.
    let t = idle_state(
        rt_tree("3", "isolcpus=3 nohz_full=3 rcu_nocbs=3"),
        3,
        0,
        "POLL",
        "0",
        "0",
    );
    let t = idle_state(t, 3, 1, "haltpoll idle", "1", "0");
    let t = idle_state(t, 3, 2, "C6", "lots", "0");
    let r = t.detect(&ROOT_LIKE);
    assert!(!ids(&r).contains(&"deep-idle-states"), "{:?}", ids(&r));
    let v = serde_json::to_value(&r).unwrap();
    assert!(v["tuning"]["idle_states"][2]["latency_us"].is_null());
}

const ISOLATION_IDS: [&str; 6] = [
    "isolcpus-without-domain",
    "rt-cpu-not-in-isolcpus",
    "nohz-full-not-isolated",
    "isolated-without-nohz-full",
    "isolated-without-rcu-nocbs",
    "rcu-nocbs-without-nohz-full-cpus",
];

fn isolation_ids(r: &SystemReport) -> Vec<&'static str> {
    ids(r)
        .into_iter()
        .filter(|id| ISOLATION_IDS.contains(id))
        .collect()
}

fn fix_of(r: &SystemReport, id: &str) -> String {
    r.advice()
        .into_iter()
        .find(|f| f.id == id)
        .unwrap_or_else(|| panic!("no {id}"))
        .fix
        .unwrap()
}

#[test]
fn isolcpus_nohz_full_and_rcu_nocbs_must_agree() {
    // All three on the same CPUs: nothing to say.
    let ok = rt_tree(
        "2-3",
        "isolcpus=managed_irq,domain,2-3 nohz_full=2-3 rcu_nocbs=2-3",
    )
    .detect(&ROOT_LIKE);
    assert!(isolation_ids(&ok).is_empty(), "{:?}", isolation_ids(&ok));
    // nohz_full implies rcu_nocbs for its CPUs: leaving rcu_nocbs out entirely is fine.
    let implied = rt_tree("2-3", "isolcpus=2-3 nohz_full=2-3").detect(&ROOT_LIKE);
    assert!(
        isolation_ids(&implied).is_empty(),
        "{:?}",
        isolation_ids(&implied)
    );

    // isolcpus alone: the tick and RCU callbacks stay on the isolated CPUs.
    let alone = rt_tree("2-3", "quiet isolcpus=2-3").detect(&ROOT_LIKE);
    assert_eq!(
        isolation_ids(&alone),
        ["isolated-without-nohz-full", "isolated-without-rcu-nocbs"]
    );
    assert_eq!(
        fix_of(&alone, "isolated-without-nohz-full"),
        "boot with nohz_full=2-3"
    );
    assert_eq!(
        fix_of(&alone, "isolated-without-rcu-nocbs"),
        "boot with rcu_nocbs=2-3"
    );
    let msg = alone
        .advice()
        .into_iter()
        .find(|f| f.id == "isolated-without-nohz-full")
        .unwrap()
        .message;
    assert!(msg.contains("1000 per second"), "{msg}");

    // nohz_full wider than the isolation, rcu_nocbs narrower than nohz_full.
    let wide = rt_tree("2-3", "isolcpus=domain,2-3 nohz_full=1-3 rcu_nocbs=2").detect(&ROOT_LIKE);
    assert_eq!(
        isolation_ids(&wide),
        ["nohz-full-not-isolated", "rcu-nocbs-without-nohz-full-cpus"]
    );
    assert_eq!(
        fix_of(&wide, "nohz-full-not-isolated"),
        "boot with isolcpus=managed_irq,domain,1-3"
    );
    assert_eq!(
        fix_of(&wide, "rcu-nocbs-without-nohz-full-cpus"),
        "boot with rcu_nocbs=1-3"
    );

    // Flags without `domain`: the kernel isolates nothing from the scheduler (sysfs isolated is
    // empty), and the RT CPU (highest online) is not the one named.
    let no_domain = rt_tree("", "isolcpus=managed_irq,2 nohz_full=2").detect(&ROOT_LIKE);
    assert_eq!(no_domain.cpus.rt_cpu, Some(3));
    let found = isolation_ids(&no_domain);
    for id in [
        "isolcpus-without-domain",
        "rt-cpu-not-in-isolcpus",
        "nohz-full-not-isolated",
    ] {
        assert!(found.contains(&id), "{id} missing from {found:?}");
    }
    assert_eq!(
        fix_of(&no_domain, "isolcpus-without-domain"),
        "boot with isolcpus=managed_irq,domain,2 instead"
    );
    assert!(fix_of(&no_domain, "rt-cpu-not-in-isolcpus")
        .starts_with("boot with isolcpus=managed_irq,domain,3 nohz_full=3 rcu_nocbs=3"));
    let v = serde_json::to_value(&no_domain).unwrap();
    assert_eq!(
        v["tuning"]["isolcpus_flags"],
        serde_json::json!(["managed_irq"])
    );

    // A kernel without CONFIG_NO_HZ_FULL: no nohz_full advice (it would do nothing), and no CPU
    // gets RCU offloading implied by a nohz_full= that is ignored.
    let vanilla = vanilla_dynamic()
        .cpus("0-3", "2-3")
        .file("proc/cmdline", "isolcpus=2-3 nohz_full=2-3")
        .detect(&ROOT_LIKE);
    assert_eq!(isolation_ids(&vanilla), ["isolated-without-rcu-nocbs"]);
    assert!(ids(&vanilla).contains(&"nohz-full-ignored"));
}
