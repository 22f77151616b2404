//! Typed handles for the owning process: pins with their direction in the type, and params.
//!
//! A pin handle reads through the pin's pointer slot (LinuxCNC's `T **`): the slot holds the address of
//! the cell in use — the pin's own, or its signal's while linked — and [`Hal::link`](crate::Hal::link)
//! re-points it atomically. So `get`/`set` is two dependent loads (or a load and a store): no lookup, no
//! lock, no allocation, and never a wait for a structural change — fit for the real-time path. A param
//! handle points at its cell directly. Reading an IN pin and writing an OUT pin are the only operations
//! the types allow, so a component cannot write its own input by mistake.
//!
//! Ordering: values are independent cells accessed with relaxed atomics of the type's width, like
//! LinuxCNC's HAL; a reader of two pins may see one updated and not the other. Multi-word consistency
//! is what the stats seqlock is for.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::Arc;

use crate::segment::Mapping;

use crate::segment::Block;
use crate::value::HalType;

/// Pin direction as stored in the segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum PinDir {
    /// Read by the component; written by a signal or by `setp`.
    In = 1,
    /// Written by the component; drives at most one signal.
    Out = 2,
    /// Read and written by the component and by other IO pins on the same signal.
    Io = 3,
}

impl PinDir {
    /// Decodes a direction code read from a segment (unknown codes are corruption).
    pub(crate) fn from_code(code: u32) -> Option<Self> {
        Some(match code {
            1 => PinDir::In,
            2 => PinDir::Out,
            3 => PinDir::Io,
            _ => return None,
        })
    }

    /// `IN`, `OUT` or `I/O`, as `rtapi show` prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            PinDir::In => "IN",
            PinDir::Out => "OUT",
            PinDir::Io => "I/O",
        }
    }
}

/// Whether other processes may write a param.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ParamAccess {
    /// Read-only to other processes (the component may still update it, e.g. a measured value).
    Ro = 1,
    /// Settable with `setp`.
    Rw = 2,
}

impl ParamAccess {
    /// Decodes an access code read from a segment (unknown codes are corruption).
    pub(crate) fn from_code(code: u32) -> Option<Self> {
        Some(match code {
            1 => ParamAccess::Ro,
            2 => ParamAccess::Rw,
            _ => return None,
        })
    }

    /// `RO` or `RW`, as `rtapi show` prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            ParamAccess::Ro => "RO",
            ParamAccess::Rw => "RW",
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::In {}
    impl Sealed for super::Out {}
    impl Sealed for super::Io {}
}

/// The direction of a pin as a type parameter: [`In`], [`Out`] or [`Io`] (sealed).
pub trait Direction: sealed::Sealed + Send + Sync + 'static {
    /// The direction stored in the segment for pins of this type.
    const DIR: PinDir;
}
/// Directions the owning component may write ([`Out`], [`Io`]): only their [`Pin`]s have `set`.
pub trait Writable: Direction {}

/// Marker: input pin.
#[derive(Debug)]
pub enum In {}
/// Marker: output pin.
#[derive(Debug)]
pub enum Out {}
/// Marker: bidirectional pin.
#[derive(Debug)]
pub enum Io {}

impl Direction for In {
    const DIR: PinDir = PinDir::In;
}
impl Direction for Out {
    const DIR: PinDir = PinDir::Out;
}
impl Direction for Io {
    const DIR: PinDir = PinDir::Io;
}
impl Writable for Out {}
impl Writable for Io {}

/// The pointer slot of one pin (LinuxCNC's `T **`): where the pin's value lives now — its own cell
/// while unlinked, its signal's cell while linked. [`Hal::link`](crate::Hal::link) and
/// [`Hal::unlink`](crate::Hal::unlink) re-point it; the component's [`Pin`] handle reads through it and
/// never notices. It always points at a valid cell slot of the mapping it keeps alive — or, once the
/// pin is deleted, at its own after-life cell (see [`retire`](Self::retire)).
pub(crate) struct PinSlot {
    ptr: AtomicPtr<u8>,
    /// Where a deleted pin's handles read and write from its deletion on: a copy of its last value,
    /// outside the segment, so a handle or probe kept past the deletion never touches the record's
    /// slot, which a later pin may take (layout 2.1).
    last: AtomicU64,
    mapping: Arc<Mapping>,
    /// A second copy of the address kept in foreign memory: the `T *` of a C component (LinuxCNC's
    /// `T **` given to `hal_pin_*_new`), rewritten with every re-point. Null: none.
    mirror: AtomicPtr<AtomicPtr<u8>>,
    /// With a mirror: the pin's own cell, and the cell the mirror gets instead of it (null: the own
    /// cell itself). See [`set_mirror`](Self::set_mirror).
    own: AtomicPtr<u8>,
    substitute: AtomicPtr<u8>,
}

impl PinSlot {
    /// A slot pointing at the cell slot at byte `cell` of `mapping`.
    ///
    /// # Panics
    /// If `cell` is not an 8-aligned slot inside the mapping.
    pub(crate) fn new(mapping: &Arc<Mapping>, cell: usize) -> PinSlot {
        PinSlot {
            ptr: AtomicPtr::new(Self::address(mapping, cell)),
            last: AtomicU64::new(0),
            mapping: mapping.clone(),
            mirror: AtomicPtr::new(std::ptr::null_mut()),
            own: AtomicPtr::new(std::ptr::null_mut()),
            substitute: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// Makes `mirror` (the address of a C component's pin pointer) follow this slot from now on, and
    /// stores the current address into it at once. Called with the owner's model lock held, like
    /// [`repoint`](Self::repoint), so the two never interleave.
    ///
    /// `substitute` (non-null) stands in for the pin's own cell `own` in the mirror: whenever the slot
    /// points at `own`, the mirror gets `substitute` instead, after the own cell's 8 bytes were copied
    /// into it (a C component that compares its pointer with the one it got at creation — "is my pin
    /// linked?" — keeps seeing the address it started with; its host copies the values between the two
    /// cells around each call).
    ///
    /// # Safety
    /// `mirror` must be valid for pointer-sized aligned writes for as long as the slot lives, and
    /// nothing else may write it (the C component only reads it); `substitute`, when non-null, must be
    /// an 8-aligned 8-byte cell valid as long.
    pub(crate) unsafe fn set_mirror(&self, mirror: *mut *mut u8, own: usize, substitute: *mut u8) {
        let m = mirror.cast::<AtomicPtr<u8>>();
        self.own
            .store(Self::address(&self.mapping, own), Ordering::Relaxed);
        self.substitute.store(substitute, Ordering::Relaxed);
        self.mirror.store(m, Ordering::Relaxed);
        self.update_mirror(self.ptr.load(Ordering::Relaxed));
    }

    /// Stores `a` (or the substitute of the own cell) into the mirror, if there is one.
    fn update_mirror(&self, a: *mut u8) {
        let m = self.mirror.load(Ordering::Relaxed);
        if m.is_null() {
            return;
        }
        let sub = self.substitute.load(Ordering::Relaxed);
        let shown = if !sub.is_null() && a == self.own.load(Ordering::Relaxed) {
            // SAFETY: `a` is an 8-aligned cell slot of the live mapping (`address` checked it) and
            // `sub` an 8-aligned 8-byte cell (`set_mirror`'s contract); both accessed atomically.
            unsafe {
                let v = (*a.cast::<AtomicU64>()).load(Ordering::Relaxed);
                (*sub.cast::<AtomicU64>()).store(v, Ordering::Relaxed);
            }
            sub
        } else {
            a
        };
        // SAFETY: `set_mirror`'s caller guaranteed the mirror stays valid for the slot's life.
        unsafe { (*m).store(shown, Ordering::Release) };
    }

    fn address(mapping: &Mapping, cell: usize) -> *mut u8 {
        // `word` checks alignment and bounds.
        (mapping.word(cell) as *const AtomicU64)
            .cast::<u8>()
            .cast_mut()
    }

    /// The pin was deleted: from now on its handles and probes use the slot's own after-life cell,
    /// holding the value the pin had, and a C component's pointer (the mirror) points at a cell that
    /// is never freed and that nothing reads. Its record's slot in the segment may then be given to
    /// another pin without any handle of this one reaching it. Called with the owner's model lock
    /// held, after the pin was unlinked.
    pub(crate) fn retire(&self) {
        let cur = self.ptr.load(Ordering::Relaxed);
        // SAFETY: `cur` is an 8-aligned cell slot of the live mapping (or our own cell, if retired
        // twice), accessed atomically like every cell.
        let v = unsafe { (*cur.cast::<AtomicU64>()).load(Ordering::Relaxed) };
        self.last.store(v, Ordering::Relaxed);
        self.ptr
            .store(self.last.as_ptr().cast::<u8>(), Ordering::Release);
        let m = self.mirror.load(Ordering::Relaxed);
        if !m.is_null() {
            // SAFETY: `set_mirror`'s caller guaranteed the mirror stays valid for the slot's life;
            // the address stored is a static cell, valid for the program's life.
            unsafe { (*m).store(AFTERLIFE.as_ptr().cast::<u8>(), Ordering::Release) };
        }
    }

    /// Makes the pin use the cell slot at byte `cell` (release: the cell's contents written before
    /// are visible to a handle that loads the new address and then reads through it; see
    /// [`Pin::get`] on the handle's side).
    pub(crate) fn repoint(&self, cell: usize) {
        let a = Self::address(&self.mapping, cell);
        self.ptr.store(a, Ordering::Release);
        self.update_mirror(a);
    }
}

/// The cell a deleted pin's C component pointer is left pointing at: never freed (the component's code
/// may still hold the pointer when the pin's slot goes), read by nobody.
static AFTERLIFE: AtomicU64 = AtomicU64::new(0);

/// A pin of the owning process, e.g. `Pin<In, f64>` or `Pin<Out, bool>`, from [`Hal::pin`](crate::Hal::pin).
///
/// RT-safe: `get` and `set` are two dependent relaxed loads (the pin's pointer slot, then the cell) or
/// a load and a store, no allocation, no lock — and never blocked by a structural change: linking or
/// unlinking the pin re-points its slot atomically. It can be sent to the thread that runs its
/// component; it keeps the mapping alive on its own.
pub struct Pin<D: Direction, T: HalType> {
    slot: Arc<PinSlot>,
    _marker: PhantomData<fn() -> (D, T)>,
}

impl<D: Direction, T: HalType> Pin<D, T> {
    pub(crate) fn new(slot: Arc<PinSlot>) -> Self {
        Pin {
            slot,
            _marker: PhantomData,
        }
    }

    /// The current value (of the signal, if the pin is on one): the pointer slot, then the cell with an
    /// atomic of the type's width, both relaxed.
    ///
    /// Why the slot load is relaxed, not acquire: the cell is reached through an address dependency on
    /// the loaded pointer, which every CPU this runs on (x86-64, AArch64, ARM, RISC-V, POWER) orders
    /// after the pointer load — the `rcu_dereference` pattern, which sees what the owner wrote before
    /// its release store of the new address. Rust's model has no "consume" ordering to say so, and an
    /// acquire load is also a compiler barrier that forces a component's own variables to be reloaded
    /// around every pin access (measured: `pin set` with a loop-carried value 1.1 ns relaxed, 5.1 ns
    /// acquire). What the formal model would still allow is reading the cell's previous value once
    /// after a link or unlink — a value it held a moment earlier, never a torn or foreign one.
    #[inline(always)]
    pub fn get(&self) -> T {
        let p = self.slot.ptr.load(Ordering::Relaxed);
        // SAFETY: the slot always holds the address of an 8-aligned cell slot inside the mapping that
        // `PinSlot` keeps alive (checked in `PinSlot::address`), or of its own after-life cell (an
        // AtomicU64 inside the slot this handle keeps alive); cells are only accessed atomically.
        unsafe { T::load_cell(p) }
    }
}

impl<D: Writable, T: HalType> Pin<D, T> {
    /// Writes the value (to the signal, if the pin is on one).
    #[inline(always)]
    pub fn set(&self, value: T) {
        let p = self.slot.ptr.load(Ordering::Relaxed);
        // SAFETY: as in `get`; the owner's mapping is writable.
        unsafe { T::store_cell(p, value) }
    }
}

/// A param of the owning process, from [`Hal::param`](crate::Hal::param). The owner may always write it;
/// other processes only if it is RW. RT-safe like [`Pin`].
pub struct Param<T: HalType> {
    cell: Block,
    _marker: PhantomData<fn() -> T>,
}

impl<T: HalType> Param<T> {
    pub(crate) fn new(cell: Block) -> Self {
        Param {
            cell,
            _marker: PhantomData,
        }
    }

    /// The current value. One relaxed atomic load.
    #[inline(always)]
    pub fn get(&self) -> T {
        // SAFETY: the block is a validated, 8-aligned cell slot of the live mapping (kept alive by it).
        unsafe { T::load_cell(self.cell.ptr(0)) }
    }

    /// Writes the value (a measured value for an RO param, a setting for an RW one). One relaxed atomic
    /// store; another process's `setp` of an RW param may overwrite it at any time.
    #[inline(always)]
    pub fn set(&self, value: T) {
        // SAFETY: as in `get`; the owner's mapping is writable.
        unsafe { T::store_cell(self.cell.ptr(0), value) }
    }
}

/// A read-only view of any pin or signal of the owning process by name, from
/// [`Hal::probe`](crate::Hal::probe): what a recorder samples each period. RT-safe like [`Pin::get`]
/// (a pin's probe follows its links); a deleted pin's or signal's probe keeps reading its last value
/// (a pin's from its after-life cell; a probed signal's record is never given to another signal).
pub struct Probe {
    source: ProbeSource,
    ty: crate::value::ValueType,
}

enum ProbeSource {
    Pin(Arc<PinSlot>),
    Cell(Block),
}

impl Probe {
    pub(crate) fn pin(slot: Arc<PinSlot>, ty: crate::value::ValueType) -> Probe {
        Probe {
            source: ProbeSource::Pin(slot),
            ty,
        }
    }

    pub(crate) fn cell(cell: Block, ty: crate::value::ValueType) -> Probe {
        Probe {
            source: ProbeSource::Cell(cell),
            ty,
        }
    }

    /// The value's type.
    pub fn value_type(&self) -> crate::value::ValueType {
        self.ty
    }

    /// The current value as a float (a bit is 0 or 1): one or two relaxed loads, no allocation.
    #[inline]
    pub fn get_f64(&self) -> f64 {
        let p = match &self.source {
            ProbeSource::Pin(slot) => slot.ptr.load(Ordering::Relaxed) as *const u8,
            ProbeSource::Cell(block) => block.ptr(0),
        };
        // SAFETY: as in `Pin::get`: an 8-aligned cell slot inside the mapping kept alive by the slot
        // or the block; cells are only accessed atomically.
        let bits = unsafe { crate::value::cell::load(p, self.ty) };
        match crate::value::Value::from_bits(self.ty, bits) {
            crate::value::Value::Bit(b) => f64::from(u8::from(b)),
            crate::value::Value::Float(f) => f,
            crate::value::Value::S32(v) => f64::from(v),
            crate::value::Value::U32(v) => f64::from(v),
            crate::value::Value::S64(v) => v as f64,
            crate::value::Value::U64(v) => v as f64,
        }
    }
}

/// One value cell of the owning process's segment with its type given at each access: what a host of
/// C components uses to copy a param between the segment and the component's own variable. RT-safe
/// (one relaxed atomic of the type's width); keeps the mapping alive on its own.
pub struct CellRef {
    cell: Block,
}

impl CellRef {
    pub(crate) fn new(cell: Block) -> CellRef {
        CellRef { cell }
    }

    /// The value as canonical bits ([`Value::to_bits`](crate::Value::to_bits)) of type `ty`.
    #[inline(always)]
    pub fn load_bits(&self, ty: crate::value::ValueType) -> u64 {
        // SAFETY: the block is a validated, 8-aligned cell slot of the live mapping it keeps alive.
        unsafe { crate::value::cell::load(self.cell.ptr(0), ty) }
    }

    /// Stores canonical bits of type `ty` (only the type's bytes).
    #[inline(always)]
    pub fn store_bits(&self, ty: crate::value::ValueType, bits: u64) {
        // SAFETY: as in `load_bits`; the owner's mapping is writable.
        unsafe { crate::value::cell::store(self.cell.ptr(0), ty, bits) }
    }
}
