//! Where components and configs declare things: a runtime being configured, or a dry run.
//!
//! Why a trait: a machine config is checked completely *before* anything real happens (no segment,
//! no locked memory, no threads), by applying it to a [`Validation`] — a bare [`HalBuilder`] that is
//! never built. Only if that succeeds is the same config applied to the real runtime. Both go through
//! this one interface, so the check cannot drift from what the run does.

use rtapi_hal::{
    ComponentKey, Direction, Hal, HalBuilder, HalError, HalType, ParamAccess, ParamKey, PinKey,
    ThreadConfig,
};

use super::LoadError;
use crate::runtime::function::FunctionFactory;
use crate::runtime::health;
use crate::runtime::{Configuring, Running, Runtime, ThreadSpec};

/// Where a component's HAL objects go: a HAL being built (start-up, dry run) or a running one
/// (`loadrt` in a live instance).
pub enum HalSide<'a> {
    /// Before the segment exists.
    Building(&'a mut HalBuilder),
    /// Into the running instance's segment.
    Live(&'a Hal),
}

impl HalSide<'_> {
    /// A component record.
    pub fn component(&mut self, name: &str) -> Result<ComponentKey, HalError> {
        match self {
            HalSide::Building(b) => b.component(name),
            HalSide::Live(h) => h.add_component(name),
        }
    }

    /// A pin of `component` starting at `init`.
    pub fn pin_with_default<D: Direction, T: HalType>(
        &mut self,
        component: ComponentKey,
        name: &str,
        init: T,
    ) -> Result<PinKey<D, T>, HalError> {
        match self {
            HalSide::Building(b) => b.pin_with_default::<D, T>(component, name, init),
            HalSide::Live(h) => h.add_pin_with_default::<D, T>(component, name, init),
        }
    }

    /// A param of `component`.
    pub fn param<T: HalType>(
        &mut self,
        component: ComponentKey,
        name: &str,
        access: ParamAccess,
        init: T,
    ) -> Result<ParamKey<T>, HalError> {
        match self {
            HalSide::Building(b) => b.param(component, name, access, init),
            HalSide::Live(h) => h.add_param(component, name, access, init),
        }
    }
}

/// A runtime (or a stand-in) that accepts HAL declarations.
pub trait Target {
    /// The HAL under construction: components, pins, params, signals.
    fn hal(&mut self) -> &mut HalBuilder;
    /// Where components declare their objects: the HAL under construction unless the target loads
    /// into a running instance.
    fn hal_side(&mut self) -> HalSide<'_> {
        HalSide::Building(self.hal())
    }
    /// Whether LinuxCNC modules loaded into this target stay loaded (a runtime) or are unloaded right
    /// after their `rtapi_app_main` declared their objects (a dry run).
    fn keeps_modules(&self) -> bool {
        false
    }
    /// Takes a LinuxCNC module loaded for real (when [`keeps_modules`](Self::keeps_modules)): the
    /// target owns it from now on and drops it (its `rtapi_app_exit`) once nothing can call its
    /// functions. The default drops it at once.
    fn keep_module(&mut self, module: super::linuxcnc::KeptModule) {
        drop(module);
    }
    /// Registers HAL function `name` of `component` and the factory of its per-period closure.
    fn function(
        &mut self,
        component: ComponentKey,
        name: &str,
        factory: FunctionFactory,
    ) -> Result<(), LoadError>;
    /// Declares a periodic thread.
    fn thread(&mut self, thread: &ThreadSpec) -> Result<(), LoadError>;
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
    /// The `rtapi` component of the threads' health objects, once a thread exists.
    health_owner: Option<ComponentKey>,
}

impl Validation {
    /// A dry run for instance `instance` (the name is checked as the real segment's would be; nothing
    /// is created). Errors when `instance` is not a valid HAL name.
    pub fn new(instance: &str) -> Result<Self, LoadError> {
        Ok(Validation {
            builder: HalBuilder::new(instance)?,
            health_owner: None,
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
        health::declare_function(&mut self.builder, component, name)?;
        Ok(())
    }

    fn thread(&mut self, thread: &ThreadSpec) -> Result<(), LoadError> {
        declare_thread(&mut self.builder, &mut self.health_owner, thread)
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

    fn keeps_modules(&self) -> bool {
        true
    }

    fn keep_module(&mut self, module: super::linuxcnc::KeptModule) {
        self.keep_resident(Box::new(module));
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

    fn thread(&mut self, thread: &ThreadSpec) -> Result<(), LoadError> {
        Runtime::<Configuring>::thread(self, thread.clone())
            .map_err(|e| LoadError::new(e.to_string()))
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

/// `loadrt` into a running instance: components declare into the live segment, their functions are
/// made at once (ready for `addf`). Threads cannot be created while running.
pub struct LiveTarget<'a> {
    running: &'a Runtime<Running>,
    /// Never built: what [`Target::hal`] hands out. Component loading goes through
    /// [`Target::hal_side`], which is the live segment; nothing uses this builder.
    unused: HalBuilder,
}

impl<'a> LiveTarget<'a> {
    /// A target for `running`.
    pub fn new(running: &'a Runtime<Running>) -> Result<Self, LoadError> {
        Ok(LiveTarget {
            running,
            unused: HalBuilder::new(running.hal().instance().as_str())?,
        })
    }
}

impl Target for LiveTarget<'_> {
    fn hal(&mut self) -> &mut HalBuilder {
        &mut self.unused
    }

    fn hal_side(&mut self) -> HalSide<'_> {
        HalSide::Live(self.running.hal())
    }

    fn keeps_modules(&self) -> bool {
        true
    }

    fn keep_module(&mut self, module: super::linuxcnc::KeptModule) {
        self.running.keep_resident(Box::new(module));
    }

    fn function(
        &mut self,
        component: ComponentKey,
        name: &str,
        factory: FunctionFactory,
    ) -> Result<(), LoadError> {
        self.running
            .add_function(component, name, factory)
            .map_err(|e| LoadError::new(e.to_string()))
    }

    fn thread(&mut self, thread: &ThreadSpec) -> Result<(), LoadError> {
        Err(LoadError::new(format!(
            "thread {}: threads cannot be created in a running instance yet; declare it before \
             `start` (or in the machine TOML)",
            thread.name
        )))
    }

    fn addf(
        &mut self,
        function: &str,
        thread: &str,
        position: Option<usize>,
    ) -> Result<(), LoadError> {
        self.running
            .addf(function, thread, position)
            .map_err(|e| LoadError::new(e.to_string()))
    }
}

/// A thread (its period, no RT placement) and its health objects, declared into a HAL being built
/// that no runtime runs: the dry run and the component [`Harness`](super::Harness).
pub(crate) fn declare_thread(
    b: &mut HalBuilder,
    health_owner: &mut Option<ComponentKey>,
    thread: &ThreadSpec,
) -> Result<(), LoadError> {
    let period = u64::try_from(thread.period.as_nanos()).unwrap_or(0);
    b.thread(ThreadConfig::new(&thread.name, period))?;
    let owner = health::owner(b, health_owner)?;
    health::declare_thread(b, owner, &thread.name)?;
    Ok(())
}
