//! The master's process-wide state, all of it in one place.
//!
//! Why process-wide at all: LinuxCNC's modules reach the master only through the C interface
//! (`rtapi_shmem_new(key, …)`, `rtapi_task_start(id, …)`, `rtapi_clock_set_period(ns)`,
//! `rtapi_is_realtime()`, `rtapi_exit(module)`), and those calls carry no context — no handle of
//! the master to find its state by, only keys, ids and numbers. And there is one master per
//! process: the master process is one LinuxCNC instance's `rtapi_app`, its modules and segments live
//! until it exits, and its shutdown must still find them after a module's call panicked (the locks
//! ignore poisoning: `crate::rt::lock`). So the state is one `static`, made empty at compile time
//! (no constructor runs before `main`), filled by the master's `main` and its commands.
//!
//! Not here, and why: the calling thread's task id (`capi`'s `SELF_ID`) is per thread by nature
//! (`rtapi_task_self` answers for the thread that asks, on the RT path: a thread-local read); the
//! C interface's choice of host (`components::linuxcnc::personality`) lives in the layer below,
//! which must not name the master.

use std::sync::atomic::{AtomicI32, AtomicI64};
use std::sync::{Mutex, OnceLock};

use super::capi::TaskRec;
use super::lcnc_health::LcncHealth;
use super::shmem::{Segment, ShmConfig};
use super::{MasterConfig, Module};
use crate::runtime::hosted::HostedThreads;

/// See the module docs.
pub(super) struct State {
    /// Set once by the master's main; read by calls with no context (`rtapi_is_realtime`).
    pub(super) config: OnceLock<MasterConfig>,
    /// Loaded modules in load order; `hal_lib` first (not counted).
    pub(super) modules: Mutex<Vec<Module>>,
    /// How segments are made: set once by the master's main, before any module.
    pub(super) shm_config: OnceLock<ShmConfig>,
    /// The segments by handle (handle = index + 1): the C calls carry only the handle.
    pub(super) segments: Mutex<Vec<Option<Segment>>>,
    /// Every segment (key, id) this master attached, for the removal at exit: outlives every
    /// module.
    pub(super) session_segments: Mutex<Vec<(i32, i32)>>,
    /// The instance whose threads the tasks run on: opened before hal_lib is loaded.
    pub(super) hosted: Mutex<Option<HostedThreads>>,
    /// The threads' health pins in LinuxCNC's HAL.
    pub(super) health: Mutex<Option<LcncHealth>>,
    /// The tasks by id (id = index + 1): `rtapi_task_start(id)` carries only the id.
    pub(super) tasks: Mutex<Vec<Option<TaskRec>>>,
    /// The base period `rtapi_clock_set_period` set (0: not yet); every module reads the same.
    pub(super) clock_period: AtomicI64,
    /// The counter segment's handle the last `rtapi_init` used (`rtapi_exit` gets only a module
    /// id; LinuxCNC keeps the last one too).
    pub(super) uuid_handle: AtomicI32,
}

/// The master's state (see the module docs).
pub(super) static STATE: State = State {
    config: OnceLock::new(),
    modules: Mutex::new(Vec::new()),
    shm_config: OnceLock::new(),
    segments: Mutex::new(Vec::new()),
    session_segments: Mutex::new(Vec::new()),
    hosted: Mutex::new(None),
    health: Mutex::new(None),
    tasks: Mutex::new(Vec::new()),
    clock_period: AtomicI64::new(0),
    uuid_handle: AtomicI32::new(0),
};
