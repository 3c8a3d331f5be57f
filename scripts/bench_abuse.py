#!/usr/bin/env python3
"""Abuse scenarios, side by side with nats-server (same machine, same run).

1. Heartbeat flood: a pull consumer, 4 requests `{"batch":1,"expires":60s,"idle_heartbeat":1}`
   (1 ns); bytes the requester receives and server CPU seconds over 5 s.
2. Idle sockets: 50 TCP connections that read INFO and never send CONNECT; how many are still
   open after 5 s.
4. Many streams (`--streams N`, off by default): create N file streams with one message each
   (`--kv`: N KV buckets with one key each, as the clients create them); create rate, server
   threads, peak RSS, and idle CPU over 5 s once settled (12 s later).
5. Stream churn under load (`--churn N`, off by default): one connection keeps a file stream
   busy with acknowledged publishes (200 in flight) while another creates a file stream,
   publishes one message and deletes it, N times; p50/p99 of create and delete.
6. Mirror catch-up (`--mirror N`, off by default): a file stream holding N 1 KiB messages
   (core PUBs, then waited for), then a mirror of it and a source of it created together;
   seconds until each holds all N, and the copy rate.
7. Fast-ingest batch (`--fast N`, off by default): N x 128 B messages as one `allow_batched`
   batch (flow 100, at most two intervals unacknowledged, as nats.js paces it), against the
   same N as acknowledged publishes with 200 in flight; seconds and messages/s of each.
3. Publish flood: one client writes 1 KiB core PUBs (no reply) into a file stream for 8 s as
   fast as the server reads them; then messages sent, messages stored once the stream is
   quiet, and the server's peak RSS.

Usage: scripts/bench_abuse.py [--sealstream target/release/sealstream-server]
                              [--nats .venv/bin/nats-server]
"""

import argparse
import json
import os
import re
import socket
import subprocess
import tempfile
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start(binary, store):
    port = free_port()
    p = subprocess.Popen(
        [binary, "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", store],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return p, port
        except OSError:
            time.sleep(0.05)
    p.kill()
    raise RuntimeError(f"{binary} did not start")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def client(port):
    s = socket.create_connection(("127.0.0.1", port))
    s.recv(4096)
    s.sendall(b'CONNECT {"verbose":false,"headers":true,"protocol":1}\r\nPING\r\n')
    buf = b""
    while b"PONG" not in buf:
        buf += s.recv(4096)
    return s


SIDS = iter(range(100, 1 << 30))


def request(s, subject, body, inbox, timeout=None):
    """One request; with `timeout`, an unanswered one returns what arrived (b"" at worst)."""
    sid = next(SIDS)
    s.sendall(f"SUB {inbox} {sid}\r\nUNSUB {sid} 1\r\nPUB {subject} {inbox} {len(body)}\r\n{body}\r\n".encode())
    buf = b""
    s.settimeout(timeout)
    try:
        while not buf.endswith(b"}\r\n"):
            buf += s.recv(65536)
    except socket.timeout:
        pass
    finally:
        s.settimeout(None)
    return buf


def heartbeat_flood(pid, port, seconds=5):
    s = client(port)
    request(s, "$JS.API.STREAM.CREATE.HB", json.dumps({"name": "HB", "subjects": ["hb.>"]}), "_INBOX.a")
    request(
        s,
        "$JS.API.CONSUMER.CREATE.HB.w",
        json.dumps({"stream_name": "HB", "config": {"durable_name": "w", "ack_policy": "explicit"}}),
        "_INBOX.b",
    )
    s.sendall(b"SUB _INBOX.hb.> 7\r\n")
    body = b'{"batch":1,"expires":60000000000,"idle_heartbeat":1}'
    for i in range(4):
        s.sendall(b"PUB $JS.API.CONSUMER.MSG.NEXT.HB.w _INBOX.hb.%d %d\r\n%s\r\n" % (i, len(body), body))
    cpu0 = cpu_seconds(pid)
    s.settimeout(0.2)
    got = 0
    end = time.time() + seconds
    while time.time() < end:
        try:
            got += len(s.recv(1 << 20))
        except socket.timeout:
            pass
    cpu = cpu_seconds(pid) - cpu0
    s.close()
    return got, cpu


def idle_sockets(port, n=50, seconds=5):
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.recv(4096)
        s.setblocking(False)
        socks.append(s)
    time.sleep(seconds)
    open_ = 0
    for s in socks:
        try:
            data = s.recv(4096)
            # Closed (EOF), or told why just before the close: not open.
            if data and b"-ERR" not in data:
                open_ += 1
        except BlockingIOError:
            open_ += 1
        except OSError:
            pass
        finally:
            s.close()
    return open_


def peak_rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def flood(pid, port, seconds=8):
    s = client(port)
    request(s, "$JS.API.STREAM.CREATE.FLOOD", json.dumps({"name": "FLOOD", "subjects": ["flood.>"]}), "_INBOX.f")
    w = client(port)
    frame = b"PUB flood.x 1024\r\n" + b"x" * 1024 + b"\r\n"
    batch = frame * 64
    sent = 0
    end = time.time() + seconds
    while time.time() < end:
        w.sendall(batch)
        sent += 64
    w.sendall(b"PING\r\n")
    w.settimeout(120)
    buf = b""
    while b"PONG" not in buf:
        buf += w.recv(4096)
    stored, last, quiet = 0, -1, 0
    while quiet < 10:
        info = request(s, "$JS.API.STREAM.INFO.FLOOD", "", "_INBOX.i%d" % quiet)
        body = info[info.rindex(b"MSG ") :].split(b"\r\n", 1)[1]
        stored = json.loads(body[: body.rindex(b"}") + 1])["state"]["messages"]
        quiet = quiet + 1 if stored == last else 0
        last = stored
        time.sleep(0.2)
    return sent, stored, peak_rss_mib(pid)


def info_state(s, stream, inbox):
    info = request(s, f"$JS.API.STREAM.INFO.{stream}", "", inbox)
    body = info[info.rindex(b"MSG ") :].split(b"\r\n", 1)[1]
    return json.loads(body[: body.rindex(b"}") + 1])["state"]


def wait_messages(s, stream, n, limit=300):
    deadline = time.time() + limit
    k = 0
    while time.time() < deadline:
        k += 1
        if info_state(s, stream, "_INBOX.w%d" % k)["messages"] >= n:
            return True
        time.sleep(0.01)
    return False


def mirror_catch_up(port, n):
    s = client(port)
    request(s, "$JS.API.STREAM.CREATE.ORIGIN", json.dumps({"name": "ORIGIN", "subjects": ["origin.>"]}), "_INBOX.o")
    w = client(port)
    frame = b"PUB origin.x 1024\r\n" + b"x" * 1024 + b"\r\n"
    for _ in range(n // 64):
        w.sendall(frame * 64)
    w.sendall(frame * (n % 64))
    if not wait_messages(s, "ORIGIN", n):
        raise RuntimeError("origin never held every message")
    t0 = time.time()
    request(s, "$JS.API.STREAM.CREATE.M", json.dumps({"name": "M", "mirror": {"name": "ORIGIN"}}), "_INBOX.m")
    request(s, "$JS.API.STREAM.CREATE.S", json.dumps({"name": "S", "sources": [{"name": "ORIGIN"}]}), "_INBOX.s")
    done = {}
    while len(done) < 2 and time.time() - t0 < 300:
        for name in ("M", "S"):
            if name not in done and info_state(s, name, "_INBOX.c" + name)["messages"] >= n:
                done[name] = time.time() - t0
        time.sleep(0.01)
    return done.get("M", float("inf")), done.get("S", float("inf"))


def proc_field(pid, name):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(name + ":"):
                return int(line.split()[1])
    return 0


def kv_config(bucket):
    """A bucket's stream as the KV clients create it (history 1, rollups, direct gets)."""
    return {
        "name": f"KV_{bucket}",
        "subjects": [f"$KV.{bucket}.>"],
        "max_msgs_per_subject": 1,
        "discard": "new",
        "allow_rollup_hdrs": True,
        "deny_delete": True,
        "allow_direct": True,
        "max_msg_size": -1,
        "num_replicas": 1,
    }


def many_streams(pid, port, n, kv=False):
    s = client(port)
    t0 = time.time()
    failed = 0
    for i in range(n):
        if kv:
            cfg = kv_config(f"B{i}")
            r1 = request(s, f"$JS.API.STREAM.CREATE.KV_B{i}", json.dumps(cfg), f"_INBOX.c{i}", 10)
            r2 = request(s, f"$KV.B{i}.key", "x", f"_INBOX.p{i}", 10)
        else:
            cfg = json.dumps({"name": f"S{i}", "subjects": [f"many.{i}"]})
            r1 = request(s, f"$JS.API.STREAM.CREATE.S{i}", cfg, f"_INBOX.c{i}", 10)
            r2 = request(s, f"many.{i}", "x", f"_INBOX.p{i}", 10)
        failed += any(b'"error"' in r or not r.endswith(b"}\r\n") for r in (r1, r2))
    rate = n / (time.time() - t0)
    threads = proc_field(pid, "Threads")
    time.sleep(12)  # let one-time housekeeping (snapshots, checkpoints) settle
    cpu0 = cpu_seconds(pid)
    time.sleep(5)
    idle = cpu_seconds(pid) - cpu0
    if failed:
        print(f"  ({failed} of {n} creates or publishes answered with an error or not within 10 s)")
    return rate, threads, proc_field(pid, "VmHWM") / 1024, idle


def churn(port, n):
    import threading
    stop = threading.Event()
    busy = client(port)
    request(busy, "$JS.API.STREAM.CREATE.BUSY", json.dumps({"name": "BUSY", "subjects": ["busy"]}), "_INBOX.busy", 10)
    acked = [0]

    def load():
        busy.sendall(b"SUB _INBOX.acks 1\r\n")
        burst = b"PUB busy _INBOX.acks 64\r\n" + b"x" * 64 + b"\r\n"
        busy.settimeout(10)
        while not stop.is_set():
            busy.sendall(burst * 200)
            got, buf = 0, b""
            while got < 200:
                chunk = busy.recv(65536)
                if not chunk:
                    return
                buf += chunk
                got = buf.count(b"MSG _INBOX.acks")
            acked[0] += got

    t = threading.Thread(target=load, daemon=True)
    t.start()
    time.sleep(0.5)
    s = client(port)
    creates, deletes, failed = [], [], 0
    for i in range(n):
        cfg = json.dumps({"name": f"C{i}", "subjects": [f"churn.{i}"]})
        t0 = time.perf_counter()
        r1 = request(s, f"$JS.API.STREAM.CREATE.C{i}", cfg, f"_INBOX.c{i}", 10)
        t1 = time.perf_counter()
        r2 = request(s, f"churn.{i}", "x", f"_INBOX.p{i}", 10)
        t2 = time.perf_counter()
        r3 = request(s, f"$JS.API.STREAM.DELETE.C{i}", "", f"_INBOX.d{i}", 10)
        t3 = time.perf_counter()
        creates.append(t1 - t0)
        deletes.append(t3 - t2)
        failed += any(b'"error"' in r or not r.endswith(b"}\r\n") for r in (r1, r2, r3))
    stop.set()
    t.join(15)
    if failed:
        print(f"  ({failed} of {n} rounds answered with an error or not within 10 s)")

    def pct(v, q):
        v = sorted(v)
        return v[min(len(v) - 1, int(q * len(v)))] * 1e6

    return [pct(creates, 0.5), pct(creates, 0.99), pct(deletes, 0.5), pct(deletes, 0.99)], acked[0]


def fast_ingest(port, n, flow=100):
    """Seconds for N x 128 B messages as one fast-ingest batch, then as windowed pub-acked
    publishes (200 in flight); both into file streams."""
    s = client(port)
    for name, extra in (("FI", {"allow_batched": True}), ("PA", {})):
        cfg = dict({"name": name, "subjects": [name.lower() + ".>"]}, **extra)
        request(s, f"$JS.API.STREAM.CREATE.{name}", json.dumps(cfg), f"_INBOX.{name}", 10)
    body = b"x" * 128
    s.sendall(b"SUB _FI.> 1\r\n")
    s.settimeout(30)
    t0 = time.perf_counter()
    acked, buf, window, done = 0, b"", 2 * flow, False
    out = []
    for seq in range(1, n + 1):
        op = 0 if seq == 1 else (2 if seq == n else 1)
        # Buffered writes, as clients do: what the window allows goes out in one write.
        out.append(b"PUB fi.a _FI.B.%d.ok.%d.%d.$FI 128\r\n%s\r\n" % (flow, seq, op, body))
        if seq - acked >= window or seq == n or len(out) >= flow:
            s.sendall(b"".join(out))
            out = []
        while seq - acked >= window or (seq == n and not done):
            buf += s.recv(65536)
            for m in re.findall(rb'"type":"ack","seq":(\d+)', buf):
                acked = max(acked, int(m))
            done = done or b'"batch"' in buf
            buf = buf[buf.rfind(b"\n") + 1:]
    fast = time.perf_counter() - t0
    s.sendall(b"SUB _INBOX.pa 2\r\n")
    t0 = time.perf_counter()
    sent = got = 0
    pending = b""
    while got < n:
        burst = min(200 - (sent - got), n - sent)
        if burst > 0:
            s.sendall((b"PUB pa.a _INBOX.pa 128\r\n" + body + b"\r\n") * burst)
            sent += burst
        pending += s.recv(65536)
        got += pending.count(b"MSG _INBOX.pa")
        pending = pending[pending.rfind(b"MSG _INBOX.pa") + 1:] if b"MSG _INBOX.pa" in pending else pending
    acks = time.perf_counter() - t0
    return fast, acks


def side_by_side(a, scenario):
    """Runs `scenario(process, port)` against nats-server, then sealstream, each on a fresh
    store; returns both results in that order."""
    got = []
    for binary in (a.nats, a.sealstream):
        with tempfile.TemporaryDirectory() as d:
            p, port = start(binary, d)
            try:
                got.append(scenario(p, port))
            finally:
                p.kill()
                p.wait()
    return got


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sealstream", default="target/release/sealstream-server")
    ap.add_argument("--nats", default=".venv/bin/nats-server")
    ap.add_argument("--streams", type=int, default=0, help="run the many-streams scenario")
    ap.add_argument("--kv", action="store_true", help="many-streams: KV buckets, not plain streams")
    ap.add_argument("--churn", type=int, default=0, help="run the stream-churn scenario")
    ap.add_argument("--mirror", type=int, default=0, help="run the mirror catch-up scenario")
    ap.add_argument("--fast", type=int, default=0, help="run the fast-ingest scenario")
    a = ap.parse_args()
    if a.fast:
        got = side_by_side(a, lambda p, port: fast_ingest(port, a.fast))
        for name, (f, pa) in zip(("nats-server", "sealstream"), got):
            print(f"{name:12} {a.fast} x 128 B: fast-ingest batch {f:.2f} s ({a.fast / f:.0f} msgs/s), pub-acked with 200 in flight {pa:.2f} s ({a.fast / pa:.0f} msgs/s)")
        (nf, npa), (sf, spa) = got
        print(f"ratio sealstream/nats-server (time, lower is faster): fast-ingest {sf / nf:.2f}, pub-acked {spa / npa:.2f}")
        return
    if a.mirror:
        (nm, ns), (sm, ss) = side_by_side(a, lambda p, port: mirror_catch_up(port, a.mirror))
        for name, (m, src) in (("nats-server", (nm, ns)), ("sealstream", (sm, ss))):
            print(f"{name:12} mirror and source of {a.mirror} x 1 KiB, made together: mirror {m:.2f} s ({a.mirror / m:.0f} msgs/s), source {src:.2f} s ({a.mirror / src:.0f} msgs/s)")
        print(f"ratio sealstream/nats-server (time, lower is faster): mirror {sm / nm:.2f}, source {ss / ns:.2f}")
        return
    if a.churn:
        got = side_by_side(a, lambda p, port: churn(port, a.churn))
        for name, (lat, acked) in zip(("nats-server", "sealstream"), got):
            print(f"{name:12} churn x{a.churn} beside a busy stream ({acked} acked meanwhile): create p50 {lat[0]:.0f} us p99 {lat[1]:.0f} us, delete p50 {lat[2]:.0f} us p99 {lat[3]:.0f} us")
        (n, _), (s_, _) = got
        print("ratio sealstream/nats-server: create p50 {:.2f} p99 {:.2f}, delete p50 {:.2f} p99 {:.2f}".format(*(b / a for a, b in zip(n, s_))))
        return
    if a.streams:
        for name, binary in (("nats-server", a.nats), ("sealstream", a.sealstream)):
            with tempfile.TemporaryDirectory() as d:
                p, port = start(binary, d)
                try:
                    rate, threads, rss, idle = many_streams(p.pid, port, a.streams, a.kv)
                finally:
                    p.kill()
                    p.wait()
            what = "KV buckets" if a.kv else "streams"
            print(f"{name:12} {a.streams} {what}: {rate:7.1f} creates/s, {threads} threads, peak RSS {rss:.0f} MiB, idle CPU {idle:.2f} s in 5 s")
        return
    rows = []
    for name, binary in (("nats-server", a.nats), ("sealstream", a.sealstream)):
        with tempfile.TemporaryDirectory() as d:
            p, port = start(binary, d)
            try:
                got, cpu = heartbeat_flood(p.pid, port)
                left = idle_sockets(port)
                sent, stored, rss = flood(p.pid, port)
            finally:
                p.kill()
                p.wait()
        rows.append((name, got, cpu, left))
        print(f"{name:12} heartbeat flood: {got / 1e6:8.2f} MB, {cpu:5.2f} CPU s in 5 s; idle pre-CONNECT sockets open after 5 s: {left}/50")
        print(f"{name:12} publish flood (8 s, 1 KiB core PUBs): sent {sent}, stored {stored} ({100 * stored / max(sent, 1):.1f} %), peak RSS {rss:.0f} MiB")
    (_, ng, nc, _), (_, sg, sc, _) = rows
    print(f"ratio sealstream/nats-server: bytes {sg / max(ng, 1):.3f}, CPU {sc / max(nc, 0.01):.3f}")


if __name__ == "__main__":
    main()
