//! `/proc/interrupts` and `/proc/softirqs`, parsed once for everyone: detect's tuning checklist,
//! `rtapi tune`, the per-CPU survey and latency-test's spike follower.

/// One line of `/proc/interrupts`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct IrqLine {
    /// The label before the colon: an IRQ number (`36`) or an architecture name (`LOC`).
    pub(crate) key: String,
    /// The IRQ number of a numbered line.
    pub(crate) irq: Option<u32>,
    /// The handlers' names (`virtio1-req.0`), or the description of a named line (`Local timer
    /// interrupts`).
    pub(crate) name: String,
    /// `(cpu, count since boot)` for every CPU column.
    pub(crate) counts: Vec<(usize, u64)>,
    /// The interrupt chip of a numbered line (`IO-APIC`, `PCI-MSIX-0000:00:02.0`); empty otherwise.
    pub(crate) chip: String,
    /// Its hardware IRQ and trigger (`1-edge`); empty otherwise.
    pub(crate) hwirq: String,
}

/// One line of `/proc/softirqs`: the type (`TIMER`) and `(cpu, count since boot)` per column.
pub(crate) type SoftirqLine = (String, Vec<(usize, u64)>);

/// The CPU of each column of a header line such as `      CPU0       CPU1`.
fn columns(header: &str) -> Vec<usize> {
    header
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("CPU")?.parse().ok())
        .collect()
}

/// Parses `/proc/interrupts`, numbered and named lines alike. A named line needs a count for every
/// column (`ERR:` and `MIS:` are one system-wide count and are skipped); a numbered line may have fewer
/// (the kernel prints what it has). Garbled lines are skipped.
pub(crate) fn parse_interrupts(text: &str) -> Vec<IrqLine> {
    let mut lines = text.lines();
    let cols = lines.next().map(columns).unwrap_or_default();
    let mut out = Vec::new();
    for line in lines {
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        let key = key.trim();
        if key.is_empty() || key.contains(char::is_whitespace) {
            continue;
        }
        let irq = key.parse::<u32>().ok();
        let mut words = rest.split_whitespace().peekable();
        let mut counts = Vec::new();
        for &cpu in &cols {
            match words.peek().and_then(|w| w.parse::<u64>().ok()) {
                Some(n) => {
                    counts.push((cpu, n));
                    words.next();
                }
                None => break,
            }
        }
        if counts.is_empty() || (irq.is_none() && counts.len() != cols.len()) {
            continue;
        }
        // On a numbered line the chip and the hardware IRQ come before the handlers' names.
        let (chip, hwirq) = if irq.is_some() {
            (
                words.next().unwrap_or_default().to_string(),
                words.next().unwrap_or_default().to_string(),
            )
        } else {
            (String::new(), String::new())
        };
        out.push(IrqLine {
            key: key.to_string(),
            irq,
            name: words.collect::<Vec<_>>().join(" "),
            counts,
            chip,
            hwirq,
        });
    }
    out
}

/// Parses `/proc/softirqs` (a header of CPU columns, then `TYPE: count count …`).
pub(crate) fn parse_softirqs(text: &str) -> Vec<SoftirqLine> {
    let mut lines = text.lines();
    let cols = lines.next().map(columns).unwrap_or_default();
    lines
        .filter_map(|line| {
            let (name, rest) = line.split_once(':')?;
            let counts: Vec<(usize, u64)> = cols
                .iter()
                .zip(rest.split_whitespace().map_while(|w| w.parse::<u64>().ok()))
                .map(|(&c, n)| (c, n))
                .collect();
            (!counts.is_empty()).then(|| (name.trim().to_string(), counts))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_lines_keep_their_columns_chip_and_name() {
        let t = "           CPU0       CPU2\n 36:   12  160000  PCI-MSIX-0000:00:05.0  0-edge  virtio1-req.0\n\
                 NMI: 0 0 Non-maskable interrupts\n 9: x y garbage\n 1: 5 IO-APIC 1-edge i8042\n";
        let l: Vec<IrqLine> = parse_interrupts(t)
            .into_iter()
            .filter(|l| l.irq.is_some())
            .collect();
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].irq, Some(36));
        assert_eq!(l[0].counts, vec![(0, 12), (2, 160000)]);
        assert_eq!(l[0].name, "virtio1-req.0");
        assert_eq!(
            (l[0].chip.as_str(), l[0].hwirq.as_str()),
            ("PCI-MSIX-0000:00:05.0", "0-edge")
        );
        assert_eq!(l[1].counts, vec![(0, 5)]);
        assert!(parse_interrupts("").is_empty());
    }
}
