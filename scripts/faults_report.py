#!/usr/bin/env python3
"""Renders the fault battery's runs as one HTML page (issue 16).

Reads every `faults-seed-<S>.jsonl` (the history: faults and operations) and
`faults-seed-<S>.verdict.json` (the checker's findings) under each directory given, one
directory per server set-up (`scripts/faults` makes them), and writes a self-contained page:
per run, a timeline of the faults and of every operation's latency (publishes, key-value
reads and writes; acknowledged, refused, unknown), throughput per second, and the checker's
verdict — the set-ups side by side.

    scripts/faults_report.py OUT.html DIR [DIR ...]
"""

import html
import json
import pathlib
import sys

W, H, PAD = 960, 260, 40
COLORS = {"ok": "#2e7d32", "fail": "#c62828", "unknown": "#9e9e9e"}
ROWS = {"publish": 0, "kv-write": 1, "kv-read": 2, "request": 3}


def load(path):
    faults, ops = [], []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        if r["type"] == "fault":
            faults.append(r)
        else:
            ops.append(r)
    return faults, ops


def timeline(faults, ops):
    end = max([o["complete_ms"] for o in ops] + [f["at_ms"] for f in faults] + [1])
    worst = max([o["complete_ms"] - o["invoke_ms"] for o in ops] + [1])
    x = lambda ms: PAD + (W - 2 * PAD) * ms / end
    # Latency on a log scale, 1 ms .. worst.
    import math

    top = math.log10(max(worst, 10))
    y = lambda lat: H - PAD - (H - 2 * PAD) * math.log10(max(lat, 1)) / top
    out = [f'<svg width="{W}" height="{H + 90}" xmlns="http://www.w3.org/2000/svg" '
           'style="font:11px sans-serif;background:#fff">']
    out.append(f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - PAD}" y2="{H - PAD}" stroke="#333"/>')
    for decade in range(0, int(top) + 1):
        yy = y(10 ** decade)
        out.append(f'<line x1="{PAD}" y1="{yy:.1f}" x2="{W - PAD}" y2="{yy:.1f}" stroke="#eee"/>')
        out.append(f'<text x="2" y="{yy + 4:.1f}">{10 ** decade} ms</text>')
    for sec in range(0, int(end / 1000) + 1, max(1, int(end / 10000))):
        xx = x(sec * 1000)
        out.append(f'<text x="{xx:.1f}" y="{H - PAD + 14}" text-anchor="middle">{sec}s</text>')
    for f in faults:
        xx = x(f["at_ms"])
        out.append(f'<g><title>{f["at_ms"] / 1000:.1f}s {html.escape(f["fault"])}</title>'
                   f'<line x1="{xx:.1f}" y1="{PAD / 2}" x2="{xx:.1f}" y2="{H - PAD}" '
                   'stroke="#ef6c00" stroke-dasharray="3,3" stroke-width="2"/></g>')
    for o in ops:
        lat = o["complete_ms"] - o["invoke_ms"]
        row = ROWS.get(o.get("f", "publish"), 0)
        shape = (f'<circle cx="{x(o["complete_ms"]):.1f}" cy="{y(lat) + row:.1f}" r="1.6" '
                 f'fill="{COLORS.get(o["type"], "#000")}"/>')
        if row:
            shape = (f'<rect x="{x(o["complete_ms"]) - 1.5:.1f}" y="{y(lat) - 1.5:.1f}" width="3" '
                     f'height="3" fill="{COLORS.get(o["type"], "#000")}" opacity="0.6"/>')
        out.append(shape)
    # Throughput: acknowledged operations per second.
    per_sec = {}
    for o in ops:
        if o["type"] == "ok":
            per_sec[o["complete_ms"] // 1000] = per_sec.get(o["complete_ms"] // 1000, 0) + 1
    peak = max(per_sec.values() or [1])
    base = H + 80
    pts = " ".join(f'{x(s * 1000 + 500):.1f},{base - 60 * per_sec.get(s, 0) / peak:.1f}'
                   for s in range(0, int(end / 1000) + 1))
    out.append(f'<polyline points="{pts}" fill="none" stroke="#1565c0"/>')
    out.append(f'<text x="2" y="{base - 50}">ok/s (peak {peak})</text>')
    out.append("</svg>")
    return "\n".join(out)


def fault_list(faults):
    items = "".join(f'<li>{f["at_ms"] / 1000:.1f}s — {html.escape(f["fault"])}</li>' for f in faults)
    return f'<details><summary>{len(faults)} fault events</summary><ul>{items}</ul></details>'


def summary(ops):
    rows = []
    for f in ("publish", "kv-read", "kv-write", "request"):
        mine = [o for o in ops if o.get("f", "publish") == f]
        if not mine:
            continue
        counts = {k: sum(1 for o in mine if o["type"] == k) for k in ("ok", "fail", "unknown")}
        lats = sorted(o["complete_ms"] - o["invoke_ms"] for o in mine if o["type"] == "ok")
        p = lambda q: lats[min(len(lats) - 1, int(q * len(lats)))] if lats else 0
        rows.append(f"<tr><td>{f}</td><td>{len(mine)}</td><td>{counts['ok']}</td>"
                    f"<td>{counts['fail']}</td><td>{counts['unknown']}</td>"
                    f"<td>{p(0.5)}</td><td>{p(0.99)}</td><td>{lats[-1] if lats else 0}</td></tr>")
    return ("<table><tr><th>operation</th><th>total</th><th>ok</th><th>refused</th>"
            "<th>unknown</th><th>p50 ms</th><th>p99 ms</th><th>max ms</th></tr>"
            + "".join(rows) + "</table>")


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        sys.exit(2)
    out, dirs = pathlib.Path(sys.argv[1]), [pathlib.Path(d) for d in sys.argv[2:]]
    # The style of `sealctl bench --report` (src/ctl/commands/bench/report.rs).
    parts = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
             "<title>sealstream fault battery</title>",
             "<style>body{font:14px/1.4 system-ui,sans-serif;margin:2em auto;max-width:1000px;"
             "color:#222} h1{font-size:1.4em} h2{font-size:1.1em;margin-top:1.6em} "
             "h3{font-size:1em} table{border-collapse:collapse} th,td{padding:2px 10px;"
             "border-bottom:1px solid #ddd;text-align:left} td{font-variant-numeric:tabular-nums}"
             " svg{background:#fff;border:1px solid #ddd} .clean{color:#2e7d32}"
             " .bad{color:#c62828}</style></head><body>",
             "<h1>sealstream fault battery</h1>",
             "<p>Each run: a three-node cluster, an R3 stream with three publishers "
             "(<code>Nats-Msg-Id</code>, retried until acknowledged) and a durable pull "
             "consumer, an R3 key-value bucket with two clients (reads, compare-and-set "
             "writes), core request/reply to a responder on every node, and a seeded series of "
             "faults. Dots: publishes by completion time and latency; squares: key-value "
             "operations and requests; green acknowledged, red refused, grey "
             "unknown; dashed lines: faults. The verdict is the history checker's.</p>"]
    verdicts = []
    for d in dirs:
        parts.append(f"<h2>{html.escape(d.name)}: timeline of faults and operations, "
                     "latency and throughput over time</h2><div>")
        for hist in sorted(d.glob("faults-seed-*.jsonl")):
            seed = hist.stem.split("-")[-1]
            vpath = d / f"faults-seed-{seed}.verdict.json"
            verdict = json.loads(vpath.read_text()) if vpath.exists() else {"findings": ["(no verdict)"]}
            findings = verdict.get("findings", [])
            verdicts.append((d.name, seed, findings))
            faults, ops = load(hist)
            cls = "clean" if not findings else "bad"
            said = "clean: every acknowledged write kept once, in order, dense sequences, " \
                   "no confirmed ack redelivered, key-value linearizable" if not findings \
                else "<br>".join(html.escape(f) for f in findings[:30])
            parts.append(f"<div><h3>seed {seed}</h3><p class={cls}>{said}</p>"
                         f"{summary(ops)}{timeline(faults, ops)}{fault_list(faults)}</div>")
        parts.append("</div>")
    rows = "".join(f"<tr><td>{html.escape(n)}</td><td>{s}</td>"
                   f"<td class={'clean' if not f else 'bad'}>{'clean' if not f else f'{len(f)} findings'}</td></tr>"
                   for n, s, f in verdicts)
    parts.insert(4, "<h2>Summary</h2><table><tr><th>set-up</th><th>seed</th><th>verdict</th></tr>"
                    f"{rows}</table>")
    out.write_text("\n".join(parts))
    print(f"report: {out}")


if __name__ == "__main__":
    main()
