#!/usr/bin/env bash
# JetStream through a server that keeps no copy of the stream: a two-node cluster on loopback,
# an R1 stream created through node 1 (so it lives there), publishers and the consumer on
# node 2 (`sealctl bench --sub-server`): every PubAck and delivery crosses a route. The same
# scenarios with everything on node 1 are the baseline.
#   scripts/bench_remote.sh seal|always|default [runs]
#   seal: target/release/sealstream-server (or $BIN); always/default: .venv/bin/nats-server with
#   `sync_interval: always` / its defaults. Run the three one after the other, alternating.
# Ports: clients 1423x, routes 1623x (x = 1, 2).
set -u
cd "$(dirname "$0")/.."
kind=$1; runs=${2:-2}
case $kind in
  seal) bin=${BIN:-target/release/sealstream-server} ;;
  always|default) bin=.venv/bin/nats-server ;;
  *) echo "usage: $0 seal|always|default [runs]" >&2; exit 2 ;;
esac
sync=""; [ "$kind" = always ] && sync=", sync_interval: always"
W=$(mktemp -d /tmp/remote.XXXX)
routes='"nats-route://127.0.0.1:16231", "nats-route://127.0.0.1:16232"'
pids=()
for i in 1 2; do
  cat > "$W/n$i.conf" <<C
server_name: n$i
listen: 127.0.0.1:1423$i
jetstream { store_dir: "$W/s$i" $sync }
cluster { name: C1, listen: 127.0.0.1:1623$i, routes: [$routes] }
C
  "$bin" -c "$W/n$i.conf" > "$W/n$i.log" 2>&1 & pids+=($!)
done
sleep 5
bench() { # where scenario msgs size
  local via=""; [ "$1" = remote ] && via="--sub-server nats://127.0.0.1:14232 --sub-server-pid ${pids[1]}"
  # shellcheck disable=SC2086
  timeout 300 target/release/sealctl --server nats://127.0.0.1:14231 bench --scenario "$2" \
    --msgs "$3" --size "$4" --server-pid "${pids[0]}" $via --stream "RB$RANDOM" --json 2>/dev/null |
    python3 -c 'import json, sys
r = json.load(sys.stdin)
l = r.get("latency_us") or {}
print("%s: %.0f msgs/s, p50 %s us, p99 %s us, server cpu %.1f us/msg, errors %s" % (sys.argv[1],
      r["delivered_msgs_per_sec"], l.get("p50", "-"), l.get("p99", "-"),
      r.get("server_cpu_us_per_msg") or 0, r.get("errors")))' "$kind $1 $2"
}
for r in $(seq 1 "$runs"); do
  for where in local remote; do
    bench $where js-pub-sync 5000 128
    bench $where js-pub-window 100000 1024
    bench $where js-consume 100000 128
  done
done
kill "${pids[@]}"; wait 2>/dev/null; rm -rf "$W"
