//! `rtapi export` (issue 15, part 2) end to end with real processes: a sim-axis run in a child
//! process, the exporter in another, scraped over TCP with plain HTTP/1.1 requests; the instance
//! stopped and started again under the exporter; planted segments refused; bad command lines; and a
//! real Prometheus server scraping the exporter and answering queries over what it stored.

mod common;
use common::exporter::Exporter;
use common::sim_axis;
use common::{rtapi, text};
use sim_axis::SimAxis;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long anything here may take to come up or change.
const T: Duration = Duration::from_secs(20);

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Starts sim-axis as `<tag>-<pid>` and waits until its servo thread has run.
fn sim_axis(tag: &str) -> SimAxis {
    let run = SimAxis::spawn(tag, "60s");
    let until = Instant::now() + T;
    loop {
        let o = rtapi(&["getp", "servo.time", "--instance", &run.instance]);
        if o.status.success() && text(&o).0.trim() != "0" {
            return run;
        }
        assert!(
            Instant::now() < until,
            "sim-axis {} never came up",
            run.instance
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// This file reads the exporter as a scraper does.
impl Exporter {
    /// `GET /metrics` asking for OpenMetrics, checked to be a whole OpenMetrics exposition.
    fn scrape(&self) -> Exposition {
        let r = get(
            &self.addr,
            "/metrics",
            Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"),
        );
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.header("content-type").as_deref(), Some(OPENMETRICS));
        assert!(r.body.ends_with("# EOF\n"), "no # EOF at the end");
        assert_eq!(r.body.matches("# EOF").count(), 1);
        Exposition::parse(&r.body)
    }
}

/// An HTTP response.
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Response {
    fn header(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    }
}

/// A plain HTTP/1.0 request (the answer ends with the connection: no chunked encoding to decode).
fn request(addr: &str, method: &str, path: &str, accept: Option<&str>) -> Response {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    let mut req = format!("{method} {path} HTTP/1.0\r\nHost: {addr}\r\n");
    if let Some(a) = accept {
        req.push_str(&format!("Accept: {a}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").expect("no end of the head");
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .map(|l| {
            let (k, v) = l.split_once(':').unwrap();
            (k.trim().to_string(), v.trim().to_string())
        })
        .collect::<Vec<_>>();
    let r = Response {
        status,
        headers,
        body: body.to_string(),
    };
    // (A HEAD answer gives the length of the body it leaves out.)
    if let (Some(len), false) = (r.header("content-length"), method == "HEAD") {
        assert_eq!(
            len.parse::<usize>().unwrap(),
            r.body.len(),
            "Content-Length"
        );
    }
    r
}

fn get(addr: &str, path: &str, accept: Option<&str>) -> Response {
    request(addr, "GET", path, accept)
}

/// One sample line: name, labels, value.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A parsed exposition (either format): its samples and the declared type of each family.
struct Exposition {
    samples: Vec<Sample>,
    types: BTreeMap<String, String>,
}

/// Reads a label value up to its closing quote, undoing the escapes.
fn label_value(rest: &str) -> (String, &str) {
    let mut v = String::new();
    let mut chars = rest.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => match chars.next().unwrap().1 {
                'n' => v.push('\n'),
                c => v.push(c),
            },
            '"' => return (v, &rest[i + 1..]),
            c => v.push(c),
        }
    }
    panic!("unterminated label value in {rest:?}")
}

impl Exposition {
    fn parse(body: &str) -> Exposition {
        let mut samples = Vec::new();
        let mut types = BTreeMap::new();
        for line in body.lines() {
            if let Some(meta) = line.strip_prefix("# ") {
                let mut w = meta.splitn(3, ' ');
                if w.next() == Some("TYPE") {
                    let name = w.next().unwrap().to_string();
                    let ty = w.next().unwrap().to_string();
                    assert!(
                        types.insert(name.clone(), ty).is_none(),
                        "family {name} declared twice"
                    );
                }
                continue;
            }
            let name_end = line.find(['{', ' ']).unwrap();
            let name = line[..name_end].to_string();
            let mut rest = &line[name_end..];
            let mut labels = BTreeMap::new();
            if let Some(r) = rest.strip_prefix('{') {
                rest = r;
                loop {
                    if let Some(r) = rest.strip_prefix('}') {
                        rest = r;
                        break;
                    }
                    let rr = rest.strip_prefix(',').unwrap_or(rest);
                    let (k, r) = rr.split_once("=\"").unwrap();
                    let (v, r) = label_value(r);
                    labels.insert(k.to_string(), v);
                    rest = r;
                }
            }
            let value = match rest.trim() {
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                v => v
                    .parse()
                    .unwrap_or_else(|_| panic!("bad value in {line:?}")),
            };
            samples.push(Sample {
                name,
                labels,
                value,
            });
        }
        Exposition { samples, types }
    }

    /// The samples named `name` whose labels include `with`.
    fn find(&self, name: &str, with: &[(&str, &str)]) -> Vec<&Sample> {
        self.samples
            .iter()
            .filter(|s| {
                s.name == name
                    && with
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect()
    }

    /// The one sample named `name` with these labels.
    fn one(&self, name: &str, with: &[(&str, &str)]) -> f64 {
        let found = self.find(name, with);
        assert_eq!(found.len(), 1, "{name} {with:?}: {found:?}");
        found[0].value
    }
}

/// Checks one thread's latency histogram: cumulative, non-decreasing buckets in increasing `le`, the
/// `+Inf` bucket equal to `_count`, a positive count.
fn check_histogram(e: &Exposition, instance: &str, thread: &str) {
    let with = [("instance", instance), ("thread", thread)];
    let buckets = e.find("rtapi_thread_latency_seconds_bucket", &with);
    assert!(buckets.len() >= 3, "{thread}: {buckets:?}");
    let mut last_le = f64::NEG_INFINITY;
    let mut last_count = 0.0;
    for b in &buckets {
        let le: f64 = match b.labels["le"].as_str() {
            "+Inf" => f64::INFINITY,
            v => v.parse().unwrap(),
        };
        assert!(le > last_le, "{thread}: le not increasing: {buckets:?}");
        assert!(
            b.value >= last_count,
            "{thread}: not cumulative: {buckets:?}"
        );
        last_le = le;
        last_count = b.value;
    }
    assert_eq!(last_le, f64::INFINITY, "{thread}: no +Inf bucket");
    let count = e.one("rtapi_thread_latency_seconds_count", &with);
    assert_eq!(last_count, count, "{thread}: +Inf bucket != _count");
    assert!(count > 0.0);
    // Seconds, not ns: a sim thread's 1 ms bucket exists and is below a second.
    assert!(buckets.iter().any(|b| b.labels["le"] == "0.001"));
}

#[test]
fn metrics_of_a_live_instance_follow_it_down_and_up() {
    let run = sim_axis("export");
    let i = run.instance.clone();
    let mut exp = Exporter::start(&[
        "--instance",
        &i,
        "--pin",
        "pid.0.error",
        "--pin",
        "machine-enable",
    ]);
    // A client that connects and sends nothing holds only its own connection: a scrape meanwhile
    // is answered at once, not after the exporter's 5 s client timeout.
    // Order, not speed: the answer comes while the idle client is still held (an exporter that
    // served it first would have closed it at its timeout before answering).
    let mut idle = std::net::TcpStream::connect(&exp.addr).unwrap();
    let t0 = std::time::Instant::now();
    let first = exp.scrape();
    eprintln!("a scrape beside an idle client took {:?}", t0.elapsed());
    idle.set_nonblocking(true).unwrap();
    let held = std::io::Read::read(&mut idle, &mut [0u8; 1]);
    assert!(
        held.as_ref()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
        "the idle client was no longer held when the scrape was answered ({held:?}): the scrape \
         waited behind it ({:?})",
        t0.elapsed()
    );
    drop(idle);
    assert_eq!(first.one("rtapi_up", &[("instance", &i)]), 1.0);
    assert_eq!(first.types["rtapi_thread_cycles"], "counter");
    assert_eq!(first.types["rtapi_thread_latency_seconds"], "histogram");
    assert_eq!(first.types["rtapi_pin"], "gauge");
    for thread in ["base", "servo"] {
        let with = [("instance", i.as_str()), ("thread", thread)];
        assert!(first.one("rtapi_thread_cycles_total", &with) > 0.0);
        first.one("rtapi_thread_missed_periods_total", &with);
        let max = first.one("rtapi_thread_latency_max_seconds", &with);
        assert!(max > 0.0 && max < 10.0, "{thread} latency max {max} s");
        let last = first.one("rtapi_thread_latency_last_seconds", &with);
        assert!(last <= max, "{thread}: last {last} > max {max}");
        assert!(first.one("rtapi_thread_exec_max_seconds", &with) < 1.0);
        assert_eq!(first.one("rtapi_thread_stalled", &with), 0.0);
        check_histogram(&first, &i, thread);
    }
    assert_eq!(
        first.one(
            "rtapi_thread_period_seconds",
            &[("instance", &i), ("thread", "servo")]
        ),
        0.001
    );
    // The chosen pins, by name; a bit as 0/1.
    let enable = first.one("rtapi_pin", &[("instance", &i), ("name", "machine-enable")]);
    assert!(enable == 0.0 || enable == 1.0);
    first.one("rtapi_pin", &[("instance", &i), ("name", "pid.0.error")]);
    // Per-function timing.
    assert!(
        first.one(
            "rtapi_function_calls_total",
            &[("instance", &i), ("function", "pid.0.do-pid-calcs")]
        ) > 0.0
    );

    // A later scrape: the counters went on.
    let servo = [("instance", i.as_str()), ("thread", "servo")];
    let c1 = first.one("rtapi_thread_cycles_total", &servo);
    let until = Instant::now() + T;
    loop {
        let later = exp.scrape();
        let c2 = later.one("rtapi_thread_cycles_total", &servo);
        assert!(c2 >= c1, "cycles went back: {c1} -> {c2}");
        if c2 > c1 {
            check_histogram(&later, &i, "servo");
            assert!(later.one("rtapi_thread_latency_seconds_count", &servo) >= c1);
            break;
        }
        assert!(Instant::now() < until, "servo cycles stuck at {c1}");
        std::thread::sleep(Duration::from_millis(10));
    }

    // Without an Accept header: Prometheus' text format 0.0.4, with the same series.
    let plain = get(&exp.addr, "/metrics", None);
    assert_eq!(plain.status, 200);
    assert_eq!(
        plain.header("content-type").as_deref(),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    assert!(!plain.body.contains("# EOF"));
    let p = Exposition::parse(&plain.body);
    assert_eq!(p.types["rtapi_thread_cycles_total"], "counter");
    assert!(p.one("rtapi_thread_cycles_total", &servo) >= c1);

    // Other paths and methods.
    let nf = get(&exp.addr, "/", None);
    assert_eq!(nf.status, 404);
    assert!(nf.body.contains("/metrics"), "{}", nf.body);
    let post = request(&exp.addr, "POST", "/metrics", None);
    assert_eq!(post.status, 405);
    assert_eq!(post.header("allow").as_deref(), Some("GET, HEAD"));
    let head = request(&exp.addr, "HEAD", "/metrics", None);
    assert_eq!((head.status, head.body.as_str()), (200, ""));

    // The instance stops: rtapi_up 0, none of its series, the exporter still serving.
    drop(run);
    assert!(!common::segment_exists(&i), "the run left its segment");
    let down = exp.scrape();
    assert_eq!(down.one("rtapi_up", &[("instance", &i)]), 0.0);
    assert!(down
        .find("rtapi_thread_cycles_total", &[("instance", &i)])
        .is_empty());
    assert!(down.find("rtapi_pin", &[("instance", &i)]).is_empty());
    assert!(exp.alive(), "the exporter died with the instance");
    assert!(exp.stderr().contains("is down"), "{}", exp.stderr());

    // Started again under the same name: picked up again, counting from the new run.
    let again = sim_axis("export");
    assert_eq!(again.instance, i);
    let until = Instant::now() + T;
    loop {
        let e = exp.scrape();
        if e.one("rtapi_up", &[("instance", &i)]) == 1.0 {
            assert!(e.one("rtapi_thread_cycles_total", &servo) > 0.0);
            e.one("rtapi_pin", &[("instance", &i), ("name", "pid.0.error")]);
            break;
        }
        assert!(
            Instant::now() < until,
            "the restarted instance was not picked up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(again);
    assert!(exp.alive());
}

/// Removes planted files on every way out.
struct Planted(Vec<PathBuf>);

impl Drop for Planted {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[test]
fn planted_segments_are_refused_and_reported_down() {
    let run = sim_axis("export-trust");
    let pid = std::process::id();
    let (loose, link, junk) = (
        format!("export-loose-{pid}"),
        format!("export-link-{pid}"),
        format!("export-junk-{pid}"),
    );
    let shm = |name: &str| PathBuf::from(format!("/dev/shm/rtapi-{name}"));
    let planted = Planted(vec![shm(&loose), shm(&link), shm(&junk)]);
    // A copy of the real segment that anyone may write; a symlink to the real one; a trusted file of
    // junk.
    std::fs::copy(shm(&run.instance), shm(&loose)).unwrap();
    std::fs::set_permissions(shm(&loose), std::fs::Permissions::from_mode(0o666)).unwrap();
    std::os::unix::fs::symlink(shm(&run.instance), shm(&link)).unwrap();
    std::fs::write(shm(&junk), vec![0x5a; 8192]).unwrap();
    std::fs::set_permissions(shm(&junk), std::fs::Permissions::from_mode(0o600)).unwrap();

    // Every instance found: the real one is up, the planted ones down with nothing else.
    let exp = Exporter::start(&[]);
    let e = exp.scrape();
    assert_eq!(e.one("rtapi_up", &[("instance", &run.instance)]), 1.0);
    assert!(
        e.one(
            "rtapi_thread_cycles_total",
            &[("instance", &run.instance), ("thread", "servo")]
        ) > 0.0
    );
    for name in [&loose, &link, &junk] {
        assert_eq!(e.one("rtapi_up", &[("instance", name)]), 0.0, "{name}");
        let theirs: Vec<&Sample> = e
            .samples
            .iter()
            .filter(|s| s.name != "rtapi_up" && s.labels.get("instance") == Some(name))
            .collect();
        assert!(theirs.is_empty(), "{name}: {theirs:?}");
    }
    let err = exp.stderr();
    for name in [&loose, &link] {
        assert!(
            err.lines()
                .any(|l| l.contains(&format!("'{name}' is refused"))),
            "{name}: {err}"
        );
    }
    assert!(err.contains(&format!("'{junk}'")), "{err}");
    // Said once, not at every scrape.
    exp.scrape();
    assert_eq!(
        exp.stderr()
            .matches(&format!("'{loose}' is refused"))
            .count(),
        1
    );
    // The planted files are untouched (read-only, never followed).
    assert_eq!(std::fs::read(shm(&junk)).unwrap(), vec![0x5a; 8192]);
    drop(planted);
    drop(run);
}

#[test]
fn bad_command_lines_say_what_to_do() {
    let fail = |args: &[&str]| {
        let mut all = vec!["export"];
        all.extend_from_slice(args);
        let o = rtapi(&all);
        (o.status.code(), text(&o).1)
    };
    let (code, err) = fail(&["--listen", "nonsense"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--listen 'nonsense'") && err.contains("127.0.0.1:"),
        "{err}"
    );

    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let (code, err) = fail(&["--listen", &format!("127.0.0.1:{port}")]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("already in use") && err.contains("--listen"),
        "{err}"
    );

    let missing = format!("export-missing-{}", std::process::id());
    let (code, err) = fail(&["--listen", "127.0.0.1:0", "--instance", &missing]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains(&format!("no rtapi instance '{missing}'")) && err.contains("rtapi run"));

    let (code, err) = fail(&["--listen", "127.0.0.1:0", "--instance", "a/b"]);
    assert_eq!(code, Some(2), "{err}");

    let run = sim_axis("export-bad");
    let (code, err) = fail(&[
        "--listen",
        "127.0.0.1:0",
        "--instance",
        &run.instance,
        "--pin",
        "no.such.pin",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--pin no.such.pin") && err.contains("rtapi show pin"),
        "{err}"
    );
}

/// A running Prometheus server, killed on drop (also when the test fails).
struct Prometheus {
    child: Child,
    addr: String,
    dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }

    /// `GET /api/v1/<path>` as JSON.
    fn api(&self, path: &str) -> serde_json::Value {
        let r = get(&self.addr, &format!("/api/v1/{path}"), None);
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(v["status"], "success", "{v}");
        v["data"].clone()
    }

    /// An instant query's result vector.
    fn query(&self, q: &str) -> Vec<serde_json::Value> {
        self.api(&format!("query?query={}", percent(q)))["result"]
            .as_array()
            .unwrap()
            .clone()
    }
}

/// Percent-encodes a query string value.
fn percent(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            b => format!("%{b:02X}"),
        })
        .collect()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn a_prometheus_server_scrapes_the_exporter() {
    let binary = Path::new("/usr/bin/prometheus");
    if !binary.exists() {
        return skip!(
            Ci,
            "prometheus is not installed (/usr/bin/prometheus); `apt-get install -y prometheus`"
        );
    }
    let run = sim_axis("export-prom");
    let i = run.instance.clone();
    let exp = Exporter::start(&["--instance", &i, "--pin", "machine-enable"]);

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
             scrape_configs:\n  - job_name: rtapi\n    honor_labels: true\n\
             \x20   static_configs:\n      - targets: ['{}']\n",
            exp.addr
        ),
    )
    .unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let log = std::fs::File::create(dir.path().join("log")).unwrap();
    let child = Command::new(binary)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address={addr}"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let prom = Prometheus { child, addr, dir };

    // Two scrapes of the servo's cycle counter, the second higher.
    let query = format!("rtapi_thread_cycles_total{{instance=\"{i}\"}}");
    let until = Instant::now() + Duration::from_secs(60);
    let mut first: Option<f64> = None;
    let servo_cycles = |result: &[serde_json::Value]| -> Option<f64> {
        let s = result.iter().find(|r| r["metric"]["thread"] == "servo")?;
        s["value"][1].as_str()?.parse().ok()
    };
    let result = loop {
        assert!(
            Instant::now() < until,
            "Prometheus did not store two scrapes; its log:\n{}",
            prom.log()
        );
        std::thread::sleep(Duration::from_millis(200));
        // Up and ready: Prometheus answers 503 while it is still starting (its TSDB, under load).
        if TcpStream::connect(&prom.addr).is_err()
            || get(&prom.addr, "/-/ready", None).status != 200
        {
            continue;
        }
        let result = prom.query(&query);
        match (first, servo_cycles(&result)) {
            (None, Some(c)) => first = Some(c),
            (Some(c1), Some(c2)) if c2 > c1 => break result,
            _ => {}
        }
    };
    // One series per thread, with the labels the exporter gave (honor_labels) and the job's.
    let mut threads: Vec<&str> = result
        .iter()
        .map(|r| r["metric"]["thread"].as_str().unwrap())
        .collect();
    threads.sort();
    assert_eq!(threads, ["base", "servo"]);
    for r in &result {
        assert_eq!(r["metric"]["__name__"], "rtapi_thread_cycles_total");
        assert_eq!(r["metric"]["instance"], i.as_str());
        assert_eq!(r["metric"]["job"], "rtapi");
    }
    // The target is healthy: Prometheus parsed every scrape.
    let targets = prom.api("targets")["activeTargets"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(targets.len(), 1);
    assert_eq!(targets[0]["health"], "up", "{}", targets[0]);
    assert_eq!(targets[0]["lastError"], "");
    // The histogram, the pin and rtapi_up arrived too; a quantile can be computed from the buckets.
    let up = prom.query(&format!("rtapi_up{{instance=\"{i}\"}}"));
    assert_eq!(up.len(), 1);
    assert_eq!(up[0]["value"][1], "1");
    let pin = prom.query(&format!(
        "rtapi_pin{{instance=\"{i}\",name=\"machine-enable\"}}"
    ));
    assert_eq!(pin.len(), 1, "{pin:?}");
    let q = prom.query(&format!(
        "histogram_quantile(0.5, rtapi_thread_latency_seconds_bucket{{instance=\"{i}\",thread=\"servo\"}})"
    ));
    assert_eq!(q.len(), 1, "{q:?}");
    let p50: f64 = q[0]["value"][1].as_str().unwrap().parse().unwrap();
    assert!(p50 > 0.0 && p50 <= 0.001, "servo p50 {p50} s");
    drop(prom);
    drop(exp);
    drop(run);
}
