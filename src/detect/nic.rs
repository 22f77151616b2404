//! The NIC that carries a Mesa Ethernet card (`rtapi detect --board ADDR`): which interface routes to
//! the card, its driver and link, its interrupt coalescing and energy-efficient Ethernet, and where
//! its IRQs may run — with the findings that say what to change.
//!
//! hm2_eth reads the card once per servo period and waits for the reply; a reply later than about
//! 80 % of the period is LinuxCNC's `error finishing read`. What delays a reply on the host side is
//! the NIC: coalescing holds the RX interrupt back (rx-usecs), EEE lets the link sleep between
//! packets, and an IRQ in the wrong place defers the packet's processing.
//!
//! **The IRQ rule** ([`IRQ_RULE`]): the NIC's IRQs belong off the RT CPUs, on a housekeeping CPU.
//! hm2_eth waits for the reply in a loop on its SCHED_FIFO thread on the RT CPU. A NIC IRQ on that
//! CPU preempts the loop only briefly, but the NET_RX softirq it raises may be deferred to
//! `ksoftirqd` on that CPU, a SCHED_OTHER thread that cannot run while the FIFO thread spins: the
//! packet is not queued to the socket until the spin gives up (a late reply). With the IRQ on
//! another CPU, the softirq runs there and the spinning `recv` sees the packet as soon as it is
//! queued. This is the rule rtapi implements (detect reports, tune applies), from how the kernel
//! runs softirqs (raised on the CPU that took the IRQ; under load, or always on PREEMPT_RT, in a
//! thread of that CPU) and hm2_eth's waiting; measurement on a given machine may say otherwise
//! (`rtapi latency-test --board` measures it), and then `--cpu` or a hand-set affinity wins.

use super::ethtool::{Coalesce, Eee, Ethtool, EthtoolError};
use super::route::{self, RouteEntry, RouteError};
use super::tuning::{movability, Movability};
use super::{Finding, Severity, SysRoot};
use crate::rt::cpulist;
use serde::Serialize;
use std::net::Ipv4Addr;

/// The IRQ placement rule in one sentence, as reports and plans print it.
pub const IRQ_RULE: &str = "the NIC's IRQs go off the RT CPUs: hm2_eth spins at SCHED_FIFO on the RT CPU waiting for the reply, and a NET_RX softirq raised there may be deferred to ksoftirqd, which cannot run while the spin does (a late reply); raised on a housekeeping CPU it runs at once and the spinning recv sees the packet as soon as it is queued";

/// One IRQ of the NIC.
#[derive(Debug, Clone, Serialize)]
pub struct NicIrq {
    /// The IRQ number (`/proc/irq/N`).
    pub irq: u32,
    /// Its handlers' names from `/proc/interrupts` (`eth0-TxRx-0`); empty when it has no line.
    pub name: String,
    /// `smp_affinity_list`, when readable.
    pub affinity: Option<Vec<usize>>,
    /// Whether its affinity includes an RT CPU.
    pub on_rt_cpu: bool,
    /// Whether it can be moved at run time.
    pub(crate) managed: Movability,
}

/// The `board_nic` object of `rtapi detect --board ADDR --json`.
#[derive(Debug, Clone, Serialize)]
pub struct BoardNic {
    /// The card's address, as given.
    pub address: Ipv4Addr,
    /// The interface the route to it uses.
    pub interface: String,
    /// That route (directly connected: no gateway).
    pub route: RouteEntry,
    /// The driver: the `device/driver` link's name, else what ethtool says (`veth`).
    pub driver: Option<String>,
    /// The kind of a virtual interface (`veth`): it has no `device` in sysfs. `None` for a NIC.
    #[serde(rename = "virtual")]
    pub virtual_kind: Option<String>,
    /// Link speed in Mb/s (`/sys/class/net/IF/speed`), when it says.
    pub speed_mbps: Option<u32>,
    /// `full` or `half`, when it says.
    pub duplex: Option<String>,
    /// The coalescing reading (`ETHTOOL_GCOALESCE`).
    pub coalescing: Option<Coalesce>,
    /// Why there is no reading (`EOPNOTSUPP: …`).
    pub coalescing_error: Option<String>,
    /// The EEE reading (`ETHTOOL_GEEE`).
    pub eee: Option<Eee>,
    /// Why there is no EEE reading.
    pub eee_error: Option<String>,
    /// The NIC's IRQs: `device/msi_irqs` and the `/proc/interrupts` lines naming the interface.
    pub irqs: Vec<NicIrq>,
    /// The RT CPUs the IRQs are checked against.
    pub rt_cpus: Vec<usize>,
    /// The rule the IRQs are checked by ([`IRQ_RULE`]).
    pub irq_rule: &'static str,
}

/// Whether `/proc/interrupts` handler names `names` name interface `interface`: a name that is the
/// interface, or starts with it followed by `-`, `_`, `:` or `@` (`eth0-TxRx-0`, `enp3s0-rx-0`).
fn names_interface(names: &str, interface: &str) -> bool {
    names.split([' ', ',']).any(|n| {
        n.strip_prefix(interface)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(['-', '_', ':', '@']))
    })
}

/// Finds the NIC to `address` and reads it. Fails only when there is no directly connected route.
pub fn detect(
    root: &SysRoot,
    ethtool: &dyn Ethtool,
    address: Ipv4Addr,
    rt_cpus: &[usize],
) -> Result<BoardNic, RouteError> {
    let route = route::read(root, address)?;
    let interface = route.interface.clone();
    let dir = format!("sys/class/net/{interface}");
    let has_device = root.exists(&format!("{dir}/device"));
    let link_driver = std::fs::read_link(root.path(&format!("{dir}/device/driver")))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    let ethtool_driver = ethtool.driver(&interface).ok();
    let driver = link_driver.or_else(|| ethtool_driver.clone());
    let virtual_kind = (!has_device).then(|| ethtool_driver.unwrap_or_else(|| "virtual".into()));
    let speed_mbps = root
        .read(&format!("{dir}/speed"))
        .parse::<i64>()
        .filter(|s| *s > 0)
        .map(|s| s as u32);
    let duplex = root
        .read_text(&format!("{dir}/duplex"))
        .filter(|d| d == "full" || d == "half");
    let (coalescing, coalescing_error) = split(ethtool.coalesce(&interface));
    let (eee, eee_error) = split(ethtool.eee(&interface));

    let mut numbers: Vec<u32> = root
        .list_dir(&format!("{dir}/device/msi_irqs"))
        .iter()
        .filter_map(|n| n.parse().ok())
        .collect();
    let lines = root
        .read_text("proc/interrupts")
        .map(|t| super::interrupts::parse_interrupts(&t))
        .unwrap_or_default();
    numbers.extend(
        lines
            .iter()
            .filter(|l| names_interface(&l.name, &interface))
            .filter_map(|l| l.irq),
    );
    numbers.sort_unstable();
    numbers.dedup();
    let irqs = numbers
        .into_iter()
        .map(|irq| {
            let name = lines
                .iter()
                .find(|l| l.irq == Some(irq))
                .map(|l| l.name.clone())
                .unwrap_or_default();
            let affinity = root
                .read_text(&format!("proc/irq/{irq}/smp_affinity_list"))
                .and_then(|t| cpulist::parse(&t));
            NicIrq {
                irq,
                on_rt_cpu: affinity
                    .as_ref()
                    .is_some_and(|a| a.iter().any(|c| rt_cpus.contains(c))),
                managed: movability(root, irq, &name),
                name,
                affinity,
            }
        })
        .collect();
    Ok(BoardNic {
        address,
        interface,
        route,
        driver,
        virtual_kind,
        speed_mbps,
        duplex,
        coalescing,
        coalescing_error,
        eee,
        eee_error,
        irqs,
        rt_cpus: rt_cpus.to_vec(),
        irq_rule: IRQ_RULE,
    })
}

fn split<T>(r: Result<T, EthtoolError>) -> (Option<T>, Option<String>) {
    match r {
        Ok(v) => (Some(v), None),
        Err(e) => (None, Some(e.to_string())),
    }
}

impl BoardNic {
    /// The findings about this NIC, in detect's style.
    pub fn findings(&self) -> Vec<Finding> {
        let mut out = Vec::new();
        let ifc = &self.interface;
        let addr = self.address;
        let tune = format!("`rtapi tune --board {addr}`");
        let f = |severity, id, message: String, fix: Option<String>| Finding {
            severity,
            id,
            message,
            fix,
        };
        if let Some(kind) = &self.virtual_kind {
            out.push(f(
                Severity::Info,
                "board-nic-virtual",
                format!("{ifc}, the interface to {addr}, is virtual ({kind}): no NIC hardware, no IRQs of its own; coalescing, EEE and IRQ placement matter on the physical NIC a card is plugged into"),
                None,
            ));
        }
        if self.duplex.as_deref() == Some("half") || self.speed_mbps.is_some_and(|s| s < 100) {
            out.push(f(
                Severity::Warn,
                "board-nic-link",
                format!(
                    "{ifc} links at {} Mb/s {} duplex: Mesa cards run 100 Mb/s full duplex",
                    self.speed_mbps.map_or("?".into(), |s| s.to_string()),
                    self.duplex.as_deref().unwrap_or("?")
                ),
                Some(
                    "check the cable and the switch (a card straight on its own NIC is best)"
                        .into(),
                ),
            ));
        }
        match &self.coalescing {
            Some(c) => {
                for (name, now, want) in c.wanted_changes() {
                    let effect = match name {
                        "rx-usecs" | "rx-usecs-irq" => {
                            format!("replies wait up to {now} µs more before the kernel sees them")
                        }
                        "rx-frames" | "rx-frames-irq" => format!(
                            "the NIC may wait for {now} packets before it interrupts (a lone reply then waits for rx-usecs)"
                        ),
                        _ => "the driver chooses the RX interrupt delay from the traffic, which can grow it between two replies".to_string(),
                    };
                    let adaptive = name.starts_with("adaptive");
                    out.push(f(
                        Severity::Warn,
                        "board-nic-coalescing",
                        if adaptive {
                            format!("{ifc} {name} on (coalescing): {effect}")
                        } else {
                            format!("{ifc} {name} {now} (coalescing): {effect}")
                        },
                        Some(if adaptive {
                            format!("{tune} turns it off (as `ethtool -C {ifc} {name} off`)")
                        } else {
                            format!(
                                "{tune} sets it to {want} (as `ethtool -C {ifc} {name} {want}`)"
                            )
                        }),
                    ));
                }
            }
            None => out.push(f(
                Severity::Info,
                "board-nic-coalescing-unknown",
                format!(
                    "{ifc}: the driver does not report coalescing ({})",
                    self.coalescing_error.as_deref().unwrap_or("no reading")
                ),
                None,
            )),
        }
        if let Some(e) = &self.eee {
            if e.eee_enabled != 0 {
                out.push(f(
                    Severity::Warn,
                    "board-nic-eee",
                    format!(
                        "{ifc}: energy-efficient Ethernet is enabled ({}): the link may sleep between packets and take µs to wake for a reply",
                        if e.eee_active != 0 { "active on the link now" } else { "not active on the link now" }
                    ),
                    Some(format!("{tune} turns it off (as `ethtool --set-eee {ifc} eee off`)")),
                ));
            }
        }
        for irq in self.irqs.iter().filter(|i| i.on_rt_cpu) {
            let label = if irq.name.is_empty() {
                String::new()
            } else {
                format!(" ({})", irq.name)
            };
            let on: Vec<usize> = irq
                .affinity
                .iter()
                .flatten()
                .copied()
                .filter(|c| self.rt_cpus.contains(c))
                .collect();
            let fix = if irq.managed == Movability::Movable {
                format!("{tune} moves it to the housekeeping CPUs")
            } else {
                "it is kernel-managed: isolcpus=managed_irq,<RT CPUs> at boot keeps it off".into()
            };
            out.push(f(
                Severity::Warn,
                "board-nic-irq-on-rt-cpu",
                format!(
                    "IRQ {}{label} of {ifc} may run on CPU {}, the RT CPU: its NET_RX softirq may wait in ksoftirqd behind hm2_eth's spinning SCHED_FIFO thread (a late reply); the rule: {ifc}'s IRQs off the RT CPUs",
                    irq.irq,
                    cpulist::format(&on)
                ),
                Some(fix),
            ));
        }
        out
    }

    /// The `Board NIC` section of the text report.
    pub(crate) fn render(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let opt = |v: Option<String>| v.unwrap_or_else(|| "unknown".into());
        let _ = writeln!(s, "\nBoard NIC (to {})", self.address);
        let _ = writeln!(
            s,
            "  interface      {} (route {}/{}, directly connected)",
            self.interface, self.route.destination, self.route.prefix_len
        );
        let _ = writeln!(
            s,
            "  driver         {}",
            match &self.virtual_kind {
                Some(k) => format!("virtual ({k})"),
                None => opt(self.driver.clone()),
            }
        );
        let _ = writeln!(
            s,
            "  link           {} {}",
            self.speed_mbps
                .map_or("speed unknown".into(), |v| format!("{v} Mb/s")),
            self.duplex
                .as_deref()
                .map_or("duplex unknown".into(), |d| format!("{d} duplex"))
        );
        match &self.coalescing {
            Some(c) => {
                let _ = writeln!(
                    s,
                    "  coalescing     rx-usecs {} rx-frames {} rx-usecs-irq {} rx-frames-irq {} tx-usecs {} tx-frames {} adaptive-rx {} adaptive-tx {}",
                    c.rx_usecs,
                    c.rx_frames,
                    c.rx_usecs_irq,
                    c.rx_frames_irq,
                    c.tx_usecs,
                    c.tx_frames,
                    on_off(c.adaptive_rx),
                    on_off(c.adaptive_tx)
                );
            }
            None => {
                let _ = writeln!(
                    s,
                    "  coalescing     the driver does not report coalescing ({})",
                    self.coalescing_error.as_deref().unwrap_or("no reading")
                );
            }
        }
        match &self.eee {
            Some(e) => {
                let _ = writeln!(
                    s,
                    "  EEE            {}, {}",
                    if e.eee_enabled != 0 {
                        "enabled"
                    } else {
                        "disabled"
                    },
                    if e.eee_active != 0 {
                        "active"
                    } else {
                        "not active"
                    }
                );
            }
            None => {
                let _ = writeln!(
                    s,
                    "  EEE            unsupported ({})",
                    self.eee_error.as_deref().unwrap_or("no reading")
                );
            }
        }
        if self.irqs.is_empty() {
            let _ = writeln!(
                s,
                "  IRQs           none (no device/msi_irqs, no /proc/interrupts line naming {})",
                self.interface
            );
        } else {
            let _ = writeln!(
                s,
                "  IRQs (RT CPU {}; rule: off the RT CPUs):",
                cpulist::format(&self.rt_cpus)
            );
            for i in &self.irqs {
                let _ = writeln!(
                    s,
                    "    {:<5} {:<20} CPU {}{}",
                    i.irq,
                    if i.name.is_empty() { "-" } else { &i.name },
                    i.affinity
                        .as_deref()
                        .map_or("unknown".into(), cpulist::format),
                    if i.on_rt_cpu { "  (RT CPU)" } else { "" }
                );
            }
        }
        s
    }
}

fn on_off(v: u32) -> &'static str {
    if v != 0 {
        "on"
    } else {
        "off"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_names_match_whole_names_or_queue_suffixes() {
        assert!(names_interface("eth0-TxRx-0", "eth0"));
        assert!(names_interface("eth0", "eth0"));
        assert!(names_interface("ahci, eth0-rx-1", "eth0"));
        assert!(!names_interface("eth01-TxRx-0", "eth0"));
        assert!(!names_interface("veth0", "eth0"));
        assert!(!names_interface("xeth0-rx", "eth0"));
    }
}
