//! `rtapi export [--listen ADDR:PORT] [--instance NAME]... [--pin NAME]...`: the running instances'
//! thread statistics, latency histograms and chosen pins on `GET /metrics`, in the OpenMetrics text
//! format (or Prometheus' text format 0.0.4 when the client does not ask for OpenMetrics), for a
//! Prometheus server to scrape.
//!
//! One thread serves one request at a time: a scrape reads every instance afresh (microseconds per
//! thread), so there is nothing to cache or share. See `collect` for how instances are followed and
//! `text` for the exposition.

mod collect;
mod http;
mod text;

use std::net::{SocketAddr, TcpListener, ToSocketAddrs};

use rtapi_hal::{Access, HalError, HalReader};

use super::{instance, out, Failure};
use collect::{Selection, Sources};
use http::{BadRequest, Response};

/// Where `rtapi export` listens unless told otherwise.
pub(super) const DEFAULT_LISTEN: &str = "127.0.0.1:9661";

#[derive(clap::Args)]
pub(super) struct Args {
    /// Address and port to serve /metrics on (port 0: any free port, printed at start). Anything but
    /// loopback makes the figures visible to the network.
    #[arg(long, default_value = DEFAULT_LISTEN, value_name = "ADDR:PORT")]
    listen: String,
    /// Export this instance (repeat for more). Default: every instance found in /dev/shm at each scrape.
    #[arg(long, value_name = "NAME")]
    instance: Vec<String>,
    /// Also export this pin, param or signal as the gauge rtapi_pin{instance,name} (bit: 0/1; repeat
    /// for more).
    #[arg(long, value_name = "NAME")]
    pin: Vec<String>,
    /// Also believe segments owned by this user (name or uid). By default only segments owned by root
    /// or by yourself are read, so another user cannot plant a forged instance.
    #[arg(long, value_name = "USER")]
    trust_owner: Vec<String>,
    /// Without --instance: how long an instance whose segment vanished from /dev/shm is still
    /// reported as rtapi_up 0 before it is forgotten (its series end).
    #[arg(long, value_name = "SECONDS", default_value_t = collect::FORGET_AFTER.as_secs_f64())]
    forget_after: f64,
}

/// The `--listen` address, resolved.
fn listen_address(text: &str) -> Result<SocketAddr, Failure> {
    let hint = "give HOST:PORT, e.g. --listen 127.0.0.1:9661 (port 0 picks a free one)";
    let mut addrs = text
        .to_socket_addrs()
        .map_err(|e| Failure::usage(format!("--listen '{text}': {e}; {hint}")))?;
    addrs
        .next()
        .ok_or_else(|| Failure::usage(format!("--listen '{text}' resolves to no address; {hint}")))
}

fn bind(addr: SocketAddr) -> Result<TcpListener, Failure> {
    TcpListener::bind(addr).map_err(|e| {
        let what = match e.kind() {
            std::io::ErrorKind::AddrInUse => format!(
                "port {} is already in use (another exporter?); stop that program or choose another \
                 port with --listen {}:PORT",
                addr.port(),
                addr.ip()
            ),
            std::io::ErrorKind::PermissionDenied => format!(
                "permission denied; ports below 1024 need root or CAP_NET_BIND_SERVICE, choose a port \
                 above 1023 with --listen {}:PORT",
                addr.ip()
            ),
            std::io::ErrorKind::AddrNotAvailable => format!(
                "{} is not an address of this machine; use 127.0.0.1 or one of its interfaces' \
                 addresses (`ip addr`)",
                addr.ip()
            ),
            _ => e.to_string(),
        };
        Failure::runtime(format!("cannot listen on {addr}: {what}"))
    })
}

/// Opens a named instance at start: one that does not exist or is refused is an error now, with what
/// to do; later, the same is only `rtapi_up 0`.
fn open_named(name: &str, trust: &rtapi_hal::Trust) -> Result<HalReader, Failure> {
    let reader = HalReader::open_with(name, Access::ReadOnly, trust).map_err(|e| match e {
        HalError::NoSuchInstance { .. } => Failure::runtime(format!(
            "no rtapi instance '{name}' is running (no /dev/shm/rtapi-{name}); start it first \
             (`rtapi run CONFIG.toml --instance {name}`), or leave out --instance to export every \
             instance found"
        )),
        HalError::InvalidName { .. } => Failure::usage(format!("--instance: {e}")),
        other => Failure::runtime(other.to_string()),
    })?;
    if !reader.owner_alive() {
        return Err(Failure::runtime(format!(
            "instance '{name}' is {}: start it again (`rtapi run CONFIG.toml --instance {name}` \
             reclaims the segment) or remove it (`rm /dev/shm/rtapi-{name}`)",
            instance::dead_state(reader.header().owner_pid)
        )));
    }
    Ok(reader)
}

pub(super) fn run(args: Args) -> Result<(), Failure> {
    let addr = listen_address(&args.listen)?;
    let trust = instance::trust(&args.trust_owner)?;
    let forget_after = std::time::Duration::try_from_secs_f64(args.forget_after).map_err(|_| {
        Failure::usage(format!(
            "--forget-after {}: give a number of seconds, 0 or more (default {})",
            args.forget_after,
            collect::FORGET_AFTER.as_secs()
        ))
    })?;
    for p in &args.pin {
        rtapi_hal::name::validate(p).map_err(|e| Failure::usage(format!("--pin: {e}")))?;
    }
    // Start-up checks: named instances must be there; each --pin must name something in at least
    // one instance that is (if none is up yet, the pins are checked by the scrapes alone).
    let mut opened: Vec<(String, HalReader)> = Vec::new();
    let selection = if args.instance.is_empty() {
        for name in
            collect::scan().map_err(|e| Failure::runtime(format!("cannot list /dev/shm: {e}")))?
        {
            if let Ok(r) = HalReader::open_with(&name, Access::ReadOnly, &trust) {
                if r.owner_alive() {
                    opened.push((name, r));
                }
            }
        }
        Selection::All
    } else {
        let mut names: Vec<String> = Vec::new();
        for n in &args.instance {
            if !names.contains(n) {
                names.push(n.clone());
            }
        }
        for name in &names {
            opened.push((name.clone(), open_named(name, &trust)?));
        }
        Selection::Named(names)
    };
    if !opened.is_empty() {
        for p in &args.pin {
            if !opened.iter().any(|(_, r)| r.get(p).is_ok()) {
                let names: Vec<&str> = opened.iter().map(|(n, _)| n.as_str()).collect();
                return Err(Failure::usage(format!(
                    "--pin {p}: no pin, param or signal of that name in instance {}; \
                     `rtapi show pin --instance {}` lists the pins",
                    names.join(", "),
                    names[0]
                )));
            }
        }
    }
    let listener = bind(addr)?;
    let local = listener
        .local_addr()
        .map_err(|e| Failure::runtime(format!("cannot listen on {addr}: {e}")))?;
    let following = match &selection {
        Selection::Named(n) => format!("instance {}", n.join(", ")),
        Selection::All if opened.is_empty() => {
            "every instance found (none running yet)".to_string()
        }
        Selection::All => format!(
            "every instance found (now: {})",
            opened
                .iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    out::println(&format!(
        "rtapi export: serving http://{local}/metrics for {following}"
    ))?;
    let mut sources = Sources::new(
        selection,
        trust,
        args.pin,
        forget_after,
        Box::new(|line| out::eprintln(&format!("rtapi export: {line}"))),
    );
    for (name, r) in opened {
        sources.adopt(&name, r);
    }
    serve(&listener, sources, local)
}

/// Connections served at once. When all are taken, a new one closes the oldest that is still
/// sending its request or reading its answer (an idle or slow client), so a scraper always gets in;
/// only when every one is being answered does it get a 503 at once.
const MAX_CLIENTS: usize = 16;

/// Where a connection is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    /// Sending its request head (before its deadline): may be closed for a newer client.
    Reading,
    /// Waiting for or running its collection: never closed.
    Collecting,
    /// Reading its answer (before its deadline): may be closed for a newer client.
    Writing,
}

/// A connection being served: its own thread has the stream, this is a handle to close it.
struct Conn {
    id: u64,
    since: std::time::Instant,
    phase: Phase,
    handle: std::net::TcpStream,
}

/// The connections being served, shared by the accepting thread and the clients'.
#[derive(Default)]
struct Conns {
    next: u64,
    open: Vec<Conn>,
}

type Registry = std::sync::Arc<std::sync::Mutex<Conns>>;

fn lock(r: &Registry) -> std::sync::MutexGuard<'_, Conns> {
    r.lock().unwrap_or_else(|p| p.into_inner())
}

impl Conns {
    /// Makes room for one more: `false` if every connection is being answered.
    fn make_room(&mut self) -> bool {
        if self.open.len() < MAX_CLIENTS {
            return true;
        }
        let oldest = self
            .open
            .iter()
            .enumerate()
            .filter(|(_, c)| c.phase != Phase::Collecting)
            .min_by_key(|(_, c)| c.since)
            .map(|(i, _)| i);
        match oldest {
            Some(i) => {
                let c = self.open.swap_remove(i);
                log::debug!(
                    "closing a connection idle in {:?} for {:?} for a new one",
                    c.phase,
                    c.since.elapsed()
                );
                // Its thread's read or write fails at once and it ends.
                let _ = c.handle.shutdown(std::net::Shutdown::Both);
                true
            }
            None => false,
        }
    }

    /// Moves connection `id` to `phase`: `false` if it was closed meanwhile.
    fn enter(&mut self, id: u64, phase: Phase) -> bool {
        match self.open.iter_mut().find(|c| c.id == id) {
            Some(c) => {
                c.phase = phase;
                c.since = std::time::Instant::now();
                true
            }
            None => false,
        }
    }

    fn remove(&mut self, id: u64) {
        self.open.retain(|c| c.id != id);
    }
}

/// Answers requests, each connection on a thread of its own (so a client that connects and sends
/// nothing holds only its own thread, for at most the client timeout), the collection one at a time;
/// forever (Ctrl-C ends the process: it owns nothing to clean).
fn serve(listener: &TcpListener, sources: Sources, local: SocketAddr) -> Result<(), Failure> {
    use std::sync::{Arc, Mutex};
    let sources = Arc::new(Mutex::new(sources));
    let registry: Registry = Arc::default();
    for conn in listener.incoming() {
        let mut stream = match conn {
            Ok(s) => s,
            Err(e) => {
                // Out of descriptors or an aborted connection: the next one may do.
                log::warn!("accepting a connection: {e}");
                std::thread::sleep(std::time::Duration::from_millis(10));
                continue;
            }
        };
        let start = std::time::Instant::now();
        let Ok(handle) = stream.try_clone() else {
            continue;
        };
        let id = {
            let mut conns = lock(&registry);
            if !conns.make_room() {
                drop(conns);
                let busy = Response::text(
                    503,
                    format!("{MAX_CLIENTS} clients are being answered; try again\n"),
                );
                let _ =
                    http::write_response(&mut stream, &busy, false, start + http::CLIENT_TIMEOUT);
                continue;
            }
            conns.next += 1;
            let id = conns.next;
            conns.open.push(Conn {
                id,
                since: start,
                phase: Phase::Reading,
                handle,
            });
            id
        };
        let (sources, reg) = (Arc::clone(&sources), Arc::clone(&registry));
        let spawned = std::thread::Builder::new()
            .name("rtapi-export-client".into())
            .spawn(move || {
                client(stream, &sources, local, &reg, id, start);
                lock(&reg).remove(id);
            });
        if let Err(e) = spawned {
            lock(&registry).remove(id);
            log::warn!("serving a client: cannot start a thread: {e}");
        }
    }
    Ok(())
}

/// One connection: one request (its head within the client timeout of `start`), one answer (within
/// the client timeout of its start).
fn client(
    mut stream: std::net::TcpStream,
    sources: &std::sync::Mutex<Sources>,
    local: SocketAddr,
    registry: &Registry,
    id: u64,
    start: std::time::Instant,
) {
    let (response, head_only) = match http::read_request(&mut stream, start + http::CLIENT_TIMEOUT)
    {
        Err(BadRequest::Gone) => return,
        Err(BadRequest::Malformed(why)) => {
            (Response::text(400, format!("bad request: {why}\n")), false)
        }
        Ok(req) => {
            if !lock(registry).enter(id, Phase::Collecting) {
                return;
            }
            let head_only = req.method == "HEAD";
            let mut sources = sources.lock().unwrap_or_else(|p| p.into_inner());
            (answer(&req, &mut sources, local), head_only)
        }
    };
    if !lock(registry).enter(id, Phase::Writing) {
        return;
    }
    let deadline = std::time::Instant::now() + http::CLIENT_TIMEOUT;
    if let Err(e) = http::write_response(&mut stream, &response, head_only, deadline) {
        log::debug!("answering a client: {e}");
    }
}

/// The response to one request.
fn answer(req: &http::Request, sources: &mut Sources, local: SocketAddr) -> Response {
    if req.method != "GET" && req.method != "HEAD" {
        let mut r = Response::text(
            405,
            format!("{} is not served here; use GET /metrics\n", req.method),
        );
        r.headers.push("Allow: GET, HEAD".into());
        return r;
    }
    if req.path != "/metrics" {
        return Response::text(
            404,
            format!(
                "nothing at {}: the metrics are at /metrics (curl http://{local}/metrics)\n",
                crate::rt::units::tame(&req.path)
            ),
        );
    }
    let format = http::negotiate(req.accept.as_deref());
    Response {
        status: 200,
        content_type: format.content_type(),
        body: text::render(&sources.collect(), format),
        headers: Vec::new(),
    }
}
