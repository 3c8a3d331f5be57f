#!/usr/bin/env python3
"""R3 JetStream publishing on three nodes, sealstream against nats-server in the same run (issue 15).

Three clusters of three processes on loopback, one after the other: sealstream (release
binary), nats-server 2.15.1 with its defaults (fsync every 2 minutes, acks before fsync) and
nats-server with `sync_interval: always`. On each: an R3 file stream, then with nats-py
(the same client for all) connected to node 1:
  - sync: --sync publishes of --size bytes, each awaiting its PubAck: p50/p99 latency;
  - window: --msgs publishes with --window PubAcks in flight: msgs/s.
Every PubAck's sequence is checked, and the stream's message count at the end.

With --failover N: N times, the stream's leader is killed (SIGKILL) while a client on another
node publishes with a message id every 10 ms (each try waits at most 2 s for its PubAck);
measured is the time from the kill to the first PubAck after it, then the node is started again
and must be back in the stream's group (the leader sees it current) before the next try.
With --catchup MIB: node 3 is stopped, MIB of 1 KiB messages are published, node 3 is started
again, and the time until its own /jsz shows every message is the catch-up (MB/s). With
--catchup-load R as well, R publishes a second go on during the catch-up, which ends once node
3 holds every message acknowledged up to a second before (a follower that needs a new snapshot
after every install never gets there).
With --idle N: N more R3 streams are created (one message each), the cluster is left alone
for 10 s, then each node's CPU time over --idle-secs and its RSS are read from /proc: the idle
cost of N replicated streams per node.
With --rekey MIB (sealstream only: nats-server has no online rekey): an R3 stream of MIB,
then `sealctl store rekey-live --stream` — every replica re-seals its files under a new data
key and rotates the stream's group key — while one client publishes to the stream, each
publish awaiting its PubAck: the rekey's duration and the publishes' p50/p99/max before and
during it; then the nodes are stopped and node 1's store is audited offline (its Raft log's
records included): duration, with SEALCTL_BASE's sealctl as well when given.
With --promote MIB: an R1 stream of MIB is made R3; the answer's time, the time until every
replica holds every message, and the publishes (each awaiting its PubAck) of one client to four
other R1 streams of node 1 until the answer came (p50 and max: whether their store threads
waited for the promoted stream's image).

    .venv/bin/python scripts/bench_r3.py [--size 1024] [--sync 1000] [--msgs 20000] [--window 256]
    .venv/bin/python scripts/bench_r3.py --sync 0 --msgs 0 --failover 20 --catchup 32
    .venv/bin/python scripts/bench_r3.py --sync 0 --msgs 0 --idle 300
    .venv/bin/python scripts/bench_r3.py --sync 0 --msgs 0 --disk 300000
"""
import argparse
import asyncio
import json
import os
import socket
import subprocess
import tempfile
import time
import urllib.request

import nats

from bench_compare import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEALSTREAM = os.environ.get("SEALSTREAM_BIN", os.path.join(ROOT, "target/release/sealstream-server"))
SEALCTL = os.environ.get("SEALCTL_BIN", os.path.join(ROOT, "target/release/sealctl"))
# --rekey: a system account (the rekey request) and an application account.
ACCOUNTS = """accounts {
  SYS: { users: [ {user: sys, password: sys} ] }
  APP: { jetstream: enabled, users: [ {user: app, password: app} ] }
}
system_account: SYS
"""
NATS_SERVER = os.path.join(ROOT, ".venv/bin/nats-server")


class Cluster:
    """Three nodes of one binary; node i can be killed and started again on its config."""

    def __init__(self, binary, workdir, always, accounts=False):
        self.binary, self.workdir = binary, workdir
        self.userinfo = "app:app@" if accounts else ""
        self.cports = [free_port() for _ in range(3)]
        self.mports = [free_port() for _ in range(3)]
        rports = [free_port() for _ in range(3)]
        routes = ", ".join(f'"nats-route://127.0.0.1:{p}"' for p in rports)
        self.confs = []
        for i in range(3):
            store = os.path.join(workdir, f"n{i + 1}")
            sync = ", sync_interval: always" if always else ""
            if binary == SEALSTREAM:  # e.g. "raft_segment_size: 1GB", to see what a setting costs
                extra = os.environ.get("SEALSTREAM_JS_EXTRA")
                sync += f", {extra}" if extra else ""
            conf = os.path.join(workdir, f"n{i + 1}.conf")
            with open(conf, "w") as f:
                f.write(
                    f"server_name: n{i + 1}\nlisten: 127.0.0.1:{self.cports[i]}\n"
                    f"http: 127.0.0.1:{self.mports[i]}\n"
                    f'jetstream {{ store_dir: "{store}" {sync} }}\n'
                    f"cluster {{ name: C1, listen: 127.0.0.1:{rports[i]}, routes: [{routes}] }}\n"
                    + (ACCOUNTS if accounts else "")
                )
            self.confs.append(conf)
        self.procs = [self.spawn(i) for i in range(3)]

    def wait_listening(self, limit=20):
        """Every node accepts clients (a fixed sleep was too short for nats-server now and then)."""
        deadline = time.time() + limit
        for port in self.cports:
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if time.time() > deadline:
                        raise RuntimeError(f"nothing listens on {port}")
                    time.sleep(0.1)
        time.sleep(1)

    def url(self, i):
        return f"nats://{self.userinfo}127.0.0.1:{self.cports[i]}"

    def store(self, i):
        return os.path.join(self.workdir, f"n{i + 1}")

    def spawn(self, i):
        log = open(os.path.join(self.workdir, f"n{i + 1}.log"), "a")
        return subprocess.Popen([self.binary, "-c", self.confs[i]], stdout=log, stderr=log)

    def kill(self, i):
        self.procs[i].kill()
        self.procs[i].wait()

    def restart(self, i):
        self.procs[i] = self.spawn(i)

    def stop_all(self):
        for p in self.procs:
            p.kill()
            p.wait()

    def local_messages(self, i, stream):
        """Messages of `stream` in node i's own replica, from its /jsz."""
        url = f"http://127.0.0.1:{self.mports[i]}/jsz?accounts=true&streams=true"
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                doc = json.load(r)
        except Exception:
            return -1
        for acc in doc.get("account_details") or []:
            for st in acc.get("stream_detail") or []:
                if st.get("name") == stream:
                    return st.get("state", {}).get("messages", 0)
        return -1


async def add_stream(js, name, subject, replicas):
    """Creates a stream, retrying while the cluster is still forming (up to 30 s)."""
    deadline = time.time() + 30
    while True:
        try:
            await js.add_stream(name=name, subjects=[subject], num_replicas=replicas)
            return
        except Exception as e:
            if time.time() > deadline:
                raise RuntimeError(f"no R{replicas} stream {name}: {e}")
            await asyncio.sleep(0.3)


async def create_r3(js):
    await add_stream(js, "R3", "r3.>", 3)


async def stream_leader(js):
    info = await js.stream_info("R3")
    return info.cluster.leader if info.cluster else None


async def failover(cl, args):
    """Kill the leader N times; time from the kill to the next PubAck, from another node."""
    times = []
    payload = os.urandom(args.size)
    seq = 0
    for t in range(args.failover):
        ncs, jss = [], []
        for port in cl.cports:
            nc = await nats.connect(f"nats://127.0.0.1:{port}", connect_timeout=5,
                                    max_reconnect_attempts=0, allow_reconnect=False)
            ncs.append(nc)
            jss.append(nc.jetstream(timeout=2))
        leader = None
        deadline = time.time() + 30
        while leader not in ("n1", "n2", "n3"):
            # A node that just started may not know every peer's name yet (it shows an id).
            if time.time() > deadline:
                raise RuntimeError(f"no stream leader known: {leader}")
            for js in jss:
                try:
                    leader = await stream_leader(js)
                    if leader in ("n1", "n2", "n3"):
                        break
                except Exception:
                    pass
            else:
                await asyncio.sleep(0.2)
        victim = int(leader[1:]) - 1
        other = (victim + 1) % 3
        await ncs[victim].close()
        killed = time.perf_counter()
        cl.kill(victim)
        while True:
            seq += 1
            try:
                await jss[other].publish("r3.f", payload, headers={"Nats-Msg-Id": f"f{t}-{seq}"})
                break
            except Exception:
                await asyncio.sleep(0.01)
            if time.perf_counter() - killed > 30:
                raise RuntimeError("no PubAck 30 s after the leader was killed")
        times.append(time.perf_counter() - killed)
        cl.restart(victim)
        # Back in the group: the new leader sees every replica current.
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                info = await jss[other].stream_info("R3")
                reps = info.cluster.replicas or []
                if info.cluster.leader and len(reps) == 2 and all(r.current for r in reps):
                    break
            except Exception:
                pass
            await asyncio.sleep(0.2)
        for i, nc in enumerate(ncs):
            if i != victim:
                await nc.close()
    times.sort()
    return {
        "failover_p50_s": times[len(times) // 2],
        "failover_p99_s": times[min(len(times) - 1, int(len(times) * 0.99))],
        "failover_max_s": times[-1],
        # Every try, sorted: the tail is what the issue's p99 bound is about.
        "failover_all_s": " ".join(f"{t:.2f}" for t in times),
    }


async def catchup(cl, args):
    """Stop node 3, publish --catchup MiB, start it, time until its replica has them all."""
    cl.kill(2)
    nc = await nats.connect(f"nats://127.0.0.1:{cl.cports[0]}", connect_timeout=5)
    js = nc.jetstream(timeout=10)
    payload = os.urandom(1024)
    n = args.catchup * 1024
    sem = asyncio.Semaphore(256)

    async def one(k):
        # Node 3 may have led the stream: publishes fail until the others elect a leader.
        async with sem:
            for _ in range(600):
                try:
                    await js.publish("r3.c", payload, headers={"Nats-Msg-Id": f"c{k}"})
                    return
                except Exception:
                    await asyncio.sleep(0.05)
            raise RuntimeError("no PubAck for 30 s")

    await asyncio.gather(*(one(k) for k in range(n)))
    total = (await js.stream_info("R3")).state.messages
    # --catchup-load R: R publishes a second keep going on while node 3 catches up, and it has
    # caught up once it holds every message acknowledged up to one second before.
    acked = []
    stop = asyncio.Event()

    async def load():
        k = 0
        while not stop.is_set():
            t = time.perf_counter()
            burst = max(1, args.catchup_load // 20)
            try:
                await asyncio.gather(*(js.publish("r3.c", payload) for _ in range(burst)))
                k += burst
                acked.append((time.perf_counter(), k))
            except Exception:
                pass
            await asyncio.sleep(max(0.0, 0.05 - (time.perf_counter() - t)))

    loader = asyncio.create_task(load()) if args.catchup_load else None
    started = time.perf_counter()
    cl.restart(2)
    try:
        while True:
            want = total
            if acked:
                now = time.perf_counter()
                want += max((k for t, k in acked if t <= now - 1.0), default=0)
            if cl.local_messages(2, "R3") >= want:
                break
            if time.perf_counter() - started > args.catchup_limit:
                raise RuntimeError(f"node 3 did not catch up in {args.catchup_limit} s")
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        if loader:
            await loader
    await nc.close()
    took = time.perf_counter() - started
    out = {"catchup_s": took, "catchup_mb_s": n * 1024 / 1e6 / took}
    if args.catchup_load:
        out["catchup_load_acked"] = acked[-1][1] if acked else 0
    # sealstream says when a follower was sent its leader's snapshot instead of the log.
    with open(os.path.join(cl.workdir, "n3.log"), errors="replace") as f:
        out["by_snapshot"] = float("leader's snapshot" in f.read())
    return out


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))] if xs else float("nan")


async def fill_r3(cl, mib):
    """MIB of 1 KiB messages into the R3 stream through node 1 (256 in flight); the
    connection and its JetStream context."""
    nc = await nats.connect(cl.url(0), connect_timeout=5)
    js = nc.jetstream(timeout=10)
    payload = os.urandom(1024)
    sem = asyncio.Semaphore(256)

    async def one():
        async with sem:
            await js.publish("r3.f", payload)

    await asyncio.gather(*(one() for _ in range(mib * 1024)))
    return nc, js


async def fill_probe(cl, args):
    """--fill-probe MIB of 1 KiB messages into the R3 stream by 256 publishers, each awaiting
    its PubAck (256 in flight), while a probe publishes one at a time: the probe's latency
    shows a group that stalls (no quorum for a while) under a long write, which the fill's
    rate alone hides. Publishers are tasks that loop, not one task per message: creating
    262,144 tasks at once held the client's event loop for seconds, which a probe measured as
    a stall of the server."""
    nc = await nats.connect(cl.url(0), connect_timeout=5)
    js = nc.jetstream(timeout=10)
    payload = os.urandom(1024)
    left = [args.fill_probe * 1024]
    lat = []
    stop = asyncio.Event()

    async def probe():
        while not stop.is_set():
            t = time.perf_counter()
            await js.publish("r3.p", b"probe")
            lat.append((time.perf_counter() - t) * 1000)

    async def publisher():
        while left[0] > 0:
            left[0] -= 1
            await js.publish("r3.f", payload)

    task = asyncio.create_task(probe())
    t = time.perf_counter()
    await asyncio.gather(*(publisher() for _ in range(256)))
    took = time.perf_counter() - t
    stop.set()
    await task
    await nc.close()
    lat.sort()
    return {"fill_s": took, "probe_n": len(lat), "probe_p50_ms": pct(lat, 0.5),
            "probe_p99_ms": pct(lat, 0.99), "probe_max_ms": lat[-1],
            "probe_over_250ms": sum(1 for x in lat if x > 250),
            "probe_over_1s": sum(1 for x in lat if x > 1000)}


async def rekey(cl, args):
    """--rekey MiB in the R3 stream, then rekey-live of it while one client publishes."""
    nc, js = await fill_r3(cl, args.rekey)
    lat = {"before": [], "during": [], "audit": []}
    phase = "before"
    stop = asyncio.Event()

    async def publisher():
        while not stop.is_set():
            t = time.perf_counter()
            await js.publish("r3.p", b"during the rekey")
            lat[phase].append((time.perf_counter() - t) * 1000)

    task = asyncio.create_task(publisher())
    await asyncio.sleep(5)
    phase = "during"
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        SEALCTL, "store", "rekey-live", "--account", "APP", "--stream", "R3",
        "--server", f"nats://127.0.0.1:{cl.cports[0]}", "--user", "sys", "--password", "sys",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    took = time.perf_counter() - started
    text = out.decode() + err.decode()
    # (Builds before stop 38 re-seal the files only: no group-key line.)
    if proc.returncode != 0 or text.count("re-sealed under data key") != 3:
        raise RuntimeError(f"rekey-live: {text}")
    # Then a live audit of every node (its Raft log's records included), at the server's
    # default pace, while the client goes on.
    phase = "audit"
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        SEALCTL, "audit", "--live", "--json",
        *(["--bytes-per-sec", str(args.audit_pace)] if args.audit_pace else []),
        "--server", f"nats://127.0.0.1:{cl.cports[0]}", "--user", "sys", "--password", "sys",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    audited = time.perf_counter() - started
    stop.set()
    await task
    await nc.close()
    live = json.loads(out.decode() or "{}")
    if proc.returncode != 0:
        raise RuntimeError(f"live audit: {out.decode()} {err.decode()}")
    res = {"rekey_s": took, "rekey_mb_s": args.rekey * 1.048576 / took, "live_audit_s": audited,
           "live_audit_raft_records": sum(st.get("raft", {}).get("records", 0)
                                          for st in live["stores"]),
           "group_keys_rotated": text.count("group key rotated")}
    for k, v in lat.items():
        res[f"pub_{k}_n"] = len(v)
        res[f"pub_{k}_p50_ms"] = pct(v, 0.5)
        res[f"pub_{k}_p99_ms"] = pct(v, 0.99)
        res[f"pub_{k}_max_ms"] = max(v) if v else float("nan")
    # Node 1 stopped (cleanly), its store audited offline.
    for p in cl.procs:
        p.terminate()
        p.wait()
    store = cl.store(0)
    for name, ctl in [("audit", SEALCTL), ("audit_base", os.environ.get("SEALCTL_BASE"))]:
        if not ctl:
            continue
        subprocess.run(["sync"], check=True)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        t = time.perf_counter()
        r = subprocess.run([ctl, "audit", os.path.join(store, "jetstream"), "--key-file",
                            os.path.join(store, "jetstream.key"), "--json"],
                           capture_output=True, text=True)
        res[f"{name}_s"] = time.perf_counter() - t
        res[f"{name}_exit"] = r.returncode
        if name == "audit":
            report = json.loads(r.stdout)
            res["audit_raft_records"] = report.get("raft", {}).get("records", -1)
            res["audit_raft_dropped_key_records"] = report.get("raft", {}).get("dropped_key_records", -1)
    res["store_mib"] = du_bytes(store) / 1048576
    return res


async def audit_live(cl, args):
    """--audit-live MIB in the R3 stream, then --audit-rounds times: a quiet window as long as
    the audit before it (30 s the first time) and a live audit, one client publishing all the
    while, each publish awaiting its PubAck. --audit-node names the node audited
    (`$SYS.REQ.SERVER.<id>.AUDIT`; 0: every node at once, `$SYS.REQ.SERVER.PING.AUDIT`;
    with --audit-in-turn, one node after another as `sealctl audit --live` asks them). Each
    publish is filed under what the audited nodes were doing when it was answered (their
    /metrics, read every 50 ms): the p99 of each phase against the quiet windows'."""
    nc, js = await fill_r3(cl, args.audit_live)
    sys_nc = await nats.connect(f"nats://sys:sys@127.0.0.1:{cl.cports[0]}", connect_timeout=5)
    ids = {}
    inbox = sys_nc.new_inbox()
    sub = await sys_nc.subscribe(inbox)
    await sys_nc.publish("$SYS.REQ.SERVER.PING", b"", reply=inbox)
    for _ in range(3):
        m = await sub.next_msg(timeout=5)
        srv = json.loads(m.data)["server"]
        ids[srv["name"]] = srv["id"]
    await sub.unsubscribe()
    audited = [i for i in range(3) if args.audit_node in (0, i + 1)]
    state = {"phase": "audit-other", "auditing": False}
    samples = []  # (phase, ms)
    stop = asyncio.Event()

    async def publisher():
        while not stop.is_set():
            t = time.perf_counter()
            await js.publish("r3.p", b"during the audit")
            samples.append((state["phase"] if state["auditing"] else "quiet",
                            (time.perf_counter() - t) * 1000))

    def phases():
        seen = set()
        for i in audited:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{cl.mports[i]}/metrics", timeout=1) as r:
                    text = r.read().decode()
            except Exception:
                continue
            running = "sealstream_audit_running 1" in text
            if not running:
                continue
            phase = "raft"
            for line in text.splitlines():
                if line.startswith("sealstream_audit_phase_bytes{") and 'which="total"' in line:
                    phase = line.split('phase="')[1].split('"')[0]
            seen.add("raft" if phase == "idle" else phase)
        return "+".join(sorted(seen)) or "audit-other"

    async def poller():
        # Polled in the quiet windows too: the same load on the servers in both.
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            state["phase"] = await loop.run_in_executor(None, phases)
            await asyncio.sleep(0.05)

    task = asyncio.create_task(publisher())
    polling = asyncio.create_task(poller())
    res = {"leader": await stream_leader(js)}
    quiet_s = 30.0
    for rnd in range(args.audit_rounds):
        state["auditing"] = False
        await asyncio.sleep(quiet_s)
        started = time.perf_counter()
        body = json.dumps({"bytes_per_sec": args.audit_pace} if args.audit_pace else {}).encode()
        if args.audit_in_turn:
            # What `sealctl audit --live` does by default: one node after another.
            turns = [(f"$SYS.REQ.SERVER.{ids[f'n{i + 1}']}.AUDIT", 1) for i in audited]
        elif args.audit_node == 0:
            turns = [("$SYS.REQ.SERVER.PING.AUDIT", len(audited))]
        else:
            turns = [(f"$SYS.REQ.SERVER.{ids[f'n{args.audit_node}']}.AUDIT", 1)]
        state["auditing"] = True
        for subject, expected in turns:
            inbox = sys_nc.new_inbox()
            sub = await sys_nc.subscribe(inbox)
            await sys_nc.publish(subject, body, reply=inbox)
            answers = 0
            while answers < expected:
                try:
                    m = await sub.next_msg(timeout=600)
                except nats.errors.TimeoutError:
                    raise RuntimeError("no audit report within 10 minutes")
                answers += 1
                v = json.loads(m.data)
                if "error" in v:
                    raise RuntimeError(f"live audit: {v}")
            await sub.unsubscribe()
        quiet_s = time.perf_counter() - started
        res[f"audit_{rnd + 1}_s"] = quiet_s
    state["auditing"] = False
    await asyncio.sleep(quiet_s)
    stop.set()
    await task
    await polling
    await nc.close()
    await sys_nc.close()
    by = {}
    for ph, ms in samples:
        by.setdefault(ph, []).append(ms)
    q50, q99 = pct(by.get("quiet", []), 0.5), pct(by.get("quiet", []), 0.99)
    audit_all = [ms for ph, ms in samples if ph != "quiet"]
    res.update({"quiet_n": len(by.get("quiet", [])), "quiet_p50_ms": q50, "quiet_p99_ms": q99,
                "audit_n": len(audit_all), "audit_p50_x": pct(audit_all, 0.5) / q50,
                "audit_p99_x": pct(audit_all, 0.99) / q99})
    for ph, v in sorted(by.items()):
        if ph != "quiet":
            res[f"{ph}_n"] = len(v)
            res[f"{ph}_p99_x"] = pct(v, 0.99) / q99
    return res


async def promote(cl, args):
    """An R1 stream of --promote MiB on node 1 made R3: time until the update is answered,
    and until every node's own replica holds every message."""
    nc = await nats.connect(f"nats://127.0.0.1:{cl.cports[0]}", connect_timeout=5)
    js = nc.jetstream(timeout=60)
    await add_stream(js, "P1", "p1.>", 1)
    payload = os.urandom(1024)
    n = args.promote * 1024
    sem = asyncio.Semaphore(256)

    async def one(k):
        async with sem:
            await js.publish("p1.x", payload)

    await asyncio.gather(*(one(k) for k in range(n)))
    info = await js.stream_info("P1")
    total = info.state.messages
    # Other R1 streams of node 1 (store threads take streams round robin: these share them
    # with P1): one publisher, each publish awaiting its PubAck, while P1 is promoted.
    for q in range(4):
        await add_stream(js, f"Q{q}", f"q{q}.>", 1)
    side = []
    promoting = True

    async def side_publisher():
        k = 0
        while promoting:
            t = time.perf_counter()
            await js.publish(f"q{k % 4}.x", b"side")
            side.append((time.perf_counter() - t) * 1000)
            k += 1

    side_task = asyncio.ensure_future(side_publisher())
    await asyncio.sleep(0.5)
    side.clear()
    cfg = info.config
    cfg.num_replicas = 3
    started = time.perf_counter()
    await js.update_stream(cfg)
    answered = time.perf_counter() - started
    promoting = False
    await side_task
    while not all(cl.local_messages(i, "P1") >= total for i in range(3)):
        if time.perf_counter() - started > 180:
            raise RuntimeError("the replicas did not fill in 180 s")
        await asyncio.sleep(0.05)
    whole = time.perf_counter() - started
    # Writes again, acknowledged by the R3 stream.
    ack = await js.publish("p1.x", payload)
    assert ack.seq == total + 1, ack
    await nc.close()
    side.sort()
    return {"promote_answer_s": answered, "promote_all_replicas_s": whole,
            "promote_mb_s": n * 1024 / 1e6 / whole,
            # Other streams' publishes until the promotion was answered.
            "promote_side_publishes": len(side),
            "promote_side_p50_ms": side[len(side) // 2] if side else float("nan"),
            "promote_side_max_ms": side[-1] if side else float("nan")}


async def mirror(cl, args):
    """A stream of --mirror MiB, then a mirror of it (both R3, or with --mirror-replicas 1 an
    R1 origin on node 1 and an R1 mirror on node 2): time until every replica of the mirror
    holds every message."""
    nc = await nats.connect(f"nats://127.0.0.1:{cl.cports[0]}", connect_timeout=5)
    js = nc.jetstream(timeout=30)
    replicas = args.mirror_replicas
    await add_stream(js, "ORIGIN", "origin.>", replicas)
    payload = os.urandom(1024)
    n = args.mirror * 1024
    sem = asyncio.Semaphore(256)

    async def one(k):
        async with sem:
            await js.publish("origin.x", payload)

    await asyncio.gather(*(one(k) for k in range(n)))
    total = (await js.stream_info("ORIGIN")).state.messages
    started = time.perf_counter()
    # R1: the mirror is created through node 2, so it lives there and reads node 1's origin
    # over the cluster.
    nc2 = await nats.connect(f"nats://127.0.0.1:{cl.cports[1]}", connect_timeout=5)
    js2 = nc2.jetstream(timeout=30)
    await add_stream_cfg(js2, name="COPY", mirror={"name": "ORIGIN"}, num_replicas=replicas)
    holders = range(3)
    if replicas == 1:  # nats-server places an R1 stream on any server
        leader = (await js2.stream_info("COPY")).cluster.leader
        holders = [int(leader[1:]) - 1]
    await nc2.close()
    while not all(cl.local_messages(i, "COPY") >= total for i in holders):
        if time.perf_counter() - started > 180:
            raise RuntimeError("the mirror's replicas did not fill in 180 s")
        await asyncio.sleep(0.05)
    took = time.perf_counter() - started
    # Then the mirror's lag: one message at a time into the idle origin, timed until every
    # replica of the mirror holds it (its /jsz read every millisecond).
    lags = []
    for _ in range(20):
        await asyncio.sleep(0.3)
        total += 1
        t = time.perf_counter()
        await js.publish("origin.x", payload)
        while not all(cl.local_messages(i, "COPY") >= total for i in holders):
            if time.perf_counter() - t > 10:
                raise RuntimeError("a message did not reach the mirror in 10 s")
            await asyncio.sleep(0.001)
        lags.append(time.perf_counter() - t)
    lags.sort()
    await nc.close()
    return {"mirror_all_replicas_s": took, "mirror_mb_s": n * 1024 / 1e6 / took,
            "mirror_lag_p50_ms": lags[len(lags) // 2] * 1e3, "mirror_lag_max_ms": lags[-1] * 1e3}


async def gets(cl, args):
    """--gets sequential STREAM.MSG.GET on the R3 stream through node 1 (not direct gets)."""
    nc = await nats.connect(f"nats://127.0.0.1:{cl.cports[0]}", connect_timeout=5)
    js = nc.jetstream(timeout=10)
    payload = os.urandom(args.size)
    for _ in range(100):
        await js.publish("r3.g", payload)
    last = (await js.stream_info("R3")).state.last_seq
    lat = []
    for k in range(args.gets):
        t = time.perf_counter()
        m = await js.get_msg("R3", last - (k % 100))
        lat.append(time.perf_counter() - t)
        assert len(m.data) == args.size
    lat.sort()
    await nc.close()
    return {"get_p50_us": lat[len(lat) // 2] * 1e6, "get_p99_us": lat[int(len(lat) * 0.99)] * 1e6}


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid, field="VmRSS"):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def peak_rss(cl):
    """Each node's peak resident memory (VmHWM) so far, in MiB: what building, sending and
    installing a stream's snapshot cost in memory shows here (--catchup, --mirror, --promote)."""
    return {f"peak_rss_mib_n{i + 1}": rss_kib(p.pid, "VmHWM") / 1024 for i, p in enumerate(cl.procs)}


async def idle(cl, args):
    """N idle R3 streams: each node's CPU over --idle-secs and RSS, after 10 s of quiet."""
    base = [rss_kib(p.pid) for p in cl.procs]
    nc = await nats.connect(f"nats://127.0.0.1:{cl.cports[0]}", connect_timeout=5)
    js = nc.jetstream(timeout=20)
    started = time.perf_counter()
    for k in range(args.idle):
        deadline = time.time() + 30
        while True:
            try:
                await js.add_stream(
                    name=f"I{k}", subjects=[f"idle.{k}"], num_replicas=args.idle_replicas
                )
                break
            except Exception as e:
                if time.time() > deadline:
                    raise RuntimeError(f"stream I{k}: {e}")
                await asyncio.sleep(0.2)
        # A stream just created may not answer yet (nats-server: no responders at first).
        while True:
            try:
                await js.publish(f"idle.{k}", b"x")
                break
            except Exception:
                if time.time() > deadline:
                    raise
                await asyncio.sleep(0.2)
    created = time.perf_counter() - started
    await nc.close()
    await asyncio.sleep(10)
    out = {"create_s": created}
    # --idle-windows W: W windows one after another, each reported (what idling longer costs:
    # memory a group touches a little at a time shows only after minutes). The last window's
    # figures are also reported under the plain names.
    for w in range(args.idle_windows):
        cpu0 = [cpu_seconds(p.pid) for p in cl.procs]
        await asyncio.sleep(args.idle_secs)
        cpu = [(cpu_seconds(p.pid) - c) / args.idle_secs * 100 for p, c in zip(cl.procs, cpu0)]
        rss = [rss_kib(p.pid) for p in cl.procs]
        last = {
            "idle_cpu_pct_node_max": max(cpu),
            "idle_cpu_pct_nodes_sum": sum(cpu),
            "rss_mib_node_max": max(rss) / 1024,
            "rss_kib_per_stream_node_max": max((r - b) / args.idle for r, b in zip(rss, base)),
        }
        if args.idle_windows > 1:
            end = 10 + (w + 1) * args.idle_secs
            print(f"  idle window {w + 1} (to {end:.0f} s after creation): "
                  + "  ".join(f"{k} {v:.2f}" for k, v in last.items()), flush=True)
    out.update(last)
    return out


def du_bytes(path):
    """Bytes of every file under `path`."""
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


async def disk(cl, args):
    """--disk N: N messages (256 in flight) into an R3 stream capped at 10,000 messages; then,
    after 5 s, each node's whole store (sealstream: and its Raft log, `jetstream/raft`)."""
    nc = await nats.connect(f"nats://127.0.0.1:{cl.cports[0]}", connect_timeout=5)
    js = nc.jetstream(timeout=10)
    await add_stream_cfg(js, name="CAPPED", subjects=["capped.>"], num_replicas=3, max_msgs=10_000)
    payload = os.urandom(args.size)
    sent = 0
    while sent < args.disk:
        n = min(256, args.disk - sent)
        await asyncio.gather(*(js.publish("capped.x", payload) for _ in range(n)))
        sent += n
    await nc.close()
    await asyncio.sleep(5)
    stores = [os.path.join(cl.workdir, f"n{i + 1}") for i in range(3)]
    out = {"disk_store_mb_max": max(du_bytes(s) for s in stores) / 1e6}
    rafts = [os.path.join(s, "jetstream", "raft") for s in stores]
    if all(os.path.isdir(r) for r in rafts):
        out["disk_raft_log_mb_max"] = max(du_bytes(r) for r in rafts) / 1e6
    return out


async def add_stream_cfg(js, **cfg):
    """Creates a stream from keyword config, retrying while the cluster is still forming."""
    deadline = time.time() + 30
    while True:
        try:
            await js.add_stream(**cfg)
            return
        except Exception as e:
            if time.time() > deadline:
                raise RuntimeError(f"no stream {cfg.get('name')}: {e}")
            await asyncio.sleep(0.3)


async def measure(port, args, cl):
    nc = await nats.connect(cl.url(0), connect_timeout=5, max_reconnect_attempts=20)
    js = nc.jetstream(timeout=10)
    await create_r3(js)
    payload = os.urandom(args.size)
    for _ in range(50):  # warm-up
        await js.publish("r3.w", payload)
    if args.sync == 0 and args.msgs == 0:
        await nc.close()
        out = {}
        if args.failover:
            out.update(await failover(cl, args))
        if args.catchup:
            out.update(await catchup(cl, args))
        if args.idle:
            out.update(await idle(cl, args))
        if args.promote:
            out.update(await promote(cl, args))
        if args.gets:
            out.update(await gets(cl, args))
        if args.disk:
            out.update(await disk(cl, args))
        if args.mirror:
            out.update(await mirror(cl, args))
        if args.rekey:
            out.update(await rekey(cl, args))
        if args.fill_probe:
            out.update(await fill_probe(cl, args))
        if args.audit_live:
            out.update(await audit_live(cl, args))
        if args.catchup or args.promote or args.mirror:
            out.update(peak_rss(cl))
        return out
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
    out = {"window_msgs_s": rate}
    if lat:
        out["p50_us"] = lat[len(lat) // 2] * 1e6
        out["p99_us"] = lat[int(len(lat) * 0.99)] * 1e6
    return out


def run(name, binary, always, args):
    with tempfile.TemporaryDirectory() as d:
        cl = Cluster(binary, d, always, accounts=bool(args.rekey or args.audit_live))
        try:
            cl.wait_listening()
            return asyncio.run(measure(cl.cports[0], args, cl))
        finally:
            cl.stop_all()
            if os.environ.get("BENCH_KEEP_LOGS"):
                # The nodes' logs, kept for a look at what the run did.
                keep = os.path.join(os.environ["BENCH_KEEP_LOGS"], name)
                os.makedirs(keep, exist_ok=True)
                for f in os.listdir(d):
                    if f.endswith(".log"):
                        with open(os.path.join(d, f), "rb") as src, \
                                open(os.path.join(keep, f), "wb") as dst:
                            dst.write(src.read())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--sync", type=int, default=1000)
    ap.add_argument("--msgs", type=int, default=20000)
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--failover", type=int, default=0)
    ap.add_argument("--catchup", type=int, default=0, help="MiB")
    ap.add_argument("--catchup-load", type=int, default=0,
                    help="publishes a second (1 KiB) going on during --catchup")
    ap.add_argument("--catchup-limit", type=float, default=120.0,
                    help="seconds node 3 may take to catch up before the run fails")
    ap.add_argument("--idle", type=int, default=0, help="idle R3 streams")
    ap.add_argument("--promote", type=int, default=0, help="MiB in an R1 stream made R3")
    ap.add_argument("--rekey", type=int, default=0,
                    help="MiB in the R3 stream, then rekey-live of it (sealstream only)")
    ap.add_argument("--audit-pace", type=int, default=0,
                    help="--rekey's live audit: bytes a second per server (0: the default); "
                         "the three nodes here share one machine's disk and cores")
    ap.add_argument("--fill-probe", type=int, default=0,
                    help="MiB written by 256 publishers while a probe publishes one at a time")
    ap.add_argument("--audit-live", type=int, default=0,
                    help="MiB in the R3 stream, then live audits between quiet windows "
                         "(sealstream only)")
    ap.add_argument("--audit-rounds", type=int, default=3)
    ap.add_argument("--audit-node", type=int, default=0, choices=[0, 1, 2, 3],
                    help="--audit-live: the node audited (0: all three at once)")
    ap.add_argument("--audit-in-turn", action="store_true",
                    help="--audit-live: each round audits node 1, 2 and 3 one after another "
                         "(sealctl audit --live's default)")
    ap.add_argument("--gets", type=int, default=0, help="sequential MSG.GETs on the R3 stream")
    ap.add_argument("--disk", type=int, default=0,
                    help="messages through an R3 stream capped at 10,000: store bytes per node")
    ap.add_argument("--mirror", type=int, default=0,
                    help="MiB in an R3 stream, then an R3 mirror of it: time to copy")
    ap.add_argument("--mirror-replicas", type=int, default=3, choices=[1, 3],
                    help="1: an R1 origin on node 1 and an R1 mirror on node 2")
    ap.add_argument("--idle-secs", type=float, default=10.0)
    ap.add_argument("--idle-windows", type=int, default=1,
                    help="--idle: this many windows of --idle-secs, each reported")
    ap.add_argument("--idle-replicas", type=int, default=3)
    ap.add_argument("--servers", default="sealstream,default,always",
                    help="which of sealstream, default (nats-server), always (nats-server)")
    args = ap.parse_args()
    rows = []
    for r in range(args.rounds):
        for key, name, binary, always in [
            ("sealstream", "sealstream", SEALSTREAM, False),
            ("default", "nats-server default", NATS_SERVER, False),
            ("always", "nats-server always", NATS_SERVER, True),
        ]:
            if key not in args.servers.split(","):
                continue
            m = run(name, binary, always, args)
            rows.append((r, name, m))
            if "p50_us" in m:
                print(f"round {r + 1} {name:22} p50 {m['p50_us']:7.0f} us  p99 {m['p99_us']:7.0f} us  "
                      f"window {m['window_msgs_s']:8.0f} msgs/s", flush=True)
            else:
                print(f"round {r + 1} {name:22} " + "  ".join(
                    f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in m.items()),
                      flush=True)


if __name__ == "__main__":
    main()
