#!/usr/bin/env python3
"""Route reconnect after a node restart, sealstream against nats-server on this machine.

Two nodes; a publisher on the surviving node sends a message every 2 ms. One node is killed
(SIGKILL) and started again on the same ports; a subscriber connects to it as soon as it
accepts clients. Measured from the restart: when the route is registered again (`/routez`
of the survivor lists the peer) and when the first message from the survivor reaches the
subscriber on the restarted node (its interest has crossed the new route).

Two cases: the restarted node is the one that dials (its seed route points at the
survivor), or the seed itself (the survivor must dial it again; both servers retry a
configured route every second).

    scripts/bench_route_reconnect.py target/release/sealstream-server .venv/bin/nats-server
"""
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROUNDS = 5


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Node:
    def __init__(self, binary, name, seed_route=None):
        self.binary, self.name, self.seed = binary, name, seed_route
        self.client, self.route, self.http = free_port(), free_port(), free_port()
        self.dir = tempfile.mkdtemp()
        self.proc = None

    def start(self):
        args = [self.binary, "-a", "127.0.0.1", "-p", str(self.client), "-m", str(self.http),
                "-n", self.name, "--cluster_name", "BENCH",
                "--cluster", f"nats://127.0.0.1:{self.route}"]
        if self.seed:
            args += ["--routes", f"nats-route://127.0.0.1:{self.seed}"]
        self.proc = subprocess.Popen(args, cwd=self.dir, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait()

    def peers(self):
        try:
            body = urllib.request.urlopen(f"http://127.0.0.1:{self.http}/routez", timeout=1).read()
        except OSError:
            return set()
        text = body.decode()
        v = json.loads(text[text.index("{"): text.rindex("}") + 1])
        return {r.get("remote_name") for r in v.get("routes") or []}


def connect(port, deadline):
    while time.monotonic() < deadline:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=0.2)
            s.settimeout(5)
            s.recv(4096)  # INFO
            s.sendall(b'CONNECT {"verbose":false,"protocol":1}\r\nPING\r\n')
            buf = b""
            while b"PONG" not in buf:
                buf += s.recv(4096)
            return s
        except OSError:
            time.sleep(0.002)
    raise RuntimeError(f"no client port {port}")


def wait(pred, deadline, step=0.005):
    while not pred():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out")
        time.sleep(step)


def round_trip(binary, restart_seed):
    seed = Node(binary, "n1")
    seed.start()
    other = Node(binary, "n2", seed_route=seed.route)
    other.start()
    try:
        limit = time.monotonic() + 15
        wait(lambda: "n2" in seed.peers(), limit)
        victim, survivor = (seed, other) if restart_seed else (other, seed)
        pub = connect(survivor.client, limit)
        stop = threading.Event()

        def publish():
            while not stop.is_set():
                try:
                    pub.sendall(b"PUB bench.reconnect 1\r\nx\r\n")
                except OSError:
                    return
                time.sleep(0.002)

        t = threading.Thread(target=publish, daemon=True)
        t.start()
        victim.kill()
        t0 = time.monotonic()
        victim.start()
        limit = t0 + 15
        sub = connect(victim.client, limit)
        sub.sendall(b"SUB bench.reconnect 1\r\nPING\r\n")
        route_up = None
        buf = b""
        sub.settimeout(0.005)
        while True:
            if route_up is None and victim.name in survivor.peers():
                route_up = time.monotonic() - t0
            try:
                buf += sub.recv(65536)
            except socket.timeout:
                pass
            if b"MSG bench.reconnect" in buf:
                interest = time.monotonic() - t0
                break
            if time.monotonic() > limit:
                raise RuntimeError("no message after restart")
        if route_up is None:
            wait(lambda: victim.name in survivor.peers(), limit)
            route_up = time.monotonic() - t0
        stop.set()
        t.join()
        return route_up, interest
    finally:
        seed.stop()
        other.stop()


def main():
    binaries = [os.path.abspath(b) for b in (sys.argv[1:] or ["target/release/sealstream-server", ".venv/bin/nats-server"])]
    results = {}
    for restart_seed in (False, True):
        case = "seed restarted" if restart_seed else "dialer restarted"
        for b in binaries:
            runs = [round_trip(b, restart_seed) for _ in range(ROUNDS)]
            route = statistics.median(r[0] for r in runs)
            interest = statistics.median(r[1] for r in runs)
            name = os.path.basename(b)
            results[(case, name)] = (route, interest)
            print(f"{case:17} {name:18} route up {route * 1000:7.1f} ms   "
                  f"interest restored {interest * 1000:7.1f} ms   (median of {ROUNDS})")
    return results


if __name__ == "__main__":
    main()
