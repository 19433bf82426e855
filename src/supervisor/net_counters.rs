//! How often a run with a network namespace of its own tried to reach the
//! network and failed: the end-of-run line of a run in `network.mode: none`
//! ("the network is off", issue 39), which otherwise shows only as a DNS
//! failure or "Connection refused" in the program's output.
//!
//! The cheapest sound signal is the namespace's own SNMP counters: a
//! connection or a datagram to an address outside the namespace fails with
//! ENETUNREACH and counts `Ip: OutNoRoutes` (`Ip6OutNoRoutes`) — a resolver's
//! query to the host's name server among them; a TCP connection to a port
//! of the run's own loopback where nothing listens counts `Tcp:
//! AttemptFails`; a datagram to a closed port there (a name server on
//! 127.0.0.53) counts `Udp: NoPorts` (`Udp6NoPorts`). The kernel keeps them
//! per namespace, at no cost to the run. In mode none with the run's own
//! loopback (nowhere else: two opens and two reads a run) capsule opens
//! `/proc/PID/net/snmp` and `snmp6` of the run's first process right after
//! the clone (as `ns_hold` opens its namespaces: later init is
//! non-dumpable); an open file of `/proc/net` holds its namespace, so the
//! counters are read after the run, when no process is left in it.
//!
//! Not counted: a run without a network namespace (containers, Ubuntu's
//! AppArmor restriction), where seccomp refuses the IP socket in the kernel
//! without telling capsule (`--explain` then sees a name lookup by the
//! resolver's read of `/etc/resolv.conf`); a connection the run's own
//! loopback accepted. A run that polls its own server until it listens
//! counts its refused tries too: the line says what was tried, not why.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};

/// The run's namespace's counters, opened at the start.
#[derive(Debug)]
pub struct NetCounters {
    snmp: File,
    snmp6: Option<File>,
    base: u64,
}

impl NetCounters {
    /// Open the counters of `pid`'s network namespace (right after the
    /// clone); None where /proc does not give them.
    pub fn open(pid: libc::pid_t) -> Option<NetCounters> {
        let snmp = File::open(format!("/proc/{pid}/net/snmp")).ok()?;
        let snmp6 = File::open(format!("/proc/{pid}/net/snmp6")).ok();
        let mut c = NetCounters {
            snmp,
            snmp6,
            base: 0,
        };
        c.base = c.total()?;
        Some(c)
    }

    /// The failed attempts since [`NetCounters::open`].
    pub fn failed(&self) -> Option<u64> {
        Some(self.total()?.saturating_sub(self.base))
    }

    fn total(&self) -> Option<u64> {
        let v4 = parse_snmp(&read_from_start(&self.snmp)?);
        let v6 = self
            .snmp6
            .as_ref()
            .and_then(read_from_start)
            .map_or(0, |t| parse_snmp6(&t));
        Some(v4.saturating_add(v6))
    }
}

fn read_from_start(mut f: &File) -> Option<String> {
    f.seek(SeekFrom::Start(0)).ok()?;
    let mut s = String::new();
    // Bounded: the files are a few KiB.
    f.take(1 << 16).read_to_string(&mut s).ok()?;
    Some(s)
}

/// `Ip: OutNoRoutes` + `Tcp: AttemptFails` + `Udp: NoPorts` of a
/// `/proc/net/snmp` text (each section is a line of names, then a line of
/// values).
fn parse_snmp(text: &str) -> u64 {
    let lines: Vec<&str> = text.lines().collect();
    let mut total = 0u64;
    for pair in lines.windows(2) {
        let (names, values) = (pair[0], pair[1]);
        let (Some((a, names)), Some((b, values))) = (names.split_once(':'), values.split_once(':'))
        else {
            continue;
        };
        if a != b || names.trim_start().parse::<i64>().is_ok() {
            continue;
        }
        let want = match a {
            "Ip" => "OutNoRoutes",
            "Tcp" => "AttemptFails",
            "Udp" => "NoPorts",
            _ => continue,
        };
        if let Some(i) = names.split_whitespace().position(|n| n == want) {
            if let Some(v) = values
                .split_whitespace()
                .nth(i)
                .and_then(|v| v.parse::<u64>().ok())
            {
                total = total.saturating_add(v);
            }
        }
    }
    total
}

/// `Ip6OutNoRoutes` + `Udp6NoPorts` of a `/proc/net/snmp6` text.
fn parse_snmp6(text: &str) -> u64 {
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let (name, v) = (w.next()?, w.next()?);
            matches!(name, "Ip6OutNoRoutes" | "Udp6NoPorts")
                .then(|| v.parse::<u64>().ok())
                .flatten()
        })
        .fold(0u64, u64::saturating_add)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_counters_are_read_by_name() {
        let snmp = "Ip: Forwarding DefaultTTL InReceives OutNoRoutes\nIp: 2 64 10 3\n\
                    Tcp: RtoAlgorithm ActiveOpens AttemptFails\nTcp: 1 4 2\n\
                    Udp: InDatagrams NoPorts InErrors\nUdp: 0 5 0\n\
                    UdpLite: InDatagrams NoPorts\nUdpLite: 0 9\n";
        assert_eq!(super::parse_snmp(snmp), 3 + 2 + 5);
        let snmp6 = "Ip6InReceives 4\nIp6OutNoRoutes 7\nUdp6NoPorts 1\nUdp6InErrors 9\n";
        assert_eq!(super::parse_snmp6(snmp6), 8);
        assert_eq!(super::parse_snmp("garbage\n"), 0);
    }
}
