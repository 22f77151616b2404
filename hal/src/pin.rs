//! Typed handles for the owning process: pins with their direction in the type, and params.
//!
//! A handle holds a pointer to its cell, resolved when the segment was built (for a pin on a signal, the
//! signal's cell), so `get`/`set` is one atomic instruction: no lookup, no lock, no allocation — fit for the
//! real-time path. Reading an IN pin and writing an OUT pin are the only operations the types allow, so a
//! component cannot write its own input by mistake.
//!
//! Ordering: values are independent cells accessed with relaxed atomics, like LinuxCNC's HAL; a reader of
//! two pins may see one updated and not the other. Multi-word consistency is what the stats seqlock is for.

use std::marker::PhantomData;

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

/// A pin of the owning process, e.g. `Pin<In, f64>` or `Pin<Out, bool>`, from [`Hal::pin`](crate::Hal::pin).
///
/// RT-safe: `get` and `set` are one relaxed atomic load or store, no allocation, no lock. It can be sent
/// to the thread that runs its component; it keeps the mapping alive on its own.
pub struct Pin<D: Direction, T: HalType> {
    cell: Block,
    _marker: PhantomData<fn() -> (D, T)>,
}

impl<D: Direction, T: HalType> Pin<D, T> {
    pub(crate) fn new(cell: Block) -> Self {
        Pin {
            cell,
            _marker: PhantomData,
        }
    }

    /// The current value (of the signal, if the pin is on one). One relaxed atomic load.
    #[inline(always)]
    pub fn get(&self) -> T {
        // SAFETY: the block is a validated, 8-aligned cell slot of the live mapping (kept alive by it).
        unsafe { T::load_cell(self.cell.ptr(0)) }
    }
}

impl<D: Writable, T: HalType> Pin<D, T> {
    /// Writes the value (to the signal, if the pin is on one). One relaxed atomic store.
    #[inline(always)]
    pub fn set(&self, value: T) {
        // SAFETY: as in `get`; the owner's mapping is writable.
        unsafe { T::store_cell(self.cell.ptr(0), value) }
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
