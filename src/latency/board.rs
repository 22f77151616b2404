//! `latency-test --board ADDR[:PORT]`: the network half of commissioning a PC for a Mesa Ethernet
//! card (hm2_eth). Each servo period the servo thread sends the card one LBP16 **read-only**
//! request the size of hm2_eth's per-period read and spins on a non-blocking `recv` until the
//! reply comes or the budget (hm2_eth's `packet-read-timeout`, default 80 % of the period, from
//! the send) passes — what hm2_eth does, so the round trip is timed the way LinuxCNC lives it.
//!
//! **Never a write.** The card may be wired to a machine: every command this module sends is a
//! read, of places whose reading changes nothing (the board-info name, the IDROM, the address
//! pointer in a space's info area, the comm-status packet counter). No register with a read side
//! effect (a UART FIFO) is touched: the request reads the IDROM, not the modules' registers.
//!
//! **The request** (24 bytes, 6 commands; reply 48 bytes): four space-0 reads of 3, 5, 2 and 1
//! 32-bit words — the shape of a 7I96S/7I76E config's tram read (3 IOPort data registers, 5 step
//! generator accumulators, the encoder's count and latch, the watchdog's status: 11 words in 4
//! commands, as hostmot2 queues them) — taken from the IDROM (0x400..0x800, read-only on every
//! HostMot2 firmware); the info-area word 6 of space 0 (the space's address pointer); and the
//! received-packet counter of comm-status space 6 (address 8, 16 bits), which hm2_eth reads too.
//!
//! **Late or lost.** The 1-word read's address is `0x400 + 4 × (n mod 256)` for request `n`, so
//! the address pointer in the reply (`0x404 + 4 × (n mod 256)`) names the request it answers, even
//! when earlier requests or replies were lost (the packet counter alone would shift with a lost
//! request). A reply that comes after its budget is **late** (drained in later periods, counted,
//! its round trip measured when it was read: at most a period more than the truth); one that never
//! comes is **lost**: at the end the run waits [`GRACE`] for the last late replies, and a request
//! still unanswered 256 periods after its send counts lost then. A card that does not echo the
//! pointer (found out by the probe) is matched by its packet counter instead, which is exact while
//! no request is lost on the way to the card and nothing else talks to it. So `on time + late +
//! lost = sent`, always.

use crate::mesa::lbp16::{self, Width};
use crate::rt::clock::{self, Nanos};
use serde::Serialize;
use std::fmt;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the probe waits for the card's answer to one send.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_millis(50);
/// How many times the probe sends before it says nothing answered.
pub(crate) const PROBE_ATTEMPTS: u32 = 3;
/// How long the end of the run waits for late replies before counting the rest lost.
pub(crate) const GRACE: Duration = Duration::from_millis(200);
/// Requests in flight that can be told apart (the tag is the request number modulo this).
const SLOTS: usize = 256;
/// Missed deadlines kept for `--trace` (the newest; each its send and its deadline).
const MISSES_KEPT: usize = 1024;
/// Round-trip histogram: 1 µs bins, as the threads'.
pub(crate) const BIN_NS: u64 = 1000;
/// The IDROM, read-only on every HostMot2 firmware.
const IDROM: u16 = 0x0400;
/// The reads of a 7I96S/7I76E tram read: words per command.
const SHAPE: [u8; 3] = [3, 5, 2];
/// Data bytes of the reply: 11 words, the pointer, the counter.
pub(crate) const REPLY_BYTES: usize = 4 * 11 + 2 + 2;
/// Bytes of the request: 6 commands of a word and an address each.
pub(crate) const REQUEST_BYTES: usize = 6 * 4;

// ---- the address: refused before anything runs ---------------------------------------------------

/// Why an address is not a directly connected card (exit 2, before anything runs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    Unspecified,
    Multicast,
    Broadcast { iface: Option<String> },
    Gateway { gateway: Ipv4Addr, iface: String },
    NoRoute,
}

/// What the routing table says of an address that is allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    /// On a network an interface of this machine is on.
    Direct { iface: String },
    /// 127.0.0.0/8: a simulator on this machine (`rtapi mesa-sim --listen 127.0.0.1`): allowed for
    /// rehearsal; the figures then say nothing about a NIC.
    Loopback,
}

/// Checks `ip` against the routing table's text (`/proc/net/route`): the longest prefix that
/// matches must be a directly connected network, not a gateway's.
pub(crate) fn route(ip: Ipv4Addr, proc_net_route: &str) -> Result<Route, Refusal> {
    if ip.is_unspecified() {
        return Err(Refusal::Unspecified);
    }
    if ip.is_multicast() {
        return Err(Refusal::Multicast);
    }
    if ip.is_broadcast() {
        return Err(Refusal::Broadcast { iface: None });
    }
    if ip.is_loopback() {
        return Ok(Route::Loopback);
    }
    // The kernel's choice among the routes (longest prefix, then metric): detect's one reading
    // of the table, shared with `rtapi detect --board`.
    let table = crate::detect::route::parse_route_table(proc_net_route);
    let Some(r) = crate::detect::route::route_to(&table, ip) else {
        return Err(Refusal::NoRoute);
    };
    let iface = r.interface.clone();
    if let Some(gateway) = r.gateway {
        return Err(Refusal::Gateway { gateway, iface });
    }
    let host_bits = u32::MAX.checked_shr(u32::from(r.prefix_len)).unwrap_or(0);
    if r.prefix_len < 31 && u32::from(ip) & host_bits == host_bits {
        return Err(Refusal::Broadcast { iface: Some(iface) });
    }
    Ok(Route::Direct { iface })
}

impl Refusal {
    pub(crate) fn message(&self, ip: Ipv4Addr) -> String {
        let what = match self {
            Refusal::Unspecified => "the unspecified address, no card's".to_string(),
            Refusal::Multicast => "a multicast address: a card has one unicast address".to_string(),
            Refusal::Broadcast { iface: None } => {
                "the broadcast address: every host on the network would get the requests".into()
            }
            Refusal::Broadcast { iface: Some(i) } => format!(
                "the broadcast address of {i}'s network: every host on it would get the requests"
            ),
            Refusal::Gateway { gateway, iface } => format!(
                "reached through the gateway {gateway} (on {iface}): a Mesa card must be on a network of this PC's own, cabled to its NIC, and hm2_eth never goes through a router"
            ),
            Refusal::NoRoute => {
                "on no network of this PC (no route to it): is the NIC up and addressed on the card's network (e.g. the card at 192.168.1.121, the NIC at 192.168.1.1/24)?".into()
            }
        };
        format!("--board {ip}: {what}; give the address of the card on the network the NIC is cabled to")
    }
}

// ---- the probe: what answers at the address --------------------------------------------------

/// The request of period `n` (and of the probe, `n = 0`), with its 1-word read at the tag address.
fn request(n: u64) -> [u8; REQUEST_BYTES] {
    let mut r = Vec::with_capacity(REQUEST_BYTES);
    let mut at = IDROM;
    for words in SHAPE {
        lbp16::push(&mut r, lbp16::read(0, Width::W32, words), Some(at), &[]);
        at += 4 * u16::from(words);
    }
    lbp16::push(
        &mut r,
        lbp16::read(0, Width::W32, 1),
        Some(tag_address(n)),
        &[],
    );
    let pointer = lbp16::Command {
        info: true,
        increment: false,
        ..lbp16::read(0, Width::W16, 1)
    };
    lbp16::push(&mut r, pointer, Some(6), &[]);
    lbp16::push(&mut r, lbp16::read(6, Width::W16, 1), Some(8), &[]);
    let mut out = [0u8; REQUEST_BYTES];
    out.copy_from_slice(&r);
    out
}

fn tag_address(n: u64) -> u16 {
    IDROM + 4 * (n % SLOTS as u64) as u16
}

/// Patches request `n`'s tag address into a request (no allocation: the RT path's).
#[inline]
fn set_tag(req: &mut [u8; REQUEST_BYTES], n: u64) {
    req[14..16].copy_from_slice(&tag_address(n).to_le_bytes());
}

/// The reply's (pointer echo, packet counter).
#[inline]
fn reply_tags(reply: &[u8]) -> (u16, u16) {
    let p = u16::from_le_bytes([reply[44], reply[45]]);
    let c = u16::from_le_bytes([reply[46], reply[47]]);
    (p, c)
}

/// What answered at the address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    /// The board-info name (space 7), e.g. `7I96S`.
    pub(crate) name: String,
    /// The card echoes its address pointer (replies are matched by it); else by its counter.
    pub(crate) echoes_pointer: bool,
    /// The card's received-packet counter in the probe's reply.
    pub(crate) counter: u16,
    pub(crate) route: Route,
}

/// Why the probe found no card (exit 1: the command was right, the card did not answer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NotFound {
    NoAnswer,
    /// ICMP port unreachable: a host is there, nothing listens on the port.
    Refused,
    /// Something answered, not as a Mesa card would.
    NotMesa {
        bytes: usize,
    },
    Socket(String),
}

impl NotFound {
    pub(crate) fn message(&self, addr: SocketAddrV4) -> String {
        match self {
            NotFound::NoAnswer => format!(
                "no answer from {addr} to {PROBE_ATTEMPTS} requests, {} ms each: is the card powered, on this network, at this address (its jumpers or its EEPROM set it)?",
                PROBE_TIMEOUT.as_millis()
            ),
            NotFound::Refused => format!(
                "a host at {} answered that nothing listens on UDP port {}: something answered but not as a Mesa card (a PC? the wrong port?)",
                addr.ip(),
                addr.port()
            ),
            NotFound::NotMesa { bytes } => format!(
                "something answered at {addr} but not as a Mesa card: a reply of {bytes} bytes to an LBP16 read that a card answers with {}",
                16 + REPLY_BYTES
            ),
            NotFound::Socket(e) => format!("--board {addr}: {e}"),
        }
    }
}

/// A UDP socket connected to the card (its source port the kernel's choice).
fn connect(addr: SocketAddrV4) -> Result<UdpSocket, NotFound> {
    let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))
        .and_then(|s| s.connect(addr).map(|()| s))
        .map_err(|e| NotFound::Socket(format!("cannot open a UDP socket to it: {e}")))?;
    Ok(s)
}

/// Reads the card's board-info name (space 7, 16 bytes) and one period's request, waiting at most
/// [`PROBE_TIMEOUT`] for each of [`PROBE_ATTEMPTS`] sends (one lost packet on a lossy link is not
/// a missing card): what answered at `addr`. Only reads.
pub(crate) fn probe(addr: SocketAddrV4, route: Route) -> Result<(Found, UdpSocket), NotFound> {
    let sock = connect(addr)?;
    let mut req = Vec::new();
    lbp16::push(&mut req, lbp16::read(7, Width::W16, 8), Some(0), &[]);
    req.extend_from_slice(&request(0));
    let mut attempts = 0;
    let mut t0 = Instant::now();
    let mut buf = [0u8; 1500];
    loop {
        let left = PROBE_TIMEOUT.saturating_sub(t0.elapsed());
        if attempts == 0 || left.is_zero() {
            if attempts == PROBE_ATTEMPTS {
                return Err(NotFound::NoAnswer);
            }
            sock.send(&req)
                .map_err(|e| NotFound::Socket(format!("cannot send to it: {e}")))?;
            attempts += 1;
            t0 = Instant::now();
            continue;
        }
        sock.set_read_timeout(Some(left))
            .map_err(|e| NotFound::Socket(e.to_string()))?;
        match sock.recv(&mut buf) {
            Ok(n) if n != 16 + REPLY_BYTES => return Err(NotFound::NotMesa { bytes: n }),
            Ok(_) => {
                let raw = &buf[..16];
                let end = raw.iter().position(|&b| b == 0).unwrap_or(16);
                let name = &raw[..end];
                if name.is_empty() || !name.iter().all(|b| b.is_ascii_graphic() || *b == b' ') {
                    return Err(NotFound::NotMesa {
                        bytes: 16 + REPLY_BYTES,
                    });
                }
                let (pointer, counter) = reply_tags(&buf[16..16 + REPLY_BYTES]);
                let found = Found {
                    name: String::from_utf8_lossy(name).trim().to_string(),
                    echoes_pointer: pointer == tag_address(0) + 4,
                    counter,
                    route,
                };
                sock.set_nonblocking(true)
                    .map_err(|e| NotFound::Socket(e.to_string()))?;
                return Ok((found, sock));
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                return Err(NotFound::Refused)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(NotFound::Socket(format!("receiving from it: {e}"))),
        }
    }
}

// ---- the RT side: one request per period ----------------------------------------------------

/// What the RT thread counts, read by the monitor each second and by the report at the end:
/// relaxed atomics written by the one RT thread (single writer).
pub(crate) struct Shared {
    pub(crate) sent: AtomicU64,
    pub(crate) on_time: AtomicU64,
    pub(crate) late: AtomicU64,
    /// Counted lost on the RT side (a request unanswered 256 periods, or not sent).
    pub(crate) lost: AtomicU64,
    /// Sends the kernel refused (counted lost too).
    pub(crate) send_errors: AtomicU64,
    /// Datagrams that answered no request in flight (duplicates, another sender's).
    pub(crate) strays: AtomicU64,
    pub(crate) rtt_max: AtomicU64,
    pub(crate) rtt_sum: AtomicU64,
    pub(crate) rtt_min: AtomicU64,
    /// The highest packet counter seen in a reply (received requests, from the card's count).
    pub(crate) last_counter: AtomicU64,
    /// Round trips of the replies that came (on time or late), 1 µs bins, and beyond.
    pub(crate) bins: Box<[AtomicU64]>,
    pub(crate) overflow: AtomicU64,
    /// Send time (CLOCK_MONOTONIC ns) of the request in flight in each slot; 0: none.
    sent_at: Box<[AtomicI64]>,
    /// Periods whose reply was not there at the budget (late or lost), ever; the newest
    /// [`MISSES_KEPT`] of them in `misses`: `[send, deadline]` (CLOCK_MONOTONIC ns) at
    /// `2 × (n mod MISSES_KEPT)`.
    miss_count: AtomicU64,
    misses: Box<[AtomicI64]>,
}

impl Shared {
    fn new(bins: usize) -> Shared {
        let zeros = |n: usize| (0..n).map(|_| AtomicU64::new(0)).collect();
        Shared {
            sent: AtomicU64::new(0),
            on_time: AtomicU64::new(0),
            late: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            send_errors: AtomicU64::new(0),
            strays: AtomicU64::new(0),
            rtt_max: AtomicU64::new(0),
            rtt_sum: AtomicU64::new(0),
            rtt_min: AtomicU64::new(u64::MAX),
            last_counter: AtomicU64::new(0),
            bins: zeros(bins),
            overflow: AtomicU64::new(0),
            sent_at: (0..SLOTS).map(|_| AtomicI64::new(0)).collect(),
            miss_count: AtomicU64::new(0),
            misses: (0..2 * MISSES_KEPT).map(|_| AtomicI64::new(0)).collect(),
        }
    }

    /// A period whose reply was not there at its deadline: `[send, deadline]` kept for `--trace`.
    #[inline]
    fn missed(&self, send: Nanos, deadline: Nanos) {
        let n = self.miss_count.load(Relaxed);
        let i = 2 * (n as usize % MISSES_KEPT);
        self.misses[i].store(send.as_nanos(), Relaxed);
        self.misses[i + 1].store(deadline.as_nanos(), Relaxed);
        self.miss_count.store(n + 1, Relaxed);
    }

    /// The kept misses, oldest first, and how many there were in all (after the thread stopped).
    pub(crate) fn misses(&self) -> (Vec<(u64, u64)>, u64) {
        let n = self.miss_count.load(Relaxed);
        let kept = (n as usize).min(MISSES_KEPT);
        let first = n as usize - kept;
        let out = (first..n as usize)
            .map(|k| {
                let i = 2 * (k % MISSES_KEPT);
                let at = |j: usize| self.misses[j].load(Relaxed).max(0) as u64;
                (at(i), at(i + 1))
            })
            .collect();
        (out, n)
    }

    /// Adds one to a counter only this thread writes (no locked read-modify-write needed).
    #[inline]
    fn bump(c: &AtomicU64, by: u64) {
        c.store(c.load(Relaxed).wrapping_add(by), Relaxed);
    }

    /// A reply to the request in `slot` came at `now`: its round trip is counted, on time or late.
    #[inline]
    fn answered(&self, slot: usize, now: Nanos, budget_ns: u64) -> bool {
        let sent = self.sent_at[slot].load(Relaxed);
        if sent == 0 {
            Self::bump(&self.strays, 1);
            return false;
        }
        self.sent_at[slot].store(0, Relaxed);
        let rtt = (now.as_nanos() - sent).max(0) as u64;
        let on_time = rtt <= budget_ns;
        Self::bump(if on_time { &self.on_time } else { &self.late }, 1);
        Self::bump(&self.rtt_sum, rtt);
        if rtt > self.rtt_max.load(Relaxed) {
            self.rtt_max.store(rtt, Relaxed);
        }
        if rtt < self.rtt_min.load(Relaxed) {
            self.rtt_min.store(rtt, Relaxed);
        }
        match self.bins.get((rtt / BIN_NS) as usize) {
            Some(b) => Self::bump(b, 1),
            None => Self::bump(&self.overflow, 1),
        }
        on_time
    }

    /// The figures so far (any thread; exact once the RT thread stopped).
    pub(crate) fn counts(&self) -> Counts {
        let on_time = self.on_time.load(Relaxed);
        let late = self.late.load(Relaxed);
        Counts {
            sent: self.sent.load(Relaxed),
            on_time,
            late,
            lost: self.lost.load(Relaxed),
            send_errors: self.send_errors.load(Relaxed),
            strays: self.strays.load(Relaxed),
            rtt_max_ns: self.rtt_max.load(Relaxed),
            rtt_min_ns: Some(self.rtt_min.load(Relaxed)).filter(|&m| m != u64::MAX),
            rtt_mean_ns: (on_time + late > 0)
                .then(|| self.rtt_sum.load(Relaxed) as f64 / (on_time + late) as f64),
        }
    }

    /// The histogram's counts now.
    pub(crate) fn histogram(&self) -> (Vec<u64>, u64) {
        (
            self.bins.iter().map(|b| b.load(Relaxed)).collect(),
            self.overflow.load(Relaxed),
        )
    }

    /// Requests still unanswered.
    pub(crate) fn in_flight(&self) -> u64 {
        self.sent_at.iter().filter(|s| s.load(Relaxed) != 0).count() as u64
    }
}

/// The counters at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Counts {
    pub(crate) sent: u64,
    pub(crate) on_time: u64,
    pub(crate) late: u64,
    pub(crate) lost: u64,
    pub(crate) send_errors: u64,
    pub(crate) strays: u64,
    pub(crate) rtt_max_ns: u64,
    pub(crate) rtt_min_ns: Option<u64>,
    pub(crate) rtt_mean_ns: Option<f64>,
}

/// How replies are told apart, shared by the RT side and the end's drain.
#[derive(Clone)]
struct Matcher {
    budget_ns: u64,
    echoes: bool,
    /// The packet counter that request 0 (the probe's) got.
    counter0: u16,
    shared: Arc<Shared>,
}

impl Matcher {
    /// The slot a reply answers, from its tags.
    #[inline]
    fn slot_of(&self, reply: &[u8]) -> usize {
        let (pointer, counter) = reply_tags(reply);
        if self.echoes {
            (usize::from(pointer.wrapping_sub(IDROM + 4)) / 4) % SLOTS
        } else {
            usize::from(counter.wrapping_sub(self.counter0)) % SLOTS
        }
    }

    /// Reads every datagram waiting on `sock` into `buf`; true when one answered `want`'s slot.
    /// No allocation, lock or log: the RT path's.
    #[inline]
    fn drain(&self, sock: &UdpSocket, buf: &mut [u8], want: Option<usize>) -> bool {
        let mut got = false;
        loop {
            // SAFETY: recv(2) into `buf`, a live slice of the length given; MSG_DONTWAIT never
            // blocks the RT thread.
            let n = unsafe {
                libc::recv(
                    sock.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n < 0 {
                // EAGAIN: nothing more; ECONNREFUSED (an ICMP error) and the rest: nothing to read.
                return got;
            }
            let now = clock::now();
            let n = n as usize;
            if n != REPLY_BYTES {
                Shared::bump(&self.shared.strays, 1);
                continue;
            }
            let slot = self.slot_of(&buf[..n]);
            let (_, counter) = reply_tags(&buf[..n]);
            let seen = u64::from(counter.wrapping_sub(self.counter0));
            if seen > self.shared.last_counter.load(Relaxed) && seen < 1 << 15 {
                self.shared.last_counter.store(seen, Relaxed);
            }
            if self.shared.answered(slot, now, self.budget_ns) && Some(slot) == want {
                got = true;
            }
        }
    }
}

/// The servo thread's side: its socket, its request, what it counts into. Made (and allocated)
/// before the thread starts; [`Prober::period`] allocates, locks and logs nothing.
pub(crate) struct Prober {
    sock: UdpSocket,
    req: [u8; REQUEST_BYTES],
    buf: [u8; 1536],
    next: u64,
    m: Matcher,
}

/// The end of the run's side: the same socket, to drain the last late replies.
pub(crate) struct Drainer {
    sock: UdpSocket,
    m: Matcher,
}

impl Prober {
    /// The thread's prober on the probe's socket (`sock`, non-blocking), the end's drainer, and
    /// what they share.
    pub(crate) fn new(
        sock: UdpSocket,
        found: &Found,
        budget: Nanos,
        bins: usize,
    ) -> std::io::Result<(Prober, Drainer, Arc<Shared>)> {
        let shared = Arc::new(Shared::new(bins));
        let m = Matcher {
            budget_ns: budget.as_nanos().max(0) as u64,
            echoes: found.echoes_pointer,
            counter0: found.counter,
            shared: Arc::clone(&shared),
        };
        let drainer = Drainer {
            sock: sock.try_clone()?,
            m: m.clone(),
        };
        Ok((
            Prober {
                sock,
                req: request(1),
                buf: [0u8; 1536],
                next: 1,
                m,
            },
            drainer,
            shared,
        ))
    }

    /// One period: earlier replies drained, this period's request sent, then a spin on a
    /// non-blocking `recv` until its reply or the budget from the send (hm2_eth's way). The time
    /// from the send to the reply (or the budget) is the period's I/O time; a reply that did not
    /// come in time is its I/O error (`runtime::io::note_io`).
    #[inline]
    pub(crate) fn period(&mut self) {
        self.m.drain(&self.sock, &mut self.buf, None);
        let n = self.next;
        self.next += 1;
        let slot = (n % SLOTS as u64) as usize;
        let sh = &self.m.shared;
        if sh.sent_at[slot].load(Relaxed) != 0 {
            // Unanswered for 256 periods: lost; its slot is this request's now.
            sh.sent_at[slot].store(0, Relaxed);
            Shared::bump(&sh.lost, 1);
        }
        set_tag(&mut self.req, n);
        let t0 = clock::now();
        // SAFETY: send(2) of `req`, a live array of the length given, on our connected socket.
        let sent = unsafe {
            libc::send(
                self.sock.as_raw_fd(),
                self.req.as_ptr().cast(),
                self.req.len(),
                libc::MSG_DONTWAIT,
            )
        };
        Shared::bump(&sh.sent, 1);
        if sent != REQUEST_BYTES as isize {
            Shared::bump(&sh.send_errors, 1);
            Shared::bump(&sh.lost, 1);
            crate::runtime::io::note_io((clock::now() - t0).as_nanos().max(0) as u64, 1);
            return;
        }
        sh.sent_at[slot].store(t0.as_nanos().max(1), Relaxed);
        let deadline = t0 + Nanos::from_nanos(self.m.budget_ns as i64);
        let answered = loop {
            if self.m.drain(&self.sock, &mut self.buf, Some(slot)) {
                break true;
            }
            let now = clock::now();
            if now >= deadline {
                break false;
            }
            // A short pause between two reads, as hm2_eth's delay between its recv calls.
            let until = now + Nanos::from_micros(2);
            while clock::now() < until {
                std::hint::spin_loop();
            }
        };
        let took = (clock::now() - t0).as_nanos().max(0) as u64;
        if !answered {
            sh.missed(t0, deadline);
        }
        crate::runtime::io::note_io(took, u64::from(!answered));
    }
}

impl Drainer {
    /// After the thread stopped: waits up to [`GRACE`] for the replies still in flight (late),
    /// then counts the rest lost.
    pub(crate) fn finish(self) {
        let t0 = Instant::now();
        let mut buf = [0u8; 1536];
        while self.m.shared.in_flight() > 0 && t0.elapsed() < GRACE {
            self.m.drain(&self.sock, &mut buf, None);
            std::thread::sleep(Duration::from_micros(200));
        }
        for s in self.m.shared.sent_at.iter() {
            if s.swap(0, Relaxed) != 0 {
                Shared::bump(&self.m.shared.lost, 1);
            }
        }
    }
}

/// The live view's board line, once a second: the worst round trip of the last second from the
/// bins that grew (bin resolution), and the counts so far.
#[derive(Default)]
pub(crate) struct Watch {
    prev: Vec<u64>,
    prev_overflow: u64,
    prev_max: u64,
    per_second: Vec<u64>,
}

impl Watch {
    pub(crate) fn tick(&mut self, shared: &Shared) -> String {
        let (bins, overflow) = shared.histogram();
        let c = shared.counts();
        let grew = bins
            .iter()
            .enumerate()
            .rev()
            .find(|(i, &b)| b > self.prev.get(*i).copied().unwrap_or(0))
            .map(|(i, _)| (i as u64 + 1) * BIN_NS);
        let last = if overflow > self.prev_overflow && c.rtt_max_ns > self.prev_max {
            Some(c.rtt_max_ns)
        } else {
            grew.map(|g| g.min(c.rtt_max_ns.max(BIN_NS)))
        };
        self.per_second.push(last.unwrap_or(0));
        self.prev = bins;
        self.prev_overflow = overflow;
        self.prev_max = c.rtt_max_ns;
        let us = |ns: u64| crate::rt::units::us(ns as f64);
        format!(
            "board round trip: last 1s max {} us, run max {} us | sent {}  on time {}  late {}  unanswered {}",
            last.map_or("-".into(), us),
            us(c.rtt_max_ns),
            c.sent,
            c.on_time,
            c.late,
            c.sent.saturating_sub(c.on_time + c.late)
        )
    }

    /// The worst round trip of each second so far.
    pub(crate) fn max_per_second(&self) -> Vec<u64> {
        self.per_second.clone()
    }
}

// ---- the result and the verdict --------------------------------------------------------------

/// The report's `board` object.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct BoardResult {
    pub(crate) address: String,
    /// The board-info name, e.g. `7I96S`.
    pub(crate) name: String,
    /// `direct` (on a network of this PC) or `loopback` (a simulator on this machine).
    pub(crate) route: &'static str,
    pub(crate) interface: Option<String>,
    /// How replies were matched to requests: `pointer` (the echoed address) or `counter`.
    pub(crate) matched_by: &'static str,
    pub(crate) request_bytes: usize,
    pub(crate) reply_bytes: usize,
    pub(crate) period_ns: u64,
    /// A reply later than this after its send is late (hm2_eth's `packet-read-timeout`).
    pub(crate) budget_ns: u64,
    pub(crate) sent: u64,
    pub(crate) on_time: u64,
    pub(crate) late: u64,
    pub(crate) lost: u64,
    /// Sends the kernel refused (part of `lost`).
    pub(crate) send_errors: u64,
    /// Datagrams that answered no request in flight.
    pub(crate) strays: u64,
    /// Requests the card counted receiving (its packet counter), when replies came.
    pub(crate) card_received: u64,
    /// Round trips of the replies that came (on time and late).
    pub(crate) rtt_ns: super::report::LatencySummary,
    pub(crate) histogram: super::report::HistogramOut,
    /// The worst round trip of each second.
    pub(crate) max_rtt_per_second_ns: Vec<u64>,
    /// What the servo thread's stats block recorded in its I/O section (what `rtapi show thread`
    /// and `rtapi export` read): periods with I/O, their I/O time, and the I/O errors (a reply
    /// not in time: late or lost).
    pub(crate) stats_block: Option<IoRecorded>,
    pub(crate) verdict: BoardVerdict,
    /// `--trace`: what ran on the network path while replies were missing.
    pub(crate) network_causes: Option<NetworkCauses>,
}

/// `--trace` with `--board`: for each period whose reply was not there at the budget (late or
/// lost), the busiest network work on any CPU between the send and the deadline
/// ([`crate::trace::network`]), counted over the run.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct NetworkCauses {
    /// Periods whose reply missed its deadline, in all.
    pub(crate) misses: u64,
    /// Of those, the ones whose window the network trace still held.
    pub(crate) traced: u64,
    /// Traced windows in which no network work ran at all (the reply was held elsewhere: the
    /// card, the other end's scheduling, outside the kernel).
    pub(crate) nothing: u64,
    /// The busiest network work of each traced window, tallied, most frequent first.
    pub(crate) causes: Vec<NetworkCause>,
}

/// One kind of network work named as the busiest in some windows.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct NetworkCause {
    pub(crate) cpu: usize,
    /// `NET_RX softirq`, `NET_TX softirq`, `ksoftirqd`, `IRQ 30 (eth0-rx-0)`.
    pub(crate) what: String,
    /// Windows in which it was the busiest.
    pub(crate) windows: u64,
    /// Its longest time inside one window, ns.
    pub(crate) longest_ns: u64,
}

/// Names the busiest network work of each missed window from a network trace session
/// (`TraceSession::start_network`, stopped), reading each CPU's ring once.
///
/// The measuring threads' own softirq work (`own`: their thread ids) is left out: a request sent on
/// a veth is delivered by a NET_RX run in its sender's own `send`, the request's path rather than
/// something holding the reply back.
pub(crate) fn explain_misses(
    session: &crate::trace::TraceSession,
    misses: &[(u64, u64)],
    total: u64,
    own: &[u32],
) -> NetworkCauses {
    use crate::trace::network::{activity, NetWork, LOOKBEHIND_NS};
    let mut out = NetworkCauses {
        misses: total,
        ..NetworkCauses::default()
    };
    let (Some(first), Some(last)) = (
        misses.iter().map(|m| m.0).min(),
        misses.iter().map(|m| m.1).max(),
    ) else {
        return out;
    };
    let mut events = Vec::new();
    // From when every CPU's ring still holds its events: a ring that overwrote events (a busy
    // CPU's) holds them from its first one kept on; one that did not, from the start.
    let mut covered_from = 0u64;
    for &cpu in session.cpus() {
        if let Ok(w) = session.read_window(cpu, 0, last) {
            if let Some(e) = w
                .events
                .first()
                .filter(|_| session.overruns(cpu) != Some(0))
            {
                covered_from = covered_from.max(e.ts_ns);
            }
            events.extend(w.events.into_iter().filter(|e| {
                e.ts_ns >= first.saturating_sub(LOOKBEHIND_NS)
                    && !(own.contains(&e.pid)
                        && matches!(
                            e.kind,
                            crate::trace::EventKind::SoftirqEntry { .. }
                                | crate::trace::EventKind::SoftirqExit { .. }
                        ))
            }));
        }
    }
    events.sort_by_key(|e| e.ts_ns);
    let mut tally: std::collections::BTreeMap<(usize, String), (u64, u64)> = Default::default();
    for &(from, to) in misses {
        // A window the rings had already overwritten says nothing.
        if from < covered_from {
            continue;
        }
        out.traced += 1;
        let a = events.partition_point(|e| e.ts_ns < from.saturating_sub(LOOKBEHIND_NS));
        let b = events.partition_point(|e| e.ts_ns <= to);
        match activity(&events[a..b], from, to).busiest() {
            None => out.nothing += 1,
            Some(busy) => {
                let what = match &busy.what {
                    NetWork::Irq { irq, name } => format!("IRQ {irq} ({name})"),
                    NetWork::NetRx => "NET_RX softirq".into(),
                    NetWork::NetTx => "NET_TX softirq".into(),
                    NetWork::Ksoftirqd => "ksoftirqd".into(),
                };
                let t = tally.entry((busy.cpu, what)).or_default();
                t.0 += 1;
                t.1 = t.1.max(busy.runs.longest_ns);
            }
        }
    }
    out.causes = tally
        .into_iter()
        .map(|((cpu, what), (windows, longest_ns))| NetworkCause {
            cpu,
            what,
            windows,
            longest_ns,
        })
        .collect();
    out.causes.sort_by_key(|c| std::cmp::Reverse(c.windows));
    out
}

/// The servo thread's stats-block I/O section at the end of the run.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct IoRecorded {
    pub(crate) periods: u64,
    pub(crate) calls: u64,
    pub(crate) max_ns: u64,
    pub(crate) errors: u64,
}

impl IoRecorded {
    pub(crate) fn of(io: &rtapi_hal::IoStats) -> IoRecorded {
        IoRecorded {
            periods: io.periods,
            calls: io.calls,
            max_ns: io.max_ns,
            errors: io.errors.map_or(0, |e| e.count),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct BoardVerdict {
    /// Every reply came within the budget.
    pub(crate) carries: bool,
    /// Most replies are late: the period itself is too short for this card on this PC.
    pub(crate) period_too_short: bool,
    /// `budget − p99.9`, when it carries.
    pub(crate) spare_ns: Option<u64>,
    pub(crate) summary: String,
}

/// Percentiles from the bins (upper bin edge, clamped to min..max).
fn summary(bins: &[u64], overflow: u64, c: &Counts) -> super::report::LatencySummary {
    let total: u64 = bins.iter().sum::<u64>() + overflow;
    let (min, max) = (c.rtt_min_ns.unwrap_or(0), c.rtt_max_ns);
    let pct = |q: f64| {
        if total == 0 {
            return 0;
        }
        let want = ((q * total as f64).ceil() as u64).max(1);
        let mut acc = 0;
        for (i, &b) in bins.iter().enumerate() {
            acc += b;
            if acc >= want {
                return ((i as u64 + 1) * BIN_NS).clamp(min, max);
            }
        }
        max
    };
    let mean = c.rtt_mean_ns.unwrap_or(0.0);
    let var = {
        let (mut n, mut s) = (0u64, 0f64);
        for (i, &b) in bins.iter().enumerate() {
            let x = (i as f64 + 0.5) * BIN_NS as f64 - mean;
            s += b as f64 * x * x;
            n += b;
        }
        if n > 0 {
            s / n as f64
        } else {
            0.0
        }
    };
    super::report::LatencySummary {
        min,
        mean,
        stddev: var.sqrt(),
        p50: pct(0.5),
        p99: pct(0.99),
        p999: pct(0.999),
        max,
    }
}

/// What the run found, once the thread stopped and [`Prober::finish`] ran.
pub(crate) fn result(
    addr: SocketAddrV4,
    found: &Found,
    shared: &Shared,
    period: Nanos,
    budget: Nanos,
    per_second: Vec<u64>,
    stats_block: Option<IoRecorded>,
) -> BoardResult {
    let c = shared.counts();
    let (bins, overflow) = shared.histogram();
    let rtt = summary(&bins, overflow, &c);
    let budget_ns = budget.as_nanos().max(0) as u64;
    let period_ns = period.as_nanos().max(0) as u64;
    let verdict = judge(addr, &found.name, &c, &rtt, period_ns, budget_ns);
    BoardResult {
        address: addr.to_string(),
        name: found.name.clone(),
        route: match found.route {
            Route::Direct { .. } => "direct",
            Route::Loopback => "loopback",
        },
        interface: match &found.route {
            Route::Direct { iface } => Some(iface.clone()),
            Route::Loopback => None,
        },
        matched_by: if found.echoes_pointer {
            "pointer"
        } else {
            "counter"
        },
        request_bytes: REQUEST_BYTES,
        reply_bytes: REPLY_BYTES,
        period_ns,
        budget_ns,
        sent: c.sent,
        on_time: c.on_time,
        late: c.late,
        lost: c.lost,
        send_errors: c.send_errors,
        strays: c.strays,
        card_received: shared.last_counter.load(Relaxed),
        rtt_ns: rtt,
        histogram: super::report::HistogramOut {
            bin_ns: BIN_NS,
            counts: bins,
            overflow,
        },
        max_rtt_per_second_ns: per_second,
        stats_block,
        verdict,
        network_causes: None,
    }
}

/// The rate a period is, in words (`1 kHz`, `4 kHz`, `333.3 Hz`).
fn rate(period_ns: u64) -> String {
    let hz = 1e9 / period_ns.max(1) as f64;
    if hz >= 1000.0 {
        format!("{} kHz", crate::render::float_text(hz / 1000.0))
    } else {
        format!("{} Hz", crate::render::float_text(hz))
    }
}

/// The board's verdict (see the README's rules): it carries the servo thread when every reply
/// came within the budget; otherwise the late replies are LinuxCNC's `error finishing read`s, and
/// when the median itself is over the budget the period is too short for the card.
pub(crate) fn judge(
    addr: SocketAddrV4,
    name: &str,
    c: &Counts,
    rtt: &super::report::LatencySummary,
    period_ns: u64,
    budget_ns: u64,
) -> BoardVerdict {
    let us = |ns: u64| {
        format!(
            "{} µs",
            crate::render::float_text((ns as f64 / 100.0).round() / 10.0)
        )
    };
    let who = format!("the board at {} ({name})", addr.ip());
    let answered = c.on_time + c.late;
    if c.sent == 0 {
        return BoardVerdict {
            carries: false,
            period_too_short: false,
            spare_ns: None,
            summary: format!("{who}: no-data: no request was sent"),
        };
    }
    if c.late == 0 && c.lost == 0 {
        let spare = budget_ns.saturating_sub(rtt.p999);
        return BoardVerdict {
            carries: true,
            period_too_short: false,
            spare_ns: Some(spare),
            summary: format!(
                "{who}: carries a {} servo thread with {} to spare at p99.9 (round trip p99.9 {}, max {}, budget {}; {} of {} replies on time)",
                rate(period_ns),
                us(spare),
                us(rtt.p999),
                us(rtt.max),
                us(budget_ns),
                c.on_time,
                c.sent
            ),
        };
    }
    let too_short = answered > 0 && rtt.p50 > budget_ns;
    let mut s = format!(
        "{who}: no: {} of {} replies late (after the {} budget): LinuxCNC would report `error finishing read` {} times; {} lost",
        c.late,
        c.sent,
        us(budget_ns),
        c.late + c.lost,
        c.lost
    );
    if too_short {
        // hm2_eth's default budget is 80 % of the period: the period whose budget covers p99.
        let need = (rtt.p99 as f64 / 0.8 / 1000.0).ceil() as u64 * 1000;
        s.push_str(&format!(
            "; the {} period cannot carry this board: half the round trips take over {} (median {}); try a servo period of {} or more (p99 round trip {} / 80 %)",
            us(period_ns),
            us(budget_ns),
            us(rtt.p50),
            us(need),
            us(rtt.p99)
        ));
    }
    BoardVerdict {
        carries: false,
        period_too_short: too_short,
        spare_ns: None,
        summary: s,
    }
}

/// The network verdict of a machine that ran (`rtapi linuxcnc`'s summary at exit), from what the
/// master measured of a thread's I/O functions: the same rule as [`judge`] — the card was carried
/// when no reply missed hm2_eth's deadline — from hm2_eth's packet errors (each one an `error
/// finishing read`: a reply late or lost, which hm2_eth cannot tell apart) and the longest I/O of
/// a period against the default deadline (80 % of the period). `None` for a thread without I/O.
pub(crate) fn machine_verdict(
    thread: &str,
    period_ns: u64,
    io: &rtapi_hal::IoStats,
) -> Option<String> {
    if io.periods == 0 {
        return None;
    }
    let us = |ns: u64| {
        format!(
            "{} µs",
            crate::render::float_text((ns as f64 / 100.0).round() / 10.0)
        )
    };
    let deadline = period_ns / 5 * 4;
    let longest = format!(
        "its I/O took at most {} a period{}",
        us(io.max_ns),
        if io.max_ns < deadline {
            format!(
                ", {} under hm2_eth's default {} deadline",
                us(deadline - io.max_ns),
                us(deadline)
            )
        } else {
            format!(", past hm2_eth's default {} deadline", us(deadline))
        }
    );
    Some(match io.errors {
        None => format!(
            "network ({thread}): {} periods with I/O, no packet counter (a PCI card, or an older segment); {longest}",
            io.periods
        ),
        Some(e) if e.count == 0 => format!(
            "network ({thread}): carried the card: 0 packet errors in {} periods; {longest}",
            io.periods
        ),
        Some(e) => format!(
            "network ({thread}): no: {} packet errors in {} of {} periods (each an `error finishing read`: a reply late or lost); {longest}; measure the network alone with `rtapi latency-test --board ADDR`",
            e.count, e.periods, io.periods
        ),
    })
}

impl BoardResult {
    /// The round trips as a column of the `--histogram` file and a series of the `--plot`, named
    /// `board-rtt` (the figures of a thread's latency: the round trip's; its "period" is the budget,
    /// the time a reply has, which the plot draws as a line).
    pub(crate) fn as_thread(&self) -> super::report::ThreadResult {
        super::report::ThreadResult {
            name: "board-rtt".into(),
            period_ns: self.budget_ns,
            cycles: self.on_time + self.late,
            latency_ns: self.rtt_ns,
            histogram: self.histogram.clone(),
            max_latency_per_second_ns: self.max_rtt_per_second_ns.clone(),
            ..Default::default()
        }
    }
}

impl fmt::Display for BoardResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let us = |ns: u64| crate::rt::units::us(ns as f64);
        let r = &self.rtt_ns;
        writeln!(
            f,
            "\nboard {} ({}{}): {} requests of {} bytes (replies {} bytes), read only, matched by {}; budget {} us",
            self.address,
            self.name,
            match (&self.interface, self.route) {
                (Some(i), _) => format!(", via {i}"),
                (None, "loopback") => ", loopback: a simulator on this PC, no NIC measured".into(),
                _ => String::new(),
            },
            self.sent,
            self.request_bytes,
            self.reply_bytes,
            if self.matched_by == "pointer" {
                "the echoed address pointer"
            } else {
                "the card's packet counter"
            },
            us(self.budget_ns)
        )?;
        writeln!(
            f,
            "  round trip us: min {}  mean {}  p50 {}  p99 {}  p99.9 {}  max {}",
            us(r.min),
            crate::rt::units::us(r.mean),
            us(r.p50),
            us(r.p99),
            us(r.p999),
            us(r.max)
        )?;
        writeln!(
            f,
            "  replies: {} on time, {} late, {} lost ({} sent; the card counted {} received{})",
            self.on_time,
            self.late,
            self.lost,
            self.sent,
            self.card_received,
            if self.strays > 0 {
                format!("; {} stray datagrams", self.strays)
            } else {
                String::new()
            }
        )?;
        if let Some(n) = &self.network_causes {
            writeln!(
                f,
                "  network path (--trace) in the {} periods whose reply missed the budget: {} traced{}",
                n.misses,
                n.traced,
                if n.nothing > 0 {
                    format!(", {} with no network work at all (the card or the far end held the reply)", n.nothing)
                } else {
                    String::new()
                }
            )?;
            for c in &n.causes {
                writeln!(
                    f,
                    "    {} on CPU {}: the busiest in {} (longest {} us in one window)",
                    c.what,
                    c.cpu,
                    c.windows,
                    us(c.longest_ns)
                )?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_machines_network_verdict_follows_the_packet_errors() {
        let mut io = rtapi_hal::IoStats {
            periods: 1000,
            calls: 2000,
            max_ns: 612_000,
            errors: Some(rtapi_hal::IoErrors::default()),
            ..Default::default()
        };
        let v = |io: &rtapi_hal::IoStats| machine_verdict("servo-thread", 1_000_000, io);
        assert_eq!(
            v(&io).unwrap(),
            "network (servo-thread): carried the card: 0 packet errors in 1000 periods; its I/O took at most 612 µs a period, 188 µs under hm2_eth's default 800 µs deadline"
        );
        io.errors = Some(rtapi_hal::IoErrors {
            count: 3,
            periods: 2,
        });
        io.max_ns = 900_000;
        let no = v(&io).unwrap();
        assert!(
            no.starts_with("network (servo-thread): no: 3 packet errors in 2 of 1000 periods"),
            "{no}"
        );
        assert!(
            no.contains("past hm2_eth's default 800 µs deadline"),
            "{no}"
        );
        io.errors = None;
        assert!(v(&io).unwrap().contains("no packet counter"));
        io.periods = 0;
        assert_eq!(v(&io), None);
    }
    use super::*;

    const ROUTES: &str =
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
eth0\t00000000\t0102000A\t0003\t0\t0\t100\t00000000\t0\t0\t0\n\
eth0\t0002000A\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0\n\
hm2\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
hm2\t006433C6\t050200C0\t0003\t0\t0\t0\t00FFFFFF\t0\t0\t0\n";

    #[test]
    fn the_longest_prefix_decides_direct_or_gateway() {
        let ip = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        assert_eq!(
            route(ip("192.0.2.2"), ROUTES),
            Ok(Route::Direct {
                iface: "hm2".into()
            })
        );
        assert_eq!(
            route(ip("198.51.100.7"), ROUTES),
            Err(Refusal::Gateway {
                gateway: ip("192.0.2.5"),
                iface: "hm2".into()
            })
        );
        // The default route is a gateway's.
        assert!(matches!(
            route(ip("203.0.113.1"), ROUTES),
            Err(Refusal::Gateway { .. })
        ));
        assert_eq!(route(ip("203.0.113.1"), ""), Err(Refusal::NoRoute));
        assert_eq!(
            route(ip("192.0.2.255"), ROUTES),
            Err(Refusal::Broadcast {
                iface: Some("hm2".into())
            })
        );
        assert_eq!(route(ip("224.0.0.1"), ROUTES), Err(Refusal::Multicast));
        assert_eq!(route(ip("0.0.0.0"), ROUTES), Err(Refusal::Unspecified));
        assert_eq!(
            route(ip("255.255.255.255"), ROUTES),
            Err(Refusal::Broadcast { iface: None })
        );
        assert_eq!(route(ip("127.0.0.1"), ROUTES), Ok(Route::Loopback));
    }

    #[test]
    fn the_request_only_reads_and_its_reply_names_it() {
        let mut b = crate::mesa::Board::new(crate::mesa::BoardKind::I96S, 16);
        for n in [1u64, 2, 255, 256, 1000] {
            let mut req = request(0);
            set_tag(&mut req, n);
            let (ops, err) = lbp16::parse(&req);
            assert!(err.is_none());
            assert!(ops.iter().all(|o| !o.cmd.write), "{ops:?}");
            let reply = b.handle(&req, n * 1000).unwrap();
            assert_eq!(reply.len(), REPLY_BYTES);
            let (p, _) = reply_tags(&reply);
            assert_eq!(usize::from(p - IDROM - 4) / 4, (n % 256) as usize);
        }
        assert!(b.write_log().is_empty());
    }
}
