//! Test hosts of their own: network namespaces joined by a bridge, so a test can cut the
//! traffic between two servers (blackhole routes on both sides) while the test process, in
//! the root namespace, still reaches every one of them.
//!
//! Needs root and `ip`; [`Hosts::new`] returns None where they are missing (the caller
//! skips). Everything made is removed on drop, and leftovers of an earlier run with the same
//! id are removed first.

use std::process::Command;

/// `n` hosts `10.123.<id>.2 ..` on a bridge `10.123.<id>.1` in the root namespace.
pub struct Hosts {
    id: u32,
    n: usize,
}

fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

impl Hosts {
    /// Makes the namespaces, or None when this machine does not let us (not root, no `ip`).
    pub fn new(n: usize) -> Option<Self> {
        let id = std::process::id() % 200 + 20;
        let h = Hosts { id, n };
        h.remove();
        let bridge = h.bridge();
        let ok = ip(&["link", "add", &bridge, "type", "bridge"])
            && ip(&["addr", "add", &format!("10.123.{id}.1/24"), "dev", &bridge])
            && ip(&["link", "set", &bridge, "up"])
            && (0..n).all(|i| h.add_host(i));
        // With br_netfilter loaded (Docker loads it), bridged frames pass the host's FORWARD
        // chain, whose policy Docker sets to DROP: let our bridge's own traffic through. Without
        // iptables the hosts could not reach each other there: say so (None) instead.
        let filtered = std::fs::read_to_string("/proc/sys/net/bridge/bridge-nf-call-iptables")
            .is_ok_and(|v| v.trim() == "1");
        let ok = ok && (h.forward_rule("-I") || !filtered);
        if ok {
            Some(h)
        } else {
            h.remove();
            None
        }
    }

    fn bridge(&self) -> String {
        format!("ssb{}", self.id)
    }

    /// Namespace name of host `i`.
    pub fn ns(&self, i: usize) -> String {
        format!("ss{}h{i}", self.id)
    }

    /// Address of host `i`.
    pub fn addr(&self, i: usize) -> String {
        format!("10.123.{}.{}", self.id, i + 2)
    }

    fn add_host(&self, i: usize) -> bool {
        let (ns, outer, inner) = (
            self.ns(i),
            format!("ss{}o{i}", self.id),
            format!("ss{}i{i}", self.id),
        );
        ip(&["netns", "add", &ns])
            && ip(&[
                "link", "add", &outer, "type", "veth", "peer", "name", &inner,
            ])
            && ip(&["link", "set", &outer, "master", &self.bridge()])
            && ip(&["link", "set", &outer, "up"])
            && ip(&["link", "set", &inner, "netns", &ns])
            && ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{}/24", self.addr(i)),
                "dev",
                &inner,
            ])
            && ip(&["-n", &ns, "link", "set", &inner, "up"])
            && ip(&["-n", &ns, "link", "set", "lo", "up"])
    }

    /// Cuts hosts `a` and `b` off from each other (both directions); the others still reach
    /// both.
    pub fn cut(&self, a: usize, b: usize) {
        for (from, to) in [(a, b), (b, a)] {
            let dst = format!("{}/32", self.addr(to));
            assert!(
                ip(&["-n", &self.ns(from), "route", "add", "blackhole", &dst]),
                "blackhole route"
            );
        }
    }

    /// Undoes [`Hosts::cut`].
    pub fn heal(&self, a: usize, b: usize) {
        for (from, to) in [(a, b), (b, a)] {
            let dst = format!("{}/32", self.addr(to));
            ip(&["-n", &self.ns(from), "route", "del", "blackhole", &dst]);
        }
    }

    /// Makes the link between hosts `a` and `b` lossy: each side drops `percent` % of the
    /// packets from the other, at random (iptables' `statistic` match: this kernel has no
    /// netem). TCP retransmits, so the link is slow and jittery rather than broken.
    pub fn lossy(&self, a: usize, b: usize, percent: u32) {
        for (at, from) in [(a, b), (b, a)] {
            assert!(
                self.loss_rule(at, from, percent, "-I"),
                "iptables statistic rule"
            );
        }
    }

    /// Undoes [`Hosts::lossy`].
    pub fn heal_lossy(&self, a: usize, b: usize, percent: u32) {
        for (at, from) in [(a, b), (b, a)] {
            while self.loss_rule(at, from, percent, "-D") {}
        }
    }

    fn loss_rule(&self, at: usize, from: usize, percent: u32, op: &str) -> bool {
        let p = format!("{:.2}", f64::from(percent) / 100.0);
        let src = self.addr(from);
        Command::new("ip")
            .args(["netns", "exec", &self.ns(at), "iptables", op, "INPUT", "-s"])
            .args([src.as_str(), "-m", "statistic", "--mode", "random"])
            .args(["--probability", p.as_str(), "-j", "DROP"])
            .output()
            .is_ok_and(|o| o.status.success())
    }

    /// Makes host `i`'s link slow: its outgoing traffic shaped to `kbit` kbit/s (a token
    /// bucket, `tc tbf`), so what it sends queues up behind the rate.
    pub fn slow(&self, i: usize, kbit: u32) {
        let dev = format!("ss{}i{i}", self.id);
        let ok = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.ns(i),
                "tc",
                "qdisc",
                "add",
                "dev",
                &dev,
            ])
            .args(["root", "tbf", "rate", &format!("{kbit}kbit")])
            .args(["burst", "32kbit", "latency", "500ms"])
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(ok, "tc tbf");
    }

    /// Undoes [`Hosts::slow`].
    pub fn heal_slow(&self, i: usize) {
        let dev = format!("ss{}i{i}", self.id);
        let _ = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.ns(i),
                "tc",
                "qdisc",
                "del",
                "dev",
                &dev,
            ])
            .arg("root")
            .output();
    }

    fn forward_rule(&self, op: &str) -> bool {
        let bridge = self.bridge();
        let mut args = vec![op, "FORWARD"];
        if op == "-I" {
            args.push("1");
        }
        args.extend(["-i", &bridge, "-o", &bridge, "-j", "ACCEPT"]);
        Command::new("iptables")
            .args(&args)
            .output()
            .is_ok_and(|o| o.status.success())
    }

    fn remove(&self) {
        while self.forward_rule("-D") {}
        for i in 0..self.n {
            ip(&["netns", "del", &self.ns(i)]);
            ip(&["link", "del", &format!("ss{}o{i}", self.id)]);
        }
        ip(&["link", "del", &self.bridge()]);
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        self.remove();
    }
}
