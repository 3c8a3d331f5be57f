#!/usr/bin/env python3
"""Side-by-side load test: sealstream-server vs nats-server, same machine, same run.

Starts each server (release build of ours, nats-server from the project's .venv) on a free
port, runs `sealctl bench` for every scenario against each one — alternating which server
goes first — and prints a Markdown table of throughput, server CPU per delivered message and
peak RSS, with sealstream/nats-server ratios. Used to write docs/PERFORMANCE.md.

    cargo build --release && .venv/bin/python scripts/bench_compare.py [--quick] [--tls]
    cargo build --release && .venv/bin/python scripts/bench_compare.py --js [--quick] [--out r.json]
    cargo build --release && .venv/bin/python scripts/bench_compare.py --auth [--quick] [--out r.json]

With --tls, both servers also run with the same TLS certificate (made with openssl) and the
1:1 scenarios are measured over TLS too.

With --js, the JetStream scenarios of `sealctl bench --scenario ...` (stream publish with
synchronous and windowed acks, pull consume, KV put/get) run against three servers started
side by side: sealstream-server (`-js -sd <tmp>`: it always acknowledges after fsync),
nats-server with `sync_interval: always` (the like-for-like durability setting) and
nats-server with JetStream defaults (fsync every 2 minutes: its usual speed). All store
directories live in one temporary directory on the same disk (`--store-root` to choose it).
A server that fails a scenario (e.g. no JetStream yet) is shown as n/a with the reason.

With --auth, multi-tenancy costs: `sealctl` builds an operator setup once (operator init →
account add → users, one with a permissions policy → `server config`, MEMORY resolver with the
accounts preloaded) and both servers run from that same file; then a second pair runs from a
config-mode file (`authorization { users = [...] }`, one user with permissions, one without).
Measured: connections/s and connect → PONG latency with JWT creds (the nonce signed per
connection) and with user/password, and core pub/sub 128 B with and without permissions.

Binaries: `$CARGO_TARGET_DIR/release` (else `target/release`) for ours; nats-server from
`$NATS_SERVER`, else `.venv/bin/nats-server` here or in the main checkout of a git worktree.
"""
import json
import os
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
SEAL = os.path.join(TARGET, "release/sealstream-server")
CTL = os.path.join(TARGET, "release/sealctl")


def find_nats():
    if os.environ.get("NATS_SERVER"):
        return os.environ["NATS_SERVER"]
    candidates = [os.path.join(ROOT, ".venv/bin/nats-server")]
    try:
        common = subprocess.run(["git", "-C", ROOT, "rev-parse", "--path-format=absolute", "--git-common-dir"],
                                check=True, capture_output=True, text=True).stdout.strip()
        candidates.append(os.path.join(os.path.dirname(common), ".venv/bin/nats-server"))
    except (OSError, subprocess.CalledProcessError):
        pass
    for c in candidates:
        if os.path.exists(c):
            return c
    return candidates[0]


NATS = find_nats()


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


def arg_value(flag):
    if flag in sys.argv:
        i = sys.argv.index(flag)
        if i + 1 < len(sys.argv):
            return sys.argv[i + 1]
    return None


def start_js(name, store_root):
    """Starts one JetStream server variant; (Popen, port) or raises with the reason."""
    port = free_port()
    store = os.path.join(store_root, name)
    os.makedirs(store, exist_ok=True)
    if name == "sealstream":
        if not os.path.exists(SEAL):
            raise RuntimeError(f"{SEAL} not built")
        cmd = [SEAL, "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", store]
    else:
        sync = "\n  sync_interval: always" if name == "nats-sync" else ""
        conf = os.path.join(store_root, f"{name}.conf")
        with open(conf, "w") as f:
            f.write(f'listen: "127.0.0.1:{port}"\njetstream {{\n  store_dir: "{store}"{sync}\n}}\n')
        cmd = [NATS, "-c", conf]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 30
    while time.time() < deadline:
        if p.poll() is not None:
            raise RuntimeError(f"{name} exited with {p.returncode} at startup")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return p, port
        except OSError:
            time.sleep(0.05)
    p.kill()
    raise RuntimeError(f"{name} did not start")


JS_SERVERS = ("sealstream", "nats-sync", "nats-default")
JS_LABELS = {"sealstream": "sealstream", "nats-sync": "nats-server (sync always)",
             "nats-default": "nats-server (default sync)"}


def js_scenarios(quick):
    """(label, args, timeout s). Counts keep --quick under ~3 minutes for three servers on a
    2-core VM. The budget goes to nats-server with `sync_interval: always`: it fsyncs every
    stored message (~1-2k msgs/s here even with 256 in flight), which also paces the
    js-consume preload and the kv-get key load."""
    f = 1 if quick else 3
    sz = "128"
    return [
        (f"js-pub-sync, 1 pub, {sz} B", ["--scenario", "js-pub-sync", "--msgs", str(2000 * f), "--size", sz], 120),
        (f"js-pub-sync, 4 pubs, {sz} B", ["--scenario", "js-pub-sync", "--pubs", "4", "--msgs", str(2000 * f), "--size", sz], 120),
        (f"js-pub-window 256, 1 pub, {sz} B", ["--scenario", "js-pub-window", "--msgs", str(30_000 * f), "--size", sz], 180),
        ("js-pub-window 256, 1 pub, 1024 B", ["--scenario", "js-pub-window", "--msgs", str(15_000 * f), "--size", "1024"], 180),
        ("js-pub-sync, 16 pubs, 1024 B", ["--scenario", "js-pub-sync", "--pubs", "16", "--msgs", str(8000 * f), "--size", "1024"], 180),
        (f"js-consume batch 500, {sz} B", ["--scenario", "js-consume", "--msgs", str(30_000 * f), "--size", sz], 180),
        (f"kv-put window 256, 10k keys, {sz} B", ["--scenario", "kv-put", "--keys", "10000", "--msgs", str(10_000 * f), "--size", sz], 120),
        (f"kv-get inflight 1, 10k keys, {sz} B", ["--scenario", "kv-get", "--keys", "10000", "--msgs", str(10_000 * f), "--size", sz], 120),
    ]


def js_bench(port, pid, args, timeout):
    """One run: the report, or ("n/a", reason)."""
    try:
        out = subprocess.run([CTL, "--server", f"nats://127.0.0.1:{port}", "bench", *args,
                              "--server-pid", str(pid), "--json"],
                             capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout} s"
    if out.returncode != 0:
        lines = (out.stderr or out.stdout).strip().splitlines()
        return None, lines[-1] if lines else f"exit {out.returncode}"
    try:
        return json.loads(out.stdout), None
    except json.JSONDecodeError as e:
        return None, f"bad JSON: {e}"


def raw_fsync_mib_s(directory, seconds=2.0, block=16 * 1024):
    """The disk's own pace for the 16-writer comparison: write 16 KiB + fdatasync, repeated."""
    path = os.path.join(directory, "raw-fsync-probe")
    buf = os.urandom(block)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    n, t0 = 0, time.time()
    try:
        while time.time() - t0 < seconds:
            os.write(fd, buf)
            os.fdatasync(fd)
            n += 1
    finally:
        os.close(fd)
        os.unlink(path)
    return n * block / (time.time() - t0) / (1 << 20)


def js_main(quick):
    import tempfile
    t0 = time.time()
    root = arg_value("--store-root")
    with tempfile.TemporaryDirectory(prefix="jsbench-", dir=root) as store_root:
        procs, down = {}, {}
        for name in JS_SERVERS:
            try:
                procs[name] = start_js(name, store_root)
            except (OSError, RuntimeError) as e:
                down[name] = str(e)
        rows = []
        try:
            for i, (label, args, timeout) in enumerate(js_scenarios(quick)):
                k = i % len(JS_SERVERS)
                order = JS_SERVERS[k:] + JS_SERVERS[:k]
                res = {}
                for name in order:
                    if name in down:
                        res[name] = (None, down[name])
                        continue
                    p, port = procs[name]
                    if p.poll() is not None:
                        down[name] = f"exited with {p.returncode}"
                        res[name] = (None, down[name])
                        continue
                    res[name] = js_bench(port, p.pid, args, timeout)
                rows.append((label, res))
                print(f"done: {label} ({time.time() - t0:.0f} s)", file=sys.stderr)
            rss = {name: peak_rss_kib(p.pid) for name, (p, _) in procs.items() if p.poll() is None}
            raw = raw_fsync_mib_s(store_root)
            raw_1k = raw_fsync_mib_s(store_root, block=1024)
        finally:
            for p, _ in procs.values():
                p.kill()
                p.wait()
    print_js(rows, rss)
    for label, res in rows:
        rep = res.get("sealstream", (None, None))[0]
        if label.startswith("js-pub-sync, 16 pubs") and rep:
            mib = rep["delivered_msgs_per_sec"] * 1024 / (1 << 20)
            print(f"\n16 publishers x 1 KiB, each awaiting its ack: sealstream {mib:.1f} MiB/s; "
                  f"raw fsync'd 1 KiB writes (dd oflag=dsync bs=1k style) on the same disk: "
                  f"{raw_1k:.1f} MiB/s ({100 * mib / raw_1k:.0f} % of raw); "
                  f"raw write+fdatasync of 16 KiB batches: {raw:.1f} MiB/s ({100 * mib / raw:.0f} %).")
    out = arg_value("--out")
    if out:
        with open(out, "w") as f:
            json.dump({"scenarios": [{"label": label, "results": {n: r for n, (r, _) in res.items()},
                                      "na": {n: why for n, (r, why) in res.items() if r is None}}
                                     for label, res in rows], "peak_rss_kib": rss}, f, indent=2)
    print(f"\nTotal {time.time() - t0:.0f} s.", file=sys.stderr)


def print_js(rows, rss):
    def rate(r):
        return f"{r['delivered_msgs_per_sec']:,.0f}" if r else "n/a"

    def cpu(r):
        return f"{r['server_cpu_us_per_msg']:.1f}" if r and r.get("server_cpu_us_per_msg") is not None else "n/a"

    def ratio(a, b):
        return f"{a['delivered_msgs_per_sec'] / b['delivered_msgs_per_sec']:.2f}" \
            if a and b and b["delivered_msgs_per_sec"] else "n/a"

    heads = [JS_LABELS[n] for n in JS_SERVERS]
    print("| scenario | " + " | ".join(f"{h} msgs/s" for h in heads)
          + " | vs sync always | vs default | " + " | ".join(f"{h} CPU µs/msg" for h in heads) + " |")
    print("|---|" + "---:|" * (2 * len(JS_SERVERS) + 2))
    notes = []
    for label, res in rows:
        r = {n: res[n][0] for n in JS_SERVERS}
        print(f"| {label} | " + " | ".join(rate(r[n]) for n in JS_SERVERS)
              + f" | {ratio(r['sealstream'], r['nats-sync'])} | {ratio(r['sealstream'], r['nats-default'])} | "
              + " | ".join(cpu(r[n]) for n in JS_SERVERS) + " |")
        for n in JS_SERVERS:
            rep, why = res[n]
            if rep is None:
                notes.append(f"{label}, {JS_LABELS[n]}: n/a — {why}")
                continue
            lat = rep.get("latency_us")
            extra = []
            if lat:
                extra.append(f"p50/p99 {lat['p50']:.0f}/{lat['p99']:.0f} µs")
            if rep["pub_msgs_per_sec"] != rep["delivered_msgs_per_sec"]:
                extra.append(f"preload {rep['pub_msgs_per_sec']:,.0f} msgs/s")
            if rep.get("errors"):
                extra.append(f"{rep['errors']} errors ({rep.get('note')})")
            if extra:
                notes.append(f"{label}, {JS_LABELS[n]}: " + ", ".join(extra))
    print()
    print("Ratios: sealstream msgs/s ÷ nats-server msgs/s (higher is better).")
    for line in notes:
        print(f"- {line}")
    if rss:
        print()
        print("Peak RSS after the whole run: " + ", ".join(f"{JS_LABELS[n]} {v / 1024:.1f} MiB" for n, v in rss.items()) + ".")


# --- multi-tenancy: JWT connect rate and permissions ------------------------------------

# Publish/subscribe permissions of the permissioned users: bench.> plus a few deny rules (the
# bench subject is allowed, so every publish is checked and passes).
AUTH_ALLOW = ["bench.>", "_INBOX.>"]
AUTH_PUB_DENY = ["bench.secret.>", "bench.admin.*", "bench.*.private"]
AUTH_SUB_DENY = ["bench.secret.>", "bench.admin.*"]
AUTH_SUBJECT = "bench.load.data"


def sealctl(keys, *args):
    out = subprocess.run([CTL, *args], check=True, capture_output=True, text=True,
                         env={**os.environ, "SEALCTL_KEYS": keys})
    return out.stdout


def jlist(xs):
    return "[" + ", ".join(json.dumps(x) for x in xs) + "]"


def auth_setup(d):
    """Writes the operator-mode and config-mode server configs and the creds under `d`;
    returns (operator_conf, config_conf, {name: creds path})."""
    keys = os.path.join(d, "keys")
    policy = os.path.join(d, "bench-permissions.conf")
    with open(policy, "w") as f:
        f.write(f"pub: {{ allow: {jlist(AUTH_ALLOW)}, deny: {jlist(AUTH_PUB_DENY)} }}\n"
                f"sub: {{ allow: {jlist(AUTH_ALLOW)}, deny: {jlist(AUTH_SUB_DENY)} }}\n"
                # JWT user limits default to 0 (none) when a policy omits them.
                "subs: -1\npayload: -1\ndata: -1\n")
    sealctl(keys, "operator", "init", "--name", "BENCH-OP")
    sealctl(keys, "account", "add", "TENANT")
    creds = {"open": os.path.join(d, "open.creds"), "perm": os.path.join(d, "perm.creds")}
    sealctl(keys, "user", "add", "TENANT", "open", "--out", creds["open"])
    sealctl(keys, "user", "add", "TENANT", "perm", "--policy", policy, "--out", creds["perm"])
    op_conf = os.path.join(d, "operator.conf")
    with open(op_conf, "w") as f:
        f.write(sealctl(keys, "server", "config"))
    cfg_conf = os.path.join(d, "users.conf")
    with open(cfg_conf, "w") as f:
        f.write("authorization {\n  users = [\n"
                "    { user: open, password: open-pw }\n"
                "    { user: perm, password: perm-pw, permissions: {\n"
                f"        publish: {{ allow: {jlist(AUTH_ALLOW)}, deny: {jlist(AUTH_PUB_DENY)} }}\n"
                f"        subscribe: {{ allow: {jlist(AUTH_ALLOW)}, deny: {jlist(AUTH_SUB_DENY)} }}\n"
                "    } }\n  ]\n}\n")
    return op_conf, cfg_conf, creds


def start_conf(binary, conf):
    port = free_port()
    p = subprocess.Popen([binary, "-c", conf, "-a", "127.0.0.1", "-p", str(port)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 10
    while time.time() < deadline:
        if p.poll() is not None:
            raise RuntimeError(f"{binary} -c {conf} exited with {p.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return p, port
        except OSError:
            time.sleep(0.05)
    p.kill()
    raise RuntimeError(f"{binary} did not start")


def auth_scenarios(quick, creds):
    """(label, kind, config: "op"|"cfg", args). Each runs `reps` times per server."""
    conns = "1000" if quick else "2000"
    msgs = "200000" if quick else "1000000"
    core = [AUTH_SUBJECT, "--msgs", msgs, "--size", "128"]
    connect = ["--scenario", "connect", "--conns", conns, "--parallel", "8"]
    return [
        ("connect, JWT creds (nonce signed)", "connect", "op", [*connect, "--creds", creds["open"]]),
        ("connect, user/password", "connect", "cfg", [*connect, "--user", "open", "--password", "open-pw"]),
        ("pub/sub 128 B, config user, no permissions", "core", "cfg", [*core, "--user", "open", "--password", "open-pw"]),
        ("pub/sub 128 B, config user, permissions", "core", "cfg", [*core, "--user", "perm", "--password", "perm-pw"]),
        ("pub/sub 128 B, JWT user, no permissions", "core", "op", [*core, "--creds", creds["open"]]),
        ("pub/sub 128 B, JWT user, permissions", "core", "op", [*core, "--creds", creds["perm"]]),
    ]


def median_by(reports, key):
    reports = sorted(reports, key=key)
    return reports[len(reports) // 2]


def auth_main(quick):
    import tempfile
    t0 = time.time()
    reps = 3
    names = ("sealstream", "nats-server")
    rows = []
    with tempfile.TemporaryDirectory(prefix="authbench-") as d:
        op_conf, cfg_conf, creds = auth_setup(d)
        procs = {}
        try:
            for name, binary in (("sealstream", SEAL), ("nats-server", NATS)):
                procs[(name, "op")] = start_conf(binary, op_conf)
                procs[(name, "cfg")] = start_conf(binary, cfg_conf)
            for i, (label, kind, conf, args) in enumerate(auth_scenarios(quick, creds)):
                runs = {n: [] for n in names}
                for r in range(reps):
                    order = names if (i + r) % 2 == 0 else names[::-1]
                    for name in order:
                        p, port = procs[(name, conf)]
                        runs[name].append(bench(port, p.pid, args))
                # The median run by rate (connect: established connections/s).
                res = {n: median_by(runs[n], lambda x: x["delivered_msgs_per_sec"]) for n in names}
                rows.append((label, kind, res, runs))
                print(f"done: {label} ({time.time() - t0:.0f} s)", file=sys.stderr)
            rss = {key: peak_rss_kib(p.pid) for key, (p, _) in procs.items()}
        finally:
            for p, _ in procs.values():
                p.kill()
                p.wait()
    print_auth(rows, reps)
    print()
    print("Peak RSS after the whole run: " + ", ".join(
        f"{n} ({'operator' if c == 'op' else 'config'} mode) {v / 1024:.1f} MiB" for (n, c), v in rss.items()) + ".")
    out = arg_value("--out")
    if out:
        with open(out, "w") as f:
            json.dump({"scenarios": [{"label": label, "runs": runs} for label, _, _, runs in rows],
                       "peak_rss_kib": {f"{n}/{c}": v for (n, c), v in rss.items()}}, f, indent=2)
    print(f"\nTotal {time.time() - t0:.0f} s.", file=sys.stderr)


def print_auth(rows, reps):
    print(f"Median of {reps} runs per server (runs alternate which server goes first).")
    print()
    print("| connect scenario | sealstream conns/s | nats-server conns/s | ratio | sealstream p50 / p99 / max µs "
          "| nats-server p50 / p99 / max µs | p99 ratio | sealstream CPU µs/conn | nats-server CPU µs/conn | errors |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, kind, res, runs in rows:
        if kind != "connect":
            continue
        s, n = res["sealstream"], res["nats-server"]
        ls, ln = s["latency_us"] or {}, n["latency_us"] or {}
        errs = sum(x["errors"] or 0 for rs in runs.values() for x in rs)
        lat = lambda l: f"{l.get('p50', 0):,.0f} / {l.get('p99', 0):,.0f} / {l.get('max', 0):,.0f}"
        cpu = lambda r: f"{r['server_cpu_us_per_msg']:.0f}" if r.get("server_cpu_us_per_msg") is not None else "n/a"
        print(f"| {label} | {s['delivered_msgs_per_sec']:,.0f} | {n['delivered_msgs_per_sec']:,.0f} | "
              f"{s['delivered_msgs_per_sec'] / max(n['delivered_msgs_per_sec'], 1e-9):.2f} | {lat(ls)} | {lat(ln)} | "
              f"{ls.get('p99', 0) / max(ln.get('p99', 0), 1e-9):.2f} | {cpu(s)} | {cpu(n)} | {errs} |")
    print()
    print("| pub/sub 1 pub -> 1 sub | sealstream msgs/s | nats-server msgs/s | ratio "
          "| sealstream CPU µs/msg | nats-server CPU µs/msg | CPU ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    base = {}
    for label, kind, res, _ in rows:
        if kind != "core":
            continue
        s, n = res["sealstream"], res["nats-server"]
        sr, nr = s["delivered_msgs_per_sec"], n["delivered_msgs_per_sec"]
        sc, nc = s["server_cpu_us_per_msg"] or 0.0, n["server_cpu_us_per_msg"] or 0.0
        print(f"| {label} | {sr:,.0f} | {nr:,.0f} | {sr / nr:.2f} | {sc:.3f} | {nc:.3f} | {sc / nc if nc else 0:.2f} |")
        base[label] = (sr, nr)
    print()
    for mode in ("config user", "JWT user"):
        off = base.get(f"pub/sub 128 B, {mode}, no permissions")
        on = base.get(f"pub/sub 128 B, {mode}, permissions")
        if off and on:
            print(f"- {mode}: permissions on ÷ off, msgs/s: sealstream {on[0] / off[0]:.2f}, "
                  f"nats-server {on[1] / off[1]:.2f}")


def main():
    quick = "--quick" in sys.argv
    if "--js" in sys.argv:
        js_main(quick)
        return
    if "--auth" in sys.argv:
        auth_main(quick)
        return
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
