//! Detection: what this machine is and what this process may do, gathered once at start into a
//! [`SystemReport`]. Files are read through a [`SysRoot`] (fixture trees in tests, `--sysroot DIR` on the
//! command line); things only trying can tell come from a [`Probe`].
//!
//! Unknowns stay unknown (`None`, shown as "unknown"): a missing, unreadable or garbled file never
//! becomes a guess and never a panic.

mod advice;
mod cpus;
mod environment;
pub mod ethtool;
mod interrupts;
mod kconfig;
mod kernel;
pub mod linuxcnc;
pub mod nic;
mod probe;
mod render;
pub mod route;
mod sysroot;
mod throttling;
mod tuning;

pub(crate) use advice::isolation_params;
pub use advice::{Finding, Severity};
pub use cpus::Cpus;
pub use environment::Environment;
pub(crate) use interrupts::{parse_interrupts, parse_softirqs, IrqLine, SoftirqLine};
pub use kernel::{CoKernel, KernelInfo, Preemption};
pub use probe::{Limit, LiveProbe, Privileges, Probe};
pub use sysroot::SysRoot;
pub use throttling::Throttling;
pub(crate) use tuning::{
    format_hex_mask, idle_states as idle_states_of, movability, parse_hex_mask, Movability,
};

use serde::Serialize;

/// `CONFIG_HZ` of the running kernel (from `/proc/config.gz` or `/boot/config-<release>`), if
/// readable: the tick on which, among others, CPU-clock timers are checked.
pub(crate) fn kernel_hz() -> Option<u32> {
    let root = SysRoot::default();
    let release = root
        .read("proc/sys/kernel/osrelease")
        .text()
        .map(str::to_string);
    kconfig::KernelConfig::load(&root, release.as_deref())?
        .get("CONFIG_HZ")?
        .parse()
        .ok()
}

/// Everything detection found. Serialises to the `rtapi detect --json` object (keys documented in the
/// README); `flavor` and `advice` are filled in by the caller once the flavor is chosen.
#[derive(Debug, Clone, Serialize)]
pub struct SystemReport {
    pub(crate) sysroot: String,
    /// The kernel: release, PREEMPT_RT and its evidence, preemption model, timers.
    pub kernel: KernelInfo,
    /// What this process may do (SCHED_FIFO, memory locking), proven by live probes.
    pub privileges: Privileges,
    /// RT throttling budgets, global and of this process's cgroup.
    pub throttling: Throttling,
    /// Online, isolated and allowed CPUs, and the CPU chosen for RT threads.
    pub cpus: Cpus,
    /// Virtualization, transparent hugepages and swap.
    pub environment: Environment,
    /// The rest of the tuning checklist: IRQs on the RT CPUs, irqbalance, timer migration, watchdogs,
    /// workqueue CPU mask, idle states of the RT CPUs, `isolcpus=` flags.
    pub(crate) tuning: tuning::Tuning,
    /// Shortcut of `environment.virtualized`, the fact users ask about first.
    pub virtualized: Option<bool>,
    /// The NIC to a Mesa Ethernet card, when detect was given the card's address
    /// ([`SystemReport::detect_board`]); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub board_nic: Option<nic::BoardNic>,
    /// The LinuxCNC installed (its version, what rtapi's master does with it, whether its own
    /// `rtapi_app` runs realtime here); absent when none is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub linuxcnc: Option<linuxcnc::Installed>,
}

impl SystemReport {
    /// Runs the whole detection. The probes describe this process, so against a fixture root they are
    /// normally a fake: live privileges of this machine mean nothing for a fixture's kernel.
    pub fn detect(root: &SysRoot, probe: &dyn Probe) -> SystemReport {
        let kernel = kernel::detect(root, probe.clock_resolution_ns());
        let cpus = cpus::detect(root);
        let privileges = probe.privileges();
        let rt_runs = if privileges.sched_fifo == Some(true) {
            probe.rt_thread_runs(cpus.rt_cpu)
        } else {
            None
        };
        let environment = environment::detect(root);
        let tuning = tuning::detect(root, cpus.rt_cpu, &cpus.isolated);
        let force = std::env::var("LINUXCNC_FORCE_REALTIME").ok();
        let linuxcnc = linuxcnc::detect(root, kernel.version.as_deref(), force.as_deref());
        SystemReport {
            linuxcnc,
            sysroot: root.root().display().to_string(),
            throttling: throttling::detect(root, rt_runs),
            virtualized: environment.virtualized,
            kernel,
            privileges,
            cpus,
            environment,
            tuning,
            board_nic: None,
        }
    }

    /// Adds the NIC to the Mesa card at `address` (`rtapi detect --board`), checked against this
    /// report's RT CPUs. Fails when no directly connected route leads there.
    pub fn detect_board(
        &mut self,
        root: &SysRoot,
        ethtool: &dyn ethtool::Ethtool,
        address: std::net::Ipv4Addr,
    ) -> Result<(), route::RouteError> {
        self.board_nic = Some(nic::detect(root, ethtool, address, &self.tuning.rt_cpus)?);
        Ok(())
    }

    /// Detection of the live system with live probes.
    pub fn detect_live() -> SystemReport {
        Self::detect(&SysRoot::default(), &LiveProbe)
    }

    /// The kernel-level findings with their fixes, worst first (each a [`Finding`]).
    pub fn advice(&self) -> Vec<Finding> {
        advice::findings(self)
    }

    /// The human-readable report, grouped as the JSON is.
    pub fn render_text(&self, flavor: &str, advice: &[Finding]) -> String {
        render::text(self, flavor, advice)
    }
}
