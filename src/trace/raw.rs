//! The binary side of tracefs: `per_cpu/cpuN/trace_pipe_raw` hands out the ring buffer's pages as
//! they are, so following a busy RT CPU costs a copy per page instead of the kernel formatting every
//! event as text (measured on the test VM with a 25 µs base thread: ~280 000 events/s, 38 % of a CPU
//! in the kernel for `trace_pipe` text). Pages are kept as bytes and decoded only for the windows
//! asked for, into the same [`Event`]s the text parser gives.
//!
//! The page and event layout, as `events/header_page` and `events/header_event` describe it:
//! a page is a u64 timestamp, a `commit` word (data size; bit 31: events were lost before this page,
//! bit 30: their count is stored after the data) and the data from offset 16. Each entry starts with
//! a u32 `type_len:5 | time_delta:27`: type_len 1..=28 is a data record of `type_len × 4` bytes, 0 a
//! data record whose length (+4) is in the next u32, 29 padding, 30 a time extend (delta
//! `array << 27 | time_delta`), 31 an absolute time stamp. A record's data starts with the common
//! fields (u16 event id, flags, preempt count, i32 pid), then the event's own fields at the offsets
//! its `format` file gives. Function pointers (hrtimer callbacks, work functions) are named from
//! `/proc/kallsyms`.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::parse::{Event, EventKind, TaskRef};
use super::session::{Coverage, CpuReader, Stretches, TraceError, TraceSession, Window};

const PAGE_DATA: usize = 16;
const MISSED_EVENTS: u64 = 1 << 31;
const MISSED_STORED: u64 = 1 << 30;
const SIZE_MASK: u64 = (1 << 27) - 1;

/// Softirq vector names by number (`include/linux/interrupt.h`).
const SOFTIRQS: [&str; 10] = [
    "HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER", "RCU",
];

/// One field of an event: offset and size in the record.
#[derive(Debug, Clone, Copy, Default)]
struct Field {
    off: usize,
    size: usize,
}

/// How to decode one event id.
#[derive(Debug, Clone)]
enum Decoder {
    Switch {
        prev_comm: Field,
        prev_pid: Field,
        prev_prio: Field,
        prev_state: Field,
        next_comm: Field,
        next_pid: Field,
        next_prio: Field,
    },
    Wakeup {
        comm: Field,
        pid: Field,
        prio: Field,
        target_cpu: Field,
        waking: bool,
    },
    IrqEntry {
        irq: Field,
        name: Field,
    },
    IrqExit {
        irq: Field,
    },
    Softirq {
        vec: Field,
        entry: bool,
    },
    Vector {
        name: &'static str,
        vector: Field,
        entry: bool,
    },
    HrtimerEntry {
        hrtimer: Field,
        now: Field,
        function: Field,
    },
    HrtimerExit {
        hrtimer: Field,
    },
    Work {
        function: Field,
        start: bool,
    },
}

/// The decoders of a session's events, from their `format` files, and the kernel's symbols.
#[derive(Debug)]
pub struct Formats {
    by_id: HashMap<u16, Decoder>,
    /// Sorted (address, name) of text symbols.
    symbols: Vec<(u64, String)>,
}

/// `field:TYPE NAME[N]; offset:O; size:S; …` lines of a format file → name → field.
fn fields(text: &str) -> (Option<u16>, BTreeMap<String, Field>) {
    let mut id = None;
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(v) = line.strip_prefix("ID:") {
            id = v.trim().parse().ok();
            continue;
        }
        let Some(rest) = line.strip_prefix("field:") else {
            continue;
        };
        let mut parts = rest.split(';').map(str::trim);
        let decl = parts.next().unwrap_or_default();
        let mut f = Field::default();
        for p in parts {
            if let Some(v) = p.strip_prefix("offset:") {
                f.off = v.parse().unwrap_or(0);
            } else if let Some(v) = p.strip_prefix("size:") {
                f.size = v.parse().unwrap_or(0);
            }
        }
        let name = decl
            .rsplit(' ')
            .next()
            .unwrap_or_default()
            .split('[')
            .next()
            .unwrap_or_default();
        out.insert(name.to_string(), f);
    }
    (id, out)
}

/// `/proc/kallsyms` text symbols, sorted; empty when the addresses are hidden (all zero).
fn load_symbols(text: &str) -> Vec<(u64, String)> {
    let mut v: Vec<(u64, String)> = text
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let addr = u64::from_str_radix(w.next()?, 16).ok()?;
            let kind = w.next()?;
            let name = w.next()?;
            (addr != 0 && matches!(kind, "t" | "T")).then(|| (addr, name.to_string()))
        })
        .collect();
    v.sort_unstable();
    v
}

/// Why the binary trace cannot be decoded (the text reader is used instead).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FormatError {
    /// `/proc/kallsyms` shows no addresses (`kptr_restrict`).
    HiddenSymbols,
    /// An event's `format` file has no `ID:` line.
    NoId(PathBuf),
    /// An event's `format` file lacks a field the decoder reads.
    NoField {
        /// The `format` file.
        path: PathBuf,
        /// The field.
        field: &'static str,
    },
}

impl std::fmt::Display for FormatError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FormatError::HiddenSymbols => {
                f.write_str("/proc/kallsyms hides the kernel's addresses (kptr_restrict)")
            }
            FormatError::NoId(p) => write!(f, "{}: no ID", p.display()),
            FormatError::NoField { path, field } => {
                write!(f, "{}: no field {field}", path.display())
            }
        }
    }
}

impl std::error::Error for FormatError {}

impl Formats {
    /// Reads the format of every event `session` enabled, and `/proc/kallsyms`. Fails when a
    /// format misses a field the decoder needs or the kernel hides its symbol addresses: the text
    /// reader is the fallback then.
    pub fn load(session: &TraceSession) -> Result<Formats, FormatError> {
        Self::load_from(
            session.dir(),
            &fs::read_to_string("/proc/kallsyms").unwrap_or_default(),
        )
    }

    fn load_from(dir: &Path, kallsyms: &str) -> Result<Formats, FormatError> {
        let symbols = load_symbols(kallsyms);
        if !symbols.iter().any(|(_, n)| n == "hrtimer_wakeup") {
            return Err(FormatError::HiddenSymbols);
        }
        let mut by_id = HashMap::new();
        for ev in super::session::EVENTS {
            let p = dir.join("events").join(ev).join("format");
            let Ok(text) = fs::read_to_string(&p) else {
                continue; // not in this kernel; the session says so
            };
            let (Some(id), f) = fields(&text) else {
                return Err(FormatError::NoId(p));
            };
            let get = |field: &'static str| {
                f.get(field).copied().ok_or_else(|| FormatError::NoField {
                    path: p.clone(),
                    field,
                })
            };
            let name = ev.rsplit('/').next().unwrap_or(ev);
            let d = match name {
                "sched_switch" => Decoder::Switch {
                    prev_comm: get("prev_comm")?,
                    prev_pid: get("prev_pid")?,
                    prev_prio: get("prev_prio")?,
                    prev_state: get("prev_state")?,
                    next_comm: get("next_comm")?,
                    next_pid: get("next_pid")?,
                    next_prio: get("next_prio")?,
                },
                "sched_wakeup" | "sched_wakeup_new" | "sched_waking" => Decoder::Wakeup {
                    comm: get("comm")?,
                    pid: get("pid")?,
                    prio: get("prio")?,
                    target_cpu: get("target_cpu")?,
                    waking: name == "sched_waking",
                },
                "irq_handler_entry" => Decoder::IrqEntry {
                    irq: get("irq")?,
                    name: get("name")?,
                },
                "irq_handler_exit" => Decoder::IrqExit { irq: get("irq")? },
                "softirq_entry" | "softirq_exit" => Decoder::Softirq {
                    vec: get("vec")?,
                    entry: name == "softirq_entry",
                },
                "hrtimer_expire_entry" => Decoder::HrtimerEntry {
                    hrtimer: get("hrtimer")?,
                    now: get("now")?,
                    function: get("function")?,
                },
                "hrtimer_expire_exit" => Decoder::HrtimerExit {
                    hrtimer: get("hrtimer")?,
                },
                "workqueue_execute_start" | "workqueue_execute_end" => Decoder::Work {
                    function: get("function")?,
                    start: name == "workqueue_execute_start",
                },
                v => {
                    let (base, entry) = match v.strip_suffix("_entry") {
                        Some(b) => (b, true),
                        None => (v.strip_suffix("_exit").unwrap_or(v), false),
                    };
                    let name: &'static str = match base {
                        "local_timer" => "local_timer",
                        "call_function" => "call_function",
                        "call_function_single" => "call_function_single",
                        "reschedule" => "reschedule",
                        _ => continue,
                    };
                    Decoder::Vector {
                        name,
                        vector: get("vector")?,
                        entry,
                    }
                }
            };
            by_id.insert(id, d);
        }
        Ok(Formats { by_id, symbols })
    }

    /// The symbol `addr` is in, or the address in hex.
    fn symbol(&self, addr: u64) -> String {
        let i = self.symbols.partition_point(|(a, _)| *a <= addr);
        match i.checked_sub(1).map(|i| &self.symbols[i]) {
            Some((a, n)) if addr == *a => n.clone(),
            Some((a, n)) if addr - a < 1 << 20 => format!("{n}+{:#x}", addr - a),
            _ => format!("{addr:#x}"),
        }
    }
}

fn uint(d: &[u8], f: Field) -> u64 {
    let b = d.get(f.off..f.off + f.size).unwrap_or(&[]);
    match b.len() {
        1 => b[0] as u64,
        2 => u16::from_ne_bytes([b[0], b[1]]) as u64,
        4 => u32::from_ne_bytes(b.try_into().unwrap_or_default()) as u64,
        8 => u64::from_ne_bytes(b.try_into().unwrap_or_default()),
        _ => 0,
    }
}

fn int(d: &[u8], f: Field) -> i64 {
    let v = uint(d, f);
    match f.size {
        1 => v as i8 as i64,
        2 => v as i16 as i64,
        4 => v as i32 as i64,
        _ => v as i64,
    }
}

/// A fixed `char[N]`, up to its NUL.
fn cstr(d: &[u8], f: Field) -> String {
    let b = d.get(f.off..f.off + f.size).unwrap_or(&[]);
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// A `__data_loc char[]`: a u32 of `offset | length << 16` into the record.
fn data_loc(d: &[u8], f: Field) -> String {
    let loc = uint(d, f) as usize;
    let (off, len) = (loc & 0xffff, loc >> 16);
    let b = d.get(off..off + len).unwrap_or(&[]);
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// `prev_state` as the text format prints it: the letter of the lowest state bit set, `R` for 0.
fn state_letters(state: i64) -> String {
    const LETTERS: [&str; 8] = ["S", "D", "T", "t", "X", "Z", "P", "I"];
    if state == 0 {
        return "R".into();
    }
    let bits = state as u64;
    LETTERS
        .iter()
        .enumerate()
        .find(|(i, _)| bits & (1 << i) != 0)
        .map_or("R+".into(), |(_, l)| (*l).to_string())
}

/// One record of a page: its time and data (the common fields first).
struct Record<'a> {
    ts_ns: u64,
    data: &'a [u8],
}

/// Walks a page's records; `lost` says whether events were lost before it.
fn records(page: &[u8]) -> (Vec<Record<'_>>, bool) {
    let mut out = Vec::new();
    if page.len() < PAGE_DATA {
        return (out, false);
    }
    let mut ts = u64::from_ne_bytes(page[0..8].try_into().unwrap_or_default());
    let commit = u64::from_ne_bytes(page[8..16].try_into().unwrap_or_default());
    let lost = commit & MISSED_EVENTS != 0;
    let end = (PAGE_DATA + (commit & SIZE_MASK) as usize).min(page.len());
    let u32_at = |o: usize| -> Option<u32> {
        page.get(o..o + 4)
            .map(|b| u32::from_ne_bytes(b.try_into().unwrap_or_default()))
    };
    let mut off = PAGE_DATA;
    while off + 4 <= end {
        let Some(h) = u32_at(off) else { break };
        let type_len = h & 0x1f;
        let delta = (h >> 5) as u64;
        match type_len {
            29 => {
                // Padding: with no delta, the rest of the page is empty.
                if delta == 0 {
                    break;
                }
                let Some(len) = u32_at(off + 4) else { break };
                off += 4 + len as usize;
            }
            30 => {
                let Some(hi) = u32_at(off + 4) else { break };
                ts += ((hi as u64) << 27) | delta;
                off += 8;
            }
            31 => {
                let Some(hi) = u32_at(off + 4) else { break };
                let abs = ((hi as u64) << 27) | delta;
                // The stamp holds the low 59 bits; the page's time gives the rest.
                ts = (ts & !((1u64 << 59) - 1)) | abs;
                off += 8;
            }
            0 => {
                let Some(len) = u32_at(off + 4) else { break };
                let len = (len as usize).saturating_sub(4);
                let len = (len + 3) & !3;
                ts += delta;
                let start = off + 8;
                if start + len > end {
                    break;
                }
                out.push(Record {
                    ts_ns: ts,
                    data: &page[start..start + len],
                });
                off = start + len;
            }
            n => {
                let len = n as usize * 4;
                ts += delta;
                let start = off + 4;
                if start + len > end {
                    break;
                }
                out.push(Record {
                    ts_ns: ts,
                    data: &page[start..start + len],
                });
                off = start + len;
            }
        }
    }
    let _ = MISSED_STORED;
    (out, lost)
}

/// One CPU's `trace_pipe_raw`, consumed as it comes (non-blocking), its pages kept as bytes and
/// decoded for the windows asked for. Same use as [`super::PipeReader`], a fraction of the cost.
#[derive(Debug)]
pub struct RawReader {
    cpu: usize,
    path: PathBuf,
    file: fs::File,
    formats: Arc<Formats>,
    pages: Stretches,
    /// pid → comm, learned from the events decoded (and `/proc` for the others).
    comms: std::cell::RefCell<HashMap<u32, String>>,
    lost_pages: u64,
    bytes: u64,
    page_size: usize,
}

impl RawReader {
    /// Opens `per_cpu/cpu<cpu>/trace_pipe_raw` of `session`, non-blocking.
    pub fn open(
        session: &TraceSession,
        cpu: usize,
        formats: Arc<Formats>,
    ) -> Result<RawReader, TraceError> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = session
            .dir()
            .join(format!("per_cpu/cpu{cpu}/trace_pipe_raw"));
        let file = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
            .map_err(|e| TraceError::Io(path.clone(), e))?;
        // SAFETY: sysconf has no preconditions.
        let page_size = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .unwrap_or(4096)
            .max(4096);
        Ok(RawReader {
            cpu,
            path,
            file,
            formats,
            pages: Stretches::since(session.started_ns()),
            comms: Default::default(),
            lost_pages: 0,
            bytes: 0,
            page_size,
        })
    }
}

impl CpuReader for RawReader {
    /// The CPU it reads.
    fn cpu(&self) -> usize {
        self.cpu
    }

    /// Reads the pages the kernel has for this CPU now (at most `max_bytes`); returns the bytes.
    fn pump(&mut self, max_bytes: usize) -> Result<usize, TraceError> {
        let mut got = 0;
        let began = crate::rt::clock::now().as_nanos().max(0) as u64;
        while got < max_bytes {
            let mut buf = vec![0u8; self.page_size];
            let n = match self.file.read(&mut buf) {
                Ok(0) => {
                    self.pages.drained_at(began);
                    break;
                }
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    self.pages.drained_at(began);
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(TraceError::Io(self.path.clone(), e)),
            };
            got += n;
            buf.truncate(n);
            let (recs, lost) = records(&buf);
            self.lost_pages += u64::from(lost);
            if let (Some(f), Some(l)) = (recs.first(), recs.last()) {
                let (first_ns, last_ns) = (f.ts_ns, l.ts_ns);
                self.pages.push(first_ns, last_ns, buf);
            }
        }
        self.bytes += got as u64;
        Ok(got)
    }

    /// Pages that said events were lost before them (the reader fell behind the ring).
    fn lost_events(&self) -> u64 {
        self.lost_pages
    }

    /// Bytes read so far.
    fn bytes_read(&self) -> u64 {
        self.bytes
    }

    /// Drops the pages whose events are all older than `ts_ns`.
    fn forget_before(&mut self, ts_ns: u64) {
        self.pages.forget_before(ts_ns);
    }

    /// The kept events with `from_ns <= ts_ns <= to_ns`, decoded, in time order.
    fn window(&self, from_ns: u64, to_ns: u64) -> Window {
        let mut out = Window::default();
        for p in self.pages.overlapping(from_ns, to_ns) {
            for r in records(p).0 {
                if r.ts_ns < from_ns || r.ts_ns > to_ns {
                    continue;
                }
                match self.decode(&r) {
                    Some(e) => out.events.push(e),
                    None => out.skipped += 1,
                }
            }
        }
        out
    }

    fn coverage(&self) -> Coverage {
        self.pages.coverage()
    }
}

impl RawReader {
    fn comm_of(&self, pid: u32) -> String {
        if pid == 0 {
            return "<idle>".into();
        }
        let mut comms = self.comms.borrow_mut();
        comms
            .entry(pid)
            .or_insert_with(|| {
                fs::read_to_string(format!("/proc/{pid}/comm"))
                    .map(|s| s.trim_end().to_string())
                    .unwrap_or_else(|_| "<...>".into())
            })
            .clone()
    }

    fn learn(&self, pid: u32, comm: &str) {
        if pid != 0 {
            self.comms.borrow_mut().insert(pid, comm.to_string());
        }
    }

    fn decode(&self, r: &Record<'_>) -> Option<Event> {
        let d = r.data;
        let id = u16::from_ne_bytes(d.get(0..2)?.try_into().ok()?);
        let pid = i32::from_ne_bytes(d.get(4..8)?.try_into().ok()?).max(0) as u32;
        let dec = self.formats.by_id.get(&id)?;
        let task = |comm: Field, pid: Field, prio: Field| {
            let t = TaskRef {
                comm: cstr(d, comm),
                pid: int(d, pid).max(0) as u32,
                prio: int(d, prio) as i32,
            };
            self.learn(t.pid, &t.comm);
            t
        };
        let kind = match dec {
            Decoder::Switch {
                prev_comm,
                prev_pid,
                prev_prio,
                prev_state,
                next_comm,
                next_pid,
                next_prio,
            } => EventKind::Switch {
                prev: task(*prev_comm, *prev_pid, *prev_prio),
                prev_state: state_letters(int(d, *prev_state)),
                next: task(*next_comm, *next_pid, *next_prio),
            },
            Decoder::Wakeup {
                comm,
                pid,
                prio,
                target_cpu,
                waking,
            } => EventKind::Wakeup {
                task: task(*comm, *pid, *prio),
                target_cpu: int(d, *target_cpu).max(0) as usize,
                waking: *waking,
            },
            Decoder::IrqEntry { irq, name } => EventKind::IrqEntry {
                irq: int(d, *irq) as u32,
                name: data_loc(d, *name),
            },
            Decoder::IrqExit { irq } => EventKind::IrqExit {
                irq: int(d, *irq) as u32,
            },
            Decoder::Softirq { vec, entry } => {
                let v = uint(d, *vec) as usize;
                let vector = SOFTIRQS
                    .get(v)
                    .map_or_else(|| format!("vec{v}"), |s| (*s).to_string());
                if *entry {
                    EventKind::SoftirqEntry { vector }
                } else {
                    EventKind::SoftirqExit { vector }
                }
            }
            Decoder::Vector {
                name,
                vector,
                entry,
            } => {
                let (name, vector) = ((*name).to_string(), int(d, *vector) as u32);
                if *entry {
                    EventKind::VectorEntry { name, vector }
                } else {
                    EventKind::VectorExit { name, vector }
                }
            }
            Decoder::HrtimerEntry {
                hrtimer,
                now,
                function,
            } => EventKind::HrtimerEntry {
                timer: format!("{:016x}", uint(d, *hrtimer)),
                function: self.formats.symbol(uint(d, *function)),
                now_ns: int(d, *now).max(0) as u64,
            },
            Decoder::HrtimerExit { hrtimer } => EventKind::HrtimerExit {
                timer: format!("{:016x}", uint(d, *hrtimer)),
            },
            Decoder::Work { function, start } => {
                let function = self.formats.symbol(uint(d, *function));
                if *start {
                    EventKind::WorkStart { function }
                } else {
                    EventKind::WorkEnd { function }
                }
            }
        };
        Some(Event {
            ts_ns: r.ts_ns,
            cpu: self.cpu,
            comm: self.comm_of(pid),
            pid,
            kind,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_fields() {
        let text = "name: sched_wakeup\nID: 374\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\tfield:__data_loc char[] name;\toffset:12;\tsize:4;\tsigned:0;\n";
        let (id, f) = fields(text);
        assert_eq!(id, Some(374));
        assert_eq!((f["comm"].off, f["comm"].size), (8, 16));
        assert_eq!(f["name"].off, 12);
    }

    #[test]
    fn a_page_of_records_time_extends_and_padding() {
        let mut page = vec![0u8; 4096];
        page[0..8].copy_from_slice(&1_000u64.to_ne_bytes());
        let mut off = 16;
        let mut put = |page: &mut Vec<u8>, words: &[u32]| {
            for w in words {
                page[off..off + 4].copy_from_slice(&w.to_ne_bytes());
                off += 4;
            }
        };
        // A 2-word record 5 ns after the page time.
        put(&mut page, &[(5 << 5) | 2, 0xaaaa, 0xbbbb]);
        // A time extend of (1 << 27) + 3.
        put(&mut page, &[(3 << 5) | 30, 1]);
        // A type-0 record of 12 data bytes (length word 16), 7 ns later.
        put(&mut page, &[7 << 5, 16, 1, 2, 3]);
        // Padding: its length word counts itself and what follows (8 = the word and one more),
        // then one more record.
        put(&mut page, &[(1 << 5) | 29, 8, 0]);
        put(&mut page, &[(2 << 5) | 1, 0xcccc]);
        let size = (off - 16) as u64;
        page[8..16].copy_from_slice(&size.to_ne_bytes());
        let (r, lost) = records(&page);
        assert!(!lost);
        let ts: Vec<u64> = r.iter().map(|r| r.ts_ns).collect();
        let t1 = 1_005;
        let t2 = t1 + (1 << 27) + 3 + 7;
        assert_eq!(ts, vec![t1, t2, t2 + 2]);
        assert_eq!(r[0].data.len(), 8);
        assert_eq!(r[1].data.len(), 12);
        assert_eq!(r[2].data, &0xccccu32.to_ne_bytes());
        page[8..16].copy_from_slice(&(size | MISSED_EVENTS).to_ne_bytes());
        assert!(records(&page).1, "the lost flag");
    }

    #[test]
    fn symbols_and_states() {
        let syms = load_symbols(
            "ffffffff8142caf0 t hrtimer_wakeup\nffffffff81000000 T _stext\n0000000000000000 t hidden\n",
        );
        let f = Formats {
            by_id: HashMap::new(),
            symbols: syms,
        };
        assert_eq!(f.symbol(0xffffffff8142caf0), "hrtimer_wakeup");
        assert_eq!(f.symbol(0xffffffff8142caf4), "hrtimer_wakeup+0x4");
        assert_eq!(state_letters(0), "R");
        assert_eq!(state_letters(1), "S");
        assert_eq!(state_letters(2), "D");
        assert_eq!(state_letters(0x80), "I");
        assert_eq!(
            Formats::load_from(
                Path::new("/nonexistent"),
                "0000000000000000 t hrtimer_wakeup\n"
            )
            .err(),
            Some(FormatError::HiddenSymbols)
        );
    }
}
