//! Which host answers the C interface's calls whose meaning differs between the two: the standalone
//! host (`rtapi halrun`/`run`: rtapi's own HAL behind LinuxCNC's API, shared memory private to the
//! process) or LinuxCNC's realtime master (`crate::master`: LinuxCNC's `hal_lib.so` above rtapi,
//! real SysV segments by key). The master sits above this layer, so it is not called by name: its
//! main registers its entry points here ([`become_master`]) before the first `dlopen`, and the C
//! entry points (`rtapi_shmem_*`, `rtapi_task_self`, module messages) ask [`master`].
//!
//! Process-wide, set once: the C calls carry no context to find a host by, and a process is one
//! host or the other for its whole life. Reading it is one atomic load (it may be asked on an RT
//! thread: `rtapi_task_self`, a module's message).

use std::ffi::{c_int, c_void, CStr};
use std::sync::OnceLock;

/// The master's entry points for the calls whose meaning is its own.
#[derive(Clone, Copy, Debug)]
pub struct MasterHooks {
    /// A module's message (`rtapi_print*`): where it goes and how; may run on an RT thread.
    pub module_message: fn(level: c_int, text: &CStr, truncated: bool),
    /// `rtapi_shmem_new`: a handle, or `(-errno, message)`.
    pub shmem_new: fn(key: i32, size: usize) -> Result<i32, (i32, String)>,
    /// `rtapi_shmem_getptr`: the address of a handle.
    pub shmem_getptr: fn(handle: i32) -> Option<*mut c_void>,
    /// `rtapi_shmem_delete`: 0 or `-errno`.
    pub shmem_delete: fn(handle: i32) -> i32,
    /// `rtapi_task_self`: the calling RT thread's task id, or `-EINVAL`.
    pub task_self: fn() -> c_int,
    /// One line of the master's own to its standard error.
    pub say: fn(&str),
}

static MASTER: OnceLock<MasterHooks> = OnceLock::new();

/// Makes this process LinuxCNC's master for the C interface (once; a second call changes nothing).
pub fn become_master(hooks: MasterHooks) {
    let _ = MASTER.set(hooks);
}

/// The master's entry points, if this process is the master.
#[inline]
pub fn master() -> Option<&'static MasterHooks> {
    MASTER.get()
}
