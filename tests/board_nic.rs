//! `rtapi detect --board ADDR` and `rtapi tune --board ADDR`: the NIC to a Mesa Ethernet card.
//!
//! - On a fixture sysroot (a NIC `eth1` with an `igb` driver, two MSI-X IRQs, coalescing, EEE): the
//!   files come from the tree, the ethtool readings from the tree's recorded `ethtool/eth1.json`
//!   (the seam: [`rtapi::detect::ethtool::for_root`] reads a recording for any root but `/`).
//! - On a real veth in network namespaces of the test's own (`common::netns`): the real ioctl, in
//!   the host namespace (`ip netns exec NS rtapi …`), read before and after tune + revert by the test
//!   itself on a thread that entered the namespace. Only `--only nic` runs there: nothing
//!   machine-wide is tuned, and the revert file lives in a temporary directory.
//! - Refusals: an address through a gateway, an address with no route, a bad address.

mod common;

use common::{is_root, netns};
use rtapi::detect::ethtool::{Coalesce, Eee, Ethtool, EthtoolError, LiveEthtool};
use std::os::unix::fs::symlink;
use std::path::Path;

use common::{rtapi_command as rtapi, run};

/// A `/proc/net/route` line as the kernel prints it (addresses in host byte order, hex).
fn route_line(iface: &str, dest: [u8; 4], gw: [u8; 4], flags: &str, mask: [u8; 4]) -> String {
    let hex = |a: [u8; 4]| format!("{:08X}", u32::from_ne_bytes(a));
    format!(
        "{iface}\t{}\t{}\t{flags}\t0\t0\t0\t{}\t0\t0\t0\n",
        hex(dest),
        hex(gw),
        hex(mask)
    )
}

const RECORDED: &str = r#"{
  "driver": "igb",
  "coalesce": {"Ok": {"rx_usecs": 3, "rx_frames": 0, "tx_usecs": 3, "adaptive_rx": 1}},
  "eee": {"Ok": {"supported": 40, "advertised": 40, "lp_advertised": 40, "eee_active": 1, "eee_enabled": 1, "tx_lpi_enabled": 1, "tx_lpi_timer": 17}},
  "refuse": ["adaptive-rx"]
}"#;

/// A machine with two CPUs (RT CPU 1), the card's NIC `eth1` on 192.0.2.0/24 (igb, 100 Mb/s full
/// duplex, IRQ 45 on CPU 1 and IRQ 46 on CPU 0, rx-usecs 3, adaptive-rx on — which its driver refuses
/// to change — and EEE on), and eth0 with the default route via 192.168.0.1.
fn fixture() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let f = |rel: &str, text: &str| {
        let p = t.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, format!("{text}\n")).unwrap();
    };
    f("sys/devices/system/cpu/online", "0-1");
    f("sys/devices/system/cpu/isolated", "");
    f("proc/sys/kernel/timer_migration", "1");
    let mut route = String::from(
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n",
    );
    route += &route_line("eth0", [0; 4], [192, 168, 0, 1], "0003", [0; 4]);
    route += &route_line("eth0", [192, 168, 0, 0], [0; 4], "0001", [255, 255, 255, 0]);
    route += &route_line("eth1", [192, 0, 2, 0], [0; 4], "0001", [255, 255, 255, 0]);
    f("proc/net/route", &route);
    f(
        "proc/interrupts",
        "           CPU0       CPU1\n 44:  10  0  PCI-MSIX-0000:03:00.0  0-edge  eth1\n 45:  0  5120  PCI-MSIX-0000:03:00.0  1-edge  eth1-TxRx-0\n 46:  4800  0  PCI-MSIX-0000:03:00.0  2-edge  eth1-TxRx-1\n 50:  7  0  IO-APIC  9-fasteoi  eth10-rx\n",
    );
    for (irq, aff) in [("44", "0"), ("45", "1"), ("46", "0"), ("50", "0-1")] {
        f(&format!("proc/irq/{irq}/smp_affinity_list"), aff);
    }
    f("sys/class/net/eth1/speed", "100");
    f("sys/class/net/eth1/duplex", "full");
    for irq in ["44", "45", "46"] {
        f(&format!("sys/class/net/eth1/device/msi_irqs/{irq}"), "msix");
    }
    std::fs::create_dir_all(t.path().join("sys/bus/pci/drivers/igb")).unwrap();
    symlink(
        t.path().join("sys/bus/pci/drivers/igb"),
        t.path().join("sys/class/net/eth1/device/driver"),
    )
    .unwrap();
    f("ethtool/eth1.json", RECORDED);
    t
}

fn snapshot(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    fn walk(dir: &Path, out: &mut Vec<(std::path::PathBuf, Vec<u8>)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_symlink() {
                out.push((p.clone(), Vec::new()));
            } else if p.is_dir() {
                walk(&p, out);
            } else {
                out.push((p.clone(), std::fs::read(&p).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, &mut out);
    out.sort();
    out
}

#[test]
fn detect_board_on_a_fixture_reports_the_nic_and_what_to_fix() {
    let t = fixture();
    let root = t.path().to_str().unwrap();
    let (code, out, err) = run(&mut rtapi(&[
        "detect",
        "--sysroot",
        root,
        "--board",
        "192.0.2.10",
    ]));
    assert_eq!(code, 0, "{err}");
    let section = out
        .split("\nBoard NIC (to 192.0.2.10)\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no Board NIC section:\n{out}"));
    let section = section.split("\nFlavor:").next().unwrap();
    for want in [
        "interface      eth1 (route 192.0.2.0/24, directly connected)",
        "driver         igb",
        "link           100 Mb/s full duplex",
        "rx-usecs 3 rx-frames 0",
        "adaptive-rx on",
        "EEE            enabled, active",
        "45    eth1-TxRx-0          CPU 1  (RT CPU)",
        "46    eth1-TxRx-1          CPU 0\n",
        "44    eth1                 CPU 0\n",
    ] {
        assert!(section.contains(want), "missing {want:?} in:\n{section}");
    }
    // eth10-rx is not eth1's.
    assert!(!section.contains("eth10"), "{section}");
    assert!(
        out.contains("eth1 rx-usecs 3 (coalescing): replies wait up to 3 µs more")
            && out.contains("`rtapi tune --board 192.0.2.10` sets it to 0"),
        "{out}"
    );
    assert!(
        out.contains("IRQ 45 (eth1-TxRx-0) of eth1 may run on CPU 1, the RT CPU"),
        "{out}"
    );

    let (code, json, err) = run(&mut rtapi(&[
        "detect",
        "--json",
        "--sysroot",
        root,
        "--board",
        "192.0.2.10",
    ]));
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let nic = &v["board_nic"];
    assert_eq!(nic["interface"], "eth1");
    assert_eq!(nic["driver"], "igb");
    assert_eq!(nic["virtual"], serde_json::Value::Null);
    assert_eq!(nic["speed_mbps"], 100);
    assert_eq!(nic["coalescing"]["rx_usecs"], 3);
    assert_eq!(nic["coalescing"]["adaptive_rx"], 1);
    assert_eq!(nic["eee"]["eee_enabled"], 1);
    assert_eq!(nic["route"]["gateway"], serde_json::Value::Null);
    let irqs: Vec<(u64, bool)> = nic["irqs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["irq"].as_u64().unwrap(),
                i["on_rt_cpu"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(irqs, vec![(44, false), (45, true), (46, false)]);
    let mut ids: Vec<&str> = v["advice"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["id"].as_str().filter(|i| i.starts_with("board-nic")))
        .collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        [
            "board-nic-coalescing",
            "board-nic-coalescing",
            "board-nic-eee",
            "board-nic-irq-on-rt-cpu"
        ]
    );

    // Without --board, detect is as it was: no board section, no key.
    let (_, plain, _) = run(&mut rtapi(&["detect", "--json", "--sysroot", root]));
    let v: serde_json::Value = serde_json::from_str(&plain).unwrap();
    assert!(v.get("board_nic").is_none(), "{plain}");
}

#[test]
fn tune_dry_run_board_on_a_fixture_plans_the_nic_and_writes_nothing() {
    let t = fixture();
    let root = t.path().to_str().unwrap();
    let before = snapshot(t.path());
    let (code, out, err) = run(&mut rtapi(&[
        "tune",
        "--dry-run",
        "--sysroot",
        root,
        "--board",
        "192.0.2.10",
        "--only",
        "nic",
    ]));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("# the NIC to the card at 192.0.2.10: eth1 (--only nic"),
        "{out}"
    );
    assert!(
        out.contains("echo 0 > /proc/irq/45/smp_affinity_list")
            && out.contains("IRQ 45 eth1-TxRx-0: the NIC to the card, off the RT CPUs"),
        "{out}"
    );
    assert!(
        !out.contains("/proc/irq/46/") && !out.contains("/proc/irq/50/"),
        "{out}"
    );
    assert!(
        out.contains("ethtool -C eth1 rx-usecs 0 adaptive-rx off  # was rx-usecs 3 adaptive-rx on"),
        "{out}"
    );
    assert!(
        out.contains("ethtool --set-eee eth1 eee off  # was eee on (active)"),
        "{out}"
    );
    assert!(
        !out.contains("timer_migration"),
        "--only nic planned machine-wide settings:\n{out}"
    );
    // Without --only the machine-wide plan is there too, and the NIC's part with it.
    let (code, all, err) = run(&mut rtapi(&[
        "tune",
        "--dry-run",
        "--sysroot",
        root,
        "--board",
        "192.0.2.10",
    ]));
    assert_eq!(code, 0, "{err}");
    assert!(all.contains("sysctl -w kernel.timer_migration=0"), "{all}");
    assert!(
        all.contains("ethtool -C eth1 rx-usecs 0 adaptive-rx off"),
        "{all}"
    );
    assert!(
        all.contains("IRQ 45 eth1-TxRx-0: the NIC to the card"),
        "{all}"
    );
    assert_eq!(snapshot(t.path()), before, "a dry run wrote something");
}

fn recorded(t: &Path) -> (Coalesce, Eee) {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(t.join("ethtool/eth1.json")).unwrap())
            .unwrap();
    (
        serde_json::from_value(v["coalesce"]["Ok"].clone()).unwrap(),
        serde_json::from_value(v["eee"]["Ok"].clone()).unwrap(),
    )
}

#[test]
fn tune_board_on_a_fixture_sets_what_the_driver_takes_reports_the_rest_and_reverts() {
    if !is_root() {
        return skip!(Ci, "rtapi tune (not --dry-run) refuses without root");
    }
    let t = fixture();
    let root = t.path().to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let rf = dir.path().join("revert.json");
    let rf = rf.to_str().unwrap();
    let (c0, e0) = recorded(t.path());
    let (code, out, err) = run(&mut rtapi(&[
        "tune",
        "--sysroot",
        root,
        "--board",
        "192.0.2.10",
        "--only",
        "nic",
        "--revert-file",
        rf,
    ]));
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("set /proc/irq/45/smp_affinity_list 1 -> 0"),
        "{out}"
    );
    assert!(
        out.contains("set eth1 coalescing rx-usecs 3 -> rx-usecs 0"),
        "{out}"
    );
    assert!(
        out.contains("not changed: eth1 adaptive-rx: the driver refuses to change it (EINVAL"),
        "{out}"
    );
    assert!(out.contains("set eth1 eee on -> off"), "{out}");
    let (c1, e1) = recorded(t.path());
    assert_eq!((c1.rx_usecs, c1.adaptive_rx, c1.tx_usecs), (0, 1, 3));
    assert_eq!((e1.eee_enabled, e1.eee_active), (0, 1));
    assert_eq!(
        std::fs::read_to_string(t.path().join("proc/irq/45/smp_affinity_list")).unwrap(),
        "0\n"
    );
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(rf).unwrap()).unwrap();
    assert_eq!(record["nic"].as_array().map(Vec::len), Some(2), "{record}");
    assert_eq!(record["nic"][0]["before"]["rx_usecs"], 3);

    // From another network namespace the NIC settings are not put back (its interfaces are not
    // there): said, and kept in the revert file; the files are restored.
    if netns::missing().is_none() {
        let other = netns::NetNs::new("nicrv").unwrap_or_else(|e| panic!("test network: {e}"));
        let (code, out, err) = run(other.command(env!("CARGO_BIN_EXE_rtapi")).args([
            "tune",
            "--revert",
            "--revert-file",
            rf,
        ]));
        assert_eq!(code, 1, "{out}{err}");
        assert!(
            out.contains("tune changed it in network namespace net:["),
            "{out}"
        );
        assert_eq!(
            recorded(t.path()).1.eee_enabled,
            0,
            "reverted from elsewhere"
        );
        let left: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(rf).unwrap()).unwrap();
        assert_eq!(left["nic"].as_array().map(Vec::len), Some(2), "{left}");
    }
    let (code, out, err) = run(&mut rtapi(&["tune", "--revert", "--revert-file", rf]));
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("restored eth1 eee off -> on"), "{out}");
    assert!(
        out.contains("restored eth1 coalescing rx-usecs 0 -> rx-usecs 3"),
        "{out}"
    );
    assert_eq!(
        recorded(t.path()),
        (c0, e0),
        "revert did not restore the NIC"
    );
    assert_eq!(
        std::fs::read_to_string(t.path().join("proc/irq/45/smp_affinity_list")).unwrap(),
        "1\n"
    );
    assert!(!Path::new(rf).exists());
}

#[test]
fn addresses_behind_a_gateway_with_no_route_or_malformed_are_refused_on_a_fixture() {
    let t = fixture();
    let root = t.path().to_str().unwrap();
    for cmd in [&["detect"][..], &["tune", "--dry-run"][..]] {
        let mut a = cmd.to_vec();
        a.extend(["--sysroot", root, "--board", "8.8.8.8"]);
        let (code, out, err) = run(&mut rtapi(&a));
        assert_eq!(code, 2, "{a:?}: {out}{err}");
        assert!(
            err.contains("8.8.8.8 is reached through the gateway 192.168.0.1 on eth0")
                && err.contains("must be on a directly connected network"),
            "{a:?}: {err}"
        );
        let mut a = cmd.to_vec();
        a.extend(["--sysroot", root, "--board", "10.10.10"]);
        let (code, _, err) = run(&mut rtapi(&a));
        assert_eq!(code, 2, "{a:?}");
        assert!(err.contains("not an IPv4 address"), "{err}");
    }
    // Without the default route nothing leads to 8.8.8.8.
    let route = std::fs::read_to_string(t.path().join("proc/net/route")).unwrap();
    let no_default: String = route
        .lines()
        .filter(|l| !l.starts_with("eth0\t00000000"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(t.path().join("proc/net/route"), no_default).unwrap();
    let (code, _, err) = run(&mut rtapi(&[
        "detect",
        "--sysroot",
        root,
        "--board",
        "8.8.8.8",
    ]));
    assert_eq!(code, 2);
    assert!(
        err.contains("no route to 8.8.8.8 in this network namespace"),
        "{err}"
    );
}

/// Runs `f` on a thread that entered network namespace `ns` (only that thread moves).
fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET)
            .unwrap_or_else(|e| panic!("setns {path}: {e}"));
        f()
    })
    .join()
    .unwrap()
}

type Reading = (
    Result<String, EthtoolError>,
    Result<Coalesce, EthtoolError>,
    Result<Eee, EthtoolError>,
);

fn read_live(ns: &str, ifc: &'static str) -> Reading {
    in_netns(ns, move || {
        (
            LiveEthtool.driver(ifc),
            LiveEthtool.coalesce(ifc),
            LiveEthtool.eee(ifc),
        )
    })
}

#[test]
fn a_real_veth_is_found_reported_virtual_and_left_as_it_was_by_tune_and_revert() {
    if let Some(why) = netns::missing() {
        return skip!(Ci, "{why}");
    }
    let link = netns::Link::new("nic").unwrap_or_else(|e| panic!("test network: {e}"));
    let ns = link.host.name.clone();
    let board = link.board_ip.to_string();

    // The real ioctl, from inside the namespace: veth's driver by name; what it reports.
    let before = read_live(&ns, link.host_if);
    assert_eq!(before.0.as_deref(), Ok("veth"));
    let missing = in_netns(&ns, || LiveEthtool.coalesce("rtapinosuch0"));
    assert_eq!(missing, Err(EthtoolError::NoDevice));
    // Setting what the driver does not report is refused by the kernel, not failed by us: the real
    // SCOALESCE/SEEE on the veth (the test's own) with the values read (or zeros when none).
    let (c, e) = (
        before.1.clone().unwrap_or_default(),
        before.2.clone().unwrap_or_default(),
    );
    let ifc = link.host_if;
    let set = in_netns(&ns, move || {
        (
            LiveEthtool.set_coalesce(ifc, &c),
            LiveEthtool.set_eee(ifc, &e),
        )
    });
    if before.1.is_err() {
        assert_eq!(set.0, Err(EthtoolError::NotSupported));
    }
    if before.2.is_err() {
        assert_eq!(set.1, Err(EthtoolError::NotSupported));
    }
    eprintln!(
        "veth {}: coalescing {:?}, EEE {:?}",
        link.host_if, before.1, before.2
    );

    let (code, out, err) = run(link
        .host
        .command(env!("CARGO_BIN_EXE_rtapi"))
        .args(["detect", "--board", &board]));
    assert_eq!(code, 0, "{err}");
    let section = out
        .split("\nBoard NIC")
        .nth(1)
        .unwrap_or_else(|| panic!("{out}"));
    eprintln!("Board NIC{}", section.split("\nFlavor:").next().unwrap());
    assert!(
        section.contains(&format!(
            "interface      {} (route 192.0.2.0/24, directly connected)",
            link.host_if
        )),
        "{section}"
    );
    assert!(
        section.contains("driver         virtual (veth)"),
        "{section}"
    );
    match &before.1 {
        Err(EthtoolError::NotSupported) => assert!(
            section.contains("coalescing     the driver does not report coalescing (EOPNOTSUPP"),
            "{section}"
        ),
        Ok(c) => assert!(
            section.contains(&format!("coalescing     rx-usecs {} ", c.rx_usecs)),
            "{section}"
        ),
        Err(e) => panic!("veth coalescing: {e}"),
    }
    match &before.2 {
        Err(EthtoolError::NotSupported) => {
            assert!(
                section.contains("EEE            unsupported (EOPNOTSUPP"),
                "{section}"
            )
        }
        Ok(_) => assert!(section.contains("EEE            "), "{section}"),
        Err(e) => panic!("veth EEE: {e}"),
    }
    assert!(section.contains("IRQs           none"), "{section}");
    assert!(
        out.contains(&format!(
            "{}, the interface to {board}, is virtual (veth)",
            link.host_if
        )),
        "{out}"
    );
    let (code, json, err) = run(link
        .host
        .command(env!("CARGO_BIN_EXE_rtapi"))
        .args(["detect", "--json", "--board", &board]));
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["board_nic"]["virtual"], "veth");
    assert_eq!(v["board_nic"]["interface"], link.host_if);

    // Tune only the NIC, with the revert file in a directory of the test's own; then revert.
    let dir = tempfile::tempdir().unwrap();
    let rf = dir.path().join("revert.json");
    let rf_text = rf.to_str().unwrap().to_string();
    assert!(rf.starts_with(std::env::temp_dir()) || rf.starts_with(dir.path()));
    let default_existed = Path::new(rtapi::tune::DEFAULT_REVERT_FILE).exists();
    let (code, out, err) = run(link.host.command(env!("CARGO_BIN_EXE_rtapi")).args([
        "tune",
        "--board",
        &board,
        "--only",
        "nic",
        "--revert-file",
        &rf_text,
    ]));
    eprintln!("rtapi tune --board {board} --only nic:\n{out}{err}");
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("(--only nic)"), "{out}");
    if before.1 == Err(EthtoolError::NotSupported) {
        assert!(
            out.contains("the driver does not report coalescing (EOPNOTSUPP")
                && out.contains("nothing to set"),
            "{out}"
        );
    }
    assert_eq!(
        Path::new(rtapi::tune::DEFAULT_REVERT_FILE).exists(),
        default_existed,
        "tune touched the default revert file"
    );
    let (code, out, err) = run(link.host.command(env!("CARGO_BIN_EXE_rtapi")).args([
        "tune",
        "--revert",
        "--revert-file",
        &rf_text,
    ]));
    eprintln!("rtapi tune --revert:\n{out}{err}");
    if rf.exists() || code == 0 {
        assert_eq!(code, 0, "{out}{err}");
    } else {
        // Nothing was changeable, so nothing was recorded.
        assert!(err.contains("nothing to revert"), "{err}");
    }
    assert!(!rf.exists());
    assert_eq!(
        read_live(&ns, link.host_if),
        before,
        "the veth is not as it was"
    );
}

#[test]
fn a_gateway_route_and_no_route_are_refused_in_a_namespace() {
    if let Some(why) = netns::missing() {
        return skip!(Ci, "{why}");
    }
    let link = netns::Link::new("nicgw").unwrap_or_else(|e| panic!("test network: {e}"));
    let board = link.board_ip.to_string();
    link.host
        .ip(&["route", "add", "198.51.100.0/24", "via", &board])
        .unwrap();
    let rtapi_in = |args: &[&str]| run(link.host.command(env!("CARGO_BIN_EXE_rtapi")).args(args));
    let via_gateway = format!(
        "198.51.100.7 is reached through the gateway {board} on {}",
        link.host_if
    );
    for (addr, says) in [
        ("198.51.100.7", via_gateway.as_str()),
        (
            "203.0.113.5",
            "no route to 203.0.113.5 in this network namespace",
        ),
    ] {
        for args in [
            &["detect", "--board", addr][..],
            &["tune", "--dry-run", "--board", addr, "--only", "nic"][..],
        ] {
            let (code, out, err) = rtapi_in(args);
            assert_eq!(code, 2, "{args:?}: {out}{err}");
            assert!(err.contains(says), "{args:?}: {err}");
        }
    }
}
