#!/usr/bin/env bash
# 1:1 core pub/sub with the independent async-nats load client (../shared/nbench), against
# nats-server and sealstream in the same run, two ways on this 2-core machine:
#   shared  server and client may use both cores (the way the other tables are measured)
#   pinned  server on core 0, load client on core 1 (taskset): each has a core of its own
# Prints msgs/s, the ratio, the server's busy share of a core and the client's CPU per message.
#   scripts/bench_core_pinned.sh [rounds] [msgs]
# Needs .venv (scripts/setup-test-env), target/release/sealstream-server and
# ../shared/nbench/target/release/nbench (cargo build --release there).
set -u
cd "$(dirname "$0")/.."
rounds=${1:-2}; msgs=${2:-300000}
NB=${NBENCH:-../shared/nbench/target/release/nbench}
W=$(mktemp -d /tmp/corepinned.XXXX)
for round in $(seq 1 "$rounds"); do
  for mode in shared pinned; do
    if [ "$mode" = pinned ]; then scpu=0; ccpu=1; else scpu=0,1; ccpu=0,1; fi
    for srv in nats seal; do
      if [ "$srv" = nats ]; then bin=.venv/bin/nats-server; else bin=target/release/sealstream-server; fi
      port=$((25000 + RANDOM % 1000))
      taskset -c "$scpu" "$bin" -a 127.0.0.1 -p "$port" > "$W/$srv.log" 2>&1 & pid=$!
      sleep 0.7
      taskset -c "$ccpu" "$NB" -u "nats://127.0.0.1:$port" -s core_pubsub --sizes 16,128,1024,16384 \
        --msgs "$msgs" --server-pid "$pid" -l "$srv" > "$W/$mode-$round-$srv.jsonl" 2> "$W/$mode-$round-$srv.err"
      kill "$pid"; wait "$pid" 2>/dev/null
    done
  done
done
python3 - "$W" <<'PY'
import json, glob, os, sys
w = sys.argv[1]
runs = {}
for f in glob.glob(os.path.join(w, "*.jsonl")):
    mode, rnd, srv = os.path.basename(f)[:-6].split("-")
    for line in open(f):
        d = json.loads(line)
        if d.get("type") == "run":
            runs[(mode, int(rnd), d["variant"], srv)] = d
print("| mode | round | size | nats-server msgs/s | sealstream msgs/s | ratio | server busy nats / ours | client µs/msg nats / ours | all arrived, no cut |")
print("|---|---|---|---:|---:|---:|---|---|---|")
for (mode, rnd, var, srv) in sorted(runs, key=lambda k: (k[0] != "shared", k[1], int(k[2][:-1]))):
    if srv != "nats":
        continue
    n, s = runs[(mode, rnd, var, "nats")], runs.get((mode, rnd, var, "seal"))
    if s is None:
        continue
    ok = all(d["all_arrived"] and d["slow_consumer_events"] == 0 for d in (n, s))
    cli = lambda d: d["client_cpu_s"] / d["msgs"] * 1e6
    print(f"| {mode} | {rnd} | {var} | {n['msgs_per_sec']:,.0f} | {s['msgs_per_sec']:,.0f} | "
          f"{s['msgs_per_sec'] / n['msgs_per_sec']:.2f} | {n['server_cpu_pct']:.0f} % / {s['server_cpu_pct']:.0f} % | "
          f"{cli(n):.2f} / {cli(s):.2f} | {'yes' if ok else 'NO'} |")
PY
rm -rf "$W"
