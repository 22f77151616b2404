//! Registering the HAL's structure before the segment exists.
//!
//! Why a builder: most of the structure (components, pins, nets, functions, threads) is known before
//! threads start, so it is collected in ordinary Rust collections, checked (names, types, net rules),
//! measured, and written into the segment in one go, with spare room in each table for what the owner
//! adds while it runs ([`Capacity`](crate::Capacity)). Readers never see a half-built structure,
//! nothing in the segment ever moves, and "out of room" is an error against an explicit cap. After
//! [`build`](HalBuilder::build) the same model lives on inside the [`Hal`], which applies run-time
//! changes with the same rules.

use std::collections::HashMap;

use crate::error::{HalError, ObjectKind, Result, WriteRefusal};
use crate::hal::Hal;
use crate::keys::{next_builder_id, ComponentKey, FunctionKey, ParamKey, PinKey, ThreadKey};
use crate::layout::Table;
use crate::name::{self, Instance};
use crate::pin::{Direction, ParamAccess, PinDir};
use crate::room::{put, Room};
use crate::segment::Permissions;
use crate::signal::{self, PinView, SignalDef};
use crate::thread::ThreadConfig;
use crate::value::{HalType, Value, ValueType};

/// Default size cap: far above any machine config (10 000 pins take under 1 MiB).
pub const DEFAULT_MAX_SIZE: usize = 64 << 20;

#[derive(Debug, Clone)]
pub(crate) struct ComponentDef {
    pub name: String,
    pub pins: u32,
    pub params: u32,
    pub functions: u32,
}

#[derive(Debug, Clone)]
pub(crate) struct PinDef {
    pub name: String,
    pub ty: ValueType,
    pub dir: PinDir,
    pub component: usize,
    pub signal: Option<usize>,
    pub init: u64,
}

#[derive(Debug, Clone)]
pub(crate) struct ParamDef {
    pub name: String,
    pub ty: ValueType,
    pub access: ParamAccess,
    pub component: usize,
    pub init: u64,
}

#[derive(Debug, Clone)]
pub(crate) struct FunctionDef {
    pub name: String,
    pub component: usize,
    pub thread: Option<usize>,
}

#[derive(Debug, Clone)]
pub(crate) struct ThreadDef {
    pub config: ThreadConfig,
    /// Function indices in run order.
    pub functions: Vec<usize>,
}

/// The namespaces: pins and params share one so `getp`/`setp` by name are unambiguous.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Namespace {
    Component,
    PinOrParam,
    Signal,
    Function,
    Thread,
}

#[derive(Debug, Clone, Copy)]
enum Entry {
    Pin(usize),
    Param(usize),
    Other(usize),
}

/// Collects the HAL structure; [`build`](HalBuilder::build) creates the segment.
///
/// ```
/// use rtapi_hal::{HalBuilder, In, Out, ParamAccess, ThreadConfig};
/// # let mill = format!("doc-builder-{}", std::process::id());
/// # /*
/// let mill = "mill";
/// # */
/// let mut b = HalBuilder::new(&mill)?;
/// let pid = b.component("pid.0")?;
/// let cmd = b.pin::<In, f64>(pid, "pid.0.command")?;
/// let out = b.pin::<Out, f64>(pid, "pid.0.output")?;
/// let gain = b.param(pid, "pid.0.Pgain", ParamAccess::Rw, 1.0f64)?;
/// let calc = b.function(pid, "pid.0.do-pid-calcs")?;
/// let servo = b.thread(ThreadConfig::new("servo", 1_000_000).flavor("posix"))?;
/// b.addf("pid.0.do-pid-calcs", "servo", None)?;
/// b.net("pid-out", "pid.0.output")?;
/// let hal = b.build()?;
/// let (cmd, out, gain) = (hal.pin(cmd), hal.pin(out), hal.param(gain));
/// out.set(cmd.get() * gain.get());
/// let stats = hal.stats_writer(servo)?; // moved into the servo thread
/// # let _ = (calc, stats);
/// # Ok::<(), rtapi_hal::HalError>(())
/// ```
pub struct HalBuilder {
    pub(crate) id: u32,
    pub(crate) instance: Instance,
    pub(crate) permissions: Permissions,
    pub(crate) max_size: usize,
    pub(crate) capacity: crate::image::Capacity,
    /// Room for threads added while the segment runs ([`HalBuilder::thread_room`]).
    pub(crate) thread_room: crate::image::ThreadRoom,
    pub(crate) components: Vec<ComponentDef>,
    pub(crate) pins: Vec<PinDef>,
    pub(crate) params: Vec<ParamDef>,
    pub(crate) signals: Vec<SignalDef>,
    pub(crate) signal_init: Vec<u64>,
    /// Whether `signal_init[i]` was given by [`set_signal`](HalBuilder::set_signal) (an IO pin netted
    /// later does not replace it).
    signal_init_set: Vec<bool>,
    pub(crate) functions: Vec<FunctionDef>,
    pub(crate) threads: Vec<ThreadDef>,
    names: HashMap<(Namespace, String), Entry>,
    /// Per table (in [`Table`] order): which slots hold live records, which deleted ones wait for
    /// reuse. Nothing is deleted before the segment is built.
    pub(crate) rooms: [Room; 6],
    /// Whether a new object may take the slot of a deleted one: set by the live [`Hal`] only while it
    /// holds the writers' exclusion (LAYOUT.md section 11), false otherwise.
    pub(crate) reuse: bool,
}

impl HalBuilder {
    /// A builder for instance `instance` (segment `/rtapi-<instance>`).
    pub fn new(instance: &str) -> Result<Self> {
        Ok(HalBuilder {
            id: next_builder_id(),
            instance: Instance::new(instance)?,
            permissions: Permissions::default(),
            max_size: DEFAULT_MAX_SIZE,
            capacity: crate::image::Capacity::default(),
            thread_room: crate::image::ThreadRoom::default(),
            components: Vec::new(),
            pins: Vec::new(),
            params: Vec::new(),
            signals: Vec::new(),
            signal_init: Vec::new(),
            signal_init_set: Vec::new(),
            functions: Vec::new(),
            threads: Vec::new(),
            names: HashMap::new(),
            rooms: Default::default(),
            reuse: false,
        })
    }

    /// Who besides the owner may open the segment (default: mode 0600).
    pub fn permissions(mut self, permissions: Permissions) -> Self {
        self.permissions = permissions;
        self
    }

    /// The largest segment `build` may create, in bytes.
    pub fn max_size(mut self, bytes: usize) -> Self {
        self.max_size = bytes;
        self
    }

    /// How much room each table keeps for objects added while the segment runs ([`Hal::add_pin`] and
    /// friends). Default: 4 × the built structure, at least 64 records more per table. Threads have
    /// room of their own ([`thread_room`](Self::thread_room)).
    pub fn capacity(mut self, capacity: crate::image::Capacity) -> Self {
        self.capacity = capacity;
        self
    }

    /// Room for threads added while the segment runs ([`Hal::add_thread`](crate::Hal::add_thread)):
    /// `room.threads` spare thread records, each with a stats block reserved for a histogram of at
    /// most `room.max_bins` bins. Default: none (the threads are the ones built).
    pub fn thread_room(mut self, room: crate::image::ThreadRoom) -> Self {
        self.thread_room = room;
        self
    }

    /// The instance the segment will be created for.
    pub fn instance(&self) -> &Instance {
        &self.instance
    }

    fn claim(&mut self, ns: Namespace, kind: ObjectKind, name: &str, entry: Entry) -> Result<()> {
        name::validate(name)?;
        let key = (ns, name.to_string());
        if self.names.contains_key(&key) {
            return Err(HalError::Duplicate {
                kind,
                name: name.to_string(),
            });
        }
        self.names.insert(key, entry);
        Ok(())
    }

    fn lookup(&self, ns: Namespace, name: &str) -> Option<Entry> {
        self.names.get(&(ns, name.to_string())).copied()
    }

    /// Index of the pin called `name`.
    pub(crate) fn pin_index(&self, name: &str) -> Option<usize> {
        match self.lookup(Namespace::PinOrParam, name) {
            Some(Entry::Pin(i)) => Some(i),
            _ => None,
        }
    }

    /// Index of the (live) param called `name`.
    pub(crate) fn param_index(&self, name: &str) -> Option<usize> {
        match self.lookup(Namespace::PinOrParam, name) {
            Some(Entry::Param(i)) => Some(i),
            _ => None,
        }
    }

    /// The room of table `t`.
    pub(crate) fn room(&self, t: Table) -> &Room {
        &self.rooms[t as usize]
    }

    /// Whether the name is taken in the pin-and-param namespace (or not a valid name).
    pub(crate) fn pin_or_param_name_free(&self, name: &str) -> Result<()> {
        name::validate(name)?;
        if self.lookup(Namespace::PinOrParam, name).is_some() {
            return Err(HalError::Duplicate {
                kind: ObjectKind::PinOrParam,
                name: name.to_string(),
            });
        }
        Ok(())
    }

    /// Whether a component may be called `name` (valid and not taken).
    pub(crate) fn component_name_free(&self, name: &str) -> Result<()> {
        name::validate(name)?;
        if self.lookup(Namespace::Component, name).is_some() {
            return Err(HalError::Duplicate {
                kind: ObjectKind::Component,
                name: name.to_string(),
            });
        }
        Ok(())
    }

    /// The live records of table `t` (pins, params or functions) that component `k` owns.
    pub(crate) fn owned_by(&self, t: Table, k: usize) -> Vec<usize> {
        let room = self.room(t);
        let owner = |i: usize| match t {
            Table::Pins => self.pins[i].component,
            Table::Params => self.params[i].component,
            Table::Functions => self.functions[i].component,
            _ => usize::MAX,
        };
        (0..room.used_ever())
            .filter(|&i| !room.is_deleted(i) && owner(i) == k)
            .collect()
    }

    /// Refuses a key of a component that was deleted (its slot may hold another one by now).
    fn check_component(&self, key: ComponentKey) -> Result<()> {
        self.check_key(key.builder, "component");
        if !self.room(Table::Components).holds(key.index, key.serial) {
            return Err(HalError::StaleKey {
                kind: ObjectKind::Component,
            });
        }
        Ok(())
    }

    /// Index of the (live) signal called `name`.
    pub(crate) fn signal_index(&self, name: &str) -> Option<usize> {
        match self.lookup(Namespace::Signal, name) {
            Some(Entry::Other(i)) => Some(i),
            _ => None,
        }
    }

    /// Index of the function called `name`.
    pub(crate) fn function_index(&self, name: &str) -> Option<usize> {
        match self.lookup(Namespace::Function, name) {
            Some(Entry::Other(i)) => Some(i),
            _ => None,
        }
    }

    /// Index of the thread called `name`.
    pub(crate) fn thread_index(&self, name: &str) -> Option<usize> {
        match self.lookup(Namespace::Thread, name) {
            Some(Entry::Other(i)) => Some(i),
            _ => None,
        }
    }

    /// Index of the (live) component called `name`.
    pub(crate) fn component_index(&self, name: &str) -> Option<usize> {
        match self.lookup(Namespace::Component, name) {
            Some(Entry::Other(i)) => Some(i),
            _ => None,
        }
    }

    /// Frees the names and the slots of component `index` and of every pin, param and function it
    /// owns (the component was deleted; its pins were unlinked and its functions removed from their
    /// threads). The slots are reused by later objects.
    pub(crate) fn forget_component(&mut self, index: usize) {
        let pins = self.owned_by(Table::Pins, index);
        let params = self.owned_by(Table::Params, index);
        let functions = self.owned_by(Table::Functions, index);
        let mut gone = vec![(Namespace::Component, self.components[index].name.clone())];
        gone.extend(
            pins.iter()
                .map(|&p| (Namespace::PinOrParam, self.pins[p].name.clone())),
        );
        gone.extend(
            params
                .iter()
                .map(|&p| (Namespace::PinOrParam, self.params[p].name.clone())),
        );
        gone.extend(
            functions
                .iter()
                .map(|&f| (Namespace::Function, self.functions[f].name.clone())),
        );
        for key in gone {
            self.names.remove(&key);
        }
        for (t, list) in [
            (Table::Pins, pins),
            (Table::Params, params),
            (Table::Functions, functions),
        ] {
            for i in list {
                self.rooms[t as usize].delete(i, true);
            }
        }
        self.rooms[Table::Components as usize].delete(index, true);
    }

    /// Frees signal `index`'s name (the signal was deleted; its pins were already taken off it), and
    /// its slot when `reusable`.
    pub(crate) fn forget_signal(&mut self, index: usize, reusable: bool) {
        let name = self.signals[index].name.clone();
        self.names.remove(&(Namespace::Signal, name));
        self.rooms[Table::Signals as usize].delete(index, reusable);
    }

    /// The slot the next object of table `t` gets (a deleted one's when reuse is allowed now).
    fn next_slot(&self, t: Table) -> usize {
        self.room(t).next(self.reuse)
    }

    /// Takes slot `i` of table `t` for a new object: its serial number.
    fn take_slot(&mut self, t: Table, i: usize) -> u32 {
        self.rooms[t as usize].take(i)
    }

    /// Takes pin `pin` off its signal (`unlinkp`); returns the signal's index.
    pub(crate) fn unnet(&mut self, pin: usize) -> Option<usize> {
        let s = self.pins[pin].signal.take()?;
        let sig = &mut self.signals[s];
        match self.pins[pin].dir {
            PinDir::In => sig.readers -= 1,
            PinDir::Out => sig.writer = None,
            PinDir::Io => sig.bidirs -= 1,
        }
        Some(s)
    }

    /// Removes function `function` from thread `thread` (`delf`); returns both indices.
    pub(crate) fn delf(&mut self, function: &str, thread: &str) -> Result<(usize, usize)> {
        let f = self
            .function_index(function)
            .ok_or_else(|| HalError::NotFound {
                kind: ObjectKind::Function,
                name: function.to_string(),
            })?;
        let t = self
            .thread_index(thread)
            .ok_or_else(|| HalError::NotFound {
                kind: ObjectKind::Thread,
                name: thread.to_string(),
            })?;
        if self.functions[f].thread != Some(t) {
            return Err(HalError::InvalidConfig {
                what: "delf",
                reason: format!("function '{function}' is not in thread '{thread}'"),
            });
        }
        self.threads[t].functions.retain(|&g| g != f);
        self.functions[f].thread = None;
        Ok((f, t))
    }

    fn check_key(&self, builder: u32, what: &str) {
        assert_eq!(builder, self.id, "{what} key from another HalBuilder");
    }

    /// Registers a component: the owner of pins, params and functions (e.g. `pid.0`).
    pub fn component(&mut self, name: &str) -> Result<ComponentKey> {
        let index = self.next_slot(Table::Components);
        self.claim(
            Namespace::Component,
            ObjectKind::Component,
            name,
            Entry::Other(index),
        )?;
        let serial = self.take_slot(Table::Components, index);
        put(
            &mut self.components,
            index,
            ComponentDef {
                name: name.to_string(),
                pins: 0,
                params: 0,
                functions: 0,
            },
        );
        Ok(ComponentKey {
            builder: self.id,
            index,
            serial,
        })
    }

    /// Changes the value pin or param `name` starts at (canonical bits of its type,
    /// [`Value::to_bits`](crate::Value::to_bits)): for a C component, which writes its defaults through
    /// its pointers after creating them.
    pub fn set_init(&mut self, name: &str, bits: u64) -> Result<()> {
        if let Some(i) = self.pin_index(name) {
            self.pins[i].init = bits;
            return Ok(());
        }
        if let Some(i) = self.param_index(name) {
            self.params[i].init = bits;
            return Ok(());
        }
        Err(HalError::NotFound {
            kind: ObjectKind::PinOrParam,
            name: name.to_string(),
        })
    }

    /// A pin starting at the type's zero value.
    pub fn pin<D: Direction, T: HalType>(
        &mut self,
        component: ComponentKey,
        name: &str,
    ) -> Result<PinKey<D, T>> {
        self.pin_with_default(component, name, T::from_bits(0))
    }

    /// A pin starting at `init` (the value an unconnected IN pin reads until someone sets it).
    pub fn pin_with_default<D: Direction, T: HalType>(
        &mut self,
        component: ComponentKey,
        name: &str,
        init: T,
    ) -> Result<PinKey<D, T>> {
        let (index, serial) = self.pin_raw(component, name, T::TYPE, D::DIR, init.to_bits())?;
        Ok(PinKey::new(self.id, index, serial))
    }

    /// A pin of a type and direction known only at run time; its `(index, serial)`.
    pub(crate) fn pin_raw(
        &mut self,
        component: ComponentKey,
        name: &str,
        ty: ValueType,
        dir: PinDir,
        init: u64,
    ) -> Result<(usize, u32)> {
        self.check_component(component)?;
        let index = self.next_slot(Table::Pins);
        self.claim(
            Namespace::PinOrParam,
            ObjectKind::PinOrParam,
            name,
            Entry::Pin(index),
        )?;
        let serial = self.take_slot(Table::Pins, index);
        put(
            &mut self.pins,
            index,
            PinDef {
                name: name.to_string(),
                ty,
                dir,
                component: component.index,
                signal: None,
                init,
            },
        );
        self.components[component.index].pins += 1;
        Ok((index, serial))
    }

    /// A param of `component` starting at `init`; `access` says whether other processes may `setp` it.
    pub fn param<T: HalType>(
        &mut self,
        component: ComponentKey,
        name: &str,
        access: ParamAccess,
        init: T,
    ) -> Result<ParamKey<T>> {
        let (index, serial) = self.param_raw(component, name, T::TYPE, access, init.to_bits())?;
        Ok(ParamKey::new(self.id, index, serial))
    }

    /// A param of a type known only at run time; its `(index, serial)`.
    pub(crate) fn param_raw(
        &mut self,
        component: ComponentKey,
        name: &str,
        ty: ValueType,
        access: ParamAccess,
        init: u64,
    ) -> Result<(usize, u32)> {
        self.check_component(component)?;
        let index = self.next_slot(Table::Params);
        self.claim(
            Namespace::PinOrParam,
            ObjectKind::PinOrParam,
            name,
            Entry::Param(index),
        )?;
        let serial = self.take_slot(Table::Params, index);
        put(
            &mut self.params,
            index,
            ParamDef {
                name: name.to_string(),
                ty,
                access,
                component: component.index,
                init,
            },
        );
        self.components[component.index].params += 1;
        Ok((index, serial))
    }

    /// Declares a signal explicitly (`newsig`); [`net`](Self::net) also creates one on first use.
    pub fn signal(&mut self, name: &str, ty: ValueType) -> Result<()> {
        self.signal_at(name, ty).map(|_| ())
    }

    /// [`signal`](Self::signal), returning the signal's index.
    pub(crate) fn signal_at(&mut self, name: &str, ty: ValueType) -> Result<usize> {
        let index = self.next_slot(Table::Signals);
        self.claim(
            Namespace::Signal,
            ObjectKind::Signal,
            name,
            Entry::Other(index),
        )?;
        self.take_slot(Table::Signals, index);
        put(
            &mut self.signals,
            index,
            SignalDef {
                name: name.to_string(),
                ty,
                writer: None,
                readers: 0,
                bidirs: 0,
            },
        );
        put(&mut self.signal_init, index, 0);
        put(&mut self.signal_init_set, index, false);
        Ok(index)
    }

    /// Sets the value signal `name` holds when the segment is built (what `sets` does on a running
    /// HAL), so no thread ever runs a period with the type's zero instead.
    ///
    /// Same rules as [`HalReader::sets`](crate::HalReader::sets) without force: the signal must exist
    /// ([`HalError::NotFound`]), `value` must be of its type ([`HalError::WrongType`]), a float must be
    /// finite ([`HalError::NonFinite`]), and the signal must not have an OUT pin, whose component writes
    /// it every period ([`HalError::NotWritable`]). Netting an OUT pin later replaces the value with that
    /// pin's initial value; netting an IO pin later keeps it. Setting it again replaces it.
    pub fn set_signal(&mut self, name: &str, value: Value) -> Result<()> {
        let Some(Entry::Other(index)) = self.lookup(Namespace::Signal, name) else {
            return Err(HalError::NotFound {
                kind: ObjectKind::Signal,
                name: name.to_string(),
            });
        };
        let sig = &self.signals[index];
        if value.value_type() != sig.ty {
            return Err(HalError::WrongType {
                name: name.to_string(),
                expected: sig.ty,
                found: value.value_type(),
            });
        }
        if let Value::Float(v) = value {
            if !v.is_finite() {
                return Err(HalError::NonFinite {
                    name: name.to_string(),
                    text: value.to_string(),
                });
            }
        }
        if let Some(w) = sig.writer {
            return Err(HalError::NotWritable {
                name: name.to_string(),
                reason: WriteRefusal::SignalHasWriter {
                    writer: self.pins[w].name.clone(),
                },
            });
        }
        self.signal_init[index] = value.to_bits();
        self.signal_init_set[index] = true;
        Ok(())
    }

    /// Connects pin `pin` to signal `signal`, creating the signal with the pin's type if it does not exist.
    /// Nets are checked here: one OUT pin per signal, OUT and IO never mixed, types equal.
    pub fn net(&mut self, signal: &str, pin: &str) -> Result<()> {
        let pin_index = match self.lookup(Namespace::PinOrParam, pin) {
            Some(Entry::Pin(i)) => i,
            _ => {
                return Err(HalError::NotFound {
                    kind: ObjectKind::Pin,
                    name: pin.to_string(),
                })
            }
        };
        let sig_index = match self.lookup(Namespace::Signal, signal) {
            Some(Entry::Other(i)) => i,
            _ => self.signal_at(signal, self.pins[pin_index].ty)?,
        };
        let p = &self.pins[pin_index];
        let sig = &self.signals[sig_index];
        let view = PinView {
            name: &p.name,
            ty: p.ty,
            dir: p.dir,
            on_signal: p.signal.map(|s| self.signals[s].name.as_str()),
        };
        signal::check_net(sig, &view, sig.writer.map(|w| self.pins[w].name.as_str()))?;
        let dir = p.dir;
        // The signal starts from its writer's initial value, so netting does not glitch the value.
        // An explicit `set_signal` value survives IO pins; an OUT pin owns the value.
        if dir == PinDir::Out || (dir == PinDir::Io && !self.signal_init_set[sig_index]) {
            self.signal_init[sig_index] = p.init;
        }
        signal::apply_net(&mut self.signals[sig_index], pin_index, dir);
        self.pins[pin_index].signal = Some(sig_index);
        Ok(())
    }

    /// Registers a function of `component`: code the runtime calls once per period of the thread it is
    /// added to with [`addf`](Self::addf).
    pub fn function(&mut self, component: ComponentKey, name: &str) -> Result<FunctionKey> {
        self.check_component(component)?;
        let index = self.next_slot(Table::Functions);
        self.claim(
            Namespace::Function,
            ObjectKind::Function,
            name,
            Entry::Other(index),
        )?;
        let serial = self.take_slot(Table::Functions, index);
        put(
            &mut self.functions,
            index,
            FunctionDef {
                name: name.to_string(),
                component: component.index,
                thread: None,
            },
        );
        self.components[component.index].functions += 1;
        Ok(FunctionKey {
            builder: self.id,
            index,
            serial,
        })
    }

    /// Registers a periodic thread ([`HalError::InvalidConfig`] if `config` is out of range). Its stats
    /// block is sized from `config.histogram`.
    pub fn thread(&mut self, config: ThreadConfig) -> Result<ThreadKey> {
        config.validate()?;
        let index = self.threads.len();
        self.claim(
            Namespace::Thread,
            ObjectKind::Thread,
            &config.name,
            Entry::Other(index),
        )?;
        self.threads.push(ThreadDef {
            config,
            functions: Vec::new(),
        });
        self.take_slot(Table::Threads, index);
        Ok(ThreadKey {
            builder: self.id,
            index,
            serial: 0,
        })
    }

    /// Adds function `function` to thread `thread` (`addf`), at `position` in its run order (0 = first;
    /// `None` = last).
    pub fn addf(&mut self, function: &str, thread: &str, position: Option<usize>) -> Result<()> {
        let not_found = |kind, name: &str| HalError::NotFound {
            kind,
            name: name.to_string(),
        };
        let Some(Entry::Other(f)) = self.lookup(Namespace::Function, function) else {
            return Err(not_found(ObjectKind::Function, function));
        };
        let Some(Entry::Other(t)) = self.lookup(Namespace::Thread, thread) else {
            return Err(not_found(ObjectKind::Thread, thread));
        };
        if let Some(existing) = self.functions[f].thread {
            return Err(HalError::AlreadyAdded {
                function: function.to_string(),
                thread: self.threads[existing].config.name.clone(),
            });
        }
        let list = &mut self.threads[t].functions;
        let at = position.unwrap_or(list.len());
        if at > list.len() {
            return Err(HalError::InvalidConfig {
                what: "addf position",
                reason: format!(
                    "thread '{thread}' has {} functions; position {at} is past the end",
                    list.len()
                ),
            });
        }
        list.insert(at, f);
        self.functions[f].thread = Some(t);
        Ok(())
    }

    /// Creates the segment, writes the structure and publishes it. Fails with
    /// [`HalError::InstanceInUse`] if a live process owns the instance; reclaims a dead owner's segment.
    /// A file at the name that is not trusted (a symlink or other non-regular file, another user's, or
    /// with a mode beyond 0640; see [`Trust`](crate::Trust)) is refused with [`HalError::Untrusted`] and
    /// left alone: it is never followed, believed or removed.
    pub fn build(self) -> Result<Hal> {
        Hal::create(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pin::{In, Io, Out};
    use crate::stats::{HistogramConfig, MAX_BINS};

    #[test]
    fn names_are_validated_and_unique_per_namespace() {
        let mut b = HalBuilder::new("t").unwrap();
        let c = b.component("pid.0").unwrap();
        assert!(matches!(
            b.component("pid.0"),
            Err(HalError::Duplicate { .. })
        ));
        assert!(matches!(
            b.component("pid 0"),
            Err(HalError::InvalidName { .. })
        ));
        b.pin::<In, f64>(c, "pid.0.command").unwrap();
        let e = b
            .param(c, "pid.0.command", ParamAccess::Rw, 0.0)
            .err()
            .unwrap();
        assert!(matches!(
            e,
            HalError::Duplicate {
                kind: ObjectKind::PinOrParam,
                ..
            }
        ));
        // Signals, functions and threads have their own namespaces (a signal may be named like a pin).
        b.signal("pid.0.command", ValueType::Float).unwrap();
        b.function(c, "pid.0.command").unwrap();
        b.thread(ThreadConfig::new("pid.0.command", 1000)).unwrap();
        assert!(HalBuilder::new("bad/instance").is_err());
    }

    #[test]
    fn net_creates_signals_and_enforces_rules() {
        let mut b = HalBuilder::new("t").unwrap();
        let c = b.component("c").unwrap();
        b.pin::<Out, f64>(c, "c.out").unwrap();
        b.pin::<Out, f64>(c, "c.out2").unwrap();
        b.pin::<In, f64>(c, "c.in").unwrap();
        b.pin::<In, bool>(c, "c.bit").unwrap();
        b.pin::<Io, f64>(c, "c.io").unwrap();
        b.net("s", "c.out").unwrap();
        b.net("s", "c.in").unwrap();
        assert_eq!(b.signals[0].ty, ValueType::Float);
        assert!(matches!(
            b.net("s", "c.out2"),
            Err(HalError::SecondWriter { .. })
        ));
        assert!(matches!(
            b.net("s", "c.bit"),
            Err(HalError::TypeMismatch { .. })
        ));
        assert!(matches!(
            b.net("s", "c.io"),
            Err(HalError::OutWithIo { .. })
        ));
        assert!(matches!(
            b.net("s2", "c.in"),
            Err(HalError::AlreadyNetted { .. })
        ));
        assert!(matches!(b.net("s", "nope"), Err(HalError::NotFound { .. })));
        assert_eq!((b.signals[0].readers, b.signals[0].writer), (1, Some(0)));
    }

    #[test]
    fn addf_orders_and_rejects_double_add() {
        let mut b = HalBuilder::new("t").unwrap();
        let c = b.component("c").unwrap();
        for f in ["a", "b", "c"] {
            b.function(c, f).unwrap();
        }
        b.thread(ThreadConfig::new("servo", 1_000_000)).unwrap();
        b.thread(ThreadConfig::new("base", 25_000)).unwrap();
        b.addf("a", "servo", None).unwrap();
        b.addf("b", "servo", Some(0)).unwrap();
        b.addf("c", "servo", Some(1)).unwrap();
        assert_eq!(b.threads[0].functions, vec![1, 2, 0]);
        assert!(matches!(
            b.addf("a", "base", None),
            Err(HalError::AlreadyAdded { .. })
        ));
        assert!(matches!(
            b.addf("zz", "base", None),
            Err(HalError::NotFound { .. })
        ));
        assert!(matches!(
            b.addf("a", "zz", None),
            Err(HalError::NotFound { .. })
        ));
    }

    #[test]
    fn thread_config_is_validated() {
        let mut b = HalBuilder::new("t").unwrap();
        assert!(b.thread(ThreadConfig::new("x", 0)).is_err());
        let bad_hist = HistogramConfig {
            bin_ns: 0,
            bins: 10,
        };
        assert!(b
            .thread(ThreadConfig::new("x", 1).histogram(bad_hist))
            .is_err());
        let bad_hist = HistogramConfig {
            bin_ns: 1,
            bins: MAX_BINS + 1,
        };
        assert!(b
            .thread(ThreadConfig::new("x", 1).histogram(bad_hist))
            .is_err());
        assert!(b
            .thread(ThreadConfig::new("x", 1).timer("relative-nanosleep"))
            .is_ok());
        assert!(b
            .thread(ThreadConfig::new("y", 1).timer("a-timer-name-that-is-too-long"))
            .is_err());
        assert_eq!(
            ThreadConfig::new("z", 1_000_000).effective_spike_threshold(),
            500_000
        );
    }
}
