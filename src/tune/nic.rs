//! The board part of `rtapi tune --board ADDR`: the NIC to a Mesa card gets interrupt coalescing
//! off, energy-efficient Ethernet off, and its IRQs off the RT CPUs (the rule of
//! [`crate::detect::nic::IRQ_RULE`]). The IRQ moves are ordinary [`Change`]s of
//! `/proc/irq/N/smp_affinity_list`; coalescing and EEE are [`NicChange`]s made with the ethtool
//! ioctl ([`crate::detect::ethtool`]) and recorded in the same revert file as [`NicEntry`]s.

use super::{cpulist, minus, Change, Format, Plan, PlanError};
use crate::detect::ethtool::{Coalesce, Eee, Ethtool, EthtoolError};
use crate::detect::{SysRoot, SystemReport};
use serde::{Deserialize, Serialize};

/// What `rtapi tune` plans: everything (the machine and, with `--board`, the NIC) or only the NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Only {
    /// Only the NIC to the card (`--board`): coalescing, EEE, its IRQs; nothing machine-wide.
    Nic,
}

/// One NIC setting tune makes with the ethtool ioctl.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "setting")]
pub enum NicSetting {
    /// Interrupt coalescing (`ETHTOOL_SCOALESCE`): the whole reading before and after.
    Coalesce {
        /// The reading before.
        before: Coalesce,
        /// The reading wanted (or, once applied, read back).
        written: Coalesce,
    },
    /// Energy-efficient Ethernet (`ETHTOOL_SEEE`).
    Eee {
        /// The reading before.
        before: Eee,
        /// The reading wanted (or, once applied, read back).
        written: Eee,
    },
}

/// A NIC setting in a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicChange {
    /// The interface (in the network namespace tune runs in).
    pub interface: String,
    /// Before and wanted.
    pub setting: NicSetting,
    /// Why, for the user.
    pub why: String,
}

/// A NIC setting in the revert file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NicEntry {
    /// The interface.
    pub interface: String,
    /// Before and written.
    #[serde(flatten)]
    pub setting: NicSetting,
    /// The setting was made (false only while it is under way).
    pub applied: bool,
}

/// `rx-usecs 0 adaptive-rx off` for the fields that differ between two readings, as `ethtool -C`
/// takes them.
pub(crate) fn coalesce_args(before: &Coalesce, after: &Coalesce) -> String {
    FIELDS
        .iter()
        .filter_map(|name| {
            let v = field(after, name)?;
            (Some(v) != field(before, name)).then(|| {
                if name.starts_with("adaptive") {
                    format!("{name} {}", if v != 0 { "on" } else { "off" })
                } else {
                    format!("{name} {v}")
                }
            })
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The coalescing fields tune sets, by ethtool's names.
const FIELDS: [&str; 6] = [
    "rx-usecs",
    "rx-frames",
    "rx-usecs-irq",
    "rx-frames-irq",
    "adaptive-rx",
    "adaptive-tx",
];

/// The value of field `name` (one of [`Coalesce::wanted_changes`]'s).
fn field(c: &Coalesce, name: &str) -> Option<u32> {
    Some(match name {
        "rx-usecs" => c.rx_usecs,
        "rx-frames" => c.rx_frames,
        "rx-usecs-irq" => c.rx_usecs_irq,
        "rx-frames-irq" => c.rx_frames_irq,
        "adaptive-rx" => c.adaptive_rx,
        "adaptive-tx" => c.adaptive_tx,
        _ => return None,
    })
}

impl NicChange {
    /// The equivalent `ethtool` command (tune itself uses the ioctl, not the program).
    pub fn command(&self) -> String {
        match &self.setting {
            NicSetting::Coalesce { before, written } => {
                format!(
                    "ethtool -C {} {}",
                    self.interface,
                    coalesce_args(before, written)
                )
            }
            NicSetting::Eee { .. } => format!("ethtool --set-eee {} eee off", self.interface),
        }
    }

    /// What the setting is now, for `# was …`.
    pub fn was(&self) -> String {
        match &self.setting {
            NicSetting::Coalesce { before, .. } => before
                .wanted_changes()
                .iter()
                .map(|(n, now, _)| {
                    if n.starts_with("adaptive") {
                        format!("{n} {}", if *now != 0 { "on" } else { "off" })
                    } else {
                        format!("{n} {now}")
                    }
                })
                .collect::<Vec<_>>()
                .join(" "),
            NicSetting::Eee { before, .. } => format!(
                "eee {}{}",
                if before.eee_enabled != 0 { "on" } else { "off" },
                if before.eee_active != 0 {
                    " (active)"
                } else {
                    ""
                }
            ),
        }
    }
}

/// Plans `rtapi tune --board`: the machine-wide plan of [`super::plan`] (unless `only` is
/// [`Only::Nic`]) plus the NIC of `report.board_nic` (detect's `--board` reading): its IRQs on an RT
/// CPU moved to the housekeeping CPUs, coalescing and EEE off. What only a reboot or the user can
/// change is a note. A report without a board NIC gives the plain plan.
pub fn plan_board(
    report: &SystemReport,
    root: &SysRoot,
    rt_cpus: Option<&[usize]>,
    only: Option<Only>,
) -> Result<Plan, PlanError> {
    let mut p = match only {
        None => super::plan(report, root, rt_cpus)?,
        Some(Only::Nic) => {
            let mut p = super::empty_plan(report, rt_cpus)?;
            p.only_board = true;
            p
        }
    };
    let Some(nic) = &report.board_nic else {
        return Ok(p);
    };
    let ifc = nic.interface.clone();
    p.board = Some((nic.address, ifc.clone()));
    let rt = p.rt_cpus.clone();
    if let Some(kind) = &nic.virtual_kind {
        p.notes.push(format!(
            "{ifc} is virtual ({kind}): it has no IRQs; what it does not support is left as it is"
        ));
    }
    for irq in &nic.irqs {
        let Some(affinity) = &irq.affinity else {
            continue;
        };
        if !affinity.iter().any(|c| rt.contains(c)) {
            continue;
        }
        let label = if irq.name.is_empty() {
            ifc.clone()
        } else {
            irq.name.clone()
        };
        if irq.managed != crate::detect::Movability::Movable {
            p.notes.push(format!(
                "IRQ {} ({label}) of {ifc} is kernel-managed: its affinity cannot be written at run time; isolcpus=managed_irq,{} at boot keeps it off the RT CPUs",
                irq.irq,
                cpulist::format(&rt)
            ));
            continue;
        }
        let path = format!("/proc/irq/{}/smp_affinity_list", irq.irq);
        let why = format!(
            "IRQ {} {label}: the NIC to the card, off the RT CPUs (its NET_RX softirq must not wait behind hm2_eth's spin)",
            irq.irq
        );
        if let Some(c) = p.changes.iter_mut().find(|c| c.path == path) {
            c.why = why;
            continue;
        }
        let Some(current) = root.read_text(&path[1..]) else {
            continue;
        };
        let kept = minus(affinity, &rt);
        let value = cpulist::format(if kept.is_empty() {
            &p.housekeeping
        } else {
            &kept
        });
        if p.housekeeping.is_empty() {
            continue;
        }
        p.changes.push(Change {
            path,
            format: Format::CpuList,
            current,
            value,
            why,
            cost: None,
        });
    }
    match &nic.coalescing {
        Some(c) => {
            let fields = c.wanted_changes();
            if !fields.is_empty() {
                let mut wanted = *c;
                for (name, _, want) in &fields {
                    wanted = wanted.with(name, *want).unwrap_or(wanted);
                }
                p.nic.push(NicChange {
                    interface: ifc.clone(),
                    setting: NicSetting::Coalesce {
                        before: *c,
                        written: wanted,
                    },
                    why: "RX interrupts at once: a reply from the card is not held back by coalescing"
                        .into(),
                });
            }
        }
        None => p.notes.push(format!(
            "{ifc}: the driver does not report coalescing ({}): nothing to set",
            nic.coalescing_error.as_deref().unwrap_or("no reading")
        )),
    }
    match &nic.eee {
        Some(e) if e.eee_enabled != 0 => p.nic.push(NicChange {
            interface: ifc.clone(),
            setting: NicSetting::Eee {
                before: *e,
                written: Eee {
                    eee_enabled: 0,
                    ..*e
                },
            },
            why: "the link does not sleep between two exchanges with the card".into(),
        }),
        Some(_) => {}
        None => p.notes.push(format!(
            "{ifc}: no energy-efficient Ethernet to turn off ({})",
            nic.eee_error.as_deref().unwrap_or("no reading")
        )),
    }
    if nic.duplex.as_deref() == Some("half") || nic.speed_mbps.is_some_and(|s| s < 100) {
        p.notes.push(format!(
            "{ifc} links at {} Mb/s {} duplex: tune does not change the link; check the cable and the switch",
            nic.speed_mbps.map_or("?".into(), |s| s.to_string()),
            nic.duplex.as_deref().unwrap_or("?")
        ));
    }
    Ok(p)
}

/// What making one NIC setting did (for the revert file and the user).
pub(crate) enum Made {
    /// Set; the reading after (what the revert file records as written), and the fields the driver
    /// refused (name, error), which are reported, not failed.
    Set(NicSetting, Vec<(String, String)>),
    /// Nothing could be set: every field refused, or the setting unsupported (reported, not failed).
    Refused(Vec<(String, String)>),
    /// An error that is a failure (no permission, no such interface).
    Failed(String),
}

/// Reads the NIC again for `change` (it may have changed since planning): `Ok(None)` when it is
/// already as wanted, else the setting with the reading now as `before` and the wanted one as
/// `written` — what the revert file records before the write.
pub(crate) fn prepare(eth: &dyn Ethtool, change: &NicChange) -> Result<Option<NicSetting>, String> {
    let ifc = &change.interface;
    match &change.setting {
        NicSetting::Coalesce { written, .. } => {
            let now = eth
                .coalesce(ifc)
                .map_err(|e| format!("reading coalescing: {e}"))?;
            let mut all = now;
            for name in FIELDS {
                if let (Some(v), Some(n)) = (field(written, name), field(&now, name)) {
                    if v != n && now.wanted_changes().iter().any(|(w, _, _)| *w == name) {
                        all = all.with(name, v).unwrap_or(all);
                    }
                }
            }
            Ok((all != now).then_some(NicSetting::Coalesce {
                before: now,
                written: all,
            }))
        }
        NicSetting::Eee { .. } => {
            let now = eth.eee(ifc).map_err(|e| format!("reading EEE: {e}"))?;
            Ok((now.eee_enabled != 0).then_some(NicSetting::Eee {
                before: now,
                written: Eee {
                    eee_enabled: 0,
                    ..now
                },
            }))
        }
    }
}

/// Makes a prepared setting on `interface` through `eth`: the whole setting at once; if the driver
/// refuses it, field by field, keeping each one it takes.
pub(crate) fn make(eth: &dyn Ethtool, interface: &str, setting: &NicSetting) -> Made {
    let hard = |e: &EthtoolError| {
        matches!(
            e,
            EthtoolError::NotPermitted | EthtoolError::NoDevice | EthtoolError::Other(_)
        )
    };
    match setting {
        NicSetting::Coalesce { before, written } => {
            let mut refused = Vec::new();
            match eth.set_coalesce(interface, written) {
                Ok(()) => {}
                Err(e) if hard(&e) => return Made::Failed(e.to_string()),
                Err(_) => {
                    let mut cur = *before;
                    for name in FIELDS {
                        let (Some(v), Some(n)) = (field(written, name), field(before, name)) else {
                            continue;
                        };
                        if v == n {
                            continue;
                        }
                        let Some(next) = cur.with(name, v) else {
                            continue;
                        };
                        match eth.set_coalesce(interface, &next) {
                            Ok(()) => cur = next,
                            Err(e) if hard(&e) => return Made::Failed(e.to_string()),
                            Err(e) => refused.push((name.to_string(), e.to_string())),
                        }
                    }
                    if cur == *before {
                        return Made::Refused(refused);
                    }
                }
            }
            let after = eth.coalesce(interface).unwrap_or(*written);
            Made::Set(
                NicSetting::Coalesce {
                    before: *before,
                    written: after,
                },
                refused,
            )
        }
        NicSetting::Eee { before, written } => match eth.set_eee(interface, written) {
            Ok(()) => Made::Set(
                NicSetting::Eee {
                    before: *before,
                    written: eth.eee(interface).unwrap_or(*written),
                },
                Vec::new(),
            ),
            Err(e) if hard(&e) => Made::Failed(e.to_string()),
            Err(e) => Made::Refused(vec![("eee".into(), e.to_string())]),
        },
    }
}

/// What reverting one NIC entry found.
pub(crate) enum Reverted {
    /// Put back.
    Restored,
    /// Already as before.
    Already,
    /// Someone else changed it since (what it is now, as text).
    Skipped(String),
    /// Reading or setting failed.
    Failed(String),
}

/// Puts back `entry` through `eth`: left alone when it is neither the value before nor the one
/// written (unless `force`).
pub(crate) fn restore(eth: &dyn Ethtool, entry: &NicEntry, force: bool) -> Reverted {
    let ifc = &entry.interface;
    let hint = |e: EthtoolError| match e {
        EthtoolError::NoDevice => {
            format!("{e} (run --revert in the network namespace tune ran in)")
        }
        e => e.to_string(),
    };
    match &entry.setting {
        NicSetting::Coalesce { before, written } => {
            let now = match eth.coalesce(ifc) {
                Ok(c) => c,
                Err(e) => return Reverted::Failed(hint(e)),
            };
            if now == *before {
                return Reverted::Already;
            }
            if now != *written && !force {
                return Reverted::Skipped(coalesce_text(&now));
            }
            match eth.set_coalesce(ifc, before) {
                Ok(()) => Reverted::Restored,
                Err(e) => Reverted::Failed(hint(e)),
            }
        }
        NicSetting::Eee { before, written } => {
            let now = match eth.eee(ifc) {
                Ok(e) => e,
                Err(e) => return Reverted::Failed(hint(e)),
            };
            if now.eee_enabled == before.eee_enabled {
                return Reverted::Already;
            }
            if now.eee_enabled != written.eee_enabled && !force {
                return Reverted::Skipped(format!("eee_enabled {}", now.eee_enabled));
            }
            match eth.set_eee(ifc, before) {
                Ok(()) => Reverted::Restored,
                Err(e) => Reverted::Failed(hint(e)),
            }
        }
    }
}

/// `rx-usecs 3 rx-frames 1 …` of the fields tune changes.
pub(crate) fn coalesce_text(c: &Coalesce) -> String {
    format!(
        "rx-usecs {} rx-frames {} rx-usecs-irq {} rx-frames-irq {} adaptive-rx {} adaptive-tx {}",
        c.rx_usecs, c.rx_frames, c.rx_usecs_irq, c.rx_frames_irq, c.adaptive_rx, c.adaptive_tx
    )
}

/// One line for a NIC entry of the revert file, from the value before tune to the one it wrote
/// (`hm2host coalescing rx-usecs 3 -> rx-usecs 0`), or back when `back`.
pub(crate) fn entry_text(e: &NicEntry, back: bool) -> String {
    let (from, to) = match &e.setting {
        NicSetting::Coalesce { before, written } => (
            coalesce_args(written, before),
            coalesce_args(before, written),
        ),
        NicSetting::Eee { before, written } => {
            let w = |v: &Eee| if v.eee_enabled != 0 { "on" } else { "off" }.to_string();
            (w(before), w(written))
        }
    };
    let what = match e.setting {
        NicSetting::Coalesce { .. } => "coalescing",
        NicSetting::Eee { .. } => "eee",
    };
    let (a, b) = if back { (to, from) } else { (from, to) };
    format!("{} {what} {a} -> {b}", e.interface)
}
