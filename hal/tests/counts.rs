//! Every count, size and offset a reader takes from a segment, set to its maximum (and a few other
//! extreme values) in a copy of a real segment: the reader refuses it as corrupt, in bounded time and
//! memory (issue 23, finding 4: a thread's `functions` count of `0xffffffff` made `rtapi show thread`
//! allocate 16.8 GB before refusing).
//!
//! Each field is tried in a child process of this test binary (so the memory it measures, `VmHWM`, is
//! that field's alone) with its address space limited (`RLIMIT_AS`), so a reader that tries to
//! allocate without bound fails the test quickly instead of swapping the machine.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{shm_path, unique_instance, Cleanup};
use rtapi_hal::layout::{
    component as c, function as f, header, signal as sg, stats as st, table, thread as th, Table,
};
use rtapi_hal::*;

/// Selects the child role and names the case: `OFFSET:WIDTH` (bytes) of the field to overwrite.
const CASE: &str = "RTAPI_COUNTS_CASE";
/// The file holding the valid image the child corrupts.
const IMAGE: &str = "RTAPI_COUNTS_IMAGE";
/// How much more than it has mapped at start a child may map (a reader that needs more is broken).
const AS_HEADROOM: u64 = 1 << 30;
/// Peak memory a child may gain over all the values of one field.
const MAX_GROWTH_KIB: u64 = 64 * 1024;
/// Time a child may take for all the values of one field (a real refusal takes microseconds).
const MAX_TIME: Duration = Duration::from_secs(20);

/// A valid segment with two threads (one with two functions), signals of each kind, recorded stats.
fn valid_image() -> Vec<u8> {
    let inst = unique_instance("counts");
    let _c = Cleanup(inst.clone());
    let mut b = HalBuilder::new(&inst).unwrap();
    let a = b.component("a").unwrap();
    let d = b.component("d").unwrap();
    b.pin::<Out, f64>(a, "a.out").unwrap();
    b.pin::<In, f64>(d, "d.in").unwrap();
    b.pin::<Io, bool>(d, "d.io").unwrap();
    b.param(a, "a.gain", ParamAccess::Rw, 1.5f64).unwrap();
    b.function(a, "a.f").unwrap();
    b.function(a, "a.g").unwrap();
    b.function(d, "d.f").unwrap();
    let t = b
        .thread(
            ThreadConfig::new("servo", 1_000_000).histogram(HistogramConfig {
                bin_ns: 1000,
                bins: 16,
            }),
        )
        .unwrap();
    b.thread(ThreadConfig::new("base", 50_000)).unwrap();
    b.addf("a.f", "servo", None).unwrap();
    b.addf("a.g", "servo", None).unwrap();
    b.addf("d.f", "base", None).unwrap();
    b.net("sig", "a.out").unwrap();
    b.net("sig", "d.in").unwrap();
    b.net("bidir", "d.io").unwrap();
    let hal = b.build().unwrap();
    let w = hal.stats_writer(t).unwrap();
    for i in 0..40 {
        w.record(&PeriodSample {
            latency_ns: i * 900,
            interval_ns: 1_000_000,
            ..Default::default()
        });
    }
    std::fs::read(shm_path(&inst)).unwrap()
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_ne_bytes(b[off..off + 8].try_into().unwrap())
}

fn put(b: &mut [u8], off: usize, width: usize, v: u64) {
    match width {
        4 => b[off..off + 4].copy_from_slice(&(v as u32).to_ne_bytes()),
        _ => b[off..off + 8].copy_from_slice(&v.to_ne_bytes()),
    }
}

/// Whether a corruption must be refused (a count, size or offset) or may be accepted (a counter,
/// which any value is valid for): then every read must still be bounded.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Expect {
    Refused,
    Bounded,
}

/// Every count, size and offset of the layout the reader follows: `(what, offset, width, expect)`.
fn fields(img: &[u8]) -> Vec<(String, usize, usize, Expect)> {
    use Expect::*;
    let mut v = Vec::new();
    v.push(("header.header_size".into(), header::HEADER_SIZE, 4, Refused));
    v.push(("header.total_size".into(), header::TOTAL_SIZE, 8, Refused));
    for t in Table::ALL {
        let d = t.descriptor();
        let n = t.as_str();
        v.push((format!("{n} table count"), d + table::COUNT, 4, Refused));
        v.push((
            format!("{n} table capacity"),
            t.capacity_field(),
            4,
            Refused,
        ));
        v.push((
            format!("{n} table record_size"),
            d + table::RECORD_SIZE,
            4,
            Refused,
        ));
        v.push((format!("{n} table offset"), d + table::OFFSET, 8, Refused));
    }
    let first = |t: Table| u64_at(img, t.descriptor() + table::OFFSET) as usize;
    let stride = |t: Table| {
        u32::from_ne_bytes(
            img[t.descriptor() + table::RECORD_SIZE..][..4]
                .try_into()
                .unwrap(),
        ) as usize
    };
    let comp = first(Table::Components);
    for (name, off) in [
        ("pins", c::PINS),
        ("params", c::PARAMS),
        ("functions", c::FUNCTIONS),
    ] {
        v.push((format!("component.{name}"), comp + off, 4, Refused));
    }
    let sig = first(Table::Signals);
    for (name, off) in [
        ("writers", sg::WRITERS),
        ("readers", sg::READERS),
        ("bidirs", sg::BIDIRS),
    ] {
        v.push((format!("signal.{name}"), sig + off, 4, Refused));
    }
    v.push((
        "function.position".into(),
        first(Table::Functions) + f::POSITION,
        4,
        Refused,
    ));
    for i in 0..2 {
        let thread = first(Table::Threads) + i * stride(Table::Threads);
        v.push((
            format!("thread {i}.functions"),
            thread + th::FUNCTIONS,
            4,
            Refused,
        ));
        v.push((format!("thread {i}.stats"), thread + th::STATS, 8, Refused));
        let stats = u64_at(img, thread + th::STATS) as usize;
        v.push((
            format!("thread {i} stats.bin_count"),
            stats + st::BIN_COUNT,
            8,
            Refused,
        ));
        v.push((
            format!("thread {i} stats.spike_ring_len"),
            stats + st::SPIKE_RING_LEN,
            8,
            Refused,
        ));
        v.push((
            format!("thread {i} stats.spikes_total"),
            stats + st::SPIKES_TOTAL,
            8,
            Bounded,
        ));
    }
    v
}

/// The extreme values a field of `width` bytes gets.
fn values(width: usize) -> Vec<u64> {
    if width == 4 {
        vec![u32::MAX as u64, u32::MAX as u64 - 1, 1 << 31, 1 << 16]
    } else {
        vec![
            u64::MAX,
            u64::MAX - 7,
            1 << 63,
            u32::MAX as u64,
            (u32::MAX as u64 + 1) * 8,
        ]
    }
}

/// `VmHWM` (peak resident set) of this process, KiB.
fn vm_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|r| r.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"))
}

/// Everything a tool reads; returns the first error (`None`: all of it was accepted).
fn read_all(bytes: &[u8]) -> Option<HalError> {
    let r = match HalReader::from_bytes(bytes) {
        Ok(r) => r,
        Err(e) => return Some(e),
    };
    let mut first = None;
    let mut note = |e: HalError| {
        first.get_or_insert(e);
    };
    if let Err(e) = r.snapshot() {
        note(e);
    }
    match r.threads() {
        Ok(ts) => {
            for t in ts {
                for res in [
                    r.thread_stats(&t.name).map(|_| ()),
                    r.histogram(&t.name).map(|_| ()),
                    r.spikes_since(&t.name, 0).map(|_| ()),
                    r.thread_named(&t.name).map(|_| ()),
                ] {
                    if let Err(e) = res {
                        note(e);
                    }
                }
            }
        }
        Err(e) => note(e),
    }
    for res in [
        r.functions().map(|_| ()),
        r.components().map(|_| ()),
        r.pins().map(|_| ()),
        r.signals().map(|_| ()),
        r.function_named("a.f").map(|_| ()),
    ] {
        if let Err(e) = res {
            note(e);
        }
    }
    first
}

/// The child: overwrites one field with each extreme value in turn and reports, one line each,
/// then its peak memory growth.
fn child(case: &str) {
    let (off, width) = case.split_once(':').unwrap();
    let (off, width): (usize, usize) = (off.parse().unwrap(), width.parse().unwrap());
    let img = std::fs::read(std::env::var(IMAGE).unwrap()).unwrap();
    let vm_size = vm_kib("VmSize:") * 1024;
    let limit = libc::rlimit {
        rlim_cur: vm_size + AS_HEADROOM,
        rlim_max: vm_size + AS_HEADROOM,
    };
    // SAFETY: setrlimit with a valid, initialized rlimit struct; it only lowers this process's limit.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) }, 0);
    let before = vm_kib("VmHWM:");
    let start = Instant::now();
    for v in values(width) {
        let mut b = img.clone();
        put(&mut b, off, width, v);
        let t = Instant::now();
        let outcome = match read_all(&b) {
            Some(HalError::Corrupt { reason }) => format!("corrupt: {reason}"),
            Some(e) => format!("other: {e}"),
            None => "accepted".into(),
        };
        println!(
            "RESULT {v:#x} {:.1}ms {}",
            t.elapsed().as_secs_f64() * 1e3,
            outcome.replace('\n', " ")
        );
    }
    println!(
        "GROWTH {} {:.3}",
        vm_kib("VmHWM:").saturating_sub(before),
        start.elapsed().as_secs_f64()
    );
}

/// A temporary file removed on drop.
struct TempFile(std::path::PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn every_count_at_its_maximum_is_refused_in_bounded_time_and_memory() {
    if let Ok(case) = std::env::var(CASE) {
        return child(&case);
    }
    let img = valid_image();
    assert!(read_all(&img).is_none(), "the valid image is not read back");
    let file =
        TempFile(std::env::temp_dir().join(format!("rtapi-counts-{}.img", std::process::id())));
    std::fs::write(&file.0, &img).unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut failures = Vec::new();
    let all = fields(&img);
    for (what, off, width, expect) in &all {
        let out = Command::new(&exe)
            .args([
                "--exact",
                "every_count_at_its_maximum_is_refused_in_bounded_time_and_memory",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CASE, format!("{off}:{width}"))
            .env(IMAGE, &file.0)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            failures.push(format!(
                "{what}: the child failed ({}): {}{}",
                out.status,
                stdout,
                String::from_utf8_lossy(&out.stderr)
            ));
            continue;
        }
        for line in stdout.lines().filter_map(|l| l.strip_prefix("RESULT ")) {
            println!("{what} = {line}");
            let refused = line.contains(" corrupt: ");
            let accepted = line.ends_with(" accepted");
            match expect {
                Expect::Refused if !refused => {
                    failures.push(format!("{what}: not refused as corrupt: {line}"))
                }
                Expect::Bounded if !refused && !accepted => failures.push(format!(
                    "{what}: neither read nor refused as corrupt: {line}"
                )),
                _ => {}
            }
        }
        let growth = stdout
            .lines()
            .find_map(|l| l.strip_prefix("GROWTH "))
            .unwrap_or_else(|| panic!("{what}: no GROWTH line in {stdout}"));
        let (kib, secs) = growth.split_once(' ').unwrap();
        let (kib, secs): (u64, f64) = (kib.parse().unwrap(), secs.parse().unwrap());
        println!(
            "{what}: peak memory +{kib} KiB (bound {MAX_GROWTH_KIB}), {secs:.3} s (bound {:?})",
            MAX_TIME
        );
        if kib > MAX_GROWTH_KIB {
            failures.push(format!("{what}: peak memory grew by {kib} KiB"));
        }
        if secs > MAX_TIME.as_secs_f64() {
            failures.push(format!("{what}: took {secs} s"));
        }
    }
    assert!(all.len() > 30, "only {} fields", all.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
