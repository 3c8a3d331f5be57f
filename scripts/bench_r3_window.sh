#!/usr/bin/env bash
# R3 windowed publishing (1 KiB, 256 in flight) with a Rust client (`sealctl bench --replicas 3`)
# against a three-node cluster on loopback; server CPU per message from /proc of the three nodes.
#   scripts/bench_r3_window.sh seal|always|default [runs] [msgs]
#   seal: target/release/sealstream-server (or $BIN); always/default: .venv/bin/nats-server with
#   `sync_interval: always` / its defaults. Run the three one after the other, alternating.
# Ports: clients 1422x, monitoring 1822x, routes 1622x (x = 1..3).
set -u
cd "$(dirname "$0")/.."
kind=$1; runs=${2:-2}; msgs=${3:-200000}
case $kind in
  seal) bin=${BIN:-target/release/sealstream-server} ;;
  always|default) bin=.venv/bin/nats-server ;;
  *) echo "usage: $0 seal|always|default [runs] [msgs]" >&2; exit 2 ;;
esac
sync=""; [ "$kind" = always ] && sync=", sync_interval: always"
W=$(mktemp -d /tmp/r3window.XXXX)
routes='"nats-route://127.0.0.1:16221", "nats-route://127.0.0.1:16222", "nats-route://127.0.0.1:16223"'
pids=()
for i in 1 2 3; do
  cat > "$W/n$i.conf" <<C
server_name: n$i
listen: 127.0.0.1:1422$i
http: 127.0.0.1:1822$i
jetstream { store_dir: "$W/s$i" $sync }
cluster { name: C1, listen: 127.0.0.1:1622$i, routes: [$routes] }
C
  "$bin" -c "$W/n$i.conf" > "$W/n$i.log" 2>&1 & pids+=($!)
done
sleep 6
ticks() { for p in "${pids[@]}"; do awk '{print $14+$15}' "/proc/$p/stat"; done | paste -sd+ | bc; }
for r in $(seq 1 "$runs"); do
  t0=$(ticks)
  timeout 300 target/release/sealctl --server nats://127.0.0.1:14221 bench --scenario js-pub-window \
    --replicas 3 --size 1024 --msgs "$msgs" --stream "R3W$r" 2>&1 | tail -3
  t1=$(ticks)
  echo "$kind run $r: server cpu $(( (t1 - t0) * 10000 / msgs )) µs/msg"
done
kill "${pids[@]}"; wait 2>/dev/null; rm -rf "$W"
