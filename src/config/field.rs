//! Typed reads of parsed entries, shared by `options.rs` and `accounts.rs`.
//!
//! Each reader takes an [`Entry`] (or an array element) and either returns the Rust value or
//! a [`ConfigError`] located at the key, naming the field and what it expects:
//! `invalid value for field "port": expected an integer`. Durations follow Go's
//! `time.ParseDuration` grammar (`"1m30s"`, `"500ms"`, `"1.5h"`, `"300us"`/`"µs"`), because
//! that is what existing configuration files contain.

use std::path::PathBuf;
use std::time::Duration;

use super::error::{ConfigError, ConfigErrorKind, Location};
use super::lex::parse_size;
use super::parse::{Entry, Map, Value, ValueKind};

/// Side outputs collected while mapping a tree: warnings that `-t` turns into failures, and
/// the dotted paths of keys that are accepted but not supported.
#[derive(Debug, Default)]
pub(super) struct Collected {
    pub(super) warnings: Vec<ConfigError>,
    pub(super) ignored: Vec<String>,
}

impl Collected {
    pub(super) fn ignore(&mut self, path: impl Into<String>) {
        self.ignored.push(path.into());
    }
}

/// The key of `entry`, lower-cased for matching.
pub(super) fn key(entry: &Entry) -> String {
    entry.key.to_ascii_lowercase()
}

pub(super) fn invalid_value(entry: &Entry, expected: &str) -> ConfigError {
    ConfigError::new(
        entry.key_location.clone(),
        ConfigErrorKind::InvalidValue {
            field: entry.key.clone(),
            expected: expected.to_string(),
        },
    )
}

pub(super) fn invalid_item(location: &Location, field: &str, expected: &str) -> ConfigError {
    ConfigError::new(
        location.clone(),
        ConfigErrorKind::InvalidValue {
            field: field.to_string(),
            expected: expected.to_string(),
        },
    )
}

pub(super) fn invalid(entry: &Entry, reason: impl Into<String>) -> ConfigError {
    ConfigError::invalid(entry.key_location.clone(), reason)
}

pub(super) fn unknown(entry: &Entry) -> ConfigError {
    ConfigError::new(
        entry.key_location.clone(),
        ConfigErrorKind::UnknownField(entry.key.clone()),
    )
}

/// Unknown key, unless it only exists to be used as a `$variable`.
pub(super) fn unknown_unless_variable(entry: &Entry) -> Result<(), ConfigError> {
    if entry.used_as_variable {
        Ok(())
    } else {
        Err(unknown(entry))
    }
}

pub(super) fn int(entry: &Entry) -> Result<i64, ConfigError> {
    match entry.value.kind {
        ValueKind::Integer(n) => Ok(n),
        _ => Err(invalid_value(entry, "an integer")),
    }
}

pub(super) fn int32(entry: &Entry) -> Result<i32, ConfigError> {
    i32::try_from(int(entry)?).map_err(|_| invalid_value(entry, "a 32-bit integer"))
}

pub(super) fn boolean(entry: &Entry) -> Result<bool, ConfigError> {
    match entry.value.kind {
        ValueKind::Bool(b) => Ok(b),
        _ => Err(invalid_value(entry, "a boolean")),
    }
}

pub(super) fn string(entry: &Entry) -> Result<String, ConfigError> {
    match &entry.value.kind {
        ValueKind::String(s) => Ok(s.clone()),
        _ => Err(invalid_value(entry, "a string")),
    }
}

pub(super) fn path(entry: &Entry) -> Result<PathBuf, ConfigError> {
    string(entry).map(PathBuf::from)
}

pub(super) fn map(entry: &Entry) -> Result<&Map, ConfigError> {
    entry
        .value
        .as_map()
        .ok_or_else(|| invalid_value(entry, "a map"))
}

/// A string or an array of strings (a lone string is a one-element list).
pub(super) fn string_list(entry: &Entry) -> Result<Vec<String>, ConfigError> {
    value_string_list(&entry.value, &entry.key)
}

pub(super) fn value_string_list(value: &Value, field: &str) -> Result<Vec<String>, ConfigError> {
    match &value.kind {
        ValueKind::String(s) => Ok(vec![s.clone()]),
        ValueKind::Array(items) => items
            .iter()
            .map(|item| match &item.kind {
                ValueKind::String(s) => Ok(s.clone()),
                _ => Err(invalid_item(&item.location, field, "a list of strings")),
            })
            .collect(),
        _ => Err(invalid_item(
            &value.location,
            field,
            "a string or a list of strings",
        )),
    }
}

/// An integer, or a string with a size suffix (`"1G"`).
pub(super) fn size(entry: &Entry) -> Result<i64, ConfigError> {
    match &entry.value.kind {
        ValueKind::Integer(n) => Ok(*n),
        // nats-server reads an empty size string as 0.
        ValueKind::String(s) if s.is_empty() => Ok(0),
        ValueKind::String(s) => {
            parse_size(s).ok_or_else(|| invalid_value(entry, "a size such as 1GB"))
        }
        _ => Err(invalid_value(entry, "a size such as 1GB")),
    }
}

/// A duration option. Strings use Go syntax. A bare integer means seconds when
/// `seconds_ok`, and is recorded as a warning (nats-server's `-t` rejects it).
pub(super) fn duration(
    entry: &Entry,
    seconds_ok: bool,
    collected: &mut Collected,
) -> Result<Duration, ConfigError> {
    match &entry.value.kind {
        ValueKind::String(s) => parse_go_duration(s)
            .map_err(|reason| invalid(entry, format!("error parsing {}: {reason}", entry.key))),
        ValueKind::Integer(n) if seconds_ok => {
            let secs = u64::try_from(*n)
                .map_err(|_| invalid(entry, format!("{} must not be negative", entry.key)))?;
            collected.warnings.push(ConfigError::new(
                entry.key_location.clone(),
                ConfigErrorKind::InvalidUse {
                    field: entry.key.clone(),
                    reason: format!("{} should be converted to a duration", entry.key),
                },
            ));
            Ok(Duration::from_secs(secs))
        }
        _ => Err(invalid_value(entry, "a duration string such as \"2m\"")),
    }
}

/// Seconds as an integer or float (`timeout: 0.5`), or a duration string (`"2s"`).
pub(super) fn seconds(entry: &Entry) -> Result<Duration, ConfigError> {
    let negative = || invalid(entry, format!("{} must not be negative", entry.key));
    match &entry.value.kind {
        ValueKind::Integer(n) => u64::try_from(*n)
            .map(Duration::from_secs)
            .map_err(|_| negative()),
        ValueKind::Float(f) => {
            if *f < 0.0 {
                return Err(negative());
            }
            Duration::try_from_secs_f64(*f).map_err(|_| invalid_value(entry, "a number of seconds"))
        }
        ValueKind::String(s) => parse_go_duration(s)
            .map_err(|reason| invalid(entry, format!("error parsing {}: {reason}", entry.key))),
        _ => Err(invalid_value(
            entry,
            "a number of seconds or a duration string",
        )),
    }
}

/// Parses a Go duration string ([`crate::timefmt::go_duration`]'s grammar and error texts).
/// Negative durations are refused because options hold `std::time::Duration`.
///
/// # Errors
/// A reason worded like Go's (`time: unknown unit "x" in duration "2x"`).
pub fn parse_go_duration(text: &str) -> Result<Duration, String> {
    let nanos = crate::timefmt::go_duration(text)?;
    u64::try_from(nanos)
        .map(Duration::from_nanos)
        .map_err(|_| format!("negative duration \"{text}\" is not supported"))
}

/// A `listen`-style value: a port, or `host:port`.
pub(super) fn host_port(e: &Entry) -> Result<(Option<String>, i32), ConfigError> {
    match &e.value.kind {
        ValueKind::Integer(_) => Ok((None, int32(e)?)),
        ValueKind::String(s) => split_host_port(s)
            .ok_or_else(|| invalid(e, format!("could not parse address string \"{s}\""))),
        _ => Err(invalid_value(e, "a port or host:port")),
    }
}

/// Splits `host:port`, `:port` or `[v6]:port`. `None` when there is no numeric port.
pub(super) fn split_host_port(text: &str) -> Option<(Option<String>, i32)> {
    let (host, port) = text.rsplit_once(':')?;
    let port: i32 = port.parse().ok()?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let host = if host.is_empty() {
        None
    } else {
        Some(host.to_string())
    };
    Some((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse_like_go() {
        let ok = [
            ("2m", Duration::from_secs(120)),
            ("1m30s", Duration::from_secs(90)),
            ("500ms", Duration::from_millis(500)),
            ("1h", Duration::from_secs(3600)),
            ("1.5s", Duration::from_millis(1500)),
            ("300us", Duration::from_micros(300)),
            ("300µs", Duration::from_micros(300)),
            ("7ns", Duration::from_nanos(7)),
            (".5s", Duration::from_millis(500)),
            ("1.5h2m", Duration::from_secs(5520)),
            ("0", Duration::ZERO),
            ("0s", Duration::ZERO),
        ];
        for (text, want) in ok {
            assert_eq!(parse_go_duration(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn bad_durations_explain_themselves() {
        assert_eq!(
            parse_go_duration("2x").unwrap_err(),
            "time: unknown unit \"x\" in duration \"2x\""
        );
        assert_eq!(
            parse_go_duration("5").unwrap_err(),
            "time: missing unit in duration \"5\""
        );
        assert!(parse_go_duration("").is_err());
        assert!(parse_go_duration("never").is_err());
        assert!(parse_go_duration("-1s").unwrap_err().contains("negative"));
        assert!(parse_go_duration("99999999999h").is_err());
    }
}
