//! Where components and configs declare things: a runtime being configured, or a dry run.
//!
//! Why a trait: a machine config is checked completely *before* anything real happens (no segment,
//! no locked memory, no threads), by applying it to a [`Validation`] — a bare [`HalBuilder`] that is
//! never built. Only if that succeeds is the same config applied to the real runtime. Both go through
//! this one interface, so the check cannot drift from what the run does.

use rtapi_hal::{ComponentKey, HalBuilder, ThreadConfig};

use super::LoadError;
use crate::rt::clock::Nanos;
use crate::rt::wake::{TimerKind, WakeMode};
use crate::runtime::function::FunctionFactory;
use crate::runtime::{Configuring, Runtime, ThreadSpec};

/// A periodic thread as a config declares it (`[[thread]]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadDecl {
    /// The thread's name, which `addf` refers to (a valid HAL name, unique in the machine).
    pub name: String,
    /// The period, within [`MIN_PERIOD`](crate::rt::units::MIN_PERIOD)..=[`MAX_PERIOD`](crate::rt::units::MAX_PERIOD) once a config checked it.
    pub period: Nanos,
    /// `None`: the runtime picks the RT CPU found by detection.
    pub cpu: Option<u32>,
    /// `None`: rate-monotonic (shorter period, higher priority).
    pub priority: Option<i32>,
    /// How the thread waits for its next deadline (`timer =`: nanosleep, posix-timer, timerfd).
    pub timer: TimerKind,
    /// How it spends the end of the wait (`wake =`: sleep, hybrid with a spin margin, spin).
    pub wake: WakeMode,
}

/// A runtime (or a stand-in) that accepts HAL declarations.
pub trait Target {
    /// The HAL under construction: components, pins, params, signals.
    fn hal(&mut self) -> &mut HalBuilder;
    /// Registers HAL function `name` of `component` and the factory of its per-period closure.
    fn function(
        &mut self,
        component: ComponentKey,
        name: &str,
        factory: FunctionFactory,
    ) -> Result<(), LoadError>;
    /// Declares a periodic thread.
    fn thread(&mut self, thread: &ThreadDecl) -> Result<(), LoadError>;
    /// `addf`: appends (or inserts at `position`) a function to a thread's run list.
    fn addf(
        &mut self,
        function: &str,
        thread: &str,
        position: Option<usize>,
    ) -> Result<(), LoadError>;
}

/// The dry run: records everything in a [`HalBuilder`] that is never built, drops the factories.
pub struct Validation {
    builder: HalBuilder,
}

impl Validation {
    /// A dry run for instance `instance` (the name is checked as the real segment's would be; nothing
    /// is created). Errors when `instance` is not a valid HAL name.
    pub fn new(instance: &str) -> Result<Self, LoadError> {
        Ok(Validation {
            builder: HalBuilder::new(instance)?,
        })
    }
}

impl Target for Validation {
    fn hal(&mut self) -> &mut HalBuilder {
        &mut self.builder
    }

    fn function(
        &mut self,
        component: ComponentKey,
        name: &str,
        _factory: FunctionFactory,
    ) -> Result<(), LoadError> {
        self.builder.function(component, name)?;
        Ok(())
    }

    fn thread(&mut self, thread: &ThreadDecl) -> Result<(), LoadError> {
        let period = u64::try_from(thread.period.as_nanos()).unwrap_or(0);
        self.builder
            .thread(ThreadConfig::new(&thread.name, period))?;
        Ok(())
    }

    fn addf(
        &mut self,
        function: &str,
        thread: &str,
        position: Option<usize>,
    ) -> Result<(), LoadError> {
        self.builder.addf(function, thread, position)?;
        Ok(())
    }
}

/// The real thing: declarations go to the runtime that will run them.
impl Target for Runtime<Configuring> {
    fn hal(&mut self) -> &mut HalBuilder {
        Runtime::<Configuring>::hal(self)
    }

    fn function(
        &mut self,
        component: ComponentKey,
        name: &str,
        factory: FunctionFactory,
    ) -> Result<(), LoadError> {
        Runtime::<Configuring>::function(self, component, name, factory)
            .map_err(|e| LoadError::new(e.to_string()))
    }

    fn thread(&mut self, thread: &ThreadDecl) -> Result<(), LoadError> {
        let spec = ThreadSpec {
            name: thread.name.clone(),
            period: thread.period,
            priority: thread.priority,
            cpu: thread.cpu.map(|c| c as usize),
            timer: thread.timer,
            wake: thread.wake,
        };
        Runtime::<Configuring>::thread(self, spec).map_err(|e| LoadError::new(e.to_string()))
    }

    fn addf(
        &mut self,
        function: &str,
        thread: &str,
        position: Option<usize>,
    ) -> Result<(), LoadError> {
        Runtime::<Configuring>::addf(self, function, thread, position)
            .map_err(|e| LoadError::new(e.to_string()))
    }
}
