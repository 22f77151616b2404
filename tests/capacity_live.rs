//! Room in a running instance comes back (issue 23, finding 3): user-space components joining and
//! leaving 10 000 times, and live `loadrt and2 count=256` / `unloadrt and2` far more often than the
//! four cycles that used to fill the pin table, use constant room; a declaration or a `loadrt`
//! refused for want of room changes nothing, its room included, and a smaller one succeeds right
//! after. The room is read from outside, as `rtapi show --json` and a reader report it.

mod common;
use common::halrun;

use std::time::Instant;

use common::rtapi;
use halrun::Halrun;
use rtapi::instance::control::{ControlClient, UserComponent, UserParam, UserPin};
use rtapi_hal::{Access, HalReader, ParamAccess, PinDir, TableUse, ValueType};
use serde_json::Value as Json;

const BASE: &str =
    "loadrt threads name1=servo period1=1000000\nloadrt sum2 count=40\naddf sum2.0 servo\nstart\n";

/// A reader of the instance and a control connection to its owner.
fn connect(name: &str) -> (HalReader, ControlClient) {
    let r = HalReader::open(name, Access::ReadOnly).unwrap();
    let c = ControlClient::connect(name, r.header().owner_pid).unwrap();
    (r, c)
}

/// `rtapi show --json`'s `room` object.
fn show_room(name: &str) -> Json {
    let o = rtapi(&["show", "comp", "--json", "--instance", name]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Json = serde_json::from_slice(&o.stdout).unwrap();
    v["room"].clone()
}

fn pins(r: &HalReader) -> TableUse {
    r.tables().unwrap()[1]
}

/// A user component `name` with `n` float pins (OUT and IN alternating) and two params.
fn user(name: &str, n: usize) -> UserComponent {
    UserComponent {
        name: name.into(),
        pins: (0..n)
            .map(|i| UserPin {
                name: format!("{name}.p{i}"),
                ty: ValueType::Float,
                dir: if i % 2 == 0 { PinDir::Out } else { PinDir::In },
            })
            .collect(),
        params: (0..2)
            .map(|i| UserParam {
                name: format!("{name}.k{i}"),
                ty: ValueType::U32,
                access: ParamAccess::Rw,
            })
            .collect(),
        pid: None,
    }
}

fn ok(c: &mut ControlClient, line: &str) {
    let reply = c.execute(line).unwrap();
    assert!(reply.ok, "{line}: {:?}", reply.error);
}

#[test]
fn ten_thousand_user_components_join_and_leave_in_constant_room() {
    let mut owner = Halrun::start("cap-users", BASE);
    let (r, mut c) = connect(&owner.name);
    let start = show_room(&owner.name);
    let panel = user("panel", 50);
    let mut first: Option<Vec<TableUse>> = None;
    let t0 = Instant::now();
    for cycle in 0..10_000 {
        let reply = c.user_component(&panel).unwrap();
        assert!(reply.ok, "join {cycle}: {:?}", reply.error);
        if cycle % 500 == 0 {
            let now = r.tables().unwrap();
            let first = first.get_or_insert_with(|| now.clone());
            assert_eq!(&now, first, "join {cycle}: the room in use changed");
        }
        let reply = c.user_exit("panel").unwrap();
        assert!(reply.ok, "leave {cycle}: {:?}", reply.error);
    }
    let took = t0.elapsed();
    let end = show_room(&owner.name);
    for t in ["component", "pin", "param", "signal", "function"] {
        assert_eq!(
            (&end[t]["used"], &end[t]["free"], &end[t]["capacity"]),
            (&start[t]["used"], &start[t]["free"], &start[t]["capacity"]),
            "{t}: before {} after {}",
            start[t],
            end[t]
        );
    }
    eprintln!(
        "capacity: 10 000 joins and leaves of a 50-pin user component in {took:?} ({:?} a \
         cycle); pins before {} after {}",
        took / 10_000,
        start["pin"],
        end["pin"]
    );
    owner.stop_cleanly();
}

#[test]
fn live_loadrt_and_unloadrt_of_256_instances_cycle_without_filling_the_pin_table() {
    let mut owner = Halrun::start("cap-loadrt", BASE);
    let (r, mut c) = connect(&owner.name);
    let before = pins(&r);
    let mut settled: Option<(TableUse, Vec<TableUse>)> = None;
    let t0 = Instant::now();
    const CYCLES: usize = 12;
    for cycle in 0..CYCLES {
        ok(&mut c, "loadrt and2 count=256");
        let loaded = pins(&r);
        assert_eq!(loaded.used, before.used + 256 * 4, "cycle {cycle}");
        ok(&mut c, "addf and2.255 servo");
        ok(&mut c, "net cap-sig and2.0.out and2.1.in0");
        ok(&mut c, "unloadrt and2");
        ok(&mut c, "delsig cap-sig");
        let now = r.tables().unwrap();
        match &settled {
            None => settled = Some((loaded, now)),
            Some((l, t)) => {
                assert_eq!(&loaded, l, "cycle {cycle}: loading took other room");
                assert_eq!(&now, t, "cycle {cycle}: the room after unloading changed");
            }
        }
    }
    let took = t0.elapsed();
    assert!(
        settled.as_ref().unwrap().0.high_water <= before.high_water + 256 * 4,
        "the instances' slots were reused"
    );
    // And the instance still takes components.
    ok(&mut c, "loadrt and2 count=2");
    ok(&mut c, "addf and2.1 servo");
    eprintln!(
        "capacity: {CYCLES} live loadrt/unloadrt cycles of and2 count=256 in {took:?} ({:?} a \
         cycle); pins {} of {} used at the end",
        took / CYCLES as u32,
        pins(&r).used,
        before.capacity
    );
    owner.stop_cleanly();
}

#[test]
fn a_refused_declaration_or_loadrt_changes_nothing_room_included() {
    let mut owner = Halrun::start("cap-refused", BASE);
    let (r, mut c) = connect(&owner.name);
    // Some deleted records first, so that both kinds of room count.
    ok(&mut c, "loadrt not count=8");
    ok(&mut c, "unloadrt not");
    let before = (r.tables().unwrap(), show_room(&owner.name), r.generation());
    let reply = c.user_component(&user("huge", 10_000)).unwrap();
    assert!(!reply.ok);
    let e = reply.error.unwrap();
    assert!(e.contains("no room for another pin"), "{e}");
    assert_eq!(
        (r.tables().unwrap(), show_room(&owner.name), r.generation()),
        before,
        "a refused declaration changed the instance"
    );
    let reply = c.user_component(&user("huge", 50)).unwrap();
    assert!(reply.ok, "{:?}", reply.error);
    assert_eq!(pins(&r).used, before.0[1].used + 50);
    assert!(c.user_exit("huge").unwrap().ok);

    // A loadrt that runs out of room part-way: the instances it made go again.
    for line in [
        "loadrt and2 count=256",
        "loadrt or2 count=256",
        "loadrt xor2 count=256",
    ] {
        ok(&mut c, line);
    }
    let full = (r.tables().unwrap(), show_room(&owner.name));
    let free = full.0[1].free();
    assert!(
        free > 5 && free < 256 * 5,
        "mux2 count=256 (5 pins each) must run out of room part-way: {free} pins free"
    );
    let reply = c.execute("loadrt mux2 count=256").unwrap();
    assert!(!reply.ok);
    let e = reply.error.unwrap();
    assert!(e.contains("no room for another pin"), "{e}");
    let after = (r.tables().unwrap(), show_room(&owner.name));
    for (a, b) in after.0.iter().zip(&full.0) {
        assert_eq!((a.table, a.used, a.free()), (b.table, b.used, b.free()));
    }
    for t in ["component", "pin", "param", "signal", "function"] {
        assert_eq!(
            (&after.1[t]["used"], &after.1[t]["free"]),
            (&full.1[t]["used"], &full.1[t]["free"]),
            "rtapi show reports the same room for {t}s"
        );
    }
    assert!(r
        .components()
        .unwrap()
        .iter()
        .all(|c| !c.name.starts_with("mux2")));
    ok(&mut c, "loadrt mux2 count=1");
    ok(&mut c, "addf mux2.0 servo");
    let text = owner.show("all");
    assert!(
        text.lines()
            .any(|l| l.starts_with("Room used: ") && l.contains(" pins")),
        "{text}"
    );
    owner.stop_cleanly();
}
