#!/usr/bin/env python3
"""Routed core NATS, sealstream against nats-server on this machine (issue 14's measure).

For each server: a two-node cluster on loopback; `sealctl bench` publishes on node 1 and
subscribes on node 2, so every message crosses the route. CPU is both servers' together, per
delivered message. Rounds alternate servers; ratios are taken within a round.

    scripts/bench_routed.py [--rounds 2] [--msgs 1000000] [--tls-routes] [--compression MODE]

With --tls-routes the routes are TLS (`cluster { tls {} }`, one certificate made with openssl,
mutual verification on both servers); clients stay plaintext. With --compression both servers
set `cluster { compression: MODE }` (s2_fast, say). Routes are pooled as configured by default
(pool_size 3 on both servers).
"""
import argparse
import json
import os
import socket
import subprocess
import tempfile
import time
import urllib.request

from bench_compare import make_certs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEALSTREAM = os.path.join(ROOT, "target/release/sealstream-server")
SEALCTL = os.path.join(ROOT, "target/release/sealctl")
NATS_SERVER = os.path.join(ROOT, ".venv/bin/nats-server")

SCENARIOS = [
    ("routed 1:1", 128, []),
    ("routed queue (3)", 128, ["--subs", "3", "--queue", "q"]),
    ("routed 1:1", 1024, []),
    ("routed queue (3)", 1024, ["--subs", "3", "--queue", "q"]),
]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start_pair(binary, route_tls=None, compression=None):
    procs, clients = [], []
    conf = []
    items = []
    if route_tls:
        cert, key, ca = route_tls
        items.append(f'tls {{ cert_file: "{cert}", key_file: "{key}", ca_file: "{ca}" }}')
    if compression:
        items.append(f"compression: {compression}")
    if items:
        path = os.path.join(tempfile.mkdtemp(), "routes.conf")
        with open(path, "w") as f:
            f.write("cluster { " + ", ".join(items) + " }\n")
        conf = ["-c", path]
    seed = free_port()
    for i in range(2):
        client, route, http = free_port(), (seed if i == 0 else free_port()), free_port()
        args = [binary, "-a", "127.0.0.1", "-p", str(client), "-m", str(http), "-n", f"n{i + 1}",
                "--cluster_name", "BENCH", "--cluster", f"nats://127.0.0.1:{route}", *conf]
        if i == 1:
            args += ["--routes", f"nats-route://127.0.0.1:{seed}"]
        procs.append(subprocess.Popen(args, cwd=tempfile.mkdtemp(), stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
        clients.append((client, http))
    deadline = time.time() + 15
    while time.time() < deadline:
        try:
            body = urllib.request.urlopen(f"http://127.0.0.1:{clients[0][1]}/routez").read().decode()
            v = json.loads(body[body.index("{"): body.rindex("}") + 1])
            if v.get("num_routes", 0) >= 1:
                break
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    time.sleep(0.5)
    return procs, [c for c, _ in clients]


def bench(ports, pids, size, extra, msgs):
    out = subprocess.run(
        [SEALCTL, "bench", "-s", f"nats://127.0.0.1:{ports[0]}",
         "--sub-server", f"nats://127.0.0.1:{ports[1]}",
         "--server-pid", str(pids[0]), "--sub-server-pid", str(pids[1]),
         "--msgs", str(msgs), "--size", str(size), "--json", "--no-progress", *extra],
        capture_output=True, text=True, check=True)
    v = json.loads(out.stdout)
    return v["delivered_msgs_per_sec"], v["server_cpu_us_per_msg"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--msgs", type=int, default=1_000_000)
    ap.add_argument("--tls-routes", action="store_true")
    ap.add_argument("--compression", default=None)
    a = ap.parse_args()
    route_tls = make_certs(tempfile.mkdtemp()) if a.tls_routes else None
    for r in range(a.rounds):
        results = {}
        for name, binary in (("sealstream", SEALSTREAM), ("nats-server", NATS_SERVER)):
            procs, ports = start_pair(binary, route_tls, a.compression)
            try:
                for scen, size, extra in SCENARIOS:
                    results[(name, scen, size)] = bench(ports, [p.pid for p in procs], size,
                                                        extra, a.msgs)
            finally:
                for p in procs:
                    p.terminate()
                    p.wait()
        for scen, size, _ in SCENARIOS:
            (st, sc), (nt, nc) = results[("sealstream", scen, size)], results[("nats-server", scen, size)]
            tag = ("tls " if route_tls else "") + (f"{a.compression} " if a.compression else "")
            print(f"round {r + 1}  {tag}{scen:17} {size:5} B  sealstream {st / 1e3:8.0f} k/s  "
                  f"nats-server {nt / 1e3:8.0f} k/s  thr {st / nt:5.2f}x   "
                  f"CPU {sc:.2f}/{nc:.2f} us/msg = {sc / nc:4.2f}x")


if __name__ == "__main__":
    main()
