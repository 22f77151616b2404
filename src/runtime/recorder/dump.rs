//! A recorder dump: per thread a CSV (one row per period, missed periods as rows of their own) and an
//! SVG (latency over time, the event marked, the recorded pins below), and one JSON (what froze it,
//! when, in which thread, a summary per thread) written last. Every file is written to a temporary
//! name (`O_EXCL`) and renamed without replacing (`renameat2(RENAME_NOREPLACE)`): a dump never
//! overwrites another, and a reader never sees half a file.

use super::{Event, Record, RecorderConfig, Trigger};
use crate::rt::clock::Nanos;
use plotters::prelude::*;
use std::ffi::CString;
use std::fmt::Write as _;
use std::io::Write as _;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// One thread's records, oldest first.
pub struct ThreadRecords {
    /// The thread.
    pub name: String,
    /// Its period.
    pub period: Nanos,
    /// Its records.
    pub records: Vec<Record>,
}

/// Why a dump was not written.
#[derive(Debug, Clone)]
pub enum DumpError {
    /// A file or the directory could not be made or written (a dump never replaces a file).
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why (shared: the result is handed to every requester).
        source: std::sync::Arc<std::io::Error>,
    },
    /// A file's content could not be rendered (the plot, the JSON summary).
    Render {
        /// `svg` or `json`.
        what: &'static str,
        /// The renderer's own message.
        message: String,
    },
    /// [`Recorder::dump_now`](super::Recorder::dump_now): no dump within the limit.
    Timeout {
        /// How long it waited.
        limit: std::time::Duration,
    },
}

impl std::fmt::Display for DumpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DumpError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            DumpError::Render { what, message } => write!(f, "{what}: {message}"),
            DumpError::Timeout { limit } => write!(
                f,
                "no dump within {} ms (is an RT thread stopped?)",
                limit.as_millis()
            ),
        }
    }
}

impl std::error::Error for DumpError {}

/// Equal when they say the same: an I/O error by its path and kind.
impl PartialEq for DumpError {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (DumpError::Io { path, source }, DumpError::Io { path: p, source: s }) => {
                path == p && source.kind() == s.kind()
            }
            (
                DumpError::Render { what, message },
                DumpError::Render {
                    what: w,
                    message: m,
                },
            ) => what == w && message == m,
            (DumpError::Timeout { limit }, DumpError::Timeout { limit: l }) => limit == l,
            _ => false,
        }
    }
}

impl Eq for DumpError {}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> DumpError + '_ {
    move |e| DumpError::Io {
        path: path.to_path_buf(),
        source: std::sync::Arc::new(e),
    }
}

/// Writes the dump into `dir` (created if missing); gives the JSON first, then the other files.
pub fn write(
    dir: &Path,
    instance: &str,
    trigger: &Trigger,
    pins: &[String],
    config: &RecorderConfig,
    threads: &[ThreadRecords],
) -> Result<Vec<PathBuf>, DumpError> {
    std::fs::create_dir_all(dir).map_err(io_error(dir))?;
    let now = std::time::SystemTime::now();
    let stamp = utc_stamp(now);
    // The event's wall-clock time: now, less how long ago it was on the monotonic clock.
    let ago = (crate::rt::clock::now().as_nanos() - trigger.wake_ns).max(0) as u64;
    let event_utc = utc_stamp(now - std::time::Duration::from_nanos(ago));
    // The first free name: a dump never replaces another (the JSON, written last, claims it).
    let mut n = 0;
    let stem = loop {
        let stem = format!(
            "recorder-{instance}-{stamp}-{}{}",
            trigger.event.name(),
            if n == 0 {
                String::new()
            } else {
                format!("-{n}")
            }
        );
        if !dir.join(format!("{stem}.json")).exists() {
            break stem;
        }
        n += 1;
    };
    let mut files = Vec::new();
    let mut summaries = Vec::new();
    for t in threads {
        let csv_path = dir.join(format!("{stem}.{}.csv", t.name));
        write_new(&csv_path, csv(t, pins).as_bytes())?;
        let svg_path = dir.join(format!("{stem}.{}.svg", t.name));
        let svg = svg(t, pins, trigger, instance).map_err(|e| DumpError::Render {
            what: "svg",
            message: e.to_string(),
        })?;
        write_new(&svg_path, svg.as_bytes())?;
        summaries.push(summary(t, &csv_path, &svg_path));
        files.push(csv_path);
        files.push(svg_path);
    }
    let json = serde_json::json!({
        "instance": instance,
        "written_utc": stamp,
        "trigger": {
            "event": trigger.event.name(),
            "thread": trigger.thread,
            "period": trigger.period,
            "wake_ns": trigger.wake_ns,
            "utc": event_utc,
            "missed": trigger.missed,
            "pin": trigger.pin,
        },
        "window_ns": config.window.as_nanos(),
        "post_ns": config.post.as_nanos(),
        "pins": pins,
        "threads": summaries,
    });
    let json_path = dir.join(format!("{stem}.json"));
    let text = serde_json::to_string_pretty(&json).map_err(|e| DumpError::Render {
        what: "json",
        message: e.to_string(),
    })? + "\n";
    write_new(&json_path, text.as_bytes())?;
    files.insert(0, json_path);
    Ok(files)
}

fn summary(t: &ThreadRecords, csv: &Path, svg: &Path) -> serde_json::Value {
    let r = &t.records;
    serde_json::json!({
        "name": t.name,
        "period_ns": t.period.as_nanos(),
        "records": r.len(),
        "first_period": r.first().map(|x| x.period),
        "last_period": r.last().map(|x| x.period),
        "missed": r.iter().map(|x| x.missed).sum::<u64>(),
        "faulted_periods": r.iter().filter(|x| x.faulted).count(),
        "max_latency_ns": r.iter().map(|x| x.latency_ns).max(),
        "max_exec_ns": r.iter().map(|x| x.exec_ns).max(),
        "csv": csv.file_name().map(|f| f.to_string_lossy().into_owned()),
        "svg": svg.file_name().map(|f| f.to_string_lossy().into_owned()),
    })
}

/// `period,state,wake_ns,latency_ns,exec_ns,missed,fault,<pins…>`: a period that ran is `run`; the
/// periods its overrun skipped follow as `missed` rows, so period numbers are contiguous.
pub fn csv(t: &ThreadRecords, pins: &[String]) -> String {
    let mut s = String::from("period,state,wake_ns,latency_ns,exec_ns,missed,fault");
    for p in pins {
        s.push(',');
        s.push_str(p);
    }
    s.push('\n');
    let blanks = ",".repeat(pins.len());
    for r in &t.records {
        let _ = write!(
            s,
            "{},run,{},{},{},{},{}",
            r.period,
            r.wake_ns,
            r.latency_ns,
            r.exec_ns,
            r.missed,
            u8::from(r.faulted)
        );
        for v in &r.pins {
            let _ = write!(s, ",{v}");
        }
        s.push('\n');
        for m in 1..=r.missed {
            let _ = writeln!(s, "{},missed,,,,,{blanks}", r.period + m);
        }
    }
    s
}

fn svg(
    t: &ThreadRecords,
    pins: &[String],
    trigger: &Trigger,
    instance: &str,
) -> Result<String, Box<dyn std::error::Error>> {
    let mut out = String::new();
    {
        let height = 420 + 160 * pins.len() as u32;
        let root = SVGBackend::with_string(&mut out, (1000, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let title = format!(
            "rtapi recorder: instance {instance}, thread {} ({}), frozen by {}{}",
            t.name,
            t.period,
            trigger.event.name(),
            trigger
                .thread
                .as_ref()
                .map_or(String::new(), |th| format!(" in {th}"))
        );
        let root = root.titled(&title, ("sans-serif", 16))?;
        let areas = if pins.is_empty() {
            vec![root]
        } else {
            let (top, rest) = root.split_vertically(380);
            let mut v = vec![top];
            v.extend(rest.split_evenly((pins.len(), 1)));
            v
        };
        let origin = t.records.first().map_or(0, |r| r.wake_ns);
        let ms = |ns: i64| (ns - origin) as f64 / 1e6;
        let x_max = t.records.last().map_or(1.0, |r| ms(r.wake_ns)).max(1.0);
        let event_x = if trigger.thread.as_deref() == Some(t.name.as_str())
            || trigger.event == Event::Request
            || trigger.event == Event::Stall
        {
            Some(ms(trigger.wake_ns))
        } else {
            None
        };
        let lat_max = t
            .records
            .iter()
            .map(|r| r.latency_ns as f64 / 1000.0)
            .fold(1.0, f64::max);
        let mut chart = ChartBuilder::on(&areas[0])
            .caption(
                "wake latency (µs) over time (ms); red: the event",
                ("sans-serif", 14),
            )
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..x_max, 0.0..lat_max * 1.05)?;
        chart
            .configure_mesh()
            .x_label_formatter(&|v| crate::plot::tick(*v))
            .y_label_formatter(&|v| crate::plot::tick(*v))
            .draw()?;
        chart.draw_series(LineSeries::new(
            t.records
                .iter()
                .map(|r| (ms(r.wake_ns), (r.latency_ns as f64 / 1000.0).max(0.0))),
            &BLUE,
        ))?;
        if let Some(x) = event_x.filter(|x| (0.0..=x_max).contains(x)) {
            chart.draw_series(LineSeries::new(
                [(x, 0.0), (x, lat_max * 1.05)],
                RED.stroke_width(2),
            ))?;
        }
        let channels: Vec<crate::plot::Channel> = pins
            .iter()
            .enumerate()
            .map(|(i, name)| crate::plot::Channel {
                name,
                points: t
                    .records
                    .iter()
                    .filter_map(|r| r.pins.get(i).map(|&v| (ms(r.wake_ns), v)))
                    .collect(),
            })
            .collect();
        crate::plot::channel_panels(
            &areas[1..],
            (0.0, x_max),
            "time (ms)",
            &channels,
            |_| BLACK,
            event_x,
        )?;
        areas[0].present()?;
    }
    Ok(out)
}

/// Writes `bytes` to a new temporary file beside `path` and renames it to `path` unless `path`
/// exists (then it fails and the temporary is removed).
fn write_new(path: &Path, bytes: &[u8]) -> Result<(), DumpError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        path.file_name()
            .map_or("dump".into(), |f| f.to_string_lossy()),
        std::process::id()
    ));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o640)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .map_err(io_error(path))?;
    let written = f.write_all(bytes).and_then(|_| f.sync_all());
    drop(f);
    let renamed = written.and_then(|_| rename_noreplace(&tmp, path));
    if let Err(e) = renamed {
        let _ = std::fs::remove_file(&tmp);
        return Err(io_error(path)(e));
    }
    Ok(())
}

fn rename_noreplace(from: &Path, to: &Path) -> std::io::Result<()> {
    let c = |p: &Path| {
        CString::new(p.as_os_str().as_bytes())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
    };
    let (from, to) = (c(from)?, c(to)?);
    // SAFETY: two NUL-terminated paths that live across the call; AT_FDCWD for relative paths.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// `t` in UTC as `YYYYMMDDTHHMMSS.mmmZ`.
fn utc_stamp(t: std::time::SystemTime) -> String {
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = crate::rt::civil_date::from_days(days);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        d.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missed_periods_are_rows_and_dumps_never_replace_each_other() {
        let rec = |period: u64, missed: u64| Record {
            period,
            wake_ns: period as i64 * 1_000_000,
            latency_ns: 1000,
            exec_ns: 10,
            missed,
            faulted: false,
            pins: vec![1.5],
        };
        let t = ThreadRecords {
            name: "servo".into(),
            period: Nanos::from_millis(1),
            records: vec![rec(1, 0), rec(2, 2), rec(5, 0)],
        };
        let c = csv(&t, &["x".into()]);
        let periods: Vec<&str> = c
            .lines()
            .skip(1)
            .map(|l| l.split(',').next().unwrap())
            .collect();
        assert_eq!(periods, ["1", "2", "3", "4", "5"]);
        assert!(c.contains("\n3,missed,,,,,,\n"), "{c}");
        let dir = std::env::temp_dir().join(format!("rtapi-rec-unit-{}", std::process::id()));
        let trigger = Trigger {
            event: Event::Overrun,
            thread: Some("servo".into()),
            period: 2,
            wake_ns: 2_000_000,
            missed: 2,
            pin: None,
        };
        let config = super::super::tests_config(&dir);
        let a = write(&dir, "i", &trigger, &["x".into()], &config, &[t]).unwrap();
        let t = ThreadRecords {
            name: "servo".into(),
            period: Nanos::from_millis(1),
            records: vec![rec(1, 0)],
        };
        let b = write(&dir, "i", &trigger, &["x".into()], &config, &[t]).unwrap();
        assert_ne!(a[0], b[0]);
        assert!(std::fs::read_to_string(&a[0]).unwrap().contains("overrun"));
        assert!(std::fs::read_dir(&dir).unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .contains(".tmp")));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
