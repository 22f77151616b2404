//! The live segment (layout 2.0): structure that changes while the owner runs — pins linked and
//! unlinked through their pointer slots, signals created and deleted, components, pins, params and
//! functions added, run lists edited — seen by readers consistently, with halcmd's rules and values.

mod common;

use common::{shm_path, unique_instance, Cleanup};
use rtapi_hal::layout::{header, Table};
use rtapi_hal::*;

struct Fixture {
    _c: Cleanup,
    inst: String,
    hal: Hal,
    comp: ComponentKey,
    out: PinKey<Out, f64>,
    inp: PinKey<In, f64>,
    servo: ThreadKey,
}

fn fixture(tag: &str) -> Fixture {
    let inst = unique_instance(tag);
    let c = Cleanup(inst.clone());
    let mut b = HalBuilder::new(&inst).unwrap();
    let comp = b.component("c").unwrap();
    let out = b.pin::<Out, f64>(comp, "c.out").unwrap();
    let inp = b.pin_with_default::<In, f64>(comp, "c.in", 7.0).unwrap();
    b.function(comp, "c.f").unwrap();
    let servo = b.thread(ThreadConfig::new("servo", 1_000_000)).unwrap();
    b.addf("c.f", "servo", None).unwrap();
    let hal = b.build().unwrap();
    Fixture {
        _c: c,
        inst,
        hal,
        comp,
        out,
        inp,
        servo,
    }
}

#[test]
fn link_repoints_handles_and_unlink_keeps_the_signal_value() {
    let f = fixture("link");
    let (out, inp) = (f.hal.pin(f.out), f.hal.pin(f.inp));
    let r = HalReader::open(&f.inst, Access::ReadOnly).unwrap();
    let g0 = f.hal.generation();
    assert_eq!(g0 % 2, 0);

    f.hal.new_signal("cmd", ValueType::Float).unwrap();
    assert_eq!(f.hal.generation(), g0 + 2, "one change, generation +2");
    assert_eq!(r.signal_named("cmd").unwrap().value, Value::Float(0.0));
    out.set(3.5); // written into the OUT pin's own cell while unlinked

    // An OUT pin brings its value to the signal; an IN pin then reads the signal through its slot.
    f.hal.link("c.out", "cmd").unwrap();
    // (An IN pin that is a signal's first pin brings its value too, as in LinuxCNC: see below.)
    assert_eq!(r.get("cmd").unwrap(), Value::Float(3.5));
    assert_eq!(inp.get(), 7.0, "not linked yet: its own default");
    f.hal.link("c.in", "cmd").unwrap();
    assert_eq!(inp.get(), 3.5, "the same handle now reads the signal");
    out.set(4.25);
    assert_eq!(inp.get(), 4.25);
    let s = r.signal_named("cmd").unwrap();
    assert_eq!(
        (s.writer.as_deref(), s.readers, s.bidirs),
        (Some("c.out"), 1, 0)
    );
    assert_eq!(r.pin_named("c.in").unwrap().signal.as_deref(), Some("cmd"));
    assert_eq!(r.pin_named("c.in").unwrap().value, Value::Float(4.25));

    // Unlink (LinuxCNC): the pin's own cell takes the signal's value, so it keeps reading 4.25.
    f.hal.unlink("c.in").unwrap();
    assert_eq!(inp.get(), 4.25);
    out.set(9.0);
    assert_eq!(inp.get(), 4.25, "unlinked: no longer follows the signal");
    let p = r.pin_named("c.in").unwrap();
    assert_eq!((p.signal, p.value), (None, Value::Float(4.25)));
    assert_eq!(r.signal_named("cmd").unwrap().readers, 0);
    // Unlinking a pin on no signal is not an error (nothing to do), like halcmd.
    f.hal.unlink("c.in").unwrap();
    // A reader may now setp the unlinked IN pin, and the handle sees it.
    let rw = HalReader::open(&f.inst, Access::ReadWrite).unwrap();
    rw.setp("c.in", "1.5").unwrap();
    assert_eq!(inp.get(), 1.5);
}

#[test]
fn the_first_pin_of_a_signal_gives_it_its_value_like_linuxcnc() {
    let f = fixture("first");
    let (out, inp) = (f.hal.pin(f.out), f.hal.pin(f.inp));
    let r = f.hal.reader().unwrap();
    // An IN pin alone on a signal: the signal takes the pin's value (7.0, its default).
    f.hal.new_signal("a", ValueType::Float).unwrap();
    let rw = HalReader::open(&f.inst, Access::ReadWrite).unwrap();
    rw.sets("a", "2.5").unwrap();
    f.hal.link("c.in", "a").unwrap();
    assert_eq!(r.get("a").unwrap(), Value::Float(7.0));
    assert_eq!(inp.get(), 7.0);
    // An OUT pin joining a signal that has readers but no writer still brings its value.
    out.set(-1.0);
    f.hal.link("c.out", "a").unwrap();
    assert_eq!((r.get("a").unwrap(), inp.get()), (Value::Float(-1.0), -1.0));
    // A second IN pin joining a driven signal reads it, it does not overwrite it.
    let k = f.hal.add_component("z").unwrap();
    let z = f.hal.pin(
        f.hal
            .add_pin_with_default::<In, f64>(k, "z.in", 99.0)
            .unwrap(),
    );
    f.hal.link("z.in", "a").unwrap();
    assert_eq!((r.get("a").unwrap(), z.get()), (Value::Float(-1.0), -1.0));
    // An IN pin joining a signal that already has readers (but no writer) reads it too.
    f.hal.new_signal("b", ValueType::Float).unwrap();
    let y = f.hal.pin(
        f.hal
            .add_pin_with_default::<In, f64>(k, "z.y", 5.0)
            .unwrap(),
    );
    f.hal
        .add_pin_with_default::<In, f64>(k, "z.w", 6.0)
        .unwrap();
    f.hal.link("z.w", "b").unwrap();
    f.hal.link("z.y", "b").unwrap();
    assert_eq!((r.get("b").unwrap(), y.get()), (Value::Float(6.0), 6.0));
}

#[test]
fn link_follows_halcmd_rules() {
    let f = fixture("rules");
    let c2 = f.hal.add_component("d").unwrap();
    f.hal.add_pin::<Out, f64>(c2, "d.out").unwrap();
    f.hal.add_pin::<Io, f64>(c2, "d.io").unwrap();
    f.hal.add_pin::<In, bool>(c2, "d.bit").unwrap();
    f.hal.new_signal("s", ValueType::Float).unwrap();
    f.hal.new_signal("s2", ValueType::Float).unwrap();
    f.hal.link("c.out", "s").unwrap();
    let e = f.hal.link("d.out", "s").unwrap_err();
    assert!(matches!(e, HalError::SecondWriter { .. }), "{e}");
    let e = f.hal.link("d.bit", "s").unwrap_err();
    assert!(matches!(e, HalError::TypeMismatch { .. }), "{e}");
    let e = f.hal.link("d.io", "s").unwrap_err();
    assert!(matches!(e, HalError::OutWithIo { .. }), "{e}");
    let e = f.hal.link("c.out", "s2").unwrap_err();
    assert!(matches!(e, HalError::AlreadyNetted { .. }), "{e}");
    let e = f.hal.link("c.in", "nosuch").unwrap_err();
    assert!(matches!(e, HalError::NotFound { .. }), "{e}");
    let e = f.hal.link("nosuch", "s").unwrap_err();
    assert!(matches!(e, HalError::NotFound { .. }), "{e}");
    let e = f.hal.new_signal("s", ValueType::Bit).unwrap_err();
    assert!(matches!(e, HalError::Duplicate { .. }), "{e}");
    // A refused change changes nothing a reader sees.
    let r = f.hal.reader().unwrap();
    let s = r.signal_named("s").unwrap();
    assert_eq!(
        (s.writer.as_deref(), s.readers, s.bidirs),
        (Some("c.out"), 0, 0)
    );
    assert_eq!(r.pin_named("d.io").unwrap().signal, None);
    // IO pins share a signal without an OUT pin; the first brings its value.
    let io = f.hal.pin(f.hal.add_pin::<Io, f64>(c2, "d.io2").unwrap());
    io.set(2.0);
    f.hal.link("d.io2", "s2").unwrap();
    f.hal.link("d.io", "s2").unwrap();
    assert_eq!(r.get("s2").unwrap(), Value::Float(2.0));
    assert_eq!(r.signal_named("s2").unwrap().bidirs, 2);
    r.snapshot().unwrap(); // every cross-record check passes on the changed structure
}

#[test]
fn delete_signal_unlinks_its_pins_tombstones_it_and_frees_the_name() {
    let f = fixture("delsig");
    let (out, inp) = (f.hal.pin(f.out), f.hal.pin(f.inp));
    f.hal.new_signal("x", ValueType::Float).unwrap();
    f.hal.link("c.out", "x").unwrap();
    f.hal.link("c.in", "x").unwrap();
    out.set(6.0);
    let r = HalReader::open(&f.inst, Access::ReadOnly).unwrap();
    f.hal.delete_signal("x").unwrap();
    assert_eq!(
        inp.get(),
        6.0,
        "the pin keeps the deleted signal's last value"
    );
    out.set(1.0);
    assert_eq!(inp.get(), 6.0);
    assert!(matches!(
        r.signal_named("x"),
        Err(HalError::NotFound { .. })
    ));
    assert!(r.signals().unwrap().is_empty(), "the tombstone is skipped");
    assert_eq!(r.pin_named("c.out").unwrap().signal, None);
    // The record is still in the table (count 1) with the deleted flag.
    let bytes = std::fs::read(shm_path(&f.inst)).unwrap();
    let d = Table::Signals.descriptor();
    assert_eq!(
        u32::from_ne_bytes(bytes[d + 8..d + 12].try_into().unwrap()),
        1
    );
    // The name is free again: a new record, the old one stays a tombstone.
    f.hal.new_signal("x", ValueType::Bit).unwrap();
    assert_eq!(r.signal_named("x").unwrap().ty, ValueType::Bit);
    assert_eq!(r.signals().unwrap().len(), 1);
    r.snapshot().unwrap();
    let e = f.hal.delete_signal("nosuch").unwrap_err();
    assert!(matches!(e, HalError::NotFound { .. }), "{e}");
    assert_eq!(
        u64::from_ne_bytes(bytes[header::GENERATION..][..8].try_into().unwrap()) % 2,
        0
    );
}

#[test]
fn objects_added_at_run_time_are_usable_and_visible() {
    let f = fixture("add");
    let r = HalReader::open(&f.inst, Access::ReadWrite).unwrap();
    let k = f.hal.add_component("late").unwrap();
    let p = f
        .hal
        .add_pin_with_default::<In, i32>(k, "late.in", -3)
        .unwrap();
    let q = f.hal.add_param(k, "late.k", ParamAccess::Rw, 2u32).unwrap();
    f.hal.add_function(k, "late.f").unwrap();
    let (p, q) = (f.hal.pin(p), f.hal.param(q));
    assert_eq!(p.get(), -3);
    let c = r
        .components()
        .unwrap()
        .into_iter()
        .find(|c| c.name == "late")
        .unwrap();
    assert_eq!((c.pins, c.params, c.functions), (1, 1, 1));
    r.setp("late.in", "-9").unwrap();
    r.setp("late.k", "5").unwrap();
    assert_eq!((p.get(), q.get()), (-9, 5));
    // Names stay unique across build-time and run-time objects.
    assert!(matches!(
        f.hal.add_pin::<In, f64>(k, "c.in"),
        Err(HalError::Duplicate { .. })
    ));
    assert!(matches!(
        f.hal.add_component("c"),
        Err(HalError::Duplicate { .. })
    ));
    let _ = f.comp;
}

#[test]
fn addf_and_delf_keep_the_run_list_consistent() {
    let f = fixture("addf");
    let k = f.hal.add_component("m").unwrap();
    for n in ["m.a", "m.b"] {
        f.hal.add_function(k, n).unwrap();
    }
    f.hal.addf("m.a", "servo", Some(0)).unwrap();
    f.hal.addf("m.b", "servo", None).unwrap();
    let names = |hal: &Hal| {
        let r = hal.reader().unwrap();
        let mut v: Vec<(u32, String)> = r
            .functions()
            .unwrap()
            .into_iter()
            .filter_map(|x| x.thread.map(|(_, p)| (p, x.name)))
            .collect();
        v.sort();
        v.into_iter().map(|x| x.1).collect::<Vec<_>>()
    };
    assert_eq!(names(&f.hal), ["m.a", "c.f", "m.b"]);
    assert_eq!(f.hal.thread_functions(f.servo).len(), 3);
    f.hal.delf("c.f", "servo").unwrap();
    assert_eq!(names(&f.hal), ["m.a", "m.b"]);
    let r = f.hal.reader().unwrap();
    assert_eq!(r.thread_named("servo").unwrap().functions, 2);
    assert_eq!(r.function_named("c.f").unwrap().thread, None);
    assert!(
        f.hal.delf("c.f", "servo").is_err(),
        "not in the thread any more"
    );
    assert!(matches!(
        f.hal.addf("m.a", "servo", None),
        Err(HalError::AlreadyAdded { .. })
    ));
    assert!(
        f.hal.addf("c.f", "servo", Some(9)).is_err(),
        "position past the end"
    );
    f.hal.addf("c.f", "servo", Some(1)).unwrap();
    assert_eq!(names(&f.hal), ["m.a", "c.f", "m.b"]);
    r.snapshot().unwrap();
}

#[test]
fn a_full_table_is_a_clear_error_and_changes_nothing() {
    let inst = unique_instance("full");
    let _c = Cleanup(inst.clone());
    let mut b = HalBuilder::new(&inst).unwrap().capacity(Capacity {
        factor: 1,
        floor: 2,
    });
    b.component("c").unwrap();
    let hal = b.build().unwrap();
    hal.new_signal("a", ValueType::Bit).unwrap();
    hal.new_signal("b", ValueType::Bit).unwrap();
    let g = hal.generation();
    let e = hal.new_signal("c", ValueType::Bit).unwrap_err();
    assert!(
        matches!(
            e,
            HalError::TableFull {
                table: "signal",
                capacity: 2
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("HalBuilder::capacity"), "{e}");
    assert_eq!(
        hal.generation(),
        g,
        "a refused change does not touch the segment"
    );
    // Deleting frees the room (layout 2.1): the tombstone's slot takes the next signal.
    hal.delete_signal("a").unwrap();
    hal.new_signal("c", ValueType::Bit).unwrap();
    let r = hal.reader().unwrap();
    let names: Vec<String> = r.signals().unwrap().into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["c", "b"], "c took a's place");
    let sig = r.tables().unwrap()[3];
    assert_eq!(
        (
            sig.table,
            sig.capacity,
            sig.used,
            sig.deleted,
            sig.high_water
        ),
        ("signal", 2, 2, 0, 2)
    );
    assert!(matches!(
        hal.new_signal("d", ValueType::Bit),
        Err(HalError::TableFull { .. })
    ));
    hal.add_component("d").unwrap();
    hal.add_component("e").unwrap();
    assert!(matches!(
        hal.add_component("f"),
        Err(HalError::TableFull { .. })
    ));
}

#[test]
fn a_generation_stuck_odd_is_refused_after_the_retry_budget() {
    let f = fixture("stuck");
    let mut bytes = std::fs::read(shm_path(&f.inst)).unwrap();
    assert!(HalReader::from_bytes(&bytes).is_ok());
    bytes[header::GENERATION..header::GENERATION + 8].copy_from_slice(&7u64.to_ne_bytes());
    let start = std::time::Instant::now();
    let e = HalReader::from_bytes(&bytes).err().unwrap();
    let waited = start.elapsed();
    assert!(matches!(e, HalError::StructureBusy { stuck: true }), "{e}");
    assert!(
        e.to_string()
            .contains("refused: structure being changed for too long (owner died mid-change?)"),
        "{e}"
    );
    assert!(
        waited >= std::time::Duration::from_millis(900)
            && waited < std::time::Duration::from_secs(5),
        "retried for {waited:?}"
    );
}

#[test]
fn delete_component_takes_its_objects_out_in_one_change() {
    let f = fixture("unload");
    let k = f.hal.add_component("tmp").unwrap();
    let out = f.hal.pin(f.hal.add_pin::<Out, f64>(k, "tmp.out").unwrap());
    f.hal
        .add_param(k, "tmp.k", ParamAccess::Rw, 1.0f64)
        .unwrap();
    f.hal.add_function(k, "tmp.f").unwrap();
    f.hal.addf("tmp.f", "servo", Some(0)).unwrap();
    f.hal.new_signal("t", ValueType::Float).unwrap();
    f.hal.link("tmp.out", "t").unwrap();
    f.hal.link("c.in", "t").unwrap();
    out.set(8.5);
    let inp = f.hal.pin(f.inp);
    let r = HalReader::open(&f.inst, Access::ReadOnly).unwrap();
    assert_eq!(
        r.function_named("c.f").unwrap().thread,
        Some(("servo".into(), 1))
    );
    let g = f.hal.generation();
    f.hal.delete_component("tmp").unwrap();
    assert_eq!(f.hal.generation(), g + 2, "one structural change");
    // Gone from every listing; the thread's run list closed up; the signal lost its writer.
    let snap = r.snapshot().unwrap();
    assert!(snap.components.iter().all(|c| c.name != "tmp"));
    assert!(snap.pins.iter().all(|p| !p.name.starts_with("tmp.")));
    assert!(snap.params.iter().all(|p| p.name != "tmp.k"));
    assert!(snap.functions.iter().all(|x| x.name != "tmp.f"));
    assert_eq!(
        r.function_named("c.f").unwrap().thread,
        Some(("servo".into(), 0))
    );
    assert_eq!(r.thread_named("servo").unwrap().functions, 1);
    let s = r.signal_named("t").unwrap();
    assert_eq!((s.writer, s.readers, s.value), (None, 1, Value::Float(8.5)));
    assert_eq!(inp.get(), 8.5);
    out.set(1.0); // the old handle writes its own (tombstoned) cell, which nothing reads
    assert_eq!(inp.get(), 8.5);
    assert_eq!(f.hal.thread_functions(f.servo).len(), 1);
    // The names are free again.
    let k = f.hal.add_component("tmp").unwrap();
    f.hal.add_pin::<Out, f64>(k, "tmp.out").unwrap();
    f.hal.add_function(k, "tmp.f").unwrap();
    f.hal.link("tmp.out", "t").unwrap();
    r.snapshot().unwrap();
    assert!(matches!(
        f.hal.delete_component("nosuch"),
        Err(HalError::NotFound { .. })
    ));
}

/// A user-space component's writes from another reader (`write_own`, LAYOUT.md 11a): its own OUT pin
/// into the cell it drives (its own, then its signal's once linked), never another component's, an
/// IN pin only while unconnected, its params whatever their access; and the `_located` calls that
/// skip the name search until the structure changes.
#[test]
fn a_user_component_writes_its_own_pins_where_they_drive() {
    let f = fixture("own");
    let user = f.hal.add_component("panel").unwrap();
    let button = f.hal.add_pin::<Out, f64>(user, "panel.button").unwrap();
    f.hal.add_pin::<In, f64>(user, "panel.led").unwrap();
    f.hal
        .add_param(user, "panel.gain", ParamAccess::Ro, 0.0f64)
        .unwrap();
    let w = HalReader::open(&f.inst, Access::ReadWrite).unwrap();
    let r = HalReader::open(&f.inst, Access::ReadOnly).unwrap();
    let no = WriteOptions::default();

    assert_eq!(
        w.write_own("panel", "panel.button", "1.5", no).unwrap(),
        Value::Float(1.5)
    );
    assert_eq!(f.hal.pin(button).get(), 1.5, "its own cell while unlinked");
    f.hal.new_signal("btn", ValueType::Float).unwrap();
    f.hal.link("panel.button", "btn").unwrap();
    f.hal.link("c.in", "btn").unwrap();
    w.write_own("panel", "panel.button", "2.5", no).unwrap();
    assert_eq!(
        r.get("btn").unwrap(),
        Value::Float(2.5),
        "the signal's cell once linked"
    );
    assert_eq!(
        f.hal.pin(f.inp).get(),
        2.5,
        "an RT reader of the signal sees it"
    );

    let refused = |e: HalError| match e {
        HalError::NotWritable { reason, .. } => reason,
        other => panic!("{other}"),
    };
    let e = w.write_own("panel", "c.out", "1", no).unwrap_err();
    assert!(e.to_string().contains("belongs to component 'c'"), "{e}");
    assert!(matches!(
        refused(e),
        WriteRefusal::OtherComponent { ref owner, .. } if owner == "c"
    ));
    w.write_own("panel", "panel.led", "4", no).unwrap();
    f.hal.new_signal("fb", ValueType::Float).unwrap();
    f.hal.link("panel.led", "fb").unwrap();
    let e = w.write_own("panel", "panel.led", "5", no).unwrap_err();
    assert!(matches!(refused(e), WriteRefusal::ConnectedPin { .. }));
    w.write_own("panel", "panel.gain", "0.5", no).unwrap();
    assert_eq!(
        r.get("panel.gain").unwrap(),
        Value::Float(0.5),
        "RO is for others"
    );
    assert!(matches!(
        w.write_own("panel", "panel.button", "nan", no),
        Err(HalError::NonFinite { .. })
    ));
    assert!(matches!(
        w.write_own("panel", "panel.nope", "1", no),
        Err(HalError::NotFound { .. })
    ));
    assert!(matches!(
        r.write_own("panel", "panel.button", "1", no)
            .map_err(refused),
        Err(WriteRefusal::ReadOnlyMapping)
    ));

    // Found once, used until the structure changes.
    let at = w.locate("panel.button").unwrap();
    w.write_own_located("panel", &at, "panel.button", "6", no)
        .unwrap()
        .unwrap();
    assert_eq!(
        r.get_located(&r.locate("btn").unwrap()).unwrap(),
        Some(Value::Float(6.0))
    );
    assert_eq!(w.get_located(&at).unwrap(), Some(Value::Float(6.0)));
    f.hal.unlink("panel.button").unwrap();
    assert_eq!(w.get_located(&at).unwrap(), None, "moved: locate again");
    assert_eq!(
        w.write_own_located("panel", &at, "panel.button", "7", no)
            .unwrap(),
        None
    );
    assert!(matches!(
        w.locate("nothing"),
        Err(HalError::NotFound { .. })
    ));

    // The component goes: its names are gone for writes too.
    f.hal.delete_component("panel").unwrap();
    assert!(matches!(
        w.write_own("panel", "panel.button", "1", no),
        Err(HalError::NotFound { .. })
    ));
}

/// A C component's pin pointer (LinuxCNC's `T *` behind the `T **` of `hal_pin_*_new`) follows the
/// pin's links: the signal's cell while linked; unlinked, the pin's own cell — or, given one, the
/// substitute cell, which takes the own cell's value on the way.
#[test]
fn attached_pin_pointers_follow_links_and_unlinks() {
    let f = fixture("mirror");
    let out = f.hal.pin(f.out);
    f.hal.new_signal("sig", ValueType::Float).unwrap();
    // Two C-side pointers, aligned, living as long as the Hal (the test's stack frame).
    let mut plain: *mut u8 = std::ptr::null_mut();
    let mut with_sub: *mut u8 = std::ptr::null_mut();
    let substitute = Box::new(std::sync::atomic::AtomicU64::new(0));
    let sub_ptr = (&*substitute as *const std::sync::atomic::AtomicU64)
        .cast::<u8>()
        .cast_mut();
    // SAFETY: both pointer locations and the substitute cell live until the end of this function,
    // after the Hal (dropped explicitly below); only the Hal writes them while attached.
    let own_out = unsafe {
        f.hal
            .attach_pin_pointer("c.out", &mut plain, std::ptr::null_mut())
    }
    .unwrap();
    // SAFETY: as above.
    let own_in = unsafe { f.hal.attach_pin_pointer("c.in", &mut with_sub, sub_ptr) }.unwrap();
    let read = |p: *mut u8| {
        // SAFETY: the Hal stored the address of a live 8-aligned cell (or the substitute).
        f64::from_bits(unsafe {
            (*p.cast::<std::sync::atomic::AtomicU64>()).load(std::sync::atomic::Ordering::Relaxed)
        })
    };
    out.set(2.5);
    assert_eq!(read(plain), 2.5, "unlinked OUT: its own cell");
    assert_eq!(own_out.load_bits(ValueType::Float), 2.5f64.to_bits());
    assert_eq!(
        with_sub, sub_ptr,
        "unlinked with a substitute: the substitute"
    );
    assert_eq!(
        read(with_sub),
        7.0,
        "which took the own cell's value (the default)"
    );
    assert_eq!(own_in.load_bits(ValueType::Float), 7.0f64.to_bits());

    f.hal.link("c.out", "sig").unwrap();
    f.hal.link("c.in", "sig").unwrap();
    assert_eq!(plain, with_sub, "both on the signal's cell");
    out.set(6.0);
    assert_eq!(read(with_sub), 6.0);

    f.hal.unlink("c.in").unwrap();
    assert_eq!(with_sub, sub_ptr, "back to the substitute");
    assert_eq!(
        read(with_sub),
        6.0,
        "holding the signal's last value, as the own cell does"
    );
    f.hal.unlink("c.out").unwrap();
    assert_ne!(plain, sub_ptr);
    assert_eq!(read(plain), 6.0);
    drop(f);
    drop(substitute);
}

/// Threads added while the segment runs (a LinuxCNC thread made at `loadrt` time): each appears with
/// its record and a fresh stats block of its own in one structural change, its stats writer records
/// like a built thread's, other readers see it, and the room kept for them is a hard limit that a
/// refused addition leaves untouched.
#[test]
fn threads_added_at_run_time_get_a_record_and_a_stats_block_of_their_own() {
    let inst = unique_instance("live-thread");
    let _c = Cleanup(inst.clone());
    let mut b = HalBuilder::new(&inst).unwrap().thread_room(ThreadRoom {
        threads: 2,
        max_bins: 100,
    });
    b.thread(ThreadConfig::new("built", 1_000_000)).unwrap();
    let hal = b.build().unwrap();
    let r = HalReader::open(&inst, Access::ReadOnly).unwrap();
    assert_eq!(r.threads().unwrap().len(), 1);

    let hist = HistogramConfig {
        bin_ns: 1000,
        bins: 100,
    };
    let g = hal.generation();
    let servo = hal
        .add_thread(
            ThreadConfig::new("servo-thread", 1_000_000)
                .histogram(hist)
                .priority(97)
                .cpu(1),
        )
        .unwrap();
    assert_eq!(hal.generation(), g + 2, "one structural change");
    let t = r.thread_named("servo-thread").unwrap();
    assert_eq!(
        (t.period_ns, t.priority, t.cpu, t.stats.cycles),
        (1_000_000, 97, Some(1), 0)
    );
    let w = hal.stats_writer(servo).unwrap();
    for (latency, missed) in [(2500, 0), (7500, 3)] {
        w.record(&PeriodSample {
            now_ns: 1,
            latency_ns: latency,
            interval_ns: 0,
            exec_ns: 10,
            missed,
            drift_ns: 0,
            rusage: None,
        });
    }
    let s = r.thread_stats("servo-thread").unwrap();
    assert_eq!((s.cycles, s.overruns), (2, 3));
    assert_eq!((s.latency_min_ns, s.latency_max_ns), (2500, 7500));
    let h = r.histogram("servo-thread").unwrap();
    assert_eq!((h.counts.len(), h.counts[2], h.counts[7]), (100, 1, 1));
    // The built thread's block is not the new one's.
    assert_eq!(r.thread_stats("built").unwrap().cycles, 0);
    // The whole structure still passes the cross-record checks.
    assert_eq!(r.snapshot().unwrap().threads.len(), 2);

    // A name in use, a histogram larger than the room, then no room: refused, segment unchanged.
    let g = hal.generation();
    assert!(matches!(
        hal.add_thread(ThreadConfig::new("built", 1_000_000).histogram(hist)),
        Err(HalError::Duplicate { .. })
    ));
    let e = hal
        .add_thread(
            ThreadConfig::new("big", 1_000_000).histogram(HistogramConfig {
                bin_ns: 1000,
                bins: 101,
            }),
        )
        .unwrap_err();
    assert!(e.to_string().contains("at most 100 bins"), "{e}");
    assert_eq!(hal.generation(), g);
    hal.add_thread(ThreadConfig::new("base-thread", 25_000).histogram(hist))
        .unwrap();
    let g = hal.generation();
    let e = hal
        .add_thread(ThreadConfig::new("third", 1_000_000).histogram(hist))
        .unwrap_err();
    assert!(
        matches!(
            e,
            HalError::TableFull {
                table: "thread",
                capacity: 3
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("thread_room"), "{e}");
    assert_eq!(hal.generation(), g);
    assert_eq!(r.threads().unwrap().len(), 3);
}

/// Without a thread room the thread table is exactly the built threads.
#[test]
fn a_segment_without_thread_room_refuses_new_threads() {
    let inst = unique_instance("no-room");
    let _c = Cleanup(inst.clone());
    let hal = HalBuilder::new(&inst).unwrap().build().unwrap();
    assert!(matches!(
        hal.add_thread(ThreadConfig::new("servo", 1_000_000)),
        Err(HalError::TableFull {
            table: "thread",
            capacity: 0
        })
    ));
}
