//! Time and duration text in the forms nats-server and its clients use — the one home for both.
//!
//! A leaf: the config language (`2m`, `1h30m`), the JetStream engine, monitoring and `sealctl`
//! all read and write durations and timestamps through it, so a rule (a unit, a limit, an
//! error text) changes in one place.
//!
//! Timestamps go out as RFC 3339 UTC with up to nine fractional digits (trailing zeros trimmed)
//! and `Z`, and "never" is the zero time `0001-01-01T00:00:00Z` (spec §1). Durations are
//! nanoseconds in JSON, but some places carry Go duration text: the `Nats-TTL` header (§5.3),
//! `-NAK <duration>` ack bodies (§6.6) and the `Exceeded MaxRequestExpires of 2s` status (§7.3).
//! Clients written in Go produce and expect exactly that text, so this module reads and writes
//! it with the same rules (units `ns`, `us`/`µs`, `ms`, `s`, `m`, `h`; `1h0m0s`-style output).

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// The text of the zero ("never") time.
pub const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// The zero time `0001-01-01T00:00:00Z` as Unix nanoseconds. It does not fit an `i64`, which is
/// why `0` stands for it in [`rfc3339_nanos`] and [`parse_rfc3339`].
const ZERO_TIME_UNIX_NANOS: i128 = -62_135_596_800 * NANOS_PER_SEC as i128;

const NANOS_PER_MICRO: u64 = 1_000;
const NANOS_PER_MILLI: u64 = 1_000_000;
const NANOS_PER_SEC: u64 = 1_000_000_000;
const NANOS_PER_MIN: u64 = 60 * NANOS_PER_SEC;
const NANOS_PER_HOUR: u64 = 60 * NANOS_PER_MIN;

/// Formats Unix nanoseconds as RFC 3339 UTC: `2026-11-29T09:03:16.306518482Z`, fractional digits
/// trimmed of trailing zeros (none at all on a whole second). `0` means "never" and gives
/// `0001-01-01T00:00:00Z`.
pub fn rfc3339_nanos(unix_nanos: i64) -> String {
    if unix_nanos == 0 {
        return ZERO_TIME.to_string();
    }
    // Every i64 of nanoseconds (years 1677..2262) is inside `time`'s range; the fallback is
    // unreachable but keeps this total.
    let Ok(t) = OffsetDateTime::from_unix_timestamp_nanos(i128::from(unix_nanos)) else {
        return ZERO_TIME.to_string();
    };
    let mut out = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    );
    push_fraction(&mut out, u64::from(t.nanosecond()), 9);
    out.push('Z');
    out
}

/// Formats a wall-clock time as RFC 3339 UTC (as `/varz` and `$SYS` events show times).
pub fn rfc3339_system(t: std::time::SystemTime) -> String {
    OffsetDateTime::from(t).format(&Rfc3339).unwrap_or_default()
}

/// Parses RFC 3339 text (any offset, optional fraction) to Unix nanoseconds. The zero time
/// gives `0` (the inverse of [`rfc3339_nanos`]); other times outside the `i64` range give `None`.
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let t = OffsetDateTime::parse(s, &Rfc3339).ok()?;
    let nanos = t.unix_timestamp_nanos();
    if nanos == ZERO_TIME_UNIX_NANOS {
        return Some(0);
    }
    i64::try_from(nanos).ok()
}

/// The nanoseconds in one unit of Go duration text, or `None` for an unknown unit.
fn unit_nanos(unit: &str) -> Option<u64> {
    Some(match unit {
        "ns" => 1,
        // Go accepts both micro signs (U+00B5 and U+03BC) besides `us`.
        "us" | "\u{b5}s" | "\u{3bc}s" => NANOS_PER_MICRO,
        "ms" => NANOS_PER_MILLI,
        "s" => NANOS_PER_SEC,
        "m" => NANOS_PER_MIN,
        "h" => NANOS_PER_HOUR,
        _ => return None,
    })
}

/// Parses Go duration text (`5s`, `1h30m`, `200ms`, `1.5s`, `300us`, `-2m`, `0`) to
/// nanoseconds. Every number needs a unit except a lone `0`. Out-of-range values give `None`.
pub fn parse_go_duration(s: &str) -> Option<i64> {
    go_duration(s).ok()
}

/// [`parse_go_duration`], with the reason worded as Go words it
/// (`time: unknown unit "x" in duration "2x"`).
///
/// # Errors
/// The reason.
pub fn go_duration(text: &str) -> Result<i64, String> {
    parse_duration(text, unit_nanos)
}

/// A duration as an operator types it on `sealctl`'s command line: Go's units plus `d` (24 h),
/// `w` (7 d) and `y` (365 d), as the `nats` CLI accepts them (`7d`, `2w`).
///
/// # Errors
/// The reason, worded as [`go_duration`] words it.
pub fn cli_duration(text: &str) -> Result<i64, String> {
    parse_duration(text, |unit| match unit {
        "d" => Some(24 * NANOS_PER_HOUR),
        "w" => Some(7 * 24 * NANOS_PER_HOUR),
        "y" => Some(365 * 24 * NANOS_PER_HOUR),
        _ => unit_nanos(unit),
    })
}

/// The grammar Go's `time.ParseDuration` reads: `[-+]?` then `(\d+(\.\d*)?|\.\d+)unit`
/// repeated, or a lone `0`; the magnitude at most 2^63 ns when negative, 2^63 - 1 otherwise.
fn parse_duration(text: &str, units: impl Fn(&str) -> Option<u64>) -> Result<i64, String> {
    let invalid = || format!("time: invalid duration \"{text}\"");
    let (negative, mut rest) = match text.as_bytes().first() {
        Some(b'-') => (true, text.get(1..).unwrap_or_default()),
        Some(b'+') => (false, text.get(1..).unwrap_or_default()),
        _ => (false, text),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    // Magnitude in nanoseconds; u128 so that sums of in-range parts cannot overflow.
    let limit: u128 = if negative { 1 << 63 } else { (1 << 63) - 1 };
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_digits, after_int) = rest.split_at(int_len);
        let (frac_digits, after_num) = match after_int.strip_prefix('.') {
            Some(r) => {
                let n = r.bytes().take_while(u8::is_ascii_digit).count();
                r.split_at(n)
            }
            None => ("", after_int),
        };
        if int_digits.is_empty() && frac_digits.is_empty() {
            return Err(invalid());
        }
        let unit_len = after_num
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(after_num.len());
        let (unit, after_unit) = after_num.split_at(unit_len);
        if unit.is_empty() {
            return Err(format!("time: missing unit in duration \"{text}\""));
        }
        let per_unit = u128::from(
            units(unit)
                .ok_or_else(|| format!("time: unknown unit \"{unit}\" in duration \"{text}\""))?,
        );
        let mut whole: u128 = 0;
        for d in int_digits.bytes() {
            whole = whole
                .checked_mul(10)
                .and_then(|w| w.checked_add(u128::from(d - b'0')))
                .filter(|w| *w <= u128::from(u64::MAX))
                .ok_or_else(invalid)?;
        }
        let mut part = whole.checked_mul(per_unit).ok_or_else(invalid)?;
        // The fraction: digits beyond what a nanosecond can resolve are dropped (truncation).
        let mut numerator: u128 = 0;
        let mut scale: u128 = 1;
        for d in frac_digits.bytes().take(18) {
            numerator = numerator * 10 + u128::from(d - b'0');
            scale *= 10;
        }
        part = part
            .checked_add(numerator * per_unit / scale)
            .ok_or_else(invalid)?;
        total = total
            .checked_add(part)
            .filter(|t| *t <= limit)
            .ok_or_else(invalid)?;
        rest = after_unit;
    }
    let signed = i128::try_from(total).map_err(|_| invalid())?;
    i64::try_from(if negative { -signed } else { signed }).map_err(|_| invalid())
}

/// Appends `.ddd` for `frac` (a value below `10^digits`) with trailing zeros trimmed; nothing
/// when `frac` is zero.
fn push_fraction(out: &mut String, frac: u64, digits: usize) {
    if frac == 0 {
        return;
    }
    let text = format!("{frac:0digits$}");
    out.push('.');
    out.push_str(text.trim_end_matches('0'));
}

/// Formats nanoseconds as Go duration text: `0s`, `10ns`, `1.5µs`, `500ms`, `2s`, `1m30s`,
/// `1h0m0s`, `-2s`.
pub fn format_go_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".to_string();
    }
    let mut out = String::new();
    if nanos < 0 {
        out.push('-');
    }
    let u = nanos.unsigned_abs();
    if u < NANOS_PER_SEC {
        if u < NANOS_PER_MICRO {
            out.push_str(&format!("{u}ns"));
        } else if u < NANOS_PER_MILLI {
            out.push_str(&(u / NANOS_PER_MICRO).to_string());
            push_fraction(&mut out, u % NANOS_PER_MICRO, 3);
            out.push_str("\u{b5}s");
        } else {
            out.push_str(&(u / NANOS_PER_MILLI).to_string());
            push_fraction(&mut out, u % NANOS_PER_MILLI, 6);
            out.push_str("ms");
        }
        return out;
    }
    let hours = u / NANOS_PER_HOUR;
    let minutes = (u % NANOS_PER_HOUR) / NANOS_PER_MIN;
    let secs = (u % NANOS_PER_MIN) / NANOS_PER_SEC;
    let frac = u % NANOS_PER_SEC;
    if hours > 0 {
        out.push_str(&format!("{hours}h"));
    }
    if hours > 0 || minutes > 0 {
        out.push_str(&format!("{minutes}m"));
    }
    out.push_str(&secs.to_string());
    push_fraction(&mut out, frac, 9);
    out.push('s');
    out
}

/// Parses a `Nats-TTL` header value to nanoseconds: a Go duration of at least one second, a
/// bare positive integer of seconds, or `never` (gives `Some(-1)`). Anything else, including
/// zero and sub-second durations, is invalid (`None`).
pub fn parse_msg_ttl(s: &str) -> Option<i64> {
    if s == "never" {
        return Some(-1);
    }
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        let secs: i64 = s.parse().ok()?;
        if secs < 1 {
            return None;
        }
        return secs.checked_mul(NANOS_PER_SEC as i64);
    }
    let nanos = parse_go_duration(s)?;
    (nanos >= NANOS_PER_SEC as i64).then_some(nanos)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_output() {
        assert_eq!(rfc3339_nanos(0), "0001-01-01T00:00:00Z");
        assert_eq!(
            rfc3339_nanos(1_795_942_996_807_618_822),
            "2026-11-29T09:03:16.807618822Z"
        );
        assert_eq!(rfc3339_nanos(1_000_000_000), "1970-01-01T00:00:01Z");
        assert_eq!(rfc3339_nanos(1_500_000_000), "1970-01-01T00:00:01.5Z");
        assert_eq!(
            rfc3339_nanos(1_000_000_010),
            "1970-01-01T00:00:01.00000001Z"
        );
        assert_eq!(rfc3339_nanos(-1_000_000_000), "1969-12-31T23:59:59Z");
        assert_eq!(rfc3339_nanos(i64::MAX), "2262-04-11T23:47:16.854775807Z");
    }

    #[test]
    fn rfc3339_parse_and_round_trip() {
        for n in [
            1i64,
            1_795_942_996_807_618_822,
            1_795_942_996_000_000_000,
            1_795_942_996_300_000_000,
            -5_000_000_123,
            i64::MAX,
        ] {
            assert_eq!(parse_rfc3339(&rfc3339_nanos(n)), Some(n), "{n}");
        }
        assert_eq!(parse_rfc3339("0001-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339("2026-11-29T10:03:16.5+01:00"),
            Some(1_795_942_996_500_000_000)
        );
        assert_eq!(parse_rfc3339("1970-01-01T00:00:01Z"), Some(1_000_000_000));
        assert_eq!(parse_rfc3339("not a time"), None);
        assert_eq!(parse_rfc3339("2026-11-29"), None);
        assert_eq!(parse_rfc3339("1500-01-01T00:00:00Z"), None);
    }

    #[test]
    fn go_duration_parse() {
        let cases = [
            ("0", 0),
            ("5s", 5_000_000_000),
            ("1h30m", 5_400_000_000_000),
            ("200ms", 200_000_000),
            ("1.5s", 1_500_000_000),
            (".5s", 500_000_000),
            ("1.s", 1_000_000_000),
            ("300us", 300_000),
            ("300\u{b5}s", 300_000),
            ("300\u{3bc}s", 300_000),
            ("10ns", 10),
            ("-2m", -120_000_000_000),
            ("+3s", 3_000_000_000),
            ("1h2m3.004005006s", 3_723_004_005_006),
            ("0s", 0),
            ("2562047h47m16.854775807s", i64::MAX),
            ("-2562047h47m16.854775808s", i64::MIN),
        ];
        for (text, want) in cases {
            assert_eq!(parse_go_duration(text), Some(want), "{text}");
        }
        for bad in [
            "",
            "-",
            "5",
            "s",
            "5x",
            "1.5",
            ".s",
            "5 s",
            "2562047h47m16.854775808s",
            "99999999999999999999h",
        ] {
            assert_eq!(parse_go_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn go_duration_errors_are_worded_as_go_words_them() {
        assert_eq!(
            go_duration("2x").unwrap_err(),
            "time: unknown unit \"x\" in duration \"2x\""
        );
        assert_eq!(
            go_duration("5").unwrap_err(),
            "time: missing unit in duration \"5\""
        );
        assert_eq!(go_duration("").unwrap_err(), "time: invalid duration \"\"");
        assert!(go_duration("99999999999h").is_err());
    }

    #[test]
    fn cli_durations_add_days_weeks_and_years() {
        assert_eq!(cli_duration("7d"), Ok(7 * 86_400_000_000_000));
        assert_eq!(cli_duration("2w"), Ok(14 * 86_400_000_000_000));
        assert_eq!(cli_duration("1y"), Ok(365 * 86_400_000_000_000));
        assert_eq!(cli_duration("1d12h"), Ok(36 * 3_600_000_000_000));
        assert_eq!(cli_duration("1.5s"), Ok(1_500_000_000));
        assert!(go_duration("7d").is_err());
        assert!(cli_duration("7q").is_err());
    }

    #[test]
    fn go_duration_format() {
        let cases = [
            (0, "0s"),
            (10, "10ns"),
            (1_500, "1.5\u{b5}s"),
            (500_000_000, "500ms"),
            (1_250_000, "1.25ms"),
            (2_000_000_000, "2s"),
            (1_500_000_000, "1.5s"),
            (90_000_000_000, "1m30s"),
            (60_000_000_000, "1m0s"),
            (3_600_000_000_000, "1h0m0s"),
            (5_400_000_000_000, "1h30m0s"),
            (-2_000_000_000, "-2s"),
            (i64::MIN, "-2562047h47m16.854775808s"),
        ];
        for (n, want) in cases {
            assert_eq!(format_go_duration(n), want, "{n}");
            assert_eq!(parse_go_duration(want), Some(n), "{want}");
        }
    }

    #[test]
    fn msg_ttl() {
        assert_eq!(parse_msg_ttl("never"), Some(-1));
        assert_eq!(parse_msg_ttl("5s"), Some(5_000_000_000));
        assert_eq!(parse_msg_ttl("1h30m"), Some(5_400_000_000_000));
        assert_eq!(parse_msg_ttl("60"), Some(60_000_000_000));
        assert_eq!(parse_msg_ttl("1s"), Some(1_000_000_000));
        for bad in [
            "",
            "0",
            "500ms",
            "0s",
            "-5s",
            "-1",
            "abc",
            "Never",
            "99999999999999999999",
        ] {
            assert_eq!(parse_msg_ttl(bad), None, "{bad}");
        }
    }
}
