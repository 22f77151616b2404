//! Access from any process: list, snapshot, read by name, and the `setp`/`sets` writes the rules allow.
//!
//! Every number that comes out of the segment is validated before it is used as an offset (see `view`),
//! so a foreign, truncated, corrupted or newer segment gives a [`HalError`], never a crash. Every read of
//! the structure happens inside the owner's structure generation (retrying around changes) and is
//! checked across records. A file *shrunk* under the mapping would fault (SIGBUS): the reader checks
//! the file's size before each read and refuses a shrunk one (see `read`).

mod info;
mod view;

use crate::thread::ThreadState;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};

pub use info::{
    ComponentInfo, FunctionInfo, HalSnapshot, ParamInfo, PinInfo, SignalInfo, TableUse, ThreadInfo,
};
pub use view::{HeaderInfo, SegmentState};

use crate::error::{HalError, ObjectKind, Result, WriteRefusal};
use crate::layout::{
    component as c, function as f, param as pa, pin as pi, signal as sg, thread as th, Table,
    LABEL_FIELD,
};
use crate::name::Instance;
use crate::pin::{ParamAccess, PinDir};
use crate::segment::{self, Mapping, Trust};
use crate::stats::{self, HistogramSnapshot, ThreadStatsSnapshot};
use crate::value::{Value, ValueType};
use view::{Counted, Record, View};

/// How a reader maps the segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// `show`, `watch`, `getp`: enough for group members of a group-readable segment.
    ReadOnly,
    /// Needed for `setp`/`sets`.
    ReadWrite,
}

/// Options of a write from another process (`setp`/`sets`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteOptions {
    /// Write NaN or an infinity into a float (refused by default: it poisons every computation that reads
    /// it, and `1e309` becomes infinity without anyone noticing).
    pub force: bool,
}

/// Where [`HalReader::locate`] found a pin, param or signal: its record, valid while the structure
/// generation it was found in lasts (a structural change makes the `_located` calls answer `None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Located {
    generation: u64,
    table: Table,
    index: usize,
}

/// The owner's side of the writers' exclusion inside its own process (LAYOUT.md section 11): its
/// own readers ([`Hal::reader`](crate::Hal::reader)) write under the read side, and the owner takes
/// the write side, with the file lock, around a change that reuses a deleted record's slot.
pub(crate) type WritersGate = Arc<RwLock<()>>;

/// How a reader tells whether the segment's owner is alive.
enum Owner {
    /// A segment of another process: its exclusive `flock` on the file is held exactly while it lives;
    /// this is our own descriptor of that file, to probe it and to take the writers' lock on.
    Locked(OwnedFd),
    /// Our own segment (`Hal::reader`): alive as long as we are; writes take the gate's read side.
    Ourselves(WritersGate),
    /// A copy of the bytes: no owner to ask; the header's pid is the only hint.
    Copy,
}

/// A validated view of a segment, from another process, from the owner itself ([`Hal::reader`](crate::Hal::reader))
/// or from a copy of its bytes.
///
/// Every offset read from the segment is checked before it is followed, so a corrupt, truncated, foreign
/// or newer segment gives a [`HalError`], never a crash or a read outside the mapping. Reading never
/// blocks the owner's real-time threads: values are single atomic loads, stats are seqlock reads that
/// retry on their own side. Writes (`setp`/`sets`) follow HAL's rules and need [`Access::ReadWrite`].
pub struct HalReader {
    v: View,
    owner: Owner,
    /// Writes in progress through this reader's descriptor: the writers' lock belongs to the open
    /// file description, not to a thread, so it is taken by the first and released by the last.
    writers: Mutex<u32>,
}

/// How long a write waits for the writers' lock, which the owner holds only for the few
/// microseconds of a change that reuses a slot: held this long, the owner is stuck mid-change
/// (stopped by a signal? a dead owner's lock is freed by the kernel).
const WRITERS_LOCK_WAIT: std::time::Duration = view::STUCK_CHANGE;

/// The writers' lock held shared for one write through a reader (see [`HalReader::writing`]).
struct SharedWrite<'a> {
    reader: &'a HalReader,
    fd: &'a OwnedFd,
}

impl Drop for SharedWrite<'_> {
    fn drop(&mut self) {
        let mut n = self
            .reader
            .writers
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        *n -= 1;
        if *n == 0 {
            segment::release_writers_lock(self.fd);
        }
    }
}

fn corrupt(reason: impl Into<String>) -> HalError {
    HalError::corrupt(reason)
}

impl HalReader {
    /// Opens `/rtapi-<instance>` of a running owner, trusting segments owned by root or by this process's
    /// effective user ([`Trust::new`]).
    pub fn open(instance: &str, access: Access) -> Result<Self> {
        Self::open_with(instance, access, &Trust::new())
    }

    /// Opens `/rtapi-<instance>`, trusting the owners `trust` names. Refuses with
    /// [`HalError::Untrusted`] a symlink, a non-regular file, a file of another owner, or one whose mode
    /// allows more than `rw-r-----`, before reading a byte of it.
    pub fn open_with(instance: &str, access: Access, trust: &Trust) -> Result<Self> {
        let instance = Instance::new(instance)?;
        let (m, fd) = segment::open(&instance, access == Access::ReadWrite, trust)?;
        let v = View::new(Arc::new(m), &segment::display_path(&instance))?;
        HalReader {
            v,
            owner: Owner::Locked(fd),
            writers: Mutex::new(0),
        }
        .checked()
    }

    /// Reads a copy of a segment's bytes (e.g. saved from `/dev/shm`), for offline inspection. Writes go
    /// to the copy.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let v = View::new(
            Arc::new(Mapping::from_bytes(bytes, true)),
            "the segment copy",
        )?;
        HalReader {
            v,
            owner: Owner::Copy,
            writers: Mutex::new(0),
        }
        .checked()
    }

    /// A reader over the owner's own mapping; its writes take `gate`'s read side.
    pub(crate) fn from_mapping(
        m: Arc<Mapping>,
        instance: Instance,
        gate: WritersGate,
    ) -> Result<Self> {
        let v = View::new(m, &segment::display_path(&instance))?;
        HalReader {
            v,
            owner: Owner::Ourselves(gate),
            writers: Mutex::new(0),
        }
        .checked()
    }

    /// The header as validated at open, with the state as it is now.
    pub fn header(&self) -> HeaderInfo {
        HeaderInfo {
            state: self.v.state(),
            ..self.v.header.clone()
        }
    }

    /// The structure generation now (LAYOUT.md section 7a): even while the structure is consistent,
    /// odd while the owner changes it; it grows by 2 with every structural change, so a tool can tell
    /// that the structure it listed is out of date.
    pub fn generation(&self) -> u64 {
        self.v
            .m
            .word(crate::layout::header::GENERATION)
            .load(Ordering::Acquire)
    }

    /// Whether the owner process is alive. For a segment opened by name this is exact: the owner's
    /// `flock` on the file dies with it however it dies, and pid reuse cannot fool it. A segment of a
    /// dead owner stays (with its last values) until a new owner reclaims it or someone removes it.
    /// For a copy ([`from_bytes`](Self::from_bytes)) it is only whether a process with the header's pid
    /// exists.
    pub fn owner_alive(&self) -> bool {
        match &self.owner {
            Owner::Locked(fd) => segment::lock_held(fd),
            Owner::Ourselves(_) => true,
            Owner::Copy => segment::pid_alive(self.v.header.owner_pid),
        }
    }

    // (decoding lives in `Scan`, below)
}

/// Decoding over one consistent structure (the counts of one generation, see `View::consistent`).
struct Scan<'a, 'b> {
    v: &'a Counted<'b>,
}

impl Scan<'_, '_> {
    fn name_of(&self, t: Table, i: usize) -> Result<String> {
        self.v.copy_record(t, i).name()
    }

    #[allow(dead_code)]
    fn ref_name(&self, target: Table, off: u64, from: Table) -> Result<Option<String>> {
        self.v
            .resolve(target, off, from)?
            .map(|i| self.name_of(target, i))
            .transpose()
    }

    /// The name of a required reference (component of a pin, ...).
    fn required(&self, target: Table, off: u64, from: Table) -> Result<String> {
        self.ref_name(target, off, from)?.ok_or_else(|| {
            corrupt(format!(
                "a {} record has no {}",
                from.as_str(),
                target.as_str()
            ))
        })
    }

    fn value_type(code: u32) -> Result<ValueType> {
        ValueType::from_code(code).ok_or_else(|| corrupt(format!("unknown value type code {code}")))
    }

    /// The cell a pin reads: its signal's when connected.
    fn pin_cell(&self, r: &Record) -> Result<(usize, Option<usize>)> {
        match self
            .v
            .resolve(Table::Signals, r.u64(pi::SIGNAL), Table::Pins)?
        {
            Some(s) => Ok((self.v.record(Table::Signals, s) + sg::VALUE, Some(s))),
            None => Ok((r.offset + pi::VALUE, None)),
        }
    }

    fn component(&self, i: usize) -> Result<ComponentInfo> {
        let r = self.v.copy_record(Table::Components, i);
        Ok(ComponentInfo {
            name: r.name()?,
            pins: r.u32(c::PINS),
            params: r.u32(c::PARAMS),
            functions: r.u32(c::FUNCTIONS),
        })
    }

    fn pin(&self, i: usize) -> Result<PinInfo> {
        let r = self.v.copy_record(Table::Pins, i);
        let ty = Self::value_type(r.u32(pi::TYPE))?;
        let dir = PinDir::from_code(r.u32(pi::DIR))
            .ok_or_else(|| corrupt("unknown pin direction code"))?;
        let (cell, sig) = self.pin_cell(&r)?;
        let name = r.name()?;
        if let Some(s) = sig {
            let sr = self.v.copy_record(Table::Signals, s);
            if Self::value_type(sr.u32(sg::TYPE))? != ty {
                return Err(corrupt(format!(
                    "pin '{name}' ({ty}) is linked to signal '{}' of another type",
                    sr.name()?
                )));
            }
        }
        Ok(PinInfo {
            name,
            ty,
            dir,
            component: self.required(Table::Components, r.u64(pi::COMPONENT), Table::Pins)?,
            signal: sig.map(|s| self.name_of(Table::Signals, s)).transpose()?,
            value: Value::from_bits(ty, self.v.m.load_cell(cell, ty)),
        })
    }

    fn param(&self, i: usize) -> Result<ParamInfo> {
        let r = self.v.copy_record(Table::Params, i);
        let ty = Self::value_type(r.u32(pa::TYPE))?;
        Ok(ParamInfo {
            name: r.name()?,
            ty,
            access: ParamAccess::from_code(r.u32(pa::ACCESS))
                .ok_or_else(|| corrupt("unknown param access code"))?,
            component: self.required(Table::Components, r.u64(pa::COMPONENT), Table::Params)?,
            value: Value::from_bits(ty, self.v.m.load_cell(r.offset + pa::VALUE, ty)),
        })
    }

    fn signal(&self, i: usize) -> Result<SignalInfo> {
        let r = self.v.copy_record(Table::Signals, i);
        let ty = Self::value_type(r.u32(sg::TYPE))?;
        let name = r.name()?;
        let writer = self
            .v
            .resolve(Table::Pins, r.u64(sg::WRITER_PIN), Table::Signals)?;
        if let Some(w) = writer {
            let pr = self.v.copy_record(Table::Pins, w);
            let on = self
                .v
                .resolve(Table::Signals, pr.u64(pi::SIGNAL), Table::Pins)?;
            if pr.u32(pi::DIR) != PinDir::Out as u32 || on != Some(i) {
                return Err(corrupt(format!(
                    "signal '{name}' names writer pin '{}', which is not an OUT pin of it",
                    pr.name()?
                )));
            }
        }
        if r.u32(sg::WRITERS) != u32::from(writer.is_some()) {
            return Err(corrupt(format!(
                "signal '{name}' counts {} writers but its writer_pin says {}",
                r.u32(sg::WRITERS),
                u32::from(writer.is_some())
            )));
        }
        Ok(SignalInfo {
            name,
            ty,
            writer: writer.map(|w| self.name_of(Table::Pins, w)).transpose()?,
            readers: r.u32(sg::READERS),
            bidirs: r.u32(sg::BIDIRS),
            value: Value::from_bits(ty, self.v.m.load_cell(r.offset + sg::VALUE, ty)),
        })
    }

    fn function(&self, i: usize) -> Result<FunctionInfo> {
        let r = self.v.copy_record(Table::Functions, i);
        let name = r.name()?;
        let thread = match self
            .v
            .resolve(Table::Threads, r.u64(f::THREAD), Table::Functions)?
        {
            Some(t) => {
                let pos = r.u32(f::POSITION);
                let listed = self.v.copy_record(Table::Threads, t).u32(th::FUNCTIONS);
                if pos >= listed {
                    return Err(corrupt(format!(
                        "function '{name}' is at position {pos} of a thread that runs {listed}"
                    )));
                }
                Some((self.name_of(Table::Threads, t)?, pos))
            }
            None => None,
        };
        Ok(FunctionInfo {
            component: self.required(Table::Components, r.u64(f::COMPONENT), Table::Functions)?,
            thread,
            timing: stats::read_function(self.v.m, r.offset, &name)?,
            name,
        })
    }

    /// A thread record with its validated stats block `(offset, bin_ns, bins)`.
    fn thread_record(&self, i: usize) -> Result<(Record, String, (usize, u64, usize))> {
        let r = self.v.copy_record(Table::Threads, i);
        let name = r.name()?;
        let off = r.u64(th::STATS);
        let (bin_ns, bins) = self.v.stats_block(off, &name)?;
        Ok((r, name, (off as usize, bin_ns, bins)))
    }

    fn thread(&self, i: usize) -> Result<ThreadInfo> {
        let (r, name, (stats_off, _, bins)) = self.thread_record(i)?;
        let period_ns = r.u64(th::PERIOD_NS);
        let io = self.v.io_section(bins);
        let cpu = r.u32(th::CPU) as i32;
        let state = ThreadState::decode(
            self.v
                .m
                .word(r.offset + th::RUNNING)
                .load(Ordering::Acquire),
        );
        Ok(ThreadInfo {
            period_ns,
            cpu: u32::try_from(cpu).ok(),
            priority: r.u32(th::PRIORITY) as i32,
            flavor: r.text(th::FLAVOR, LABEL_FIELD)?,
            timer: r.text(th::TIMER, LABEL_FIELD)?,
            running: state.is_running(),
            state,
            functions: r.u32(th::FUNCTIONS),
            stats: stats::read_stats(self.v.m, stats_off, period_ns, io, &name)?,
            name,
        })
    }

    fn all<T>(&self, t: Table, one: impl Fn(&Self, usize) -> Result<T>) -> Result<Vec<T>> {
        let mut out = Vec::new();
        for i in 0..self.v.count(t) {
            if !self.v.deleted(t, i)? {
                out.push(one(self, i)?);
            }
        }
        Ok(out)
    }

    /// How full each table is (counts and flags of one generation).
    fn tables(&self) -> Result<Vec<TableUse>> {
        Table::ALL
            .iter()
            .map(|&t| {
                let high_water = self.v.count(t);
                let mut deleted = 0;
                for i in 0..high_water {
                    deleted += usize::from(self.v.deleted(t, i)?);
                }
                Ok(TableUse {
                    table: t.as_str(),
                    capacity: self.v.capacity(t),
                    used: high_water - deleted,
                    deleted,
                    high_water,
                })
            })
            .collect()
    }

    fn find(&self, t: Table, name: &str) -> Result<Option<usize>> {
        for i in 0..self.v.count(t) {
            // The name is compared in place first (no copy of the record, no allocation); a match
            // is then decoded and checked like any name.
            if self.v.name_is(t, i, name) && !self.v.deleted(t, i)? && self.name_of(t, i)? == name {
                return Ok(Some(i));
            }
        }
        Ok(None)
    }

    fn find_or(&self, t: Table, kind: ObjectKind, name: &str) -> Result<usize> {
        self.find(t, name)?.ok_or_else(|| HalError::NotFound {
            kind,
            name: name.to_string(),
        })
    }

    /// The checks that span records (LAYOUT.md section 5, "Consistency"): names unique per namespace
    /// (pins and params share one), every signal's writer/reader/bidir counts equal to its pins, each
    /// thread's run list numbered 0..n exactly once, component counts equal to what they own, stats
    /// blocks apart. Run at open and by `snapshot`.
    fn check(&self) -> Result<()> {
        use std::collections::{HashMap, HashSet};
        let dup = |kind: &str, name: &str| corrupt(format!("two live {kind}s are named '{name}'"));
        let components = self.all(Table::Components, Self::component)?;
        let pins = self.all(Table::Pins, Self::pin)?;
        let params = self.all(Table::Params, Self::param)?;
        let signals = self.all(Table::Signals, Self::signal)?;
        let functions = self.all(Table::Functions, Self::function)?;
        let threads = self.all(Table::Threads, |s, i| {
            s.thread_record(i).map(|x| (x.0, x.1, x.2))
        })?;
        let mut seen = HashSet::new();
        for n in components.iter().map(|c| &c.name) {
            if !seen.insert(n) {
                return Err(dup("component", n));
            }
        }
        let mut seen = HashSet::new();
        for n in pins
            .iter()
            .map(|p| &p.name)
            .chain(params.iter().map(|p| &p.name))
        {
            if !seen.insert(n) {
                return Err(dup("pin or param", n));
            }
        }
        for (kind, names) in [
            (
                "signal",
                signals.iter().map(|x| &x.name).collect::<Vec<_>>(),
            ),
            ("function", functions.iter().map(|x| &x.name).collect()),
            ("thread", threads.iter().map(|x| &x.1).collect()),
        ] {
            let mut seen = HashSet::new();
            for n in names {
                if !seen.insert(n) {
                    return Err(dup(kind, n));
                }
            }
        }
        let mut links: HashMap<&str, (u32, u32, u32)> = HashMap::new();
        for p in &pins {
            if let Some(s) = &p.signal {
                let e = links.entry(s.as_str()).or_default();
                match p.dir {
                    PinDir::Out => e.0 += 1,
                    PinDir::In => e.1 += 1,
                    PinDir::Io => e.2 += 1,
                }
            }
        }
        for s in &signals {
            let have = links.get(s.name.as_str()).copied().unwrap_or_default();
            let says = (u32::from(s.writer.is_some()), s.readers, s.bidirs);
            if have != says {
                return Err(corrupt(format!(
                    "signal '{}' counts {} writer(s), {} reader(s), {} bidir(s) but its pins are {} OUT, \
                     {} IN, {} IO",
                    s.name, says.0, says.1, says.2, have.0, have.1, have.2
                )));
            }
            if have.0 > 0 && have.2 > 0 {
                return Err(corrupt(format!(
                    "signal '{}' has both an OUT pin and IO pins",
                    s.name
                )));
            }
        }
        let mut owned: HashMap<&str, (u32, u32, u32)> = HashMap::new();
        for p in &pins {
            owned.entry(p.component.as_str()).or_default().0 += 1;
        }
        for p in &params {
            owned.entry(p.component.as_str()).or_default().1 += 1;
        }
        for f in &functions {
            owned.entry(f.component.as_str()).or_default().2 += 1;
        }
        for c in &components {
            let have = owned.get(c.name.as_str()).copied().unwrap_or_default();
            if have != (c.pins, c.params, c.functions) {
                return Err(corrupt(format!(
                    "component '{}' counts {} pins, {} params, {} functions but owns {}, {}, {}",
                    c.name, c.pins, c.params, c.functions, have.0, have.1, have.2
                )));
            }
        }
        let mut positions: HashMap<&str, Vec<u32>> = HashMap::new();
        for f in &functions {
            if let Some((t, pos)) = &f.thread {
                positions.entry(t.as_str()).or_default().push(*pos);
            }
        }
        let mut blocks = Vec::new();
        for (r, name, (off, _, bins)) in &threads {
            let mut have = positions.remove(name.as_str()).unwrap_or_default();
            have.sort_unstable();
            // The count is the segment's word, not ours: compared with what the functions table
            // holds before anything is built from it (a count of 2^32-1 is 4 G positions).
            let listed = r.u32(th::FUNCTIONS);
            if listed as usize > functions.len() {
                return Err(corrupt(format!(
                    "thread '{name}' runs {listed} functions but the segment has {}",
                    functions.len()
                )));
            }
            if have.len() != listed as usize || have.iter().zip(0..).any(|(&p, i)| p != i) {
                return Err(corrupt(format!(
                    "thread '{name}' runs {listed} functions but its functions' positions are {have:?}"
                )));
            }
            blocks.push((
                *off,
                *off + crate::layout::stats::size_for(*bins, self.v.version_minor()),
                name,
            ));
        }
        blocks.sort();
        for w in blocks.windows(2) {
            if w[0].1 > w[1].0 {
                return Err(corrupt(format!(
                    "the stats blocks of threads '{}' and '{}' overlap",
                    w[0].2, w[1].2
                )));
            }
        }
        Ok(())
    }
}

impl HalReader {
    /// Runs `f` over one consistent structure (retrying reads that overlapped a structural change).
    ///
    /// A shm file shrunk under a mapping makes every access past its new end fault (SIGBUS, which
    /// would kill this process). The owner never resizes its segment, but anyone who may write the
    /// file (its owner, root) could truncate it; so a reader of a named segment checks the file's
    /// size with `fstat` on its own descriptor before each read and refuses a file now smaller than
    /// its mapping. (A truncation racing with a read in progress cannot be caught this way.)
    fn read<T>(&self, f: impl Fn(&Scan<'_, '_>) -> Result<T>) -> Result<T> {
        if let Owner::Locked(fd) = &self.owner {
            let size = segment::file_size(fd).unwrap_or(0);
            if size < self.v.m.len() as u64 {
                return Err(corrupt(format!(
                    "the segment file shrank to {size} bytes under a mapping of {} bytes",
                    self.v.m.len()
                )));
            }
        }
        self.v.consistent(|c| f(&Scan { v: c }))
    }

    /// [`read`](Self::read) for a write: under the writers' lock, shared (LAYOUT.md section 11),
    /// from before the cell is found until after the store and the generation check, so the owner
    /// cannot give the record's slot to another object in between. A read-only mapping takes no lock
    /// (its stores are refused anyway).
    fn writing<T>(&self, f: impl Fn(&Scan<'_, '_>) -> Result<T>) -> Result<T> {
        if !self.v.m.writable() {
            return self.read(f);
        }
        match &self.owner {
            Owner::Locked(fd) => {
                let _held = self.shared_write(fd)?;
                self.read(f)
            }
            Owner::Ourselves(gate) => {
                let _held = gate.read().unwrap_or_else(|p| p.into_inner());
                self.read(f)
            }
            Owner::Copy => self.read(f),
        }
    }

    /// Takes the writers' lock shared on this reader's descriptor (once for all the writes in
    /// progress through it), waiting out an owner that holds it exclusive.
    fn shared_write<'a>(&'a self, fd: &'a OwnedFd) -> Result<SharedWrite<'a>> {
        let mut n = self.writers.lock().unwrap_or_else(|p| p.into_inner());
        if *n == 0 {
            let start = std::time::Instant::now();
            loop {
                match segment::try_writers_lock(fd, false) {
                    Ok(true) => break,
                    Ok(false) if start.elapsed() > WRITERS_LOCK_WAIT => {
                        return Err(HalError::StructureBusy { stuck: true })
                    }
                    Ok(false) => std::thread::sleep(std::time::Duration::from_micros(20)),
                    Err(source) => {
                        return Err(HalError::Os {
                            op: "fcntl(F_OFD_SETLK)",
                            target: format!("the writers' lock of {}", self.v.header.instance),
                            source,
                        })
                    }
                }
            }
        }
        *n += 1;
        Ok(SharedWrite { reader: self, fd })
    }

    /// Validates the whole structure once (at open).
    fn checked(self) -> Result<Self> {
        self.read(|s| s.check())?;
        Ok(self)
    }

    // ---- listing ----------------------------------------------------------------------------------------

    /// Every component, in registration order. Allocates; for tools, not for an RT thread.
    pub fn components(&self) -> Result<Vec<ComponentInfo>> {
        self.read(|s| s.all(Table::Components, Scan::component))
    }
    /// Every pin with its connection and current value, in registration order.
    pub fn pins(&self) -> Result<Vec<PinInfo>> {
        self.read(|s| s.all(Table::Pins, Scan::pin))
    }
    /// Every param with its current value, in registration order.
    pub fn params(&self) -> Result<Vec<ParamInfo>> {
        self.read(|s| s.all(Table::Params, Scan::param))
    }
    /// Every signal with its connections and current value, in creation order.
    pub fn signals(&self) -> Result<Vec<SignalInfo>> {
        self.read(|s| s.all(Table::Signals, Scan::signal))
    }
    /// Every function with its thread and timing, in registration order.
    pub fn functions(&self) -> Result<Vec<FunctionInfo>> {
        self.read(|s| s.all(Table::Functions, Scan::function))
    }
    /// Every thread with its configuration, state and stats, in registration order.
    pub fn threads(&self) -> Result<Vec<ThreadInfo>> {
        self.read(|s| s.all(Table::Threads, Scan::thread))
    }

    /// How full each table is now: room, live records, tombstones waiting for reuse (one
    /// consistent read).
    pub fn tables(&self) -> Result<Vec<TableUse>> {
        self.read(|s| s.tables())
    }

    /// Everything, for `rtapi show` and `--json`.
    pub fn snapshot(&self) -> Result<HalSnapshot> {
        self.read(|s| {
            s.check()?;
            Ok(HalSnapshot {
                header: self.header(),
                generation: s.v.generation(),
                components: s.all(Table::Components, Scan::component)?,
                pins: s.all(Table::Pins, Scan::pin)?,
                params: s.all(Table::Params, Scan::param)?,
                signals: s.all(Table::Signals, Scan::signal)?,
                functions: s.all(Table::Functions, Scan::function)?,
                threads: s.all(Table::Threads, Scan::thread)?,
                tables: s.tables()?,
            })
        })
    }

    /// Just the pin values, in table order, without names: the cheap path for a display that already
    /// has the names from [`pins`](Self::pins). The two line up only while the structure is unchanged:
    /// compare [`generation`](Self::generation) before and after, and list the pins again if it moved.
    pub fn pin_values(&self) -> Result<Vec<Value>> {
        self.read(|s| {
            s.all(Table::Pins, |s, i| {
                let r = s.v.copy_record(Table::Pins, i);
                let ty = Scan::value_type(r.u32(pi::TYPE))?;
                Ok(Value::from_bits(ty, s.v.m.load_cell(s.pin_cell(&r)?.0, ty)))
            })
        })
    }

    // ---- by name ----------------------------------------------------------------------------------------

    /// The pin called `name` ([`HalError::NotFound`] if none).
    pub fn pin_named(&self, name: &str) -> Result<PinInfo> {
        self.read(|s| s.pin(s.find_or(Table::Pins, ObjectKind::Pin, name)?))
    }
    /// The param called `name` ([`HalError::NotFound`] if none).
    pub fn param_named(&self, name: &str) -> Result<ParamInfo> {
        self.read(|s| s.param(s.find_or(Table::Params, ObjectKind::Param, name)?))
    }
    /// The signal called `name` ([`HalError::NotFound`] if none).
    pub fn signal_named(&self, name: &str) -> Result<SignalInfo> {
        self.read(|s| s.signal(s.find_or(Table::Signals, ObjectKind::Signal, name)?))
    }
    /// The function called `name` ([`HalError::NotFound`] if none).
    pub fn function_named(&self, name: &str) -> Result<FunctionInfo> {
        self.read(|s| s.function(s.find_or(Table::Functions, ObjectKind::Function, name)?))
    }
    /// The thread called `name` ([`HalError::NotFound`] if none).
    pub fn thread_named(&self, name: &str) -> Result<ThreadInfo> {
        self.read(|s| s.thread(s.find_or(Table::Threads, ObjectKind::Thread, name)?))
    }

    /// The value of a pin, param or signal (`getp`; pins and params first, like halcmd).
    pub fn get(&self, name: &str) -> Result<Value> {
        self.read(|s| {
            if let Some(i) = s.find(Table::Pins, name)? {
                return Ok(s.pin(i)?.value);
            }
            if let Some(i) = s.find(Table::Params, name)? {
                return Ok(s.param(i)?.value);
            }
            if let Some(i) = s.find(Table::Signals, name)? {
                return Ok(s.signal(i)?.value);
            }
            Err(HalError::NotFound {
                kind: ObjectKind::Any,
                name: name.to_string(),
            })
        })
    }

    /// A consistent copy of a thread's stats (one seqlock read: all fields from the same period). Fails
    /// with [`HalError::Busy`] only if the writer stayed mid-update far longer than a real one takes.
    pub fn thread_stats(&self, thread: &str) -> Result<ThreadStatsSnapshot> {
        let (period, name, off, bins) = self.read(|s| {
            let (r, name, (off, _, bins)) =
                s.thread_record(s.find_or(Table::Threads, ObjectKind::Thread, thread)?)?;
            Ok((r.u64(th::PERIOD_NS), name, off, bins))
        })?;
        stats::read_stats(&self.v.m, off, period, self.v.io_section(bins), &name)
    }

    /// The spikes `thread` recorded since the reader last saw `since` spikes in total (0 at first),
    /// oldest first, from the ring of the latest [`RECENT_SPIKES`](crate::RECENT_SPIKES) (layout 1.3).
    /// A reader that calls it often enough sees every spike; the ones it was too slow for are counted
    /// in [`RecentSpikes::lost`](crate::RecentSpikes::lost).
    pub fn spikes_since(&self, thread: &str, since: u64) -> Result<crate::RecentSpikes> {
        let (name, off, bins) = self.read(|s| {
            let (_, name, (off, _, bins)) =
                s.thread_record(s.find_or(Table::Threads, ObjectKind::Thread, thread)?)?;
            Ok((name, off, bins))
        })?;
        stats::read_recent(&self.v.m, off, bins, since, &name)
    }

    /// A thread's latency histogram. The bins are independent counters read one by one, so their sum may
    /// be a period ahead of or behind [`thread_stats`](Self::thread_stats)' cycle count.
    pub fn histogram(&self, thread: &str) -> Result<HistogramSnapshot> {
        let (off, bin_ns, bins) = self.read(|s| {
            Ok(
                s.thread_record(s.find_or(Table::Threads, ObjectKind::Thread, thread)?)?
                    .2,
            )
        })?;
        Ok(stats::read_histogram(&self.v.m, off, bin_ns, bins))
    }

    /// A thread's I/O-time histogram (layout 2.2: `None` from an older segment), the bins of its
    /// latency histogram's width; independent counters like [`histogram`](Self::histogram)'s.
    pub fn io_histogram(&self, thread: &str) -> Result<Option<HistogramSnapshot>> {
        let (off, bin_ns, bins) = self.read(|s| {
            Ok(
                s.thread_record(s.find_or(Table::Threads, ObjectKind::Thread, thread)?)?
                    .2,
            )
        })?;
        Ok(self
            .v
            .io_section(bins)
            .map(|io| stats::read_io_histogram(&self.v.m, off, io.section, bin_ns, bins)))
    }

    // ---- writes -----------------------------------------------------------------------------------------

    fn store(&self, name: &str, cell: usize, value: Value) -> Result<Value> {
        if !self.v.m.writable() {
            return Err(HalError::NotWritable {
                name: name.to_string(),
                reason: WriteRefusal::ReadOnlyMapping,
            });
        }
        if let Owner::Locked(fd) = &self.owner {
            if !segment::lock_held(fd) {
                return Err(HalError::OwnerGone {
                    instance: self.v.header.instance.clone(),
                    pid: self.v.header.owner_pid,
                });
            }
        }
        self.v
            .m
            .store_cell(cell, value.value_type(), value.to_bits());
        Ok(value)
    }

    /// Parses `text` as `ty`; refuses a non-finite float unless forced.
    fn parse(ty: ValueType, name: &str, text: &str, opts: WriteOptions) -> Result<Value> {
        let value = Value::parse(ty, text, name)?;
        match value {
            Value::Float(f) if !f.is_finite() && !opts.force => Err(HalError::NonFinite {
                name: name.to_string(),
                text: text.to_string(),
            }),
            _ => Ok(value),
        }
    }

    /// `setp NAME VALUE`: sets a RW param or an unconnected IN/IO pin; refuses the rest with the reason,
    /// and NaN or infinite floats ([`HalError::NonFinite`]). Returns the value written.
    pub fn setp(&self, name: &str, text: &str) -> Result<Value> {
        self.setp_with(name, text, WriteOptions::default())
    }

    /// [`setp`](Self::setp) with options (`force`: also write NaN or an infinity).
    pub fn setp_with(&self, name: &str, text: &str, opts: WriteOptions) -> Result<Value> {
        self.writing(|s| self.setp_in(s, name, text, opts))
    }

    fn setp_in(
        &self,
        s: &Scan<'_, '_>,
        name: &str,
        text: &str,
        opts: WriteOptions,
    ) -> Result<Value> {
        let refuse = |reason| {
            Err(HalError::NotWritable {
                name: name.to_string(),
                reason,
            })
        };
        if let Some(i) = s.find(Table::Pins, name)? {
            let p = s.pin(i)?;
            if p.dir == PinDir::Out {
                return refuse(WriteRefusal::OutputPin {
                    component: p.component,
                });
            }
            if let Some(signal) = p.signal {
                return refuse(WriteRefusal::ConnectedPin { signal });
            }
            let value = Self::parse(p.ty, name, text, opts)?;
            return self.store(name, s.v.record(Table::Pins, i) + pi::VALUE, value);
        }
        if let Some(i) = s.find(Table::Params, name)? {
            let p = s.param(i)?;
            if p.access == ParamAccess::Ro {
                return refuse(WriteRefusal::ReadOnlyParam);
            }
            let value = Self::parse(p.ty, name, text, opts)?;
            return self.store(name, s.v.record(Table::Params, i) + pa::VALUE, value);
        }
        Err(HalError::NotFound {
            kind: ObjectKind::PinOrParam,
            name: name.to_string(),
        })
    }

    /// A user-space component's write of one of its own pins or params (LAYOUT.md section 11a): an
    /// OUT or IO pin is written where the component's own code would write it — its signal's cell
    /// when linked, else its own; an IN pin only while unconnected (as `setp`); a param whatever its
    /// access. A pin or param of another component is refused with
    /// [`WriteRefusal::OtherComponent`]. `text` is parsed as for `setp` (NaN and infinities need
    /// `force`). Returns the value written.
    pub fn write_own(
        &self,
        component: &str,
        name: &str,
        text: &str,
        opts: WriteOptions,
    ) -> Result<Value> {
        self.writing(|s| self.write_own_at(s, component, name, text, opts, None))
    }

    /// [`write_own`](Self::write_own) at a place [`locate`](Self::locate) found: `Ok(None)` if the
    /// structure changed since (locate again).
    pub fn write_own_located(
        &self,
        component: &str,
        at: &Located,
        name: &str,
        text: &str,
        opts: WriteOptions,
    ) -> Result<Option<Value>> {
        self.writing(|s| {
            if !self.still(s, at)? {
                return Ok(None);
            }
            self.write_own_at(s, component, name, text, opts, Some((at.table, at.index)))
                .map(Some)
        })
    }

    fn write_own_at(
        &self,
        s: &Scan<'_, '_>,
        component: &str,
        name: &str,
        text: &str,
        opts: WriteOptions,
        found: Option<(Table, usize)>,
    ) -> Result<Value> {
        let refuse = |reason| {
            Err(HalError::NotWritable {
                name: name.to_string(),
                reason,
            })
        };
        let mine = |owner: String| {
            if owner == component {
                Ok(())
            } else {
                Err(HalError::NotWritable {
                    name: name.to_string(),
                    reason: WriteRefusal::OtherComponent {
                        owner,
                        writer: component.to_string(),
                    },
                })
            }
        };
        let at = |t: Table| -> Result<Option<usize>> {
            match found {
                Some((ft, i)) if ft == t => Ok(Some(i)),
                Some(_) => Ok(None),
                None => s.find(t, name),
            }
        };
        if let Some(i) = at(Table::Pins)? {
            let p = s.pin(i)?;
            mine(p.component)?;
            if p.dir == PinDir::In {
                if let Some(signal) = p.signal {
                    return refuse(WriteRefusal::ConnectedPin { signal });
                }
            }
            let value = Self::parse(p.ty, name, text, opts)?;
            let r = s.v.copy_record(Table::Pins, i);
            let cell = s.pin_cell(&r)?.0;
            let written = self.store(name, cell, value)?;
            // The store and the generation check after this closure must not pass each other:
            // a link that moved the pin to another cell after our store makes `read` run the
            // closure again, storing into the new cell.
            std::sync::atomic::fence(Ordering::SeqCst);
            return Ok(written);
        }
        if let Some(i) = at(Table::Params)? {
            let p = s.param(i)?;
            mine(p.component)?;
            let value = Self::parse(p.ty, name, text, opts)?;
            return self.store(name, s.v.record(Table::Params, i) + pa::VALUE, value);
        }
        Err(HalError::NotFound {
            kind: ObjectKind::PinOrParam,
            name: name.to_string(),
        })
    }

    // ---- repeated access by name ------------------------------------------------------------------------

    /// Finds a pin, param or signal (in [`get`](Self::get)'s order) once, for repeated reads and
    /// writes without searching the names again ([`get_located`](Self::get_located),
    /// [`write_own_located`](Self::write_own_located)) while the structure does not change.
    pub fn locate(&self, name: &str) -> Result<Located> {
        self.read(|s| {
            let generation = self.generation();
            for table in [Table::Pins, Table::Params, Table::Signals] {
                if let Some(index) = s.find(table, name)? {
                    return Ok(Located {
                        generation,
                        table,
                        index,
                    });
                }
            }
            Err(HalError::NotFound {
                kind: ObjectKind::Any,
                name: name.to_string(),
            })
        })
    }

    /// Whether `at` still names the same record: the structure generation it was found in lasts.
    fn still(&self, s: &Scan<'_, '_>, at: &Located) -> Result<bool> {
        Ok(self.generation() == at.generation
            && at.index < s.v.count(at.table)
            && !s.v.deleted(at.table, at.index)?)
    }

    /// The value at a place [`locate`](Self::locate) found: `Ok(None)` if the structure changed
    /// since (locate again).
    pub fn get_located(&self, at: &Located) -> Result<Option<Value>> {
        self.read(|s| {
            if !self.still(s, at)? {
                return Ok(None);
            }
            let i = at.index;
            Ok(Some(match at.table {
                Table::Pins => {
                    let r = s.v.copy_record(Table::Pins, i);
                    let ty = Scan::value_type(r.u32(pi::TYPE))?;
                    Value::from_bits(ty, s.v.m.load_cell(s.pin_cell(&r)?.0, ty))
                }
                Table::Params => s.param(i)?.value,
                _ => s.signal(i)?.value,
            }))
        })
    }

    /// `sets SIGNAL VALUE`: sets a signal that has no OUT pin driving it (a finite value, for a float).
    /// Returns the value written.
    pub fn sets(&self, name: &str, text: &str) -> Result<Value> {
        self.sets_with(name, text, WriteOptions::default())
    }

    /// [`sets`](Self::sets) with options (`force`: also write NaN or an infinity).
    pub fn sets_with(&self, name: &str, text: &str, opts: WriteOptions) -> Result<Value> {
        self.writing(|s| {
            let i = s.find_or(Table::Signals, ObjectKind::Signal, name)?;
            let sig = s.signal(i)?;
            if let Some(writer) = sig.writer {
                return Err(HalError::NotWritable {
                    name: name.to_string(),
                    reason: WriteRefusal::SignalHasWriter { writer },
                });
            }
            let value = Self::parse(sig.ty, name, text, opts)?;
            self.store(name, s.v.record(Table::Signals, i) + sg::VALUE, value)
        })
    }
}
