//! What a HostMot2 firmware tells its host about itself: the fixed words at the bottom of the
//! register file, the IDROM header, the module descriptors and the pin descriptors — and the two
//! board layouts the simulator offers.
//!
//! Field layout (all little-endian 32-bit words in register space 0):
//!
//! * `0x100` the cookie `0x55AACAFE`, `0x104` the eight bytes `HOSTMOT2`, `0x10C` the IDROM's address.
//! * IDROM header, 16 words: type (2 or 3), offset of the module descriptors, offset of the pin
//!   descriptors (both from the IDROM's address), an eight-byte board name, FPGA size, FPGA pins,
//!   I/O ports, I/O width (= ports × port width), port width, low clock Hz, high clock Hz, instance
//!   strides 0 and 1, register strides 0 and 1.
//! * Module descriptor, 3 words: `tag | version<<8 | clock tag<<16 | instances<<24`;
//!   `base address | registers<<16 | register-stride select<<24 | instance-stride select<<28`; the
//!   mask of registers that exist once per instance. A zero tag ends the list.
//! * Pin descriptor, 1 word: `secondary pin | secondary tag<<8 | secondary unit<<16 | primary tag<<24`;
//!   bit 7 of the secondary pin marks an output. The primary tag is always the IOPort's.

/// The cookie word at [`COOKIE_ADDR`].
pub const COOKIE: u32 = 0x55AA_CAFE;
/// Where the cookie is.
pub const COOKIE_ADDR: u16 = 0x0100;
/// Where the configuration name is.
pub const CONFIG_NAME_ADDR: u16 = 0x0104;
/// The configuration name.
pub const CONFIG_NAME: [u8; 8] = *b"HOSTMOT2";
/// Where the IDROM's address is.
pub const IDROM_OFFSET_ADDR: u16 = 0x010C;
/// Where the simulated IDROM starts.
pub const IDROM_ADDR: u16 = 0x0400;
/// Module descriptors start this far after the IDROM.
pub const MODULES_OFFSET: u32 = 0x40;
/// Pin descriptors start this far after the IDROM.
pub const PINS_OFFSET: u32 = 0x200;
/// The end of the read-only area that starts at [`IDROM_ADDR`].
pub const IDROM_END: u16 = 0x0800;

/// Register stride 0 (the one every simulated module uses): registers of a module are this far apart.
pub const REGISTER_STRIDE: u16 = 0x100;
/// Instance stride 0: instances of one register are this far apart.
pub const INSTANCE_STRIDE: u16 = 4;

/// Function tags of the modules the simulator has.
pub mod tag {
    /// Watchdog.
    pub const WATCHDOG: u8 = 2;
    /// IOPort (GPIO), the primary function of every pin.
    pub const IOPORT: u8 = 3;
    /// Quadrature counter (encoder).
    pub const ENCODER: u8 = 4;
    /// Step generator.
    pub const STEPGEN: u8 = 5;
}

/// Base addresses of the simulated modules.
pub mod base {
    /// Watchdog: timer, status, reset registers (`0x0C00` is also where hm2_eth writes to make it
    /// bite at once when it lets go of the board).
    pub const WATCHDOG: u16 = 0x0C00;
    /// IOPort: data, direction, alternate source, open drain, output invert.
    pub const IOPORT: u16 = 0x1000;
    /// StepGen: rate, accumulator, mode, dir setup, dir hold, pulse width, pulse idle, table data,
    /// table length, master DDS.
    pub const STEPGEN: u16 = 0x2000;
    /// Encoder: count, latch/control, timestamp divider, timestamp count, filter rate.
    pub const ENCODER: u16 = 0x3000;
}

/// The IDROM header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Idrom {
    /// IDROM type: 3.
    pub idrom_type: u32,
    /// Module descriptors' offset from the IDROM.
    pub offset_to_modules: u32,
    /// Pin descriptors' offset from the IDROM.
    pub offset_to_pins: u32,
    /// Eight bytes, not terminated.
    pub board_name: [u8; 8],
    /// FPGA size (informational).
    pub fpga_size: u32,
    /// FPGA package pins (informational).
    pub fpga_pins: u32,
    /// I/O connectors.
    pub io_ports: u32,
    /// All I/O pins.
    pub io_width: u32,
    /// Pins per connector.
    pub port_width: u32,
    /// Clock of modules with clock tag 1, Hz.
    pub clock_low: u32,
    /// Clock of modules with clock tag 2, Hz.
    pub clock_high: u32,
    /// Instance strides 0 and 1.
    pub instance_stride: [u32; 2],
    /// Register strides 0 and 1.
    pub register_stride: [u32; 2],
}

impl Idrom {
    /// The header as the 16 words the host reads.
    pub fn words(&self) -> [u32; 16] {
        let n = |i: usize| {
            u32::from_le_bytes([
                self.board_name[i],
                self.board_name[i + 1],
                self.board_name[i + 2],
                self.board_name[i + 3],
            ])
        };
        [
            self.idrom_type,
            self.offset_to_modules,
            self.offset_to_pins,
            n(0),
            n(4),
            self.fpga_size,
            self.fpga_pins,
            self.io_ports,
            self.io_width,
            self.port_width,
            self.clock_low,
            self.clock_high,
            self.instance_stride[0],
            self.instance_stride[1],
            self.register_stride[0],
            self.register_stride[1],
        ]
    }
}

/// A module descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModuleDescriptor {
    /// Function tag ([`tag`]).
    pub tag: u8,
    /// Module version.
    pub version: u8,
    /// 1: the low clock, 2: the high clock.
    pub clock_tag: u8,
    /// Instances.
    pub instances: u8,
    /// Address of register 0 of instance 0.
    pub base: u16,
    /// Registers.
    pub registers: u8,
    /// 0 or 1: which IDROM register stride applies.
    pub register_stride_select: u8,
    /// 0 or 1: which IDROM instance stride applies.
    pub instance_stride_select: u8,
    /// Bit r set: register r exists once per instance (else once per module).
    pub per_instance: u32,
}

impl ModuleDescriptor {
    /// The descriptor as the 3 words the host reads.
    pub fn words(&self) -> [u32; 3] {
        [
            u32::from(self.tag)
                | u32::from(self.version) << 8
                | u32::from(self.clock_tag) << 16
                | u32::from(self.instances) << 24,
            u32::from(self.base)
                | u32::from(self.registers) << 16
                | u32::from(self.register_stride_select & 0xf) << 24
                | u32::from(self.instance_stride_select & 0xf) << 28,
            self.per_instance,
        ]
    }
}

/// A pin descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PinDescriptor {
    /// The pin's role in its secondary function (bit 7: an output), 0 for none.
    pub sec_pin: u8,
    /// The secondary function's tag, 0 for none.
    pub sec_tag: u8,
    /// The secondary function's instance.
    pub sec_unit: u8,
    /// Always [`tag::IOPORT`].
    pub primary_tag: u8,
}

impl PinDescriptor {
    /// A pin that is only a GPIO.
    pub const fn gpio() -> Self {
        PinDescriptor {
            sec_pin: 0,
            sec_tag: 0,
            sec_unit: 0,
            primary_tag: tag::IOPORT,
        }
    }

    /// A pin that can also serve `tag`'s instance `unit` as its role `role` (`| 0x80`: an output).
    pub const fn secondary(tag: u8, unit: u8, role: u8) -> Self {
        PinDescriptor {
            sec_pin: role,
            sec_tag: tag,
            sec_unit: unit,
            primary_tag: tag::IOPORT,
        }
    }

    /// The descriptor word.
    pub fn word(&self) -> u32 {
        u32::from(self.sec_pin)
            | u32::from(self.sec_tag) << 8
            | u32::from(self.sec_unit) << 16
            | u32::from(self.primary_tag) << 24
    }
}

/// Stepgen pin roles.
pub const STEP: u8 = 0x81;
/// Direction: an output.
pub const DIR: u8 = 0x82;
/// Encoder A input.
pub const ENC_A: u8 = 1;
/// Encoder B input.
pub const ENC_B: u8 = 2;
/// Encoder index input.
pub const ENC_INDEX: u8 = 3;

/// The boards the simulator can be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoardKind {
    /// A 7I96S-like card: 5 step generators, 1 encoder, 51 I/O pins on 3 ports of 17.
    I96S,
    /// A 7I76E-like card: 5 step generators, 1 encoder, 51 I/O pins on 3 ports of 17.
    I76E,
    /// A 5I25-like PCI card: 5 step generators, 1 encoder, 34 I/O pins on 2 ports of 17 (P3, P2).
    /// Not an Ethernet card, so not in [`BoardKind::ALL`] (`mesa-sim` does not serve it): its
    /// register image ([`super::Board::registers`]) is what a PCI BAR holds (`tests/linuxcnc_pci.rs`
    /// puts it in a fake device's `resource0` for `hm2_pci`).
    I25,
}

impl BoardKind {
    /// Every Ethernet kind, for listings (`mesa-sim --board`).
    pub const ALL: [BoardKind; 2] = [BoardKind::I96S, BoardKind::I76E];

    /// The name on the command line.
    pub fn cli_name(self) -> &'static str {
        match self {
            BoardKind::I96S => "7i96s",
            BoardKind::I76E => "7i76e",
            BoardKind::I25 => "5i25",
        }
    }

    /// From the command-line name (any case).
    pub fn from_cli(name: &str) -> Option<BoardKind> {
        Self::ALL
            .into_iter()
            .find(|k| k.cli_name().eq_ignore_ascii_case(name))
    }

    /// The 16-byte name in board-info space 7 (the name hm2_eth recognises a card by).
    pub fn info_name(self) -> [u8; 16] {
        let text: &[u8] = match self {
            BoardKind::I96S => b"7I96S",
            BoardKind::I76E => b"7I76E-16",
            BoardKind::I25 => b"5I25",
        };
        let mut n = [0u8; 16];
        n[..text.len()].copy_from_slice(text);
        n
    }

    /// The prefix LinuxCNC's HAL names get: `hm2_<this>.0.…`.
    pub fn hal_prefix(self) -> &'static str {
        match self {
            BoardKind::I96S => "hm2_7i96s",
            BoardKind::I76E => "hm2_7i76e",
            BoardKind::I25 => "hm2_5i25",
        }
    }

    /// Its I/O ports (connectors) of [`PORT_WIDTH`] pins.
    pub fn io_ports(self) -> u8 {
        match self {
            BoardKind::I96S | BoardKind::I76E => IO_PORTS,
            BoardKind::I25 => 2,
        }
    }

    /// The board's layout: IDROM, modules, pins.
    pub fn layout(self) -> Layout {
        Layout::new(self)
    }
}

impl std::fmt::Display for BoardKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.info_name();
        let end = n.iter().position(|&b| b == 0).unwrap_or(16);
        f.write_str(&String::from_utf8_lossy(&n[..end]))
    }
}

/// Everything the host reads to learn the board: the IDROM header, module and pin descriptors.
#[derive(Debug, Clone)]
pub struct Layout {
    /// The header.
    pub idrom: Idrom,
    /// Module descriptors (without the terminating zero one).
    pub modules: Vec<ModuleDescriptor>,
    /// One per I/O pin, port by port.
    pub pins: Vec<PinDescriptor>,
}

/// Step generators of both boards.
pub const STEPGENS: u8 = 5;
/// Encoders of both boards.
pub const ENCODERS: u8 = 1;
/// I/O ports of both Ethernet boards (the 5I25 has 2: [`BoardKind::io_ports`]).
pub const IO_PORTS: u8 = 3;
/// Pins per port of both boards.
pub const PORT_WIDTH: u8 = 17;

impl Layout {
    fn new(kind: BoardKind) -> Layout {
        let clock_low = 100_000_000;
        let clock_high = 200_000_000;
        let board_name = match kind {
            BoardKind::I96S => *b"MESA7I96",
            BoardKind::I76E => *b"MESA7I76",
            BoardKind::I25 => *b"MESA5I25",
        };
        let io_ports = kind.io_ports();
        let idrom = Idrom {
            idrom_type: 3,
            offset_to_modules: MODULES_OFFSET,
            offset_to_pins: PINS_OFFSET,
            board_name,
            fpga_size: 20,
            fpga_pins: 256,
            io_ports: u32::from(io_ports),
            io_width: u32::from(io_ports) * u32::from(PORT_WIDTH),
            port_width: u32::from(PORT_WIDTH),
            clock_low,
            clock_high,
            instance_stride: [u32::from(INSTANCE_STRIDE), 0x40],
            register_stride: [u32::from(REGISTER_STRIDE), 0x40],
        };
        let md = |tag, version, instances, base, registers, per_instance| ModuleDescriptor {
            tag,
            version,
            clock_tag: 1,
            instances,
            base,
            registers,
            register_stride_select: 0,
            instance_stride_select: 0,
            per_instance,
        };
        let modules = vec![
            md(tag::WATCHDOG, 0, 1, base::WATCHDOG, 3, 0),
            md(tag::IOPORT, 0, io_ports, base::IOPORT, 5, 0x1f),
            md(tag::STEPGEN, 2, STEPGENS, base::STEPGEN, 10, 0x1ff),
            md(tag::ENCODER, 3, ENCODERS, base::ENCODER, 5, 0x3),
        ];
        // Port 0: plain GPIO (field inputs and outputs). Port 1: the motion connector — step and
        // direction of each step generator, then the encoder's A, B, index; the rest GPIO. Port 2:
        // the expansion header, GPIO.
        let mut pins = vec![PinDescriptor::gpio(); usize::from(io_ports * PORT_WIDTH)];
        let motion = usize::from(PORT_WIDTH);
        for s in 0..STEPGENS {
            let p = motion + 2 * usize::from(s);
            pins[p] = PinDescriptor::secondary(tag::STEPGEN, s, STEP);
            pins[p + 1] = PinDescriptor::secondary(tag::STEPGEN, s, DIR);
        }
        let enc = motion + 2 * usize::from(STEPGENS);
        for (k, role) in [ENC_A, ENC_B, ENC_INDEX].into_iter().enumerate() {
            pins[enc + k] = PinDescriptor::secondary(tag::ENCODER, 0, role);
        }
        Layout {
            idrom,
            modules,
            pins,
        }
    }

    /// The I/O pin where `tag`'s instance `unit` has its role `role`.
    pub fn pin_of(&self, tag: u8, unit: u8, role: u8) -> Option<usize> {
        self.pins
            .iter()
            .position(|p| p.sec_tag == tag && p.sec_unit == unit && p.sec_pin == role)
    }

    /// The words of the read-only area: `(address, word)` for the cookie, the name, the IDROM
    /// offset, the header, the module descriptors (with the terminating zero one) and the pin
    /// descriptors.
    pub fn rom_words(&self) -> Vec<(u16, u32)> {
        let mut w = vec![
            (COOKIE_ADDR, COOKIE),
            (
                CONFIG_NAME_ADDR,
                u32::from_le_bytes([
                    CONFIG_NAME[0],
                    CONFIG_NAME[1],
                    CONFIG_NAME[2],
                    CONFIG_NAME[3],
                ]),
            ),
            (
                CONFIG_NAME_ADDR + 4,
                u32::from_le_bytes([
                    CONFIG_NAME[4],
                    CONFIG_NAME[5],
                    CONFIG_NAME[6],
                    CONFIG_NAME[7],
                ]),
            ),
            (IDROM_OFFSET_ADDR, u32::from(IDROM_ADDR)),
        ];
        for (i, v) in self.idrom.words().into_iter().enumerate() {
            w.push((IDROM_ADDR + 4 * i as u16, v));
        }
        let mods = IDROM_ADDR + self.idrom.offset_to_modules as u16;
        for (i, m) in self.modules.iter().enumerate() {
            for (k, v) in m.words().into_iter().enumerate() {
                w.push((mods + 12 * i as u16 + 4 * k as u16, v));
            }
        }
        let end = mods + 12 * self.modules.len() as u16;
        for k in 0..3 {
            w.push((end + 4 * k, 0));
        }
        let pins = IDROM_ADDR + self.idrom.offset_to_pins as u16;
        for (i, p) in self.pins.iter().enumerate() {
            w.push((pins + 4 * i as u16, p.word()));
        }
        w
    }
}
