//! Thread and function health as HAL objects (issue 12), so that a late or stalled thread can be
//! wired into a safety chain like any other signal:
//!
//! | name                   | kind  | type | dir/access | written                                         |
//! |------------------------|-------|------|------------|-------------------------------------------------|
//! | `<thread>.time`        | pin   | s32  | OUT        | ns its functions took last period (LinuxCNC's)  |
//! | `<thread>.tmax`        | param | s32  | rw         | the most `time` has been; `setp … 0` resets it  |
//! | `<thread>.latency`     | pin   | s32  | OUT        | ns the last period's wake came after its deadline |
//! | `<thread>.latency-max` | pin   | s32  | OUT        | the most `latency` has been                     |
//! | `<thread>.overruns`    | pin   | u32  | OUT        | periods after which deadlines were missed       |
//! | `<thread>.missed`      | pin   | u32  | OUT        | deadlines missed (skipped periods) in all       |
//! | `<thread>.late`        | pin   | bit  | OUT        | TRUE in the period after a miss                 |
//! | `<thread>.stalled`     | pin   | bit  | OUT        | TRUE while the watchdog says the thread stalled |
//! | `<thread>.faults`      | pin   | u32  | OUT        | function faults (panics) in the thread in all   |
//! | `<thread>.faulted`     | pin   | bit  | OUT        | TRUE once a function of the thread faulted      |
//! | `<funct>.time`         | pin   | s32  | OUT        | ns the function took last call (LinuxCNC's)     |
//! | `<funct>.tmax`         | param | s32  | rw         | the most `time` has been; `setp … 0` resets it  |
//! | `<funct>.tmax-increased` | param | bit | ro        | TRUE when the last call raised `tmax`           |
//!
//! Kinds and types are LinuxCNC 2.9's (`time` a pin, `tmax` a param), checked in its halrun.
//!
//! The thread objects belong to a component named `rtapi` (created with the first thread); a
//! function's belong to the function's component. LinuxCNC counts `time`/`tmax` in CPU clocks;
//! rtapi in nanoseconds. Values saturate at the type's maximum.
//!
//! The thread writes its pins at the end of each period, after its functions and before it sleeps:
//! then everything is known that the next period's functions must see — `late` for the deadlines
//! that went by during the work, so a function of the same thread (an `estop_latch` fed by
//! `<thread>.late`) acts in the very next period, as it did when the pins were written at the wake —
//! and nothing but the clock read stands between the wake and the work (issue 46: that path is the
//! median's). `latency` is therefore the last finished period's wake, one period behind. They are
//! ordinary HAL cells: one relaxed store each, no lock, no syscall. They come from the same
//! measurements as the stats block (which keeps more: sums, histogram, spikes) and can be reset
//! without touching it.

use rtapi_hal::{ComponentKey, HalBuilder, HalError, Out, ParamAccess, ParamKey, Pin, PinKey};

/// Name of the component that owns the thread health objects.
pub(crate) const OWNER: &str = "rtapi";

/// The thread's health pins: suffix, type (all OUT).
pub(crate) const THREAD_PINS: [(&str, rtapi_hal::ValueType); 8] = [
    ("latency", rtapi_hal::ValueType::S32),
    ("latency-max", rtapi_hal::ValueType::S32),
    ("overruns", rtapi_hal::ValueType::U32),
    ("missed", rtapi_hal::ValueType::U32),
    ("late", rtapi_hal::ValueType::Bit),
    ("stalled", rtapi_hal::ValueType::Bit),
    ("faults", rtapi_hal::ValueType::U32),
    ("faulted", rtapi_hal::ValueType::Bit),
];

/// The health pin of a thread and of a function (OUT): suffix, type.
pub(crate) const TIME_PIN: (&str, rtapi_hal::ValueType) = ("time", rtapi_hal::ValueType::S32);

/// The health params of a thread: suffix, type, access.
pub(crate) const THREAD_PARAMS: [(&str, rtapi_hal::ValueType, ParamAccess); 1] =
    [("tmax", rtapi_hal::ValueType::S32, ParamAccess::Rw)];

/// The health params of a function: suffix, type, access.
pub(crate) const FUNCTION_PARAMS: [(&str, rtapi_hal::ValueType, ParamAccess); 2] = [
    ("tmax", rtapi_hal::ValueType::S32, ParamAccess::Rw),
    ("tmax-increased", rtapi_hal::ValueType::Bit, ParamAccess::Ro),
];

/// The keys of one thread's health objects, from [`declare_thread`]. A component `Target`
/// other than the runtime declares them too, so that configs can `net` them.
#[derive(Clone, Copy)]
pub struct ThreadKeys {
    time: PinKey<Out, i32>,
    tmax: ParamKey<i32>,
    latency: PinKey<Out, i32>,
    latency_max: PinKey<Out, i32>,
    overruns: PinKey<Out, u32>,
    missed: PinKey<Out, u32>,
    late: PinKey<Out, bool>,
    pub(crate) stalled: PinKey<Out, bool>,
    faults: PinKey<Out, u32>,
    faulted: PinKey<Out, bool>,
}

/// The keys of one function's `time`/`tmax`, from [`declare_function`].
#[derive(Clone, Copy)]
pub struct FunctionKeys {
    time: PinKey<Out, i32>,
    tmax: ParamKey<i32>,
    increased: ParamKey<bool>,
}

impl FunctionKeys {
    /// The handles a thread writes a function's health through.
    pub fn handles(&self, hal: &rtapi_hal::Hal) -> super::slots::FunctionHealth {
        super::slots::FunctionHealth {
            time: hal.pin(self.time),
            tmax: hal.param(self.tmax),
            increased: hal.param(self.increased),
        }
    }
}

/// Declares `<thread>.*` in `b`, owned by `owner` (the `OWNER` component).
pub fn declare_thread(
    b: &mut HalBuilder,
    owner: ComponentKey,
    thread: &str,
) -> Result<ThreadKeys, HalError> {
    let n = |s: &str| format!("{thread}.{s}");
    Ok(ThreadKeys {
        time: b.pin(owner, &n("time"))?,
        tmax: b.param(owner, &n("tmax"), ParamAccess::Rw, 0i32)?,
        latency: b.pin(owner, &n("latency"))?,
        latency_max: b.pin(owner, &n("latency-max"))?,
        overruns: b.pin(owner, &n("overruns"))?,
        missed: b.pin(owner, &n("missed"))?,
        late: b.pin(owner, &n("late"))?,
        stalled: b.pin(owner, &n("stalled"))?,
        faults: b.pin(owner, &n("faults"))?,
        faulted: b.pin(owner, &n("faulted"))?,
    })
}

/// Declares `<thread>.*` in a running instance (a hosted thread started while it runs), owned by
/// `owner` (the [`OWNER`] component).
pub(crate) fn add_thread(
    hal: &rtapi_hal::Hal,
    owner: ComponentKey,
    thread: &str,
) -> Result<ThreadKeys, HalError> {
    let n = |s: &str| format!("{thread}.{s}");
    Ok(ThreadKeys {
        time: hal.add_pin(owner, &n("time"))?,
        tmax: hal.add_param(owner, &n("tmax"), ParamAccess::Rw, 0i32)?,
        latency: hal.add_pin(owner, &n("latency"))?,
        latency_max: hal.add_pin(owner, &n("latency-max"))?,
        overruns: hal.add_pin(owner, &n("overruns"))?,
        missed: hal.add_pin(owner, &n("missed"))?,
        late: hal.add_pin(owner, &n("late"))?,
        stalled: hal.add_pin(owner, &n("stalled"))?,
        faults: hal.add_pin(owner, &n("faults"))?,
        faulted: hal.add_pin(owner, &n("faulted"))?,
    })
}

/// What a thread's health pins say now, read from another thread (see [`HealthReader`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HealthValues {
    /// `<thread>.latency`: ns the last finished period's wake came after its deadline.
    pub latency: i32,
    /// `<thread>.latency-max`.
    pub latency_max: i32,
    /// `<thread>.missed`: deadlines missed (skipped periods) in all.
    pub missed: u32,
    /// `<thread>.late`: TRUE in the period after a miss.
    pub late: bool,
    /// `<thread>.stalled`: TRUE while the watchdog says the thread stalled.
    pub stalled: bool,
}

/// Reads one thread's health pins from any thread: a few relaxed loads, no allocation, no lock, no
/// system call (callable from another RT thread, e.g. a LinuxCNC HAL function copying them into
/// LinuxCNC's own pins).
pub struct HealthReader {
    latency: Pin<Out, i32>,
    latency_max: Pin<Out, i32>,
    missed: Pin<Out, u32>,
    late: Pin<Out, bool>,
    stalled: Pin<Out, bool>,
}

impl HealthReader {
    pub(crate) fn new(hal: &rtapi_hal::Hal, keys: &ThreadKeys) -> Self {
        HealthReader {
            latency: hal.pin(keys.latency),
            latency_max: hal.pin(keys.latency_max),
            missed: hal.pin(keys.missed),
            late: hal.pin(keys.late),
            stalled: hal.pin(keys.stalled),
        }
    }

    /// The values now.
    #[inline]
    pub fn read(&self) -> HealthValues {
        HealthValues {
            latency: self.latency.get(),
            latency_max: self.latency_max.get(),
            missed: self.missed.get(),
            late: self.late.get(),
            stalled: self.stalled.get(),
        }
    }
}

/// Declares `<function>.time` and `.tmax`, owned by the function's component.
pub fn declare_function(
    b: &mut HalBuilder,
    component: ComponentKey,
    function: &str,
) -> Result<FunctionKeys, HalError> {
    Ok(FunctionKeys {
        time: b.pin(component, &format!("{function}.time"))?,
        tmax: b.param(
            component,
            &format!("{function}.tmax"),
            ParamAccess::Rw,
            0i32,
        )?,
        increased: b.param(
            component,
            &format!("{function}.tmax-increased"),
            ParamAccess::Ro,
            false,
        )?,
    })
}

/// Declares `<function>.time`, `.tmax` and `.tmax-increased` in a running instance (a function
/// loaded live), and returns the handles its thread writes.
pub(crate) fn add_function(
    hal: &rtapi_hal::Hal,
    component: ComponentKey,
    function: &str,
) -> Result<super::slots::FunctionHealth, HalError> {
    let time = hal.add_pin::<Out, i32>(component, &format!("{function}.time"))?;
    let tmax = hal.add_param(
        component,
        &format!("{function}.tmax"),
        ParamAccess::Rw,
        0i32,
    )?;
    let increased = hal.add_param(
        component,
        &format!("{function}.tmax-increased"),
        ParamAccess::Ro,
        false,
    )?;
    Ok(super::slots::FunctionHealth {
        time: hal.pin(time),
        tmax: hal.param(tmax),
        increased: hal.param(increased),
    })
}

/// The `rtapi` component of `b`, created on first use (`owner` remembers it).
pub fn owner(
    b: &mut HalBuilder,
    owner: &mut Option<ComponentKey>,
) -> Result<ComponentKey, HalError> {
    if let Some(k) = *owner {
        return Ok(k);
    }
    let k = b.component(OWNER)?;
    *owner = Some(k);
    Ok(k)
}

fn sat_i32(ns: u64) -> i32 {
    i32::try_from(ns).unwrap_or(i32::MAX)
}

/// The handles a thread writes its health through; see the module docs. Built before the thread
/// starts; every method is a few relaxed loads and stores.
pub struct ThreadHealth {
    time: Pin<Out, i32>,
    tmax: rtapi_hal::Param<i32>,
    latency: Pin<Out, i32>,
    latency_max: Pin<Out, i32>,
    overruns: Pin<Out, u32>,
    missed: Pin<Out, u32>,
    late: Pin<Out, bool>,
    faults: Pin<Out, u32>,
    faulted: Pin<Out, bool>,
    max: i32,
    fault_count: u32,
    overrun_count: u32,
    missed_count: u32,
}

impl ThreadHealth {
    /// The handles of a built HAL.
    pub(crate) fn new(hal: &rtapi_hal::Hal, keys: &ThreadKeys) -> Self {
        ThreadHealth {
            time: hal.pin(keys.time),
            tmax: hal.param(keys.tmax),
            latency: hal.pin(keys.latency),
            latency_max: hal.pin(keys.latency_max),
            overruns: hal.pin(keys.overruns),
            missed: hal.pin(keys.missed),
            late: hal.pin(keys.late),
            faults: hal.pin(keys.faults),
            faulted: hal.pin(keys.faulted),
            max: 0,
            fault_count: 0,
            overrun_count: 0,
            missed_count: 0,
        }
    }

    /// At a period's end, before the sleep: the work's time (`time`, `tmax`), the latency of the
    /// wake that began the period (`latency`, `latency-max`) and the deadlines that went by during
    /// it (`late`, `overruns`, `missed`). Everything the next period's functions see is written
    /// here, so that nothing but the clock read stands between the next wake and the work.
    #[inline]
    pub fn period_end(&mut self, exec_ns: u64, latency_ns: i64, missed: u64) {
        let t = sat_i32(exec_ns);
        self.time.set(t);
        if t > self.tmax.get() {
            self.tmax.set(t);
        }
        let l = sat_i32(latency_ns.max(0) as u64);
        self.max = self.max.max(l);
        self.latency.set(l);
        self.latency_max.set(self.max);
        if missed > 0 {
            self.overrun_count = self.overrun_count.saturating_add(1);
            self.missed_count = self
                .missed_count
                .saturating_add(u32::try_from(missed).unwrap_or(u32::MAX));
            self.overruns.set(self.overrun_count);
            self.missed.set(self.missed_count);
        }
        self.late.set(missed > 0);
    }

    /// A function of the thread panicked just now (it is disabled from here on): counted in
    /// `faults`, and `faulted` goes TRUE — in this period, so a function later in the thread's list
    /// (or the safety chain at the next period's start) sees it.
    #[inline]
    pub fn fault(&mut self) {
        self.fault_count = self.fault_count.saturating_add(1);
        self.faults.set(self.fault_count);
        self.faulted.set(true);
    }
}
