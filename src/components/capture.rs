//! `sampler` and `streamer`: LinuxCNC's real-time ends of a sample FIFO, each instance with its own
//! lock-free ring in shared memory (`/dev/shm/rtapi-<instance>:sampler.0`, format in `hal/LAYOUT.md`
//! §12, code in `rtapi_hal::fifo`). `rtapi sample` reads a sampler's ring, `rtapi stream` feeds a
//! streamer's.
//!
//! `loadrt sampler cfg=ffbs,u depth=1000,50` makes `sampler.0` (four channels) and `sampler.1` (one):
//! one instance per `cfg=` string, each letter a channel (`b` bit, `f` float, `s` s32, `u` u32, either
//! case, as LinuxCNC 2.9 accepts); `depth=` is the ring's capacity in samples, one value for all or one
//! per instance (default 16).
//!
//! | name                    | kind     | type  | dir | default | meaning                                  |
//! |-------------------------|----------|-------|-----|---------|------------------------------------------|
//! | `sampler.N.pin.M`       | pin      | cfg   | IN  | 0       | channel M                                |
//! | `sampler.N.enable`      | pin      | bit   | IN  | TRUE    | FALSE: no sample taken                   |
//! | `sampler.N.curr-depth`  | pin      | s32   | OUT |         | samples waiting in the ring              |
//! | `sampler.N.full`        | pin      | bit   | OUT |         | the ring is full                         |
//! | `sampler.N.overruns`    | pin      | s32   | I/O | 0       | samples dropped because the ring was full |
//! | `sampler.N.sample-num`  | pin      | s32   | I/O | 0       | number of the next sample                |
//! | `streamer.N.pin.M`      | pin      | cfg   | OUT |         | channel M of the last record taken       |
//! | `streamer.N.enable`     | pin      | bit   | IN  | TRUE    | FALSE: nothing taken, pins kept          |
//! | `streamer.N.clock`      | pin      | bit   | IN  | FALSE   | see `clock-mode`                         |
//! | `streamer.N.clock-mode` | pin      | s32   | IN  | 0       | 0 every call, 1 falling, 2 rising, 3 any edge of `clock` |
//! | `streamer.N.curr-depth` | pin      | s32   | OUT |         | records waiting in the ring              |
//! | `streamer.N.empty`      | pin      | bit   | OUT | TRUE    | the last call that wanted a record found none |
//! | `streamer.N.underruns`  | pin      | s32   | I/O | 0       | calls that wanted a record and found none |
//! | `<instance>`            | function |       |     |         | one sample in, or one record out         |
//!
//! The sampler takes one sample per call while `enable` is TRUE, numbered by `sample-num` (which
//! counts every sample, dropped ones too, so a reader sees a gap). A full ring drops the sample and
//! counts it in `overruns`: nothing is overwritten, nothing waits. The streamer takes one record per
//! call (or per clock edge) while enabled; an empty ring leaves the pins as they were, sets `empty`
//! and counts an underrun. The pins of `overruns`, `sample-num` and `underruns` are I/O as in 2.9, so
//! `setp` can reset them (a reset `sample-num` reads as a gap: `rtapi sample` prints `overrun` there).
//!
//! The ring is created when the function is made (at `start`, or at once by a live `loadrt`) and
//! removed when it is unloaded (its function retired) or the instance ends. A ring that cannot be created (a live process already has that
//! name) is logged at start; the function then drops every sample (sampler: `full`, `overruns`) or
//! finds nothing (streamer: `empty`, `underruns`).

use rtapi_hal::fifo::{parse_cfg, FifoKind, OwnedFifo, MAX_CHANNELS, MAX_DATA_BYTES};
use rtapi_hal::{In, Io, Out, Pin, PinKey, ValueType};

use super::{Component, LoadContext, LoadError};

/// Ring capacity when `depth=` is not given.
pub(super) const DEFAULT_DEPTH: usize = 16;

/// One typed channel pin, by direction.
enum Chan<D: rtapi_hal::Direction> {
    Bit(Pin<D, bool>),
    Float(Pin<D, f64>),
    S32(Pin<D, i32>),
    U32(Pin<D, u32>),
}

#[derive(Clone, Copy)]
enum ChanKey<D: rtapi_hal::Direction> {
    Bit(PinKey<D, bool>),
    Float(PinKey<D, f64>),
    S32(PinKey<D, i32>),
    U32(PinKey<D, u32>),
}

impl<D: rtapi_hal::Direction> ChanKey<D> {
    fn declare(ctx: &mut LoadContext<'_>, m: usize, ty: ValueType) -> Result<Self, LoadError> {
        let name = format!("pin.{m}");
        Ok(match ty {
            ValueType::Bit => ChanKey::Bit(ctx.pin::<D, bool>(&name)?),
            ValueType::Float => ChanKey::Float(ctx.pin::<D, f64>(&name)?),
            ValueType::S32 => ChanKey::S32(ctx.pin::<D, i32>(&name)?),
            _ => ChanKey::U32(ctx.pin::<D, u32>(&name)?),
        })
    }

    fn resolve(self, hal: &rtapi_hal::Hal) -> Chan<D> {
        match self {
            ChanKey::Bit(k) => Chan::Bit(hal.pin(k)),
            ChanKey::Float(k) => Chan::Float(hal.pin(k)),
            ChanKey::S32(k) => Chan::S32(hal.pin(k)),
            ChanKey::U32(k) => Chan::U32(hal.pin(k)),
        }
    }
}

impl<D: rtapi_hal::Direction> Chan<D> {
    #[inline(always)]
    fn bits(&self) -> u64 {
        use rtapi_hal::HalType;
        match self {
            Chan::Bit(p) => p.get().to_bits(),
            Chan::Float(p) => p.get().to_bits(),
            Chan::S32(p) => p.get().to_bits(),
            Chan::U32(p) => p.get().to_bits(),
        }
    }
}

impl Chan<Out> {
    #[inline(always)]
    fn set_bits(&self, bits: u64) {
        use rtapi_hal::HalType;
        match self {
            Chan::Bit(p) => p.set(bool::from_bits(bits)),
            Chan::Float(p) => p.set(f64::from_bits(bits)),
            Chan::S32(p) => p.set(i32::from_bits(bits)),
            Chan::U32(p) => p.set(u32::from_bits(bits)),
        }
    }
}

/// This instance's channel types and ring depth, checked at load (so that `halrun --check` and a dry
/// run refuse what the real start would).
fn geometry(ctx: &LoadContext<'_>) -> Result<(Vec<ValueType>, usize), LoadError> {
    let cfg: String = ctx.arg("cfg")?.unwrap_or_default();
    let types = parse_cfg(cfg.trim())
        .map_err(|e| LoadError::new(format!("{}: cfg={cfg}: {e}", ctx.instance())))?;
    let depth: usize = ctx.arg("depth")?.unwrap_or(DEFAULT_DEPTH);
    let max = MAX_DATA_BYTES / 8 / (types.len() + 1);
    if depth == 0 || depth > max {
        return Err(LoadError::new(format!(
            "{}: depth={depth}: give 1 to {max} samples for {} channels",
            ctx.instance(),
            types.len()
        )));
    }
    debug_assert!(types.len() <= MAX_CHANNELS);
    Ok((types, depth))
}

/// Creates the ring, or logs why not (at start, never on the RT path).
fn ring(
    hal: &rtapi_hal::Hal,
    fifo: &str,
    kind: FifoKind,
    types: &[ValueType],
    depth: usize,
) -> Option<OwnedFifo> {
    match OwnedFifo::create(hal.instance(), fifo, kind, types, depth) {
        Ok(f) => Some(f),
        Err(e) => {
            log::error!("{fifo}: no sample FIFO, the function will do nothing: {e}");
            None
        }
    }
}

/// Saturating conversion for `curr-depth`.
#[inline(always)]
fn depth_pin(n: u64) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// `sampler`: HAL pins → a FIFO another process reads.
pub(crate) struct Sampler;

impl Component for Sampler {
    const NAME: &'static str = "sampler";
    const SUMMARY: &'static str =
        "samples pins into a shared-memory FIFO that `rtapi sample` reads";
    const ARGS: &'static [&'static str] = &["cfg", "depth"];
    const INSTANCES_ARG: Option<&'static str> = Some("cfg");

    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let (types, depth) = geometry(ctx)?;
        let keys = types
            .iter()
            .enumerate()
            .map(|(m, t)| ChanKey::<In>::declare(ctx, m, *t))
            .collect::<Result<Vec<_>, _>>()?;
        let curr_depth = ctx.pin::<Out, i32>("curr-depth")?;
        let full = ctx.pin::<Out, bool>("full")?;
        let enable = ctx.pin_with_default::<In, bool>("enable", true)?;
        let overruns = ctx.pin::<Io, i32>("overruns")?;
        let sample_num = ctx.pin::<Io, i32>("sample-num")?;
        let fifo_name = ctx.instance().to_string();
        ctx.instance_function(move |hal| {
            let chans: Vec<Chan<In>> = keys.into_iter().map(|k| k.resolve(hal)).collect();
            let (curr_depth, full, enable) = (hal.pin(curr_depth), hal.pin(full), hal.pin(enable));
            let (overruns, sample_num) = (hal.pin(overruns), hal.pin(sample_num));
            let fifo = ring(hal, &fifo_name, FifoKind::Sampler, &types, depth);
            let depth = depth as u64;
            Box::new(move |_| {
                let Some(fifo) = &fifo else {
                    full.set(true);
                    if enable.get() {
                        overruns.set(overruns.get().wrapping_add(1));
                    }
                    return;
                };
                if enable.get() {
                    let n = sample_num.get();
                    if !fifo.push(u64::from(n as u32), chans.iter().map(Chan::bits)) {
                        overruns.set(overruns.get().wrapping_add(1));
                    }
                    sample_num.set(n.wrapping_add(1));
                }
                let waiting = fifo.len();
                curr_depth.set(depth_pin(waiting));
                full.set(waiting >= depth);
            })
        })
    }
}

/// `streamer`: a FIFO another process writes → HAL pins.
pub(crate) struct Streamer;

impl Component for Streamer {
    const NAME: &'static str = "streamer";
    const SUMMARY: &'static str =
        "writes records from a shared-memory FIFO that `rtapi stream` feeds to pins";
    const ARGS: &'static [&'static str] = &["cfg", "depth"];
    const INSTANCES_ARG: Option<&'static str> = Some("cfg");

    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let (types, depth) = geometry(ctx)?;
        let keys = types
            .iter()
            .enumerate()
            .map(|(m, t)| ChanKey::<Out>::declare(ctx, m, *t))
            .collect::<Result<Vec<_>, _>>()?;
        let curr_depth = ctx.pin::<Out, i32>("curr-depth")?;
        let empty = ctx.pin_with_default::<Out, bool>("empty", true)?;
        let enable = ctx.pin_with_default::<In, bool>("enable", true)?;
        let underruns = ctx.pin::<Io, i32>("underruns")?;
        let clock = ctx.pin::<In, bool>("clock")?;
        let clock_mode = ctx.pin::<In, i32>("clock-mode")?;
        let fifo_name = ctx.instance().to_string();
        ctx.instance_function(move |hal| {
            let chans: Vec<Chan<Out>> = keys.into_iter().map(|k| k.resolve(hal)).collect();
            let (curr_depth, empty, enable) =
                (hal.pin(curr_depth), hal.pin(empty), hal.pin(enable));
            let (underruns, clock, clock_mode) =
                (hal.pin(underruns), hal.pin(clock), hal.pin(clock_mode));
            let fifo = ring(hal, &fifo_name, FifoKind::Streamer, &types, depth);
            let mut record = [0u64; MAX_CHANNELS + 1];
            let record_len = types.len() + 1;
            let mut last_clock = clock.get();
            Box::new(move |_| {
                let c = clock.get();
                let edge = match clock_mode.get() {
                    1 => last_clock && !c,
                    2 => !last_clock && c,
                    3 => last_clock != c,
                    _ => true,
                };
                last_clock = c;
                if !(enable.get() && edge) {
                    if let Some(fifo) = &fifo {
                        curr_depth.set(depth_pin(fifo.len()));
                    }
                    return;
                }
                let got = fifo
                    .as_ref()
                    .is_some_and(|f| f.pop(&mut record[..record_len]));
                if got {
                    for (chan, bits) in chans.iter().zip(&record[1..record_len]) {
                        chan.set_bits(*bits);
                    }
                } else {
                    underruns.set(underruns.get().wrapping_add(1));
                }
                empty.set(!got);
                curr_depth.set(fifo.as_ref().map_or(0, |f| depth_pin(f.len())));
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::Harness;
    use rtapi_hal::fifo::FifoKind;
    use rtapi_hal::{FifoClient, Trust, Value};

    fn instance(tag: &str) -> String {
        format!("cap-{tag}-{}", std::process::id())
    }

    #[test]
    fn sampler_fills_counts_overruns_and_stops_when_disabled() {
        let name = instance("s");
        let mut h = Harness::new(&name).unwrap();
        h.loadrt("sampler cfg=fbsu depth=3").unwrap();
        h.start().unwrap();
        h.set("sampler.0.pin.0", "-2.5").unwrap();
        h.set("sampler.0.pin.1", "1").unwrap();
        h.set("sampler.0.pin.2", "-7").unwrap();
        h.set("sampler.0.pin.3", "4000000000").unwrap();
        for _ in 0..5 {
            h.step(1_000_000);
        }
        assert_eq!(h.get("sampler.0.curr-depth").unwrap(), Value::S32(3));
        assert_eq!(h.get("sampler.0.full").unwrap(), Value::Bit(true));
        assert_eq!(h.get("sampler.0.overruns").unwrap(), Value::S32(2));
        assert_eq!(h.get("sampler.0.sample-num").unwrap(), Value::S32(5));
        let c = FifoClient::open(&name, "sampler.0", FifoKind::Sampler, &Trust::new()).unwrap();
        let (n, v) = c.pop().unwrap().unwrap();
        assert_eq!(n, 0);
        assert_eq!(
            v,
            [
                Value::Float(-2.5),
                Value::Bit(true),
                Value::S32(-7),
                Value::U32(4_000_000_000)
            ]
        );
        h.set("sampler.0.enable", "0").unwrap();
        h.step(1_000_000);
        assert_eq!(h.get("sampler.0.curr-depth").unwrap(), Value::S32(2));
        assert_eq!(h.get("sampler.0.sample-num").unwrap(), Value::S32(5));
        assert_eq!(h.get("sampler.0.overruns").unwrap(), Value::S32(2));
        // A second reader is refused while the first holds it.
        assert!(FifoClient::open(&name, "sampler.0", FifoKind::Sampler, &Trust::new()).is_err());
        assert!(FifoClient::open(&name, "sampler.0", FifoKind::Streamer, &Trust::new()).is_err());
    }

    #[test]
    fn streamer_writes_records_counts_underruns_and_follows_the_clock() {
        let name = instance("t");
        let mut h = Harness::new(&name).unwrap();
        h.loadrt("streamer cfg=fs depth=4").unwrap();
        h.start().unwrap();
        let c = FifoClient::open(&name, "streamer.0", FifoKind::Streamer, &Trust::new()).unwrap();
        for i in 0..5 {
            let full = !c.push(&[Value::Float(i as f64), Value::S32(-i)]).unwrap();
            assert_eq!(full, i == 4, "record {i}");
        }
        h.step(1_000_000);
        assert_eq!(h.get("streamer.0.pin.0").unwrap(), Value::Float(0.0));
        assert_eq!(h.get("streamer.0.curr-depth").unwrap(), Value::S32(3));
        assert_eq!(h.get("streamer.0.empty").unwrap(), Value::Bit(false));
        // Rising edges only.
        h.set("streamer.0.clock-mode", "2").unwrap();
        h.step(1_000_000);
        assert_eq!(h.get("streamer.0.pin.1").unwrap(), Value::S32(0));
        h.set("streamer.0.clock", "1").unwrap();
        h.step(1_000_000);
        assert_eq!(h.get("streamer.0.pin.1").unwrap(), Value::S32(-1));
        h.step(1_000_000);
        assert_eq!(h.get("streamer.0.pin.1").unwrap(), Value::S32(-1));
        h.set("streamer.0.clock-mode", "0").unwrap();
        h.set("streamer.0.enable", "0").unwrap();
        h.step(1_000_000);
        assert_eq!(h.get("streamer.0.pin.1").unwrap(), Value::S32(-1));
        h.set("streamer.0.enable", "1").unwrap();
        for _ in 0..4 {
            h.step(1_000_000);
        }
        assert_eq!(h.get("streamer.0.pin.0").unwrap(), Value::Float(3.0));
        assert_eq!(h.get("streamer.0.empty").unwrap(), Value::Bit(true));
        assert_eq!(h.get("streamer.0.underruns").unwrap(), Value::S32(2));
    }

    #[test]
    fn bad_cfg_and_depth_are_refused_at_load() {
        let mut h = Harness::new(&instance("bad")).unwrap();
        let e = h.loadrt("sampler cfg=fx").unwrap_err();
        assert!(e.message.contains("'x'"), "{e}");
        let e = h.loadrt("streamer cfg=f depth=0").unwrap_err();
        assert!(e.message.contains("depth=0"), "{e}");
        assert!(h.loadrt("sampler").unwrap_err().message.contains("cfg="));
        let mut h = Harness::new(&instance("good")).unwrap();
        let names = h.loadrt("sampler cfg=F,bB depth=5,6").unwrap();
        assert_eq!(names, ["sampler.0", "sampler.1"]);
        assert!(h.declared().pins.contains_key("sampler.1.pin.1"));
    }

    #[test]
    fn the_fifo_file_is_removed_with_the_instance() {
        let name = instance("rm");
        let path = format!("/dev/shm/rtapi-{name}:sampler.0");
        {
            let mut h = Harness::new(&name).unwrap();
            h.loadrt("sampler cfg=f").unwrap();
            h.start().unwrap();
            let meta = std::fs::metadata(&path).unwrap();
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        }
        assert!(!std::path::Path::new(&path).exists());
    }
}
