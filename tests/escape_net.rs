//! Network escapes with `network: none` (the default): every socket family,
//! UDP, TCP connect and listen on loopback, abstract and pathname Unix
//! sockets to a host listener. Positive controls use `--net unrestricted`
//! and `allow_unix_sockets: true`. Traffic goes to loopback only.
//!
//! Where the run has a network namespace of its own it has its own loopback
//! (`enforcement.loopback`): TCP and UDP sockets exist there, and what they
//! reach is the run itself, never the host's listeners (tests/loopback.rs
//! has the workloads and more escapes); elsewhere no IP socket at all.

mod common;

use common::*;
use std::io::Read;
use std::net::{TcpListener, UdpSocket};
use std::os::unix::net::UnixListener;
use std::time::Duration;

const AF_UNIX: i64 = 1;
const AF_NETLINK: i64 = 16;

#[test]
fn every_socket_family_is_refused_by_default() {
    let sb = Sandbox::new();
    let ops: &[&[&str]] = &[
        &["socket_scan"],
        &["socket", "2", "1"],         // AF_INET TCP
        &["socket", "2", "2"],         // AF_INET UDP
        &["socket", "2", "3", "1"],    // AF_INET raw ICMP
        &["socket", "2", "2", "1"],    // AF_INET ICMP ping socket
        &["socket", "10", "1"],        // AF_INET6 TCP
        &["socket", "10", "2"],        // AF_INET6 UDP
        &["socket", "10", "3", "58"],  // AF_INET6 raw ICMPv6
        &["socket", "2", "1", "262"],  // MPTCP
        &["socket", "2", "5", "132"],  // SCTP
        &["socket", "2", "0x80801"],   // AF_INET TCP|NONBLOCK|CLOEXEC
        &["socket", "17", "3", "768"], // AF_PACKET
        &["socket", "16", "3", "9"],   // NETLINK_AUDIT
        &["socket", "16", "3", "4"],   // NETLINK_SOCK_DIAG
        &["socket", "16", "3", "15"],  // NETLINK_KOBJECT_UEVENT
        &["socket", "40", "1"],        // AF_VSOCK (created, never connected)
        &["socket", "1", "1"],         // AF_UNIX without allow_unix_sockets
        &["socket", "1", "2"],
        &["socketpair"],             // stream pairs always allowed
        &["socket", "16", "3", "0"], // NETLINK_ROUTE: route queries allowed
    ];
    let run = sb.probe(&[], ops);
    run.assert_ran();
    let loopback = run.json()["enforcement"]["loopback"] == true;
    assert_eq!(
        loopback,
        run.json()["enforcement"]["netns"] == true,
        "the run's own loopback comes with its own network namespace{}",
        run.ctx()
    );
    let scan = run.probe(0);
    assert_ok(&scan, &run);
    for pair in scan["value"]["ok"].as_array().cloned().unwrap_or_default() {
        let fam = pair[0].as_i64().unwrap_or(-1);
        // TCP (1) and UDP (2) on the run's own loopback, where it has one.
        let own_loopback = loopback && (fam == 2 || fam == 10) && (pair[1] == 1 || pair[1] == 2);
        assert!(
            fam == AF_NETLINK || own_loopback,
            "socket family {fam} (type {}) was created under network: none{}",
            pair[1],
            run.ctx()
        );
    }
    // TCP and UDP sockets: the run's own loopback where it has a netns.
    let ip = [1, 2, 5, 6, 10];
    for i in 1..=17 {
        if loopback && ip.contains(&i) {
            assert_ok(&run.probe(i), &run);
        } else {
            assert_errno(&run.probe(i), &["EPERM"], &run);
        }
    }
    assert_eq!(
        run.probe(18)["value"],
        "ping",
        "socketpair must work{}",
        run.ctx()
    );
    assert_ok(&run.probe(19), &run);

    // Positive control: on the host the same calls create sockets.
    let host = sb.host_probe(&[&["socket_scan"]]);
    let host_ok = host[0]["value"]["ok"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let has = |f: i64, t: i64| host_ok.iter().any(|p| p[0] == f && p[1] == t);
    assert!(
        has(2, 1) && has(2, 2) && has(10, 1) && has(AF_UNIX, 1),
        "host control: {host_ok:?}"
    );
}

/// A loopback TCP listener and UDP socket on the host.
struct HostPeers {
    tcp: TcpListener,
    udp: UdpSocket,
}

impl HostPeers {
    fn v4() -> HostPeers {
        let tcp = TcpListener::bind("127.0.0.1:0").expect("bind tcp");
        tcp.set_nonblocking(true).unwrap();
        let udp = UdpSocket::bind("127.0.0.1:0").expect("bind udp");
        udp.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        HostPeers { tcp, udp }
    }
    fn v6() -> Option<HostPeers> {
        let tcp = TcpListener::bind("[::1]:0").ok()?;
        tcp.set_nonblocking(true).unwrap();
        let udp = UdpSocket::bind("[::1]:0").ok()?;
        udp.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        Some(HostPeers { tcp, udp })
    }
    fn tcp_port(&self) -> String {
        self.tcp.local_addr().unwrap().port().to_string()
    }
    fn udp_port(&self) -> String {
        self.udp.local_addr().unwrap().port().to_string()
    }
    /// What arrived over TCP (None: no connection).
    fn tcp_received(&self) -> Option<String> {
        let (mut s, _) = self.tcp.accept().ok()?;
        s.set_nonblocking(false).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        let mut buf = String::new();
        let _ = s.read_to_string(&mut buf);
        Some(buf)
    }
    fn udp_received(&self) -> Option<String> {
        let mut buf = [0u8; 64];
        let (n, _) = self.udp.recv_from(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    }
}

fn loopback_case(host: &str, peers: HostPeers) {
    let sb = Sandbox::new();
    let (tp, up) = (peers.tcp_port(), peers.udp_port());
    let ops: &[&[&str]] = &[
        &["tcp_connect", host, &tp, "hello-tcp"],
        &["tcp_listen", host],
        &["udp_send", host, &up, "hello-udp"],
    ];
    let run = sb.probe(&[], ops);
    run.assert_ran();
    if run.json()["enforcement"]["loopback"] == true {
        // The run's own loopback: the host's port is not there (nothing
        // listens on it in the run's namespace), a listener binds in the
        // run's namespace, a datagram goes to the run's own 127.0.0.1.
        assert_errno(&run.probe(0), &["ECONNREFUSED"], &run);
        assert_ok(&run.probe(1), &run);
        assert_ok(&run.probe(2), &run);
    } else {
        for i in 0..3 {
            assert_errno(&run.probe(i), &["EPERM"], &run);
        }
    }
    assert_eq!(
        peers.tcp_received(),
        None,
        "ESCAPE: a TCP connection reached the host{}",
        run.ctx()
    );
    assert_eq!(
        peers.udp_received(),
        None,
        "ESCAPE: a datagram reached the host{}",
        run.ctx()
    );

    // Positive control: --net unrestricted reaches the same listeners.
    let run = sb.probe(&["--net", "unrestricted"], ops);
    run.assert_ran();
    for i in 0..3 {
        assert_ok(&run.probe(i), &run);
    }
    assert_eq!(
        peers.tcp_received().as_deref(),
        Some("hello-tcp"),
        "{}",
        run.ctx()
    );
    assert_eq!(
        peers.udp_received().as_deref(),
        Some("hello-udp"),
        "{}",
        run.ctx()
    );
}

#[test]
fn tcp_and_udp_on_ipv4_loopback_are_refused() {
    loopback_case("127.0.0.1", HostPeers::v4());
}

#[test]
fn tcp_and_udp_on_ipv6_loopback_are_refused() {
    match HostPeers::v6() {
        Some(p) => loopback_case("::1", p),
        None => skip("no IPv6 loopback (::1) on this host"),
    }
}

#[test]
fn unix_sockets_to_host_listeners_are_refused_by_default() {
    let sb = Sandbox::new();
    sb.mkdir("sock");
    let path = sb.path("sock/host.sock");
    let listener = UnixListener::bind(&path).expect("bind unix");
    listener.set_nonblocking(true).unwrap();
    let name = token("abstract");
    let abs = abstract_listener(&name);
    let run = sb.probe(
        &["--allow-write", &sb.p("sock")],
        &[
            &["unix_connect", &path.to_string_lossy(), "hello"],
            &["abstract_connect", &name, "hello"],
            &["socketpair"],
        ],
    );
    run.assert_ran();
    assert_errno(&run.probe(0), &["EPERM"], &run);
    assert_errno(&run.probe(1), &["EPERM"], &run);
    assert_eq!(run.probe(2)["value"], "ping");
    assert!(
        listener.accept().is_err(),
        "ESCAPE: reached the host's pathname socket{}",
        run.ctx()
    );
    assert!(
        abs.accept().is_err(),
        "ESCAPE: reached the host's abstract socket{}",
        run.ctx()
    );
}

fn abstract_listener(name: &str) -> UnixListener {
    use std::os::linux::net::SocketAddrExt;
    let addr =
        std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).expect("abstract addr");
    let l = UnixListener::bind_addr(&addr).expect("bind abstract");
    l.set_nonblocking(true).unwrap();
    l
}

/// Without namespaces at the kernel's own ABI (6+), Landlock's abstract
/// Unix socket scope is the only layer between the run (allowed Unix
/// sockets) and the host's abstract sockets: EPERM, never a connection;
/// and the network guard refuses binding any abstract name (EACCES).
/// allow_unix_sockets without a network namespace where capsule's network
/// guard cannot run (a RuntimeDefault pod: pidfd_getfd needs
/// CAP_SYS_PTRACE): nothing would keep the run from binding the host's
/// abstract names, so the run is refused (exit 125) and says why. The
/// refusal is the protection here; the test checks it and skips the rest.
fn refused_for_the_bind_guard(run: &Run) -> bool {
    if run.code == Some(125) && run.stderr.contains("bind() of abstract Unix socket names") {
        assert!(
            run.stderr.contains("cannot run here"),
            "refused without saying why{}",
            run.ctx()
        );
        skip("allow_unix_sockets without a netns is refused here: capsule's network guard cannot run");
        return true;
    }
    false
}

#[test]
fn the_abstract_socket_scope_holds_without_namespaces() {
    if landlock_abi() < 6 {
        skip("Landlock ABI < 6: no abstract unix socket scope on this kernel");
        return;
    }
    let mut sb = Sandbox::new();
    sb.set_env("CAPSULE_NO_NAMESPACES", "1");
    let name = token("abstract-scope");
    let abs = abstract_listener(&name);
    let inner = token("inner");
    let pol = sb.policy("version: 1\nnetwork:\n  allow_unix_sockets: true\n");
    let run = sb.probe(
        &["--policy", &pol],
        &[
            &["abstract_connect", &name, "hello"],
            &["abstract_selftest", &inner],
        ],
    );
    if refused_for_the_bind_guard(&run) {
        return;
    }
    run.assert_ran();
    assert!(run.json()["enforcement"]["view"].is_null(), "{}", run.ctx());
    if std::env::var_os("CAPSULE_LANDLOCK_ABI_MAX").is_none() {
        assert_errno_exactly(&run.probe(0), &["EPERM"], &run);
    }
    assert!(
        abs.accept().is_err(),
        "ESCAPE: reached the host's abstract socket{}",
        run.ctx()
    );
    // The run's own abstract names too: without a network namespace every
    // abstract name is the host's, so the network guard refuses the bind
    // (a free name is one a host program may connect to: red3 finding 2).
    assert_errno_exactly(&run.probe(1), &["EACCES"], &run);
}

#[test]
fn allow_unix_sockets_reaches_granted_pathname_but_not_host_abstract() {
    let sb = Sandbox::new();
    sb.mkdir("sock");
    let path = sb.path("sock/host.sock");
    let listener = UnixListener::bind(&path).expect("bind unix");
    listener.set_nonblocking(true).unwrap();
    let name = token("abstract");
    let abs = abstract_listener(&name);
    let pol = sb.policy(
        "version: 1\nfilesystem:\n  write: [./sock]\nnetwork:\n  allow_unix_sockets: true\n",
    );
    let inner = token("inner");
    let run = sb.probe(
        &["--policy", &pol],
        &[
            &["socket", "1", "0x80001"], // AF_UNIX stream|CLOEXEC
            &["unix_connect", &path.to_string_lossy(), "hello-unix"],
            &["abstract_connect", &name, "hello"],
            &["abstract_selftest", &inner],
            &["socket", "2", "1"],
        ],
    );
    if refused_for_the_bind_guard(&run) {
        return;
    }
    if landlock_abi() < 6
        && run.code == Some(125)
        && run.stderr.contains("abstract Unix socket isolation")
    {
        // Fail closed: no Landlock scope and (here) no network namespace.
        skip("allow_unix_sockets is refused here (Landlock ABI < 6, no netns), as it must be");
        return;
    }
    run.assert_ran();
    assert_ok(&run.probe(0), &run);
    assert_ok(&run.probe(1), &run);
    let got = listener.accept().ok().map(|(mut s, _)| {
        s.set_nonblocking(false).ok();
        s.set_read_timeout(Some(Duration::from_secs(2))).ok();
        let mut b = String::new();
        let _ = s.read_to_string(&mut b);
        b
    });
    assert_eq!(got.as_deref(), Some("hello-unix"), "{}", run.ctx());
    if landlock_abi() >= 6 || !run.json()["enforcement"]["view"].is_null() {
        // Landlock's abstract-unix-socket scope (EPERM), or the run's own
        // network namespace, which has its own abstract socket namespace
        // (ECONNREFUSED: no such name there): the host's abstract namespace
        // stays out of reach; the sandbox's own works.
        assert_errno(&run.probe(2), &["EPERM", "ECONNREFUSED"], &run);
        assert!(
            abs.accept().is_err(),
            "ESCAPE: reached the host's abstract socket{}",
            run.ctx()
        );
    } else {
        skip_part("Landlock ABI < 6: no abstract unix socket scope on this kernel");
    }
    if run.json()["enforcement"]["view"].is_null() {
        // No network namespace: abstract names are the host's, and the
        // network guard refuses binding one (the run's own included).
        assert_errno_exactly(&run.probe(3), &["EACCES"], &run);
    } else {
        assert_eq!(run.probe(3)["value"], "ping", "{}", run.ctx());
    }
    // allow_unix_sockets opens AF_UNIX only, not IP (beyond the run's own
    // loopback where it has one).
    if run.json()["enforcement"]["loopback"] == true {
        assert_ok(&run.probe(4), &run);
    } else {
        assert_errno(&run.probe(4), &["EPERM"], &run);
    }
}

/// A datagram socket of the host at a pathname (journald's, `/dev/log`,
/// `sd_notify`'s have this shape), bound by the test.
fn host_dgram(path: &std::path::Path) -> std::os::unix::net::UnixDatagram {
    let d = std::os::unix::net::UnixDatagram::bind(path).expect("bind unix datagram");
    d.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    d
}

fn dgram_received(d: &std::os::unix::net::UnixDatagram) -> Option<String> {
    let mut buf = [0u8; 64];
    let n = d.recv(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// `socketpair(AF_UNIX, SOCK_DGRAM)` needs no `socket(AF_UNIX)`, and a
/// datagram pair can be re-aimed with `sendto` at any pathname datagram
/// socket of the host. Without `allow_unix_sockets` only stream and
/// seqpacket pairs exist (with SOCK_NONBLOCK/SOCK_CLOEXEC), in every mode;
/// the datagram never arrives.
#[test]
fn a_datagram_socketpair_cannot_reach_a_host_datagram_socket() {
    let sb = Sandbox::new();
    sb.mkdir("sock");
    let path = sb.path("sock/host.dgram");
    let host = host_dgram(&path);
    let p = path.to_string_lossy().into_owned();
    // The directory is readable in the run (as /run/systemd/journal is in
    // the view): only the socket rules stand between the run and the host's socket.
    let read = ["--allow-read", &sb.p("sock")];
    for net in ["none", "proxy", "unrestricted"] {
        let mut opts: Vec<&str> = read.to_vec();
        opts.extend(["--net", net]);
        if net == "proxy" {
            opts.extend(["--allow-host", "example.invalid"]);
        }
        let ops: &[&[&str]] = &[
            &["dgram_pair_sendto", &p, "escaped"],
            &["dgram_pair_sendto", &p, "escaped", "0x80802"], // DGRAM|NONBLOCK|CLOEXEC
            &["socketpair_type", "1"],                        // SOCK_STREAM
            &["socketpair_type", "0x80005"],                  // SEQPACKET|CLOEXEC
        ];
        let run = sb.probe(&opts, ops);
        run.assert_ran();
        assert_errno(&run.probe(0), &["EPERM"], &run);
        assert_errno(&run.probe(1), &["EPERM"], &run);
        assert_eq!(run.probe(2)["value"], "ping", "{net}{}", run.ctx());
        assert_eq!(run.probe(3)["value"], "ping", "{net}{}", run.ctx());
        assert_eq!(
            dgram_received(&host),
            None,
            "ESCAPE ({net}): a datagram pair reached the host's datagram socket{}",
            run.ctx()
        );
    }

    // Positive control: with allow_unix_sockets the same pair reaches the
    // host's socket (the attack is real; the policy opened AF_UNIX).
    let pol = sb.policy("version: 1\nnetwork:\n  allow_unix_sockets: true\n");
    let run = sb.probe(
        &["--policy", &pol, "--allow-read", &sb.p("sock")],
        &[&["dgram_pair_sendto", &p, "arrived"]],
    );
    if run.code == Some(125) && run.stderr.contains("abstract Unix socket isolation") {
        // allow_unix_sockets without a network namespace needs Landlock ABI 6.
        skip("positive control: allow_unix_sockets is refused here (Landlock ABI < 6, no netns)");
        return;
    }
    if refused_for_the_bind_guard(&run) {
        return;
    }
    run.assert_ran();
    assert_ok(&run.probe(0), &run);
    assert_eq!(
        dgram_received(&host).as_deref(),
        Some("arrived"),
        "{}",
        run.ctx()
    );
}
