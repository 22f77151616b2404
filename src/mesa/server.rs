//! The board on the network: an LBP16 server on UDP.
//!
//! One thread receives a request, hands it to the [`Board`] at the board's time (monotonic time
//! since the server started), and sends the reply back to whoever asked. Between requests it wakes
//! every few milliseconds to advance the board, so a watchdog bite is noticed (and reported) when
//! it happens, not at the next request.
//!
//! The MAC address the board reports (hm2_eth installs it as a permanent ARP entry for the board's
//! IP) is the one of the interface each request arrived on (`IP_PKTINFO`), unless one was given.

use std::io;
use std::net::{SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::socket::{recvmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags, SockaddrIn};

use super::board::{Board, BoardNs, Event};
use super::idrom::BoardKind;

/// How often the server wakes with no request, to advance the board.
const IDLE_TICK: Duration = Duration::from_millis(2);

/// What to serve.
#[derive(Debug, Clone)]
pub struct Options {
    /// Address and port to listen on.
    pub listen: SocketAddrV4,
    /// The board.
    pub kind: BoardKind,
    /// Requests with writes kept in the board's log.
    pub log_capacity: usize,
    /// The MAC address to report; `None`: the receiving interface's.
    pub mac: Option<[u8; 6]>,
}

/// Why the server could not start or stopped.
#[derive(Debug)]
pub enum ServeError {
    /// The listening socket could not be made.
    Bind {
        /// The address asked for.
        listen: SocketAddrV4,
        /// Why.
        error: io::Error,
    },
    /// Receiving or sending failed.
    Io(io::Error),
}

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServeError::Bind { listen, error } => {
                let hint = match error.raw_os_error() {
                    Some(libc::EADDRNOTAVAIL) => format!(
                        ": {} is not an address of this machine (or of this network namespace); \
                         listen on one of its addresses, or 0.0.0.0",
                        listen.ip()
                    ),
                    Some(libc::EADDRINUSE) => format!(
                        ": UDP port {} is in use here (another simulator?); stop it or use --listen ADDR:OTHER-PORT",
                        listen.port()
                    ),
                    Some(libc::EACCES) => format!(
                        ": port {} needs privileges; use a port above 1023",
                        listen.port()
                    ),
                    _ => String::new(),
                };
                write!(f, "cannot listen on udp {listen}: {error}{hint}")
            }
            ServeError::Io(e) => write!(f, "udp: {e}"),
        }
    }
}

impl std::error::Error for ServeError {}

/// The listening socket, with `IP_PKTINFO` on.
pub fn bind(listen: SocketAddrV4) -> Result<UdpSocket, ServeError> {
    let socket = UdpSocket::bind(listen).map_err(|error| ServeError::Bind { listen, error })?;
    setsockopt(&socket, sockopt::Ipv4PacketInfo, &true).map_err(|e| ServeError::Bind {
        listen,
        error: io::Error::from(e),
    })?;
    socket
        .set_read_timeout(Some(IDLE_TICK))
        .map_err(|error| ServeError::Bind { listen, error })?;
    Ok(socket)
}

/// The MAC address of interface `ifindex` in this network namespace.
pub fn interface_mac(ifindex: usize) -> Option<[u8; 6]> {
    nix::ifaddrs::getifaddrs().ok()?.find_map(|ifa| {
        let link = ifa.address?.as_link_addr().copied()?;
        (link.ifindex() == ifindex).then(|| link.addr()).flatten()
    })
}

/// A shared board and its clock.
#[derive(Clone)]
pub struct Shared {
    board: Arc<Mutex<Board>>,
    epoch: Instant,
}

impl Shared {
    /// A new board of `kind` whose clock starts now.
    pub fn new(kind: BoardKind, log_capacity: usize) -> Shared {
        Shared {
            board: Arc::new(Mutex::new(Board::new(kind, log_capacity))),
            epoch: Instant::now(),
        }
    }

    /// The board's clock now.
    pub fn now(&self) -> BoardNs {
        self.epoch.elapsed().as_nanos() as BoardNs
    }

    /// The board, locked and advanced to now.
    pub fn board(&self) -> MutexGuard<'_, Board> {
        let now = self.now();
        let mut b = self
            .board
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        b.advance(now);
        b
    }
}

/// Serves `shared` on `socket` until `stop` is set. After each request, and every few milliseconds
/// without one, calls `on_events` with the board's new events (often none) and the host that last
/// sent a request.
pub fn serve(
    socket: &UdpSocket,
    shared: &Shared,
    fixed_mac: Option<[u8; 6]>,
    stop: &AtomicBool,
    on_events: impl FnMut(&[Event], Option<SocketAddr>),
) -> Result<(), ServeError> {
    serve_delayed(socket, shared, fixed_mac, stop, None, on_events)
}

/// Replies held back before they are sent, as a slow network would (`rtapi mesa-sim
/// --reply-delay`, for a kernel without netem): each one `delay` plus a uniform jitter within
/// ±`jitter` after its request, never before the previous reply (the order is kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyDelay {
    /// The mean delay.
    pub delay: Duration,
    /// The largest deviation from it, either way (at most `delay`).
    pub jitter: Duration,
}

/// The thread that sends delayed replies at their time; ends when `rx` closes.
fn delayed_sender(
    socket: UdpSocket,
    d: ReplyDelay,
    rx: std::sync::mpsc::Receiver<(Instant, Vec<u8>, SocketAddr)>,
) {
    let mut last = Instant::now();
    // xorshift64: the jitter needs spread, not quality.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ u64::from(std::process::id());
    for (at, reply, to) in rx {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let span = d.jitter.as_nanos() as u64 * 2;
        let offset = if span == 0 { 0 } else { x % (span + 1) };
        let due = (at + d.delay.saturating_sub(d.jitter) + Duration::from_nanos(offset)).max(last);
        last = due;
        let left = due.saturating_duration_since(Instant::now());
        if !left.is_zero() {
            std::thread::sleep(left);
        }
        let _ = socket.send_to(&reply, to);
    }
}

/// [`serve`], with replies held back by `delay` when given.
pub fn serve_delayed(
    socket: &UdpSocket,
    shared: &Shared,
    fixed_mac: Option<[u8; 6]>,
    stop: &AtomicBool,
    delay: Option<ReplyDelay>,
    mut on_events: impl FnMut(&[Event], Option<SocketAddr>),
) -> Result<(), ServeError> {
    let delayed = match delay {
        Some(d) => {
            let (tx, rx) = std::sync::mpsc::channel();
            let sock = socket.try_clone().map_err(ServeError::Io)?;
            std::thread::Builder::new()
                .name("mesa-sim-delay".into())
                .spawn(move || delayed_sender(sock, d, rx))
                .map_err(ServeError::Io)?;
            Some(tx)
        }
        None => None,
    };
    let mut buf = vec![0u8; 2048];
    let mut cmsg = nix::cmsg_space!(libc::in_pktinfo);
    let mut peer: Option<SocketAddr> = None;
    let mut mac_of: Option<(usize, [u8; 6])> = None;
    if let Some(mac) = fixed_mac {
        shared.board().set_mac(mac);
    }
    while !stop.load(Ordering::Relaxed) {
        let received = {
            let mut iov = [io::IoSliceMut::new(&mut buf)];
            match recvmsg::<SockaddrIn>(
                socket.as_raw_fd(),
                &mut iov,
                Some(&mut cmsg),
                MsgFlags::empty(),
            ) {
                Ok(msg) => {
                    let ifindex = msg.cmsgs().ok().and_then(|mut it| {
                        it.find_map(|c| match c {
                            ControlMessageOwned::Ipv4PacketInfo(info) => {
                                Some(info.ipi_ifindex as usize)
                            }
                            _ => None,
                        })
                    });
                    msg.address.map(|a| (msg.bytes, a, ifindex))
                }
                Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => None,
                Err(e) => return Err(ServeError::Io(e.into())),
            }
        };
        let events = {
            let now = shared.now();
            let mut b = shared
                .board
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some((len, from, ifindex)) = received {
                let from = SocketAddr::V4(SocketAddrV4::new(from.ip(), from.port()));
                peer = Some(from);
                if fixed_mac.is_none() {
                    if let Some(ifindex) = ifindex {
                        if mac_of.map(|(i, _)| i) != Some(ifindex) {
                            if let Some(mac) = interface_mac(ifindex) {
                                mac_of = Some((ifindex, mac));
                                b.set_mac(mac);
                            }
                        }
                    }
                }
                if let Some(reply) = b.handle(&buf[..len], now) {
                    // A lost reply is the host's to notice (it counts a packet error), as with a
                    // real card: the board goes on.
                    match &delayed {
                        Some(tx) => {
                            let _ = tx.send((Instant::now(), reply, from));
                        }
                        None => {
                            let _ = socket.send_to(&reply, from);
                        }
                    }
                }
            } else {
                b.advance(now);
            }
            b.take_events()
        };
        on_events(&events, peer);
    }
    Ok(())
}

/// A board served from a thread of its own: for tests and code that embeds the simulator.
pub struct Sim {
    shared: Shared,
    local: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<(), ServeError>>>,
}

impl Sim {
    /// Binds and starts serving; `on_events` runs on the server's thread (see [`serve`]).
    pub fn start(
        options: &Options,
        on_events: impl FnMut(&[Event], Option<SocketAddr>) + Send + 'static,
    ) -> Result<Sim, ServeError> {
        let socket = bind(options.listen)?;
        let local = socket.local_addr().map_err(ServeError::Io)?;
        let shared = Shared::new(options.kind, options.log_capacity);
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (shared, stop, mac) = (shared.clone(), stop.clone(), options.mac);
            std::thread::Builder::new()
                .name("mesa-sim".into())
                .spawn(move || serve(&socket, &shared, mac, &stop, on_events))
                .map_err(ServeError::Io)?
        };
        Ok(Sim {
            shared,
            local,
            stop,
            thread: Some(thread),
        })
    }

    /// Where it listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The board, locked and advanced to now.
    pub fn board(&self) -> MutexGuard<'_, Board> {
        self.shared.board()
    }

    /// The board's clock now.
    pub fn now(&self) -> BoardNs {
        self.shared.now()
    }

    /// Stops serving and returns how the server ended.
    pub fn stop(mut self) -> Result<(), ServeError> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(ServeError::Io(io::Error::other(
                "the server thread panicked",
            ))),
            None => Ok(()),
        }
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
