//! The master's `rtapi_shmem_*`: real SysV segments with the caller's keys, as LinuxCNC 2.9's
//! `rtapi_app` makes them, because LinuxCNC's user-space programs (halcmd, milltask, io, halui, the
//! Python `hal` module…) attach the same segments by key: HAL `0x48414C32`, the RTAPI counter
//! `0x48484c34`, motion's `[EMCMOT]SHMEM_KEY` (100 by default).
//!
//! * `shmget(key, size, IPC_CREAT | IPC_EXCL | 0600)`: the master is each segment's creator. When
//!   it runs as root, a segment it made is then given to the session's user (`RTAPI_UID`) with mode
//!   0600, so that user's programs may attach it. A segment that exists already (a user-space
//!   program of the session asked for it first) is adopted only if its creator and owner are the
//!   master's uid or the session user's, its mode lets nobody else in and every process attached
//!   to it is the session's; anything else is refused with the key, its creator and the fix — never
//!   adopted, never chmod'ed into shape (SysV keeps the creator's access for good);
//! * `SHM_LOCK` under a real-time flavor (the pages stay resident), and every page touched;
//! * the same key twice in this process is the same handle (a count, as 2.9);
//! * [`remove_session`] at exit marks every segment this master used for removal (`IPC_RMID`: the
//!   kernel frees it when the last process detaches), by id — never another key;
//! * [`reclaim_stale`] at start removes what a killed master left: a segment of one of the session's
//!   keys that no process has attached and whose last user is gone. One still attached means another
//!   LinuxCNC session runs: the master refuses to start. One of another user is refused too.

use std::ffi::c_void;

use super::state::STATE;
use crate::rt::lock;

/// LinuxCNC's HAL segment key (`HAL_KEY`).
pub const HAL_KEY: i32 = 0x4841_4C32;
/// LinuxCNC's RTAPI counter segment key (`UUID_KEY`).
pub const RTAPI_KEY: i32 = 0x4848_4c34;
/// Motion's default `[EMCMOT]SHMEM_KEY`.
pub const DEFAULT_MOTION_KEY: i32 = 100;

/// How the master's segments are made.
#[derive(Clone, Copy, Debug)]
pub struct ShmConfig {
    /// Give new segments to this uid/gid (the master runs as root for another user).
    pub owner: Option<(u32, u32)>,
    /// `SHM_LOCK` them (real-time flavors).
    pub lock: bool,
}

/// Sets how segments are made (once, before any module is loaded).
pub fn configure(c: ShmConfig) {
    let _ = STATE.shm_config.set(c);
}

/// An attached segment (in [`super::state::State::segments`]).
pub(super) struct Segment {
    key: i32,
    id: i32,
    mem: usize,
    count: u32,
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

fn stat(id: i32) -> Result<libc::shmid_ds, i32> {
    // SAFETY: shmid_ds is plain data, filled by IPC_STAT.
    let mut ds: libc::shmid_ds = unsafe { std::mem::zeroed() };
    // SAFETY: `ds` is writable for IPC_STAT.
    if unsafe { libc::shmctl(id, libc::IPC_STAT, &mut ds) } == 0 {
        Ok(ds)
    } else {
        Err(errno())
    }
}

/// `rtapi_shmem_new`: a handle (> 0), or `Err((-errno, message))`.
///
/// The segment is made here, `IPC_EXCL`, so that its creator is this master. One that exists
/// already is adopted only if nobody but this session can reach it (`refuse_existing` finds nothing): SysV grants
/// the creator of a segment read-write access for its whole life, whatever owner and mode are set
/// later, so a segment another user made first is theirs to write — and the HAL's memory holds
/// the function pointers the real-time thread calls.
pub fn new(key: i32, size: usize) -> Result<i32, (i32, String)> {
    let mut segs = lock(&STATE.segments);
    if let Some(i) = segs
        .iter()
        .position(|s| s.as_ref().is_some_and(|s| s.key == key))
    {
        if let Some(s) = segs[i].as_mut() {
            s.count += 1;
        }
        return Ok(i as i32 + 1);
    }
    let cfg = STATE.shm_config.get().copied().unwrap_or(ShmConfig {
        owner: None,
        lock: false,
    });
    // SAFETY: shmget has no memory arguments.
    let made = unsafe { libc::shmget(key, size, libc::IPC_CREAT | libc::IPC_EXCL | 0o600) };
    let id = if made >= 0 {
        made
    } else if errno() == libc::EEXIST {
        adopt(key, size, &cfg)?
    } else {
        let e = errno();
        return Err((
            -e,
            format!(
                "rtapi_shmem_new: shmget(key 0x{key:08x}, {size} bytes): {}",
                std::io::Error::from_raw_os_error(e)
            ),
        ));
    };
    let mut ds = stat(id).map_err(|e| {
        (
            -e,
            format!("rtapi_shmem_new: shmctl(IPC_STAT) of segment {id}: {e}"),
        )
    })?;
    // Only a segment this master made is given to the session's user; an adopted one is the
    // session's already (adopt checked it) and keeps its owner and mode.
    if let (true, Some((uid, gid))) = (made >= 0, cfg.owner) {
        ds.shm_perm.uid = uid;
        ds.shm_perm.gid = gid;
        ds.shm_perm.mode = 0o600;
        // SAFETY: `ds` is the segment's own IPC_STAT result with the owner changed.
        if unsafe { libc::shmctl(id, libc::IPC_SET, &mut ds) } != 0 {
            let e = errno();
            return Err((
                -e,
                format!(
                    "rtapi_shmem_new: giving segment 0x{key:08x} to uid {uid}: {}",
                    std::io::Error::from_raw_os_error(e)
                ),
            ));
        }
    }
    if cfg.lock {
        // SAFETY: SHM_LOCK takes no buffer.
        if unsafe { libc::shmctl(id, libc::SHM_LOCK, std::ptr::null_mut()) } != 0 {
            let e = errno();
            crate::master::say(&format!(
                "rtapi: warning: SHM_LOCK of segment 0x{key:08x}: {} (its pages may be swapped out)",
                std::io::Error::from_raw_os_error(e)
            ));
        }
    }
    // SAFETY: attaching a segment made here or checked by `adopt`, at an address the kernel chooses.
    let mem = unsafe { libc::shmat(id, std::ptr::null(), 0) };
    if mem as isize == -1 {
        let e = errno();
        return Err((
            -e,
            format!(
                "rtapi_shmem_new: shmat of segment 0x{key:08x}: {}",
                std::io::Error::from_raw_os_error(e)
            ),
        ));
    }
    // Touch every page now, not on the RT path.
    let real = stat(id).map(|d| d.shm_segsz).unwrap_or(size);
    let page = 4096;
    let mut off = 0;
    while off < real {
        // SAFETY: `off` < the segment's size; a volatile read of mapped memory.
        unsafe { std::ptr::read_volatile((mem as *const u8).add(off)) };
        off += page;
    }
    lock(&STATE.session_segments).push((key, id));
    crate::runtime::crash::rmid_on_crash(id);
    let seg = Segment {
        key,
        id,
        mem: mem as usize,
        count: 1,
    };
    let slot = segs.iter().position(Option::is_none);
    let i = match slot {
        Some(i) => {
            segs[i] = Some(seg);
            i
        }
        None => {
            segs.push(Some(seg));
            segs.len() - 1
        }
    };
    Ok(i as i32 + 1)
}

/// The uids this master trusts with its segments: its own (root, or the session's user on the
/// capability path) and the session's user it acts for.
fn trusted_uids(cfg: &ShmConfig) -> Vec<u32> {
    let mut v = vec![nix::unistd::geteuid().as_raw()];
    if let Some((uid, _)) = cfg.owner {
        v.push(uid);
    }
    v
}

/// `uid` as `uid N (name)`.
fn who(uid: u32) -> String {
    match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
        Ok(Some(u)) => format!("uid {uid} ({})", u.name),
        _ => format!("uid {uid}"),
    }
}

/// The processes that have segment `id` mapped, as (pid, real uid, effective uid), and how many
/// mappings of it they hold (`/proc/<pid>/maps` names an attached SysV segment `/SYSV<key>`, its
/// inode the segment's id).
fn attachers(id: i32) -> (Vec<(i32, u32, u32)>, usize) {
    let mut procs = Vec::new();
    let mut maps = 0;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return (procs, maps);
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
            continue;
        };
        let n = text
            .lines()
            .filter(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.len() >= 6 && f[5].starts_with("/SYSV") && f[4] == id.to_string()
            })
            .count();
        if n == 0 {
            continue;
        }
        maps += n;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let uids: Vec<u32> = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .map(|l| {
                l.split_whitespace()
                    .filter_map(|v| v.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        // An unreadable status is nobody we trust.
        let (ruid, euid) = (
            uids.first().copied().unwrap_or(u32::MAX),
            uids.get(1).copied().unwrap_or(u32::MAX),
        );
        procs.push((pid, ruid, euid));
    }
    (procs, maps)
}

/// Why an existing segment may not be adopted, if it may not: made or owned by someone outside
/// `trusted`, reachable by other users through its mode, attached by a process of another user
/// (or by one this master cannot see), or smaller than `size`.
fn refuse_existing(id: i32, ds: &libc::shmid_ds, size: usize, trusted: &[u32]) -> Option<String> {
    let p = &ds.shm_perm;
    if !trusted.contains(&p.cuid) {
        return Some(format!(
            "was made by {} — not by this session, and SysV lets its creator read and write it \
             whatever its owner and mode are now",
            who(p.cuid)
        ));
    }
    if !trusted.contains(&p.uid) {
        return Some(format!("belongs to {}, not to this session", who(p.uid)));
    }
    let mode = u32::from(p.mode) & 0o777;
    if mode & 0o077 != 0 {
        return Some(format!(
            "has mode {mode:03o}: users other than its owner can reach it"
        ));
    }
    if ds.shm_nattch > 0 {
        let (procs, maps) = attachers(id);
        if let Some((pid, ruid, euid)) = procs
            .iter()
            .find(|(_, r, e)| !trusted.contains(r) || !trusted.contains(e))
        {
            return Some(format!(
                "is attached by pid {pid} of {}{}, not of this session",
                who(*euid),
                if ruid == euid {
                    String::new()
                } else {
                    format!(" (real {})", who(*ruid))
                }
            ));
        }
        if (maps as u64) < ds.shm_nattch {
            return Some(format!(
                "is attached {} time(s), and only {maps} of them by processes this master can see",
                ds.shm_nattch
            ));
        }
    }
    if ds.shm_segsz < size {
        return Some(format!(
            "is {} bytes, smaller than the {size} asked for (a leftover of another session or \
             release?)",
            ds.shm_segsz
        ));
    }
    None
}

/// Looks up the existing segment of `key` and returns its id if this session may use it.
fn adopt(key: i32, size: usize, cfg: &ShmConfig) -> Result<i32, (i32, String)> {
    // SAFETY: shmget without IPC_CREAT only looks the key up.
    let id = unsafe { libc::shmget(key, 0, 0) };
    if id < 0 {
        let e = errno();
        return Err((
            -e,
            format!(
                "rtapi_shmem_new: the SysV segment of key 0x{key:08x} exists but cannot be looked \
                 up: {} (`ipcs -m` shows it; its owner or root can remove it)",
                std::io::Error::from_raw_os_error(e)
            ),
        ));
    }
    let ds = stat(id).map_err(|e| {
        (
            -e,
            format!(
                "rtapi_shmem_new: shmctl(IPC_STAT) of the existing segment 0x{key:08x} (id {id}): {}",
                std::io::Error::from_raw_os_error(e)
            ),
        )
    })?;
    match refuse_existing(id, &ds, size, &trusted_uids(cfg)) {
        None => Ok(id),
        Some(why) => Err((
            -libc::EEXIST,
            format!(
                "refused the SysV shared memory segment of key 0x{key:08x} (id {id}): it existed \
                 before this master asked for it and {why}. Using it would let that user write \
                 this session's memory (the HAL's holds the functions the real-time thread runs). \
                 Nothing was attached. Find out who made it (`ipcs -m -c`, `ipcs -m -p`), remove \
                 it (`ipcrm -m {id}`, as its creator or root) and start again"
            ),
        )),
    }
}

/// `rtapi_shmem_getptr`: the address of handle `h`.
pub fn getptr(h: i32) -> Option<*mut c_void> {
    let segs = lock(&STATE.segments);
    let i = usize::try_from(h).ok()?.checked_sub(1)?;
    segs.get(i)?.as_ref().map(|s| s.mem as *mut c_void)
}

/// `rtapi_shmem_delete`: one use less; at none, detached, and removed when no process has it.
pub fn delete(h: i32) -> i32 {
    let mut segs = lock(&STATE.segments);
    let Some(i) = usize::try_from(h).ok().and_then(|h| h.checked_sub(1)) else {
        return -libc::EINVAL;
    };
    let Some(Some(s)) = segs.get_mut(i) else {
        return -libc::EINVAL;
    };
    s.count -= 1;
    if s.count > 0 {
        return 0;
    }
    let (id, mem) = (s.id, s.mem);
    segs[i] = None;
    // SAFETY: `mem` is this process's attachment of the segment, detached once (its handle is gone).
    unsafe { libc::shmdt(mem as *const c_void) };
    if stat(id).is_ok_and(|d| d.shm_nattch == 0) {
        // SAFETY: IPC_RMID takes no buffer.
        unsafe { libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()) };
        crate::runtime::crash::forget_rmid(id);
    }
    0
}

/// The size of this master's segment of `key` (what its creator asked for), if it has one.
pub fn size_of_key(key: i32) -> Option<usize> {
    let id = lock(&STATE.session_segments)
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, id)| *id)?;
    stat(id).ok().map(|d| d.shm_segsz)
}

/// The ids of the segments this master used (key, id), in order.
pub fn session() -> Vec<(i32, i32)> {
    lock(&STATE.session_segments).clone()
}

/// Marks every segment this master used for removal (by id). The kernel frees each once the last
/// process (a user-space program still attached) detaches; the key is free at once.
pub fn remove_session() {
    for (_, id) in lock(&STATE.session_segments).drain(..) {
        // SAFETY: IPC_RMID takes no buffer; an id already removed gives EINVAL/EIDRM, ignored.
        unsafe { libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()) };
        crate::runtime::crash::forget_rmid(id);
    }
}

/// Whether process `pid` runs (a zombie does not: it has left its segments already).
pub fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    let exists = pid > 0 && (unsafe { libc::kill(pid, 0) } == 0 || errno() == libc::EPERM);
    // A zombie has ended: it has left its segments already.
    exists && !crate::rt::process::ProcStat::read(pid as u32).is_some_and(|p| p.ended)
}

/// Removes the stale segments of `keys` (no process attached, last user gone, owned by `user` or by
/// root) and says which; refuses (an error naming the segment) one still in use or of another user.
pub fn reclaim_stale(keys: &[i32], user: u32) -> Result<Vec<String>, String> {
    reclaim_stale_of(keys, user, false)
}

/// [`reclaim_stale`]; with `in_use_ok` (the master as `rtapi_app`, which LinuxCNC's `halcmd`
/// starts after making the HAL segment itself, as 2.9's does) a segment in use — attached, or its
/// last user alive — is left alone for `rtapi_shmem_new`'s own checks instead of refused.
pub fn reclaim_stale_of(keys: &[i32], user: u32, in_use_ok: bool) -> Result<Vec<String>, String> {
    let mut said = Vec::new();
    for &key in keys {
        // SAFETY: shmget without IPC_CREAT only looks the key up.
        let id = unsafe { libc::shmget(key, 0, 0) };
        if id < 0 {
            continue;
        }
        let Ok(ds) = stat(id) else { continue };
        let (nattch, lpid, cpid, owner) =
            (ds.shm_nattch, ds.shm_lpid, ds.shm_cpid, ds.shm_perm.uid);
        let in_use = nattch > 0 || (alive(lpid) && lpid != std::process::id() as i32);
        if in_use && in_use_ok {
            continue;
        }
        if nattch > 0 {
            return Err(format!(
                "LinuxCNC's shared memory segment 0x{key:08x} (id {id}) is attached by {nattch} \
                 process(es) (last pid {lpid}): another LinuxCNC session is running on this machine; \
                 stop it first (its `halrun -U`, or close its display)"
            ));
        }
        if owner != user && owner != 0 {
            return Err(format!(
                "LinuxCNC's shared memory segment 0x{key:08x} (id {id}) belongs to uid {owner}, not \
                 to this session's user {user}: it is not rtapi's to remove; its owner (or root) can \
                 remove it with `ipcrm -m {id}`"
            ));
        }
        if alive(lpid) && lpid != std::process::id() as i32 {
            return Err(format!(
                "LinuxCNC's shared memory segment 0x{key:08x} (id {id}) is not attached, but its last \
                 user, pid {lpid}, still runs: not removing it (stop that process, or `ipcrm -m {id}`)"
            ));
        }
        // SAFETY: IPC_RMID takes no buffer.
        if unsafe { libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()) } != 0 {
            return Err(format!(
                "cannot remove the stale LinuxCNC segment 0x{key:08x} (id {id}): {}",
                std::io::Error::last_os_error()
            ));
        }
        said.push(format!(
            "removed the stale LinuxCNC shared memory segment 0x{key:08x} (id {id}, {} bytes, made by \
             pid {cpid}, last used by pid {lpid}, both gone, nothing attached): a previous session \
             ended without cleaning up",
            ds.shm_segsz
        ));
    }
    Ok(said)
}
