//! What a reader returns: plain owned copies, safe to keep after the segment is gone.

use crate::pin::{ParamAccess, PinDir};
use crate::stats::{FunctionTiming, ThreadStatsSnapshot};
use crate::value::{Value, ValueType};

use super::view::HeaderInfo;

/// A component as registered, with how many objects it owns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentInfo {
    /// Its HAL name, e.g. `pid.0`.
    pub name: String,
    /// Number of pins it registered.
    pub pins: u32,
    /// Number of params it registered.
    pub params: u32,
    /// Number of functions it registered.
    pub functions: u32,
}

/// A pin: its declaration, its connection and its value at the time of the read.
#[derive(Debug, Clone, PartialEq)]
pub struct PinInfo {
    /// Its HAL name, e.g. `pid.0.command`.
    pub name: String,
    /// Its value type.
    pub ty: ValueType,
    /// IN, OUT or IO.
    pub dir: PinDir,
    /// The component that owns it.
    pub component: String,
    /// The signal it is connected to, if any.
    pub signal: Option<String>,
    /// The value it reads or writes now (its signal's value when connected).
    pub value: Value,
}

/// A param: its declaration and its value at the time of the read.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamInfo {
    /// Its HAL name, e.g. `pid.0.Pgain`.
    pub name: String,
    /// Its value type.
    pub ty: ValueType,
    /// Whether other processes may write it (`setp`).
    pub access: ParamAccess,
    /// The component that owns it.
    pub component: String,
    /// Its value now.
    pub value: Value,
}

/// A signal: its connections and its value at the time of the read.
#[derive(Debug, Clone, PartialEq)]
pub struct SignalInfo {
    /// Its HAL name.
    pub name: String,
    /// Its value type (every pin on it has this type).
    pub ty: ValueType,
    /// The OUT pin driving it, if any.
    pub writer: Option<String>,
    /// Number of IN pins reading it.
    pub readers: u32,
    /// Number of IO pins on it.
    pub bidirs: u32,
    /// Its value now.
    pub value: Value,
}

/// A function: where it runs and how long it takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionInfo {
    /// Its HAL name, e.g. `pid.0.do-pid-calcs`.
    pub name: String,
    /// The component that owns it.
    pub component: String,
    /// `(thread, position in its run order)` once added with `addf`.
    pub thread: Option<(String, u32)>,
    /// Its execution times, as its thread last recorded them.
    pub timing: FunctionTiming,
}

/// A thread: its configuration, its state and its statistics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadInfo {
    /// Its HAL name, e.g. `servo`.
    pub name: String,
    /// Its period in ns.
    pub period_ns: u64,
    /// The CPU it is pinned to, if any.
    pub cpu: Option<u32>,
    /// Its `SCHED_FIFO` priority (0 under the `sim` flavor).
    pub priority: i32,
    /// The runtime flavor it runs under: `rt-preempt`, `posix` or `sim`.
    pub flavor: String,
    /// The timer driver that wakes it, e.g. `nanosleep`.
    pub timer: String,
    /// Whether the loop exists (running or stalled): `state.is_running()`.
    pub running: bool,
    /// Running, stalled (and where) or stopped.
    pub state: crate::thread::ThreadState,
    /// Number of functions added to it.
    pub functions: u32,
    /// Its statistics, one consistent copy.
    pub stats: ThreadStatsSnapshot,
}

/// How much of one table's room is in use (LAYOUT.md sections 4 and 5): what `rtapi show` prints as
/// the room left. The room is fixed when the segment is created; a deleted record's slot is given to
/// a later record of the same table (layout 2.1), so deleting frees room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableUse {
    /// The table, e.g. `pin`.
    pub table: &'static str,
    /// Records it has room for.
    pub capacity: usize,
    /// Live records in it now.
    pub used: usize,
    /// Deleted records (tombstones) whose slots wait for a new record.
    pub deleted: usize,
    /// Slots ever written (the table's `count`: live and deleted records).
    pub high_water: usize,
}

impl TableUse {
    /// Records that can still be added: the room not used by a live record.
    pub fn free(&self) -> usize {
        self.capacity - self.used
    }
}

/// Everything at once (each part consistent on its own; values keep changing between parts).
#[derive(Debug, Clone, PartialEq)]
pub struct HalSnapshot {
    /// The segment header.
    pub header: HeaderInfo,
    /// The structure generation the snapshot was read in (even; LAYOUT.md section 7a): two
    /// snapshots with the same generation list the same objects.
    pub generation: u64,
    /// Every component, in table order (registration order, but that a new object takes the place of
    /// a deleted one).
    pub components: Vec<ComponentInfo>,
    /// Every pin, in registration order.
    pub pins: Vec<PinInfo>,
    /// Every param, in registration order.
    pub params: Vec<ParamInfo>,
    /// Every signal, in creation order.
    pub signals: Vec<SignalInfo>,
    /// Every function, in registration order.
    pub functions: Vec<FunctionInfo>,
    /// Every thread, in registration order.
    pub threads: Vec<ThreadInfo>,
    /// How full each table is, in header order (components, pins, params, signals, functions,
    /// threads).
    pub tables: Vec<TableUse>,
}
