//! Validation: the only code that turns numbers read from a segment into offsets we follow.
//!
//! Nothing read from a segment is trusted: the header is checked field by field, each table's extent is
//! checked against the segment size with overflow-checked arithmetic, and each reference is checked to
//! land exactly on a record of the table it claims. Out-of-bounds or misaligned offsets become
//! `HalError::Corrupt`; the `Mapping` accessors additionally assert bounds, so a bug here would panic,
//! never read outside the mapping.

use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

use crate::error::{HalError, Result};
use crate::layout::{self, header as h, stats as st, table, Table, ALIGN, NAME_FIELD};
use crate::name;
use crate::segment::Mapping;
use crate::stats::{IoAt, MAX_BINS};

/// A validated table: room for `capacity` records of `stride` bytes at `offset`, all inside the segment
/// (fixed from READY on). How many are in use (`count`) changes with the structure: see [`Counted`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct TableView {
    pub offset: usize,
    pub capacity: usize,
    pub stride: usize,
}

/// How long a reader retries a structure generation that stays odd (the owner mid-change; a real
/// change takes microseconds) before refusing: the owner probably died in the middle of one.
pub(super) const STUCK_CHANGE: std::time::Duration = std::time::Duration::from_secs(1);
/// How long a reader keeps retrying a structure that changes under every read attempt.
pub(super) const CHANGING_BUDGET: std::time::Duration = std::time::Duration::from_secs(2);

/// The lifecycle state published in the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentState {
    /// Structure complete, threads not (yet) running.
    Ready,
    /// The owner's threads are running.
    Running,
    /// The owner shut down; values are the last ones written.
    Stopped,
}

/// The header of a validated segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderInfo {
    /// The instance name the owner wrote (the `<instance>` of `/rtapi-<instance>`).
    pub instance: String,
    /// Layout major version (a reader refuses other majors).
    pub version_major: u16,
    /// Layout minor version (any minor of the major is readable; see `hal/LAYOUT.md`).
    pub version_minor: u16,
    /// Segment size in bytes, as the owner wrote it.
    pub total_size: u64,
    /// Process id of the owner (whether it is alive comes from its lock: [`HalReader::owner_alive`](crate::HalReader::owner_alive)).
    pub owner_pid: u32,
    /// CLOCK_REALTIME ns when the owner created the segment.
    pub start_time_ns: u64,
    /// The lifecycle state when [`HalReader::header`](crate::HalReader::header) was called.
    pub state: SegmentState,
}

/// A mapping whose header and tables passed validation.
pub(crate) struct View {
    pub m: Arc<Mapping>,
    /// Bytes that belong to the segment (`total_size`, which is ≤ the mapping's length).
    pub limit: usize,
    pub header_size: usize,
    pub tables: [TableView; 6],
    pub header: HeaderInfo,
}

fn corrupt(reason: impl Into<String>) -> HalError {
    HalError::corrupt(reason)
}

/// `u32` at `off` (must lie in an 8-aligned word, as every u32 of the layout does).
pub(crate) fn load_u32(m: &Mapping, off: usize) -> u32 {
    let word = m.load(off & !7);
    // Native-endian: the u32 at the lower address is the low half on little-endian hosts.
    let bytes = word.to_ne_bytes();
    let i = off & 7;
    u32::from_ne_bytes(bytes[i..i + 4].try_into().expect("4 bytes"))
}

impl View {
    /// Validates the header and the table descriptors of `m`. `path` names the segment in messages.
    pub(super) fn new(m: Arc<Mapping>, path: &str) -> Result<View> {
        let foreign = |reason: String| HalError::Foreign {
            path: path.to_string(),
            reason,
        };
        if m.len() < h::SIZE {
            return Err(foreign(format!(
                "it is {} bytes, smaller than the {}-byte header",
                m.len(),
                h::SIZE
            )));
        }
        let mut magic = [0u8; 8];
        m.copy_out(h::MAGIC, &mut magic);
        if magic == [0; 8] {
            // Sized by `ftruncate` but not yet written: an owner in the middle of creating it.
            return Err(HalError::NotReady {
                instance: "?".into(),
                pid: 0,
            });
        }
        if magic != layout::MAGIC {
            return Err(foreign(
                "its first bytes are not the rtapi magic \"RTAPIHAL\"".into(),
            ));
        }
        let bom = m.load(h::BYTE_ORDER);
        if bom != layout::BYTE_ORDER_MARK {
            return Err(if bom.swap_bytes() == layout::BYTE_ORDER_MARK {
                foreign("it was written by a host of the other byte order".into())
            } else {
                corrupt(format!("byte-order mark is {bom:#x}"))
            });
        }
        let version = load_u32(&m, h::VERSION);
        let (major, minor) = ((version >> 16) as u16, (version & 0xffff) as u16);
        if major != layout::VERSION_MAJOR {
            return Err(HalError::UnsupportedVersion {
                found_major: major,
                found_minor: minor,
                supported_major: layout::VERSION_MAJOR,
            });
        }
        // State first, with acquire: only after READY is the rest of the segment written.
        let pid = load_u32(&m, h::OWNER_PID);
        let state = match m.word(h::STATE).load(Ordering::Acquire) {
            layout::state::READY => SegmentState::Ready,
            layout::state::RUNNING => SegmentState::Running,
            layout::state::STOPPED => SegmentState::Stopped,
            0 | layout::state::BUILDING => {
                return Err(HalError::NotReady {
                    instance: instance_hint(&m),
                    pid,
                });
            }
            other => return Err(corrupt(format!("unknown segment state {other}"))),
        };
        let header_size = load_u32(&m, h::HEADER_SIZE) as usize;
        if header_size < h::SIZE || header_size % ALIGN != 0 || header_size > m.len() {
            return Err(corrupt(format!("header size {header_size} is invalid")));
        }
        let total = m.load(h::TOTAL_SIZE);
        if total < header_size as u64 || total % ALIGN as u64 != 0 {
            return Err(corrupt(format!("total size {total} is invalid")));
        }
        if total > m.len() as u64 {
            return Err(corrupt(format!(
                "truncated: the header says {total} bytes but only {} are there",
                m.len()
            )));
        }
        let limit = total as usize;
        let mut inst = [0u8; NAME_FIELD];
        m.copy_out(h::INSTANCE, &mut inst);
        let instance = name::decode(&inst)?;
        let mut tables = [TableView {
            offset: 0,
            capacity: 0,
            stride: 0,
        }; 6];
        for t in Table::ALL {
            tables[t as usize] = table_view(&m, t, header_size, limit)?;
        }
        // Tables must not overlap one another (each has its own records).
        let mut extents: Vec<(usize, usize, &str)> = Table::ALL
            .iter()
            .map(|&t| {
                let tv = tables[t as usize];
                (tv.offset, tv.offset + tv.capacity * tv.stride, t.as_str())
            })
            .filter(|e| e.0 < e.1)
            .collect();
        extents.sort();
        for w in extents.windows(2) {
            if w[0].1 > w[1].0 {
                return Err(corrupt(format!(
                    "the {} table and the {} table overlap",
                    w[0].2, w[1].2
                )));
            }
        }
        let header = HeaderInfo {
            instance,
            version_major: major,
            version_minor: minor,
            total_size: total,
            owner_pid: pid,
            start_time_ns: m.load(h::START_TIME_NS),
            state,
        };
        Ok(View {
            m,
            limit,
            header_size,
            tables,
            header,
        })
    }

    /// The state word now (it changes while the owner runs).
    pub(super) fn state(&self) -> SegmentState {
        match self.m.word(h::STATE).load(Ordering::Acquire) {
            layout::state::RUNNING => SegmentState::Running,
            layout::state::STOPPED => SegmentState::Stopped,
            _ => SegmentState::Ready,
        }
    }

    /// Runs `f` over a consistent structure (LAYOUT.md section 7a): waits out an odd generation, reads
    /// the table counts, runs `f`, and keeps the result only if the generation did not move meanwhile
    /// (an error from a torn read is discarded too). Refuses a generation stuck odd for
    /// [`STUCK_CHANGE`] or a structure that changed under every attempt for [`CHANGING_BUDGET`].
    pub(super) fn consistent<T>(&self, mut f: impl FnMut(&Counted<'_>) -> Result<T>) -> Result<T> {
        let gen = self.m.word(h::GENERATION);
        let start = std::time::Instant::now();
        let mut odd_since: Option<std::time::Instant> = None;
        let mut spins = 0u32;
        loop {
            let g1 = gen.load(Ordering::Acquire);
            if g1 % 2 == 1 {
                let since = *odd_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() > STUCK_CHANGE {
                    return Err(HalError::StructureBusy { stuck: true });
                }
                spins += 1;
                if spins < 100 {
                    std::hint::spin_loop();
                } else {
                    std::thread::sleep(std::time::Duration::from_micros(50));
                }
                continue;
            }
            odd_since = None;
            let result = self.counts().and_then(|counts| {
                f(&Counted {
                    view: self,
                    counts,
                    generation: g1,
                    m: &self.m,
                })
            });
            fence(Ordering::Acquire);
            if gen.load(Ordering::Relaxed) == g1 {
                return result;
            }
            if start.elapsed() > CHANGING_BUDGET {
                return Err(HalError::StructureBusy { stuck: false });
            }
            std::thread::yield_now();
        }
    }

    /// The number of records in use in each table (read inside a generation; ≤ capacity).
    fn counts(&self) -> Result<[usize; 6]> {
        let mut counts = [0; 6];
        for t in Table::ALL {
            let n = load_u32(&self.m, t.descriptor() + table::COUNT) as usize;
            let cap = self.tables[t as usize].capacity;
            if n > cap {
                return Err(corrupt(format!(
                    "the {} table says {n} records are in use but it has room for {cap}",
                    t.as_str()
                )));
            }
            counts[t as usize] = n;
        }
        Ok(counts)
    }
}

/// A view whose table counts were read inside one structure generation (see [`View::consistent`]).
pub(crate) struct Counted<'a> {
    view: &'a View,
    counts: [usize; 6],
    generation: u64,
    pub m: &'a Arc<Mapping>,
}

impl Counted<'_> {
    /// Where a stats block with `bins` bins has its I/O section ([`View::io_section`]).
    pub(crate) fn io_section(&self, bins: usize) -> Option<IoAt> {
        self.view.io_section(bins)
    }

    /// The segment's layout minor version.
    pub(crate) fn version_minor(&self) -> u16 {
        self.view.header.version_minor
    }

    /// The structure generation (even) these counts and everything read through them belong to.
    pub(super) fn generation(&self) -> u64 {
        self.generation
    }

    pub(super) fn count(&self, t: Table) -> usize {
        self.counts[t as usize]
    }

    /// Records table `t` has room for (fixed; validated at open).
    pub(super) fn capacity(&self, t: Table) -> usize {
        self.view.tables[t as usize].capacity
    }

    /// Offset of record `i` of `t` (`i < count`).
    pub(super) fn record(&self, t: Table, i: usize) -> usize {
        let tv = self.view.tables[t as usize];
        assert!(i < self.count(t));
        tv.offset + i * tv.stride
    }

    /// Whether record `i` of `t` is a tombstone (2.0 record flags; unknown flag bits are corruption).
    pub(super) fn deleted(&self, t: Table, i: usize) -> Result<bool> {
        let Some(fl) = t.flags() else {
            return Ok(false);
        };
        match load_u32(self.m, self.record(t, i) + fl) {
            0 => Ok(false),
            layout::flags::DELETED => Ok(true),
            other => Err(corrupt(format!(
                "a {} record has unknown flags {other:#x}",
                t.as_str()
            ))),
        }
    }

    /// Whether record `i` of `t` is named `name`: compares the name field in place (48 bytes, no
    /// allocation), for lookups by name. Names are NUL-terminated and NUL-padded (LAYOUT.md §4).
    pub(super) fn name_is(&self, t: Table, i: usize, name: &str) -> bool {
        let name = name.as_bytes();
        if name.is_empty() || name.len() >= NAME_FIELD {
            return false;
        }
        let mut field = [0u8; NAME_FIELD];
        self.m.copy_out(self.record(t, i), &mut field);
        field[..name.len()] == *name && field[name.len()] == 0
    }

    /// Copies the fields this version knows of record `i` of `t`.
    pub(super) fn copy_record(&self, t: Table, i: usize) -> Record {
        let off = self.record(t, i);
        let mut bytes = vec![0u8; t.record_size()];
        // The value cell is left out (read as zeros here): it is written with narrower atomics by the
        // owner's threads, and is read on its own with an atomic of its type's width (`load_cell`).
        match t.cell() {
            Some(cell) => {
                self.m.copy_out(off, &mut bytes[..cell]);
                self.m.copy_out(off + cell + 8, &mut bytes[cell + 8..]);
            }
            None => self.m.copy_out(off, &mut bytes),
        }
        Record { offset: off, bytes }
    }

    /// Which record of `target` the reference `off` (read from a `from` record) points at; 0 = none.
    /// A reference to a deleted record is corruption: the owner clears them in the same change.
    pub(super) fn resolve(&self, target: Table, off: u64, from: Table) -> Result<Option<usize>> {
        if off == 0 {
            return Ok(None);
        }
        let tv = self.view.tables[target as usize];
        let count = self.count(target);
        let rel = off.checked_sub(tv.offset as u64);
        match rel {
            Some(rel) if rel % tv.stride as u64 == 0 && rel / (tv.stride as u64) < count as u64 => {
                let i = (rel / tv.stride as u64) as usize;
                if self.deleted(target, i)? {
                    return Err(corrupt(format!(
                        "a {} record refers to a deleted {} record",
                        from.as_str(),
                        target.as_str()
                    )));
                }
                Ok(Some(i))
            }
            _ => Err(corrupt(format!(
                "a {} record refers to offset {off}, which is not a {} record",
                from.as_str(),
                target.as_str()
            ))),
        }
    }

    /// Validates the stats block at `off` and returns its histogram shape `(bin_ns, bins)`.
    pub(super) fn stats_block(&self, off: u64, thread: &str) -> Result<(u64, usize)> {
        self.view.stats_block(off, thread)
    }
}

impl View {
    /// Where a stats block with `bins` bins has its I/O section, if the segment's layout has one
    /// (2.2 and later), and its I/O errors (2.3 and later).
    pub(crate) fn io_section(&self, bins: usize) -> Option<IoAt> {
        let minor = self.header.version_minor;
        (minor >= 2).then(|| IoAt {
            section: st::io(bins),
            errors: (minor >= 3).then(|| st::io_errors(bins)),
        })
    }

    /// Validates the stats block at `off` and returns its histogram shape `(bin_ns, bins)`: inside the
    /// segment, and outside every table (a stats block never overlaps records).
    pub(super) fn stats_block(&self, off: u64, thread: &str) -> Result<(u64, usize)> {
        let bad = |why: &str| corrupt(format!("the stats block of thread '{thread}' {why}"));
        let off = usize::try_from(off).map_err(|_| bad("is out of bounds"))?;
        if off % ALIGN != 0 || off < self.header_size {
            return Err(bad("is misaligned or inside the header"));
        }
        if !off.checked_add(st::BINS).fits_within(self.limit) {
            return Err(bad("is out of bounds"));
        }
        let bin_ns = self.m.load(off + st::BIN_NS);
        let bins = self.m.load(off + st::BIN_COUNT);
        if bin_ns == 0 || bins == 0 || bins > MAX_BINS as u64 {
            return Err(bad("has an invalid histogram shape"));
        }
        if self.m.load(off + st::SPIKE_RING_LEN) != st::SPIKE_RING as u64 {
            return Err(bad("has a spike ring of unexpected length"));
        }
        let Some(end) = off
            .checked_add(st::size_for(bins as usize, self.header.version_minor))
            .filter(|&e| e <= self.limit)
        else {
            return Err(bad("runs past the end of the segment"));
        };
        for t in Table::ALL {
            let tv = self.tables[t as usize];
            let t_end = tv.offset + tv.capacity * tv.stride;
            if off < t_end && tv.offset < end {
                return Err(bad(&format!("overlaps the {} table", t.as_str())));
            }
        }
        Ok((bin_ns, bins as usize))
    }
}

/// The instance name for a NotReady message, if the field is already readable.
fn instance_hint(m: &Mapping) -> String {
    let mut inst = [0u8; NAME_FIELD];
    m.copy_out(h::INSTANCE, &mut inst);
    name::decode(&inst).unwrap_or_else(|_| "?".into())
}

fn table_view(m: &Mapping, t: Table, header_size: usize, limit: usize) -> Result<TableView> {
    let d = t.descriptor();
    let offset = m.load(d + table::OFFSET);
    let capacity = load_u32(m, t.capacity_field()) as usize;
    let stride = load_u32(m, d + table::RECORD_SIZE) as usize;
    let bad = |why: String| corrupt(format!("the {} table {why}", t.as_str()));
    if stride < t.record_size() || stride % ALIGN != 0 {
        return Err(bad(format!(
            "has record size {stride}, expected at least {}",
            t.record_size()
        )));
    }
    let offset =
        usize::try_from(offset).map_err(|_| bad(format!("offset {offset} is out of bounds")))?;
    if offset % ALIGN != 0 || offset < header_size {
        return Err(bad(format!(
            "offset {offset} is misaligned or inside the header"
        )));
    }
    let end = capacity
        .checked_mul(stride)
        .and_then(|len| offset.checked_add(len));
    if !end.fits_within(limit) {
        return Err(bad(format!(
            "(room for {capacity} records at {offset}) runs past the end of the segment ({limit})"
        )));
    }
    Ok(TableView {
        offset,
        capacity,
        stride,
    })
}

/// An extent's end from checked arithmetic: it fits if it did not overflow and ends within `limit`.
trait Fits {
    fn fits_within(self, limit: usize) -> bool;
}

impl Fits for Option<usize> {
    fn fits_within(self, limit: usize) -> bool {
        matches!(self, Some(end) if end <= limit)
    }
}

/// A private copy of one record's known fields.
pub(crate) struct Record {
    pub offset: usize,
    pub bytes: Vec<u8>,
}

impl Record {
    pub(super) fn u32(&self, off: usize) -> u32 {
        u32::from_ne_bytes(self.bytes[off..off + 4].try_into().expect("4 bytes"))
    }
    pub(super) fn u64(&self, off: usize) -> u64 {
        u64::from_ne_bytes(self.bytes[off..off + 8].try_into().expect("8 bytes"))
    }
    pub(super) fn text(&self, off: usize, len: usize) -> Result<String> {
        name::decode(&self.bytes[off..off + len])
    }
    pub(super) fn name(&self) -> Result<String> {
        self.text(0, NAME_FIELD)
    }
}
