//! `sealctl bench --report FILE`: one self-contained HTML page (inline CSS and SVG, no
//! scripts, nothing fetched) with the run parameters, the summary table, throughput over time
//! and the latency percentiles.

use std::fmt::Write as _;

use super::meter::Timeline;
use super::{BenchReport, Latency};

/// Plot size in SVG user units.
const W: f64 = 720.0;
const H: f64 = 280.0;
/// Margins: left (axis labels), right, top, bottom.
const ML: f64 = 70.0;
const MR: f64 = 20.0;
const MT: f64 = 20.0;
const MB: f64 = 40.0;
/// At most this many points on the throughput line (fewer, longer intervals smooth the
/// burstiness of batched protocols).
const MAX_POINTS: usize = 60;

/// `&`, `<`, `>`, `"`, `'` escaped for HTML text and attributes.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// A "nice" upper bound for an axis: 1, 2 or 5 × 10^k at or above `v`.
fn nice_max(v: f64) -> f64 {
    if !v.is_finite() || v <= 0.0 {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * p >= v {
            return m * p;
        }
    }
    10.0 * p
}

/// A number for an axis or bar label: `1.2M`, `35k`, `850`, `0.42`.
fn short(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 && (v / 1e3).fract().abs() < 0.05 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Axes, horizontal grid lines with labels from 0 to `ymax`, and the axis titles.
fn frame(svg: &mut String, ymax: f64, xlabel: &str, ylabel: &str) {
    let (x0, x1, y0, y1) = (ML, W - MR, H - MB, MT);
    for i in 0..=4 {
        let v = ymax * f64::from(i) / 4.0;
        let y = y0 - (y0 - y1) * f64::from(i) / 4.0;
        let _ = write!(
            svg,
            r##"<line class="grid" stroke="#eee" x1="{x0}" y1="{y:.1}" x2="{x1}" y2="{y:.1}"/><text class="tick" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            x0 - 6.0,
            y + 4.0,
            short(v)
        );
    }
    let _ = write!(
        svg,
        r##"<line class="axis" stroke="#444" x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}"/><line class="axis" stroke="#444" x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}"/><text class="label" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text><text class="label" x="14" y="{:.1}" text-anchor="middle" transform="rotate(-90 14 {:.1})">{}</text>"##,
        (x0 + x1) / 2.0,
        H - 6.0,
        esc(xlabel),
        (y0 + y1) / 2.0,
        (y0 + y1) / 2.0,
        esc(ylabel)
    );
}

fn svg_open(id: &str, title: &str) -> String {
    format!(
        r##"<svg id="{id}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img"><title>{}</title>"##,
        esc(title)
    )
}

/// Throughput over time as a line (`<polyline class="series throughput">`).
pub fn throughput_svg(t: &Timeline) -> String {
    let rates = t.rates(MAX_POINTS);
    let mut svg = svg_open("throughput", "throughput over time");
    let xmax = rates.last().map_or(1.0, |r| r.0).max(1e-3);
    let xmax = t.points.last().map_or(xmax, |p| p.0.max(xmax));
    let ymax = nice_max(rates.iter().map(|r| r.1).fold(0.0, f64::max));
    frame(&mut svg, ymax, "seconds", &format!("{} / s", t.label));
    let (x0, x1, y0, y1) = (ML, W - MR, H - MB, MT);
    // x ticks: 0, half, end.
    for f in [0.0, 0.5, 1.0] {
        let _ = write!(
            svg,
            r##"<text class="tick" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            x0 + (x1 - x0) * f,
            y0 + 16.0,
            short(xmax * f)
        );
    }
    let pts: Vec<String> = rates
        .iter()
        .map(|&(x, y)| {
            format!(
                "{:.1},{:.1}",
                x0 + (x1 - x0) * x / xmax,
                y0 - (y0 - y1) * y / ymax
            )
        })
        .collect();
    let _ = write!(
        svg,
        r##"<polyline class="series throughput" fill="none" stroke="#1f6fb4" stroke-width="2" points="{}"/>"##,
        pts.join(" ")
    );
    if let [only] = pts.as_slice() {
        if let Some((x, y)) = only.split_once(',') {
            let _ = write!(
                svg,
                r##"<circle class="series-dot" fill="#1f6fb4" cx="{x}" cy="{y}" r="3"/>"##
            );
        }
    }
    if rates.is_empty() {
        let _ = write!(
            svg,
            r##"<text class="label" x="{:.1}" y="{:.1}" text-anchor="middle">run too short to sample</text>"##,
            (x0 + x1) / 2.0,
            (y0 + y1) / 2.0
        );
    }
    svg.push_str("</svg>");
    svg
}

/// The percentiles shown as bars.
fn bars(l: &Latency) -> [(&'static str, f64); 5] {
    [
        ("p50", l.p50),
        ("p90", l.p90),
        ("p99", l.p99),
        ("p99.9", l.p99_9),
        ("max", l.max),
    ]
}

/// Latency percentiles as labelled bars (`<rect class="bar" data-p="p99">`), or a note when
/// the scenario measured none.
pub fn latency_svg(l: Option<&Latency>) -> String {
    let mut svg = svg_open("latency", "latency percentiles");
    let (x0, x1, y0, y1) = (ML, W - MR, H - MB, MT);
    let Some(l) = l else {
        frame(&mut svg, 1.0, "percentile", "µs");
        let _ = write!(
            svg,
            r##"<text class="label" x="{:.1}" y="{:.1}" text-anchor="middle">this scenario measures no latency</text></svg>"##,
            (x0 + x1) / 2.0,
            (y0 + y1) / 2.0
        );
        return svg;
    };
    let b = bars(l);
    let ymax = nice_max(b.iter().map(|x| x.1).fold(0.0, f64::max));
    frame(&mut svg, ymax, "percentile", "µs");
    let slot = (x1 - x0) / b.len() as f64;
    for (i, (name, v)) in b.iter().enumerate() {
        let h = (y0 - y1) * (v / ymax).clamp(0.0, 1.0);
        let x = x0 + slot * i as f64 + slot * 0.2;
        let _ = write!(
            svg,
            r##"<rect class="bar" fill="#d9822b" data-p="{name}" x="{x:.1}" y="{:.1}" width="{:.1}" height="{h:.1}"/><text class="value" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text><text class="tick" x="{:.1}" y="{:.1}" text-anchor="middle">{name}</text>"##,
            y0 - h,
            slot * 0.6,
            x + slot * 0.3,
            y0 - h - 4.0,
            short(*v),
            x + slot * 0.3,
            y0 + 16.0
        );
    }
    svg.push_str("</svg>");
    svg
}

/// What the latency samples of `r` measure.
fn latency_what(r: &BenchReport) -> &'static str {
    if r.scenario.starts_with(super::connect::LABEL) {
        "TCP connect → PONG (INFO, CONNECT, authentication)"
    } else if r.errors.is_some() {
        "request → reply: PubAck or get"
    } else if r.scenario == "request/reply" {
        "request/reply round trip"
    } else {
        "publish → delivery with the publisher at full speed"
    }
}

/// The summary table (the same figures as the terminal table).
fn summary_html(r: &BenchReport) -> String {
    let opt = |v: Option<f64>, prec: usize| v.map_or("-".to_owned(), |v| format!("{v:.prec$}"));
    let mut rows = vec![
        ("scenario", esc(&r.scenario)),
        ("payload bytes", r.size.to_string()),
        ("messages", r.msgs.to_string()),
        ("delivered / completed", r.delivered.to_string()),
        ("seconds", format!("{:.3}", r.seconds)),
        ("published msgs/s", format!("{:.0}", r.pub_msgs_per_sec)),
        (
            "delivered msgs/s",
            format!("{:.0}", r.delivered_msgs_per_sec),
        ),
        ("server cpu µs/msg", opt(r.server_cpu_us_per_msg, 3)),
    ];
    if let Some(l) = &r.latency_us {
        for (name, v) in bars(l) {
            rows.push((name, format!("{v:.1} µs")));
        }
    }
    if let Some(e) = r.errors {
        rows.push(("errors", e.to_string()));
    }
    if let Some(n) = &r.note {
        rows.push(("note", esc(n)));
    }
    let mut s = String::from(r#"<table class="summary"><tbody>"#);
    for (k, v) in rows {
        let _ = write!(s, "<tr><th>{}</th><td>{v}</td></tr>", esc(k));
    }
    s.push_str("</tbody></table>");
    s
}

/// The whole page. `params` are the run parameters, shown as given.
pub fn html(r: &BenchReport, timeline: &Timeline, params: &[(String, String)]) -> String {
    let mut p = String::from(r#"<table class="params"><tbody>"#);
    for (k, v) in params {
        let _ = write!(p, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(v));
    }
    p.push_str("</tbody></table>");
    format!(
        r##"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>sealctl bench: {title}</title>
<style>
body{{font:14px/1.4 system-ui,sans-serif;margin:2em auto;max-width:780px;color:#222}}
h1{{font-size:1.4em}} h2{{font-size:1.1em;margin-top:1.6em}}
table{{border-collapse:collapse}} th,td{{padding:2px 10px;border-bottom:1px solid #ddd;text-align:left}}
td{{font-variant-numeric:tabular-nums}}
svg{{background:#fff;border:1px solid #ddd}}
.tick{{font-size:11px;fill:#555}} .label{{font-size:12px;fill:#333}} .value{{font-size:11px;fill:#222}}
</style></head><body>
<h1>sealctl bench: {title}</h1>
<h2>Summary</h2>
{summary}
<h2>Throughput over time ({label} per second, {step} ms intervals)</h2>
{tp}
<h2>Latency percentiles (µs, {lat_what})</h2>
{lat}
<h2>Run parameters</h2>
{p}
</body></html>
"##,
        title = esc(&r.scenario),
        summary = summary_html(r),
        label = esc(&timeline.label),
        step = timeline.step(MAX_POINTS).as_millis(),
        tp = throughput_svg(timeline),
        lat = latency_svg(r.latency_us.as_ref()),
        lat_what = latency_what(r),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks that every element in `s` is closed in order (a tiny XML well-formedness test:
    /// no attribute values contain `<` or `>`, which [`esc`] guarantees).
    pub(crate) fn balanced(s: &str) -> Result<usize, String> {
        let mut stack: Vec<String> = Vec::new();
        let mut count = 0;
        let mut rest = s;
        while let Some(i) = rest.find('<') {
            let after = &rest[i + 1..];
            let end = after.find('>').ok_or("unterminated tag")?;
            let tag = &after[..end];
            rest = &after[end + 1..];
            if tag.starts_with('!') || tag.starts_with('?') {
                continue;
            }
            if let Some(name) = tag.strip_prefix('/') {
                let open = stack.pop().ok_or(format!("stray </{name}>"))?;
                if open != name.trim() {
                    return Err(format!("<{open}> closed by </{name}>"));
                }
            } else if !tag.ends_with('/') {
                let name = tag.split_whitespace().next().unwrap_or("").to_owned();
                if !matches!(name.as_str(), "meta" | "br") {
                    stack.push(name);
                }
                count += 1;
            } else {
                count += 1;
            }
        }
        if let Some(open) = stack.pop() {
            return Err(format!("<{open}> never closed"));
        }
        Ok(count)
    }

    fn sample_report() -> BenchReport {
        BenchReport {
            scenario: "1 pub -> 1 sub <&>".into(),
            size: 128,
            msgs: 1000,
            delivered: 1000,
            seconds: 0.5,
            pub_msgs_per_sec: 2000.0,
            delivered_msgs_per_sec: 2000.0,
            server_cpu_us_per_msg: None,
            latency_us: Some(super::super::percentiles(
                (1..=1000).map(f64::from).collect(),
            )),
            errors: Some(0),
            note: Some("a \"note\"".into()),
        }
    }

    fn timeline() -> Timeline {
        Timeline {
            label: "deliver".into(),
            points: (0..=50)
                .map(|i| (f64::from(i) * 0.01, i as u64 * 20))
                .collect(),
        }
    }

    #[test]
    fn throughput_svg_is_well_formed_and_has_the_series() {
        let svg = throughput_svg(&timeline());
        balanced(&svg).unwrap();
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        let pts = svg
            .split(r#"stroke-width="2" points=""#)
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap();
        assert!(pts.split(' ').count() >= 10, "{pts}");
        for p in pts.split(' ') {
            let (x, y) = p.split_once(',').unwrap();
            let (x, y): (f64, f64) = (x.parse().unwrap(), y.parse().unwrap());
            assert!(
                (ML..=W - MR).contains(&x) && (MT..=H - MB).contains(&y),
                "{p}"
            );
        }
    }

    #[test]
    fn latency_svg_has_every_percentile() {
        let r = sample_report();
        let svg = latency_svg(r.latency_us.as_ref());
        balanced(&svg).unwrap();
        for p in ["p50", "p90", "p99", "p99.9", "max"] {
            assert!(svg.contains(&format!(r#"data-p="{p}""#)), "{p}");
        }
        let none = latency_svg(None);
        balanced(&none).unwrap();
        assert!(none.contains("no latency"));
    }

    #[test]
    fn page_is_self_contained_and_escaped() {
        let params = vec![("subject".to_owned(), "a<b".to_owned())];
        let page = html(&sample_report(), &timeline(), &params);
        let body = page.strip_prefix("<!DOCTYPE html>\n").unwrap();
        balanced(body).unwrap();
        assert!(page.contains("1 pub -&gt; 1 sub &lt;&amp;&gt;"));
        assert!(page.contains("a&lt;b"));
        assert!(page.contains(r#"<svg id="throughput""#));
        assert!(page.contains(r#"<svg id="latency""#));
        for bad in ["<script", "http://", "https://", "src="] {
            let hits = page.matches(bad).count();
            // The SVG namespace URI is the only URL.
            let allowed = usize::from(bad == "http://") * 2;
            assert_eq!(hits, allowed, "{bad}");
        }
    }

    #[test]
    fn balanced_rejects_broken_markup() {
        assert!(balanced("<svg><g></svg>").is_err());
        assert!(balanced("<svg>").is_err());
        assert!(balanced("</svg>").is_err());
        assert_eq!(balanced(r#"<svg><line x="1"/></svg>"#), Ok(2));
    }

    #[test]
    fn nice_axis_bounds() {
        assert_eq!(nice_max(0.0), 1.0);
        assert_eq!(nice_max(3.0), 5.0);
        assert_eq!(nice_max(120.0), 200.0);
        assert_eq!(nice_max(1000.0), 1000.0);
        assert_eq!(short(1_234_567.0), "1.2M");
    }
}
