//! The network session (`TraceSession::start_network`) and `trace::network::activity`: a flood of
//! UDP packets through a veth pair of the test's own, sent from one CPU, is seen as `NET_RX`
//! softirq work on that CPU; the in-kernel filters keep nothing but the network path.

mod common;

use rtapi::trace::network::{activity, is_ksoftirqd, NetWork};
use rtapi::trace::{EventKind, TraceSession};

use common::netns;

#[test]
fn a_flood_through_a_veth_is_net_rx_work_on_the_flooding_cpu_and_nothing_else_is_kept() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return skip!(Ci, "tracefs instances and network namespaces need root");
    }
    if !std::path::Path::new("/sys/kernel/tracing/instances").exists() {
        return skip!(Machine, "tracefs is not mounted at /sys/kernel/tracing");
    }
    if let Some(why) = netns::missing() {
        return skip!(Ci, "{why}");
    }
    let link = netns::Link::new("trnet").unwrap_or_else(|e| panic!("test network: {e}"));
    let cpu = 0;
    let session =
        TraceSession::start_network(&[cpu], &format!("rtapi-nettest-{}", std::process::id()))
            .expect("a network trace session");
    let from = rtapi::rt::clock::now().as_nanos() as u64;
    // 300 ms of 1 KiB datagrams from the board's namespace to the host's discard port, sent on
    // CPU 0 (a veth delivers on the sending CPU: its NET_RX runs there, in the sender's context).
    let script = format!(
        "import socket,time\n\
         s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
         end=time.monotonic()+0.3\n\
         n=0\n\
         while time.monotonic()<end:\n\
         \x20   s.sendto(b'x'*1024,('{}',9)); n+=1\n\
         print(n)\n",
        link.host_ip
    );
    let out = link
        .board
        .command("taskset")
        .args(["-c", &cpu.to_string(), "/usr/bin/python3", "-c", &script])
        .output()
        .expect("python3 in the board's namespace");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sent: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let to = rtapi::rt::clock::now().as_nanos() as u64;
    session.stop().unwrap();
    let w = session.read_window(cpu, from, to).unwrap();
    let a = activity(&w.events, from, to);
    eprintln!("sent {sent} datagrams; CPU {cpu}: {:?}", a.cpus.get(&cpu));
    let c = &a.cpus[&cpu];
    assert!(sent >= 100, "only {sent} datagrams sent");
    assert!(
        u64::from(c.net_rx.count) >= sent / 64,
        "{} NET_RX runs for {sent} datagrams",
        c.net_rx.count
    );
    assert!(c.net_rx.ns > 0 && c.net_rx.longest_ns <= c.net_rx.ns);
    assert_eq!(
        a.busiest().map(|b| (b.cpu, b.what)),
        Some((cpu, NetWork::NetRx))
    );
    // The filters: no softirq but NET_RX/NET_TX, no switch that does not involve ksoftirqd.
    for e in &w.events {
        match &e.kind {
            EventKind::SoftirqEntry { vector } | EventKind::SoftirqExit { vector } => {
                assert!(vector == "NET_RX" || vector == "NET_TX", "{e:?}")
            }
            EventKind::Switch { prev, next, .. } => {
                assert!(
                    is_ksoftirqd(&prev.comm) || is_ksoftirqd(&next.comm),
                    "{e:?}"
                )
            }
            EventKind::IrqEntry { .. } | EventKind::IrqExit { .. } => {}
            other => panic!("an event the network session does not enable: {other:?}"),
        }
    }
    drop(session);
    drop(link);
}
