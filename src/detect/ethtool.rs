//! The kernel's ethtool ioctl (`SIOCETHTOOL`) for what `rtapi detect --board` and `rtapi tune --board`
//! read and set on the NIC to a Mesa card: interrupt coalescing (`ETHTOOL_GCOALESCE` /
//! `ETHTOOL_SCOALESCE`) and energy-efficient Ethernet (`ETHTOOL_GEEE` / `ETHTOOL_SEEE`).
//!
//! These cannot come from files, so they go through the [`Ethtool`] trait: [`LiveEthtool`] asks
//! the kernel (of the caller's network namespace); [`RecordedEthtool`] reads and writes a recorded
//! reading in a fixture tree (`ethtool/IF.json` under a `--sysroot`), for tests of the report and the
//! plan. [`for_root`] picks: the live one for `/`, the recorded one for any other root.

use super::SysRoot;
use serde::{Deserialize, Serialize};
use std::ffi::c_void;

/// `SIOCETHTOOL` of `linux/sockios.h`.
const SIOCETHTOOL: u64 = 0x8946;
/// The commands of `linux/ethtool.h`.
const ETHTOOL_GDRVINFO: u32 = 0x0000_0003;
const ETHTOOL_GCOALESCE: u32 = 0x0000_000e;
const ETHTOOL_SCOALESCE: u32 = 0x0000_000f;
const ETHTOOL_GEEE: u32 = 0x0000_0044;
const ETHTOOL_SEEE: u32 = 0x0000_0045;

/// `struct ethtool_coalesce` of `linux/ethtool.h`, field for field (after `cmd`), in its order. Every
/// field is a `__u32`; names are ethtool's (`ethtool -c`) with `_` for `-`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Coalesce {
    /// rx-usecs: how long the NIC may delay an RX interrupt after a packet arrived.
    pub rx_usecs: u32,
    /// rx-frames: how many packets it may gather before the RX interrupt.
    pub rx_frames: u32,
    /// rx-usecs-irq: the delay while the IRQ is being serviced.
    pub rx_usecs_irq: u32,
    /// rx-frames-irq.
    pub rx_frames_irq: u32,
    /// tx-usecs.
    pub tx_usecs: u32,
    /// tx-frames.
    pub tx_frames: u32,
    /// tx-usecs-irq.
    pub tx_usecs_irq: u32,
    /// tx-frames-irq.
    pub tx_frames_irq: u32,
    /// stats-block-usecs.
    pub stats_block_usecs: u32,
    /// adaptive-rx: the driver picks the RX delay from the traffic (1 = on).
    pub adaptive_rx: u32,
    /// adaptive-tx.
    pub adaptive_tx: u32,
    /// pkt-rate-low.
    pub pkt_rate_low: u32,
    /// rx-usecs-low.
    pub rx_usecs_low: u32,
    /// rx-frame-low.
    pub rx_frames_low: u32,
    /// tx-usecs-low.
    pub tx_usecs_low: u32,
    /// tx-frame-low.
    pub tx_frames_low: u32,
    /// pkt-rate-high.
    pub pkt_rate_high: u32,
    /// rx-usecs-high.
    pub rx_usecs_high: u32,
    /// rx-frame-high.
    pub rx_frames_high: u32,
    /// tx-usecs-high.
    pub tx_usecs_high: u32,
    /// tx-frame-high.
    pub tx_frames_high: u32,
    /// sample-interval.
    pub rate_sample_interval: u32,
}

/// The wire layout: `cmd` then the 22 fields.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct RawCoalesce {
    cmd: u32,
    fields: [u32; 22],
}

/// `struct ethtool_coalesce` is 23 `__u32`.
const _: () = assert!(std::mem::size_of::<RawCoalesce>() == 92);

impl Coalesce {
    fn to_fields(self) -> [u32; 22] {
        [
            self.rx_usecs,
            self.rx_frames,
            self.rx_usecs_irq,
            self.rx_frames_irq,
            self.tx_usecs,
            self.tx_frames,
            self.tx_usecs_irq,
            self.tx_frames_irq,
            self.stats_block_usecs,
            self.adaptive_rx,
            self.adaptive_tx,
            self.pkt_rate_low,
            self.rx_usecs_low,
            self.rx_frames_low,
            self.tx_usecs_low,
            self.tx_frames_low,
            self.pkt_rate_high,
            self.rx_usecs_high,
            self.rx_frames_high,
            self.tx_usecs_high,
            self.tx_frames_high,
            self.rate_sample_interval,
        ]
    }

    fn from_fields(f: [u32; 22]) -> Coalesce {
        Coalesce {
            rx_usecs: f[0],
            rx_frames: f[1],
            rx_usecs_irq: f[2],
            rx_frames_irq: f[3],
            tx_usecs: f[4],
            tx_frames: f[5],
            tx_usecs_irq: f[6],
            tx_frames_irq: f[7],
            stats_block_usecs: f[8],
            adaptive_rx: f[9],
            adaptive_tx: f[10],
            pkt_rate_low: f[11],
            rx_usecs_low: f[12],
            rx_frames_low: f[13],
            tx_usecs_low: f[14],
            tx_frames_low: f[15],
            pkt_rate_high: f[16],
            rx_usecs_high: f[17],
            rx_frames_high: f[18],
            tx_usecs_high: f[19],
            tx_frames_high: f[20],
            rate_sample_interval: f[21],
        }
    }

    /// The fields `rtapi tune --board` sets, with ethtool's names, their value here and the value
    /// wanted: RX interrupts at once (rx-usecs 0, rx-frames 1 where the driver counts frames), no
    /// adaptive coalescing. Only fields that differ from the wanted value are listed; a frames count
    /// of 0 means the driver does not use it and is left alone.
    pub fn wanted_changes(&self) -> Vec<(&'static str, u32, u32)> {
        let mut out = Vec::new();
        let mut want = |name, now: u32, wanted: u32, applies: bool| {
            if applies && now != wanted {
                out.push((name, now, wanted));
            }
        };
        want("rx-usecs", self.rx_usecs, 0, true);
        want("rx-frames", self.rx_frames, 1, self.rx_frames > 1);
        want("rx-usecs-irq", self.rx_usecs_irq, 0, true);
        want(
            "rx-frames-irq",
            self.rx_frames_irq,
            1,
            self.rx_frames_irq > 1,
        );
        want("adaptive-rx", self.adaptive_rx, 0, true);
        want("adaptive-tx", self.adaptive_tx, 0, true);
        out
    }

    /// This reading with field `name` (ethtool's name) set to `value`; `None` for a name that is not
    /// one of [`Coalesce::wanted_changes`]'s.
    pub fn with(&self, name: &str, value: u32) -> Option<Coalesce> {
        let mut c = *self;
        *match name {
            "rx-usecs" => &mut c.rx_usecs,
            "rx-frames" => &mut c.rx_frames,
            "rx-usecs-irq" => &mut c.rx_usecs_irq,
            "rx-frames-irq" => &mut c.rx_frames_irq,
            "adaptive-rx" => &mut c.adaptive_rx,
            "adaptive-tx" => &mut c.adaptive_tx,
            _ => return None,
        } = value;
        Some(c)
    }
}

/// `struct ethtool_eee` of `linux/ethtool.h` (after `cmd`, without the reserved words).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Eee {
    /// Link modes that support EEE (the legacy 32-bit mask).
    pub supported: u32,
    /// Link modes advertised with EEE.
    pub advertised: u32,
    /// Link modes the partner advertises with EEE.
    pub lp_advertised: u32,
    /// EEE is negotiated and in use on the link now.
    pub eee_active: u32,
    /// EEE is enabled (may be used when both ends agree).
    pub eee_enabled: u32,
    /// The transmitter may enter low-power idle.
    pub tx_lpi_enabled: u32,
    /// µs of idle before the transmitter enters low-power idle.
    pub tx_lpi_timer: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct RawEee {
    cmd: u32,
    fields: [u32; 7],
    reserved: [u32; 2],
}

/// `struct ethtool_eee` is 10 `__u32`.
const _: () = assert!(std::mem::size_of::<RawEee>() == 40);

impl Eee {
    fn to_fields(self) -> [u32; 7] {
        [
            self.supported,
            self.advertised,
            self.lp_advertised,
            self.eee_active,
            self.eee_enabled,
            self.tx_lpi_enabled,
            self.tx_lpi_timer,
        ]
    }

    fn from_fields(f: [u32; 7]) -> Eee {
        Eee {
            supported: f[0],
            advertised: f[1],
            lp_advertised: f[2],
            eee_active: f[3],
            eee_enabled: f[4],
            tx_lpi_enabled: f[5],
            tx_lpi_timer: f[6],
        }
    }
}

/// `struct ethtool_drvinfo` of `linux/ethtool.h`: the driver's name and bus address, then counts.
#[repr(C)]
struct RawDrvinfo {
    cmd: u32,
    driver: [u8; 32],
    version: [u8; 32],
    fw_version: [u8; 32],
    bus_info: [u8; 32],
    erom_version: [u8; 32],
    reserved2: [u8; 12],
    counts: [u32; 5],
}

/// `struct ethtool_drvinfo` is 196 bytes.
const _: () = assert!(std::mem::size_of::<RawDrvinfo>() == 196);

/// `struct ifreq` with `ifr_data`: the name, then the union whose pointer member carries the
/// command's buffer. The union is 24 bytes on 64-bit Linux (`struct ifmap`), 16 on 32-bit: the padding
/// makes this at least as large on both (the kernel copies `sizeof(struct ifreq)`).
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    data: *mut c_void,
    _pad: [u8; 24],
}

const _: () = assert!(std::mem::size_of::<IfReq>() >= 40);
const _: () = assert!(libc::IFNAMSIZ == 16);

/// Why a reading or a setting failed: the errno, as ethtool would say it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EthtoolError {
    /// `EOPNOTSUPP`: the driver does not implement this (or this field).
    NotSupported,
    /// `EINVAL`, `ERANGE`: the driver refused the value.
    Refused(String),
    /// `EPERM`: setting needs CAP_NET_ADMIN.
    NotPermitted,
    /// `ENODEV`: no such interface in this network namespace.
    NoDevice,
    /// Anything else (the errno text), or a bad interface name.
    Other(String),
}

impl std::fmt::Display for EthtoolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EthtoolError::NotSupported => f.write_str("EOPNOTSUPP: the driver does not support it"),
            EthtoolError::Refused(e) => write!(f, "{e}: the driver refused the value"),
            EthtoolError::NotPermitted => f.write_str("EPERM: needs root (CAP_NET_ADMIN)"),
            EthtoolError::NoDevice => {
                f.write_str("ENODEV: no such interface in this network namespace")
            }
            EthtoolError::Other(e) => f.write_str(e),
        }
    }
}

impl EthtoolError {
    fn from_errno(e: nix::errno::Errno) -> EthtoolError {
        use nix::errno::Errno;
        match e {
            Errno::EOPNOTSUPP => EthtoolError::NotSupported,
            Errno::EINVAL | Errno::ERANGE => EthtoolError::Refused(format!("{e:?}")),
            Errno::EPERM | Errno::EACCES => EthtoolError::NotPermitted,
            Errno::ENODEV => EthtoolError::NoDevice,
            e => EthtoolError::Other(format!("{e:?}: {}", e.desc())),
        }
    }
}

/// Reads and sets a NIC's coalescing and EEE.
pub trait Ethtool {
    /// `ETHTOOL_GDRVINFO`: the driver's name (`igb`, `veth`).
    fn driver(&self, interface: &str) -> Result<String, EthtoolError>;
    /// `ETHTOOL_GCOALESCE`.
    fn coalesce(&self, interface: &str) -> Result<Coalesce, EthtoolError>;
    /// `ETHTOOL_SCOALESCE` with every field of `c`.
    fn set_coalesce(&self, interface: &str, c: &Coalesce) -> Result<(), EthtoolError>;
    /// `ETHTOOL_GEEE`.
    fn eee(&self, interface: &str) -> Result<Eee, EthtoolError>;
    /// `ETHTOOL_SEEE` with every field of `e`.
    fn set_eee(&self, interface: &str, e: &Eee) -> Result<(), EthtoolError>;
}

/// The kernel's ethtool ioctl on an `AF_INET` datagram socket, in the caller's network namespace.
pub struct LiveEthtool;

impl LiveEthtool {
    /// One `SIOCETHTOOL` with `buf` (a `Raw*` struct whose first word is the command).
    fn ioctl<T>(interface: &str, buf: &mut T) -> Result<(), EthtoolError> {
        use std::os::fd::AsRawFd;
        let bytes = interface.as_bytes();
        if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
            return Err(EthtoolError::Other(format!(
                "{interface:?} is not an interface name (1 to 15 bytes, no NUL)"
            )));
        }
        let mut req = IfReq {
            name: [0; libc::IFNAMSIZ],
            data: (buf as *mut T).cast(),
            _pad: [0; 24],
        };
        req.name[..bytes.len()].copy_from_slice(bytes);
        let sock = nix::sys::socket::socket(
            nix::sys::socket::AddressFamily::Inet,
            nix::sys::socket::SockType::Datagram,
            nix::sys::socket::SockFlag::SOCK_CLOEXEC,
            None,
        )
        .map_err(EthtoolError::from_errno)?;
        // SAFETY: `req` is a live, properly laid out `struct ifreq` (size asserted above) whose
        // NUL-terminated name fits IFNAMSIZ and whose `ifr_data` points at `buf`, a live `#[repr(C)]`
        // ethtool command struct of the size the kernel copies for its command (asserted above); both
        // outlive the call, and `sock` is an open socket.
        let r = unsafe { libc::ioctl(sock.as_raw_fd(), SIOCETHTOOL as _, &mut req) };
        if r < 0 {
            return Err(EthtoolError::from_errno(nix::errno::Errno::last()));
        }
        Ok(())
    }
}

impl Ethtool for LiveEthtool {
    fn driver(&self, interface: &str) -> Result<String, EthtoolError> {
        let mut raw = RawDrvinfo {
            cmd: ETHTOOL_GDRVINFO,
            driver: [0; 32],
            version: [0; 32],
            fw_version: [0; 32],
            bus_info: [0; 32],
            erom_version: [0; 32],
            reserved2: [0; 12],
            counts: [0; 5],
        };
        Self::ioctl(interface, &mut raw)?;
        let end = raw.driver.iter().position(|&b| b == 0).unwrap_or(32);
        Ok(String::from_utf8_lossy(&raw.driver[..end]).into_owned())
    }

    fn coalesce(&self, interface: &str) -> Result<Coalesce, EthtoolError> {
        let mut raw = RawCoalesce {
            cmd: ETHTOOL_GCOALESCE,
            ..Default::default()
        };
        Self::ioctl(interface, &mut raw)?;
        Ok(Coalesce::from_fields(raw.fields))
    }

    fn set_coalesce(&self, interface: &str, c: &Coalesce) -> Result<(), EthtoolError> {
        let mut raw = RawCoalesce {
            cmd: ETHTOOL_SCOALESCE,
            fields: c.to_fields(),
        };
        Self::ioctl(interface, &mut raw)
    }

    fn eee(&self, interface: &str) -> Result<Eee, EthtoolError> {
        let mut raw = RawEee {
            cmd: ETHTOOL_GEEE,
            ..Default::default()
        };
        Self::ioctl(interface, &mut raw)?;
        Ok(Eee::from_fields(raw.fields))
    }

    fn set_eee(&self, interface: &str, e: &Eee) -> Result<(), EthtoolError> {
        let mut raw = RawEee {
            cmd: ETHTOOL_SEEE,
            fields: e.to_fields(),
            reserved: [0; 2],
        };
        Self::ioctl(interface, &mut raw)
    }
}

/// A recorded reading of one interface (`ethtool/IF.json` in a fixture tree): each part is the
/// reading or the error the driver gave. A fixture that sets `refuse` lists coalescing fields (by
/// ethtool's name) the recorded driver refuses to change (`EINVAL`), as a real driver may.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Recorded {
    /// The driver's name, as `ETHTOOL_GDRVINFO` gives it.
    #[serde(default)]
    pub driver: Option<String>,
    /// The coalescing reading, or its error.
    pub coalesce: Option<Result<Coalesce, EthtoolError>>,
    /// The EEE reading, or its error.
    pub eee: Option<Result<Eee, EthtoolError>>,
    /// Coalescing fields the driver refuses to change.
    #[serde(default)]
    pub refuse: Vec<String>,
}

/// Readings recorded in a fixture tree (`ethtool/IF.json` under the root); settings are written back
/// to the same file, so tune and revert work on the fixture as on a NIC.
pub struct RecordedEthtool {
    root: SysRoot,
}

impl RecordedEthtool {
    /// The recorded readings under `root`.
    pub fn new(root: &SysRoot) -> Self {
        RecordedEthtool { root: root.clone() }
    }

    fn rel(interface: &str) -> String {
        format!("ethtool/{interface}.json")
    }

    fn load(&self, interface: &str) -> Result<Recorded, EthtoolError> {
        if interface.contains('/') || interface.starts_with('.') {
            return Err(EthtoolError::Other(format!(
                "bad interface name {interface:?}"
            )));
        }
        match self.root.read_text(&Self::rel(interface)) {
            None => Err(EthtoolError::NoDevice),
            Some(t) => serde_json::from_str(&t)
                .map_err(|e| EthtoolError::Other(format!("recorded reading: {e}"))),
        }
    }

    fn store(&self, interface: &str, r: &Recorded) -> Result<(), EthtoolError> {
        let text =
            serde_json::to_string_pretty(r).map_err(|e| EthtoolError::Other(e.to_string()))?;
        std::fs::write(self.root.path(&Self::rel(interface)), text)
            .map_err(|e| EthtoolError::Other(e.to_string()))
    }
}

impl Ethtool for RecordedEthtool {
    fn driver(&self, interface: &str) -> Result<String, EthtoolError> {
        self.load(interface)?
            .driver
            .ok_or(EthtoolError::NotSupported)
    }

    fn coalesce(&self, interface: &str) -> Result<Coalesce, EthtoolError> {
        self.load(interface)?
            .coalesce
            .unwrap_or(Err(EthtoolError::NotSupported))
    }

    fn set_coalesce(&self, interface: &str, c: &Coalesce) -> Result<(), EthtoolError> {
        let mut r = self.load(interface)?;
        let now = r
            .coalesce
            .clone()
            .unwrap_or(Err(EthtoolError::NotSupported))?;
        if r.refuse.iter().any(|name| differs(&now, c, name)) {
            return Err(EthtoolError::Refused("EINVAL".into()));
        }
        r.coalesce = Some(Ok(*c));
        self.store(interface, &r)
    }

    fn eee(&self, interface: &str) -> Result<Eee, EthtoolError> {
        self.load(interface)?
            .eee
            .unwrap_or(Err(EthtoolError::NotSupported))
    }

    fn set_eee(&self, interface: &str, e: &Eee) -> Result<(), EthtoolError> {
        let mut r = self.load(interface)?;
        r.eee.clone().unwrap_or(Err(EthtoolError::NotSupported))?;
        r.eee = Some(Ok(*e));
        self.store(interface, &r)
    }
}

/// Whether field `name` differs between `a` and `b`.
fn differs(a: &Coalesce, b: &Coalesce, name: &str) -> bool {
    // Setting the field to the same value in both makes them equal exactly when only it differed;
    // compare the field itself by putting each value into a zeroed struct.
    let pick = |c: &Coalesce| {
        c.to_fields()
            .iter()
            .zip(
                Coalesce::default()
                    .with(name, 1)
                    .unwrap_or_default()
                    .to_fields(),
            )
            .map(|(v, m)| if m == 1 { *v } else { 0 })
            .sum::<u32>()
    };
    pick(a) != pick(b)
}

/// The ethtool to use for `root`: the kernel's for `/`, the recorded readings of a fixture tree for
/// any other root.
pub fn for_root(root: &SysRoot) -> Box<dyn Ethtool> {
    if root.root() == std::path::Path::new("/") {
        Box::new(LiveEthtool)
    } else {
        Box::new(RecordedEthtool::new(root))
    }
}
