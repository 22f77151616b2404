//! What LinuxCNC's modules link against, exported by rtapi's master: the modules `rtapi linuxcnc`
//! loads are loaded into `rtapi-lcnc-master` (with LinuxCNC's `hal_lib.so`), as they are into
//! `/usr/bin/rtapi_app` by LinuxCNC; every function of rtapi's C interface they may call must resolve
//! to the master. Checked with binutils' `nm -D` against the installed LinuxCNC, whichever release it
//! is: on the host, and inside each reference root (tests/linuxcnc_releases.rs).

mod common;
use common::master_ns::master_bin;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

const RTAPI_APP: &str = "/usr/bin/rtapi_app";
const MODULES: &str = "/usr/lib/linuxcnc/modules";

/// `nm -D ARGS FILE`: (type letter, name without its `@VERSION`, versioned) per symbol line.
fn nm(args: &[&str], file: &Path) -> Vec<(char, String, bool)> {
    let o = Command::new("nm")
        .arg("-D")
        .args(args)
        .arg(file)
        .output()
        .expect("nm (binutils)");
    assert!(
        o.status.success(),
        "nm -D {args:?} {}: {}",
        file.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            // "ADDR T name" (defined) or "         U name@VERSION" (undefined).
            let mut w = l.split_whitespace().rev();
            let name = w.next()?;
            let ty = w.next()?.chars().next()?;
            let (base, versioned) = match name.split_once('@') {
                Some((b, _)) => (b, true),
                None => (name, false),
            };
            Some((ty, base.to_string(), versioned))
        })
        .collect()
}

/// The functions `file` defines in its dynamic symbol table (`T`, `W`, `i`).
fn defined_functions(file: &Path) -> BTreeSet<String> {
    nm(&["--defined-only"], file)
        .into_iter()
        .filter(|(t, _, _)| matches!(t, 'T' | 'W' | 'i'))
        .map(|(_, n, _)| n)
        .collect()
}

/// Every symbol `file` defines in its dynamic symbol table.
fn defined(file: &Path) -> BTreeSet<String> {
    nm(&["--defined-only"], file)
        .into_iter()
        .map(|(_, n, _)| n)
        .collect()
}

fn is_rtapi_function(name: &str) -> bool {
    name.starts_with("rtapi_") || name == "simple_strtol"
}

fn missing() -> Option<String> {
    if !Path::new(RTAPI_APP).is_file() || !Path::new(MODULES).join("hal_lib.so").is_file() {
        return Some(format!(
            "LinuxCNC's {RTAPI_APP} or {MODULES}/hal_lib.so is missing (Debian linuxcnc-uspace)"
        ));
    }
    if Command::new("nm").arg("--version").output().is_err() {
        return Some("nm is missing (Debian binutils)".into());
    }
    None
}

/// LinuxCNC's version here, for the messages.
fn linuxcnc_version() -> String {
    Command::new("linuxcnc_var")
        .arg("LINUXCNCVERSION")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// Every `rtapi_*` function (and `simple_strtol`) that `rtapi_app` exports, the master exports; and
/// no `hal_*` symbol (`hal_lib.so`'s must be the ones modules get).
#[test]
fn every_rtapi_function_rtapi_app_exports_the_master_exports() {
    if let Some(why) = missing() {
        return skip!(Ci, "{why}");
    }
    let stock: BTreeSet<String> = defined_functions(Path::new(RTAPI_APP))
        .into_iter()
        .filter(|n| is_rtapi_function(n))
        .collect();
    let master = master_bin();
    let ours = defined(Path::new(&master));
    let lacking: Vec<&String> = stock.difference(&ours).collect();
    eprintln!(
        "LinuxCNC {}: {RTAPI_APP} exports {} rtapi_*/simple_strtol functions; {master} exports {} \
         symbols, {} of those functions; lacking: {lacking:?}",
        linuxcnc_version(),
        stock.len(),
        ours.len(),
        stock.len() - lacking.len(),
    );
    // Not an empty comparison: LinuxCNC 2.9's rtapi_app has some fifty of them.
    assert!(
        stock.len() >= 40,
        "only {} rtapi functions in {RTAPI_APP}: {stock:?}",
        stock.len()
    );
    assert!(
        lacking.is_empty(),
        "{master} does not export {} function(s) of {RTAPI_APP}: {lacking:?}",
        lacking.len()
    );
    let hal: Vec<&String> = ours.iter().filter(|n| n.starts_with("hal_")).collect();
    assert!(hal.is_empty(), "{master} exports hal_* symbols: {hal:?}");
}

/// Every symbol an installed module imports that neither `hal_lib.so` nor a versioned system library
/// (libc, libm, …) provides, and that `rtapi_app` defines, the master exports: what a module needs of
/// LinuxCNC's realtime master, ours has.
#[test]
fn every_symbol_modules_import_from_rtapi_app_the_master_exports() {
    if let Some(why) = missing() {
        return skip!(Ci, "{why}");
    }
    let mut modules: Vec<_> = std::fs::read_dir(MODULES)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "so"))
        .collect();
    modules.sort();
    let hal_lib = Path::new(MODULES).join("hal_lib.so");
    let hal = defined(&hal_lib);
    // Imports without a symbol version: not from glibc, libstdc++ or another versioned library.
    let mut imports = BTreeSet::new();
    let mut from_modules = BTreeSet::new();
    for m in &modules {
        for (t, n, versioned) in nm(&[], m) {
            match t {
                'U' | 'w' if !versioned => {
                    imports.insert(n);
                }
                'U' | 'w' => {}
                _ => {
                    from_modules.insert(n);
                }
            }
        }
    }
    let app = defined(Path::new(RTAPI_APP));
    let not_hal: BTreeSet<&String> = imports.iter().filter(|n| !hal.contains(*n)).collect();
    let from_app: BTreeSet<&String> = not_hal
        .iter()
        .copied()
        .filter(|n| app.contains(*n))
        .collect();
    let elsewhere: Vec<&&String> = not_hal
        .iter()
        .filter(|n| !app.contains(**n) && !from_modules.contains(**n))
        .collect();
    let master = master_bin();
    let ours = defined(Path::new(&master));
    let lacking: Vec<&&String> = from_app.iter().filter(|n| !ours.contains(**n)).collect();
    eprintln!(
        "LinuxCNC {}: {} modules import {} unversioned symbols; {} not from hal_lib.so, {} of them \
         defined by {RTAPI_APP}; {master} lacks {}: {lacking:?}; neither rtapi_app nor a module \
         defines {}: {elsewhere:?}",
        linuxcnc_version(),
        modules.len(),
        imports.len(),
        not_hal.len(),
        from_app.len(),
        lacking.len(),
        elsewhere.len()
    );
    assert!(
        modules.len() >= 150,
        "only {} modules in {MODULES}",
        modules.len()
    );
    assert!(
        from_app.len() >= 30 && from_app.iter().all(|n| is_rtapi_function(n)),
        "what modules import of rtapi_app: {from_app:?}"
    );
    assert!(
        lacking.is_empty(),
        "{master} does not export what LinuxCNC's modules import of {RTAPI_APP}: {lacking:?}"
    );
}
