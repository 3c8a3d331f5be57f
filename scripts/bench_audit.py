#!/usr/bin/env python3
"""What a live audit costs the clients of a running server (issue 17).

One sealstream server (release binary) with a system account: a file stream is filled with
--fill MiB of 1 KiB messages, then a client measures synchronous JetStream publish latency
(each publish awaits its PubAck) for --secs seconds with no audit, then again while the
server audits its live store (`$SYS.REQ.SERVER.PING.AUDIT`, paced at --pace bytes/s, 0: the
server's default). Printed: p50/p99 in both periods and their ratio, the audit's duration,
bytes read and rate, and its exit code. nats-server (same machine, same fill, `sync_interval:
always`) is measured in the same run for the no-audit latency (it has no audit).

    .venv/bin/python scripts/bench_audit.py [--fill 256] [--secs 10] [--pace 0] [--offline]

With --offline the server is then stopped and `sealctl audit` reads the same store offline
(unpaced): duration and MB/s.

With --rekey the stream's data key is then rotated and its files re-sealed
(`$SYS.REQ.SERVER.PING.REKEY`) while the client keeps publishing to it: the re-sealing's
duration and bytes, and the publish latency meanwhile. SEALSTREAM_BIN / SEALCTL_BIN pick other
binaries (an earlier build, side by side).
"""
import argparse
import asyncio
import json
import os
import subprocess
import tempfile
import time
import urllib.request

import nats

from bench_compare import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
SEALSTREAM = os.environ.get("SEALSTREAM_BIN", os.path.join(TARGET, "release/sealstream-server"))
SEALCTL = os.environ.get("SEALCTL_BIN", os.path.join(TARGET, "release/sealctl"))
NATS_SERVER = os.path.join(ROOT, ".venv/bin/nats-server")

CONF = """
port: {port}
http_port: {http}
jetstream {{ store_dir: "{store}"{sync} }}
accounts {{
  SYS: {{ users: [ {{user: sys, password: sys}} ] }}
  APP: {{ jetstream: enabled, users: [ {{user: app, password: app}} ] }}
}}
system_account: SYS
"""


def start(binary, workdir, always):
    port, http = free_port(), free_port()
    store = os.path.join(workdir, "store")
    conf = os.path.join(workdir, "server.conf")
    with open(conf, "w") as f:
        f.write(CONF.format(port=port, http=http, store=store,
                            sync=", sync_interval: always" if always else ""))
    log = open(os.path.join(workdir, "log"), "w")
    p = subprocess.Popen([binary, "-c", conf], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{http}/healthz", timeout=1)
            return p, port, http, store
        except Exception:
            time.sleep(0.1)
    raise SystemExit(f"{binary} did not start")


async def fill(port, mib):
    nc = await nats.connect(f"nats://app:app@127.0.0.1:{port}")
    js = nc.jetstream()
    await js.add_stream(name="LEDGER", subjects=["ledger.>"])
    n = mib * 1024
    body = os.urandom(512).hex().encode()  # 1 KiB
    window = []
    for i in range(n):
        window.append(asyncio.ensure_future(js.publish(f"ledger.{i % 64}", body)))
        if len(window) >= 256:
            await asyncio.gather(*window)
            window = []
    await asyncio.gather(*window)
    info = await js.stream_info("LEDGER")
    assert info.state.messages == n, (info.state.messages, n)
    await nc.close()


async def latency(port, secs, until=None):
    """Sync publishes for `secs` (or until `until()` is true): latencies in ms."""
    nc = await nats.connect(f"nats://app:app@127.0.0.1:{port}")
    js = nc.jetstream()
    out = []
    end = time.time() + secs
    while time.time() < end if until is None else not until():
        t = time.perf_counter()
        await js.publish("ledger.latency", b"x" * 128)
        out.append((time.perf_counter() - t) * 1000)
    await nc.close()
    return out


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))] if xs else float("nan")


def metric(http, name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{http}/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


async def audited(port, http, secs, pace):
    sysc = await nats.connect(f"nats://sys:sys@127.0.0.1:{port}")
    body = json.dumps({"bytes_per_sec": pace} if pace else {}).encode()
    t0 = time.time()
    req = asyncio.ensure_future(sysc.request("$SYS.REQ.SERVER.PING.AUDIT", body, timeout=3600))
    while metric(http, "sealstream_audit_running") != 1 and not req.done():
        await asyncio.sleep(0.01)
    during = await latency(port, secs, until=req.done)
    answer = json.loads((await req).data)
    took = time.time() - t0
    await sysc.close()
    return during, answer, took


async def resealed(port, http):
    sysc = await nats.connect(f"nats://sys:sys@127.0.0.1:{port}")
    body = json.dumps({"account": "APP", "stream": "LEDGER"}).encode()
    t0 = time.time()
    req = asyncio.ensure_future(sysc.request("$SYS.REQ.SERVER.PING.REKEY", body, timeout=3600))
    during = await latency(port, 3600, until=req.done)
    answer = json.loads((await req).data)
    took = time.time() - t0
    await sysc.close()
    return during, answer, took


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fill", type=int, default=256, help="MiB of 1 KiB messages")
    ap.add_argument("--secs", type=float, default=10)
    ap.add_argument("--pace", type=int, default=0)
    ap.add_argument("--offline", action="store_true")
    ap.add_argument("--rekey", action="store_true")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as root:
        nd = os.path.join(root, "nats")
        os.makedirs(nd)
        p, port, _, _ = start(NATS_SERVER, nd, True)
        try:
            await fill(port, a.fill)
            base = await latency(port, a.secs)
            rows.append(("nats-server (always), no audit", base))
        finally:
            p.terminate()
            p.wait()
        sd = os.path.join(root, "seal")
        os.makedirs(sd)
        p, port, http, store = start(SEALSTREAM, sd, False)
        try:
            await fill(port, a.fill)
            base = await latency(port, a.secs)
            rows.append(("sealstream, no audit", base))
            during, answer, took = await audited(port, http, a.secs, a.pace)
            rows.append(("sealstream, during the live audit", during))
            if a.rekey:
                rekey = await resealed(port, http)
        finally:
            p.terminate()
            p.wait()
        print(f"fill: {a.fill} MiB of 1 KiB messages; sync publishes of 128 B\n")
        print("| server | publishes | p50 ms | p99 ms |")
        print("|---|---|---|---|")
        for name, xs in rows:
            print(f"| {name} | {len(xs)} | {pct(xs, 0.5):.3f} | {pct(xs, 0.99):.3f} |")
        b, d = rows[1][1], rows[2][1]
        print(f"\nduring/no audit: p50 {pct(d, 0.5) / pct(b, 0.5):.2f}x, p99 {pct(d, 0.99) / pct(b, 0.99):.2f}x")
        print(f"sealstream/nats-server no audit: p50 {pct(b, 0.5) / pct(rows[0][1], 0.5):.2f}x")
        data = answer.get("data", {})
        read = data.get("bytes", 0)
        print(f"live audit: {took:.1f} s, store {read / 2**20:.0f} MiB "
              f"({read / 2**20 / took:.1f} MiB/s of store; segments are read twice: decrypted, then searched), "
              f"exit code {0 if not data.get('findings') else 'findings: ' + str(data.get('findings'))}, "
              f"error {answer.get('error')}")
        if a.rekey:
            during, answer, took = rekey
            streams = answer.get("data", {}).get("streams", [])
            print(f"\nre-sealing LEDGER under a new data key: {took:.2f} s, {streams}")
            print(f"publishes meanwhile: {len(during)}, p50 {pct(during, 0.5):.3f} ms, "
                  f"p99 {pct(during, 0.99):.3f} ms, max {max(during) if during else float('nan'):.1f} ms")
        if a.offline:
            t = time.time()
            r = subprocess.run([SEALCTL, "audit", os.path.join(store, "jetstream"), "--json"],
                               capture_output=True, text=True)
            took = time.time() - t
            rep = json.loads(r.stdout)
            print(f"offline audit: {took:.1f} s, {rep['bytes'] / 2**20:.0f} MiB, "
                  f"{rep['bytes'] / 1e6 / took:.0f} MB/s, exit {r.returncode}")


if __name__ == "__main__":
    asyncio.run(main())
