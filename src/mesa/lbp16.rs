//! LBP16, the request/response protocol of Mesa's Ethernet cards, as a byte codec.
//!
//! A request (one UDP datagram) is a sequence of commands. Each command is a 16-bit word, sent
//! little-endian:
//!
//! | bits | meaning |
//! |---|---|
//! | 15 | write (else read) |
//! | 14 | a 16-bit little-endian address follows the command word (else the space's address pointer is used) |
//! | 13 | the space's info area instead of its memory |
//! | 12..10 | memory space 0..7 |
//! | 9..8 | access width: 8, 16, 32 or 64 bits |
//! | 7 | the address advances by the width after each element |
//! | 6..0 | element count (0 is an empty command) |
//!
//! A write command carries `count × width` data bytes after its address; a read carries none. The
//! reply to a request is the data of all its reads, concatenated in order, and nothing else; a
//! request with no read gets no reply. Addresses are byte addresses in every space.

use std::fmt;

/// Bit 15 of a command word: write.
pub const WRITE: u16 = 0x8000;
/// Bit 14: an address follows.
pub const HAS_ADDRESS: u16 = 0x4000;
/// Bit 13: the info area.
pub const INFO_AREA: u16 = 0x2000;
/// Bit 7: auto-increment.
pub const AUTO_INCREMENT: u16 = 0x0080;
/// The largest element count of one command.
pub const MAX_COUNT: u8 = 0x7f;

/// The UDP port the cards listen on.
pub const UDP_PORT: u16 = 27181;

/// The width of one element of a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Width {
    /// 8 bits.
    W8,
    /// 16 bits.
    W16,
    /// 32 bits.
    W32,
    /// 64 bits.
    W64,
}

impl Width {
    /// Bytes per element.
    pub fn bytes(self) -> usize {
        match self {
            Width::W8 => 1,
            Width::W16 => 2,
            Width::W32 => 4,
            Width::W64 => 8,
        }
    }

    fn code(self) -> u16 {
        match self {
            Width::W8 => 0,
            Width::W16 => 1,
            Width::W32 => 2,
            Width::W64 => 3,
        }
    }

    fn from_code(code: u16) -> Width {
        match code & 3 {
            0 => Width::W8,
            1 => Width::W16,
            2 => Width::W32,
            _ => Width::W64,
        }
    }
}

/// One decoded command word (its address and data are separate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Command {
    /// A write (else a read).
    pub write: bool,
    /// The space's info area rather than its memory.
    pub info: bool,
    /// Memory space 0..=7.
    pub space: u8,
    /// Element width.
    pub width: Width,
    /// The address advances after each element.
    pub increment: bool,
    /// Elements, 0..=127.
    pub count: u8,
    /// Whether an address follows the command word.
    pub has_address: bool,
}

impl Command {
    /// Decodes a command word.
    pub fn decode(word: u16) -> Command {
        Command {
            write: word & WRITE != 0,
            has_address: word & HAS_ADDRESS != 0,
            info: word & INFO_AREA != 0,
            space: ((word >> 10) & 7) as u8,
            width: Width::from_code(word >> 8),
            increment: word & AUTO_INCREMENT != 0,
            count: (word & u16::from(MAX_COUNT)) as u8,
        }
    }

    /// Encodes the command word.
    pub fn encode(self) -> u16 {
        let mut w = (u16::from(self.space & 7) << 10)
            | (self.width.code() << 8)
            | u16::from(self.count & MAX_COUNT);
        if self.write {
            w |= WRITE;
        }
        if self.has_address {
            w |= HAS_ADDRESS;
        }
        if self.info {
            w |= INFO_AREA;
        }
        if self.increment {
            w |= AUTO_INCREMENT;
        }
        w
    }

    /// Data bytes this command moves.
    pub fn data_len(self) -> usize {
        usize::from(self.count) * self.width.bytes()
    }
}

/// One command of a request, with its address and (for a write) its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op<'a> {
    /// The command word.
    pub cmd: Command,
    /// The address, when the command carries one.
    pub address: Option<u16>,
    /// A write's data (`cmd.data_len()` bytes); empty for a read.
    pub data: &'a [u8],
}

/// Why a request could not be decoded to its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// The datagram ends inside a command word, its address or a write's data.
    Truncated {
        /// Byte offset of the command that is cut short.
        at: usize,
        /// Bytes that command needed.
        needed: usize,
        /// Bytes left.
        left: usize,
    },
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Truncated { at, needed, left } => write!(
                f,
                "request cut short at byte {at}: the command needs {needed} bytes, {left} left"
            ),
        }
    }
}

/// Decodes a whole request into its commands, in order. On a malformed tail, returns the commands
/// decoded before it and the error.
pub fn parse(packet: &[u8]) -> (Vec<Op<'_>>, Option<ParseError>) {
    let mut ops = Vec::new();
    let mut at = 0;
    while at < packet.len() {
        let left = packet.len() - at;
        if left < 2 {
            return (
                ops,
                Some(ParseError::Truncated {
                    at,
                    needed: 2,
                    left,
                }),
            );
        }
        let cmd = Command::decode(u16::from_le_bytes([packet[at], packet[at + 1]]));
        let addr_len = if cmd.has_address { 2 } else { 0 };
        let data_len = if cmd.write { cmd.data_len() } else { 0 };
        let needed = 2 + addr_len + data_len;
        if left < needed {
            return (ops, Some(ParseError::Truncated { at, needed, left }));
        }
        let address = cmd
            .has_address
            .then(|| u16::from_le_bytes([packet[at + 2], packet[at + 3]]));
        let data = &packet[at + 2 + addr_len..at + needed];
        ops.push(Op { cmd, address, data });
        at += needed;
    }
    (ops, None)
}

/// Appends one command (word, address, data) to a request being built: the host side, for tests
/// and tools.
pub fn push(request: &mut Vec<u8>, cmd: Command, address: Option<u16>, data: &[u8]) {
    let cmd = Command {
        has_address: address.is_some(),
        ..cmd
    };
    request.extend_from_slice(&cmd.encode().to_le_bytes());
    if let Some(a) = address {
        request.extend_from_slice(&a.to_le_bytes());
    }
    request.extend_from_slice(data);
}

/// A read command of `count` elements of `width` in `space` (auto-increment on).
pub fn read(space: u8, width: Width, count: u8) -> Command {
    Command {
        write: false,
        info: false,
        space,
        width,
        increment: true,
        count,
        has_address: true,
    }
}

/// A write command of `count` elements of `width` in `space` (auto-increment on).
pub fn write(space: u8, width: Width, count: u8) -> Command {
    Command {
        write: true,
        ..read(space, width, count)
    }
}
