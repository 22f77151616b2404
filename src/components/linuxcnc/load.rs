//! Loading a module: `dlopen`, its arguments, `rtapi_app_main` and what it declared, the dry run's
//! probes, and `rtapi_app_exit` at the end.

use super::*;

// ---- loading --------------------------------------------------------------------------------------

fn dlerror_text() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated string valid until the next dl* call on this
    // thread; it is copied at once.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown dlopen error".to_string()
    } else {
        // SAFETY: non-null, NUL-terminated (above).
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// Explains a `dlopen` failure: an unresolved symbol is named.
pub(super) fn open_error(module: &str, path: &Path, text: &str) -> LoadError {
    if let Some((_, sym)) = text.split_once("undefined symbol: ") {
        let sym = sym.trim();
        LoadError::unavailable(format!(
            "its LinuxCNC module {} needs symbol '{sym}', which rtapi does not provide{}",
            path.display(),
            if sym.starts_with("hal_") || sym.starts_with("rtapi_") {
                " (not in rtapi's LinuxCNC C interface yet)"
            } else {
                " (another module's: load that one first, if rtapi can)"
            }
        ))
    } else {
        LoadError::unavailable(format!(
            "LinuxCNC module {module} ({}) cannot be loaded: {text}",
            path.display()
        ))
    }
}

/// Strings of errno values a module returns (`-ENODEV`…), for messages.
fn errno_text(rc: c_int) -> String {
    let e = std::io::Error::from_raw_os_error(rc.saturating_abs());
    format!("{rc} ({e})")
}

impl ModuleLoader {
    /// `loadrt` of a LinuxCNC module into `target`. Returns the components it made.
    pub(crate) fn load(
        &self,
        target: &mut dyn Target,
        declared: &mut Declared,
        presets: &Presets,
        path: &Path,
        instances: &Instances,
        args: &LoadArgs,
    ) -> Result<Vec<String>, LoadError> {
        capi::keep_linked();
        let keep = target.keeps_modules();
        let live = matches!(target.hal_side(), HalSide::Live(_));
        let module = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string());
        // Its owners and mode, and that it is a LinuxCNC module, before any of its code can run (a
        // shared object's constructors run inside dlopen).
        let canonical = trust::check_owner(path).map_err(|e| LoadError::new(e.to_string()))?;
        trust::inspect(&canonical).map_err(|e| LoadError::new(e.to_string()))?;
        // A real load reserves the file (until its `KeptModule` goes); a dry run only checks.
        let reserved = {
            let mut r = lock(&REGISTRY);
            if r.kept.contains(&canonical) {
                return Err(LoadError::new(format!(
                    "LinuxCNC module {module} is already loaded (unloadrt it first)"
                )));
            }
            if keep {
                r.kept.push(canonical.clone());
            }
            Reservation(keep.then(|| canonical.clone()))
        };
        // Dry-run leftovers: all go before a real load; from this module on before a new dry run of it.
        let from = if keep {
            Some(0)
        } else {
            lock(&self.probes).iter().position(|p| p.path == canonical)
        };
        if let Some(i) = from {
            self.close_probes_from(i);
        }
        let cpath = CString::new(canonical.as_os_str().as_encoded_bytes()).map_err(|_| {
            LoadError::new(format!("module path {} has a NUL byte", path.display()))
        })?;
        // SAFETY: a NUL-terminated path; RTLD_NOW resolves every symbol now (failing on a missing one),
        // RTLD_GLOBAL lets modules loaded later use this one's symbols. Running the module's
        // constructors is what loading a module means: the file passed `trust::check_owner` (only root
        // or the caller could have written it) and `trust::inspect` (a LinuxCNC module) just above.
        let handle = unsafe { libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if handle.is_null() {
            return Err(open_error(&module, path, &dlerror_text()));
        }
        let close = |h: *mut c_void| {
            // SAFETY: `h` is the live handle from the dlopen above, closed once.
            unsafe { libc::dlclose(h) };
        };
        let sym = |name: &CStr| {
            // SAFETY: live handle, NUL-terminated name.
            unsafe { libc::dlsym(handle, name.as_ptr()) }
        };
        let main_ptr = sym(c"rtapi_app_main");
        if main_ptr.is_null() {
            close(handle);
            return Err(LoadError::new(format!(
                "{} is not a LinuxCNC real-time module (it has no rtapi_app_main); {}",
                path.display(),
                trust::NOT_A_MODULE_FIX
            )));
        }
        // SAFETY: rtapi_app.h declares `int rtapi_app_main(void)` and `void rtapi_app_exit(void)`.
        let main: unsafe extern "C" fn() -> c_int = unsafe { std::mem::transmute(main_ptr) };
        let exit_ptr = sym(c"rtapi_app_exit");
        let exit: Option<unsafe extern "C" fn()> = if exit_ptr.is_null() {
            None
        } else {
            // SAFETY: as above.
            Some(unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn()>(exit_ptr) })
        };

        // Arguments: count=/names= are the module's own.
        let mut strings = Vec::new();
        let pairs = arg_pairs(instances, args);
        for (k, v) in &pairs {
            if let Err(m) = args::write(handle, &module, path, k, v, &mut strings) {
                close(handle);
                return Err(LoadError::new(m));
            }
        }

        let serial = {
            let mut r = lock(&REGISTRY);
            r.next_serial += 1;
            r.next_serial - 1
        };
        let name: &'static str = Box::leak(module.clone().into_boxed_str());
        // SAFETY: only the lifetime of the trait object is erased; `LOADING` is cleared below, before
        // the `&mut dyn Target` borrow ends, and nothing keeps the pointer.
        let target_ptr: *mut (dyn Target + 'static) =
            unsafe { std::mem::transmute::<*mut (dyn Target + '_), _>(target as *mut dyn Target) };
        LOADING.with(|l| {
            *l.borrow_mut() = Some(Loading {
                target: target_ptr,
                declared,
                presets,
                serial,
                module: name,
                comps: Vec::new(),
                errors: Vec::new(),
                held: Vec::new(),
                live,
            })
        });
        let previous = CURRENT.with(|c| c.replace(name));
        // SAFETY: the module's entry point, called once after its arguments were written, as rtapi_app
        // does; its callbacks find this load in `LOADING`.
        let rc = unsafe { main() };
        let loading = LOADING
            .with(|l| l.borrow_mut().take())
            .expect("LOADING set above");
        if rc == 0 {
            for (level, text) in &loading.held {
                capi::log_message(*level, text);
            }
        }
        CURRENT.with(|c| c.set(previous));
        let comps = loading.comps;
        let names: Vec<String> = comps.iter().map(|c| c.name.clone()).collect();

        if rc != 0 {
            if let HalSide::Live(hal) = target.hal_side() {
                for c in &comps {
                    let _ = hal.delete_component(&c.name);
                }
            }
            for c in &comps {
                c.exited.store(true, Ordering::Relaxed);
            }
            close(handle);
            // Its error messages; a module that prints its errors with `rtapi_print` (hm2_eth), which
            // LinuxCNC always shows, has what it printed that way instead.
            let said: Vec<&str> = if loading.errors.is_empty() {
                loading
                    .held
                    .iter()
                    .filter(|(level, _)| *level == capi::MSG_ALL)
                    .map(|(_, t)| t.as_str())
                    .collect()
            } else {
                loading.errors.iter().map(String::as_str).collect()
            };
            let said = if said.is_empty() {
                String::new()
            } else {
                format!("; it said: {}", said.join(" / "))
            };
            // Not "unavailable": the module is here and ran; what it said is the cause, first.
            return Err(LoadError::new(format!(
                "LinuxCNC module {module}: rtapi_app_main failed with {}{said}",
                errno_text(rc)
            )));
        }

        // The module's defaults, written through its pointers after it made them, become the initial
        // values (unless the config setp's them); live, params go to their cells now.
        for c in &comps {
            let objects = lock(&c.objects);
            for p in objects.pins.iter().filter(|p| p.staging != 0) {
                let bits = presets
                    .get(&p.name)
                    .and_then(|t| Value::parse(p.ty, t, &p.name).ok())
                    .map(Value::to_bits)
                    // SAFETY: the staging cell is an 8-byte arena cell made for this pin.
                    .unwrap_or_else(|| unsafe { read_c(p.staging, p.ty) });
                if let HalSide::Building(b) = target.hal_side() {
                    let _ = b.set_init(&p.name, bits);
                }
                declared
                    .values
                    .insert(p.name.clone(), Value::from_bits(p.ty, bits));
            }
            for p in &objects.params {
                let preset = presets
                    .get(&p.name)
                    .and_then(|t| Value::parse(p.ty, t, &p.name).ok())
                    .map(Value::to_bits);
                if let Some(bits) = preset {
                    // SAFETY: the module's param variable (checked in `hal_param_new`).
                    unsafe { write_c(p.addr, p.ty, bits) };
                }
                // SAFETY: as above.
                let bits = unsafe { read_c(p.addr, p.ty) };
                if let HalSide::Building(b) = target.hal_side() {
                    let _ = b.set_init(&p.name, bits);
                }
                declared
                    .values
                    .insert(p.name.clone(), Value::from_bits(p.ty, bits));
            }
            drop(objects);
            if let HalSide::Live(hal) = target.hal_side() {
                for p in lock(&c.objects).params.iter() {
                    // SAFETY: as above.
                    let bits = unsafe { read_c(p.addr, p.ty) };
                    if let Ok((cell, _)) = hal.param_cell(&p.name) {
                        cell.store_bits(p.ty, bits);
                    }
                }
                c.bind(hal);
            }
        }

        if keep {
            // The reservation becomes the kept module's (its drop frees the file).
            std::mem::forget(reserved);
            target.keep_module(KeptModule {
                serial,
                name,
                path: canonical,
                handle: handle as usize,
                exit,
                _strings: strings,
                components: names.clone(),
            });
        } else {
            // A dry run: the module's rtapi_app_exit runs at once; it stays open (modules loaded after it
            // in the same dry run may need its symbols) until a real load, or a new dry run of it, closes
            // it so that the next load starts from fresh statics.
            exit_module(name, exit, &comps);
            lock(&self.probes).push(Probe {
                path: canonical,
                handle: handle as usize,
                _strings: strings,
            });
        }
        Ok(names)
    }
}

/// A module file reserved in the [`Registry`] by a real load under way: freed if the load fails.
struct Reservation(Option<PathBuf>);

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            lock(&REGISTRY).kept.retain(|k| *k != p);
        }
    }
}

/// A module a dry run loaded: its `rtapi_app_exit` ran, the handle is still open.
pub(super) struct Probe {
    path: PathBuf,
    handle: usize,
    _strings: Vec<CString>,
}

/// Closes the dry-run modules from position `i` on, last first (a module is closed before the ones
/// whose symbols it uses), and warns if one stays mapped (its statics would carry over).
impl ModuleLoader {
    pub(super) fn close_probes_from(&self, i: usize) {
        let gone: Vec<Probe> = {
            let mut p = lock(&self.probes);
            let n = p.len();
            p.drain(i.min(n)..).collect()
        };
        for p in gone.into_iter().rev() {
            // SAFETY: a handle from `load`'s dlopen, closed once; its functions were never called (a dry
            // run makes no closures) and its rtapi_app_exit ran.
            unsafe { libc::dlclose(p.handle as *mut c_void) };
            if let Ok(c) = CString::new(p.path.as_os_str().as_encoded_bytes()) {
                // SAFETY: a NUL-terminated path; RTLD_NOLOAD only looks the library up.
                let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
                if !h.is_null() {
                    log::warn!(
                        "LinuxCNC module {} stays mapped after its dry run; its next load starts \
                     from the statics the dry run left",
                        p.path.display()
                    );
                    // SAFETY: the reference the NOLOAD lookup just took.
                    unsafe { libc::dlclose(h) };
                }
            }
        }
    }
}

pub(super) fn exit_module(
    name: &'static str,
    exit: Option<unsafe extern "C" fn()>,
    comps: &[Arc<Comp>],
) {
    if let Some(exit) = exit {
        let previous = CURRENT.with(|c| c.replace(name));
        // SAFETY: the module's exit hook, called once, after its functions stopped being called.
        unsafe { exit() };
        CURRENT.with(|c| c.set(previous));
    }
    for c in comps {
        c.exited.store(true, Ordering::Relaxed);
    }
}

/// `unloadrt` in running instance `running`: the modules that made any of `components` (whose
/// functions have left their threads) get `rtapi_app_exit` and are closed.
pub fn unloaded(running: &crate::runtime::Runtime<crate::runtime::Running>, components: &[String]) {
    running.release_residents(&|r| {
        r.downcast_ref::<KeptModule>()
            .is_some_and(|m| m.made_any(components))
    });
}

/// A module's arguments as `name=value` pairs: `count=`/`names=` first (they are the module's own),
/// then the line's.
pub(super) fn arg_pairs(instances: &Instances, args: &LoadArgs) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    match instances {
        Instances::Count(0) => {}
        Instances::Count(n) => pairs.push(("count".into(), n.to_string())),
        Instances::Names(names) => pairs.push(("names".into(), names.join(","))),
    }
    pairs.extend(args.args.iter().map(|(k, v)| (k.clone(), v.clone())));
    pairs
}
