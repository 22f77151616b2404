//! The kernel: release, PREEMPT_RT with its evidence, preemption model, tick, timers, clocksource, and
//! co-kernels we recognise but do not run on.

use super::kconfig::KernelConfig;
use super::sysroot::{Reading, SysRoot};
use serde::Serialize;

/// The preemption model the kernel runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Preemption {
    /// `CONFIG_PREEMPT_NONE` (server): no forced preemption of kernel code.
    None,
    /// `CONFIG_PREEMPT_VOLUNTARY` (desktop): preemption only at explicit points.
    Voluntary,
    /// `CONFIG_PREEMPT` (low-latency desktop): kernel code is preemptible outside critical sections.
    Full,
    /// `CONFIG_PREEMPT_LAZY` (6.13+): full preemption for RT tasks, deferred for others.
    Lazy,
    /// `CONFIG_PREEMPT_RT`: fully preemptible kernel (sleeping spinlocks, threaded IRQs).
    Rt,
}

impl Preemption {
    /// The lowercase name used in `/sys/kernel/debug/sched/preempt`, `preempt=` and the JSON
    /// (`none`, `voluntary`, `full`, `lazy`, `rt`).
    pub fn name(self) -> &'static str {
        match self {
            Preemption::None => "none",
            Preemption::Voluntary => "voluntary",
            Preemption::Full => "full",
            Preemption::Lazy => "lazy",
            Preemption::Rt => "rt",
        }
    }

    fn from_name(s: &str) -> Option<Preemption> {
        Some(match s {
            "none" => Preemption::None,
            "voluntary" => Preemption::Voluntary,
            "full" => Preemption::Full,
            "lazy" => Preemption::Lazy,
            "rt" => Preemption::Rt,
            _ => return None,
        })
    }
}

/// A real-time co-kernel (dual-kernel system). Detected and reported; rtapi does not run on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CoKernel {
    /// Xenomai (Cobalt core), seen as `/proc/xenomai`.
    Xenomai,
    /// EVL (Xenomai 4), seen as `/dev/evl`.
    Evl,
    /// RTAI, seen as `/proc/rtai` or a release containing `-rtai`.
    Rtai,
}

/// What the running kernel is and how it schedules. The `kernel` object of `rtapi detect --json`;
/// `None` wherever nothing could be read to decide (never a guess).
#[derive(Debug, Clone, Serialize)]
pub struct KernelInfo {
    /// `uname -r`, e.g. `6.12.0-rt5`.
    pub release: Option<String>,
    /// `uname -v`, e.g. `#1 SMP PREEMPT_RT Tue …`.
    pub version: Option<String>,
    /// Whether the kernel is PREEMPT_RT; `None` when nothing could be read to decide.
    pub preempt_rt: Option<bool>,
    /// Each thing that was looked at and what it said, so a wrong answer can be traced.
    pub preempt_rt_evidence: Vec<String>,
    /// The preemption model in force, as far as it can be known.
    pub preemption: Option<Preemption>,
    /// Where `preemption` came from.
    pub preemption_source: String,
    /// PREEMPT_DYNAMIC: the model can be chosen at boot (`preempt=`) or at run time (debugfs).
    pub preempt_dynamic: bool,
    /// Where the kernel config was read from, if anywhere.
    pub(crate) config_source: Option<String>,
    /// CONFIG_HZ.
    pub hz: Option<u32>,
    /// CONFIG_NO_HZ_FULL=y (needed for `nohz_full=` to mean anything).
    pub no_hz_full: Option<bool>,
    /// Resolution of CLOCK_MONOTONIC in ns; 1 means high-resolution timers are active.
    pub(crate) clock_resolution_ns: Option<u64>,
    pub(crate) high_res_timers: Option<bool>,
    pub(crate) clocksource: Option<String>,
    pub(crate) clocksources_available: Vec<String>,
    /// CONFIG_RT_GROUP_SCHED=y: RT tasks in a cgroup need that cgroup's own RT budget.
    pub(crate) rt_group_sched: Option<bool>,
    /// A real-time co-kernel found beside Linux; `None` when there is none.
    pub co_kernel: Option<CoKernel>,
}

/// Reads the kernel facts. `clock_resolution_ns` is a live probe (it cannot come from files).
pub(crate) fn detect(root: &SysRoot, clock_resolution_ns: Option<u64>) -> KernelInfo {
    let release = root
        .read("proc/sys/kernel/osrelease")
        .text()
        .map(str::to_string);
    let version = root
        .read("proc/sys/kernel/version")
        .text()
        .map(str::to_string);
    let config = KernelConfig::load(root, release.as_deref());

    let (preempt_rt, preempt_rt_evidence) = preempt_rt(root, version.as_deref(), config.as_ref());
    let preempt_dynamic = version
        .as_deref()
        .is_some_and(|v| v.contains("PREEMPT_DYNAMIC"))
        || config
            .as_ref()
            .is_some_and(|c| c.enabled("CONFIG_PREEMPT_DYNAMIC"));
    let (preemption, preemption_source) = preemption(
        root,
        preempt_rt,
        preempt_dynamic,
        version.as_deref(),
        config.as_ref(),
    );

    let clocksource = root
        .read("sys/devices/system/clocksource/clocksource0/current_clocksource")
        .text()
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    let clocksources_available = root
        .read("sys/devices/system/clocksource/clocksource0/available_clocksource")
        .text()
        .map(|s| s.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default();

    let co_kernel = if root.exists("proc/xenomai") {
        Some(CoKernel::Xenomai)
    } else if root.exists("dev/evl") {
        Some(CoKernel::Evl)
    } else if release.as_deref().is_some_and(|r| r.contains("-rtai")) || root.exists("proc/rtai") {
        Some(CoKernel::Rtai)
    } else {
        None
    };

    KernelInfo {
        hz: config
            .as_ref()
            .and_then(|c| c.get("CONFIG_HZ"))
            .and_then(|v| v.parse().ok()),
        no_hz_full: config.as_ref().map(|c| c.enabled("CONFIG_NO_HZ_FULL")),
        rt_group_sched: config.as_ref().map(|c| c.enabled("CONFIG_RT_GROUP_SCHED")),
        config_source: config.map(|c| c.source),
        high_res_timers: clock_resolution_ns.map(|ns| ns <= 1_000),
        clock_resolution_ns,
        release,
        version,
        preempt_rt,
        preempt_rt_evidence,
        preemption,
        preemption_source,
        preempt_dynamic,
        clocksource,
        clocksources_available,
        co_kernel,
    }
}

/// PREEMPT_RT is decided from three independent sources. Any positive one wins: mainline RT (6.12+)
/// has no `/sys/kernel/realtime`, and a distribution may ship no config, but the version string of every
/// RT build says `PREEMPT_RT` (older patch sets said `PREEMPT RT`).
fn preempt_rt(
    root: &SysRoot,
    version: Option<&str>,
    config: Option<&KernelConfig>,
) -> (Option<bool>, Vec<String>) {
    let mut evidence = Vec::new();
    let mut yes = false;
    let mut known = false;

    match version {
        Some(v) if v.contains("PREEMPT_RT") || v.contains("PREEMPT RT") => {
            yes = true;
            known = true;
            evidence.push("kernel version string says PREEMPT_RT".to_string());
        }
        Some(_) => {
            known = true;
            evidence.push("kernel version string has no PREEMPT_RT".to_string());
        }
        None => evidence.push("kernel version string unreadable".to_string()),
    }

    match root.read("sys/kernel/realtime") {
        Reading::Text(t) if t == "1" => {
            yes = true;
            known = true;
            evidence.push("/sys/kernel/realtime = 1".to_string());
        }
        Reading::Text(t) => evidence.push(format!("/sys/kernel/realtime = {t:?} (not 1)")),
        Reading::Missing => {
            evidence.push("/sys/kernel/realtime absent (normal for mainline RT)".to_string())
        }
        Reading::Unreadable(e) => evidence.push(format!("/sys/kernel/realtime unreadable: {e}")),
    }

    match config {
        // Out-of-tree RT patch sets before 5.3 called the option CONFIG_PREEMPT_RT_FULL.
        Some(c) if c.enabled("CONFIG_PREEMPT_RT") || c.enabled("CONFIG_PREEMPT_RT_FULL") => {
            yes = true;
            known = true;
            let opt = if c.enabled("CONFIG_PREEMPT_RT") {
                "CONFIG_PREEMPT_RT"
            } else {
                "CONFIG_PREEMPT_RT_FULL"
            };
            evidence.push(format!("{opt}=y in {}", c.source));
        }
        Some(c) => {
            known = true;
            evidence.push(format!("CONFIG_PREEMPT_RT not set in {}", c.source));
        }
        None => {
            evidence.push("kernel config not found (/proc/config.gz, /boot/config-*)".to_string())
        }
    }

    (known.then_some(yes), evidence)
}

/// The preemption model: debugfs tells the live dynamic mode when readable (`none voluntary (full) lazy`);
/// else a `preempt=` boot argument on a dynamic kernel; else the config's build-time choice; else the
/// version string's `PREEMPT`/`PREEMPT_LAZY` words.
fn preemption(
    root: &SysRoot,
    preempt_rt: Option<bool>,
    dynamic: bool,
    version: Option<&str>,
    config: Option<&KernelConfig>,
) -> (Option<Preemption>, String) {
    if preempt_rt == Some(true) {
        return (Some(Preemption::Rt), "PREEMPT_RT kernel".to_string());
    }
    if let Some(text) = root.read("sys/kernel/debug/sched/preempt").text() {
        let current = text
            .split_whitespace()
            .find_map(|w| w.strip_prefix('(').and_then(|w| w.strip_suffix(')')));
        if let Some(p) = current.and_then(Preemption::from_name) {
            return (Some(p), "/sys/kernel/debug/sched/preempt".to_string());
        }
    }
    if dynamic {
        let arg = root.read("proc/cmdline").text().and_then(|c| {
            c.split_whitespace()
                .find_map(|w| w.strip_prefix("preempt="))
                .and_then(Preemption::from_name)
        });
        if let Some(p) = arg {
            return (Some(p), "preempt= on the kernel command line".to_string());
        }
    }
    if let Some(c) = config {
        let chosen = [
            ("CONFIG_PREEMPT_LAZY", Preemption::Lazy),
            ("CONFIG_PREEMPT", Preemption::Full),
            ("CONFIG_PREEMPT_VOLUNTARY", Preemption::Voluntary),
            ("CONFIG_PREEMPT_NONE", Preemption::None),
        ]
        .into_iter()
        .find(|(opt, _)| c.enabled(opt));
        if let Some((opt, p)) = chosen {
            let note = if dynamic {
                " (boot default; debugfs not readable)"
            } else {
                ""
            };
            return (Some(p), format!("{opt}=y in {}{note}", c.source));
        }
    }
    if let Some(v) = version {
        let words: Vec<&str> = v.split_whitespace().collect();
        if words.contains(&"PREEMPT_LAZY") {
            return (Some(Preemption::Lazy), "kernel version string".to_string());
        }
        if words.contains(&"PREEMPT") && !dynamic {
            return (Some(Preemption::Full), "kernel version string".to_string());
        }
    }
    (
        None,
        "unknown: no debugfs, no preempt= argument, no kernel config".to_string(),
    )
}
