//! Other processes as `/proc/PID/stat` shows them: parent, state, start time, command name. For the
//! owner and launcher side (never the RT path): who is still running, who is whose child, and
//! whether a pid still names the process seen before (pid and start time together do).

/// One process's `/proc/PID/stat`, the fields rtapi uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcStat {
    /// Its pid.
    pub pid: u32,
    /// Its parent's pid.
    pub ppid: u32,
    /// Ended and not yet reaped (`Z`) or dead (`X`): it holds nothing any more (segments, files).
    pub ended: bool,
    /// Clock ticks after boot at which it started: with the pid, it names the process.
    pub start: u64,
    /// Its command name.
    pub comm: String,
}

impl ProcStat {
    /// Process `pid` now, or `None` if it is gone (or its stat cannot be read).
    pub fn read(pid: u32) -> Option<ProcStat> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // `pid (comm) state ppid …`: comm may hold anything, the fields follow its last ')'.
        let (head, rest) = stat.rsplit_once(')')?;
        let comm = head.split_once('(')?.1.to_string();
        let f: Vec<&str> = rest.split_whitespace().collect();
        Some(ProcStat {
            pid,
            ppid: f.get(1)?.parse().ok()?,
            ended: matches!(*f.first()?, "Z" | "X"),
            start: f.get(19)?.parse().ok()?,
            comm,
        })
    }

    /// Every process this one can see.
    pub fn all() -> Vec<ProcStat> {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter_map(ProcStat::read)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_and_a_reaped_child_read_as_they_are() {
        let me = ProcStat::read(std::process::id()).unwrap();
        assert!(!me.ended && me.start > 0);
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        // Until it is reaped, the child that has exited is a zombie of ours.
        let zombie = loop {
            match ProcStat::read(pid) {
                Some(p) if p.ended => break p,
                Some(_) => std::thread::yield_now(),
                None => panic!("the child vanished before it was reaped"),
            }
        };
        assert_eq!((zombie.ppid, zombie.comm.as_str()), (me.pid, "true"));
        assert!(ProcStat::all().iter().any(|p| p.pid == pid));
        child.wait().unwrap();
        assert_eq!(ProcStat::read(pid), None);
    }
}
