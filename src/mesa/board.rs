//! The simulated card: its memory spaces, its HostMot2 register file and the behaviour of its
//! modules in time.
//!
//! **Time.** The board has its own clock: nanoseconds since it was made, passed in by the caller
//! (`now`) to everything that depends on time, so tests can drive it exactly and the server
//! passes its monotonic elapsed time. [`Board::advance`] brings the modules to `now`: step
//! generators add their rate to their accumulators for the clock ticks in between, the watchdog
//! bites if its deadline passed. Every access advances first, so what a read returns is the state
//! at the instant the request was handled.
//!
//! **Register file.** Space 0 is a plain image of 16-bit-addressed 32-bit words ([`RegisterFile`]):
//! what a read returns. Module registers whose read differs from what was written (the
//! accumulator, the encoder's count, the IOPort's data, the watchdog's status) are refreshed in the
//! image before they are read; writes go through the module that owns the address, which keeps
//! what the host wrote. That split — an image plus behaviours — is what a PCI BAR would map later
//! (the image as the BAR, the behaviours applied when the image changes).

use std::collections::VecDeque;

use super::idrom::{self, base, tag, BoardKind, Layout};
use super::lbp16::{self, Op, Width};

/// Nanoseconds on the board's own clock.
pub type BoardNs = u64;

/// Words in the 64 KiB register space.
const REGISTER_WORDS: usize = 0x10000 / 4;

/// Space 0 as the host sees it: one 32-bit word per 4-byte address.
#[derive(Clone)]
pub struct RegisterFile {
    words: Vec<u32>,
}

impl RegisterFile {
    fn new() -> Self {
        RegisterFile {
            words: vec![0; REGISTER_WORDS],
        }
    }

    /// The word at byte address `addr` (rounded down to a word).
    pub fn get(&self, addr: u16) -> u32 {
        self.words[usize::from(addr) / 4]
    }

    fn set(&mut self, addr: u16, v: u32) {
        self.words[usize::from(addr) / 4] = v;
    }

    /// The whole image, word 0 first.
    pub fn words(&self) -> &[u32] {
        &self.words
    }
}

/// Something the board noticed the host do, or did itself; the server prints these.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The host read the board's name (board-info space 7): discovery.
    NameRead,
    /// The host read the IDROM header: it is identifying the firmware.
    IdromRead,
    /// The watchdog's timer was written with a timeout: it runs.
    WatchdogArmed {
        /// The timeout.
        timeout_ns: u64,
    },
    /// The watchdog's timer was written with bit 31 set: off.
    WatchdogDisabled,
    /// The first pet after the watchdog was armed or cleared.
    WatchdogPetted,
    /// The watchdog was not petted in time: outputs off, step generators stopped.
    WatchdogBitten {
        /// When, on the board's clock.
        at: BoardNs,
        /// The timeout that ran out.
        timeout_ns: u64,
    },
    /// The host cleared the bite (wrote the status register's bit 0 as 0).
    WatchdogCleared,
    /// A step generator's commanded rate changed.
    StepgenRate {
        /// Its instance.
        index: usize,
        /// Steps per second.
        steps_per_s: f64,
    },
    /// A reply not sent on purpose ([`Board::set_reply_loss`]), as a network that loses one would.
    ReplyLost {
        /// Replies lost so far.
        total: u64,
    },
    /// A request the board could not decode to its end.
    BadRequest(String),
}

/// One write command the host sent, as the board received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// Memory space.
    pub space: u8,
    /// The info area rather than the memory.
    pub info: bool,
    /// First address.
    pub address: u16,
    /// Element width.
    pub width: Width,
    /// The data, as sent.
    pub data: Vec<u8>,
}

impl Written {
    /// The data as 32-bit words (for space 0 writes).
    pub fn words(&self) -> Vec<u32> {
        self.data
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }
}

/// Every write of one request: with hm2_eth, one request is one servo period's `write`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostWrites {
    /// When the board handled it.
    pub at: BoardNs,
    /// The writes in order.
    pub writes: Vec<Written>,
}

/// The last requests with writes, oldest first, at most `capacity` of them.
#[derive(Debug, Clone)]
pub struct WriteLog {
    capacity: usize,
    entries: VecDeque<HostWrites>,
    dropped: u64,
}

impl WriteLog {
    fn new(capacity: usize) -> Self {
        WriteLog {
            capacity: capacity.max(1),
            entries: VecDeque::new(),
            dropped: 0,
        }
    }

    fn push(&mut self, w: HostWrites) {
        if self.entries.len() == self.capacity {
            self.entries.pop_front();
            self.dropped += 1;
        }
        self.entries.push_back(w);
    }

    /// The kept entries, oldest first.
    pub fn entries(&self) -> impl Iterator<Item = &HostWrites> {
        self.entries.iter()
    }

    /// The newest entry.
    pub fn last(&self) -> Option<&HostWrites> {
        self.entries.back()
    }

    /// Entries kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries dropped to keep the bound.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The most recent value the host wrote to the space-0 word at `addr`, if any kept entry has it.
    pub fn last_word(&self, addr: u16) -> Option<u32> {
        self.entries.iter().rev().find_map(|e| {
            e.writes.iter().rev().find_map(|w| {
                if w.space != 0 || w.info || w.width != Width::W32 {
                    return None;
                }
                let words = w.words();
                if words.len() == 1 || w.address == addr {
                    return (w.address == addr).then(|| words[0]);
                }
                // An auto-incremented run: the word's place in it.
                let off = addr.checked_sub(w.address)? as usize;
                (off % 4 == 0)
                    .then(|| words.get(off / 4).copied())
                    .flatten()
            })
        })
    }
}

/// Packet counters of comm/status space 6.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counters {
    /// Requests that could not be decoded to their end.
    pub parse_errors: u16,
    /// Accesses outside a space, or to a space the board lacks.
    pub mem_errors: u16,
    /// Writes to read-only places.
    pub write_errors: u16,
    /// Requests received.
    pub rx_packets: u16,
    /// Replies sent.
    pub tx_packets: u16,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Dog {
    Disabled,
    Armed { deadline: BoardNs },
    Bitten { at: BoardNs },
}

#[derive(Debug, Clone)]
struct Watchdog {
    timer: u32,
    state: Dog,
    petted_since_arm: bool,
    pets: u64,
}

#[derive(Debug, Clone, Default)]
struct StepGen {
    rate: u32,
    /// Position in units of 2^-32 step, wrapping: the readback is bits 16..48 (16.16 steps).
    acc: u64,
}

#[derive(Debug, Clone, Default)]
struct Encoder {
    count: i32,
    count_ts: u16,
    control: u32,
    latched: u16,
}

/// Bits of the encoder's latch/control register the simulator acts on.
const ENC_INPUT_A: u32 = 1 << 0;
const ENC_INPUT_B: u32 = 1 << 1;
const ENC_INPUT_INDEX: u32 = 1 << 2;
const ENC_LATCH_ON_INDEX: u32 = 1 << 4;
const ENC_CLEAR_ON_INDEX: u32 = 1 << 5;

/// A simulated Mesa card.
pub struct Board {
    kind: BoardKind,
    layout: Layout,
    regs: RegisterFile,
    /// Spaces 1..=7 as byte images (space 0 is `regs`).
    bytes: [Vec<u8>; 8],
    pointer: [u16; 8],
    clock_hz: u64,
    now: BoardNs,
    watchdog: Watchdog,
    // IOPort, per port: what the host wrote.
    out_latch: Vec<u32>,
    ddr: Vec<u32>,
    alt: Vec<u32>,
    open_drain: Vec<u32>,
    invert: Vec<u32>,
    inputs: Vec<u32>,
    stepgens: Vec<StepGen>,
    encoders: Vec<Encoder>,
    encoder_inputs: Vec<u32>,
    tsdiv: u32,
    mac: [u8; 6],
    ip: [u8; 4],
    counters: Counters,
    name_read: bool,
    idrom_read: bool,
    events: Vec<Event>,
    log: WriteLog,
    switches: Vec<Switch>,
    loss: ReplyLoss,
}

/// Replies not sent on purpose: one in `every` (0: none), counted from the host's first watchdog
/// pet on (its periodic I/O: a reply lost during discovery would only stop the driver loading).
#[derive(Debug, Clone, Copy, Default)]
struct ReplyLoss {
    every: u32,
    counted: u64,
    lost: u64,
}

/// A field input wired to a step generator's axis: a switch the axis closes when its position
/// (in steps) is at or past `at` (a home switch at the positive end of travel).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Switch {
    /// The input pin (0-based, port by port).
    pub pin: usize,
    /// The step generator that moves the axis.
    pub stepgen: usize,
    /// Closed (input high) when the accumulator is at or past this many steps.
    pub at: f64,
}

/// Spaces the board has, besides 0: Ethernet EEPROM, FPGA flash, timers, comm/status, board info.
const PRESENT: [bool; 8] = [true, false, true, true, true, false, true, true];
/// Bytes in each byte space.
const SPACE_BYTES: [usize; 8] = [0, 0, 64, 16, 32, 0, 32, 32];
/// Status space 6: the counters' offsets.
mod status {
    pub(super) const ERROR: u16 = 0x00;
    pub(super) const PARSE_ERRORS: u16 = 0x02;
    pub(super) const MEM_ERRORS: u16 = 0x04;
    pub(super) const WRITE_ERRORS: u16 = 0x06;
    pub(super) const RX_PACKETS: u16 = 0x08;
    pub(super) const RX_UDP: u16 = 0x0a;
    pub(super) const TX_PACKETS: u16 = 0x0e;
    pub(super) const TX_UDP: u16 = 0x10;
}

/// The version numbers space 7 reports.
const LBP16_VERSION: u16 = 3;
const FIRMWARE_VERSION: u16 = 16;

impl Board {
    /// A board of `kind`, its clock at 0, keeping the last `log_capacity` requests with writes.
    pub fn new(kind: BoardKind, log_capacity: usize) -> Board {
        let layout = kind.layout();
        let mut regs = RegisterFile::new();
        for (a, w) in layout.rom_words() {
            regs.set(a, w);
        }
        let ports = layout.idrom.io_ports as usize;
        let mut b = Board {
            kind,
            clock_hz: u64::from(layout.idrom.clock_low),
            regs,
            bytes: std::array::from_fn(|s| vec![0u8; SPACE_BYTES[s]]),
            pointer: [0; 8],
            now: 0,
            watchdog: Watchdog {
                timer: 0x8000_0000,
                state: Dog::Disabled,
                petted_since_arm: false,
                pets: 0,
            },
            out_latch: vec![0; ports],
            ddr: vec![0; ports],
            alt: vec![0; ports],
            open_drain: vec![0; ports],
            invert: vec![0; ports],
            inputs: vec![0; ports],
            stepgens: vec![StepGen::default(); usize::from(idrom::STEPGENS)],
            encoders: vec![Encoder::default(); usize::from(idrom::ENCODERS)],
            encoder_inputs: vec![0; usize::from(idrom::ENCODERS)],
            tsdiv: 0,
            mac: [0x02, 0, 0, 0, 0, 0x01],
            ip: [0; 4],
            counters: Counters::default(),
            name_read: false,
            idrom_read: false,
            events: Vec::new(),
            log: WriteLog::new(log_capacity),
            switches: Vec::new(),
            loss: ReplyLoss::default(),
            layout,
        };
        b.bytes[7][..16].copy_from_slice(&kind.info_name());
        b.bytes[7][0x10..0x12].copy_from_slice(&LBP16_VERSION.to_le_bytes());
        b.bytes[7][0x12..0x14].copy_from_slice(&FIRMWARE_VERSION.to_le_bytes());
        // Flash ID register (0x08): a 16 Mbit part.
        b.bytes[3][8] = 0x15;
        b.fill_eeprom();
        b
    }

    /// What kind of board this is.
    pub fn kind(&self) -> BoardKind {
        self.kind
    }

    /// Its IDROM, modules and pins.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The register image (space 0) as of the last access.
    pub fn registers(&self) -> &RegisterFile {
        &self.regs
    }

    /// Sets the MAC address the Ethernet EEPROM reports (hm2_eth makes it a permanent ARP entry,
    /// so it must be the address of the interface the board answers on).
    pub fn set_mac(&mut self, mac: [u8; 6]) {
        self.mac = mac;
        self.fill_eeprom();
    }

    /// The MAC address the EEPROM reports.
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// Sets the IP address the EEPROM reports.
    pub fn set_ip(&mut self, ip: [u8; 4]) {
        self.ip = ip;
        self.fill_eeprom();
    }

    fn fill_eeprom(&mut self) {
        let e = &mut self.bytes[2];
        // MAC: three little-endian words from offset 2, the last byte of the address first.
        for i in 0..6 {
            e[2 + i] = self.mac[5 - i];
        }
        e[0x10..0x20].copy_from_slice(&self.kind.info_name());
        // IP: two little-endian words, low half first.
        for i in 0..4 {
            e[0x20 + i] = self.ip[3 - i];
        }
    }

    /// Events since the last call, oldest first.
    pub fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    /// The host's writes, request by request.
    pub fn write_log(&self) -> &WriteLog {
        &self.log
    }

    /// The packet counters.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// The board's clock as of the last access.
    pub fn now(&self) -> BoardNs {
        self.now
    }

    fn ticks(&self, ns: BoardNs) -> u64 {
        (u128::from(ns) * u128::from(self.clock_hz) / 1_000_000_000) as u64
    }

    fn ticks_to_ns(&self, ticks: u64) -> u64 {
        (u128::from(ticks) * 1_000_000_000 / u128::from(self.clock_hz)) as u64
    }

    /// Brings every module to `now` (a time before the last one is taken as the last one).
    pub fn advance(&mut self, now: BoardNs) {
        let now = now.max(self.now);
        if let Dog::Armed { deadline } = self.watchdog.state {
            if deadline <= now {
                self.run_stepgens(deadline.max(self.now));
                self.watchdog.state = Dog::Bitten { at: deadline };
                self.events.push(Event::WatchdogBitten {
                    at: deadline,
                    timeout_ns: self.timeout_ns(),
                });
            }
        }
        self.run_stepgens(now);
    }

    fn run_stepgens(&mut self, to: BoardNs) {
        if to <= self.now {
            return;
        }
        let ticks = self.ticks(to) - self.ticks(self.now);
        if !self.bitten() {
            for s in &mut self.stepgens {
                let rate = s.rate as i32 as i64 as u64;
                s.acc = s.acc.wrapping_add(rate.wrapping_mul(ticks));
            }
        }
        self.now = to;
    }

    // ---- The embedding API: the field side of the board ----

    /// Whether the watchdog has bitten (and the host has not cleared it).
    pub fn bitten(&self) -> bool {
        matches!(self.watchdog.state, Dog::Bitten { .. })
    }

    /// Whether the watchdog runs (armed, not bitten).
    pub fn watchdog_armed(&self) -> bool {
        matches!(self.watchdog.state, Dog::Armed { .. })
    }

    /// Pets since the board was made.
    pub fn watchdog_pets(&self) -> u64 {
        self.watchdog.pets
    }

    /// The watchdog timeout the host set, ns.
    pub fn timeout_ns(&self) -> u64 {
        self.ticks_to_ns(u64::from(self.watchdog.timer & 0x7fff_ffff) + 1)
    }

    /// Sets the level of field input `pin` (0-based, port by port).
    pub fn set_input(&mut self, pin: usize, level: bool) {
        let (port, bit) = self.port_bit(pin);
        if level {
            self.inputs[port] |= 1 << bit;
        } else {
            self.inputs[port] &= !(1 << bit);
        }
    }

    /// Wires input `switch.pin` to step generator `switch.stepgen`'s axis (a home switch): from now
    /// on the input reads high exactly when the accumulator, at the instant of the read on the
    /// board's clock, is at or past `switch.at` steps. Replaces an earlier wiring of the same pin.
    pub fn wire_switch(&mut self, switch: Switch) {
        assert!(
            switch.pin < self.layout.pins.len(),
            "pin {} out of range",
            switch.pin
        );
        assert!(
            switch.stepgen < self.stepgens.len(),
            "no step generator {}",
            switch.stepgen
        );
        self.switches.retain(|s| s.pin != switch.pin);
        self.switches.push(switch);
    }

    /// The switches wired with [`Board::wire_switch`].
    pub fn switches(&self) -> &[Switch] {
        &self.switches
    }

    /// What output `pin` drives: `None` when it is not an output (an input, or every output after
    /// a bite), else its level (after the host's output inversion).
    pub fn output(&self, pin: usize) -> Option<bool> {
        let (port, bit) = self.port_bit(pin);
        let m = 1u32 << bit;
        if self.bitten() || self.ddr[port] & m == 0 {
            return None;
        }
        if self.alt[port] & m != 0 {
            // A module drives it: a step generator's direction shows its rate's sign; step pulses
            // are not simulated (the accumulator is the position).
            let d = self.layout.pins[pin];
            if d.sec_tag == tag::STEPGEN && d.sec_pin == idrom::DIR {
                let s = &self.stepgens[usize::from(d.sec_unit)];
                return Some((s.rate as i32) < 0);
            }
            return Some(false);
        }
        let level = (self.out_latch[port] ^ self.invert[port]) & m != 0;
        if self.open_drain[port] & m != 0 && level {
            return None; // released: the pull-up decides
        }
        Some(level)
    }

    /// Whether the host made `pin` a module's pin (alternate source) rather than a GPIO.
    pub fn pin_is_module(&self, pin: usize) -> bool {
        let (port, bit) = self.port_bit(pin);
        self.alt[port] & (1 << bit) != 0
    }

    /// The pins the board has.
    pub fn pins(&self) -> usize {
        self.layout.pins.len()
    }

    fn port_bit(&self, pin: usize) -> (usize, u32) {
        let w = self.layout.idrom.port_width as usize;
        assert!(pin < self.layout.pins.len(), "pin {pin} out of range");
        (pin / w, (pin % w) as u32)
    }

    /// Sets encoder `index`'s count (what a real counter would have counted from its A/B inputs).
    pub fn set_encoder_count(&mut self, index: usize, count: i32, now: BoardNs) {
        self.advance(now);
        let ts = self.tsc();
        let e = &mut self.encoders[index];
        if e.count != count {
            e.count = count;
            e.count_ts = ts;
        }
    }

    /// Sets encoder `index`'s A, B and index input levels (the latch/control register shows them).
    pub fn set_encoder_inputs(&mut self, index: usize, a: bool, b: bool, idx: bool) {
        let bit = |on: bool, mask: u32| if on { mask } else { 0 };
        self.encoder_inputs[index] =
            bit(a, ENC_INPUT_A) | bit(b, ENC_INPUT_B) | bit(idx, ENC_INPUT_INDEX);
    }

    /// An index pulse on encoder `index`: latches (and clears, when the host asked) the count.
    pub fn encoder_index_pulse(&mut self, index: usize, now: BoardNs) {
        self.advance(now);
        let ts = self.tsc();
        let e = &mut self.encoders[index];
        if e.control & ENC_LATCH_ON_INDEX != 0 {
            e.latched = e.count as u16;
            e.control &= !ENC_LATCH_ON_INDEX;
            if e.control & ENC_CLEAR_ON_INDEX != 0 {
                e.count = 0;
                e.count_ts = ts;
            }
        }
    }

    /// Step generator `index`'s position in steps (the accumulator, fraction included).
    pub fn stepgen_position(&self, index: usize) -> f64 {
        self.stepgens[index].acc as i64 as f64 / 4_294_967_296.0
    }

    /// Step generator `index`'s commanded rate in steps per second.
    pub fn stepgen_rate(&self, index: usize) -> f64 {
        self.stepgens[index].rate as i32 as f64 * self.clock_hz as f64 / 4_294_967_296.0
    }

    /// Step generators on the board.
    pub fn stepgens(&self) -> usize {
        self.stepgens.len()
    }

    fn tsc(&self) -> u16 {
        (self.ticks(self.now) / (u64::from(self.tsdiv & 0xffff) + 2)) as u16
    }

    // ---- The host side: LBP16 requests ----

    /// Handles one request at `now`: performs its commands in order and returns the reply (the
    /// read data), or `None` when it has no read.
    pub fn handle(&mut self, request: &[u8], now: BoardNs) -> Option<Vec<u8>> {
        self.advance(now);
        self.counters.rx_packets = self.counters.rx_packets.wrapping_add(1);
        let (ops, error) = lbp16::parse(request);
        let mut reply = Vec::new();
        let mut reads = false;
        let mut writes = Vec::new();
        for op in &ops {
            if op.cmd.write {
                writes.push(Written {
                    space: op.cmd.space,
                    info: op.cmd.info,
                    address: op
                        .address
                        .unwrap_or(self.pointer[usize::from(op.cmd.space)]),
                    width: op.cmd.width,
                    data: op.data.to_vec(),
                });
            } else {
                reads |= op.cmd.count > 0;
            }
            self.perform(op, &mut reply);
        }
        if let Some(e) = error {
            self.counters.parse_errors = self.counters.parse_errors.wrapping_add(1);
            self.events.push(Event::BadRequest(e.to_string()));
        }
        if !writes.is_empty() {
            self.log.push(HostWrites { at: now, writes });
        }
        if !reads {
            return None;
        }
        if self.loss.every > 0 && self.watchdog.pets > 0 {
            self.loss.counted += 1;
            if self.loss.counted % u64::from(self.loss.every) == 0 {
                self.loss.lost += 1;
                self.events.push(Event::ReplyLost {
                    total: self.loss.lost,
                });
                return None;
            }
        }
        self.counters.tx_packets = self.counters.tx_packets.wrapping_add(1);
        Some(reply)
    }

    /// Loses one reply in `every` (0: none) from the host's first watchdog pet on: the host sees
    /// a reply that never comes (hm2_eth counts a packet error), the board goes on. Each lost reply
    /// is an [`Event::ReplyLost`].
    pub fn set_reply_loss(&mut self, every: u32) {
        self.loss = ReplyLoss { every, ..self.loss };
    }

    /// Replies lost on purpose so far.
    pub fn replies_lost(&self) -> u64 {
        self.loss.lost
    }

    fn perform(&mut self, op: &Op<'_>, reply: &mut Vec<u8>) {
        let c = op.cmd;
        let space = usize::from(c.space);
        let mut addr = op.address.unwrap_or(self.pointer[space]);
        let w = c.width.bytes();
        for i in 0..usize::from(c.count) {
            if c.info {
                // Info areas are read-only; a write to one is ignored.
                if !c.write {
                    let area = self.info_area(c.space);
                    for k in 0..w {
                        reply.push(*area.get(usize::from(addr) + k).unwrap_or(&0));
                    }
                }
            } else if c.write {
                self.write_element(c.space, addr, &op.data[i * w..(i + 1) * w]);
            } else {
                self.read_element(c.space, addr, w, reply);
            }
            if c.increment {
                addr = addr.wrapping_add(w as u16);
            }
        }
        if !c.info {
            self.pointer[space] = addr;
        }
    }

    fn info_area(&self, space: u8) -> [u8; 16] {
        let mut a = [0u8; 16];
        if !PRESENT[usize::from(space)] {
            return a;
        }
        // size word: bit 15 writable, bits 14..8 memory type (1 registers, 2 memory, 14 EEPROM,
        // 15 flash), bits 3..0 the access widths (bit k: 8<<k bits).
        let (writable, mem_type, widths, bytes, name): (bool, u16, u16, usize, &[u8; 8]) =
            match space {
                0 => (true, 1, 0b0100, 0x10000, b"HostMot2"),
                2 => (true, 14, 0b0010, SPACE_BYTES[2], b"EtherEEP"),
                3 => (true, 15, 0b0100, 1 << 21, b"FPGAflsh"),
                4 => (true, 1, 0b0010, SPACE_BYTES[4], b"Timers  "),
                6 => (true, 1, 0b0010, SPACE_BYTES[6], b"LBPStat "),
                _ => (false, 2, 0b0010, SPACE_BYTES[7], b"BoardInf"),
            };
        let size = u16::from(writable) << 15 | mem_type << 8 | widths;
        let range = bytes.trailing_zeros() as u16;
        a[0..2].copy_from_slice(&(0x5a00u16 | u16::from(space)).to_le_bytes());
        a[2..4].copy_from_slice(&size.to_le_bytes());
        a[4..6].copy_from_slice(&range.to_le_bytes());
        a[6..8].copy_from_slice(&self.pointer[usize::from(space)].to_le_bytes());
        a[8..16].copy_from_slice(name);
        a
    }

    fn mem_error(&mut self) {
        self.counters.mem_errors = self.counters.mem_errors.wrapping_add(1);
    }

    fn read_element(&mut self, space: u8, addr: u16, w: usize, reply: &mut Vec<u8>) {
        if space == 0 {
            if addr % 4 != 0 || w < 4 {
                self.mem_error();
                reply.extend(std::iter::repeat_n(0, w));
                return;
            }
            for k in 0..w / 4 {
                let v = self.read32(addr.wrapping_add(4 * k as u16));
                reply.extend_from_slice(&v.to_le_bytes());
            }
            return;
        }
        let s = usize::from(space);
        if !PRESENT[s] || usize::from(addr) + w > SPACE_BYTES[s] {
            self.mem_error();
            reply.extend(std::iter::repeat_n(0, w));
            return;
        }
        self.refresh_bytes(space);
        if space == 7 && addr == 0 {
            if !self.name_read {
                self.events.push(Event::NameRead);
            }
            self.name_read = true;
        }
        let a = usize::from(addr);
        reply.extend_from_slice(&self.bytes[s][a..a + w]);
    }

    fn refresh_bytes(&mut self, space: u8) {
        match space {
            4 => {
                let us = (self.now / 1000) as u16;
                self.bytes[4][0..2].copy_from_slice(&us.to_le_bytes());
            }
            6 => {
                let c = self.counters;
                let b = &mut self.bytes[6];
                let mut put = |at: u16, v: u16| {
                    b[usize::from(at)..usize::from(at) + 2].copy_from_slice(&v.to_le_bytes())
                };
                put(status::ERROR, 0);
                put(status::PARSE_ERRORS, c.parse_errors);
                put(status::MEM_ERRORS, c.mem_errors);
                put(status::WRITE_ERRORS, c.write_errors);
                put(status::RX_PACKETS, c.rx_packets);
                put(status::RX_UDP, c.rx_packets);
                put(status::TX_PACKETS, c.tx_packets);
                put(status::TX_UDP, c.tx_packets);
            }
            _ => {}
        }
    }

    fn write_element(&mut self, space: u8, addr: u16, data: &[u8]) {
        if space == 0 {
            if addr % 4 != 0 || data.len() < 4 {
                self.mem_error();
                return;
            }
            for (k, c) in data.chunks_exact(4).enumerate() {
                let v = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                self.write32(addr.wrapping_add(4 * k as u16), v);
            }
            return;
        }
        let s = usize::from(space);
        if !PRESENT[s] || usize::from(addr) + data.len() > SPACE_BYTES[s] {
            self.mem_error();
            return;
        }
        // Timers (4) and comm/status (6) are writable memory here; the EEPROM, the flash and the
        // board info are not written by a simulator.
        if space != 4 && space != 6 {
            self.counters.write_errors = self.counters.write_errors.wrapping_add(1);
            return;
        }
        let a = usize::from(addr);
        self.bytes[s][a..a + data.len()].copy_from_slice(data);
    }

    /// Which module register `addr` is: `(module base, register, instance)`.
    fn decode(&self, addr: u16) -> Option<(u16, u16, usize)> {
        for m in &self.layout.modules {
            if addr < m.base {
                continue;
            }
            let off = addr - m.base;
            let reg = off / idrom::REGISTER_STRIDE;
            let within = off % idrom::REGISTER_STRIDE;
            if reg >= u16::from(m.registers) || within % idrom::INSTANCE_STRIDE != 0 {
                continue;
            }
            let inst = usize::from(within / idrom::INSTANCE_STRIDE);
            let per_instance = m.per_instance & (1 << reg) != 0;
            let n = if per_instance {
                usize::from(m.instances)
            } else {
                1
            };
            if inst < n {
                return Some((m.base, reg, inst));
            }
        }
        None
    }

    /// Reads the space-0 word at `addr` as the host would (the module refreshes it first).
    pub fn read32(&mut self, addr: u16) -> u32 {
        if (idrom::IDROM_ADDR..idrom::IDROM_ADDR + 4).contains(&addr) && !self.idrom_read {
            self.idrom_read = true;
            self.events.push(Event::IdromRead);
        }
        if let Some((module, reg, inst)) = self.decode(addr) {
            let v = match (module, reg) {
                (base::WATCHDOG, 0) => match self.watchdog.state {
                    Dog::Armed { deadline } => {
                        self.ticks(deadline.saturating_sub(self.now)) as u32 & 0x7fff_ffff
                    }
                    Dog::Bitten { .. } => 0x8000_0000,
                    Dog::Disabled => self.watchdog.timer,
                },
                (base::WATCHDOG, 1) => u32::from(self.bitten()),
                (base::IOPORT, 0) => self.port_read(inst),
                (base::STEPGEN, 1) => (self.stepgens[inst].acc >> 16) as u32,
                (base::ENCODER, 0) => {
                    let e = &self.encoders[inst];
                    u32::from(e.count_ts) << 16 | u32::from(e.count as u16)
                }
                (base::ENCODER, 1) => {
                    let e = &self.encoders[inst];
                    u32::from(e.latched) << 16 | (e.control & 0xfff8) | self.encoder_inputs[inst]
                }
                (base::ENCODER, 3) => u32::from(self.tsc()),
                _ => self.regs.get(addr),
            };
            self.regs.set(addr, v);
        }
        self.regs.get(addr)
    }

    fn port_read(&self, port: usize) -> u32 {
        let w = self.layout.idrom.port_width as usize;
        let mut v = self.inputs[port];
        for s in &self.switches {
            if s.pin / w == port {
                let closed = self.stepgen_position(s.stepgen) >= s.at;
                let bit = (s.pin % w) as u32;
                v = (v & !(1 << bit)) | u32::from(closed) << bit;
            }
        }
        for bit in 0..w {
            if let Some(level) = self.output(port * w + bit) {
                v = (v & !(1 << bit)) | u32::from(level) << bit;
            }
        }
        v
    }

    /// Writes the space-0 word at `addr` as the host would (the owning module takes it).
    pub fn write32(&mut self, addr: u16, v: u32) {
        if (idrom::COOKIE_ADDR..idrom::IDROM_END).contains(&addr) && self.decode(addr).is_none() {
            // The cookie, the name, the IDROM: read-only.
            self.counters.write_errors = self.counters.write_errors.wrapping_add(1);
            return;
        }
        let Some((module, reg, inst)) = self.decode(addr) else {
            self.regs.set(addr, v);
            return;
        };
        match (module, reg) {
            (base::WATCHDOG, 0) => {
                self.watchdog.timer = v;
                self.watchdog.petted_since_arm = false;
                if v & 0x8000_0000 != 0 {
                    if !self.bitten() {
                        self.watchdog.state = Dog::Disabled;
                    }
                    self.events.push(Event::WatchdogDisabled);
                } else {
                    let timeout = self.timeout_ns();
                    if !self.bitten() {
                        self.watchdog.state = Dog::Armed {
                            deadline: self.now + timeout,
                        };
                    }
                    self.events.push(Event::WatchdogArmed {
                        timeout_ns: timeout,
                    });
                }
            }
            (base::WATCHDOG, 1) => {
                if v & 1 == 0 && self.bitten() {
                    self.watchdog.state = if self.watchdog.timer & 0x8000_0000 != 0 {
                        Dog::Disabled
                    } else {
                        Dog::Armed {
                            deadline: self.now + self.timeout_ns(),
                        }
                    };
                    self.watchdog.petted_since_arm = false;
                    self.events.push(Event::WatchdogCleared);
                }
            }
            (base::WATCHDOG, 2) => {
                if v >> 24 == 0x5a {
                    self.watchdog.pets += 1;
                    if let Dog::Armed { .. } = self.watchdog.state {
                        self.watchdog.state = Dog::Armed {
                            deadline: self.now + self.timeout_ns(),
                        };
                        if !self.watchdog.petted_since_arm {
                            self.watchdog.petted_since_arm = true;
                            self.events.push(Event::WatchdogPetted);
                        }
                    }
                }
            }
            (base::IOPORT, r) => {
                let slot = match r {
                    0 => &mut self.out_latch,
                    1 => &mut self.ddr,
                    2 => &mut self.alt,
                    3 => &mut self.open_drain,
                    _ => &mut self.invert,
                };
                slot[inst] = v;
                self.regs.set(addr, v);
            }
            (base::STEPGEN, 0) => {
                if self.stepgens[inst].rate != v {
                    self.stepgens[inst].rate = v;
                    let steps_per_s = self.stepgen_rate(inst);
                    self.events.push(Event::StepgenRate {
                        index: inst,
                        steps_per_s,
                    });
                }
                self.regs.set(addr, v);
            }
            (base::STEPGEN, 1) => {
                // The accumulator is the board's: a write is ignored.
            }
            (base::ENCODER, 0) => {
                // Writing the count register clears the count.
                let ts = self.tsc();
                let e = &mut self.encoders[inst];
                e.count = 0;
                e.count_ts = ts;
            }
            (base::ENCODER, 1) => {
                self.encoders[inst].control = v & 0xffff;
            }
            (base::ENCODER, 2) => {
                self.tsdiv = v;
                self.regs.set(addr, v);
            }
            _ => self.regs.set(addr, v),
        }
    }
}
