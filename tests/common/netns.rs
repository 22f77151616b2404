//! Networks that stay inside the test: two network namespaces of the test's own joined by a veth
//! pair, addresses from 192.0.2.0/24 (TEST-NET-1) only, no default route, nothing configured in the
//! machine's own namespace (the veth pair is made inside the first namespace with its peer put
//! straight into the second). Dropping a [`Link`] (also while a test panics) kills whatever still
//! runs in its namespaces — only processes the test started can be there — and deletes them.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// Every namespace these tests make starts with this.
pub(crate) const PREFIX: &str = "rtapi-test-";

/// Why this machine cannot make test networks, if it cannot (root and iproute2 are needed).
pub(crate) fn missing() -> Option<String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root (ip netns add)".into());
    }
    if !["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"]
        .iter()
        .any(|p| Path::new(p).exists())
    {
        return Some("`ip` (iproute2) is missing".into());
    }
    None
}

fn ip(args: &[&str]) -> Result<Output, String> {
    let o = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if o.status.success() {
        Ok(o)
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        ))
    }
}

/// A network namespace of the test's own, deleted on drop (after killing what still runs in it).
pub(crate) struct NetNs {
    /// `rtapi-test-<tag>-<pid>-<n>`.
    pub(crate) name: String,
}

static SERIAL: AtomicU32 = AtomicU32::new(0);

impl NetNs {
    /// A new, empty namespace with its loopback up.
    pub(crate) fn new(tag: &str) -> Result<NetNs, String> {
        let n = SERIAL.fetch_add(1, Ordering::Relaxed);
        let name = format!("{PREFIX}{tag}-{}-{n}", std::process::id());
        ip(&["netns", "add", &name])?;
        let ns = NetNs { name };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// `ip -n NAME ARGS`.
    pub(crate) fn ip(&self, args: &[&str]) -> Result<Output, String> {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// A command run inside the namespace: `ip netns exec NAME PROGRAM`.
    pub(crate) fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }

    /// The processes in the namespace.
    pub(crate) fn pids(&self) -> Vec<i32> {
        ip(&["netns", "pids", &self.name])
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        // Only the test's own processes can be in its namespace: end them, then the namespace.
        for round in 0..50 {
            let pids = self.pids();
            if pids.is_empty() {
                break;
            }
            let sig = if round < 10 {
                libc::SIGTERM
            } else {
                libc::SIGKILL
            };
            for p in pids {
                // SAFETY: kill(2) with a pid read from the namespace the test made; no memory is
                // involved.
                unsafe { libc::kill(p, sig) };
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        if let Err(e) = ip(&["netns", "del", &self.name]) {
            eprintln!("netns: could not delete {}: {e}", self.name);
        }
    }
}

/// Two namespaces, `host` and `board`, joined by a veth pair with one address each.
pub(crate) struct Link {
    /// LinuxCNC's side.
    pub(crate) host: NetNs,
    /// The card's side.
    pub(crate) board: NetNs,
    /// The host's address (/24).
    pub(crate) host_ip: Ipv4Addr,
    /// The card's address (/24).
    pub(crate) board_ip: Ipv4Addr,
    /// The interface names in their namespaces.
    pub(crate) host_if: &'static str,
    /// The board's interface.
    pub(crate) board_if: &'static str,
}

impl Link {
    /// Makes the pair: addresses 192.0.2.(2k+1) and 192.0.2.(2k+2), different for each link of
    /// this process (a packet that crossed to another test's network would not find its peer).
    pub(crate) fn new(tag: &str) -> Result<Link, String> {
        let host = NetNs::new(&format!("{tag}-h"))?;
        let board = NetNs::new(&format!("{tag}-b"))?;
        let k = SERIAL.fetch_add(1, Ordering::Relaxed) % 120;
        let host_ip = Ipv4Addr::new(192, 0, 2, (2 * k + 1) as u8);
        let board_ip = Ipv4Addr::new(192, 0, 2, (2 * k + 2) as u8);
        let (host_if, board_if) = ("hm2host", "hm2board");
        host.ip(&[
            "link",
            "add",
            host_if,
            "type",
            "veth",
            "peer",
            "name",
            board_if,
            "netns",
            &board.name,
        ])?;
        host.ip(&["addr", "add", &format!("{host_ip}/24"), "dev", host_if])?;
        board.ip(&["addr", "add", &format!("{board_ip}/24"), "dev", board_if])?;
        host.ip(&["link", "set", host_if, "up"])?;
        board.ip(&["link", "set", board_if, "up"])?;
        for ns in [&host, &board] {
            let routes = ns.ip(&["route", "show", "default"])?;
            assert!(
                routes.stdout.iter().all(u8::is_ascii_whitespace),
                "{}: a default route appeared: {}",
                ns.name,
                String::from_utf8_lossy(&routes.stdout)
            );
        }
        Ok(Link {
            host,
            board,
            host_ip,
            board_ip,
            host_if,
            board_if,
        })
    }
}
