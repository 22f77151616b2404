//! Segments that are well-formed record by record but inconsistent across records (what a reader
//! written from LAYOUT.md alone would follow) are refused at open with "refused: <what>". Each case
//! forges a segment file in /dev/shm from a valid one and opens it the way `rtapi show` does.

mod common;

use common::{shm_path, unique_instance, write_shm, Cleanup};
use rtapi_hal::layout::{self, function, header, pin, signal, stats, table, thread, Table};
use rtapi_hal::*;

/// A valid segment's bytes: two components, pins of two types on two signals, two threads with two
/// functions in one of them, some stats.
fn valid() -> Vec<u8> {
    let inst = unique_instance("refsrc");
    let _c = Cleanup(inst.clone());
    let mut b = HalBuilder::new(&inst).unwrap();
    let c = b.component("c").unwrap();
    let d = b.component("d").unwrap();
    b.pin::<Out, f64>(c, "c.out").unwrap(); // pin 0
    b.pin::<In, f64>(d, "d.in").unwrap(); // pin 1
    b.pin::<Out, bool>(c, "c.bit").unwrap(); // pin 2
    b.pin::<In, f64>(d, "d.free").unwrap(); // pin 3
    b.net("s", "c.out").unwrap(); // signal 0
    b.net("s", "d.in").unwrap();
    b.net("b", "c.bit").unwrap(); // signal 1
    b.function(c, "c.f").unwrap();
    b.function(d, "d.f").unwrap();
    let t = b.thread(ThreadConfig::new("servo", 1_000_000)).unwrap();
    b.thread(ThreadConfig::new("base", 50_000)).unwrap();
    b.addf("c.f", "servo", None).unwrap();
    b.addf("d.f", "servo", None).unwrap();
    let hal = b.build().unwrap();
    let w = hal.stats_writer(t).unwrap();
    for i in 0..10 {
        w.record(&PeriodSample {
            latency_ns: 1000 + i,
            interval_ns: 1_000_000,
            ..Default::default()
        });
    }
    std::fs::read(shm_path(&inst)).unwrap()
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_ne_bytes(b[off..off + 8].try_into().unwrap())
}
fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_ne_bytes());
}
fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
}
fn record(b: &[u8], t: Table, i: usize) -> usize {
    let d = t.descriptor();
    let stride = u32::from_ne_bytes(b[d + table::RECORD_SIZE..][..4].try_into().unwrap());
    u64_at(b, d + table::OFFSET) as usize + i * stride as usize
}

/// Writes `bytes` as a trusted segment file and opens it: it must be refused, with `what` in the
/// message after "refused: ".
fn refused(bytes: &[u8], what: &str) {
    let inst = unique_instance("refused");
    let _c = Cleanup(inst.clone());
    write_shm(&shm_path(&inst), bytes);
    let e = match HalReader::open(&inst, Access::ReadOnly) {
        Ok(r) => match r.snapshot() {
            Ok(_) => panic!("a segment where {what} was accepted"),
            Err(e) => e,
        },
        Err(e) => e,
    };
    let msg = e.to_string();
    assert!(msg.contains("refused: "), "{msg}");
    assert!(msg.contains(what), "expected '{what}' in: {msg}");
}

#[test]
fn the_valid_source_is_accepted() {
    let inst = unique_instance("refok");
    let _c = Cleanup(inst.clone());
    write_shm(&shm_path(&inst), &valid());
    let r = HalReader::open(&inst, Access::ReadOnly).unwrap();
    r.snapshot().unwrap();
    assert_eq!(r.thread_stats("servo").unwrap().cycles, 10);
}

#[test]
fn a_pin_linked_to_a_signal_of_another_type() {
    let mut b = valid();
    let bit_signal = record(&b, Table::Signals, 1) as u64;
    let at = record(&b, Table::Pins, 1) + pin::SIGNAL;
    put_u64(&mut b, at, bit_signal);
    refused(
        &b,
        "pin 'd.in' (float) is linked to signal 'b' of another type",
    );
}

#[test]
fn a_writer_pin_that_is_not_an_out_pin_of_the_signal() {
    // An IN pin of the signal.
    let mut b = valid();
    let in_pin = record(&b, Table::Pins, 1) as u64;
    let at = record(&b, Table::Signals, 0) + signal::WRITER_PIN;
    put_u64(&mut b, at, in_pin);
    refused(
        &b,
        "signal 's' names writer pin 'd.in', which is not an OUT pin of it",
    );
    // An OUT pin of another signal.
    let mut b = valid();
    let other = record(&b, Table::Pins, 2) as u64;
    let at = record(&b, Table::Signals, 0) + signal::WRITER_PIN;
    put_u64(&mut b, at, other);
    refused(
        &b,
        "signal 's' names writer pin 'c.bit', which is not an OUT pin of it",
    );
}

#[test]
fn connection_counts_that_disagree_with_the_pins() {
    let mut b = valid();
    let at = record(&b, Table::Signals, 0) + signal::READERS;
    put_u32(&mut b, at, 3);
    refused(
        &b,
        "signal 's' counts 1 writer(s), 3 reader(s), 0 bidir(s) but its pins are 1 OUT, 1 IN, 0 IO",
    );
    let mut b = valid();
    let at = record(&b, Table::Signals, 0) + signal::BIDIRS;
    put_u32(&mut b, at, 1);
    refused(&b, "but its pins are 1 OUT, 1 IN, 0 IO");
    // A pin that joins a signal without being counted.
    let mut b = valid();
    let s = record(&b, Table::Signals, 0) as u64;
    let at = record(&b, Table::Pins, 3) + pin::SIGNAL;
    put_u64(&mut b, at, s);
    refused(
        &b,
        "signal 's' counts 1 writer(s), 1 reader(s), 0 bidir(s) but its pins are 1 OUT, 2 IN",
    );
    // writers = 0 with a writer_pin set.
    let mut b = valid();
    let at = record(&b, Table::Signals, 0) + signal::WRITERS;
    put_u32(&mut b, at, 0);
    refused(&b, "signal 's' counts 0 writers but its writer_pin says 1");
}

#[test]
fn duplicate_names() {
    let mut b = valid();
    let r = record(&b, Table::Pins, 3);
    b[r..r + 48].fill(0);
    b[r..r + 4].copy_from_slice(b"d.in");
    refused(&b, "two live pin or params are named 'd.in'");
    let mut b = valid();
    let r = record(&b, Table::Signals, 1);
    b[r..r + 48].fill(0);
    b[r..r + 1].copy_from_slice(b"s");
    refused(&b, "two live signals are named 's'");
    let mut b = valid();
    let r = record(&b, Table::Threads, 1);
    b[r..r + 48].fill(0);
    b[r..r + 5].copy_from_slice(b"servo");
    refused(&b, "two live threads are named 'servo'");
}

#[test]
fn function_positions_out_of_range_or_inconsistent() {
    let mut b = valid();
    let at = record(&b, Table::Functions, 1) + function::POSITION;
    put_u32(&mut b, at, 9);
    refused(
        &b,
        "function 'd.f' is at position 9 of a thread that runs 2",
    );
    let mut b = valid();
    let at = record(&b, Table::Functions, 1) + function::POSITION;
    put_u32(&mut b, at, 0);
    refused(
        &b,
        "thread 'servo' runs 2 functions but its functions' positions are [0, 0]",
    );
    // The thread lists fewer functions than point at it.
    let mut b = valid();
    let at = record(&b, Table::Threads, 0) + thread::FUNCTIONS;
    put_u32(&mut b, at, 1);
    refused(
        &b,
        "function 'd.f' is at position 1 of a thread that runs 1",
    );
    // A function not added to any thread but counted by one.
    let mut b = valid();
    let at = record(&b, Table::Threads, 1) + thread::FUNCTIONS;
    put_u32(&mut b, at, 1);
    refused(
        &b,
        "thread 'base' runs 1 functions but its functions' positions are []",
    );
}

#[test]
fn overlapping_tables_or_stats_blocks() {
    let mut b = valid();
    let pins = u64_at(&b, Table::Pins.descriptor() + table::OFFSET);
    put_u64(
        &mut b,
        Table::Params.descriptor() + table::OFFSET,
        pins + 88,
    );
    refused(&b, "the pin table and the param table overlap");
    let mut b = valid();
    let servo_stats = u64_at(&b, record(&b, Table::Threads, 0) + thread::STATS);
    let at = record(&b, Table::Threads, 1) + thread::STATS;
    put_u64(&mut b, at, servo_stats);
    refused(&b, "the stats blocks of threads");
    // A stats block inside a table's spare room (its shape copied there so that only the overlap is
    // wrong).
    let mut b = valid();
    let servo_stats = u64_at(&b, record(&b, Table::Threads, 0) + thread::STATS) as usize;
    let inside = record(&b, Table::Pins, 10);
    let head: Vec<u8> = b[servo_stats..servo_stats + 32].to_vec();
    b[inside..inside + 32].copy_from_slice(&head);
    let at = record(&b, Table::Threads, 1) + thread::STATS;
    put_u64(&mut b, at, inside as u64);
    refused(
        &b,
        "the stats block of thread 'base' overlaps the pin table",
    );
}

#[test]
fn stats_with_min_above_max() {
    let mut b = valid();
    let st = u64_at(&b, record(&b, Table::Threads, 0) + thread::STATS) as usize;
    put_u64(&mut b, st + stats::LATENCY_MIN, 5000);
    put_u64(&mut b, st + stats::LATENCY_MAX, 10);
    let inst = unique_instance("minmax");
    let _c = Cleanup(inst.clone());
    write_shm(&shm_path(&inst), &b);
    let r = HalReader::open(&inst, Access::ReadOnly).unwrap();
    let e = r.thread_stats("servo").unwrap_err().to_string();
    assert!(
        e.contains("refused: the stats of thread 'servo' have latency min 5000 > max 10"),
        "{e}"
    );
}

#[test]
fn unknown_flags_counts_past_capacity_and_references_to_tombstones() {
    let mut b = valid();
    let at = record(&b, Table::Pins, 0) + pin::FLAGS;
    put_u32(&mut b, at, 6);
    refused(&b, "a pin record has unknown flags 0x6");
    let mut b = valid();
    put_u32(&mut b, Table::Pins.descriptor() + table::COUNT, 100_000);
    refused(
        &b,
        "the pin table says 100000 records are in use but it has room for",
    );
    let mut b = valid();
    let at = record(&b, Table::Signals, 0) + signal::FLAGS;
    put_u32(&mut b, at, layout::flags::DELETED);
    refused(&b, "a pin record refers to a deleted signal record");
    let mut b = valid();
    put_u32(&mut b, Table::Signals.capacity_field(), u32::MAX);
    refused(&b, "the signal table (room for 4294967295 records");
}

#[test]
fn a_file_shrunk_under_the_mapping_is_refused_not_a_crash() {
    let inst = unique_instance("shrunk");
    let _c = Cleanup(inst.clone());
    let b = valid();
    write_shm(&shm_path(&inst), &b);
    let r = HalReader::open(&inst, Access::ReadOnly).unwrap();
    r.pins().unwrap();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(shm_path(&inst))
        .unwrap();
    f.set_len(header::SIZE as u64).unwrap();
    let e = r.pins().unwrap_err().to_string();
    assert!(
        e.contains("refused: the segment file shrank to 256 bytes under a mapping of"),
        "{e}"
    );
    assert!(r.snapshot().is_err() && r.get("d.in").is_err());
}
