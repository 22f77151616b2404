//! Bounded fuzzing of the reader: corrupted, truncated and foreign segments give errors, never panics.

mod common;

use std::time::{Duration, Instant};

use common::{shm_path, unique_instance, write_shm, Cleanup};
use rtapi_hal::layout::{header, table, Table};
use rtapi_hal::*;

/// A valid segment with every kind of object and some recorded stats, as bytes.
fn valid_image() -> Vec<u8> {
    let inst = unique_instance("fuzzsrc");
    let _c = Cleanup(inst.clone());
    let mut b = HalBuilder::new(&inst).unwrap();
    let c = b.component("c").unwrap();
    let d = b.component("d").unwrap();
    b.pin::<Out, f64>(c, "c.out").unwrap();
    b.pin::<In, f64>(d, "d.in").unwrap();
    b.pin::<In, u32>(d, "d.free").unwrap();
    b.pin::<Io, bool>(d, "d.io").unwrap();
    b.param(c, "c.gain", ParamAccess::Rw, 1.5f64).unwrap();
    b.param(d, "d.ro", ParamAccess::Ro, -3i32).unwrap();
    b.function(c, "c.f").unwrap();
    b.function(d, "d.f").unwrap();
    let t = b
        .thread(
            ThreadConfig::new("servo", 1_000_000).histogram(HistogramConfig {
                bin_ns: 1000,
                bins: 16,
            }),
        )
        .unwrap();
    b.thread(
        ThreadConfig::new("base", 25_000).histogram(HistogramConfig {
            bin_ns: 100,
            bins: 4,
        }),
    )
    .unwrap();
    b.addf("c.f", "servo", None).unwrap();
    b.addf("d.f", "base", None).unwrap();
    b.net("sig", "c.out").unwrap();
    b.net("sig", "d.in").unwrap();
    b.net("bidir", "d.io").unwrap();
    b.signal("free", ValueType::S64).unwrap();
    let hal = b.build().unwrap();
    let w = hal.stats_writer(t).unwrap();
    for i in 0..50 {
        w.record(&PeriodSample {
            latency_ns: i * 700 - 100,
            interval_ns: 1_000_000,
            missed: (i % 17 == 0) as u64,
            ..Default::default()
        });
        w.record_function(0, 5, 0);
    }
    std::fs::read(shm_path(&inst)).unwrap()
}

/// Every read and write a tool might do; the results don't matter, only that nothing panics.
fn exercise(bytes: &[u8]) -> bool {
    let Ok(r) = HalReader::from_bytes(bytes) else {
        return false;
    };
    let _ = r.header();
    let _ = r.snapshot();
    let _ = r.pin_values();
    let _ = r.components();
    let _ = r.functions();
    if let Ok(ts) = r.threads() {
        for t in ts {
            let _ = r.thread_stats(&t.name).map(|s| {
                (
                    s.latency_mean(),
                    s.latency_stddev(),
                    s.worst_spikes().count(),
                )
            });
            if let Ok(h) = r.histogram(&t.name) {
                let _ = h.percentiles().map(|p| p.p999.clamp_ns(0, 10));
            }
        }
    }
    for name in [
        "c.out", "d.in", "d.free", "d.io", "c.gain", "d.ro", "sig", "free", "bidir", "c.f", "servo",
    ] {
        let _ = r.get(name);
        let _ = r.setp(name, "1");
        let _ = r.sets(name, "1");
        let _ = r.function_named(name);
        let _ = r.thread_named(name);
        let _ = r.pin_named(name);
        let _ = r.param_named(name);
        let _ = r.signal_named(name);
    }
    true
}

/// xorshift64*: deterministic, so a failure reproduces from the printed seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn put_u64(b: &mut [u8], off: usize, v: u64) {
    if off + 8 <= b.len() {
        b[off..off + 8].copy_from_slice(&v.to_ne_bytes());
    }
}

#[test]
fn valid_image_reads_back() {
    let img = valid_image();
    assert!(exercise(&img));
    let r = HalReader::from_bytes(&img).unwrap();
    assert_eq!(r.pins().unwrap().len(), 4);
    assert_eq!(r.thread_stats("servo").unwrap().cycles, 50);
}

#[test]
fn random_corruption_never_panics() {
    let img = valid_image();
    let words = img.len() / 8;
    let interesting = |rng: &mut Rng| -> u64 {
        let len = img.len() as u64;
        [
            0,
            1,
            7,
            8,
            u64::MAX,
            u64::MAX - 7,
            1 << 63,
            len,
            len - 8,
            len + 8,
            u32::MAX as u64,
            256,
            rng.next(),
        ][rng.below(13)]
    };
    let seed = 0x5eed_f7a1_u64;
    let mut rng = Rng(seed);
    let (mut accepted, mut iterations) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline && iterations < 20_000 {
        iterations += 1;
        let mut b = img.clone();
        for _ in 0..1 + rng.below(4) {
            if b.is_empty() {
                break;
            }
            match rng.below(6) {
                0 => {
                    let i = rng.below(b.len());
                    b[i] ^= 1 << rng.below(8);
                }
                1 => put_u64(&mut b, rng.below(words) * 8, interesting(&mut rng)),
                // Aim at the header's table descriptors and sizes, where offsets come from.
                2 => {
                    let t = Table::ALL[rng.below(6)];
                    let off = t.descriptor() + [table::OFFSET, table::COUNT][rng.below(2)];
                    put_u64(&mut b, off, interesting(&mut rng));
                }
                3 => put_u64(
                    &mut b,
                    [header::TOTAL_SIZE, header::VERSION, header::STATE][rng.below(3)],
                    interesting(&mut rng),
                ),
                4 => b.truncate(rng.below(b.len() + 1)),
                _ => {
                    let i = rng.below(b.len());
                    b[i] = rng.next() as u8;
                }
            }
        }
        accepted += usize::from(exercise(&b));
    }
    println!(
        "{iterations} corrupted segments (seed {seed:#x}), {accepted} still accepted by validation"
    );
    assert!(iterations > 100, "fuzzing barely ran");
}

#[test]
fn every_truncation_is_an_error_or_complete() {
    let img = valid_image();
    for len in (0..img.len()).step_by(8) {
        let r = HalReader::from_bytes(&img[..len]);
        assert!(r.is_err(), "truncated to {len} bytes but accepted");
    }
}

#[test]
fn header_problems_have_specific_errors() {
    let img = valid_image();
    let mut newer = img.clone();
    newer[header::VERSION..header::VERSION + 4].copy_from_slice(&((3u32 << 16) | 3).to_ne_bytes());
    let e = HalReader::from_bytes(&newer).err().unwrap();
    assert!(
        matches!(
            e,
            HalError::UnsupportedVersion {
                found_major: 3,
                found_minor: 3,
                ..
            }
        ),
        "{e}"
    );
    // A 1.x segment (64-bit cells, fixed structure) is refused by a 2.0 reader.
    let mut older = img.clone();
    older[header::VERSION..header::VERSION + 4].copy_from_slice(&((1u32 << 16) | 3).to_ne_bytes());
    assert!(matches!(
        HalReader::from_bytes(&older),
        Err(HalError::UnsupportedVersion { found_major: 1, .. })
    ));

    let mut minor = img.clone();
    minor[header::VERSION..header::VERSION + 4].copy_from_slice(&((2u32 << 16) | 9).to_ne_bytes());
    assert!(
        HalReader::from_bytes(&minor).is_ok(),
        "a newer minor is readable"
    );

    let mut swapped = img.clone();
    put_u64(
        &mut swapped,
        header::BYTE_ORDER,
        layout::BYTE_ORDER_MARK.swap_bytes(),
    );
    assert!(matches!(
        HalReader::from_bytes(&swapped),
        Err(HalError::Foreign { .. })
    ));

    let mut building = img.clone();
    put_u64(&mut building, header::STATE, layout::state::BUILDING);
    assert!(matches!(
        HalReader::from_bytes(&building),
        Err(HalError::NotReady { .. })
    ));

    let e = HalReader::from_bytes(&img[..img.len() - 8]).err().unwrap();
    assert!(e.to_string().contains("truncated"), "{e}");

    let mut bad_ref = img.clone();
    let pins =
        u64::from_ne_bytes(img[Table::Pins.descriptor()..][..8].try_into().unwrap()) as usize;
    put_u64(&mut bad_ref, pins + layout::pin::COMPONENT, pins as u64 + 4);
    let e = HalReader::from_bytes(&bad_ref).err().unwrap();
    assert!(e.to_string().contains("not a component record"), "{e}");
    assert!(e.to_string().contains("refused: "), "{e}");
}

#[test]
fn foreign_files_in_dev_shm_are_refused_and_left_alone() {
    let inst = unique_instance("foreign");
    let _c = Cleanup(inst.clone());
    let path = shm_path(&inst);
    write_shm(&path, b"not a HAL segment at all, just some bytes");
    let e = HalReader::open(&inst, Access::ReadOnly).err().unwrap();
    assert!(matches!(e, HalError::Foreign { .. }), "{e}");
    write_shm(&path, &[0x41u8; 4096]);
    let e = HalReader::open(&inst, Access::ReadOnly).err().unwrap();
    assert!(matches!(e, HalError::Foreign { .. }), "{e}");
    // An owner does not delete a stranger's file either.
    let e = HalBuilder::new(&inst).unwrap().build().err().unwrap();
    assert!(matches!(e, HalError::Foreign { .. }), "{e}");
    assert!(path.exists());

    // The leftovers of an owner that died while creating (empty, or sized but unwritten) are reclaimed.
    for leftover in [vec![], vec![0u8; 4096]] {
        write_shm(&path, &leftover);
        let e = HalReader::open(&inst, Access::ReadOnly).err().unwrap();
        assert!(
            matches!(e, HalError::Foreign { .. } | HalError::NotReady { .. }),
            "{e}"
        );
        let hal = HalBuilder::new(&inst).unwrap().build().unwrap();
        drop(hal);
    }

    // A real segment truncated on disk: the header's size is checked against the file's.
    let img = valid_image();
    write_shm(&path, &img[..img.len() / 2]);
    let e = HalReader::open(&inst, Access::ReadOnly).err().unwrap();
    assert!(matches!(e, HalError::Corrupt { .. }), "{e}");
    // ... and a dead owner's complete segment is reclaimed by a new owner.
    write_shm(&path, &img);
    HalBuilder::new(&inst).unwrap().build().unwrap();
}
