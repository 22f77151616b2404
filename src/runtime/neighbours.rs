//! Other instances on this machine whose real-time threads run on the CPUs this one is about to use.
//!
//! Two instances with SCHED_FIFO threads on one CPU take turns on it: the higher priority one delays
//! the other by its whole execution time every period, and at equal priority each waits for the
//! other. Nothing in the kernel says so, and both instances' statistics only show "late". So a start
//! reads every other live instance's thread records (read-only, through the reader's trust rule, as
//! `rtapi show` does) and warns, naming both sides and the way out. It only warns: running two
//! instances on one CPU can be meant (a test bench, a simulation beside a machine), and the user
//! decides; docs/guide/standalone.md ("Several instances") says so.

use rtapi_hal::{Access, HalReader, Trust};

/// A thread this instance is about to start: name, CPU, SCHED_FIFO priority (0: not real-time).
pub(crate) struct Planned<'a> {
    pub name: &'a str,
    pub cpu: usize,
    pub priority: i32,
}

/// One warning per CPU shared with another live instance's real-time threads, or none. `own` is
/// this instance's name (its own segment, if one is left over, is not a neighbour). Segments that
/// cannot be read or trusted are skipped: this is advice, the start does not depend on it.
pub(crate) fn shared_cpus(own: &str, planned: &[Planned<'_>]) -> Vec<String> {
    let Ok(mut names) = rtapi_hal::instance_names() else {
        return Vec::new();
    };
    names.retain(|n| n != own);
    let mut warnings = Vec::new();
    for other in names {
        let Ok(reader) = HalReader::open_with(&other, Access::ReadOnly, &Trust::new()) else {
            continue;
        };
        if !reader.owner_alive() {
            continue;
        }
        let Ok(threads) = reader.threads() else {
            continue;
        };
        for mine in planned.iter().filter(|p| p.priority > 0) {
            let theirs: Vec<String> = threads
                .iter()
                .filter(|t| t.running && t.priority > 0 && t.cpu == Some(mine.cpu as u32))
                .map(|t| format!("{} (SCHED_FIFO {})", t.name, t.priority))
                .collect();
            if theirs.is_empty() {
                continue;
            }
            warnings.push(format!(
                "CPU {cpu} is shared: instance '{other}' (pid {pid}) already runs {} there, and this \
                 instance's thread {} (SCHED_FIFO {}) will run there too; one delays the other every \
                 period. Put them apart (a thread's cpu = / --cpu), or stop '{other}' first",
                theirs.join(", "),
                mine.name,
                mine.priority,
                cpu = mine.cpu,
                pid = reader.header().owner_pid,
            ));
        }
    }
    warnings
}
