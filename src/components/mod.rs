//! HAL components: the pieces of a machine's control, loaded by name (`loadrt pid count=2`).
//!
//! A component is a Rust type implementing [`Component`]. Loading it creates one or more **instances**
//! (`pid.0`, `pid.1`, or the names given with `names=x,y`), and for each instance its
//! [`load`](Component::load) declares the pins, params and functions through a [`LoadContext`]:
//!
//! ```
//! use rtapi::components::{Component, LoadContext, LoadError};
//! use rtapi_hal::{In, Out};
//!
//! /// `scale.N.out = scale.N.gain * scale.N.in`
//! struct Scale;
//!
//! impl Component for Scale {
//!     const NAME: &'static str = "scale";
//!     const SUMMARY: &'static str = "multiplies its input by a gain";
//!
//!     fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
//!         let input = ctx.pin::<In, f64>("in")?;
//!         let gain = ctx.pin_with_default::<In, f64>("gain", 1.0)?;
//!         let output = ctx.pin::<Out, f64>("out")?;
//!         // The factory runs once the segment exists; the closure it returns runs every period.
//!         ctx.function("update", move |hal| {
//!             let (input, gain, output) = (hal.pin(input), hal.pin(gain), hal.pin(output));
//!             Box::new(move |_cycle| output.set(gain.get() * input.get()))
//!         })
//!     }
//! }
//! ```
//!
//! Names follow LinuxCNC: pins and params are `<instance>.<suffix>` (`pid.0.Pgain`), functions too
//! (`pid.0.do-pid-calcs`). One difference: LinuxCNC's stepgen and encoder export one function for all
//! their channels (`stepgen.make-pulses`); here every instance has its own (`stepgen.0.make-pulses`),
//! so channels can run in different threads and a component needs no "all instances" hook.
//! LinuxCNC's other naming rules are kept: halcompile components put `-` for `_` in instance names
//! ([`Component::PREFIX`]: `loadrt estop_latch` makes `estop-latch.0`) and name their one function as
//! the instance ([`LoadContext::instance_function`]); singletons have one instance named like the
//! component (`charge-pump`, `watchdog`: [`Component::SINGLETON`]); `debounce` makes one instance per
//! value of `cfg=` ([`Component::INSTANCES_ARG`]).
//!
//! Per-period closures run on a real-time thread: they read and write pins (one atomic operation
//! each) and their own captured state, and never allocate, lock, log or do I/O. State shared by two
//! functions of one instance that run in *different* threads (stepgen's `make-pulses` in the base
//! thread and `update-freq` in the servo thread) goes through atomics, never a mutex.
//!
//! The control math of each built-in lives in small pure structs next to the HAL glue, with unit tests.

mod capture;
mod compare;
mod conv;
mod counters;
mod drill;
mod edges;
mod encoder;
mod filters;
mod finite;
mod harness;
mod limit;
pub mod linuxcnc;
mod logic;
mod math;
mod mux;
mod pid;
mod pwmgen;
mod safety;
mod scope;
mod siggen;
mod sim_axis;
mod stepgen;
mod target;
#[cfg(test)]
mod test_util;
mod timing;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::str::FromStr;

use rtapi_hal::{
    ComponentKey, Direction, Hal, HalError, HalType, ParamAccess, ParamKey, PinDir, PinKey, Value,
    ValueType,
};

use crate::runtime::function::RtFn;
pub use harness::Harness;
pub use target::{HalSide, LiveTarget, Target, Validation};

/// Why a component could not be loaded (or a target refused a declaration).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError {
    /// The whole message, naming the component or instance; shown as is by `Display`.
    pub message: String,
    /// A LinuxCNC module that cannot run here (a symbol rtapi lacks, a file `dlopen` refuses): when
    /// it was found by fallback, the component is reported as not available in rtapi. (A module
    /// whose `rtapi_app_main` failed ran: its own message is the error.)
    unavailable: bool,
}

impl LoadError {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        LoadError {
            message: message.into(),
            unavailable: false,
        }
    }

    pub(crate) fn unavailable(message: impl Into<String>) -> Self {
        LoadError {
            message: message.into(),
            unavailable: true,
        }
    }

    /// Whether a LinuxCNC module could not run here (see the field).
    pub fn is_unavailable(&self) -> bool {
        self.unavailable
    }
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for LoadError {}

impl From<HalError> for LoadError {
    fn from(e: HalError) -> Self {
        LoadError::new(e.to_string())
    }
}

/// A component type that `loadrt` can instantiate.
pub trait Component {
    /// The name `loadrt` uses, and the default instance prefix (`pid` → `pid.0`).
    const NAME: &'static str;
    /// One line for listings.
    const SUMMARY: &'static str;
    /// The `key=value` arguments `loadrt` accepts besides `count` and `names`.
    const ARGS: &'static [&'static str] = &[];
    /// The prefix of instance names when it differs from [`NAME`](Self::NAME): LinuxCNC's halcompile
    /// components turn `_` into `-` (`loadrt estop_latch` makes `estop-latch.0`).
    const PREFIX: &'static str = Self::NAME;
    /// One instance only, named [`PREFIX`](Self::PREFIX) itself with no `.0` (LinuxCNC's
    /// `charge-pump`, `watchdog`); `count=`/`names=` other than `count=1` are refused.
    const SINGLETON: bool = false;
    /// The argument whose comma-separated values make one instance each, numbered from 0, instead of
    /// `count=`/`names=` (LinuxCNC's `loadrt debounce cfg=2,3`: groups `debounce.0`, `debounce.1`).
    /// Loading without it is an error.
    const INSTANCES_ARG: Option<&'static str> = None;

    /// Declares one instance: its pins, params and functions.
    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError>;
}

/// What the config knows about every pin and param declared so far (names → type and direction), so
/// that `net` arrows, `setp` and `sets` can be checked with messages that point at the config line.
#[derive(Debug, Default, Clone)]
pub struct Declared {
    /// Full pin name → its type and direction.
    pub pins: HashMap<String, (ValueType, PinDir)>,
    /// Full param name → its type and whether it is writable.
    pub params: HashMap<String, (ValueType, ParamAccess)>,
    /// Full function name → the instance that exported it.
    pub functions: HashMap<String, String>,
    /// Full pin or param name → the value it starts at (its default, or the config's `setp` value).
    pub values: HashMap<String, Value>,
}

impl Declared {
    /// Records thread `thread`'s health objects (see `runtime::health`), which every
    /// [`Target`] declares with the thread.
    pub fn thread_health(&mut self, thread: &str) {
        use crate::runtime::health::{THREAD_PARAMS, THREAD_PINS, TIME_PIN};
        for (suffix, ty) in THREAD_PINS.into_iter().chain([TIME_PIN]) {
            self.pins
                .insert(format!("{thread}.{suffix}"), (ty, PinDir::Out));
        }
        for (suffix, ty, access) in THREAD_PARAMS {
            self.params
                .insert(format!("{thread}.{suffix}"), (ty, access));
        }
    }

    /// Records `<function>.time` (pin), `.tmax` and `.tmax-increased` (params), which every
    /// [`Target`] declares with the function.
    pub fn function_health(&mut self, function: &str) {
        use crate::runtime::health::{FUNCTION_PARAMS, TIME_PIN};
        self.pins.insert(
            format!("{function}.{}", TIME_PIN.0),
            (TIME_PIN.1, PinDir::Out),
        );
        for (suffix, ty, access) in FUNCTION_PARAMS {
            self.params
                .insert(format!("{function}.{suffix}"), (ty, access));
        }
    }
}

/// Values given by `setp` anywhere in the config, applied as the pins' and params' initial values so
/// that no thread ever runs a period with the component's default instead (name → text).
pub type Presets = HashMap<String, String>;

/// The instances one `loadrt` creates: `count=N` (named `<comp>.0` …) or explicit `names=a,b`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Instances {
    /// `count=N`: instances `<comp>.0` … `<comp>.N-1`.
    Count(usize),
    /// `names=a,b`: instances with exactly these names.
    Names(Vec<String>),
}

/// More instances than any machine needs; a typo like `count=1000000` fails instead of eating memory.
pub const MAX_INSTANCES: usize = 256;

impl Instances {
    /// The instance names for component `component`.
    pub(crate) fn names(&self, component: &str) -> Vec<String> {
        match self {
            Instances::Count(n) => (0..*n).map(|i| format!("{component}.{i}")).collect(),
            Instances::Names(names) => names.clone(),
        }
    }
}

/// `loadrt` arguments other than `count`/`names`, in order. A value with commas gives one element per
/// instance (`maxvel=10,20`); a single value applies to every instance.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadArgs {
    /// Argument name → its value as written (commas included), sorted by name.
    pub args: BTreeMap<String, String>,
}

impl LoadArgs {
    fn for_instance(&self, key: &str, index: usize) -> Option<&str> {
        let v = self.args.get(key)?;
        let mut parts = v.split(',');
        if v.contains(',') {
            parts.nth(index)
        } else {
            Some(v.as_str())
        }
    }
}

type LoadFn = fn(&mut LoadContext<'_>) -> Result<(), LoadError>;

/// A registered component as [`Registry::entries`] lists it: the constants of its [`Component`] impl.
#[derive(Clone, Copy)]
pub struct Entry {
    /// [`Component::NAME`]: what `loadrt` takes.
    pub name: &'static str,
    /// [`Component::SUMMARY`]: one line for listings.
    pub summary: &'static str,
    /// [`Component::ARGS`]: the `key=value` arguments accepted besides `count` and `names`.
    pub args: &'static [&'static str],
    /// [`Component::PREFIX`]: what instance names start with.
    pub prefix: &'static str,
    /// [`Component::SINGLETON`]: one instance, named `prefix`.
    pub singleton: bool,
    /// [`Component::INSTANCES_ARG`]: the argument that gives the instances.
    pub instances_arg: Option<&'static str>,
    load: LoadFn,
}

/// The components `loadrt` knows, by name.
#[derive(Clone, Default)]
pub struct Registry {
    entries: BTreeMap<&'static str, Entry>,
}

impl Registry {
    /// An empty registry.
    pub(crate) fn new() -> Self {
        Registry::default()
    }

    /// The built-ins: `siggen`, `pid`, `stepgen`, `encoder`, `sim_axis`, and LinuxCNC's safety chain and
    /// stateful components (`estop_latch` … `timedelta`, `pwmgen`).
    pub fn builtin() -> Self {
        let mut r = Registry::new();
        r.register::<siggen::Siggen>();
        r.register::<pid::Pid>();
        r.register::<stepgen::Stepgen>();
        r.register::<encoder::Encoder>();
        r.register::<sim_axis::SimAxis>();
        r.register::<logic::And2>();
        r.register::<logic::Or2>();
        r.register::<logic::Xor2>();
        r.register::<logic::Not>();
        r.register::<mux::Mux2>();
        r.register::<mux::Mux4>();
        r.register::<mux::Mux8>();
        r.register::<logic::Select8>();
        r.register::<logic::Demux>();
        r.register::<mux::SampleHold>();
        r.register::<conv::ConvBitS32>();
        r.register::<conv::ConvBitU32>();
        r.register::<conv::ConvFloatS32>();
        r.register::<conv::ConvFloatU32>();
        r.register::<conv::ConvS32Bit>();
        r.register::<conv::ConvS32Float>();
        r.register::<conv::ConvS32U32>();
        r.register::<conv::ConvU32Bit>();
        r.register::<conv::ConvU32Float>();
        r.register::<conv::ConvU32S32>();
        r.register::<finite::Finite>();
        r.register::<limit::Limit1>();
        r.register::<limit::Limit2>();
        r.register::<limit::Limit3>();
        r.register::<math::Scale>();
        r.register::<math::Sum2>();
        r.register::<math::Mult2>();
        r.register::<math::Div2>();
        r.register::<math::Abs>();
        r.register::<compare::Near>();
        r.register::<compare::Comp>();
        r.register::<compare::Wcomp>();
        r.register::<math::Deadzone>();
        r.register::<math::Constant>();
        r.register::<safety::EstopLatchComp>();
        r.register::<safety::Watchdog>();
        r.register::<safety::ChargePumpComp>();
        r.register::<edges::EdgeComp>();
        r.register::<edges::ToggleComp>();
        r.register::<edges::FlipflopComp>();
        r.register::<timing::OneshotComp>();
        r.register::<timing::TimeDelayComp>();
        r.register::<timing::TimeDeltaComp>();
        r.register::<counters::DebounceComp>();
        r.register::<counters::UpDownComp>();
        r.register::<filters::Ddt>();
        r.register::<filters::Integ>();
        r.register::<filters::Lowpass>();
        r.register::<pwmgen::Pwmgen>();
        r.register::<capture::Sampler>();
        r.register::<scope::ScopeSampler>();
        r.register::<capture::Streamer>();
        r.register::<drill::FaultDrill>();
        r
    }

    /// Adds (or replaces) component `C`.
    pub fn register<C: Component>(&mut self) -> &mut Self {
        self.entries.insert(
            C::NAME,
            Entry {
                name: C::NAME,
                summary: C::SUMMARY,
                args: C::ARGS,
                prefix: C::PREFIX,
                singleton: C::SINGLETON,
                instances_arg: C::INSTANCES_ARG,
                load: C::load,
            },
        );
        self
    }

    pub(crate) fn get(&self, name: &str) -> Option<&Entry> {
        self.entries.get(name)
    }

    /// Every registered component, sorted by name (for listings).
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.values()
    }

    /// `loadrt NAME …` of rtapi's component `NAME`: checks the arguments, then loads every instance
    /// into `target`. Whether a name is rtapi's or a LinuxCNC module's is decided before, once, by
    /// [`linuxcnc::ModuleLoader::resolve`].
    pub fn load(
        &self,
        target: &mut dyn Target,
        declared: &mut Declared,
        presets: &Presets,
        name: &str,
        instances: &Instances,
        args: &LoadArgs,
    ) -> Result<Vec<String>, LoadError> {
        let entry = self.get(name).ok_or_else(|| {
            let known: Vec<&str> = self.entries.keys().copied().collect();
            LoadError::new(format!(
                "unknown component '{name}'; known components: {}",
                known.join(", ")
            ))
        })?;
        let names = if entry.singleton {
            if *instances != Instances::Count(1) {
                return Err(LoadError::new(format!(
                    "{name} has a single instance '{}'; it takes no count= or names=",
                    entry.prefix
                )));
            }
            vec![entry.prefix.to_string()]
        } else if let Some(key) = entry.instances_arg {
            if *instances != Instances::Count(1) {
                return Err(LoadError::new(format!(
                    "{name} makes one instance per value of {key}=; it takes no count= or names="
                )));
            }
            let n = args.args.get(key).map_or(0, |v| v.split(',').count());
            if n == 0 {
                return Err(LoadError::new(format!(
                    "{name} needs {key}= (one value per instance, e.g. {key}=2,3)"
                )));
            }
            Instances::Count(n).names(entry.prefix)
        } else {
            instances.names(entry.prefix)
        };
        if names.is_empty() || names.len() > MAX_INSTANCES {
            return Err(LoadError::new(format!(
                "{name}: {} instances requested; use count=1..{MAX_INSTANCES}",
                names.len()
            )));
        }
        for (key, value) in &args.args {
            if !entry.args.contains(&key.as_str()) {
                let known = if entry.args.is_empty() {
                    "it takes only count= or names=".to_string()
                } else {
                    format!("it takes count=, names=, {}", entry.args.join("=, ") + "=")
                };
                return Err(LoadError::new(format!(
                    "component '{name}' has no argument '{key}'; {known}"
                )));
            }
            let n = value.split(',').count();
            if value.contains(',') && n != names.len() {
                return Err(LoadError::new(format!(
                    "{key}={value} gives {n} values for {} instances; give one value, or one per instance",
                    names.len()
                )));
            }
        }
        for (index, instance) in names.iter().enumerate() {
            let component = target.hal_side().component(instance)?;
            let mut ctx = LoadContext {
                target: &mut *target,
                declared: &mut *declared,
                presets,
                instance,
                index,
                component,
                args,
            };
            (entry.load)(&mut ctx)?;
        }
        Ok(names)
    }
}

/// What [`Component::load`] works with: the instance being loaded and the target it declares into.
pub struct LoadContext<'a> {
    target: &'a mut dyn Target,
    declared: &'a mut Declared,
    presets: &'a Presets,
    instance: &'a str,
    index: usize,
    component: ComponentKey,
    args: &'a LoadArgs,
}

impl LoadContext<'_> {
    /// The instance name, e.g. `pid.0`: the prefix of all its pins, params and functions.
    pub fn instance(&self) -> &str {
        self.instance
    }

    /// The position of this instance in its `loadrt` (0 for the first).
    pub fn index(&self) -> usize {
        self.index
    }

    /// The HAL component record of this instance.
    pub fn component(&self) -> ComponentKey {
        self.component
    }

    fn full(&self, suffix: &str) -> String {
        format!("{}.{suffix}", self.instance)
    }

    /// The `setp` value for `name` if the config gives one and it parses as `T`; a bad value is
    /// reported at the `setp` line itself, so here it is only skipped.
    fn preset<T: HalType>(&self, name: &str) -> Option<T> {
        let text = self.presets.get(name)?;
        Value::parse(T::TYPE, text, name)
            .ok()
            .map(|v| T::from_bits(v.to_bits()))
    }

    /// A pin `<instance>.<suffix>` starting at the type's zero value.
    pub fn pin<D: Direction, T: HalType>(
        &mut self,
        suffix: &str,
    ) -> Result<PinKey<D, T>, LoadError> {
        self.pin_with_default(suffix, T::from_bits(0))
    }

    /// A pin `<instance>.<suffix>` starting at `init` (what an unconnected input reads).
    pub fn pin_with_default<D: Direction, T: HalType>(
        &mut self,
        suffix: &str,
        init: T,
    ) -> Result<PinKey<D, T>, LoadError> {
        let name = self.full(suffix);
        let init = self.preset(&name).unwrap_or(init);
        let key = self
            .target
            .hal_side()
            .pin_with_default::<D, T>(self.component, &name, init)?;
        self.declared
            .values
            .insert(name.clone(), Value::from_bits(T::TYPE, init.to_bits()));
        self.declared.pins.insert(name, (T::TYPE, D::DIR));
        Ok(key)
    }

    /// A param `<instance>.<suffix>`.
    pub fn param<T: HalType>(
        &mut self,
        suffix: &str,
        access: ParamAccess,
        init: T,
    ) -> Result<ParamKey<T>, LoadError> {
        let name = self.full(suffix);
        let init = self.preset(&name).unwrap_or(init);
        let key = self
            .target
            .hal_side()
            .param(self.component, &name, access, init)?;
        self.declared
            .values
            .insert(name.clone(), Value::from_bits(T::TYPE, init.to_bits()));
        self.declared.params.insert(name, (T::TYPE, access));
        Ok(key)
    }

    /// Exports function `<instance>.<suffix>`, or with an empty `suffix` one named as the instance
    /// itself (LinuxCNC's `and2.0`). `factory` runs once after the segment is built and returns the
    /// per-period closure (which must not allocate, lock, log or do I/O).
    pub fn function(
        &mut self,
        suffix: &str,
        factory: impl FnOnce(&Hal) -> RtFn + 'static,
    ) -> Result<(), LoadError> {
        let name = if suffix.is_empty() {
            self.instance.to_string()
        } else {
            self.full(suffix)
        };
        self.target
            .function(self.component, &name, Box::new(factory))?;
        self.declared.function_health(&name);
        self.declared
            .functions
            .insert(name, self.instance.to_string());
        Ok(())
    }

    /// Exports a function named exactly as the instance (`estop-latch.0`, `charge-pump`): LinuxCNC's
    /// name for the one function of a halcompile component.
    pub fn instance_function(
        &mut self,
        factory: impl FnOnce(&Hal) -> RtFn + 'static,
    ) -> Result<(), LoadError> {
        self.function("", factory)
    }

    /// This instance's value of `loadrt` argument `key` (declared in [`Component::ARGS`]), parsed.
    pub fn arg<T: FromStr>(&self, key: &str) -> Result<Option<T>, LoadError> {
        match self.args.for_instance(key, self.index) {
            None => Ok(None),
            Some(text) => text.trim().parse().map(Some).map_err(|_| {
                LoadError::new(format!(
                    "{}: argument {key}={text} is not a valid value",
                    self.instance
                ))
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtapi_hal::{In, Out};

    struct Twice;
    impl Component for Twice {
        const NAME: &'static str = "twice";
        const SUMMARY: &'static str = "test";
        const ARGS: &'static [&'static str] = &["k"];
        fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
            let k: f64 = ctx.arg("k")?.unwrap_or(2.0);
            let i = ctx.pin::<In, f64>("in")?;
            let o = ctx.pin::<Out, f64>("out")?;
            ctx.param("k", ParamAccess::Rw, k)?;
            ctx.function("update", move |hal| {
                let (i, o) = (hal.pin(i), hal.pin(o));
                Box::new(move |_| o.set(k * i.get()))
            })
        }
    }

    fn registry() -> Registry {
        let mut r = Registry::new();
        r.register::<Twice>();
        r
    }

    #[test]
    fn count_and_names_make_linuxcnc_instance_names() {
        assert_eq!(
            Instances::Count(2).names("pid"),
            vec!["pid.0".to_string(), "pid.1".to_string()]
        );
        assert_eq!(
            Instances::Names(vec!["x".into(), "y".into()]).names("pid"),
            vec!["x".to_string(), "y".to_string()]
        );
    }

    #[test]
    fn load_declares_prefixed_objects_and_per_instance_args() {
        let mut v = Validation::new("t").unwrap();
        let mut d = Declared::default();
        let args = LoadArgs {
            args: [("k".to_string(), "3,4".to_string())].into(),
        };
        let mut presets = Presets::new();
        presets.insert("twice.1.k".into(), "9".into());
        let names = registry()
            .load(
                &mut v,
                &mut d,
                &presets,
                "twice",
                &Instances::Count(2),
                &args,
            )
            .unwrap();
        assert_eq!(names, ["twice.0", "twice.1"]);
        assert_eq!(d.pins["twice.1.out"], (ValueType::Float, PinDir::Out));
        assert_eq!(d.functions["twice.0.update"], "twice.0");
        assert_eq!(d.params["twice.0.k"].0, ValueType::Float);
    }

    #[test]
    fn bad_loads_explain_themselves() {
        let r = registry();
        let mut v = Validation::new("t").unwrap();
        let mut d = Declared::default();
        let p = Presets::new();
        let none = LoadArgs::default();
        let e = r
            .load(&mut v, &mut d, &p, "nope", &Instances::Count(1), &none)
            .unwrap_err();
        assert!(e.message.contains("unknown component 'nope'") && e.message.contains("twice"));
        let bad = LoadArgs {
            args: [("zz".to_string(), "1".to_string())].into(),
        };
        let e = r
            .load(&mut v, &mut d, &p, "twice", &Instances::Count(1), &bad)
            .unwrap_err();
        assert!(e.message.contains("no argument 'zz'"), "{e}");
        let wrong_len = LoadArgs {
            args: [("k".to_string(), "1,2,3".to_string())].into(),
        };
        let e = r
            .load(
                &mut v,
                &mut d,
                &p,
                "twice",
                &Instances::Count(2),
                &wrong_len,
            )
            .unwrap_err();
        assert!(e.message.contains("3 values for 2 instances"), "{e}");
        let not_num = LoadArgs {
            args: [("k".to_string(), "x".to_string())].into(),
        };
        let e = r
            .load(&mut v, &mut d, &p, "twice", &Instances::Count(1), &not_num)
            .unwrap_err();
        assert!(e.message.contains("k=x"), "{e}");
        let e = r
            .load(&mut v, &mut d, &p, "twice", &Instances::Count(0), &none)
            .unwrap_err();
        assert!(e.message.contains("0 instances"), "{e}");
    }

    #[test]
    fn loading_twice_is_a_duplicate() {
        let r = registry();
        let mut v = Validation::new("t").unwrap();
        let mut d = Declared::default();
        let none = LoadArgs::default();
        let mut load_once = || {
            r.load(
                &mut v,
                &mut d,
                &Presets::new(),
                "twice",
                &Instances::Count(1),
                &none,
            )
        };
        load_once().unwrap();
        let e = load_once().unwrap_err();
        assert!(e.message.contains("already exists"), "{e}");
    }
}
