//! What a reader returns: plain owned copies, safe to keep after the segment is gone.

use crate::pin::{ParamAccess, PinDir};
use crate::stats::{FunctionTiming, ThreadStatsSnapshot};
use crate::value::{Value, ValueType};

use super::view::HeaderInfo;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentInfo {
    pub name: String,
    pub pins: u32,
    pub params: u32,
    pub functions: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PinInfo {
    pub name: String,
    pub ty: ValueType,
    pub dir: PinDir,
    pub component: String,
    /// The signal it is connected to, if any.
    pub signal: Option<String>,
    /// The value it reads or writes now (its signal's value when connected).
    pub value: Value,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ParamInfo {
    pub name: String,
    pub ty: ValueType,
    pub access: ParamAccess,
    pub component: String,
    pub value: Value,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SignalInfo {
    pub name: String,
    pub ty: ValueType,
    /// The OUT pin driving it, if any.
    pub writer: Option<String>,
    pub readers: u32,
    pub bidirs: u32,
    pub value: Value,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionInfo {
    pub name: String,
    pub component: String,
    /// `(thread, position in its run order)` once added with `addf`.
    pub thread: Option<(String, u32)>,
    pub timing: FunctionTiming,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadInfo {
    pub name: String,
    pub period_ns: u64,
    pub cpu: Option<u32>,
    pub priority: i32,
    pub flavor: String,
    pub timer: String,
    /// Whether the loop exists (running or stalled): `state.is_running()`.
    pub running: bool,
    /// Running, stalled (and where) or stopped.
    pub state: crate::thread::ThreadState,
    pub functions: u32,
    pub stats: ThreadStatsSnapshot,
}

/// Everything at once (each part consistent on its own; values keep changing between parts).
#[derive(Debug, Clone, PartialEq)]
pub struct HalSnapshot {
    pub header: HeaderInfo,
    pub components: Vec<ComponentInfo>,
    pub pins: Vec<PinInfo>,
    pub params: Vec<ParamInfo>,
    pub signals: Vec<SignalInfo>,
    pub functions: Vec<FunctionInfo>,
    pub threads: Vec<ThreadInfo>,
}
