//! The simulated Mesa card (`rtapi::mesa`, `rtapi mesa-sim`): its LBP16 codec, its IDROM read the
//! way LinuxCNC 2.9's hostmot2 reads it, its behaviour in time, and stock LinuxCNC's `hm2_eth`
//! driving it across a veth pair between two network namespaces of the test's own.
//!
//! The layout checks decode the words with the field layout of LinuxCNC 2.9's `hostmot2.h`
//! (`hm2_idrom_t`), `hostmot2.c` (module descriptors) and `pins.c` (pin descriptors) and apply the
//! consistency checks each module's `parse_md` makes, written here independently of the
//! simulator's constants.

mod common;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use common::eventually::{until, until_true, GENEROUS};
use common::netns;
use common::sim_process::{Lines, SimProcess};
use rtapi::mesa::lbp16::{self, Command as Cmd, Width};
use rtapi::mesa::{Board, BoardKind};

// ---------------------------------------------------------------- LBP16 codec

#[test]
fn lbp16_command_words_have_the_protocol_bit_layout() {
    // hm2_eth's own words, as its macros compose them (lbp16.h): read 8 16-bit words of space 7
    // with auto-increment; the MAC read 0x4983; a 32-bit auto-increment write of space 0.
    let name = Cmd::decode(0x4000 | 0x1c00 | 0x0100 | 0x0080 | 8);
    assert_eq!(
        name,
        Cmd {
            write: false,
            has_address: true,
            info: false,
            space: 7,
            width: Width::W16,
            increment: true,
            count: 8
        }
    );
    let mac = Cmd::decode(0x4983);
    assert_eq!(
        (mac.space, mac.width, mac.count, mac.write),
        (2, Width::W16, 3, false)
    );
    let w = Cmd::decode(0x8000 | 0x4000 | 0x0200 | 0x0080 | 1);
    assert!(w.write && w.has_address && w.increment && w.space == 0 && w.width == Width::W32);
    let info = Cmd::decode(0x4000 | 0x2000 | 0x0100 | 0x0080 | 0x1800 | 8);
    assert!(info.info && info.space == 6);
    // Every word survives decode → encode.
    for word in [0u16, 0x4983, 0xc281, 0x7fff, 0xffff, 0x2a55] {
        assert_eq!(Cmd::decode(word).encode(), word, "{word:#06x}");
    }
}

#[test]
fn lbp16_requests_parse_in_order_and_report_a_truncated_tail() {
    let mut req = Vec::new();
    lbp16::push(&mut req, lbp16::read(6, Width::W16, 1), Some(0x8), &[]);
    lbp16::push(
        &mut req,
        lbp16::write(4, Width::W16, 2),
        Some(0x10),
        &[1, 2, 3, 4],
    );
    lbp16::push(&mut req, lbp16::read(4, Width::W16, 4), Some(0x10), &[]);
    // Wire bytes: little-endian command word, then address.
    assert_eq!(&req[..4], &[0x81, 0x59, 0x08, 0x00]);
    let (ops, err) = lbp16::parse(&req);
    assert!(err.is_none());
    assert_eq!(ops.len(), 3);
    assert_eq!(
        (ops[1].address, ops[1].data),
        (Some(0x10), &[1u8, 2, 3, 4][..])
    );
    assert!(ops[2].data.is_empty() && !ops[2].cmd.write);
    // A write cut short inside its data: the commands before it stand, the error says where.
    let cut = &req[..4 + 4 + 2];
    let (ops, err) = lbp16::parse(cut);
    assert_eq!(ops.len(), 1);
    let e = err.expect("truncated");
    assert_eq!(
        e,
        lbp16::ParseError::Truncated {
            at: 4,
            needed: 8,
            left: 6
        }
    );
    assert!(e.to_string().contains("cut short at byte 4"), "{e}");
}

// ---------------------------------------------------------------- IDROM, as hostmot2 reads it

/// hm2_idrom_t of hostmot2.h: 16 little-endian words in this order.
#[derive(Debug)]
struct HostIdrom {
    idrom_type: u32,
    offset_to_modules: u32,
    offset_to_pin_desc: u32,
    board_name: [u8; 8],
    io_ports: u32,
    io_width: u32,
    port_width: u32,
    clock_low: u32,
    clock_high: u32,
    instance_stride: [u32; 2],
    register_stride: [u32; 2],
}

fn reg(b: &mut Board, addr: u32) -> u32 {
    // Through the protocol, as hm2_eth_read does: one 32-bit read with auto-increment.
    let mut req = Vec::new();
    lbp16::push(
        &mut req,
        lbp16::read(0, Width::W32, 1),
        Some(addr as u16),
        &[],
    );
    let now = b.now();
    let r = b.handle(&req, now).expect("a read is answered");
    u32::from_le_bytes(r[..4].try_into().unwrap())
}

fn read_idrom(b: &mut Board) -> (u32, HostIdrom) {
    let offset = reg(b, 0x10c) & 0xffff;
    let w: Vec<u32> = (0..16).map(|i| reg(b, offset + 4 * i)).collect();
    let mut name = [0u8; 8];
    name[..4].copy_from_slice(&w[3].to_le_bytes());
    name[4..].copy_from_slice(&w[4].to_le_bytes());
    (
        offset,
        HostIdrom {
            idrom_type: w[0],
            offset_to_modules: w[1],
            offset_to_pin_desc: w[2],
            board_name: name,
            io_ports: w[7],
            io_width: w[8],
            port_width: w[9],
            clock_low: w[10],
            clock_high: w[11],
            instance_stride: [w[12], w[13]],
            register_stride: [w[14], w[15]],
        },
    )
}

/// One module descriptor decoded as hostmot2.c's hm2_read_module_descriptors does.
#[derive(Debug, Clone, Copy)]
struct HostMd {
    gtag: u8,
    version: u8,
    clock_tag: u8,
    instances: u8,
    base: u16,
    num_registers: u8,
    register_stride: u32,
    instance_stride: u32,
    multiple_registers: u32,
}

fn read_mds(b: &mut Board, idrom_at: u32, idrom: &HostIdrom) -> Vec<HostMd> {
    let mut out = Vec::new();
    let mut addr = idrom_at + idrom.offset_to_modules;
    for _ in 0..48 {
        let d: Vec<u32> = (0..3).map(|k| reg(b, addr + 4 * k)).collect();
        let gtag = (d[0] & 0xff) as u8;
        if gtag == 0 {
            return out;
        }
        let sel = |s: u32, pair: [u32; 2]| match s {
            0 => pair[0],
            1 => pair[1],
            bad => panic!("invalid stride select {bad}"),
        };
        out.push(HostMd {
            gtag,
            version: (d[0] >> 8) as u8,
            clock_tag: (d[0] >> 16) as u8,
            instances: (d[0] >> 24) as u8,
            base: (d[1] & 0xffff) as u16,
            num_registers: (d[1] >> 16) as u8,
            register_stride: sel((d[1] >> 24) & 0xf, idrom.register_stride),
            instance_stride: sel((d[1] >> 28) & 0xf, idrom.instance_stride),
            multiple_registers: d[2],
        });
        addr += 12;
    }
    panic!("no terminating module descriptor within 48");
}

#[test]
fn the_idrom_passes_hostmot2s_checks_for_both_boards() {
    for kind in BoardKind::ALL {
        let mut b = Board::new(kind, 16);
        assert_eq!(reg(&mut b, 0x100), 0x55AA_CAFE, "{kind}: cookie");
        let name: Vec<u8> = [reg(&mut b, 0x104), reg(&mut b, 0x108)]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        assert_eq!(name, b"HOSTMOT2", "{kind}: config name");
        let (at, idrom) = read_idrom(&mut b);
        // hm2_read_idrom's checks, with hm2_eth's connectors for these boards (3 of 17 pins).
        assert!(matches!(idrom.idrom_type, 2 | 3), "{kind}: {idrom:?}");
        assert_eq!(idrom.port_width, 17, "{kind}: pins per connector");
        assert_eq!(idrom.io_ports, 3, "{kind}: connectors");
        assert_eq!(idrom.io_width, idrom.io_ports * idrom.port_width);
        assert!(idrom.clock_low >= 1_000_000 && idrom.clock_high >= 1_000_000);
        assert!(
            idrom.board_name.starts_with(b"MESA"),
            "{:?}",
            idrom.board_name
        );

        let mds = read_mds(&mut b, at, &idrom);
        let find = |tag: u8| {
            let v: Vec<&HostMd> = mds.iter().filter(|m| m.gtag == tag).collect();
            assert_eq!(v.len(), 1, "{kind}: exactly one descriptor of tag {tag}");
            *v[0]
        };
        // (version, registers, instance stride, multiple registers) each parse_md accepts.
        let wd = find(2);
        assert_eq!(
            (
                wd.version,
                wd.num_registers,
                wd.instance_stride,
                wd.multiple_registers
            ),
            (0, 3, 4, 0)
        );
        assert_eq!(
            wd.base, 0x0C00,
            "hm2_eth's reset writes the watchdog timer at 0x0C00"
        );
        let io = find(3);
        assert_eq!(
            (
                io.version,
                io.num_registers,
                io.instance_stride,
                io.multiple_registers
            ),
            (0, 5, 4, 0x1f)
        );
        assert_eq!(u32::from(io.instances), idrom.io_ports);
        let sg = find(5);
        assert!(matches!(sg.version, 0 | 1 | 2 | 0x42 | 0xC2));
        assert_eq!(
            (sg.num_registers, sg.instance_stride, sg.multiple_registers),
            (10, 4, 0x1ff)
        );
        let enc = find(4);
        assert!(matches!(enc.version, 2 | 3 | 0x83));
        assert_eq!(
            (
                enc.num_registers,
                enc.instance_stride,
                enc.multiple_registers
            ),
            (5, 4, 0x3)
        );
        for m in &mds {
            assert!(matches!(m.clock_tag, 1 | 2), "{m:?}");
            // No two modules' register blocks overlap, and none reaches the IDROM.
            let end = u32::from(m.base) + m.register_stride * u32::from(m.num_registers);
            for o in mds.iter().filter(|o| o.gtag != m.gtag) {
                let o_end = u32::from(o.base) + o.register_stride * u32::from(o.num_registers);
                assert!(
                    end <= u32::from(o.base) || o_end <= u32::from(m.base),
                    "{m:?} {o:?}"
                );
            }
            assert!(u32::from(m.base) >= at + 0x400 || end <= 0x100, "{m:?}");
        }

        // Pin descriptors (pins.c): one per I/O pin, primary tag IOPort, no zero sentinel inside.
        let pins_at = at + idrom.offset_to_pin_desc;
        let pins: Vec<u32> = (0..idrom.io_width)
            .map(|i| reg(&mut b, pins_at + 4 * i))
            .collect();
        for (i, d) in pins.iter().enumerate() {
            assert_eq!(d >> 24, 3, "{kind}: pin {i} primary tag");
        }
        let role = |tag: u32, unit: u32, sec_pin: u32| {
            pins.iter()
                .filter(|d| {
                    (*d >> 8) & 0xff == tag && (*d >> 16) & 0xff == unit && *d & 0xff == sec_pin
                })
                .count()
        };
        for s in 0..u32::from(sg.instances) {
            // Step and Dir, both outputs (bit 7).
            assert_eq!(
                (role(5, s, 0x81), role(5, s, 0x82)),
                (1, 1),
                "{kind}: stepgen {s}"
            );
        }
        for e in 0..u32::from(enc.instances) {
            assert_eq!(
                (role(4, e, 1), role(4, e, 2), role(4, e, 3)),
                (1, 1, 1),
                "{kind}: encoder {e} A, B, Index"
            );
        }
        // The area is read-only: a write to the cookie does not stick and counts a write error.
        let mut req = Vec::new();
        lbp16::push(
            &mut req,
            lbp16::write(0, Width::W32, 1),
            Some(0x100),
            &[0; 4],
        );
        assert!(b.handle(&req, 0).is_none());
        assert_eq!(reg(&mut b, 0x100), 0x55AA_CAFE);
        assert_eq!(b.counters().write_errors, 1);
    }
}

#[test]
fn board_info_eeprom_and_status_spaces_answer_like_a_card() {
    let mut b = Board::new(BoardKind::I96S, 16);
    b.set_mac([0x02, 0x11, 0x22, 0x33, 0x44, 0x55]);
    // hm2_eth's probe: 8 16-bit words of space 7 from 0.
    let mut req = Vec::new();
    lbp16::push(&mut req, lbp16::read(7, Width::W16, 8), Some(0), &[]);
    let name = b.handle(&req, 0).unwrap();
    assert_eq!(&name[..6], b"7I96S\0");
    assert_eq!(name.len(), 16);
    // hm2_eth's MAC read (0x4983 at 2): 6 bytes, the address's last byte first.
    let mut req = 0x4983u16.to_le_bytes().to_vec();
    req.extend_from_slice(&2u16.to_le_bytes());
    assert_eq!(
        b.handle(&req, 0).unwrap(),
        vec![0x55, 0x44, 0x33, 0x22, 0x11, 0x02]
    );
    // hm2_eth's per-period bookkeeping: read space 6 at 8, write space 4 at 0x10, read it back.
    let mut req = Vec::new();
    lbp16::push(&mut req, lbp16::read(6, Width::W16, 1), Some(0x8), &[]);
    lbp16::push(
        &mut req,
        lbp16::write(4, Width::W16, 2),
        Some(0x10),
        &7u32.to_le_bytes(),
    );
    lbp16::push(&mut req, lbp16::read(4, Width::W16, 4), Some(0x10), &[]);
    let r = b.handle(&req, 1_000).unwrap();
    assert_eq!(r.len(), 2 + 8, "the reply is the reads' data only");
    assert_eq!(
        u16::from_le_bytes([r[0], r[1]]),
        3,
        "three requests so far, this one included"
    );
    assert_eq!(&r[2..6], &7u32.to_le_bytes(), "the scratch read-back");
    // Every space's info area: cookie 0x5A0n and the name.
    for space in [0u8, 2, 3, 4, 6, 7] {
        let mut req = Vec::new();
        let info = Cmd {
            info: true,
            ..lbp16::read(space, Width::W16, 8)
        };
        lbp16::push(&mut req, info, Some(0), &[]);
        let a = b.handle(&req, 0).unwrap();
        assert_eq!(u16::from_le_bytes([a[0], a[1]]), 0x5a00 | u16::from(space));
        assert!(
            a[8..16].iter().all(|c| c.is_ascii_graphic() || *c == b' '),
            "{:?}",
            &a[8..16]
        );
    }
    // A space the card lacks answers zeros and counts a memory error; a bad tail a parse error.
    let mut req = Vec::new();
    lbp16::push(&mut req, lbp16::read(5, Width::W16, 2), Some(0), &[]);
    req.push(0x99);
    assert_eq!(b.handle(&req, 0).unwrap(), vec![0; 4]);
    let c = b.counters();
    assert_eq!(
        (c.mem_errors, c.parse_errors),
        (2, 1),
        "a memory error per element"
    );
}

// ---------------------------------------------------------------- behaviour in time

fn write32(b: &mut Board, addr: u16, v: u32, now: u64) {
    let mut req = Vec::new();
    lbp16::push(
        &mut req,
        lbp16::write(0, Width::W32, 1),
        Some(addr),
        &v.to_le_bytes(),
    );
    assert!(b.handle(&req, now).is_none());
}

fn read32(b: &mut Board, addr: u16, now: u64) -> u32 {
    let mut req = Vec::new();
    lbp16::push(&mut req, lbp16::read(0, Width::W32, 1), Some(addr), &[]);
    u32::from_le_bytes(b.handle(&req, now).unwrap()[..4].try_into().unwrap())
}

const MS: u64 = 1_000_000;

#[test]
fn stepgens_advance_on_the_board_clock_at_the_commanded_rate() {
    let mut b = Board::new(BoardKind::I96S, 16);
    // hostmot2's rate register: steps/s × 2^32 / clock (100 MHz here).
    let rate = |steps_per_s: f64| (steps_per_s * 4294967296.0 / 100e6) as i32 as u32;
    write32(&mut b, 0x2000, rate(1000.0), 0);
    write32(&mut b, 0x2004, rate(-250.0), 0);
    // The accumulator is 16.16 fixed point steps; the rate register's resolution (2^-32 of the
    // clock: 1000 steps/s is 42949.67, written 42949) leaves 0.016 steps after a second.
    let acc0 = read32(&mut b, 0x2100, 1000 * MS) as i32 as f64 / 65536.0;
    let acc1 = read32(&mut b, 0x2104, 1000 * MS) as i32 as f64 / 65536.0;
    assert!((acc0 - 1000.0).abs() < 0.05, "{acc0}");
    assert!((acc1 + 250.0).abs() < 0.05, "{acc1}");
    // Half a second at a new rate: positions add up, the rate is what was commanded.
    write32(&mut b, 0x2000, rate(-2000.0), 1000 * MS);
    b.advance(1500 * MS);
    assert!(
        (b.stepgen_position(0) - 0.0).abs() < 0.05,
        "{}",
        b.stepgen_position(0)
    );
    assert!((b.stepgen_rate(0) + 2000.0).abs() < 0.05);
    // Writing the accumulator does not move it.
    write32(&mut b, 0x2100, 0x1234_0000, 1500 * MS);
    assert!((b.stepgen_position(0)).abs() < 0.05);
}

#[test]
fn the_watchdog_bites_when_not_petted_in_time_and_outputs_go_safe() {
    let mut b = Board::new(BoardKind::I96S, 64);
    // GPIO pin 11 an output driven high.
    write32(&mut b, 0x1100, 1 << 11, 0);
    write32(&mut b, 0x1000, 1 << 11, 0);
    assert_eq!(b.output(11), Some(true));
    assert_eq!(read32(&mut b, 0x1000, 0) & (1 << 11), 1 << 11);
    write32(&mut b, 0x2000, 0x0100_0000, 0);
    // hostmot2's timeout: ns × clock / 1e9 − 1 → 5 ms.
    write32(&mut b, 0x0C00, 5 * MS as u32 / 10 - 1, 0);
    assert!(b.watchdog_armed());
    // Petted (0x5A in the top byte of the reset register) at 4 ms: alive at 8 ms.
    write32(&mut b, 0x0E00, 0x5a00_0000, 4 * MS);
    assert_eq!(read32(&mut b, 0x0D00, 8 * MS) & 1, 0);
    assert!(!b.bitten());
    // A write without the key is not a pet.
    write32(&mut b, 0x0E00, 0x1200_0000, 8 * MS);
    let pos_before = b.stepgen_position(0);
    b.advance(9 * MS + 1);
    assert!(b.bitten(), "4 ms + 5 ms passed without a pet");
    assert_eq!(
        read32(&mut b, 0x0D00, 9 * MS + 2) & 1,
        1,
        "status bit 0: has bit"
    );
    assert_eq!(b.output(11), None, "outputs off after a bite");
    let pos_at_bite = b.stepgen_position(0);
    b.advance(100 * MS);
    assert_eq!(
        b.stepgen_position(0),
        pos_at_bite,
        "stepgens stopped at the bite"
    );
    assert!(pos_at_bite > pos_before);
    // Pets do not revive a bitten watchdog; the host's clear does (status written 0).
    write32(&mut b, 0x0E00, 0x5a00_0000, 101 * MS);
    assert!(b.bitten());
    write32(&mut b, 0x0D00, 0, 102 * MS);
    assert!(!b.bitten() && b.watchdog_armed());
    assert_eq!(b.output(11), Some(true));
    // hm2_eth's reset on unload: the timer written 1 → bites within ticks.
    write32(&mut b, 0x0C00, 1, 103 * MS);
    b.advance(103 * MS + 100);
    assert!(b.bitten());
    // Every request with writes is in the log, in order, with its words.
    let log = b.write_log();
    assert_eq!(log.last_word(0x0C00), Some(1));
    assert_eq!(log.last_word(0x1000), Some(1 << 11));
    assert_eq!(log.len(), 9, "one entry per request with writes");
}

#[test]
fn replies_are_lost_one_in_n_once_the_host_pets_the_watchdog() {
    let mut b = Board::new(BoardKind::I96S, 16);
    b.set_reply_loss(3);
    let mut req = Vec::new();
    lbp16::push(&mut req, lbp16::read(0, Width::W32, 1), Some(0x100), &[]);
    // Discovery (before the first pet): every read answered.
    assert!((0..10).all(|i| b.handle(&req, i * MS).is_some()));
    write32(&mut b, 0x0C00, 5 * MS as u32 / 10 - 1, 10 * MS);
    write32(&mut b, 0x0E00, 0x5a00_0000, 11 * MS);
    let answered: Vec<bool> = (0..9)
        .map(|i| b.handle(&req, (12 + i) * MS).is_some())
        .collect();
    assert_eq!(
        answered,
        [true, true, false, true, true, false, true, true, false]
    );
    assert_eq!(b.replies_lost(), 3);
    let totals: Vec<u64> = b
        .take_events()
        .into_iter()
        .filter_map(|e| match e {
            rtapi::mesa::Event::ReplyLost { total } => Some(total),
            _ => None,
        })
        .collect();
    assert_eq!(totals, [1, 2, 3]);
    // Writes are never "lost": they have no reply, and the board applies them.
    write32(&mut b, 0x2000, 7, 21 * MS);
    assert_eq!(b.write_log().last_word(0x2000), Some(7));
}

#[test]
fn inputs_and_encoder_counts_come_from_the_embedding_code() {
    let mut b = Board::new(BoardKind::I76E, 4);
    b.set_input(3, true);
    b.set_input(20, true);
    assert_eq!(read32(&mut b, 0x1000, 0), 1 << 3);
    assert_eq!(read32(&mut b, 0x1004, 0), 1 << 3, "pin 20 is port 1 bit 3");
    b.set_encoder_count(0, -5, 10 * MS);
    let c = read32(&mut b, 0x3000, 10 * MS);
    assert_eq!(c & 0xffff, (-5i16) as u16 as u32);
    b.set_encoder_inputs(0, true, false, true);
    assert_eq!(read32(&mut b, 0x3100, 10 * MS) & 7, 0b101);
    // Latch on index (bit 4): the count is latched into the top half, the bit clears.
    write32(&mut b, 0x3100, 1 << 4, 10 * MS);
    b.encoder_index_pulse(0, 11 * MS);
    let l = read32(&mut b, 0x3100, 11 * MS);
    assert_eq!((l >> 16, l & (1 << 4)), ((-5i16) as u16 as u32, 0));
    // The log is bounded.
    for i in 0..10 {
        write32(&mut b, 0x1000, i, 12 * MS);
    }
    assert_eq!(b.write_log().len(), 4);
    assert_eq!(b.write_log().dropped(), 7);
    assert_eq!(b.write_log().last_word(0x1000), Some(9));
}

#[test]
fn a_home_switch_follows_its_step_generator_on_the_board_clock() {
    let mut b = Board::new(BoardKind::I96S, 4);
    // Pin 2 closes when step generator 1 is at or past 1000 steps; pin 3 follows nothing.
    b.wire_switch(rtapi::mesa::Switch {
        pin: 2,
        stepgen: 1,
        at: 1000.0,
    });
    b.set_input(3, true);
    // 2000 steps/s from time 0: 1000 steps at 500 ms.
    let rate = (2000.0 * 4294967296.0 / 100e6) as i32 as u32;
    write32(&mut b, 0x2004, rate, 0);
    assert_eq!(read32(&mut b, 0x1000, 0), 1 << 3, "open at the start");
    assert_eq!(
        read32(&mut b, 0x1000, 499 * MS),
        1 << 3,
        "open at 998 steps"
    );
    assert_eq!(
        read32(&mut b, 0x1000, 501 * MS),
        1 << 3 | 1 << 2,
        "closed at 1002 steps"
    );
    // Back below the threshold: open again (the latch's back-off).
    write32(&mut b, 0x2004, (-(rate as i32)) as u32, 501 * MS);
    assert_eq!(
        read32(&mut b, 0x1000, 503 * MS),
        1 << 3,
        "open again at 998 steps"
    );
    assert_eq!(b.switches().len(), 1);
}

// ---------------------------------------------------------------- stock LinuxCNC's hm2_eth

const NOBODY: u32 = 65534;

/// Why stock LinuxCNC's hm2_eth cannot be run against the simulator here, if it cannot.
fn lcnc_missing() -> Option<String> {
    if let Some(why) = netns::missing() {
        return Some(why);
    }
    for p in [
        "/usr/bin/halrun",
        "/usr/bin/halcmd",
        "/usr/bin/rtapi_app",
        "/usr/lib/linuxcnc/modules/hm2_eth.so",
        "/usr/lib/linuxcnc/modules/hostmot2.so",
        "/usr/bin/setpriv",
        "/usr/bin/unshare",
    ] {
        if !Path::new(p).exists() {
            return Some(format!("{p} is missing (linuxcnc-uspace, util-linux)"));
        }
    }
    None
}

/// A HOME nobody may write: halrun's `~/.rtapi_fifo` (the realtime master's socket) lives there.
fn nobody_home() -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix("mesa-sim-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(d.path(), Some(NOBODY), Some(NOBODY)).unwrap();
    d
}

/// LinuxCNC's `halrun ARGS` in the host's namespace, in IPC and PID namespaces of its own
/// (LinuxCNC's HAL is in fixed SysV keys; halrun looks for any rtapi_app), as nobody (rtapi_app refuses root; it is setuid root itself, and
/// hm2_eth's iptables and sysctl calls act in the namespace it runs in).
fn halrun(link: &netns::Link, home: &Path, args: &[&str]) -> Command {
    let mut c = link.host.command("unshare");
    // A PID namespace with its own /proc too: halrun refuses to start while `ps` shows any
    // rtapi_app, another test's included.
    c.args(["--ipc", "--pid", "--fork", "--mount-proc", "--", "setpriv"])
        .arg(format!("--reuid={NOBODY}"))
        .arg(format!("--regid={NOBODY}"))
        .args(["--clear-groups", "env"])
        .arg(format!("HOME={}", home.display()))
        .arg("halrun")
        .args(args);
    c
}

fn wait_with_deadline(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("halrun did not end within {limit:?} (a hang)");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn stock_hm2_eth_identifies_the_board_and_makes_every_modules_pins() {
    if let Some(why) = lcnc_missing() {
        return skip!(Ci, "{why}");
    }
    for kind in BoardKind::ALL {
        let link = netns::Link::new("mesaid").unwrap_or_else(|e| panic!("test network: {e}"));
        let sim = SimProcess::start(&link, kind.cli_name());
        let home = nobody_home();
        let prefix = format!("{}.0", kind.hal_prefix());
        let hal = home.path().join("probe.hal");
        std::fs::write(
            &hal,
            format!(
                "loadrt hostmot2\nloadrt hm2_eth board_ip={}\nshow pin {prefix}\nshow funct {prefix}\n",
                link.board_ip
            ),
        )
        .unwrap();
        std::fs::set_permissions(&hal, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut child = halrun(&link, home.path(), &["-f", hal.to_str().unwrap()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = Lines::of(&mut child);
        let status = wait_with_deadline(&mut child, Duration::from_secs(120));
        let text = out.text();
        assert!(
            status.success(),
            "{kind}: halrun failed: {status}\n{text}\nsim:\n{}",
            sim.out.text()
        );
        for pin in [
            format!("{prefix}.watchdog.has_bit"),
            format!("{prefix}.gpio.000.in"),
            format!("{prefix}.gpio.050.out"),
            format!("{prefix}.stepgen.00.position-cmd"),
            format!("{prefix}.stepgen.04.velocity-fb"),
            format!("{prefix}.encoder.00.count"),
            format!("{prefix}.encoder.00.position"),
            format!("{prefix}.packet-error-level"),
        ] {
            assert!(text.contains(&pin), "{kind}: no pin {pin} in:\n{text}");
        }
        assert!(
            !text.contains(&format!("{prefix}.stepgen.05.")),
            "{kind}: 5 stepgens only"
        );
        for f in [format!("{prefix}.read"), format!("{prefix}.write")] {
            assert!(text.contains(&f), "{kind}: no function {f}:\n{text}");
        }
        // The card side saw discovery, identification, and the driver letting go at unload.
        sim.out
            .wait_for("the simulator saw the name read", "read the board name");
        sim.out
            .wait_for("the simulator saw the IDROM read", "read the IDROM");
        sim.out.wait_for(
            "the simulator saw the unload's bite request",
            "watchdog set to bite at once",
        );
        drop(sim);
        drop(link);
    }
}

/// halrun's interactive halcmd, fed line by line.
struct Halcmd {
    child: Child,
    stdin: ChildStdin,
    out: Lines,
}

impl Halcmd {
    fn send(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
    }
}

#[test]
fn the_watchdog_bites_when_linuxcncs_thread_stops_and_hm2_reports_has_bit() {
    if let Some(why) = lcnc_missing() {
        return skip!(Ci, "{why}");
    }
    let link = netns::Link::new("mesawd").unwrap_or_else(|e| panic!("test network: {e}"));
    let sim = SimProcess::start(&link, "7i96s");
    let home = nobody_home();
    let mut child = halrun(&link, home.path(), &[])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = Lines::of(&mut child);
    let stdin = child.stdin.take().unwrap();
    let mut hal = Halcmd { child, stdin, out };
    let p = "hm2_7i96s.0";
    // A 10 ms servo thread (the read deadline is 80 % of it: room for a shared VM), a 500 ms
    // watchdog, stepgen 0 in velocity mode at 100 steps/s with no acceleration limit.
    for line in [
        "loadrt hostmot2".to_string(),
        format!("loadrt hm2_eth board_ip={}", link.board_ip),
        "loadrt threads name1=servo period1=10000000".to_string(),
        format!("addf {p}.read servo"),
        format!("addf {p}.write servo"),
        format!("setp {p}.watchdog.timeout_ns 500000000"),
        format!("setp {p}.stepgen.00.control-type 1"),
        format!("setp {p}.stepgen.00.position-scale 1"),
        format!("setp {p}.stepgen.00.maxaccel 0"),
        format!("setp {p}.stepgen.00.velocity-cmd 100"),
        format!("setp {p}.stepgen.00.enable 1"),
        "start".to_string(),
    ] {
        hal.send(&line);
    }
    let ctx = |hal: &Halcmd, sim: &SimProcess| {
        format!("halcmd:\n{}\nsim:\n{}", hal.out.text(), sim.out.text())
    };
    until_true(
        "the board is petted by the running thread",
        GENEROUS,
        || {
            assert!(
                !sim.out.has("WATCHDOG BIT"),
                "bit while the thread runs:\n{}",
                ctx(&hal, &sim)
            );
            sim.out.has("watchdog petted")
        },
    );
    sim.out
        .wait_for("the commanded step rate reaches the board", "0: 100.0");
    // Petted for two whole seconds (the simulator's once-a-second count, twice): four timeouts
    // without a bite.
    until_true("two seconds of pets", GENEROUS, || {
        sim.out.text().matches("times in the last").count() >= 2
    });
    until_true("has_bit is false while petted", GENEROUS, || {
        hal.send(&format!("getp {p}.watchdog.has_bit"));
        std::thread::sleep(Duration::from_millis(20));
        hal.out.has("FALSE")
    });
    // Stop the thread: nobody pets the board any more.
    let before_stop = sim.out.text();
    assert!(
        !before_stop.contains("WATCHDOG BIT"),
        "bit while the thread ran:\n{}",
        ctx(&hal, &sim)
    );
    hal.send("stop");
    sim.out
        .wait_for("the board's watchdog bites", "WATCHDOG BIT");
    assert!(
        sim.out.has("not petted within 500.000 ms"),
        "{}",
        ctx(&hal, &sim)
    );
    // Run again: hm2's read sees the status bit and raises has_bit (it does not re-arm by itself).
    hal.send("start");
    until("hm2 reports has_bit", GENEROUS, || {
        hal.send(&format!("getp {p}.watchdog.has_bit"));
        std::thread::sleep(Duration::from_millis(20));
        hal.out.has("TRUE").then_some(())
    });
    // Clearing has_bit is the operator's recovery: the host rewrites everything and clears the bite.
    hal.send(&format!("setp {p}.watchdog.has_bit 0"));
    sim.out.wait_for(
        "the host clears the bite",
        "watchdog bite cleared by the host",
    );
    hal.send("stop");
    hal.send("exit");
    drop(hal.stdin);
    let status = wait_with_deadline(&mut hal.child, Duration::from_secs(60));
    assert!(status.success(), "halrun: {status}\n{}", hal.out.text());
    drop(sim);
    drop(link);
}

/// Issue 43 item 4 against the simulated card: rtapi's LinuxCNC master in the host's network
/// namespace (IPC and mount namespaces of the test's own, as the master tests run it), hm2_eth
/// talking to `rtapi mesa-sim` across the veth pair, `hm2_7i96s.0.read` and `.write` in the servo
/// thread: the thread's statistics carry their time per period (two calls a period, no more I/O
/// periods than periods), `show --json` and `export` alike.
/// The card loses one reply in [`LOSE_EVERY`] (`rtapi mesa-sim --lose-replies`): hm2_eth counts
/// each as a packet error and goes on.
const LOSE_EVERY: u32 = 50;

#[test]
fn hm2_eth_read_and_write_on_rtapis_master_are_timed_per_period_and_its_packet_errors_counted() {
    use common::master_ns::{self, wait_exit, Ipc, Master};
    if let Some(why) = lcnc_missing().or_else(master_ns::missing) {
        return skip!(Ci, "{why}");
    }
    let link = netns::Link::new("mesaio").unwrap_or_else(|e| panic!("test network: {e}"));
    let sim = SimProcess::start_with(&link, "7i96s", &["--lose-replies", &LOSE_EVERY.to_string()]);
    let ns = Ipc::new();
    let log = ns.dir.path().join("master.1.err");
    let mut c = link.host.command("nsenter");
    c.arg(format!("--ipc=/proc/{}/ns/ipc", ns.holder.id()))
        .arg(format!("--mount=/proc/{}/ns/mnt", ns.holder.id()))
        .arg("env")
        .arg(format!("RTAPI_UID={}", master_ns::NOBODY))
        .arg(format!("HOME={}", ns.dir.path().display()))
        .arg(format!("RTAPI_FIFO_PATH={}", ns.fifo().display()))
        .arg(format!("RTAPI_INSTANCE={}", ns.inst))
        .arg("RTAPI_FLAVOR=posix")
        .arg(master_ns::master_bin())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    let mut m = Master(c.spawn().unwrap());
    until_true("the master listening", GENEROUS, || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.contains("listening on"))
    });
    ns.ok(&["loadrt", "threads", "name1=servo", "period1=1000000"]);
    ns.ok(&["loadrt", "hostmot2"]);
    ns.ok(&["loadrt", "hm2_eth", &format!("board_ip={}", link.board_ip)]);
    ns.ok(&["addf", "hm2_7i96s.0.read", "servo"]);
    ns.ok(&["addf", "hm2_7i96s.0.write", "servo"]);
    ns.ok(&["start"]);
    let servo = |j: &serde_json::Value| {
        j["threads"]
            .as_array()
            .and_then(|a| a.iter().find(|t| t["name"] == "servo"))
            .cloned()
            .unwrap_or_default()
    };
    until_true("200 periods with I/O", GENEROUS, || {
        servo(&ns.show_threads())["io_ns"]["periods"]
            .as_u64()
            .is_some_and(|n| n >= 200)
    });
    ns.ok(&["stop"]);
    let t = servo(&ns.show_threads());
    eprintln!("servo: {t}");
    let io = &t["io_ns"];
    let n = |k: &str| io[k].as_u64().unwrap_or_else(|| panic!("io_ns.{k}: {t}"));
    assert_eq!(
        n("calls"),
        2 * n("periods"),
        "read and write each period: {t}"
    );
    assert!(n("periods") <= t["cycles"].as_u64().unwrap(), "{t}");
    assert!(n("min") <= n("p50") && n("p50") <= n("max"), "{t}");
    // The card answered (its round trip is in the read's time: more than nothing).
    assert!(n("max") > 0, "{t}");
    sim.out
        .wait_for("the simulator saw the host's writes", "watchdog petted");
    // Packet errors: rtapi's count is hm2_eth's own counter, which the threads no longer move;
    // every reply the card lost is in it (late replies on a loaded machine may add more).
    let pin = ns.ok(&["getp", "hm2_7i96s.0.packet-error-total"]);
    let pin: u64 = pin
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("getp packet-error-total: {e}: {pin:?}"));
    let errors = &t["io_errors"];
    assert_eq!(errors["count"].as_u64(), Some(pin), "{t}");
    let lost = sim
        .out
        .text()
        .lines()
        .filter(|l| l.contains("reply lost on purpose"))
        .count() as u64;
    assert!(
        lost >= n("periods") / u64::from(LOSE_EVERY) / 2 && lost >= 1,
        "the card lost {lost} replies in {} periods",
        n("periods")
    );
    assert!(pin >= lost, "hm2_eth counted {pin}, the card lost {lost}");
    let periods_with = errors["periods"].as_u64().unwrap();
    assert!(periods_with >= 1 && periods_with <= pin, "{t}");
    // watch: the thread's own figures, I/O errors among them.
    let w = Command::new(env!("CARGO_BIN_EXE_rtapi"))
        .args(["watch", "servo", "--count", "1", "--instance", &ns.inst])
        .output()
        .unwrap();
    let wout = String::from_utf8_lossy(&w.stdout);
    assert!(
        w.status.success(),
        "{wout}{}",
        String::from_utf8_lossy(&w.stderr)
    );
    assert!(wout.contains(&format!(" servo.io.errors={pin}")), "{wout}");
    assert!(wout.contains(" servo.io.max_us="), "{wout}");
    // export: the count of the I/O histogram is the I/O periods.
    let exp = common::exporter::Exporter::start(&["--instance", &ns.inst]);
    let metrics = {
        use std::io::Read;
        let mut s = std::net::TcpStream::connect(&exp.addr).unwrap();
        s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        body
    };
    let count = metrics
        .lines()
        .find(|l| {
            l.starts_with("rtapi_thread_io_seconds_count{")
                && l.contains(&format!("instance=\"{}\"", ns.inst))
                && l.contains("thread=\"servo\"")
        })
        .unwrap_or_else(|| panic!("no I/O count of servo: {metrics}"));
    let count: f64 = count.rsplit(' ').next().unwrap().parse().unwrap();
    assert_eq!(count as u64, n("periods"), "{metrics}");
    let exported = metrics
        .lines()
        .find(|l| {
            l.starts_with("rtapi_thread_io_errors")
                && !l.starts_with("rtapi_thread_io_error_periods")
                && l.contains(&format!("instance=\"{}\"", ns.inst))
                && l.contains("thread=\"servo\"")
        })
        .unwrap_or_else(|| panic!("no I/O errors of servo: {metrics}"));
    assert!(exported.ends_with(&format!(" {pin}")), "{exported}");
    ns.ok(&["unload", "all"]);
    let st = wait_exit(&mut m);
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(st.success(), "{st}\n{text}");
    assert!(!text.contains("I/O time:"), "{text}");
    // The network verdict at exit: hm2_eth's own count of the replies that missed its deadline.
    assert!(
        text.contains(&format!("network (servo): no: {pin} packet errors")),
        "{text}"
    );
    drop(sim);
    drop(link);
}
