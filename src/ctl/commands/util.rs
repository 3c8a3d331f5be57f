//! Parsing and printing shared by the client commands.
//!
//! Operators type the units they know from the `nats` tooling and nats-server configs — Go-style
//! durations (`1h30m`, `500ms`, plus `d`/`w`), sizes (`1GB`, `512MiB`, binary multiples as the
//! server's own config does) and counts with `_` separators — so every flag accepts them, and
//! tables print the same units back.

use std::time::Duration;

use anyhow::{anyhow, bail};

/// Parses a Go-style duration (`1h30m`, `1.5s`, `500ms`, `7d`, `2w`, `0`): the server's own
/// grammar ([`crate::timefmt::cli_duration`]), surrounding blanks allowed, negatives refused.
///
/// # Errors
/// Empty input, a number without a unit, an unknown unit, overflow, a negative duration.
pub fn parse_duration(s: &str) -> anyhow::Result<Duration> {
    let nanos = crate::timefmt::cli_duration(s.trim()).map_err(|e| anyhow!(e))?;
    u64::try_from(nanos)
        .map(Duration::from_nanos)
        .map_err(|_| anyhow!("duration {s:?} is negative"))
}

/// [`parse_duration`] in nanoseconds, as the JetStream API wants it.
///
/// # Errors
/// As [`parse_duration`].
pub fn parse_duration_ns(s: &str) -> anyhow::Result<i64> {
    i64::try_from(parse_duration(s)?.as_nanos()).map_err(|_| anyhow!("duration {s:?} too large"))
}

/// Parses an integer count: `1000000`, `1_000_000`, `1,000,000`, `-1`.
///
/// # Errors
/// Not a number.
pub fn parse_count(s: &str) -> anyhow::Result<i64> {
    let clean: String = s.chars().filter(|c| *c != '_' && *c != ',').collect();
    clean
        .trim()
        .parse()
        .map_err(|_| anyhow!("{s:?} is not a number"))
}

/// Parses a size: `1024`, `1K`/`1KB`/`1KiB` (1024), `1MB`, `1GB`, `1TB`, `-1` (unlimited).
///
/// # Errors
/// Unknown suffix, not a number, overflow.
pub fn parse_size(s: &str) -> anyhow::Result<i64> {
    let t: String = s.chars().filter(|c| *c != '_' && *c != ',').collect();
    let t = t.trim();
    if t == "-1" {
        return Ok(-1);
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| anyhow!("size {s:?}: bad number"))?;
    let mult: f64 = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 1.0,
        "K" | "KB" | "KIB" => 1024.0,
        "M" | "MB" | "MIB" => 1024.0 * 1024.0,
        "G" | "GB" | "GIB" => 1024.0 * 1024.0 * 1024.0,
        "T" | "TB" | "TIB" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        other => bail!("size {s:?}: unknown unit {other:?}"),
    };
    let v = (n * mult).round();
    if !v.is_finite() || v > i64::MAX as f64 {
        bail!("size {s:?} is too large");
    }
    Ok(v as i64)
}

/// `119 B`, `1.5 KiB`, `2.0 GiB`.
pub fn fmt_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    format!("{v:.1} {}", UNITS[i])
}

/// A byte limit as JSON gives it: `-1`/`0` → `unlimited`.
pub fn fmt_limit_bytes(v: i64) -> String {
    if v <= 0 {
        "unlimited".into()
    } else {
        fmt_bytes(v.unsigned_abs())
    }
}

/// A count limit: `-1`/`0` → `unlimited`.
pub fn fmt_limit(v: i64) -> String {
    if v <= 0 {
        "unlimited".into()
    } else {
        v.to_string()
    }
}

/// Nanoseconds as `3d`, `1h30m`, `2m`, `500ms`; `0` → `zero`.
pub fn fmt_duration_ns(ns: i64) -> String {
    if ns <= 0 {
        return "0s".into();
    }
    let ns = ns.unsigned_abs();
    let mut out = String::new();
    let mut rest_ms = ns / 1_000_000;
    if rest_ms == 0 {
        return format!("{}µs", ns / 1000);
    }
    for (unit, size) in [
        ("d", 86_400_000u64),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
        ("ms", 1),
    ] {
        let q = rest_ms / size;
        if q > 0 {
            out.push_str(&format!("{q}{unit}"));
            rest_ms %= size;
        }
    }
    out
}

/// Prints labelled lines with the values aligned.
pub fn print_section(title: &str, rows: &[(&str, String)]) {
    println!("{title}:");
    let w = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in rows {
        println!("  {:<w$} {v}", format!("{k}:"), w = w + 1);
    }
    println!();
}

/// Prints an aligned table with a header row.
pub fn print_table(headers: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(c.chars().count());
            }
        }
    }
    let line = |cells: Vec<String>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            let w = widths.get(i).copied().unwrap_or(0);
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  "));
            }
        }
        println!("{}", s.trim_end());
    };
    line(headers.iter().map(|h| (*h).to_owned()).collect());
    for r in rows {
        line(r.clone());
    }
}

/// Replaces `{{Count}}`, `{{TimeStamp}}` (RFC 3339), `{{Unix}}` and, when given,
/// `{{Request}}` (spaces inside the braces allowed).
pub fn render_template(body: &str, count: u64, request: Option<&str>) -> String {
    if !body.contains("{{") {
        return body.to_owned();
    }
    let now = time::OffsetDateTime::now_utc();
    let mut out = String::with_capacity(body.len());
    let mut rest = body;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            out.push_str(&rest[start..]);
            return out;
        };
        let name = after[..end].trim();
        match name {
            "Count" | "count" => out.push_str(&count.to_string()),
            "TimeStamp" | "Timestamp" | "timestamp" => out.push_str(
                &now.format(&time::format_description::well_known::Rfc3339)
                    .unwrap_or_default(),
            ),
            "Unix" | "unix" => out.push_str(&now.unix_timestamp().to_string()),
            "Request" if request.is_some() => out.push_str(request.unwrap_or_default()),
            _ => {
                out.push_str("{{");
                out.push_str(&after[..end]);
                out.push_str("}}");
            }
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    out
}

/// Parses `-H key:value` flags into a header map.
///
/// # Errors
/// A header without `:`.
pub fn parse_headers(hs: &[String]) -> anyhow::Result<Option<async_nats::HeaderMap>> {
    if hs.is_empty() {
        return Ok(None);
    }
    let mut map = async_nats::HeaderMap::new();
    for h in hs {
        let (k, v) = h
            .split_once(':')
            .ok_or_else(|| anyhow!("header {h:?} must be key:value"))?;
        map.append(k.trim(), v.trim());
    }
    Ok(Some(map))
}

/// Headers as JSON (`{"Key":["v1","v2"]}`) for `--json` output.
pub fn headers_json(h: Option<&async_nats::HeaderMap>) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    if let Some(h) = h {
        for (k, vs) in h.iter() {
            let vals: Vec<serde_json::Value> =
                vs.iter().map(|v| v.as_str().to_owned().into()).collect();
            m.insert(k.to_string(), vals.into());
        }
    }
    serde_json::Value::Object(m)
}

/// Prints headers as `Key: value` lines.
pub fn print_headers(h: Option<&async_nats::HeaderMap>) {
    if let Some(h) = h {
        for (k, vs) in h.iter() {
            for v in vs {
                println!("{k}: {}", v.as_str());
            }
        }
    }
}

/// What a `$JS.ACK` reply subject says about a delivery.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AckInfo {
    /// Delivery count of this message.
    pub delivered: u64,
    /// Stream sequence.
    pub stream_seq: u64,
    /// Consumer sequence.
    pub consumer_seq: u64,
    /// Messages still pending after this one.
    pub pending: u64,
}

/// What an ack subject says about a delivery (the codec is `jetstream::ack_subject`).
pub fn parse_ack_subject(s: &str) -> Option<AckInfo> {
    let a = crate::jetstream::ack_subject::AckSubject::parse(s)?;
    Some(AckInfo {
        delivered: a.delivered,
        stream_seq: a.stream_seq,
        consumer_seq: a.consumer_seq,
        pending: a.pending,
    })
}

/// Reads a JSON integer field (missing → 0).
pub fn ji(v: &serde_json::Value, key: &str) -> i64 {
    v.get(key).and_then(serde_json::Value::as_i64).unwrap_or(0)
}

/// Reads a JSON unsigned field (missing → 0).
pub fn ju(v: &serde_json::Value, key: &str) -> u64 {
    v.get(key).and_then(serde_json::Value::as_u64).unwrap_or(0)
}

/// Reads a JSON string field (missing → empty).
pub fn js<'a>(v: &'a serde_json::Value, key: &str) -> &'a str {
    v.get(key).and_then(serde_json::Value::as_str).unwrap_or("")
}

/// Reads a JSON bool field (missing → false).
pub fn jb(v: &serde_json::Value, key: &str) -> bool {
    v.get(key)
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false)
}

/// Payload bytes for a terminal: UTF-8 as is, anything else as a lossy string.
pub fn show_payload(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("1h").ok(), Some(Duration::from_secs(3600)));
        assert_eq!(
            parse_duration("1h30m").ok(),
            Some(Duration::from_secs(5400))
        );
        assert_eq!(
            parse_duration("7d").ok(),
            Some(Duration::from_secs(7 * 86400))
        );
        assert_eq!(
            parse_duration("500ms").ok(),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            parse_duration("1.5s").ok(),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(parse_duration("0").ok(), Some(Duration::ZERO));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("1x").is_err());
        assert_eq!(parse_duration_ns("30s").ok(), Some(30_000_000_000));
        assert_eq!(fmt_duration_ns(5_400_000_000_000), "1h30m");
        assert_eq!(fmt_duration_ns(120_000_000_000), "2m");
        assert_eq!(fmt_duration_ns(3 * 86_400_000_000_000), "3d");
    }

    #[test]
    fn sizes_and_counts() {
        assert_eq!(parse_size("1GB").ok(), Some(1 << 30));
        assert_eq!(parse_size("512MiB").ok(), Some(512 << 20));
        assert_eq!(parse_size("1k").ok(), Some(1024));
        assert_eq!(parse_size("100").ok(), Some(100));
        assert_eq!(parse_size("-1").ok(), Some(-1));
        assert!(parse_size("1XB").is_err());
        assert_eq!(parse_count("1_000_000").ok(), Some(1_000_000));
        assert_eq!(parse_count("-1").ok(), Some(-1));
        assert_eq!(fmt_bytes(119), "119 B");
        assert_eq!(fmt_bytes(1536), "1.5 KiB");
    }

    #[test]
    fn templates() {
        assert_eq!(render_template("n={{Count}}", 3, None), "n=3");
        assert_eq!(render_template("n={{ Count }}!", 7, None), "n=7!");
        assert!(!render_template("{{TimeStamp}}", 1, None).contains('{'));
        assert_eq!(render_template("{{Other}}", 1, None), "{{Other}}");
        assert_eq!(render_template("re: {{Request}}", 1, Some("hi")), "re: hi");
    }

    #[test]
    fn ack_subjects() {
        let a = parse_ack_subject("$JS.ACK.ORDERS.proc.1.2.3.1795942996807618822.4");
        assert_eq!(
            a,
            Some(AckInfo {
                delivered: 1,
                stream_seq: 2,
                consumer_seq: 3,
                pending: 4
            })
        );
        let b = parse_ack_subject("$JS.ACK.dom.ACCHASH.ORDERS.proc.2.5.6.179594.0.tok");
        assert_eq!(b.map(|x| x.stream_seq), Some(5));
        assert_eq!(parse_ack_subject("foo.bar"), None);
    }
}
