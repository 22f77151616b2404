//! LinuxCNC 2.9's `hm2_pci` on rtapi's master (`src/master/pci.rs`: the `rtapi_pci_*` calls as 2.9's
//! uspace makes them) against a fake PCI card: a 5I25.
//!
//! **The fixture.** A directory shaped like one sysfs PCI device, `0000:01:00.0` — `vendor` 0x2718,
//! `device` 0x5125, `subsystem_vendor` 0x2718, `subsystem_device` 0x5125 (hm2_pci's 5I25 entry),
//! `class`, `uevent`, a `subsystem` link, a writable `enable`, a `resource` whose BAR 0 is 64 KiB of
//! memory, and `resource0`: a 64 KiB file holding the register image of rtapi's simulated 5I25
//! (`rtapi::mesa::Board`, `BoardKind::I25`: cookie, `HOSTMOT2`, IDROM, a watchdog, 2 IOPorts of 17
//! pins, 5 step generators, 1 encoder). It is bind-mounted over `/sys/bus/pci/devices` in a mount
//! namespace of the test's own (`common::master_ns::Ipc`, propagation private), so the master finds
//! it where it finds real cards — no path in rtapi is configurable for it — and nothing outside the
//! namespace sees it; the mount ends with the namespace.
//!
//! **What it cannot show.** The BAR is a file: `mmap(MAP_SHARED)` of it reads the IDROM and keeps the
//! host's writes, but nothing behind it acts — no watchdog counts down, no step generator advances,
//! no input changes. So this proves that hm2_pci finds the card, maps its BAR and that hostmot2 reads
//! its IDROM through the mapping and makes its pins; not a running machine on a live FPGA.
//!
//! **Stock.** The same fixture under LinuxCNC's own `rtapi_app` (`stock_rtapi_app_with_the_fake_5i25`):
//! its PCI layer enumerates through libudev; what it does with the fake device is asserted and
//! printed there (README's PCI section says the result).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::eventually::{until_true, GENEROUS};
use common::master_ns::*;
use rtapi::mesa::{Board, BoardKind};

const SLOT: &str = "0000:01:00.0";
const BAR0: u64 = 0xfe00_0000;
const BAR_LEN: u64 = 0x1_0000;
/// A file only the fake device has.
const MARK: &str = "rtapi-test-fake-device";
/// `IORESOURCE_MEM | IORESOURCE_SIZEALIGN`, as a real 5I25's BAR 0 shows it.
const MEM_FLAGS: u64 = 0x40200;

/// A `resource` file: six BAR lines and the seven more the kernel writes (ROM, bridge windows).
fn resource_text(bar0: (u64, u64, u64)) -> String {
    let line = |(s, e, f): (u64, u64, u64)| format!("0x{s:016x} 0x{e:016x} 0x{f:016x}\n");
    let mut t = line(bar0);
    for _ in 1..13 {
        t += &line((0, 0, 0));
    }
    t
}

/// The simulated 5I25's register file, as its BAR 0 holds it (little-endian words).
fn image() -> Vec<u8> {
    let b = Board::new(BoardKind::I25, 0);
    b.registers()
        .words()
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect()
}

/// The fake device's tree (`devices/0000:01:00.0/…`) in a directory of the test's.
struct FakePci {
    dir: tempfile::TempDir,
}

impl FakePci {
    fn new() -> FakePci {
        let dir = tempfile::Builder::new()
            .prefix("fake-pci-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let f = FakePci { dir };
        std::fs::create_dir_all(f.dev()).unwrap();
        for (name, text) in [
            ("vendor", "0x2718\n"),
            ("device", "0x5125\n"),
            ("subsystem_vendor", "0x2718\n"),
            ("subsystem_device", "0x5125\n"),
            ("class", "0x118000\n"),
            ("enable", "0"),
            (MARK, ""),
            (
                "uevent",
                "PCI_CLASS=118000\nPCI_ID=2718:5125\nPCI_SUBSYS_ID=2718:5125\n\
                 PCI_SLOT_NAME=0000:01:00.0\nMODALIAS=pci:v00002718d00005125sv00002718sd00005125bc11sc80i00\n",
            ),
        ] {
            f.set(name, text.as_bytes());
        }
        f.set(
            "resource",
            resource_text((BAR0, BAR0 + BAR_LEN - 1, MEM_FLAGS)).as_bytes(),
        );
        f.set("resource0", &image());
        // What libudev reads a device's subsystem from (rtapi's master does not look at it).
        std::os::unix::fs::symlink("../../../bus/pci", f.dev().join("subsystem")).unwrap();
        f
    }

    fn devices(&self) -> PathBuf {
        self.dir.path().join("devices")
    }

    fn dev(&self) -> PathBuf {
        self.devices().join(SLOT)
    }

    fn set(&self, name: &str, bytes: &[u8]) {
        std::fs::write(self.dev().join(name), bytes).unwrap();
    }

    fn get(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.dev().join(name)).unwrap()
    }

    /// Bind-mounts the tree over `/sys/bus/pci/devices` in `ns`'s mount namespace.
    fn mount_in(&self, ns: &Ipc) {
        let o = ns
            .enter()
            .args(["mount", "--bind"])
            .arg(self.devices())
            .arg("/sys/bus/pci/devices")
            .output()
            .unwrap();
        let (out, err) = common::text(&o);
        assert!(o.status.success(), "mount --bind: {out}{err}");
        // The namespace sees the fake card; this process (the machine's namespace) does not.
        let o = ns
            .enter()
            .args(["cat", &format!("/sys/bus/pci/devices/{SLOT}/{MARK}")])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "the fake device is not seen in the namespace"
        );
        assert!(
            !Path::new(&format!("/sys/bus/pci/devices/{SLOT}/{MARK}")).exists(),
            "the mount leaked into the machine's namespace"
        );
    }
}

/// The pins of `hm2_5i25.0` halcmd shows, by name.
fn pins(ns: &Ipc) -> Vec<String> {
    ns.ok(&["show", "pin", "hm2_5i25.0."])
        .lines()
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with("hm2_5i25.0.")))
        .map(str::to_string)
        .collect()
}

/// Why the PCI tests cannot run here: the master tests' prerequisites, or LinuxCNC's hm2_pci.
fn not_ready() -> Option<String> {
    missing().or_else(|| {
        (!Path::new("/usr/lib/linuxcnc/modules/hm2_pci.so").exists())
            .then(|| "LinuxCNC's hm2_pci.so is missing (linuxcnc-uspace)".to_string())
    })
}

/// The little-endian word at byte `addr` of a register image.
fn word(img: &[u8], addr: usize) -> u32 {
    u32::from_le_bytes(img[addr..addr + 4].try_into().unwrap())
}

#[test]
fn hm2_pci_finds_the_fake_5i25_on_rtapis_master_and_makes_its_pins() {
    if let Some(why) = not_ready() {
        return skip!(Ci, "{why}");
    }
    let fake = FakePci::new();
    let ns = Ipc::new();
    fake.mount_in(&ns);
    let before = fake.get("resource0");
    let mut m = Master(ns.master(1, &[]));
    ns.ok(&["loadrt", "hostmot2"]);
    ns.ok(&["loadrt", "hm2_pci"]);
    // hm2_pci's probe got our device, enabled it, mapped BAR 0; hostmot2 read the IDROM through
    // the mapping and registered the board (its "discovered 5i25" is an INFO message, not shown at
    // the master's message level).
    assert_eq!(fake.get("enable"), b"1", "rtapi_pci_enable_device wrote 1");
    let p = pins(&ns);
    let has = |n: &str| p.iter().any(|x| x == n);
    assert!(has("hm2_5i25.0.watchdog.has_bit"), "{p:?}");
    // The IDROM's counts, as hostmot2 made them: 2 ports × 17 GPIO pins, 5 step generators, 1 encoder.
    let gpio: Vec<_> = p
        .iter()
        .filter(|x| x.starts_with("hm2_5i25.0.gpio.") && x.ends_with(".in"))
        .collect();
    assert_eq!(gpio.len(), 34, "{gpio:?}");
    assert!(has("hm2_5i25.0.gpio.033.in") && !has("hm2_5i25.0.gpio.034.in"));
    for s in 0..5 {
        assert!(
            has(&format!("hm2_5i25.0.stepgen.{s:02}.position-cmd")),
            "{p:?}"
        );
    }
    assert!(!has("hm2_5i25.0.stepgen.05.position-cmd"), "{p:?}");
    assert!(has("hm2_5i25.0.encoder.00.count"), "{p:?}");
    assert!(!has("hm2_5i25.0.encoder.01.count"), "{p:?}");
    assert!(has("hm2_5i25.0.read-request") || has("hm2_5i25.0.watchdog.has_bit"));
    // The mapping is shared: what hostmot2 wrote at load (its registers' initial values) is in the
    // file, the read-only area (cookie, IDROM) untouched.
    let after = fake.get("resource0");
    assert_eq!(after.len(), before.len());
    assert_eq!(word(&after, 0x100), 0x55AA_CAFE);
    assert_eq!(
        after[..0x800],
        before[..0x800],
        "the ROM area is as written"
    );
    let changed = (0x800..after.len())
        .step_by(4)
        .filter(|&a| word(&after, a) != word(&before, a))
        .count();
    assert!(
        changed > 0,
        "hostmot2's writes reached the file through MAP_SHARED"
    );
    eprintln!("{changed} register words written by hostmot2 at load reached resource0");
    // Unload: hm2_pci's remove (through rtapi_pci_unregister_driver) disables the device; the master
    // ends with its last module.
    ns.ok(&["unload", "all"]);
    assert!(wait_exit(&mut m).success(), "{}", ns.master_log(1));
    assert_eq!(fake.get("enable"), b"0", "rtapi_pci_disable_device wrote 0");
}

/// Loads hm2_pci into a running master expecting it to fail; the master's new log lines.
fn load_fails(ns: &Ipc, seen: &mut usize) -> String {
    let o = ns.halcmd(&["loadrt", "hm2_pci"]);
    let (out, err) = common::text(&o);
    assert!(!o.status.success(), "hm2_pci loaded: {out}{err}");
    let log = ns.master_log(1);
    let new = log[*seen..].to_string();
    *seen = log.len();
    new
}

#[test]
fn a_corrupt_or_foreign_device_is_refused_with_a_clear_message() {
    if let Some(why) = not_ready() {
        return skip!(Ci, "{why}");
    }
    let fake = FakePci::new();
    let ns = Ipc::new();
    fake.mount_in(&ns);
    let mut m = Master(ns.master(1, &["--stay"]));
    ns.ok(&["loadrt", "hostmot2"]);
    let mut seen = ns.master_log(1).len();

    // BAR 0 says 128 KiB, resource0 holds 64 KiB: mapping it would fault past the end — refused.
    fake.set(
        "resource",
        resource_text((BAR0, BAR0 + 2 * BAR_LEN - 1, MEM_FLAGS)).as_bytes(),
    );
    let log = load_fails(&ns, &mut seen);
    assert!(
        log.contains("is 65536 bytes but BAR 0 is 131072 bytes"),
        "{log}"
    );
    assert!(log.contains("could not map in FPGA address space"), "{log}");

    // A resource line that does not parse: refused, the file and line named.
    fake.set(
        "resource",
        resource_text((BAR0, BAR0 + BAR_LEN - 1, MEM_FLAGS))
            .replacen("0x", "zz", 1)
            .as_bytes(),
    );
    let log = load_fails(&ns, &mut seen);
    assert!(log.contains("resource\" line 1 does not parse"), "{log}");

    // An I/O-port BAR (a PLX-bridged card's): not probed, since this master grants no port I/O.
    let mut plx = resource_text((BAR0, BAR0 + BAR_LEN - 1, MEM_FLAGS));
    plx = plx.replacen(
        "0x0000000000000000 0x0000000000000000 0x0000000000000000",
        "0x000000000000e000 0x000000000000e07f 0x0000000000040101",
        1,
    );
    fake.set("resource", plx.as_bytes());
    let log = load_fails(&ns, &mut seen);
    assert!(log.contains("has I/O-port BARs"), "{log}");
    assert!(log.contains("No such device"), "{log}");

    // Not hm2_pci's card (a subsystem id its table lacks): not matched, so not probed.
    fake.set(
        "resource",
        resource_text((BAR0, BAR0 + BAR_LEN - 1, MEM_FLAGS)).as_bytes(),
    );
    fake.set("subsystem_device", b"0x5126\n");
    let log = load_fails(&ns, &mut seen);
    assert!(!log.contains("RTAPI_PCI"), "{log}");
    assert!(log.contains("No such device"), "{log}");

    // A vendor id that is not an id: refused, named.
    fake.set("vendor", b"Mesa\n");
    let log = load_fails(&ns, &mut seen);
    assert!(log.contains("vendor\" does not hold a 16-bit id"), "{log}");

    // Put right again, it loads: nothing of the refusals stuck.
    fake.set("vendor", b"0x2718\n");
    fake.set("subsystem_device", b"0x5125\n");
    ns.ok(&["loadrt", "hm2_pci"]);
    assert!(pins(&ns).iter().any(|p| p == "hm2_5i25.0.watchdog.has_bit"));
    ns.ok(&["unload", "all"]);
    let o = ns.as_user("/usr/bin/rtapi_app", &["exit"]);
    assert!(o.status.success(), "{o:?}");
    assert!(wait_exit(&mut m).success(), "{}", ns.master_log(1));
}

/// Processes named `comm` in `ns`'s mount namespace (stock's `rtapi_app`, started by halcmd there).
fn in_ns(ns: &Ipc, comm: &str) -> Vec<i32> {
    let mine = std::fs::read_link(format!("/proc/{}/ns/mnt", ns.holder.id())).ok();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == comm)
                && std::fs::read_link(format!("/proc/{pid}/ns/mnt")).ok() == mine
        })
        .collect()
}

#[test]
fn stock_rtapi_app_with_the_fake_5i25() {
    if let Some(why) = not_ready() {
        return skip!(Ci, "{why}");
    }
    let fake = FakePci::new();
    let ns = Ipc::new();
    fake.mount_in(&ns);
    // halcmd (as nobody) starts stock's rtapi_app (setuid root) in the namespaces.
    struct Stop<'a>(&'a Ipc);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            for pid in in_ns(self.0, "rtapi_app") {
                // SAFETY: kill(2) of the rtapi_app this test's halcmd started in its namespace.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
    let _stop = Stop(&ns);
    let (ok, text) = stock_halcmd(&ns, 1, &["loadrt", "hostmot2"]);
    assert!(ok, "{text}");
    let (loaded, text) = stock_halcmd(&ns, 2, &["loadrt", "hm2_pci"]);
    let (_, shown) = stock_halcmd(&ns, 3, &["show", "pin", "hm2_5i25.0.watchdog"]);
    let found = shown.contains("hm2_5i25.0.watchdog.has_bit");
    // The stock master's own messages go to the first halcmd's file (it inherited its descriptors).
    let master = std::fs::read_to_string(ns.dir.path().join("stock.1.out")).unwrap_or_default();
    eprintln!(
        "stock rtapi_app + hm2_pci with the fake 5i25: {} (loadrt {})\n{text}\nmaster: {master}",
        if found { "found it" } else { "did not find it" },
        if loaded { "succeeded" } else { "failed" }
    );
    if found {
        assert!(loaded, "{text}");
        assert_eq!(fake.get("enable"), b"1");
    } else {
        // libudev did not list the fake device: hm2_pci found no card.
        assert!(!loaded, "{text}");
        assert!(
            master.contains("hm2_pci: rtapi_app_main: No such device"),
            "{master}"
        );
    }
    let (ok, text) = stock_halcmd(&ns, 4, &["unload", "all"]);
    assert!(ok, "{text}");
    until_true("stock's rtapi_app to end", GENEROUS, || {
        in_ns(&ns, "rtapi_app").is_empty()
    });
}

/// `halcmd ARGS` as nobody in `ns` with stock's `rtapi_app` as the master: its output goes to a
/// file, not a pipe (the `rtapi_app` master halcmd starts keeps halcmd's descriptors open, so a pipe
/// would never end). Success and the file's text.
fn stock_halcmd(ns: &Ipc, n: u32, args: &[&str]) -> (bool, String) {
    let path = ns.dir.path().join(format!("stock.{n}.out"));
    let out = std::fs::File::create(&path).unwrap();
    let st = ns
        .enter()
        .args(["runuser", "-u", "nobody", "--", "env"])
        .arg(format!("HOME={}", ns.dir.path().display()))
        .arg(format!("RTAPI_FIFO_PATH={}", ns.fifo().display()))
        .arg("/usr/bin/halcmd")
        .args(args)
        .current_dir(ns.dir.path())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .status()
        .unwrap();
    (
        st.success(),
        std::fs::read_to_string(&path).unwrap_or_default(),
    )
}
