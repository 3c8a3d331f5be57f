#!/usr/bin/env python3
"""Idle cost of many R3 Raft groups on three nodes (issue 15's early check), against nats-server.

sealstream side: three `raft_idle` example processes (src/consensus: openraft groups on the
coalescing transport, in-memory logs), first with 0 groups, then with N; each node hosts every
group and leadership starts spread over the nodes. nats-server side: a three-node JetStream
cluster, first with no stream, then with N R3 file streams (each one Raft group; nats-server
also gives each stream's consumers groups, none here). After the groups have leaders and a
settling pause, CPU (utime+stime from /proc) is sampled over a window and RSS read at its end.
Reported per node: CPU % of one core and RSS; per group: the RSS added over the empty run.

    .venv/bin/python scripts/bench_raft_idle.py [--groups 300] [--window 20]

With --writes N (no idle measurement, no nats-server): the groups keep their logs in each
node's sealed Raft log (`--store`), and once every group has a leader each node commits N
commands of --size bytes to the groups it leads, --inflight at a time. Reported per node:
commits/s, and the fdatasyncs its log made per record it wrote (leader appends and follower
appends of every group together) — the consensus layer alone, before JetStream is on it.
"""
import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

from bench_compare import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RAFT_IDLE = os.path.join(ROOT, "target/release/examples/raft_idle")
NATS_SERVER = os.path.join(ROOT, ".venv/bin/nats-server")
TICK = os.sysconf("SC_CLK_TCK")


def cpu_secs(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def threads(pid):
    return len(os.listdir(f"/proc/{pid}/task"))


def measure(procs, settle, window):
    time.sleep(settle)
    before = [cpu_secs(p.pid) for p in procs]
    time.sleep(window)
    after = [cpu_secs(p.pid) for p in procs]
    cpu = [100.0 * (a - b) / window for a, b in zip(after, before)]
    rss = [rss_kib(p.pid) for p in procs]
    thr = [threads(p.pid) for p in procs]
    return cpu, rss, thr


def stop(procs):
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait()


def run_writes(groups, writes, inflight, size):
    ports = [free_port() for _ in range(3)]
    tmp = tempfile.mkdtemp()
    procs = []
    for i in range(3):
        args = [RAFT_IDLE, "--id", str(i + 1), "--listen", f"127.0.0.1:{ports[i]}",
                "--groups", str(groups), "--ready-file", os.path.join(tmp, f"ready{i}"),
                "--store", os.path.join(tmp, f"store{i}"), "--writes", str(writes),
                "--window", str(inflight), "--size", str(size)]
        for j in range(3):
            if j != i:
                args += ["--peer", f"{j + 1}=127.0.0.1:{ports[j]}"]
        procs.append(subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    deadline = time.monotonic() + 300
    try:
        while not all(os.path.exists(os.path.join(tmp, f"ready{i}")) for i in range(3)):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                sys.exit("raft_idle nodes did not finish their writes")
            time.sleep(0.1)
    finally:
        stop(procs)
    total = 0.0
    for i in range(3):
        fields = dict(f.split("=") for f in open(os.path.join(tmp, f"ready{i}")).read().split()
                      if "=" in f)
        rate = float(fields["per_sec"])
        total += rate
        syncs, records = int(fields["syncs"]), int(fields["records"])
        print(f"node {i + 1}: {rate:.0f} commits/s, {syncs} fdatasyncs for {records} records "
              f"({records / max(syncs, 1):.1f} records per sync)")
    print(f"{groups} R3 groups, {size} B commands, {inflight} in flight per node: "
          f"{total:.0f} commits/s over the cluster")


def run_sealstream(groups, settle, window):
    ports = [free_port() for _ in range(3)]
    tmp = tempfile.mkdtemp()
    procs = []
    for i in range(3):
        args = [RAFT_IDLE, "--id", str(i + 1), "--listen", f"127.0.0.1:{ports[i]}",
                "--groups", str(groups), "--ready-file", os.path.join(tmp, f"ready{i}")]
        for j in range(3):
            if j != i:
                args += ["--peer", f"{j + 1}=127.0.0.1:{ports[j]}"]
        procs.append(subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    deadline = time.monotonic() + 120
    while not all(os.path.exists(os.path.join(tmp, f"ready{i}")) for i in range(3)):
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            stop(procs)
            sys.exit("raft_idle nodes did not get ready")
        time.sleep(0.1)
    leading = [open(os.path.join(tmp, f"ready{i}")).read().split()[1] for i in range(3)]
    try:
        cpu, rss, thr = measure(procs, settle, window)
    finally:
        stop(procs)
    return cpu, rss, thr, "leading " + "/".join(leading)


def wait_port(port, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"nothing listens on {port}")


async def create_streams(port, groups):
    import nats

    async def quiet(_e):
        pass

    wait_port(port)
    nc = await nats.connect(f"nats://127.0.0.1:{port}", error_cb=quiet)
    js = nc.jetstream(timeout=20)
    deadline = time.monotonic() + 60
    while True:  # the meta group needs a leader first
        try:
            await js.account_info()
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)
    for i in range(groups):
        await js.add_stream(name=f"IDLE{i}", subjects=[f"idle.{i}"], num_replicas=3)
    # Wait until every stream answers info with a leader.
    for i in range(groups):
        while True:
            info = await js.stream_info(f"IDLE{i}")
            if info.cluster and info.cluster.leader:
                break
            await asyncio.sleep(0.1)
    await nc.close()


def run_nats(groups, settle, window):
    client = [free_port() for _ in range(3)]
    route = [free_port() for _ in range(3)]
    procs = []
    for i in range(3):
        d = tempfile.mkdtemp()
        conf = os.path.join(d, "n.conf")
        routes = ",".join(f'"nats-route://127.0.0.1:{route[j]}"' for j in range(3) if j != i)
        with open(conf, "w") as f:
            f.write(f"""server_name: n{i + 1}
listen: 127.0.0.1:{client[i]}
jetstream {{ store_dir: "{d}/js" }}
cluster {{ name: IDLE, listen: 127.0.0.1:{route[i]}, routes: [{routes}] }}
""")
        procs.append(subprocess.Popen([NATS_SERVER, "-c", conf], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
    try:
        asyncio.run(create_streams(client[0], groups))
        cpu, rss, thr = measure(procs, settle, window)
    finally:
        stop(procs)
    return cpu, rss, thr, ""


def row(label, cpu, rss, thr, extra):
    print(f"{label:<34} CPU % per node {'/'.join(f'{c:.2f}' for c in cpu):<20} "
          f"RSS KiB {'/'.join(str(r) for r in rss):<24} threads {'/'.join(map(str, thr))}  {extra}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=300)
    ap.add_argument("--window", type=float, default=20.0)
    ap.add_argument("--settle", type=float, default=5.0)
    ap.add_argument("--writes", type=int, default=0)
    ap.add_argument("--inflight", type=int, default=256)
    ap.add_argument("--size", type=int, default=1024)
    a = ap.parse_args()
    if a.writes:
        run_writes(a.groups, a.writes, a.inflight, a.size)
        return
    results = {}
    for name, run in (("sealstream/openraft", run_sealstream), ("nats-server", run_nats)):
        for groups in (0, a.groups):
            cpu, rss, thr, extra = run(groups, a.settle, a.window)
            results[(name, groups)] = (cpu, rss)
            row(f"{name} {groups} groups", cpu, rss, thr, extra)
    print()
    for name in ("sealstream/openraft", "nats-server"):
        cpu0, rss0 = results[(name, 0)]
        cpu1, rss1 = results[(name, a.groups)]
        per_group = [(r1 - r0) / a.groups for r0, r1 in zip(rss0, rss1)]
        print(f"{name:<20} {a.groups} idle R3 groups: CPU {sum(cpu1) / 3:.2f} % of a core per node "
              f"(max {max(cpu1):.2f}), RSS {sum(per_group) / 3:.1f} KiB per group per node "
              f"(max {max(per_group):.1f})")


if __name__ == "__main__":
    main()
