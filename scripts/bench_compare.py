#!/usr/bin/env python3
"""Side-by-side load test: sealstream-server vs nats-server, same machine, same run.

Starts each server (release build of ours, nats-server from the project's .venv) on a free
port, runs `sealctl bench` for every scenario against each one — alternating which server
goes first — and prints a Markdown table of throughput, server CPU per delivered message and
peak RSS, with sealstream/nats-server ratios. Used to write docs/PERFORMANCE.md.

    cargo build --release && .venv/bin/python scripts/bench_compare.py [--quick] [--tls]

With --tls, both servers also run with the same TLS certificate (made with openssl) and the
1:1 scenarios are measured over TLS too.
"""
import json
import os
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEAL = os.path.join(ROOT, "target/release/sealstream-server")
CTL = os.path.join(ROOT, "target/release/sealctl")
NATS = os.path.join(ROOT, ".venv/bin/nats-server")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_certs(dir):
    def run(*a):
        subprocess.run(a, check=True, capture_output=True)
    run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", f"{dir}/ca.key", "-out", f"{dir}/ca.pem", "-days", "2", "-subj", "/CN=bench-ca")
    run("openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", f"{dir}/server.key", "-out", f"{dir}/server.csr", "-subj", "/CN=localhost")
    with open(f"{dir}/ext.cnf", "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("openssl", "x509", "-req", "-in", f"{dir}/server.csr", "-CA", f"{dir}/ca.pem", "-CAkey", f"{dir}/ca.key",
        "-CAcreateserial", "-out", f"{dir}/server.pem", "-days", "2", "-extfile", f"{dir}/ext.cnf")
    return f"{dir}/server.pem", f"{dir}/server.key", f"{dir}/ca.pem"


def start(binary, tls=None):
    port = free_port()
    extra = ["--tls", "--tlscert", tls[0], "--tlskey", tls[1]] if tls else []
    p = subprocess.Popen([binary, "-a", "127.0.0.1", "-p", str(port), *extra],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return p, port
        except OSError:
            time.sleep(0.05)
    p.kill()
    raise RuntimeError(f"{binary} did not start")


def peak_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def bench(port, pid, args):
    out = subprocess.run([CTL, "--server", f"nats://127.0.0.1:{port}", "bench", *args,
                          "--server-pid", str(pid), "--json"],
                         check=True, capture_output=True, text=True, timeout=300)
    return json.loads(out.stdout)


def scenarios(quick):
    n = 200_000 if quick else 1_000_000
    out = []
    for size in (16, 128, 1024):
        msgs = n if size < 1024 else n // 2
        out.append((f"1 pub -> 1 sub, {size} B", ["--msgs", str(msgs), "--size", str(size)]))
        out.append((f"1 pub -> 4 subs, {size} B", ["--msgs", str(msgs // 4), "--size", str(size), "--subs", "4"]))
        out.append((f"1 pub -> queue of 4, {size} B", ["--msgs", str(msgs), "--size", str(size), "--subs", "4", "--queue", "q"]))
    out.append(("request/reply, 128 B", ["--request", "--msgs", str(5000 if quick else 20000), "--size", "128"]))
    return out


def tls_rows(quick):
    import tempfile
    n = 200_000 if quick else 500_000
    rows = []
    with tempfile.TemporaryDirectory() as d:
        cert, key, ca = make_certs(d)
        for name, binary in (("sealstream", SEAL), ("nats-server", NATS)):
            p, port = start(binary, (cert, key))
            try:
                for size in (128, 1024):
                    r = bench(port, p.pid, ["--msgs", str(n), "--size", str(size), "--tlsca", ca])
                    rows.append((name, size, r))
            finally:
                p.kill()
    return rows


def main():
    quick = "--quick" in sys.argv
    rows = []
    servers = {"sealstream": SEAL, "nats-server": NATS}
    if "--tls" in sys.argv:
        print("| TLS, 1 pub -> 1 sub | msgs/s | server CPU µs/msg |")
        print("|---|---:|---:|")
        for name, size, r in tls_rows(quick):
            print(f"| {name}, {size} B | {r['delivered_msgs_per_sec']:,.0f} | {r['server_cpu_us_per_msg'] or 0:.3f} |")
        print()
    procs = {name: start(b) for name, b in servers.items()}
    try:
        for i, (label, args) in enumerate(scenarios(quick)):
            order = ["sealstream", "nats-server"] if i % 2 == 0 else ["nats-server", "sealstream"]
            res = {}
            for name in order:
                p, port = procs[name]
                res[name] = bench(port, p.pid, args)
            rows.append((label, res))
            print(f"done: {label}", file=sys.stderr)
        rss = {name: peak_rss_kib(p.pid) for name, (p, _) in procs.items()}
    finally:
        for p, _ in procs.values():
            p.kill()
    print("| scenario | sealstream msgs/s | nats-server msgs/s | ratio | sealstream CPU µs/msg | nats-server CPU µs/msg | CPU ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, r in rows:
        s, n = r["sealstream"], r["nats-server"]
        if s.get("latency_us"):
            ls, ln = s["latency_us"], n["latency_us"]
            print(f"| {label} (p50 / p99 µs) | {ls['p50']:.0f} / {ls['p99']:.0f} | {ln['p50']:.0f} / {ln['p99']:.0f} | "
                  f"{ln['p50'] / ls['p50']:.2f}x faster p50 | {s['server_cpu_us_per_msg'] or 0:.2f} | {n['server_cpu_us_per_msg'] or 0:.2f} | "
                  f"{(s['server_cpu_us_per_msg'] or 0) / max(n['server_cpu_us_per_msg'] or 1e-9, 1e-9):.2f} |")
            continue
        sr, nr = s["delivered_msgs_per_sec"], n["delivered_msgs_per_sec"]
        sc, nc = s["server_cpu_us_per_msg"] or 0.0, n["server_cpu_us_per_msg"] or 0.0
        print(f"| {label} | {sr:,.0f} | {nr:,.0f} | {sr / nr:.2f} | {sc:.3f} | {nc:.3f} | {sc / nc if nc else 0:.2f} |")
    print()
    print(f"Peak RSS after the whole run: sealstream {rss['sealstream'] / 1024:.1f} MiB, "
          f"nats-server {rss['nats-server'] / 1024:.1f} MiB "
          f"(ratio {rss['sealstream'] / max(rss['nats-server'], 1):.2f}).")


if __name__ == "__main__":
    main()
