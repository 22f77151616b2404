//! The operating-system side of a segment: POSIX shm, `mmap`, `flock`. All `libc` calls of the crate live
//! here, so the rest of the code deals only in a [`Mapping`] of atomic words.
//!
//! Ownership protocol: the owner holds an exclusive `flock` on its shm file descriptor for its whole life.
//! The kernel drops that lock when the process dies, however it dies (SIGKILL included), so "is the lock
//! free?" is an exact liveness test that pid reuse cannot fool. The pid in the header is only for messages.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::error::{HalError, Result};
use crate::layout::{self, header, ALIGN};
use crate::name::Instance;

/// A region of segment memory, only ever accessed through aligned 64-bit atomics. Either a shared mapping
/// of a shm file or a private heap copy (for offline analysis and tests of the reader).
pub(crate) struct Mapping {
    ptr: NonNull<AtomicU64>,
    len: usize,
    writable: bool,
    backing: Backing,
}

enum Backing {
    Mmap,
    /// From `Box::into_raw` of a `Box<[AtomicU64]>` of `len / 8` words; rebuilt and freed in Drop.
    Heap,
}

// SAFETY: the region is only accessed through `&AtomicU64` (see `word`), which is Sync; the pointer stays
// valid until Drop, which needs `&mut self` and therefore no outstanding borrows.
unsafe impl Send for Mapping {}
// SAFETY: as above — shared access is atomic access.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn writable(&self) -> bool {
        self.writable
    }

    /// The 64-bit cell at byte `offset`.
    ///
    /// # Panics
    /// If `offset` is unaligned or out of bounds. Callers validate offsets read from the segment before
    /// calling; a panic here is a bug in this crate, never a consequence of segment contents.
    pub(crate) fn word(&self, offset: usize) -> &AtomicU64 {
        assert!(
            offset % ALIGN == 0 && offset.checked_add(8).is_some_and(|end| end <= self.len),
            "segment word {offset} out of bounds (len {})",
            self.len
        );
        // SAFETY: in bounds and 8-aligned (checked above; the base is page- or Box<[AtomicU64]>-aligned),
        // and the memory lives as long as `self`. AtomicU64 has the size and alignment of u64, and every
        // access to the region goes through atomics, so no non-atomic access can race with this one.
        unsafe { &*self.ptr.as_ptr().add(offset / 8) }
    }

    pub(crate) fn load(&self, offset: usize) -> u64 {
        self.word(offset).load(Ordering::Relaxed)
    }

    /// The value of type `ty` in the cell slot at `offset`, read with an atomic of the type's width
    /// (LAYOUT.md section 3), as canonical bits.
    ///
    /// # Panics
    /// As [`word`](Self::word).
    pub(crate) fn load_cell(&self, offset: usize, ty: crate::value::ValueType) -> u64 {
        let p = (self.word(offset) as *const AtomicU64).cast::<u8>();
        // SAFETY: `word` checked that the 8-byte slot is aligned and inside the live mapping, which is
        // only ever accessed atomically.
        unsafe { crate::value::cell::load(p, ty) }
    }

    /// Stores canonical `bits` of type `ty` into the cell slot at `offset`, touching only the type's
    /// bytes. The mapping must be writable (callers check [`writable`](Self::writable)).
    ///
    /// # Panics
    /// As [`word`](Self::word).
    pub(crate) fn store_cell(&self, offset: usize, ty: crate::value::ValueType, bits: u64) {
        assert!(self.writable, "store into a read-only mapping");
        let p = (self.word(offset) as *const AtomicU64).cast::<u8>();
        // SAFETY: as in `load_cell`; the mapping is writable (asserted above).
        unsafe { crate::value::cell::store(p, ty, bits) }
    }

    /// Copies `dst.len()` bytes starting at `offset` out of the segment, word by word.
    pub(crate) fn copy_out(&self, offset: usize, dst: &mut [u8]) {
        assert!(dst.len() % 8 == 0);
        for (i, chunk) in dst.chunks_exact_mut(8).enumerate() {
            chunk.copy_from_slice(&self.load(offset + i * 8).to_ne_bytes());
        }
    }

    /// Writes a whole image (8-byte multiple) at the start of the segment with atomic stores.
    pub(crate) fn copy_in(&self, image: &[u8]) {
        assert!(image.len() % 8 == 0 && image.len() <= self.len);
        for (i, chunk) in image.chunks_exact(8).enumerate() {
            let word = u64::from_ne_bytes(chunk.try_into().expect("chunks_exact(8)"));
            self.word(i * 8).store(word, Ordering::Relaxed);
        }
    }

    /// A private copy of `bytes` (length rounded down to whole words).
    pub(crate) fn from_bytes(bytes: &[u8], writable: bool) -> Mapping {
        let words: Box<[AtomicU64]> = bytes
            .chunks_exact(8)
            .map(|c| AtomicU64::new(u64::from_ne_bytes(c.try_into().expect("chunks_exact(8)"))))
            .collect();
        let len = words.len() * 8;
        let raw: *mut [AtomicU64] = Box::into_raw(words);
        let ptr = NonNull::new(raw.cast::<AtomicU64>()).expect("Box::into_raw is never null");
        Mapping {
            ptr,
            len,
            writable,
            backing: Backing::Heap,
        }
    }

    /// Maps `len` bytes of `fd` shared.
    #[doc(alias = "mmap")]
    pub(crate) fn map(fd: &OwnedFd, len: usize, writable: bool, what: &str) -> Result<Mapping> {
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: a fresh shared mapping chosen by the kernel (addr NULL) of a file we hold open; it
        // aliases no Rust object. Failure is reported through MAP_FAILED, checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(HalError::os("mmap", what));
        }
        let ptr = NonNull::new(p.cast::<AtomicU64>()).ok_or_else(|| HalError::os("mmap", what))?;
        Ok(Mapping {
            ptr,
            len,
            writable,
            backing: Backing::Mmap,
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        match self.backing {
            Backing::Mmap => {
                // SAFETY: ptr/len are exactly what mmap returned; `&mut self` proves no borrow of the region
                // is alive (every `&AtomicU64` handed out borrows `self`, and handles hold an Arc<Mapping>).
                unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
            }
            Backing::Heap => {
                let raw = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len / 8);
                // SAFETY: `raw` is the pointer and length Box::into_raw produced in `from_bytes`, freed once.
                drop(unsafe { Box::from_raw(raw) });
            }
        }
    }
}

fn c_name(instance: &Instance) -> CString {
    CString::new(instance.shm_name()).expect("validated instance names contain no NUL")
}

/// Where the segment shows up in the file system, for messages.
pub(crate) fn display_path(instance: &Instance) -> String {
    format!("/dev/shm/rtapi-{instance}")
}

/// The instance names that have a segment in `/dev/shm` now, sorted: `rtapi-NAME` with a valid
/// instance name (a FIFO `rtapi-NAME:sampler.0` is not an instance). Only names are read: a segment
/// is judged (owner, trust, layout) when it is opened.
pub fn instance_names() -> std::io::Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir("/dev/shm")? {
        let Some(file) = entry?.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if let Some(name) = file.strip_prefix("rtapi-") {
            if crate::name::validate_instance(name).is_ok() {
                names.push(name.to_string());
            }
        }
    }
    names.sort();
    Ok(names)
}

fn shm_open(
    instance: &Instance,
    flags: libc::c_int,
    mode: libc::mode_t,
) -> std::io::Result<OwnedFd> {
    shm_open_name(&instance.shm_name(), flags, mode)
}

/// `shm_open` of any name (`/rtapi-…`), never following a symlink or blocking on a FIFO planted there.
pub(crate) fn shm_open_name(
    name: &str,
    flags: libc::c_int,
    mode: libc::mode_t,
) -> std::io::Result<OwnedFd> {
    let name = CString::new(name).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // Never follow a symlink planted at the name; never block opening a FIFO planted there (O_NONBLOCK has
    // no effect on regular files). glibc and musl pass these through to open(2).
    let flags = flags | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
    // SAFETY: `name` is a valid NUL-terminated string that outlives the call.
    let fd = unsafe { libc::shm_open(name.as_ptr(), flags, mode as libc::c_uint) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: shm_open returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub(crate) fn fstat(fd: &OwnedFd, what: &str) -> Result<libc::stat> {
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fd is open; `st` is a valid, writable stat buffer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(HalError::os("fstat", what));
    }
    Ok(st)
}

/// Tries to take the exclusive owner lock without waiting.
#[doc(alias = "flock")]
pub(crate) fn try_lock(fd: &OwnedFd) -> bool {
    // SAFETY: flock on an open descriptor has no memory effects.
    unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

#[doc(alias = "shm_unlink")]
fn unlink(instance: &Instance) -> std::io::Result<()> {
    let name = c_name(instance);
    // SAFETY: valid NUL-terminated string.
    if unsafe { libc::shm_unlink(name.as_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Whether some process holds the owner's exclusive lock on the file behind `fd` (a reader's own
/// descriptor). Probes with a shared lock and releases it at once: a concurrent creator or reclaimer
/// that sees it merely retries (see `create`). Undecidable cases (an error other than "would block")
/// count as held, so a probe failure never makes a live owner look dead.
pub(crate) fn lock_held(fd: &OwnedFd) -> bool {
    // SAFETY: flock on an open descriptor has no memory effects.
    if unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } == 0 {
        // SAFETY: as above; releases the probe lock just taken.
        unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_UN) };
        return false;
    }
    true
}

/// The writers' lock (LAYOUT.md section 11): an open-file-description lock on the bytes of the
/// structure generation word. A process writing a cell holds it shared from before it finds the cell
/// until after its store; the owner holds it exclusive around a structural change that gives a
/// deleted record's slot to a new record. It is independent of the owner's `flock` (Linux keeps the
/// two kinds apart) and, like it, goes with the process however the process ends.
pub(crate) const WRITERS_LOCK: std::ops::Range<usize> =
    crate::layout::header::GENERATION..crate::layout::header::GENERATION + 8;

/// Tries (without waiting) to take the writers' lock on the file behind `fd`, `exclusive` or shared.
/// `Ok(false)`: another open file description holds it in a conflicting way.
pub(crate) fn try_writers_lock(fd: &OwnedFd, exclusive: bool) -> std::io::Result<bool> {
    writers_lock_op(
        fd,
        if exclusive {
            libc::F_WRLCK
        } else {
            libc::F_RDLCK
        },
    )
}

/// Releases the writers' lock taken with [`try_writers_lock`] on `fd`.
pub(crate) fn release_writers_lock(fd: &OwnedFd) {
    let _ = writers_lock_op(fd, libc::F_UNLCK);
}

fn writers_lock_op(fd: &OwnedFd, kind: libc::c_int) -> std::io::Result<bool> {
    let lock = libc::flock {
        l_type: kind as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: WRITERS_LOCK.start as libc::off_t,
        l_len: WRITERS_LOCK.len() as libc::off_t,
        // Must be 0 for OFD locks.
        l_pid: 0,
    };
    // SAFETY: F_OFD_SETLK on an open descriptor with a valid, initialized flock struct; no memory
    // is written.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_SETLK, &lock) } == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EACCES) => Ok(false),
        _ => Err(e),
    }
}

/// Whether a process with this pid exists (for a reader of a copy, which has no lock to probe; ownership
/// and liveness of a segment by name use the lock).
pub(crate) fn pid_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks existence and permission; nothing is delivered.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Nanoseconds since the Unix epoch.
pub(crate) fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Whose segments a process believes. A segment file is trusted only if its owner is root, the
/// process's effective user, or a user added with [`also_uid`](Trust::also_uid) /
/// [`also_user`](Trust::also_user) (readers only: an owner never reclaims another user's file). Anyone
/// can create a file in `/dev/shm`, so without this check another user could plant a forged instance:
/// `show` would display their numbers, `setp` would write into their file, and `run` would refuse to
/// start. The mode must also have no permission bits beyond `rw-r-----` (what the builder makes: 0600,
/// or 0640 for a group): a file others can write may hold anyone's bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trust {
    extra: Vec<u32>,
}

/// Permission bits a trusted segment may have: owner read/write, group read.
pub const TRUSTED_MODE_BITS: u32 = 0o640;

impl Trust {
    /// Root and the effective user.
    pub fn new() -> Self {
        Trust::default()
    }

    /// Also trust segments owned by `uid`.
    pub fn also_uid(mut self, uid: u32) -> Self {
        if !self.extra.contains(&uid) {
            self.extra.push(uid);
        }
        self
    }

    /// Also trust segments owned by `user`: a user name, or a numeric uid.
    pub fn also_user(self, user: &str) -> Result<Self> {
        let uid = match user.parse::<u32>() {
            Ok(uid) => uid,
            Err(_) => uid_of(user).ok_or_else(|| HalError::InvalidConfig {
                what: "trusted owner",
                reason: format!("no user named '{user}' (give a user name or a numeric uid)"),
            })?,
        };
        Ok(self.also_uid(uid))
    }

    /// Whether a file owned by `uid` is believed.
    pub fn trusts(&self, uid: u32) -> bool {
        uid == 0 || uid == euid() || self.extra.contains(&uid)
    }

    /// "root", "root or alice (uid 1000)", ... for messages.
    fn describe(&self) -> String {
        let me = euid();
        let mut who = vec!["root".to_string()];
        for uid in std::iter::once(me).chain(self.extra.iter().copied()) {
            if uid != 0 && !who.contains(&user_label(uid)) {
                who.push(user_label(uid));
            }
        }
        who.join(" or ")
    }
}

/// Which side meets an untrusted file: it changes what the message suggests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Reader,
    Owner,
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The user name of `uid`, if it has one.
pub(crate) fn user_name(uid: u32) -> Option<String> {
    // SAFETY: an all-zero passwd is a valid value of this plain C struct (null pointers, zero ids).
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    let mut buf = vec![0 as libc::c_char; 4096];
    // SAFETY: pw, buf (with its true length) and out are valid for writes for the whole call; on success
    // `out` points at `pw`, whose string pointers point into `buf`, which outlives their use below.
    let r = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut out) };
    if r != 0 || out.is_null() || pw.pw_name.is_null() {
        return None;
    }
    // SAFETY: pw_name is a NUL-terminated string inside `buf` (checked non-null above).
    let name = unsafe { std::ffi::CStr::from_ptr(pw.pw_name) };
    Some(name.to_string_lossy().into_owned())
}

/// The uid of user `name`, if it exists.
fn uid_of(name: &str) -> Option<u32> {
    let cname = CString::new(name).ok()?;
    // SAFETY: as in `user_name`.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    let mut buf = vec![0 as libc::c_char; 4096];
    // SAFETY: cname is NUL-terminated; pw, buf (with its true length) and out are valid for writes.
    let r = unsafe {
        libc::getpwnam_r(
            cname.as_ptr(),
            &mut pw,
            buf.as_mut_ptr(),
            buf.len(),
            &mut out,
        )
    };
    (r == 0 && !out.is_null()).then_some(pw.pw_uid)
}

/// `nobody (uid 65534)`, or `uid 1234` for a uid without a name.
pub(crate) fn user_label(uid: u32) -> String {
    match user_name(uid) {
        Some(name) => format!("{name} (uid {uid})"),
        None => format!("uid {uid}"),
    }
}

fn file_kind(mode: libc::mode_t) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFREG => "a regular file",
        libc::S_IFDIR => "a directory",
        libc::S_IFLNK => "a symbolic link",
        libc::S_IFIFO => "a FIFO",
        libc::S_IFSOCK => "a socket",
        libc::S_IFCHR => "a character device",
        libc::S_IFBLK => "a block device",
        _ => "of an unknown file type",
    }
}

fn untrusted(
    path: &str,
    reason: String,
    st: &libc::stat,
    side: Side,
    trust_hint: bool,
) -> HalError {
    HalError::Untrusted {
        path: path.to_string(),
        reason,
        owner: user_label(st.st_uid),
        mode: st.st_mode & 0o7777,
        trust_owner: (side == Side::Reader && trust_hint)
            .then(|| user_name(st.st_uid).unwrap_or_else(|| st.st_uid.to_string())),
    }
}

/// The trust check, on the descriptor we will read through (so the file cannot be swapped between the
/// check and the use). Returns the `fstat` of the file.
pub(crate) fn check_trust(
    fd: &OwnedFd,
    path: &str,
    trust: &Trust,
    side: Side,
) -> Result<libc::stat> {
    let st = fstat(fd, path)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        let reason = format!("it is {}, not a regular file", file_kind(st.st_mode));
        return Err(untrusted(path, reason, &st, side, false));
    }
    if !trust.trusts(st.st_uid) {
        let reason = format!(
            "it belongs to {}, and this process (running as {}) trusts only segments owned by {}",
            user_label(st.st_uid),
            user_label(euid()),
            trust.describe()
        );
        return Err(untrusted(path, reason, &st, side, true));
    }
    let bits = st.st_mode & 0o7777;
    if bits & !TRUSTED_MODE_BITS != 0 {
        let reason = format!(
            "its mode {bits:04o} allows more than rw-r----- (0640): {}",
            if bits & 0o007 != 0 {
                "other users can access it"
            } else if bits & 0o020 != 0 {
                "group members can write it"
            } else {
                "execute, setuid, setgid or sticky bits are set"
            }
        );
        return Err(untrusted(path, reason, &st, side, false));
    }
    Ok(st)
}

/// The error for an `open` refused because of what the name is: a symbolic link (`ELOOP`, from
/// O_NOFOLLOW) or a socket (`ENXIO`). Its owner and mode, for the message only, come from `lstat` on the
/// path; nothing else is ever taken from the path.
fn refused_by_open(path: &str, what: &str, side: Side) -> HalError {
    let cpath = CString::new(path).expect("paths built from valid names contain no NUL");
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: cpath is NUL-terminated; st is a valid, writable stat buffer. On failure st stays zeroed
    // (uid 0, mode 0), which only affects the message.
    unsafe { libc::lstat(cpath.as_ptr(), &mut st) };
    untrusted(path, format!("it is {what}"), &st, side, false)
}

pub(crate) fn open_error(path: &str, source: std::io::Error, side: Side) -> HalError {
    match source.raw_os_error() {
        Some(libc::ELOOP) => refused_by_open(path, "a symbolic link", side),
        Some(libc::ENXIO) => refused_by_open(path, "a socket, not a regular file", side),
        _ => HalError::Os {
            op: "shm_open",
            target: path.to_string(),
            source,
        },
    }
}

/// Who may open the segment besides its owner.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Permissions {
    /// Mode 0600: the owner's user only.
    #[default]
    OwnerOnly,
    /// Mode 0640 with this group: members can read (`show`, `watch`) but not write.
    GroupReadable {
        /// The segment's group.
        gid: u32,
    },
}

/// The segment as its owner holds it: the locked descriptor and the writable mapping.
pub(crate) struct OwnedSegment {
    pub(crate) fd: OwnedFd,
    pub(crate) mapping: Mapping,
}

/// What we found under the name when exclusive creation failed.
enum Existing {
    /// Someone holds the owner lock; the pid from the header (0 if not yet written).
    Locked(u32),
    /// Nobody holds it and it is ours (or an empty leftover): safe to remove.
    Stale,
    /// Someone is removing or creating it right now; look again shortly.
    InFlux,
}

/// Creates `/rtapi-<instance>` of `size` bytes, reclaiming a stale one, and returns it locked, mapped and
/// zero-filled. The caller writes the header (state BUILDING first).
pub(crate) fn create(instance: &Instance, size: usize, perms: Permissions) -> Result<OwnedSegment> {
    let path = display_path(instance);
    // Bounded: each retry is a race with another creator or reclaimer that resolves within milliseconds.
    let mut unfinished_seen = 0;
    let mut locked_by = None;
    let mut locked_last_time = false;
    for _ in 0..100 {
        match shm_open(instance, libc::O_CREAT | libc::O_EXCL | libc::O_RDWR, 0o600) {
            Ok(fd) => return finish_create(fd, size, perms, &path),
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
            Err(source) => return Err(open_error(&path, source, Side::Owner)),
        }
        let existing = inspect_existing(instance, &path, &mut unfinished_seen)?;
        // A reader's liveness probe holds a shared lock for a few microseconds: only a lock seen twice in
        // a row, 10 ms apart, is an owner's.
        let locked_before = std::mem::replace(
            &mut locked_last_time,
            matches!(existing, Existing::Locked(_)),
        );
        match existing {
            Existing::Locked(pid) if pid != 0 && pid_alive(pid) && locked_before => {
                return Err(HalError::InstanceInUse {
                    instance: instance.to_string(),
                    pid,
                })
            }
            // A creator that has not written its pid yet, or a reclaimer holding a dead owner's file
            // while removing it: both resolve within milliseconds. (Or an owner whose pid we cannot see,
            // in another pid namespace: reported as in use after the retries.)
            Existing::Locked(pid) => {
                locked_by = Some(pid);
                std::thread::sleep(Duration::from_millis(10));
            }
            Existing::Stale => {}
            Existing::InFlux => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    Err(match locked_by {
        Some(pid) => HalError::InstanceInUse {
            instance: instance.to_string(),
            pid,
        },
        None => HalError::Foreign {
            path,
            reason: "it keeps appearing and disappearing while we try to claim it".into(),
        },
    })
}

fn finish_create(fd: OwnedFd, size: usize, perms: Permissions, path: &str) -> Result<OwnedSegment> {
    // Blocking is fine: the only other lockers are probes that release at once.
    // SAFETY: flock on an open descriptor has no memory effects.
    if unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(HalError::os("flock", path));
    }
    let mode: libc::mode_t = match perms {
        Permissions::OwnerOnly => 0o600,
        Permissions::GroupReadable { gid } => {
            // SAFETY: fchown on our own descriptor; uid -1 leaves the owner unchanged.
            if unsafe { libc::fchown(fd.as_raw_fd(), u32::MAX, gid) } != 0 {
                return Err(HalError::os("fchown (group)", path));
            }
            0o640
        }
    };
    // Explicit because shm_open's mode is filtered by the umask.
    // SAFETY: fchmod on our own descriptor.
    if unsafe { libc::fchmod(fd.as_raw_fd(), mode) } != 0 {
        return Err(HalError::os("fchmod", path));
    }
    let len = libc::off_t::try_from(size).map_err(|_| HalError::SegmentFull {
        needed: size as u64,
        cap: i64::MAX as u64,
    })?;
    // SAFETY: ftruncate on our own descriptor.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), len) } != 0 {
        return Err(HalError::os("ftruncate", path));
    }
    let mapping = Mapping::map(&fd, size, true, path)?;
    Ok(OwnedSegment { fd, mapping })
}

fn inspect_existing(
    instance: &Instance,
    path: &str,
    unfinished_seen: &mut u32,
) -> Result<Existing> {
    let fd = match shm_open(instance, libc::O_RDONLY, 0) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(Existing::InFlux),
        Err(source) => return Err(open_error(path, source, Side::Owner)),
    };
    // Nothing of a file we do not trust is believed: not its pid, not its lock, not its magic. Never
    // removed automatically either: a person must look (the message says how).
    let st = check_trust(&fd, path, &Trust::new(), Side::Owner)?;
    let size = usize::try_from(st.st_size).unwrap_or(0);
    let head = if size >= header::SIZE {
        Some(Mapping::map(&fd, header::SIZE, false, path)?)
    } else {
        None
    };
    let pid = head
        .as_ref()
        .map_or(0, |h| h.load(header::OWNER_PID) as u32);
    if !try_lock(&fd) {
        return Ok(Existing::Locked(pid));
    }
    // We hold the lock now (until `fd` closes), so no owner is alive on this file.
    let magic = head.map(|h| {
        let mut magic = [0u8; 8];
        h.copy_out(header::MAGIC, &mut magic);
        magic
    });
    match magic {
        Some(m) if m == layout::MAGIC => {}
        // Too small for a header, or sized but not yet written: a creator between two of its first
        // syscalls (microseconds, and it takes the lock right after creating), or the leftover of one that
        // died there. Only the leftover stays unlocked and unfinished for long.
        None | Some([0, 0, 0, 0, 0, 0, 0, 0]) => {
            *unfinished_seen += 1;
            if *unfinished_seen < 5 {
                return Ok(Existing::InFlux);
            }
        }
        Some(_) => {
            return Err(HalError::Foreign {
                path: path.to_string(),
                reason: "its first bytes are not the rtapi magic".into(),
            })
        }
    }
    // Stale: remove the name while still holding the lock, so a concurrent reclaimer sees it held.
    match unlink(instance) {
        Ok(()) => Ok(Existing::Stale),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(Existing::InFlux),
        // E.g. root's stale segment and we are not root (/dev/shm is sticky).
        Err(source) => Err(HalError::Os {
            op: "removing the stale segment",
            target: path.to_string(),
            source,
        }),
    }
}

/// Removes `/rtapi-<instance>` if it is a trusted rtapi segment whose owner is gone (its lock is
/// free): what a killed owner left. `Ok(true)` if it was removed, `Ok(false)` if there is none or
/// its owner lives (or it is being created or reclaimed right now); an untrusted or foreign file is
/// an error and stays.
pub fn remove_stale(instance: &str) -> Result<bool> {
    let instance = Instance::new(instance)?;
    let path = display_path(&instance);
    match shm_open(&instance, libc::O_RDONLY, 0) {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(false),
        _ => {}
    }
    // Five looks, as a creator does, before an unfinished file counts as a leftover.
    let mut unfinished_seen = 0;
    for _ in 0..5 {
        match inspect_existing(&instance, &path, &mut unfinished_seen)? {
            Existing::Stale => return Ok(true),
            Existing::Locked(_) => return Ok(false),
            Existing::InFlux => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    Ok(false)
}

/// Removes the name if it still refers to the file behind `fd` (someone may have replaced it).
pub(crate) fn unlink_if_ours(instance: &Instance, fd: &OwnedFd) {
    unlink_name_if_ours(&instance.shm_name(), fd);
}

/// [`unlink_if_ours`] for any shm name.
pub(crate) fn unlink_name_if_ours(name: &str, fd: &OwnedFd) {
    let path = format!("/dev/shm{name}");
    let (Ok(ours), Ok(named)) = (fstat(fd, &path), shm_open_name(name, libc::O_RDONLY, 0)) else {
        return;
    };
    if let Ok(theirs) = fstat(&named, &path) {
        if ours.st_dev == theirs.st_dev && ours.st_ino == theirs.st_ino {
            // Failure (already gone) is fine: the name no longer refers to our file either way.
            let _ = unlink_name(name);
        }
    }
}

/// `shm_unlink` of any name.
pub(crate) fn unlink_name(name: &str) -> std::io::Result<()> {
    let name = CString::new(name).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: valid NUL-terminated string.
    if unsafe { libc::shm_unlink(name.as_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Opens an existing segment for a reader: checks that it is trusted and can hold a header, and maps the
/// whole file. Returns the descriptor too: the reader keeps it to test the owner's lock ([`lock_held`]).
/// The current size of the file behind `fd` (fstat), if it can be had.
pub(crate) fn file_size(fd: &OwnedFd) -> Option<u64> {
    // SAFETY: an all-zero stat is a valid value for fstat to overwrite.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fd is an open descriptor we own; st is a valid out-pointer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return None;
    }
    u64::try_from(st.st_size).ok()
}

pub(crate) fn open(
    instance: &Instance,
    writable: bool,
    trust: &Trust,
) -> Result<(Mapping, OwnedFd)> {
    let path = display_path(instance);
    let flags = if writable {
        libc::O_RDWR
    } else {
        libc::O_RDONLY
    };
    let fd = match shm_open(instance, flags, 0) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
            return Err(HalError::NoSuchInstance {
                instance: instance.to_string(),
            })
        }
        Err(source) => return Err(open_error(&path, source, Side::Reader)),
    };
    let st = check_trust(&fd, &path, trust, Side::Reader)?;
    // The file size bounds everything: mapping past the end of a shm file faults on access (SIGBUS).
    let size = usize::try_from(st.st_size).unwrap_or(0);
    if size < header::SIZE {
        return Err(HalError::Foreign {
            path,
            reason: format!(
                "it is {size} bytes, smaller than the {}-byte header (if rtapi is starting right now, retry)",
                header::SIZE
            ),
        });
    }
    // Whole words only: the reader works in 64-bit atomics.
    let mapping = Mapping::map(&fd, size - size % 8, writable, &path)?;
    Ok((mapping, fd))
}

/// A validated, 8-aligned range of a mapping, kept alive by its own reference to the mapping. Handles on
/// the real-time path (pins, stats writers) hold one so that an access is a pointer add and an atomic
/// instruction: the bounds were checked once, when the block was made.
pub(crate) struct Block {
    ptr: NonNull<AtomicU64>,
    len: usize,
    _mapping: std::sync::Arc<Mapping>,
}

// SAFETY: a Block only hands out `&AtomicU64` into memory kept alive by its Arc<Mapping>; atomics are
// Send and Sync.
unsafe impl Send for Block {}
// SAFETY: as above.
unsafe impl Sync for Block {}

impl Block {
    /// `len` bytes at `offset` of `mapping`.
    ///
    /// # Panics
    /// If the range is unaligned or out of bounds (callers pass offsets they laid out or validated).
    pub(crate) fn new(mapping: &std::sync::Arc<Mapping>, offset: usize, len: usize) -> Block {
        assert!(
            offset % ALIGN == 0
                && len % ALIGN == 0
                && offset.checked_add(len).is_some_and(|e| e <= mapping.len()),
            "block {offset}+{len} outside the segment ({})",
            mapping.len()
        );
        // SAFETY: offset is in bounds (checked above), so the add stays inside the mapping.
        let ptr = unsafe { NonNull::new_unchecked(mapping.ptr.as_ptr().add(offset / 8)) };
        Block {
            ptr,
            len,
            _mapping: mapping.clone(),
        }
    }

    /// The address of the cell slot at byte `offset` inside the block (for width-exact cell access).
    #[inline(always)]
    pub(crate) fn ptr(&self, offset: usize) -> *const u8 {
        (self.at(offset) as *const AtomicU64).cast::<u8>()
    }

    /// The cell at byte `offset` inside the block.
    #[inline(always)]
    pub(crate) fn at(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(
            offset % ALIGN == 0 && offset + 8 <= self.len,
            "cell {offset} outside block {}",
            self.len
        );
        // SAFETY: callers use layout constants that lie inside the block (checked in debug builds above);
        // the block is inside the mapping (checked in `new`), which the Arc keeps mapped; access is atomic.
        unsafe { &*self.ptr.as_ptr().add(offset / 8) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trust_is_root_self_and_named_users() {
        let t = Trust::new();
        assert!(t.trusts(0) && t.trusts(euid()));
        let other = if euid() == 4242 { 4243 } else { 4242 };
        assert!(!t.trusts(other));
        assert!(t.clone().also_uid(other).trusts(other));
        assert_eq!(
            t.clone().also_user(&other.to_string()).unwrap(),
            t.clone().also_uid(other)
        );
        assert!(t.describe().starts_with("root"));
        assert!(Trust::new().also_user("no-such-user-rtapi").is_err());
        assert_eq!(user_label(0), "root (uid 0)");
    }
}
