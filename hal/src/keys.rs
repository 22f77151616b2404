//! Typed keys for registered objects: what registration returns, and what the built [`Hal`](crate::Hal)
//! turns into handles. Each key remembers its builder, so a key cannot silently index another HAL, and
//! which use of its record's slot it is for, so a key of a deleted object cannot silently name the
//! object that took its slot since.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::pin::Direction;
use crate::value::HalType;

static NEXT_BUILDER_ID: AtomicU32 = AtomicU32::new(1);

macro_rules! key {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub struct $name {
            pub(crate) builder: u32,
            pub(crate) index: usize,
            /// Which use of the record's slot this key is for (slots of deleted records are reused).
            pub(crate) serial: u32,
        }
    };
}

key!(
    /// A registered component.
    ComponentKey
);
key!(
    /// A registered function; the runtime maps it to the code to call.
    FunctionKey
);
key!(
    /// A registered thread; turns into its [`StatsWriter`](crate::StatsWriter) after build.
    ThreadKey
);

/// A registered pin, typed like the [`Pin`](crate::Pin) it turns into after build.
pub struct PinKey<D: Direction, T: HalType> {
    pub(crate) builder: u32,
    pub(crate) index: usize,
    pub(crate) serial: u32,
    _marker: PhantomData<fn() -> (D, T)>,
}

impl<D: Direction, T: HalType> Clone for PinKey<D, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<D: Direction, T: HalType> Copy for PinKey<D, T> {}

/// A registered param, typed like the [`Param`](crate::Param) it turns into after build.
pub struct ParamKey<T: HalType> {
    pub(crate) builder: u32,
    pub(crate) index: usize,
    pub(crate) serial: u32,
    _marker: PhantomData<fn() -> T>,
}

impl<T: HalType> Clone for ParamKey<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: HalType> Copy for ParamKey<T> {}

pub(crate) fn next_builder_id() -> u32 {
    NEXT_BUILDER_ID.fetch_add(1, Ordering::Relaxed)
}

impl<D: Direction, T: HalType> PinKey<D, T> {
    pub(crate) fn new(builder: u32, index: usize, serial: u32) -> Self {
        PinKey {
            builder,
            index,
            serial,
            _marker: PhantomData,
        }
    }
}

impl<T: HalType> ParamKey<T> {
    pub(crate) fn new(builder: u32, index: usize, serial: u32) -> Self {
        ParamKey {
            builder,
            index,
            serial,
            _marker: PhantomData,
        }
    }
}
