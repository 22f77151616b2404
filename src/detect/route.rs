//! Which interface carries packets to an IPv4 address, and whether the address is directly
//! connected: the kernel's main routing table as `/proc/net/route` prints it (the table of the
//! reader's network namespace: `/proc/net` is `/proc/self/net`).
//!
//! A Mesa Ethernet card (7i96S, 7i76E, …) must be on a directly connected network: hm2_eth talks to
//! it by ARP and one UDP exchange per servo period, and a router in between adds its own latency.
//! [`route_to`] is a pure function over the table text, [`read`] the reader through a [`SysRoot`];
//! both are shared by `rtapi detect --board`, `rtapi tune --board` and anything else that needs
//! "the NIC to the card".
//!
//! The choice is the kernel's for the main table: among the routes that are up and whose
//! destination/mask contains the address, the longest mask wins, then the lowest metric, then the
//! first listed. Policy routing (`ip rule`) and the `local` table are not in `/proc/net/route`; a card
//! is never reached through either.

use super::SysRoot;
use serde::Serialize;
use std::net::Ipv4Addr;

/// `RTF_UP` and `RTF_GATEWAY` of `linux/route.h`.
const RTF_UP: u32 = 0x0001;
const RTF_GATEWAY: u32 = 0x0002;

/// One line of `/proc/net/route`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RouteEntry {
    /// The interface (`eth0`).
    pub interface: String,
    /// The destination network.
    pub destination: Ipv4Addr,
    /// The prefix length of the mask (24 for 255.255.255.0).
    pub prefix_len: u8,
    /// The next hop, when the route goes through a gateway.
    pub gateway: Option<Ipv4Addr>,
    /// The route's metric (lower wins between equal prefixes).
    pub metric: u32,
    #[serde(skip)]
    mask: u32,
    #[serde(skip)]
    flags: u32,
}

impl RouteEntry {
    /// True when the destination is on the link itself (no gateway).
    pub fn is_direct(&self) -> bool {
        self.gateway.is_none()
    }

    fn contains(&self, addr: Ipv4Addr) -> bool {
        u32::from(addr) & self.mask == u32::from(self.destination) & self.mask
    }
}

/// The kernel prints addresses as the hex of the 32-bit word in host order (`0100A8C0` is
/// 192.168.0.1 on a little-endian machine).
fn hex_addr(s: &str) -> Option<u32> {
    let raw = u32::from_str_radix(s, 16).ok()?;
    Some(u32::from_be_bytes(raw.to_ne_bytes()))
}

/// Parses `/proc/net/route` (a header line, then tab-separated `Iface Destination Gateway Flags
/// RefCnt Use Metric Mask …`). Garbled lines are skipped; a mask that is not a prefix is skipped.
pub fn parse_route_table(text: &str) -> Vec<RouteEntry> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 8 {
                return None;
            }
            let destination = hex_addr(f[1])?;
            let gateway = hex_addr(f[2])?;
            let flags = u32::from_str_radix(f[3], 16).ok()?;
            let metric = f[6].parse().ok()?;
            let mask = hex_addr(f[7])?;
            if mask.leading_ones() + mask.trailing_zeros() != 32 {
                return None;
            }
            Some(RouteEntry {
                interface: f[0].to_string(),
                destination: Ipv4Addr::from(destination),
                prefix_len: mask.leading_ones() as u8,
                gateway: (flags & RTF_GATEWAY != 0 || gateway != 0)
                    .then(|| Ipv4Addr::from(gateway)),
                metric,
                mask,
                flags,
            })
        })
        .collect()
}

/// The route the kernel takes to `addr`: longest prefix among the routes that are up, then the
/// lowest metric, then the first listed. `None`: no route at all.
pub fn route_to(table: &[RouteEntry], addr: Ipv4Addr) -> Option<&RouteEntry> {
    table
        .iter()
        .filter(|r| r.flags & RTF_UP != 0 && r.contains(addr))
        .min_by_key(|r| (std::cmp::Reverse(r.prefix_len), r.metric))
}

/// Why there is no directly connected interface for an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteError {
    /// `/proc/net/route` could not be read.
    Unreadable(String),
    /// No route matches the address.
    NoRoute(Ipv4Addr),
    /// The route goes through a gateway.
    ViaGateway(Ipv4Addr, RouteEntry),
}

impl std::fmt::Display for RouteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RouteError::Unreadable(e) => write!(
                f,
                "cannot read the routing table ({e}): the interface to the card is unknown"
            ),
            RouteError::NoRoute(a) => write!(
                f,
                "no route to {a} in this network namespace: no interface has an address on the card's network; give the NIC an address there (Mesa cards default to 192.168.1.121 or 10.10.10.10: e.g. `ip addr add 192.168.1.1/24 dev IF`), or check the card's address"
            ),
            RouteError::ViaGateway(a, r) => write!(
                f,
                "{a} is reached through the gateway {} on {} (route {}/{}): a Mesa card must be on a directly connected network (a NIC of its own with an address in the card's subnet), not behind a router; check the card's address or give the NIC an address on the card's network",
                r.gateway.map_or_else(|| "?".into(), |g| g.to_string()),
                r.interface,
                r.destination,
                r.prefix_len
            ),
        }
    }
}

impl std::error::Error for RouteError {}

/// The directly connected route to `addr`, from the table text: what [`read`] does without reading.
pub fn direct_route(table_text: &str, addr: Ipv4Addr) -> Result<RouteEntry, RouteError> {
    let table = parse_route_table(table_text);
    match route_to(&table, addr) {
        None => Err(RouteError::NoRoute(addr)),
        Some(r) if !r.is_direct() => Err(RouteError::ViaGateway(addr, r.clone())),
        Some(r) => Ok(r.clone()),
    }
}

/// Reads `proc/net/route` under `root` and finds the directly connected route to `addr`.
pub fn read(root: &SysRoot, addr: Ipv4Addr) -> Result<RouteEntry, RouteError> {
    let text = match root.read("proc/net/route") {
        super::sysroot::Reading::Text(t) => t,
        super::sysroot::Reading::Missing => {
            return Err(RouteError::Unreadable("proc/net/route is missing".into()))
        }
        super::sysroot::Reading::Unreadable(e) => return Err(RouteError::Unreadable(e)),
    };
    direct_route(&text, addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As a little-endian machine prints it: default via 192.168.0.1 on eth0, 192.168.0.0/24 on
    /// eth0, 10.10.10.0/24 on enp3s0, 10.10.0.0/16 on wlan0, 10.10.10.0/24 again with a worse metric.
    fn table() -> String {
        let hex = |a: [u8; 4]| format!("{:08X}", u32::from_ne_bytes(a));
        let line = |i: &str, d: [u8; 4], g: [u8; 4], fl: &str, m: u32, mask: [u8; 4]| {
            format!(
                "{i}\t{}\t{}\t{fl}\t0\t0\t{m}\t{}\t0\t0\t0\n",
                hex(d),
                hex(g),
                hex(mask)
            )
        };
        let mut t = String::from(
            "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n",
        );
        t += &line("eth0", [0; 4], [192, 168, 0, 1], "0003", 100, [0; 4]);
        t += &line(
            "eth0",
            [192, 168, 0, 0],
            [0; 4],
            "0001",
            100,
            [255, 255, 255, 0],
        );
        t += &line(
            "enp3s0",
            [10, 10, 10, 0],
            [0; 4],
            "0001",
            0,
            [255, 255, 255, 0],
        );
        t += &line("wlan0", [10, 10, 0, 0], [0; 4], "0001", 0, [255, 255, 0, 0]);
        t += &line(
            "eth1",
            [10, 10, 10, 0],
            [0; 4],
            "0001",
            50,
            [255, 255, 255, 0],
        );
        t += &line("down0", [10, 10, 10, 10], [0; 4], "0000", 0, [255; 4]);
        t += "garbage line\n";
        t
    }

    #[test]
    fn longest_prefix_then_metric_wins_and_down_routes_do_not_count() {
        let r = direct_route(&table(), Ipv4Addr::new(10, 10, 10, 10)).unwrap();
        assert_eq!(r.interface, "enp3s0");
        assert_eq!(r.prefix_len, 24);
        assert_eq!(r.destination, Ipv4Addr::new(10, 10, 10, 0));
        assert!(r.is_direct());
        let r = direct_route(&table(), Ipv4Addr::new(10, 10, 3, 4)).unwrap();
        assert_eq!(r.interface, "wlan0");
        assert_eq!(r.prefix_len, 16);
    }

    #[test]
    fn an_address_behind_the_default_route_is_refused_with_the_gateway() {
        let e = direct_route(&table(), Ipv4Addr::new(8, 8, 8, 8)).unwrap_err();
        let RouteError::ViaGateway(_, r) = &e else {
            panic!("{e:?}")
        };
        assert_eq!(r.gateway, Some(Ipv4Addr::new(192, 168, 0, 1)));
        assert_eq!(r.interface, "eth0");
        assert!(e.to_string().contains("gateway 192.168.0.1 on eth0"), "{e}");
    }

    #[test]
    fn no_matching_route_is_no_route() {
        let t: String = table()
            .lines()
            .filter(|l| !l.starts_with("eth0\t00000000"))
            .map(|l| format!("{l}\n"))
            .collect();
        // Without the default route nothing covers 8.8.8.8.
        let e = direct_route(&t, Ipv4Addr::new(8, 8, 8, 8)).unwrap_err();
        assert_eq!(e, RouteError::NoRoute(Ipv4Addr::new(8, 8, 8, 8)));
        assert_eq!(
            direct_route("", Ipv4Addr::new(1, 2, 3, 4)),
            Err(RouteError::NoRoute(Ipv4Addr::new(1, 2, 3, 4)))
        );
    }
}
