#!/usr/bin/env python3
"""R3 JetStream publishing on three nodes, sealstream against nats-server in the same run (issue 15).

Three clusters of three processes on loopback, one after the other: sealstream (release
binary), nats-server 2.15.1 with its defaults (fsync every 2 minutes, acks before fsync) and
nats-server with `sync_interval: always`. On each: an R3 file stream, then with nats-py
(the same client for all) connected to node 1:
  - sync: --sync publishes of --size bytes, each awaiting its PubAck: p50/p99 latency;
  - window: --msgs publishes with --window PubAcks in flight: msgs/s.
Every PubAck's sequence is checked, and the stream's message count at the end.

    .venv/bin/python scripts/bench_r3.py [--size 1024] [--sync 1000] [--msgs 20000] [--window 256]
"""
import argparse
import asyncio
import os
import subprocess
import tempfile
import time

import nats

from bench_compare import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEALSTREAM = os.path.join(ROOT, "target/release/sealstream-server")
NATS_SERVER = os.path.join(ROOT, ".venv/bin/nats-server")


def start_cluster(binary, workdir, always):
    cports = [free_port() for _ in range(3)]
    rports = [free_port() for _ in range(3)]
    procs = []
    routes = ", ".join(f'"nats-route://127.0.0.1:{p}"' for p in rports)
    for i in range(3):
        store = os.path.join(workdir, f"n{i + 1}")
        sync = "sync_interval: always" if always else ""
        conf = os.path.join(workdir, f"n{i + 1}.conf")
        with open(conf, "w") as f:
            f.write(
                f"server_name: n{i + 1}\nlisten: 127.0.0.1:{cports[i]}\n"
                f'jetstream {{ store_dir: "{store}" {sync} }}\n'
                f"cluster {{ name: C1, listen: 127.0.0.1:{rports[i]}, routes: [{routes}] }}\n"
            )
        log = open(os.path.join(workdir, f"n{i + 1}.log"), "w")
        procs.append(subprocess.Popen([binary, "-c", conf], stdout=log, stderr=log))
    return procs, cports


async def create_r3(js):
    deadline = time.time() + 30
    while True:
        try:
            await js.add_stream(name="R3", subjects=["r3.>"], num_replicas=3)
            return
        except Exception as e:
            if time.time() > deadline:
                raise RuntimeError(f"no R3 stream: {e}")
            await asyncio.sleep(0.3)


async def measure(port, args):
    nc = await nats.connect(f"nats://127.0.0.1:{port}", connect_timeout=5, max_reconnect_attempts=20)
    js = nc.jetstream(timeout=10)
    await create_r3(js)
    payload = os.urandom(args.size)
    for _ in range(50):  # warm-up
        await js.publish("r3.w", payload)
    lat = []
    for _ in range(args.sync):
        t = time.perf_counter()
        await js.publish("r3.s", payload)
        lat.append(time.perf_counter() - t)
    lat.sort()
    seqs = []
    sem = asyncio.Semaphore(args.window)

    async def one():
        async with sem:
            ack = await js.publish("r3.a", payload)
            seqs.append(ack.seq)

    t = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(args.msgs)))
    rate = args.msgs / (time.perf_counter() - t)
    first = 50 + args.sync
    assert sorted(seqs) == list(range(first + 1, first + args.msgs + 1)), "PubAck sequences"
    info = await js.stream_info("R3")
    assert info.state.messages == first + args.msgs, info.state
    await nc.close()
    return {
        "p50_us": lat[len(lat) // 2] * 1e6,
        "p99_us": lat[int(len(lat) * 0.99)] * 1e6,
        "window_msgs_s": rate,
    }


def run(name, binary, always, args):
    with tempfile.TemporaryDirectory() as d:
        procs, ports = start_cluster(binary, d, always)
        try:
            time.sleep(2)
            return asyncio.run(measure(ports[0], args))
        finally:
            for p in procs:
                p.kill()
                p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--sync", type=int, default=1000)
    ap.add_argument("--msgs", type=int, default=20000)
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    rows = []
    for r in range(args.rounds):
        for name, binary, always in [
            ("sealstream", SEALSTREAM, False),
            ("nats-server default", NATS_SERVER, False),
            ("nats-server always", NATS_SERVER, True),
        ]:
            m = run(name, binary, always, args)
            rows.append((r, name, m))
            print(f"round {r + 1} {name:22} p50 {m['p50_us']:7.0f} us  p99 {m['p99_us']:7.0f} us  "
                  f"window {m['window_msgs_s']:8.0f} msgs/s", flush=True)


if __name__ == "__main__":
    main()
