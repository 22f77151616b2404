//! `rtapi mesa-sim --listen ADDR[:PORT] [--board 7i96s|7i76e] [--mac MAC] [--input PIN]…
//! [--switch PIN=STEPGEN@STEPS]…`: serves a simulated Mesa Ethernet card until Ctrl-C or SIGTERM,
//! printing what the host does with it.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

use crate::mesa::lbp16::UDP_PORT;
use crate::mesa::server::{self, Shared};
use crate::mesa::{BoardKind, Event, ServeError};

use super::Failure;

#[derive(clap::Args)]
pub(super) struct Args {
    /// The IPv4 address (and UDP port, 27181 by default: the one hm2_eth uses) to serve the card
    /// on, e.g. 192.0.2.2 or 192.0.2.2:27181; 0.0.0.0 serves on every address.
    #[arg(long, value_name = "ADDR[:PORT]")]
    listen: String,
    /// The card to be: 7i96s or 7i76e.
    #[arg(long, default_value = "7i96s", value_name = "BOARD")]
    board: String,
    /// The MAC address the card reports (hm2_eth makes it a permanent ARP entry); by default the
    /// one of the interface each request arrives on.
    #[arg(long, value_name = "XX:XX:XX:XX:XX:XX")]
    mac: Option<String>,
    /// A field input held high (closed), e.g. an E-stop chain: the I/O pin's number (0-based,
    /// LinuxCNC's gpio.NNN). Repeatable.
    #[arg(long = "input", value_name = "PIN")]
    inputs: Vec<usize>,
    /// A home switch following an axis: input PIN reads high while step generator STEPGEN's
    /// position is at or past STEPS (e.g. 1=0@4000: gpio.001 closes 4000 steps up stepgen 0's
    /// travel). Repeatable.
    #[arg(long = "switch", value_name = "PIN=STEPGEN@STEPS")]
    switches: Vec<String>,
    /// Lose one reply in N once the host's periodic I/O runs (from its first watchdog pet), to
    /// rehearse what LinuxCNC does with a lost packet (hm2_eth counts a packet error; ten in a
    /// row and it gives up on the card).
    #[arg(long, value_name = "N")]
    lose_replies: Option<u32>,
    /// Hold each reply back DELAY[:JITTER] (e.g. 300us:200us: 100 to 500 µs, uniformly), as a slow
    /// network would — the replies keep their order. For rehearsing `latency-test --board` where
    /// the kernel has no netem (`tc qdisc … netem delay` is the real thing).
    #[arg(long, value_name = "DELAY[:JITTER]")]
    reply_delay: Option<String>,
}

/// `PIN=STEPGEN@STEPS`, checked against the board.
fn parse_switch(text: &str, pins: usize, stepgens: usize) -> Result<crate::mesa::Switch, String> {
    let bad = |why: &str| {
        format!(
            "--switch {}: {why}; give PIN=STEPGEN@STEPS, e.g. --switch 1=0@4000",
            crate::rt::units::tame(text)
        )
    };
    let (pin, rest) = text.split_once('=').ok_or_else(|| bad("no '='"))?;
    let (stepgen, at) = rest.split_once('@').ok_or_else(|| bad("no '@'"))?;
    let pin: usize = pin.trim().parse().map_err(|_| bad("PIN is not a number"))?;
    let stepgen: usize = stepgen
        .trim()
        .parse()
        .map_err(|_| bad("STEPGEN is not a number"))?;
    let at: f64 = at
        .trim()
        .parse()
        .map_err(|_| bad("STEPS is not a number"))?;
    if pin >= pins {
        return Err(bad(&format!("the card has pins 0 to {}", pins - 1)));
    }
    if stepgen >= stepgens {
        return Err(bad(&format!(
            "the card has step generators 0 to {}",
            stepgens - 1
        )));
    }
    if !at.is_finite() {
        return Err(bad("STEPS must be finite"));
    }
    Ok(crate::mesa::Switch { pin, stepgen, at })
}

/// `DELAY[:JITTER]`, both durations with a unit, the jitter at most the delay.
fn parse_delay(text: &str) -> Result<server::ReplyDelay, String> {
    let bad = |why: String| {
        format!(
            "--reply-delay {}: {why}; give DELAY or DELAY:JITTER, e.g. --reply-delay 300us:200us",
            crate::rt::units::tame(text)
        )
    };
    let (d, j) = text.split_once(':').unwrap_or((text, "0s"));
    let dur = |s: &str| {
        crate::rt::units::parse_duration(s)
            .map_err(bad)
            .and_then(|n| {
                std::time::Duration::try_from(n).map_err(|_| bad("a negative duration".into()))
            })
    };
    let (delay, jitter) = (dur(d)?, dur(j)?);
    if jitter > delay {
        return Err(bad("the jitter is larger than the delay".into()));
    }
    if delay > std::time::Duration::from_secs(1) {
        return Err(bad("more than 1 s: a card that slow is a lost card".into()));
    }
    Ok(server::ReplyDelay { delay, jitter })
}

/// `ADDR` or `ADDR:PORT`, IPv4 only.
fn parse_listen(text: &str) -> Result<SocketAddrV4, String> {
    if let Ok(ip) = text.parse::<Ipv4Addr>() {
        return Ok(SocketAddrV4::new(ip, UDP_PORT));
    }
    if let Ok(sa) = text.parse::<SocketAddrV4>() {
        return Ok(sa);
    }
    let why = if text.parse::<SocketAddr>().is_ok() || text.contains("::") {
        "an IPv6 address: Mesa cards and hm2_eth speak IPv4 only"
    } else if text
        .rsplit_once(':')
        .is_some_and(|(a, p)| a.parse::<Ipv4Addr>().is_ok() && p.parse::<u16>().is_err())
    {
        "the port is not a number from 0 to 65535"
    } else {
        "not an IPv4 address (names are not looked up)"
    };
    Err(format!(
        "--listen {}: {why}; give ADDR or ADDR:PORT, e.g. --listen 192.0.2.2 or --listen 0.0.0.0:27181",
        crate::rt::units::tame(text)
    ))
}

fn parse_board(text: &str) -> Result<BoardKind, String> {
    BoardKind::from_cli(text).ok_or_else(|| {
        let names: Vec<&str> = BoardKind::ALL.iter().map(|k| k.cli_name()).collect();
        format!(
            "--board {}: not a board the simulator has; choose one of: {}",
            crate::rt::units::tame(text),
            names.join(", ")
        )
    })
}

fn parse_mac(text: &str) -> Result<[u8; 6], String> {
    let parts: Vec<&str> = text.split(':').collect();
    let mut mac = [0u8; 6];
    let ok = parts.len() == 6
        && parts
            .iter()
            .zip(mac.iter_mut())
            .all(|(p, m)| p.len() == 2 && u8::from_str_radix(p, 16).map(|v| *m = v).is_ok());
    if ok {
        Ok(mac)
    } else {
        Err(format!(
            "--mac {}: not a MAC address; give six hex bytes separated by colons, e.g. 02:00:00:00:96:01",
            crate::rt::units::tame(text)
        ))
    }
}

fn seconds(ns: u64) -> String {
    format!("{:.6}", ns as f64 / 1e9)
}

fn millis(ns: u64) -> String {
    let ms = ns as f64 / 1e6;
    format!("{ms:.3} ms")
}

/// What the operator reads: one line per thing the host did, step rates at most every 250 ms, and
/// once a second how often the watchdog was petted (while it is).
struct Narrator {
    kind: BoardKind,
    pending_rates: Vec<Option<f64>>,
    last_rates: Instant,
    pets: u64,
    last_pets: Instant,
}

impl Narrator {
    fn line(&self, now: u64, text: &str) -> Result<(), Failure> {
        super::out::println(&format!("[{:>12}] {text}", seconds(now)))
    }

    fn events(
        &mut self,
        events: &[Event],
        peer: Option<SocketAddr>,
        now: u64,
        pets: u64,
    ) -> Result<(), Failure> {
        let host = peer.map_or_else(|| "the host".to_string(), |p| format!("host {p}"));
        for e in events {
            let text = match e {
                Event::NameRead => format!("{host} read the board name ({}): discovery", self.kind),
                Event::IdromRead => format!(
                    "{host} read the IDROM: the board is identified (LinuxCNC names it {}.0)",
                    self.kind.hal_prefix()
                ),
                Event::WatchdogArmed { timeout_ns } if *timeout_ns < 1_000 => {
                    "watchdog set to bite at once: the host let go of the board".to_string()
                }
                Event::WatchdogArmed { timeout_ns } => {
                    format!("watchdog armed: timeout {}", millis(*timeout_ns))
                }
                Event::WatchdogDisabled => "watchdog disabled".to_string(),
                Event::WatchdogPetted => {
                    "watchdog petted: the host's write function runs".to_string()
                }
                Event::WatchdogBitten { at, timeout_ns } => format!(
                    "WATCHDOG BIT at {} s: not petted within {}; outputs off, step generators stopped",
                    seconds(*at),
                    millis(*timeout_ns)
                ),
                Event::WatchdogCleared => "watchdog bite cleared by the host".to_string(),
                Event::StepgenRate { index, steps_per_s } => {
                    self.pending_rates[*index] = Some(*steps_per_s);
                    continue;
                }
                Event::BadRequest(why) => format!("bad request from {host}: {why}"),
                Event::ReplyLost { total } => {
                    format!("reply lost on purpose (--lose-replies): {total} so far")
                }
            };
            self.line(now, &text)?;
        }
        if self.last_rates.elapsed() >= Duration::from_millis(250)
            && self.pending_rates.iter().any(Option::is_some)
        {
            let parts: Vec<String> = self
                .pending_rates
                .iter_mut()
                .enumerate()
                .filter_map(|(i, r)| r.take().map(|r| format!("{i}: {r:.1}")))
                .collect();
            self.line(
                now,
                &format!("stepgen rates (steps/s) {}", parts.join(", ")),
            )?;
            self.last_rates = Instant::now();
        }
        let since = self.last_pets.elapsed();
        if since >= Duration::from_secs(1) {
            if pets > self.pets {
                self.line(
                    now,
                    &format!(
                        "watchdog petted {} times in the last {:.1} s",
                        pets - self.pets,
                        since.as_secs_f64()
                    ),
                )?;
            }
            self.pets = pets;
            self.last_pets = Instant::now();
        }
        Ok(())
    }
}

pub(super) fn run(args: Args) -> Result<(), Failure> {
    let listen = parse_listen(&args.listen).map_err(Failure::usage)?;
    let kind = parse_board(&args.board).map_err(Failure::usage)?;
    let mac = args
        .mac
        .as_deref()
        .map(parse_mac)
        .transpose()
        .map_err(Failure::usage)?;
    let socket = server::bind(listen).map_err(|e| match &e {
        ServeError::Bind { error, .. }
            if matches!(
                error.raw_os_error(),
                Some(libc::EADDRNOTAVAIL | libc::EACCES | libc::EADDRINUSE)
            ) =>
        {
            Failure::usage(e.to_string())
        }
        _ => Failure::runtime(e.to_string()),
    })?;
    let local = socket
        .local_addr()
        .map_err(|e| Failure::runtime(format!("udp: {e}")))?;
    let shared = Shared::new(kind, 1024);
    if let SocketAddr::V4(a) = local {
        shared.board().set_ip(a.ip().octets());
    }
    {
        let mut b = shared.board();
        let (pins, stepgens) = (b.pins(), b.stepgens());
        match args.lose_replies {
            Some(0) => {
                return Err(Failure::usage(
                    "--lose-replies 0: give N ≥ 1 (one reply in N lost), or leave it out",
                ))
            }
            Some(n) => b.set_reply_loss(n),
            None => {}
        }
        for &pin in &args.inputs {
            if pin >= pins {
                return Err(Failure::usage(format!(
                    "--input {pin}: the card has pins 0 to {}",
                    pins - 1
                )));
            }
            b.set_input(pin, true);
        }
        for text in &args.switches {
            let sw = parse_switch(text, pins, stepgens).map_err(Failure::usage)?;
            b.wire_switch(sw);
        }
    }
    super::out::println(&format!(
        "mesa-sim: a {kind}-like card on udp {local}; in LinuxCNC: loadrt hm2_eth board_ip={}; Ctrl-C to stop",
        if listen.ip().is_unspecified() {
            "<an address of this machine>".to_string()
        } else {
            listen.ip().to_string()
        }
    ))?;
    if listen.port() != UDP_PORT {
        super::out::println(&format!(
            "mesa-sim: note: hm2_eth always talks to port {UDP_PORT}; port {} suits other clients only",
            listen.port()
        ))?;
    }
    // A card answers within microseconds, and hm2_eth's first queued read at load waits only
    // 1.6 ms: answer from above every time-shared task when the machine lets us.
    use crate::rt::sched::{set_current_policy, Policy};
    match set_current_policy(Policy::Fifo { priority: 1 }) {
        Ok(()) => super::out::println("mesa-sim: answering at SCHED_FIFO priority 1")?,
        Err(e) => super::out::println(&format!(
            "mesa-sim: note: no SCHED_FIFO ({e}): under load replies may come later than hm2_eth \
             waits (1.6 ms for its first read at load); run as root or with CAP_SYS_NICE"
        ))?,
    }
    let mut narrator = Narrator {
        kind,
        pending_rates: vec![None; shared.board().stepgens()],
        last_rates: Instant::now(),
        pets: 0,
        last_pets: Instant::now(),
    };
    let stop = crate::rt::signals::shutdown_flag();
    let mut printing: Result<(), Failure> = Ok(());
    let delay = args
        .reply_delay
        .as_deref()
        .map(parse_delay)
        .transpose()
        .map_err(Failure::usage)?;
    let served = server::serve_delayed(&socket, &shared, mac, stop, delay, |events, peer| {
        if printing.is_ok() {
            let pets = shared.board().watchdog_pets();
            printing = narrator.events(events, peer, shared.now(), pets);
        }
    });
    printing?;
    served.map_err(|e| Failure::runtime(e.to_string()))?;
    let b = shared.board();
    let c = b.counters();
    super::out::println(&format!(
        "mesa-sim: stopped: {} requests, {} replies, {} watchdog pets, watchdog {}",
        c.rx_packets,
        c.tx_packets,
        b.watchdog_pets(),
        if b.bitten() {
            "bitten"
        } else if b.watchdog_armed() {
            "armed"
        } else {
            "off"
        }
    ))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_takes_an_address_with_or_without_port() {
        assert_eq!(
            parse_listen("192.0.2.2").unwrap(),
            "192.0.2.2:27181".parse().unwrap()
        );
        assert_eq!(
            parse_listen("192.0.2.2:3000").unwrap(),
            "192.0.2.2:3000".parse().unwrap()
        );
        for (bad, says) in [
            ("::1", "IPv6"),
            ("[::1]:27181", "IPv6"),
            ("192.0.2.2:http", "port is not a number"),
            ("192.0.2.2:70000", "port is not a number"),
            ("mesa-card", "not an IPv4 address"),
        ] {
            let e = parse_listen(bad).unwrap_err();
            assert!(
                e.contains(says) && e.contains("--listen 192.0.2.2"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn board_and_mac_errors_say_what_to_give() {
        assert_eq!(parse_board("7I96S").unwrap(), BoardKind::I96S);
        let e = parse_board("7i92").unwrap_err();
        assert!(e.contains("7i96s, 7i76e"), "{e}");
        assert_eq!(
            parse_mac("02:00:00:00:96:01").unwrap(),
            [2, 0, 0, 0, 0x96, 1]
        );
        assert!(parse_mac("02:00:00:00:96")
            .unwrap_err()
            .contains("six hex bytes"));
        assert!(parse_mac("02:00:00:00:96:zz").is_err());
    }
}
