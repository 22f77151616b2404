//! The machine around the kernel: virtualization, transparent hugepages, swap.

use super::sysroot::SysRoot;
use serde::Serialize;

/// The machine around the kernel that costs latency: a hypervisor, transparent hugepages, swap. The
/// `environment` object of `rtapi detect --json`; every field is `None` when its file could not be read.
#[derive(Debug, Clone, Serialize)]
pub struct Environment {
    /// `Some(true)` when any sign of a hypervisor was found; `None` when nothing could be read.
    pub(crate) virtualized: Option<bool>,
    /// The hypervisor or VM product when it can be named.
    pub hypervisor: Option<String>,
    pub(crate) virtualization_evidence: Vec<String>,
    /// Transparent hugepages mode (`always`, `madvise`, `never`).
    pub(crate) transparent_hugepages: Option<String>,
    /// Number of active swap areas.
    pub(crate) swap_devices: Option<usize>,
    pub(crate) swap_total_kib: Option<u64>,
}

/// DMI vendor/product strings that name a virtual machine.
const VM_DMI_MARKERS: &[(&str, &str)] = &[
    ("qemu", "QEMU"),
    ("kvm", "KVM"),
    ("vmware", "VMware"),
    ("virtualbox", "VirtualBox"),
    ("innotek", "VirtualBox"),
    ("xen", "Xen"),
    ("microsoft corporation", "Hyper-V"),
    ("amazon ec2", "Amazon EC2"),
    ("google compute engine", "Google Compute Engine"),
    ("parallels", "Parallels"),
    ("bochs", "Bochs"),
    ("firecracker", "Firecracker"),
    ("cloud hypervisor", "Cloud Hypervisor"),
];

pub(crate) fn detect(root: &SysRoot) -> Environment {
    let mut evidence = Vec::new();
    let mut hypervisor = None;
    let mut anything_read = false;

    if let Some(cpuinfo) = root.read("proc/cpuinfo").text() {
        anything_read = true;
        let flagged = cpuinfo
            .lines()
            .filter(|l| l.starts_with("flags"))
            .any(|l| l.split_whitespace().any(|w| w == "hypervisor"));
        if flagged {
            evidence.push("cpuinfo has the 'hypervisor' flag".to_string());
        }
    }
    if let Some(kind) = root
        .read("sys/hypervisor/type")
        .text()
        .filter(|t| !t.is_empty())
    {
        anything_read = true;
        evidence.push(format!("/sys/hypervisor/type = {kind}"));
        hypervisor = Some(kind.to_string());
    }
    for field in ["sys_vendor", "product_name", "bios_vendor"] {
        if let Some(value) = root.read(&format!("sys/class/dmi/id/{field}")).text() {
            anything_read = true;
            let lower = value.to_ascii_lowercase();
            if let Some((_, name)) = VM_DMI_MARKERS.iter().find(|(m, _)| lower.contains(m)) {
                evidence.push(format!("DMI {field} = {value}"));
                hypervisor.get_or_insert_with(|| name.to_string());
            }
        }
    }

    let swaps = root.read("proc/swaps");
    let meminfo = root.read("proc/meminfo");
    Environment {
        virtualized: anything_read.then_some(!evidence.is_empty()),
        hypervisor,
        virtualization_evidence: evidence,
        transparent_hugepages: root
            .read("sys/kernel/mm/transparent_hugepage/enabled")
            .text()
            .and_then(bracketed),
        swap_devices: swaps
            .text()
            .map(|s| s.lines().skip(1).filter(|l| !l.trim().is_empty()).count()),
        swap_total_kib: meminfo.text().and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("SwapTotal:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
        }),
    }
}

/// The selected word of a sysfs choice list: `always [madvise] never` -> `madvise`.
fn bracketed(text: &str) -> Option<String> {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix('[').and_then(|w| w.strip_suffix(']')))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    #[test]
    fn bracketed_choice() {
        assert_eq!(
            super::bracketed("always [madvise] never").as_deref(),
            Some("madvise")
        );
        assert_eq!(super::bracketed("garbage"), None);
    }
}
