//! A deterministic bench for components: load them as `loadrt` would, into a real HAL segment, then
//! run their functions period by period from the calling thread, with the period's time given, and
//! read and write pins by name. No RT thread, no clock: the same inputs give the same outputs, which
//! is what the component tests and the differential tests against LinuxCNC need.
//!
//! ```
//! use rtapi::components::Harness;
//!
//! let mut h = Harness::new("doc-harness")?;
//! h.loadrt("siggen")?;
//! h.start()?;
//! h.set("siggen.0.frequency", "250")?;
//! h.step(1_000_000); // one 1 ms period: a quarter of a 250 Hz wave
//! assert!((h.get_f64("siggen.0.sine")? - 1.0).abs() < 1e-9);
//! # Ok::<(), rtapi::components::LoadError>(())
//! ```

use rtapi_hal::{ComponentKey, Hal, HalBuilder, HalReader, Value, WriteOptions};

use super::linuxcnc::{KeptModule, ModuleLoader, Resolved};
use super::{Declared, Instances, LoadArgs, LoadError, Presets, Registry, Target};
use crate::runtime::function::{Cycle, FunctionFactory, RtFn};
use crate::runtime::{health, ThreadSpec};

/// Components loaded into a real segment and stepped by hand; see the module docs.
pub struct Harness {
    registry: Registry,
    builder: Option<HalBuilder>,
    declared: Declared,
    pending: Vec<(String, FunctionFactory)>,
    hal: Option<Hal>,
    reader: Option<HalReader>,
    fns: Vec<(String, RtFn)>,
    number: u64,
    now_ns: i64,
    health_owner: Option<ComponentKey>,
    /// Decides native vs LinuxCNC module, and loads modules.
    loader: ModuleLoader,
    /// The LinuxCNC modules it loaded: last, so they go (`rtapi_app_exit`, `dlclose`) after the
    /// functions that call them.
    modules: Vec<KeptModule>,
}

impl Harness {
    /// An empty bench whose segment will be `/dev/shm/rtapi-<instance>` (removed on drop).
    pub fn new(instance: &str) -> Result<Harness, LoadError> {
        Ok(Harness {
            registry: Registry::builtin(),
            builder: Some(HalBuilder::new(instance)?),
            declared: Declared::default(),
            pending: Vec::new(),
            hal: None,
            reader: None,
            fns: Vec::new(),
            number: 0,
            now_ns: 0,
            health_owner: None,
            loader: ModuleLoader::new(),
            modules: Vec::new(),
        })
    }

    /// `loadrt` as a .hal file writes it, without the verb: `"and2 count=2"`, `"mux4 names=a,b"`,
    /// `"debounce cfg=2,3"`. Returns the instances created.
    pub fn loadrt(&mut self, line: &str) -> Result<Vec<String>, LoadError> {
        let mut words = line.split_whitespace();
        let name = words
            .next()
            .ok_or_else(|| LoadError::new("loadrt: no component named"))?;
        // A LinuxCNC module's count=/names= are its own arguments: none unless given.
        let resolved = self
            .loader
            .resolve(name, self.registry.get(name).is_some(), None);
        let module = matches!(resolved, Resolved::Module { .. });
        let mut instances = Instances::Count(usize::from(!module));
        let mut args = LoadArgs::default();
        for w in words {
            let (k, v) = w
                .split_once('=')
                .ok_or_else(|| LoadError::new(format!("loadrt {name}: '{w}' is not key=value")))?;
            match k {
                "count" => {
                    instances = Instances::Count(v.parse().map_err(|_| {
                        LoadError::new(format!("loadrt {name}: count={v} is not a number"))
                    })?)
                }
                "names" => instances = Instances::Names(v.split(',').map(String::from).collect()),
                _ => {
                    args.args.insert(k.to_string(), v.to_string());
                }
            }
        }
        let registry = std::mem::take(&mut self.registry);
        let loader = std::mem::take(&mut self.loader);
        let mut declared = std::mem::take(&mut self.declared);
        let presets = Presets::new();
        let r = match resolved {
            Resolved::Module { path, .. } => {
                loader.load(self, &mut declared, &presets, &path, &instances, &args)
            }
            Resolved::Missing { message } => Err(LoadError::new(message)),
            Resolved::Native | Resolved::Unknown => {
                registry.load(self, &mut declared, &presets, name, &instances, &args)
            }
        };
        self.registry = registry;
        self.loader = loader;
        self.declared = declared;
        r
    }

    /// `net SIGNAL PIN…` before [`start`](Self::start): creates the signal (typed by its first pin)
    /// if needed and links the pins.
    pub fn net(&mut self, signal: &str, pins: &[&str]) -> Result<(), LoadError> {
        let b = self.builder_mut()?;
        for p in pins {
            b.net(signal, p)?;
        }
        Ok(())
    }

    /// The components' declarations so far (pins, params, functions by full name).
    pub fn declared(&self) -> &Declared {
        &self.declared
    }

    /// Builds the segment and every function's per-period closure, in load order.
    pub fn start(&mut self) -> Result<(), LoadError> {
        let builder = self
            .builder
            .take()
            .ok_or_else(|| LoadError::new("the harness is already started"))?;
        let hal = builder.build()?;
        self.fns = std::mem::take(&mut self.pending)
            .into_iter()
            .map(|(name, factory)| (name, factory(&hal)))
            .collect();
        self.reader = Some(hal.reader()?);
        self.hal = Some(hal);
        Ok(())
    }

    fn builder_mut(&mut self) -> Result<&mut HalBuilder, LoadError> {
        self.builder
            .as_mut()
            .ok_or_else(|| LoadError::new("the harness is started: declare before start()"))
    }

    fn reader(&self) -> Result<&HalReader, LoadError> {
        self.reader
            .as_ref()
            .ok_or_else(|| LoadError::new("start() the harness first"))
    }

    /// `setp`/`sets` by name: a param, an unconnected input pin, or an undriven signal, from text as
    /// `setp` takes it (`1`, `TRUE`, `-2.5`, `nan`).
    pub fn set(&self, name: &str, text: &str) -> Result<Value, LoadError> {
        Ok(self.reader()?.setp(name, text)?)
    }

    /// [`set`](Self::set) that also writes NaN or an infinity (`setp --force`), for tests of how a
    /// component handles non-finite inputs.
    pub fn set_forced(&self, name: &str, text: &str) -> Result<Value, LoadError> {
        let opts = WriteOptions { force: true };
        Ok(self.reader()?.setp_with(name, text, opts)?)
    }

    /// The value of a pin, param or signal.
    pub fn get(&self, name: &str) -> Result<Value, LoadError> {
        Ok(self.reader()?.get(name)?)
    }

    /// [`get`](Self::get) as a float (bits as 0/1, integers converted).
    pub fn get_f64(&self, name: &str) -> Result<f64, LoadError> {
        Ok(match self.get(name)? {
            Value::Bit(b) => f64::from(u8::from(b)),
            Value::Float(f) => f,
            Value::S32(i) => f64::from(i),
            Value::U32(u) => f64::from(u),
            #[allow(unreachable_patterns)]
            other => {
                return Err(LoadError::new(format!(
                    "{name} = {other:?} is not a number"
                )))
            }
        })
    }

    /// The functions, in load order.
    pub fn functions(&self) -> impl Iterator<Item = &str> {
        self.fns.iter().map(|(n, _)| n.as_str())
    }

    /// One period of `period_ns`: every function once, in load order.
    pub fn step(&mut self, period_ns: u64) {
        self.step_late(period_ns, 0);
    }

    /// One period that comes `missed` periods late (an overrun): `dt` is `(missed + 1) × period`.
    pub fn step_late(&mut self, period_ns: u64, missed: u64) {
        let dt = period_ns * (missed + 1);
        self.number += missed + 1;
        self.now_ns += dt as i64;
        let cycle = Cycle {
            number: self.number - 1,
            period_ns,
            dt_ns: dt,
            missed,
            now_ns: self.now_ns,
        };
        for (_, f) in &mut self.fns {
            f(&cycle);
        }
    }

    /// Runs only the function named `name` once, as part of a period of `period_ns`.
    pub fn call(&mut self, name: &str, period_ns: u64) -> Result<(), LoadError> {
        let cycle = Cycle {
            number: self.number,
            period_ns,
            dt_ns: period_ns,
            missed: 0,
            now_ns: self.now_ns,
        };
        let f = self
            .fns
            .iter_mut()
            .find(|(n, _)| n == name)
            .ok_or_else(|| LoadError::new(format!("no function '{name}'")))?;
        (f.1)(&cycle);
        Ok(())
    }
}

impl Target for Harness {
    /// The harness runs what it loads: a LinuxCNC module stays loaded until the harness goes.
    fn keeps_modules(&self) -> bool {
        true
    }

    fn keep_module(&mut self, module: KeptModule) {
        self.modules.push(module);
    }

    fn hal(&mut self) -> &mut HalBuilder {
        self.builder
            .as_mut()
            .expect("components are loaded before the harness starts")
    }

    fn function(
        &mut self,
        component: ComponentKey,
        name: &str,
        factory: FunctionFactory,
    ) -> Result<(), LoadError> {
        let b = self.builder_mut()?;
        b.function(component, name)?;
        health::declare_function(b, component, name)?;
        self.pending.push((name.to_string(), factory));
        Ok(())
    }

    fn thread(&mut self, thread: &ThreadSpec) -> Result<(), LoadError> {
        let b = self
            .builder
            .as_mut()
            .ok_or_else(|| LoadError::new("the harness is started: declare before start()"))?;
        super::target::declare_thread(b, &mut self.health_owner, thread)
    }

    fn addf(
        &mut self,
        function: &str,
        thread: &str,
        position: Option<usize>,
    ) -> Result<(), LoadError> {
        self.builder_mut()?.addf(function, thread, position)?;
        Ok(())
    }
}
