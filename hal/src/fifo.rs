//! Sample FIFOs: one lock-free single-producer/single-consumer ring per `sampler`/`streamer`
//! instance, in its own POSIX shm file `/rtapi-<instance>:<fifo>` (`/dev/shm/rtapi-default:sampler.0`).
//! The `:` cannot appear in an instance name (only in object names), so a FIFO's file never collides
//! with a segment.
//!
//! The owner (the process running the instance) creates the file, holds an exclusive `flock` on it
//! for its whole life (as for the segment: a free lock means the owner is gone) and removes it when
//! the [`OwnedFifo`] drops. One other process at a time ([`FifoClient`]) is the other end: it holds an
//! open-file-description lock (`F_OFD_SETLK`) on the file's first byte, so a second reader or writer
//! is refused, and a client that dies frees it. The byte layout is `hal/LAYOUT.md` §12.
//!
//! The ring: `head` counts records written, `tail` records read, both only ever growing (wrapping
//! at 2^64); record `i` lives in slot `i % depth`. The producer writes a record's words, then
//! publishes with a release store of `head`; the consumer reads them after an acquire load of `head`,
//! then frees the slot with a release store of `tail`. Every access is an aligned 64-bit atomic, so
//! no process can see a torn word, and nothing blocks or allocates on either side. Each side checks
//! what the other wrote: `head − tail` beyond `depth` is corruption (the RT side treats it as
//! full/empty, a client refuses).

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::error::HalError;
use crate::name::Instance;
use crate::segment::{self, Block, Mapping, Side, Trust};
use crate::value::{Value, ValueType};

/// The file's first 8 bytes.
pub const FIFO_MAGIC: [u8; 8] = *b"rtapiFQ\x01";
/// The format version this code writes and reads.
pub const FIFO_VERSION: u64 = 1;
/// Most channels (pins) one FIFO carries.
pub const MAX_CHANNELS: usize = 64;
/// Largest data area, in bytes (`depth × (1 + channels) × 8`).
pub const MAX_DATA_BYTES: usize = 256 << 20;

/// Byte offsets of the header (LAYOUT.md §12).
pub mod offsets {
    /// [`FIFO_MAGIC`](super::FIFO_MAGIC).
    pub const MAGIC: usize = 0;
    /// [`FIFO_VERSION`](super::FIFO_VERSION).
    pub const VERSION: usize = 8;
    /// The owner's pid (for messages).
    pub const OWNER_PID: usize = 16;
    /// 1: the RT side produces (sampler); 2: the RT side consumes (streamer).
    pub const KIND: usize = 24;
    /// Channels per record.
    pub const CHANNELS: usize = 32;
    /// Records the ring holds.
    pub const DEPTH: usize = 40;
    /// One ASCII letter per channel (`b f s u`), NUL-padded, 64 bytes.
    pub const TYPES: usize = 48;
    /// Words per record: 1 (the sample number) + channels.
    pub const RECORD_WORDS: usize = 112;
    /// Records written so far (the producer's counter), alone in its cache line.
    pub const HEAD: usize = 128;
    /// Records read so far (the consumer's counter), alone in its cache line.
    pub const TAIL: usize = 192;
    /// The first record.
    pub const DATA: usize = 256;
}

/// Which side of a FIFO the real-time function is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FifoKind {
    /// `sampler`: the RT function produces, a client (`rtapi sample`) consumes.
    Sampler = 1,
    /// `streamer`: a client (`rtapi stream`) produces, the RT function consumes.
    Streamer = 2,
}

impl FifoKind {
    fn from_code(code: u64) -> Option<FifoKind> {
        match code {
            1 => Some(FifoKind::Sampler),
            2 => Some(FifoKind::Streamer),
            _ => None,
        }
    }
}

/// Why a FIFO could not be created or opened.
#[derive(Debug)]
pub enum FifoError {
    /// A trust, OS or name problem, as for the segment.
    Hal(HalError),
    /// No such FIFO (the instance is not running, or has no such sampler/streamer).
    Missing {
        /// The file.
        path: String,
    },
    /// The file is not a FIFO of this format, or its contents fail validation.
    Foreign {
        /// The file.
        path: String,
        /// What did not match.
        reason: String,
    },
    /// Another live owner, or another client, holds it.
    InUse {
        /// The file.
        path: String,
        /// Who: "its owner (pid N)" or "another reader/writer".
        who: String,
    },
    /// A sampler's FIFO opened as a streamer's, or the reverse.
    WrongKind {
        /// The file.
        path: String,
        /// What it is.
        found: FifoKind,
    },
}

impl std::fmt::Display for FifoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FifoError::Hal(e) => write!(f, "{e}"),
            FifoError::Missing { path } => write!(f, "{path} does not exist"),
            FifoError::Foreign { path, reason } => {
                write!(
                    f,
                    "{path} is not a usable rtapi sample FIFO ({reason}); refused: if no rtapi \
                     instance of that name is running, remove it"
                )
            }
            FifoError::InUse { path, who } => write!(
                f,
                "{path} is in use by {who}; a FIFO has one reader (sampler) or one writer \
                 (streamer) at a time: end that one first"
            ),
            FifoError::WrongKind { path, found } => write!(
                f,
                "{path} is a {} FIFO",
                match found {
                    FifoKind::Sampler => "sampler's (read it with `rtapi sample`)",
                    FifoKind::Streamer => "streamer's (feed it with `rtapi stream`)",
                }
            ),
        }
    }
}

impl std::error::Error for FifoError {}

impl From<HalError> for FifoError {
    fn from(e: HalError) -> Self {
        FifoError::Hal(e)
    }
}

/// The type letter of a channel in a `cfg=` string and in the header: `b f s u`.
pub fn type_letter(ty: ValueType) -> Option<u8> {
    match ty {
        ValueType::Bit => Some(b'b'),
        ValueType::Float => Some(b'f'),
        ValueType::S32 => Some(b's'),
        ValueType::U32 => Some(b'u'),
        _ => None,
    }
}

/// Parses a `cfg=` string as LinuxCNC 2.9 does: one channel per letter, `B b F f S s U u`.
pub fn parse_cfg(cfg: &str) -> Result<Vec<ValueType>, String> {
    if cfg.is_empty() {
        return Err("an empty cfg string".into());
    }
    if cfg.len() > MAX_CHANNELS {
        return Err(format!("{} channels, at most {MAX_CHANNELS}", cfg.len()));
    }
    cfg.chars()
        .map(|c| match c.to_ascii_lowercase() {
            'b' => Ok(ValueType::Bit),
            'f' => Ok(ValueType::Float),
            's' => Ok(ValueType::S32),
            'u' => Ok(ValueType::U32),
            _ => Err(format!(
                "'{}' is not a channel type (b bit, f float, s s32, u u32)",
                c.escape_default()
            )),
        })
        .collect()
}

/// The shm name of FIFO `fifo` of `instance`: `/rtapi-<instance>:<fifo>`.
pub fn fifo_shm_name(instance: &Instance, fifo: &str) -> String {
    format!("/rtapi-{instance}:{fifo}")
}

fn file_size(depth: usize, channels: usize) -> Option<usize> {
    let data = depth.checked_mul(channels + 1)?.checked_mul(8)?;
    (data <= MAX_DATA_BYTES).then_some(offsets::DATA + data)
}

/// The owner pid in the header of a FIFO file (magic checked), if it has one.
fn header_pid(fd: &OwnedFd, path: &str) -> Option<u32> {
    let size = usize::try_from(segment::fstat(fd, path).ok()?.st_size).ok()?;
    if size < offsets::DATA {
        return None;
    }
    let head = Mapping::map(fd, offsets::DATA, false, path).ok()?;
    (head.load(offsets::MAGIC).to_ne_bytes() == FIFO_MAGIC)
        .then(|| head.load(offsets::OWNER_PID) as u32)
}

/// The ring as both sides see it: the mapping, its geometry, and the words.
struct Ring {
    block: Block,
    depth: u64,
    record_words: usize,
}

impl Ring {
    #[inline(always)]
    fn word(&self, offset: usize) -> &std::sync::atomic::AtomicU64 {
        self.block.at(offset)
    }

    #[inline(always)]
    fn slot(&self, index: u64, word: usize) -> &std::sync::atomic::AtomicU64 {
        // `index % depth < depth` and `word < record_words`: inside the data area the block covers.
        let slot = (index % self.depth) as usize;
        self.block
            .at(offsets::DATA + (slot * self.record_words + word) * 8)
    }

    /// Records waiting, or `None` when the counters are impossible (more than `depth` apart).
    #[inline(always)]
    fn waiting(&self) -> Option<u64> {
        let head = self.word(offsets::HEAD).load(Ordering::Acquire);
        let tail = self.word(offsets::TAIL).load(Ordering::Acquire);
        let n = head.wrapping_sub(tail);
        (n <= self.depth).then_some(n)
    }

    /// Producer: appends `(number, values)`; false when full (or the counters are impossible).
    #[inline(always)]
    fn push(&self, number: u64, values: impl Iterator<Item = u64>) -> bool {
        let head = self.word(offsets::HEAD).load(Ordering::Relaxed);
        let tail = self.word(offsets::TAIL).load(Ordering::Acquire);
        if head.wrapping_sub(tail) >= self.depth {
            return false;
        }
        self.slot(head, 0).store(number, Ordering::Relaxed);
        for (i, v) in values.take(self.record_words - 1).enumerate() {
            self.slot(head, i + 1).store(v, Ordering::Relaxed);
        }
        self.word(offsets::HEAD)
            .store(head.wrapping_add(1), Ordering::Release);
        true
    }

    /// Consumer: takes the oldest record into `out` (`out[0]` the number, then the values); false
    /// when empty (or the counters are impossible).
    #[inline(always)]
    fn pop(&self, out: &mut [u64]) -> bool {
        let tail = self.word(offsets::TAIL).load(Ordering::Relaxed);
        let head = self.word(offsets::HEAD).load(Ordering::Acquire);
        let n = head.wrapping_sub(tail);
        if n == 0 || n > self.depth {
            return false;
        }
        for (i, o) in out.iter_mut().take(self.record_words).enumerate() {
            *o = self.slot(tail, i).load(Ordering::Relaxed);
        }
        self.word(offsets::TAIL)
            .store(tail.wrapping_add(1), Ordering::Release);
        true
    }
}

/// The owner's end of a FIFO: created with the instance's function, removed on drop. Its
/// [`push`](Self::push) / [`pop`](Self::pop) are what the RT function calls.
pub struct OwnedFifo {
    ring: Ring,
    name: String,
    fd: OwnedFd,
}

impl OwnedFifo {
    /// Creates `/rtapi-<instance>:<fifo>` (mode 0600, locked, header written), reclaiming a file left
    /// by a dead owner of the same user; a live owner's file is [`FifoError::InUse`].
    pub fn create(
        instance: &Instance,
        fifo: &str,
        kind: FifoKind,
        types: &[ValueType],
        depth: usize,
    ) -> Result<OwnedFifo, FifoError> {
        crate::name::validate(fifo)?;
        let name = fifo_shm_name(instance, fifo);
        let path = format!("/dev/shm{name}");
        let invalid = |reason: String| {
            FifoError::Hal(HalError::InvalidConfig {
                what: "sample FIFO",
                reason,
            })
        };
        if types.is_empty()
            || types.len() > MAX_CHANNELS
            || types.iter().any(|t| type_letter(*t).is_none())
        {
            return Err(invalid(format!(
                "{} channels of bit/float/s32/u32 (1 to {MAX_CHANNELS})",
                types.len()
            )));
        }
        let size = file_size(depth, types.len())
            .filter(|_| depth > 0)
            .ok_or_else(|| {
                invalid(format!(
                    "depth {depth} × {} channels: give a depth from 1 to {}",
                    types.len(),
                    MAX_DATA_BYTES / 8 / (types.len() + 1)
                ))
            })?;
        let mut fd = None;
        for _ in 0..100 {
            match segment::shm_open_name(&name, libc::O_CREAT | libc::O_EXCL | libc::O_RDWR, 0o600)
            {
                Ok(f) => {
                    fd = Some(f);
                    break;
                }
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
                Err(e) => return Err(segment::open_error(&path, e, Side::Owner).into()),
            }
            // Someone's file is there: reclaim it only if it is ours to trust and nobody holds it.
            let old = match segment::shm_open_name(&name, libc::O_RDONLY, 0) {
                Ok(f) => f,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
                Err(e) => return Err(segment::open_error(&path, e, Side::Owner).into()),
            };
            segment::check_trust(&old, &path, &Trust::new(), Side::Owner)?;
            if !segment::try_lock(&old) {
                // Locked by this very process: the ring of an instance unloaded live (its function
                // is off every thread, but its closure, which owns the file, lives as long as the
                // runtime). Two live instances cannot share a name, so that ring has no writer
                // left: take the name over. The old owner removes only its own inode on drop.
                if header_pid(&old, &path) == Some(std::process::id()) {
                    let _ = segment::unlink_name(&name);
                    continue;
                }
                return Err(FifoError::InUse {
                    path,
                    who: "a live owner (another instance, or this one loaded it already)".into(),
                });
            }
            // Held by us now, so no owner is alive: remove the leftover and try again.
            let _ = segment::unlink_name(&name);
        }
        let fd = fd.ok_or_else(|| FifoError::InUse {
            path: path.clone(),
            who: "processes that keep creating it".into(),
        })?;
        // SAFETY: flock on our own descriptor; blocking is fine, only probes (released at once) or a
        // reclaimer that found the name unlinked hold it.
        if unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(HalError::os("flock", &path).into());
        }
        // SAFETY: fchmod on our own descriptor (shm_open's mode is filtered by the umask).
        if unsafe { libc::fchmod(fd.as_raw_fd(), 0o600) } != 0 {
            return Err(HalError::os("fchmod", &path).into());
        }
        // SAFETY: ftruncate on our own descriptor; `size` ≤ 256 MiB + 256 fits an off_t.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), size as libc::off_t) } != 0 {
            let e = HalError::os("ftruncate", &path);
            let _ = segment::unlink_name(&name);
            return Err(e.into());
        }
        let mapping = Arc::new(Mapping::map(&fd, size, true, &path)?);
        let record_words = types.len() + 1;
        let word = |off: usize, v: u64| mapping.word(off).store(v, Ordering::Relaxed);
        word(offsets::VERSION, FIFO_VERSION);
        word(offsets::OWNER_PID, u64::from(std::process::id()));
        word(offsets::KIND, kind as u64);
        word(offsets::CHANNELS, types.len() as u64);
        word(offsets::DEPTH, depth as u64);
        word(offsets::RECORD_WORDS, record_words as u64);
        let mut letters = [0u8; 64];
        for (l, t) in letters.iter_mut().zip(types) {
            *l = type_letter(*t).expect("checked above");
        }
        for (i, chunk) in letters.chunks_exact(8).enumerate() {
            word(
                offsets::TYPES + i * 8,
                u64::from_ne_bytes(chunk.try_into().expect("8 bytes")),
            );
        }
        // The magic last, released: a client that sees it sees the whole header.
        mapping
            .word(offsets::MAGIC)
            .store(u64::from_ne_bytes(FIFO_MAGIC), Ordering::Release);
        let block = Block::new(&mapping, 0, size);
        Ok(OwnedFifo {
            ring: Ring {
                block,
                depth: depth as u64,
                record_words,
            },
            name,
            fd,
        })
    }

    /// The file, e.g. `/dev/shm/rtapi-default:sampler.0`.
    pub fn path(&self) -> String {
        format!("/dev/shm{}", self.name)
    }

    /// Producer side (sampler): appends a record; false when the ring is full. Real-time safe.
    #[inline(always)]
    pub fn push(&self, number: u64, values: impl Iterator<Item = u64>) -> bool {
        self.ring.push(number, values)
    }

    /// Consumer side (streamer): takes the oldest record into `out` (`out[0]` its number, then one
    /// word per channel); false when empty. Real-time safe.
    #[inline(always)]
    pub fn pop(&self, out: &mut [u64]) -> bool {
        self.ring.pop(out)
    }

    /// Records waiting (0 when the counters are impossible). Real-time safe.
    #[inline(always)]
    pub fn len(&self) -> u64 {
        self.ring.waiting().unwrap_or(0)
    }

    /// No record waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The ring's capacity in records.
    pub fn depth(&self) -> u64 {
        self.ring.depth
    }
}

impl Drop for OwnedFifo {
    fn drop(&mut self) {
        segment::unlink_name_if_ours(&self.name, &self.fd);
    }
}

/// The other end of a FIFO, in another process: reads a sampler's records or feeds a streamer.
/// Opening checks the file as the segment is checked (regular file, trusted owner, mode at most
/// 0640, no symlink), then the header and the exact size; one client at a time.
pub struct FifoClient {
    ring: Ring,
    kind: FifoKind,
    types: Vec<ValueType>,
    path: String,
    owner_pid: u32,
    fd: OwnedFd,
}

impl FifoClient {
    /// Opens FIFO `fifo` (e.g. `sampler.0`) of `instance`, expecting `kind`.
    pub fn open(
        instance: &str,
        fifo: &str,
        kind: FifoKind,
        trust: &Trust,
    ) -> Result<FifoClient, FifoError> {
        let instance = Instance::new(instance)?;
        crate::name::validate(fifo)?;
        let name = fifo_shm_name(&instance, fifo);
        let path = format!("/dev/shm{name}");
        let fd = match segment::shm_open_name(&name, libc::O_RDWR, 0) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                return Err(FifoError::Missing { path })
            }
            Err(e) => return Err(segment::open_error(&path, e, Side::Reader).into()),
        };
        let st = segment::check_trust(&fd, &path, trust, Side::Reader)?;
        let foreign = |reason: String| FifoError::Foreign {
            path: path.clone(),
            reason,
        };
        let size = usize::try_from(st.st_size).unwrap_or(0);
        if size < offsets::DATA {
            return Err(foreign(format!("{size} bytes, smaller than the header")));
        }
        let mapping = Arc::new(Mapping::map(&fd, size - size % 8, true, &path)?);
        let word = |off: usize| mapping.word(off).load(Ordering::Acquire);
        if word(offsets::MAGIC).to_ne_bytes() != FIFO_MAGIC {
            return Err(foreign("its first bytes are not the FIFO magic".into()));
        }
        if word(offsets::VERSION) != FIFO_VERSION {
            return Err(foreign(format!(
                "format version {}, this rtapi reads {FIFO_VERSION}",
                word(offsets::VERSION)
            )));
        }
        let found = FifoKind::from_code(word(offsets::KIND))
            .ok_or_else(|| foreign(format!("unknown kind {}", word(offsets::KIND))))?;
        if found != kind {
            return Err(FifoError::WrongKind { path, found });
        }
        let channels = usize::try_from(word(offsets::CHANNELS)).unwrap_or(usize::MAX);
        if channels == 0 || channels > MAX_CHANNELS {
            return Err(foreign(format!("{channels} channels")));
        }
        let depth = usize::try_from(word(offsets::DEPTH)).unwrap_or(usize::MAX);
        if word(offsets::RECORD_WORDS) != channels as u64 + 1 {
            return Err(foreign("record size does not match the channels".into()));
        }
        match file_size(depth, channels) {
            Some(s) if depth > 0 && s == size => {}
            _ => {
                return Err(foreign(format!(
                    "{size} bytes do not match depth {depth} × {channels} channels"
                )))
            }
        }
        let mut letters = [0u8; 64];
        for i in 0..8 {
            letters[i * 8..i * 8 + 8].copy_from_slice(&word(offsets::TYPES + i * 8).to_ne_bytes());
        }
        let types = parse_cfg(std::str::from_utf8(&letters[..channels]).unwrap_or("?"))
            .map_err(|e| foreign(format!("channel types: {e}")))?;
        if letters[channels..].iter().any(|&b| b != 0) {
            return Err(foreign("bytes after the channel types".into()));
        }
        let owner_pid = word(offsets::OWNER_PID) as u32;
        if !segment::lock_held(&fd) {
            return Err(foreign(format!(
                "its owner (pid {owner_pid}) is gone; remove it if no rtapi process runs"
            )));
        }
        // One client at a time: an OFD write lock on byte 0, freed when this descriptor closes.
        let lock = libc::flock {
            l_type: libc::F_WRLCK as libc::c_short,
            l_whence: libc::SEEK_SET as libc::c_short,
            l_start: 0,
            l_len: 1,
            l_pid: 0,
        };
        // SAFETY: F_OFD_SETLK on our own descriptor with a valid, initialized flock struct.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_SETLK, &lock) } != 0 {
            return Err(FifoError::InUse {
                path,
                who: format!(
                    "another {}",
                    match kind {
                        FifoKind::Sampler => "reader (`rtapi sample`?)",
                        FifoKind::Streamer => "writer (`rtapi stream`?)",
                    }
                ),
            });
        }
        let ring = Ring {
            block: Block::new(&mapping, 0, size),
            depth: depth as u64,
            record_words: channels + 1,
        };
        if ring.waiting().is_none() {
            return Err(foreign(
                "its head and tail are more than depth apart".into(),
            ));
        }
        Ok(FifoClient {
            ring,
            kind,
            types,
            path,
            owner_pid,
            fd,
        })
    }

    /// The channel types, in pin order.
    pub fn types(&self) -> &[ValueType] {
        &self.types
    }

    /// What the FIFO carries.
    pub fn kind(&self) -> FifoKind {
        self.kind
    }

    /// The file.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The owner's pid (from the header, for messages).
    pub fn owner_pid(&self) -> u32 {
        self.owner_pid
    }

    /// The ring's capacity in records.
    pub fn depth(&self) -> u64 {
        self.ring.depth
    }

    /// Whether the owner still holds its lock (the instance runs and has the FIFO).
    pub fn owner_alive(&self) -> bool {
        segment::lock_held(&self.fd)
    }

    /// Records waiting; an error if the counters are impossible.
    pub fn len(&self) -> Result<u64, FifoError> {
        self.ring.waiting().ok_or_else(|| self.corrupt())
    }

    /// No record waiting.
    pub fn is_empty(&self) -> bool {
        self.len().map_or(true, |n| n == 0)
    }

    fn corrupt(&self) -> FifoError {
        FifoError::Foreign {
            path: self.path.clone(),
            reason: "its head and tail are more than depth apart".into(),
        }
    }

    /// Sampler: the oldest record, `(sample number, values)`, or `None` when none waits.
    pub fn pop(&self) -> Result<Option<(u64, Vec<Value>)>, FifoError> {
        if self.kind != FifoKind::Sampler {
            return Err(FifoError::WrongKind {
                path: self.path.clone(),
                found: self.kind,
            });
        }
        self.len()?;
        let mut raw = [0u64; MAX_CHANNELS + 1];
        if !self.ring.pop(&mut raw[..self.ring.record_words]) {
            return Ok(None);
        }
        let values = self
            .types
            .iter()
            .zip(&raw[1..])
            .map(|(t, b)| Value::from_bits(*t, *b))
            .collect();
        Ok(Some((raw[0], values)))
    }

    /// Streamer: appends one record of values (one per channel, of the channel's type); `Ok(false)`
    /// when the ring is full.
    pub fn push(&self, values: &[Value]) -> Result<bool, FifoError> {
        if self.kind != FifoKind::Streamer {
            return Err(FifoError::WrongKind {
                path: self.path.clone(),
                found: self.kind,
            });
        }
        assert!(
            values.len() == self.types.len()
                && values
                    .iter()
                    .zip(&self.types)
                    .all(|(v, t)| v.value_type() == *t),
            "push: one value per channel, of its type"
        );
        self.len()?;
        Ok(self.ring.push(0, values.iter().map(|v| v.to_bits())))
    }
}

/// One sample as a reader gets it: its number (the sampler's `sample-num` when it was taken) and
/// one value per channel.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The sampler's `sample-num` for this sample (as an unsigned 32-bit count).
    pub number: u64,
    /// One value per channel, in pin order.
    pub values: Vec<Value>,
}

impl FifoClient {
    /// Opens sampler FIFO `fifo` (e.g. `sampler.0`) of `instance` to read its rows.
    pub fn sampler(instance: &str, fifo: &str, trust: &Trust) -> Result<FifoClient, FifoError> {
        FifoClient::open(instance, fifo, FifoKind::Sampler, trust)
    }

    /// Opens streamer FIFO `fifo` (e.g. `streamer.0`) of `instance` to feed it.
    pub fn streamer(instance: &str, fifo: &str, trust: &Trust) -> Result<FifoClient, FifoError> {
        FifoClient::open(instance, fifo, FifoKind::Streamer, trust)
    }

    /// Sampler: the rows waiting now, oldest first (the iterator ends when the ring is empty; call
    /// again later for more). Never blocks.
    pub fn rows(&self) -> impl Iterator<Item = Result<Row, FifoError>> + '_ {
        std::iter::from_fn(move || {
            self.pop()
                .map(|r| r.map(|(number, values)| Row { number, values }))
                .transpose()
        })
    }
}

/// A value as a sample line writes it: bit `0`/`1`, integers in decimal, floats in the shortest form
/// that reads back to the same bits (`0.1`, `-0`, `1e300`, `inf`, `-inf`, `nan`).
pub fn format_value(v: Value) -> String {
    match v {
        Value::Bit(b) => if b { "1" } else { "0" }.to_string(),
        Value::Float(f) if f.is_nan() => "nan".to_string(),
        Value::Float(f) => format!("{f:?}").trim_end_matches(".0").to_string(),
        other => other.to_string(),
    }
}

/// Parses one value of type `ty` from a stream line's field: bit `0`/`1` (or `TRUE`/`FALSE`),
/// integers in decimal (or `0x` hex), floats as Rust and C read them (`1.5`, `-2e-3`, `inf`, `nan`).
pub fn parse_value(ty: ValueType, field: &str) -> Result<Value, String> {
    let bad = || {
        let accepted = match ty {
            ValueType::Bit => "write 0 or 1 (or FALSE/TRUE)",
            ValueType::Float => "write a number such as 1.5, -2e-3, inf or nan",
            ValueType::S32 => "write an integer from -2147483648 to 2147483647 (decimal or 0x hex)",
            ValueType::U32 => "write an integer from 0 to 4294967295 (decimal or 0x hex)",
            _ => "this channel type takes no values",
        };
        format!("'{}' is not a {ty}: {accepted}", field.escape_default())
    };
    let int = |s: &str| -> Option<i64> {
        let (neg, digits) = match s.strip_prefix('-') {
            Some(d) => (true, d),
            None => (false, s.strip_prefix('+').unwrap_or(s)),
        };
        let v = match digits
            .strip_prefix("0x")
            .or_else(|| digits.strip_prefix("0X"))
        {
            Some(hex) => i64::from_str_radix(hex, 16).ok()?,
            None if digits.bytes().all(|b| b.is_ascii_digit()) => digits.parse().ok()?,
            None => return None,
        };
        Some(if neg { -v } else { v })
    };
    match ty {
        ValueType::Bit => match field {
            "0" | "FALSE" | "false" => Ok(Value::Bit(false)),
            "1" | "TRUE" | "true" => Ok(Value::Bit(true)),
            _ => Err(bad()),
        },
        ValueType::Float => field.parse::<f64>().map(Value::Float).map_err(|_| bad()),
        ValueType::S32 => int(field)
            .and_then(|v| i32::try_from(v).ok())
            .map(Value::S32)
            .ok_or_else(bad),
        ValueType::U32 => int(field)
            .and_then(|v| u32::try_from(v).ok())
            .map(Value::U32)
            .ok_or_else(bad),
        _ => Err(bad()),
    }
}

/// Parses a stream line: whitespace-separated fields, one per channel. `Ok(None)` for a comment
/// (`#` first) or an empty line.
pub fn parse_line(types: &[ValueType], line: &str) -> Result<Option<Vec<Value>>, String> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.len() != types.len() {
        return Err(format!(
            "{} values, the FIFO has {} channels",
            fields.len(),
            types.len()
        ));
    }
    types
        .iter()
        .zip(fields)
        .enumerate()
        .map(|(i, (t, f))| parse_value(*t, f).map_err(|e| format!("value {}: {e}", i + 1)))
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_print_and_parse_back_bit_exact() {
        let floats = [
            0.0,
            -0.0,
            0.1,
            -1.5,
            1e300,
            f64::MAX,
            f64::MIN,
            f64::MIN_POSITIVE,
            5e-324,
            f64::INFINITY,
            f64::NEG_INFINITY,
            123456789.0,
        ];
        for f in floats {
            let t = format_value(Value::Float(f));
            let back = parse_value(ValueType::Float, &t).unwrap();
            assert_eq!(back.to_bits(), f.to_bits(), "{f} → {t}");
        }
        assert_eq!(format_value(Value::Float(-0.0)), "-0");
        assert_eq!(format_value(Value::Float(2.0)), "2");
        assert_eq!(format_value(Value::Float(f64::NAN)), "nan");
        assert!(matches!(parse_value(ValueType::Float, "nan"), Ok(Value::Float(f)) if f.is_nan()));
        for (ty, t, v) in [
            (ValueType::S32, "-2147483648", Value::S32(i32::MIN)),
            (ValueType::S32, "2147483647", Value::S32(i32::MAX)),
            (ValueType::U32, "4294967295", Value::U32(u32::MAX)),
            (ValueType::U32, "0x10", Value::U32(16)),
            (ValueType::Bit, "1", Value::Bit(true)),
        ] {
            assert_eq!(parse_value(ty, t), Ok(v));
        }
        for (ty, t) in [
            (ValueType::S32, "2147483648"),
            (ValueType::U32, "-1"),
            (ValueType::Bit, "2"),
            (ValueType::Float, "1.5x"),
            (ValueType::S32, "1.0"),
        ] {
            assert!(parse_value(ty, t).is_err(), "{t}");
        }
        let types = [ValueType::Float, ValueType::Bit];
        assert_eq!(parse_line(&types, "# x"), Ok(None));
        assert!(parse_line(&types, "1").unwrap_err().contains("1 values"));
        assert!(parse_line(&types, "1 5").unwrap_err().contains("value 2"));
        // LinuxCNC 2.9's halsampler prints floats with six decimals and a space after the last
        // value (seen in halrun): such lines read as they are.
        let lc = [
            ValueType::Float,
            ValueType::Bit,
            ValueType::S32,
            ValueType::U32,
        ];
        assert_eq!(
            parse_line(&lc, "-0.000000 1 -2147483648 4294967295 ").unwrap(),
            Some(vec![
                Value::Float(-0.0),
                Value::Bit(true),
                Value::S32(i32::MIN),
                Value::U32(u32::MAX)
            ])
        );
    }

    #[test]
    fn cfg_letters_are_linuxcncs() {
        assert_eq!(
            parse_cfg("fBsU").unwrap(),
            [
                ValueType::Float,
                ValueType::Bit,
                ValueType::S32,
                ValueType::U32
            ]
        );
        assert!(parse_cfg("").is_err());
        assert!(parse_cfg("fl").is_err());
        assert!(parse_cfg(&"f".repeat(65)).is_err());
    }
}
