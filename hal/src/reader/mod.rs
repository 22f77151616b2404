//! Access from any process: list, snapshot, read by name, and the `setp`/`sets` writes the rules allow.
//!
//! Every number that comes out of the segment is validated before it is used as an offset (see `view`),
//! so a foreign, truncated, corrupted or newer segment gives a [`HalError`], never a crash. The one thing
//! no reader can defend against is the file being *shrunk* under a live mapping (the kernel then raises
//! SIGBUS); only the owner could do that, and it never resizes.

mod info;
mod view;

use crate::thread::ThreadState;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub use info::{
    ComponentInfo, FunctionInfo, HalSnapshot, ParamInfo, PinInfo, SignalInfo, ThreadInfo,
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
use view::{Record, View};

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

/// How a reader tells whether the segment's owner is alive.
enum Owner {
    /// A segment of another process: its exclusive `flock` on the file is held exactly while it lives;
    /// this is our own descriptor of that file, to probe it.
    Locked(OwnedFd),
    /// Our own segment (`Hal::reader`): alive as long as we are.
    Ourselves,
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
        Ok(HalReader {
            v,
            owner: Owner::Locked(fd),
        })
    }

    /// Reads a copy of a segment's bytes (e.g. saved from `/dev/shm`), for offline inspection. Writes go
    /// to the copy.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let v = View::new(
            Arc::new(Mapping::from_bytes(bytes, true)),
            "the segment copy",
        )?;
        Ok(HalReader {
            v,
            owner: Owner::Copy,
        })
    }

    /// A reader over the owner's own mapping.
    pub(crate) fn from_mapping(m: Arc<Mapping>, instance: Instance) -> Result<Self> {
        let v = View::new(m, &segment::display_path(&instance))?;
        Ok(HalReader {
            v,
            owner: Owner::Ourselves,
        })
    }

    /// The header as validated at open, with the state as it is now.
    pub fn header(&self) -> HeaderInfo {
        HeaderInfo {
            state: self.v.state(),
            ..self.v.header.clone()
        }
    }

    /// Whether the owner process is alive. For a segment opened by name this is exact: the owner's
    /// `flock` on the file dies with it however it dies, and pid reuse cannot fool it. A segment of a
    /// dead owner stays (with its last values) until a new owner reclaims it or someone removes it.
    /// For a copy ([`from_bytes`](Self::from_bytes)) it is only whether a process with the header's pid
    /// exists.
    pub fn owner_alive(&self) -> bool {
        match &self.owner {
            Owner::Locked(fd) => segment::lock_held(fd),
            Owner::Ourselves => true,
            Owner::Copy => segment::pid_alive(self.v.header.owner_pid),
        }
    }

    // ---- decoding helpers -------------------------------------------------------------------------------

    fn name_of(&self, t: Table, i: usize) -> Result<String> {
        self.v.copy_record(t, i).name()
    }

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
        Ok(PinInfo {
            name: r.name()?,
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
        Ok(SignalInfo {
            name: r.name()?,
            ty,
            writer: self.ref_name(Table::Pins, r.u64(sg::WRITER_PIN), Table::Signals)?,
            readers: r.u32(sg::READERS),
            bidirs: r.u32(sg::BIDIRS),
            value: Value::from_bits(ty, self.v.m.load_cell(r.offset + sg::VALUE, ty)),
        })
    }

    fn function(&self, i: usize) -> Result<FunctionInfo> {
        let r = self.v.copy_record(Table::Functions, i);
        let name = r.name()?;
        let thread = self
            .ref_name(Table::Threads, r.u64(f::THREAD), Table::Functions)?
            .map(|t| (t, r.u32(f::POSITION)));
        Ok(FunctionInfo {
            component: self.required(Table::Components, r.u64(f::COMPONENT), Table::Functions)?,
            thread,
            timing: stats::read_function(&self.v.m, r.offset, &name)?,
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
        let (r, name, (stats_off, _, _)) = self.thread_record(i)?;
        let period_ns = r.u64(th::PERIOD_NS);
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
            stats: stats::read_stats(&self.v.m, stats_off, period_ns, &name)?,
            name,
        })
    }

    fn all<T>(&self, t: Table, one: impl Fn(&Self, usize) -> Result<T>) -> Result<Vec<T>> {
        (0..self.v.count(t)).map(|i| one(self, i)).collect()
    }

    fn find(&self, t: Table, name: &str) -> Result<Option<usize>> {
        for i in 0..self.v.count(t) {
            if self.name_of(t, i)? == name {
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

    // ---- listing ----------------------------------------------------------------------------------------

    /// Every component, in registration order. Allocates; for tools, not for an RT thread.
    pub fn components(&self) -> Result<Vec<ComponentInfo>> {
        self.all(Table::Components, Self::component)
    }
    /// Every pin with its connection and current value, in registration order.
    pub fn pins(&self) -> Result<Vec<PinInfo>> {
        self.all(Table::Pins, Self::pin)
    }
    /// Every param with its current value, in registration order.
    pub fn params(&self) -> Result<Vec<ParamInfo>> {
        self.all(Table::Params, Self::param)
    }
    /// Every signal with its connections and current value, in creation order.
    pub fn signals(&self) -> Result<Vec<SignalInfo>> {
        self.all(Table::Signals, Self::signal)
    }
    /// Every function with its thread and timing, in registration order.
    pub fn functions(&self) -> Result<Vec<FunctionInfo>> {
        self.all(Table::Functions, Self::function)
    }
    /// Every thread with its configuration, state and stats, in registration order.
    pub fn threads(&self) -> Result<Vec<ThreadInfo>> {
        self.all(Table::Threads, Self::thread)
    }

    /// Everything, for `rtapi show` and `--json`.
    pub fn snapshot(&self) -> Result<HalSnapshot> {
        Ok(HalSnapshot {
            header: self.header(),
            components: self.components()?,
            pins: self.pins()?,
            params: self.params()?,
            signals: self.signals()?,
            functions: self.functions()?,
            threads: self.threads()?,
        })
    }

    /// Just the pin values, in table order, without names: the cheap path for a display that already
    /// has the names from [`pins`](Self::pins).
    pub fn pin_values(&self) -> Result<Vec<Value>> {
        (0..self.v.count(Table::Pins))
            .map(|i| {
                let r = self.v.copy_record(Table::Pins, i);
                let ty = Self::value_type(r.u32(pi::TYPE))?;
                Ok(Value::from_bits(
                    ty,
                    self.v.m.load_cell(self.pin_cell(&r)?.0, ty),
                ))
            })
            .collect()
    }

    // ---- by name ----------------------------------------------------------------------------------------

    /// The pin called `name` ([`HalError::NotFound`] if none).
    pub fn pin_named(&self, name: &str) -> Result<PinInfo> {
        self.pin(self.find_or(Table::Pins, ObjectKind::Pin, name)?)
    }
    /// The param called `name` ([`HalError::NotFound`] if none).
    pub fn param_named(&self, name: &str) -> Result<ParamInfo> {
        self.param(self.find_or(Table::Params, ObjectKind::Param, name)?)
    }
    /// The signal called `name` ([`HalError::NotFound`] if none).
    pub fn signal_named(&self, name: &str) -> Result<SignalInfo> {
        self.signal(self.find_or(Table::Signals, ObjectKind::Signal, name)?)
    }
    /// The function called `name` ([`HalError::NotFound`] if none).
    pub fn function_named(&self, name: &str) -> Result<FunctionInfo> {
        self.function(self.find_or(Table::Functions, ObjectKind::Function, name)?)
    }
    /// The thread called `name` ([`HalError::NotFound`] if none).
    pub fn thread_named(&self, name: &str) -> Result<ThreadInfo> {
        self.thread(self.find_or(Table::Threads, ObjectKind::Thread, name)?)
    }

    /// The value of a pin, param or signal (`getp`; pins and params first, like halcmd).
    pub fn get(&self, name: &str) -> Result<Value> {
        if let Some(i) = self.find(Table::Pins, name)? {
            return Ok(self.pin(i)?.value);
        }
        if let Some(i) = self.find(Table::Params, name)? {
            return Ok(self.param(i)?.value);
        }
        if let Some(i) = self.find(Table::Signals, name)? {
            return Ok(self.signal(i)?.value);
        }
        Err(HalError::NotFound {
            kind: ObjectKind::Any,
            name: name.to_string(),
        })
    }

    /// A consistent copy of a thread's stats (one seqlock read: all fields from the same period). Fails
    /// with [`HalError::Busy`] only if the writer stayed mid-update far longer than a real one takes.
    pub fn thread_stats(&self, thread: &str) -> Result<ThreadStatsSnapshot> {
        let (r, name, (off, _, _)) =
            self.thread_record(self.find_or(Table::Threads, ObjectKind::Thread, thread)?)?;
        stats::read_stats(&self.v.m, off, r.u64(th::PERIOD_NS), &name)
    }

    /// The spikes `thread` recorded since the reader last saw `since` spikes in total (0 at first),
    /// oldest first, from the ring of the latest [`RECENT_SPIKES`](crate::RECENT_SPIKES) (layout 1.3).
    /// A reader that calls it often enough sees every spike; the ones it was too slow for are counted
    /// in [`RecentSpikes::lost`](crate::RecentSpikes::lost).
    pub fn spikes_since(&self, thread: &str, since: u64) -> Result<crate::RecentSpikes> {
        let (_, name, (off, _, bins)) =
            self.thread_record(self.find_or(Table::Threads, ObjectKind::Thread, thread)?)?;
        stats::read_recent(&self.v.m, off, bins, since, &name)
    }

    /// A thread's latency histogram. The bins are independent counters read one by one, so their sum may
    /// be a period ahead of or behind [`thread_stats`](Self::thread_stats)' cycle count.
    pub fn histogram(&self, thread: &str) -> Result<HistogramSnapshot> {
        let (_, _, (off, bin_ns, bins)) =
            self.thread_record(self.find_or(Table::Threads, ObjectKind::Thread, thread)?)?;
        Ok(stats::read_histogram(&self.v.m, off, bin_ns, bins))
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
        let refuse = |reason| {
            Err(HalError::NotWritable {
                name: name.to_string(),
                reason,
            })
        };
        if let Some(i) = self.find(Table::Pins, name)? {
            let p = self.pin(i)?;
            if p.dir == PinDir::Out {
                return refuse(WriteRefusal::OutputPin {
                    component: p.component,
                });
            }
            if let Some(signal) = p.signal {
                return refuse(WriteRefusal::ConnectedPin { signal });
            }
            let value = Self::parse(p.ty, name, text, opts)?;
            return self.store(name, self.v.record(Table::Pins, i) + pi::VALUE, value);
        }
        if let Some(i) = self.find(Table::Params, name)? {
            let p = self.param(i)?;
            if p.access == ParamAccess::Ro {
                return refuse(WriteRefusal::ReadOnlyParam);
            }
            let value = Self::parse(p.ty, name, text, opts)?;
            return self.store(name, self.v.record(Table::Params, i) + pa::VALUE, value);
        }
        Err(HalError::NotFound {
            kind: ObjectKind::PinOrParam,
            name: name.to_string(),
        })
    }

    /// `sets SIGNAL VALUE`: sets a signal that has no OUT pin driving it (a finite value, for a float).
    /// Returns the value written.
    pub fn sets(&self, name: &str, text: &str) -> Result<Value> {
        self.sets_with(name, text, WriteOptions::default())
    }

    /// [`sets`](Self::sets) with options (`force`: also write NaN or an infinity).
    pub fn sets_with(&self, name: &str, text: &str, opts: WriteOptions) -> Result<Value> {
        let i = self.find_or(Table::Signals, ObjectKind::Signal, name)?;
        let s = self.signal(i)?;
        if let Some(writer) = s.writer {
            return Err(HalError::NotWritable {
                name: name.to_string(),
                reason: WriteRefusal::SignalHasWriter { writer },
            });
        }
        let value = Self::parse(s.ty, name, text, opts)?;
        self.store(name, self.v.record(Table::Signals, i) + sg::VALUE, value)
    }
}
