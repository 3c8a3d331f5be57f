//! Message schedules (ADR-51, `allow_msg_schedules`): a stored message whose headers carry
//! `Nats-Schedule` makes the stream publish a new message into itself, on its
//! `Nats-Schedule-Target`, at the times the pattern names.
//!
//! A schedule is an ordinary stored message; its subject is its identity (it is stored with
//! `Nats-Rollup: sub`, so publishing again on the subject replaces it, and deleting or purging
//! it cancels it). This module is pure: it parses and checks the headers, works out fire
//! times against an injected clock, builds the message a firing produces, and keeps the index
//! of armed schedules by due time. [`super::stream::Stream`] stores, fires and removes.
//!
//! Patterns, as nats-server 2.15 accepts them:
//! - `@at <RFC 3339>` — once; the schedule message is removed after it fired (a time in the
//!   past fires at once). The produced message says `Nats-Schedule-Next: purge`.
//! - `@every <Go duration>` — at least one second; fires on whole seconds from the time it is
//!   armed.
//! - six-field cron (`sec min hour day-of-month month day-of-week`: `*`, `?`, lists, ranges,
//!   steps, `jan`–`dec`, `sun`–`sat`; day of month and day of week match either when both are
//!   restricted) and the aliases `@yearly`/`@annually`, `@monthly`, `@weekly`,
//!   `@daily`/`@midnight`, `@hourly` — in UTC, or in `Nats-Schedule-Time-Zone` (an IANA name,
//!   `UTC` or `Local`; cron only).
//!
//! The produced message keeps the schedule's payload and headers (or, with
//! `Nats-Schedule-Source`, those of the newest message on that subject), without the
//! schedule's own control headers, and adds `Nats-Scheduler: <schedule subject>`,
//! `Nats-Schedule-Next`, `Nats-TTL` (from `Nats-Schedule-TTL`) and `Nats-Rollup: sub` (from
//! `Nats-Schedule-Rollup: sub`).

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use jiff::civil::{Date, DateTime};
use jiff::tz::TimeZone;

use super::api::errors::ErrorKind;
use super::api::ApiError;
use crate::proto::headers::HeaderMap;
use crate::timefmt::{parse_go_duration, parse_msg_ttl, parse_rfc3339, rfc3339_nanos};

/// The header that makes a message a schedule.
pub const SCHEDULE: &str = "Nats-Schedule";
/// Where a firing publishes.
pub const TARGET: &str = "Nats-Schedule-Target";
/// Whose newest message a firing copies (subject sampling).
pub const SOURCE: &str = "Nats-Schedule-Source";
/// The TTL of what a firing publishes.
pub const TTL: &str = "Nats-Schedule-TTL";
/// `sub`: what a firing publishes rolls up its subject.
pub const ROLLUP: &str = "Nats-Schedule-Rollup";
/// The zone a cron pattern runs in.
pub const TIME_ZONE: &str = "Nats-Schedule-Time-Zone";
/// Set by the server on what a firing publishes: the schedule's subject.
pub const SCHEDULER: &str = "Nats-Scheduler";
/// Set by the server on what a firing publishes: the next fire time, or `purge`.
pub const NEXT: &str = "Nats-Schedule-Next";

const NANOS: i64 = 1_000_000_000;
/// How many cron steps a search for the next fire time may take (a pattern that never matches,
/// such as 31 February, is found out within this bound).
const CRON_SEARCH_STEPS: u32 = 20_000;

fn pattern_invalid() -> ApiError {
    ApiError::from_kind(ErrorKind::SchedulePatternInvalid)
}

/// `400 / 10212 message schedules invalid scheduler`: a client set a header only the server
/// sets ([`SCHEDULER`], [`NEXT`]).
pub fn scheduler_invalid() -> ApiError {
    ApiError::from_kind(ErrorKind::SchedulerInvalid)
}

/// Whether a header block carries a header only the server sets on fired messages.
pub fn has_server_headers(map: &HeaderMap) -> bool {
    map.get(SCHEDULER).is_some() || map.get(NEXT).is_some()
}

/// When a schedule fires.
#[derive(Debug, Clone)]
pub enum Pattern {
    /// Once, at this time (unix nanos).
    At(i64),
    /// Every so many nanoseconds (at least a second).
    Every(i64),
    /// On a cron pattern.
    Cron(Box<Cron>),
}

/// A parsed six-field cron pattern and the zone it runs in.
#[derive(Debug, Clone)]
pub struct Cron {
    seconds: u64,
    minutes: u64,
    hours: u64,
    days: u64,
    months: u64,
    weekdays: u64,
    /// Day of month or day of week is `*`/`?`: the two then both have to match.
    any_day: bool,
    zone: TimeZone,
}

/// One cron field's bounds and names.
struct Field {
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const MONTH_NAMES: &[&str] = &[
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const DAY_NAMES: &[&str] = &["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

impl Field {
    fn value(&self, s: &str) -> Option<u32> {
        let lower = s.to_ascii_lowercase();
        if let Some(i) = self.names.iter().position(|n| *n == lower) {
            return u32::try_from(i).ok().map(|i| i + self.min);
        }
        let v: u32 = s.parse().ok()?;
        (self.min..=self.max).contains(&v).then_some(v)
    }

    /// The bits a field's text sets, and whether it is a bare `*`/`?`.
    fn parse(&self, text: &str) -> Option<(u64, bool)> {
        let mut bits = 0u64;
        let mut star = false;
        for part in text.split(',') {
            let (range, step) = match part.split_once('/') {
                Some((r, s)) => (r, Some(s.parse::<u32>().ok().filter(|s| *s > 0)?)),
                None => (part, None),
            };
            let (lo, hi) = if range == "*" || range == "?" {
                star = step.is_none_or(|s| s == 1);
                (self.min, self.max)
            } else if let Some((a, b)) = range.split_once('-') {
                (self.value(a)?, self.value(b)?)
            } else {
                let v = self.value(range)?;
                // `N/step` runs from N to the end of the field.
                (v, if step.is_some() { self.max } else { v })
            };
            if lo > hi {
                return None;
            }
            let step = step.unwrap_or(1);
            let mut v = lo;
            while v <= hi {
                bits |= 1u64 << v;
                v += step;
            }
        }
        (bits != 0).then_some((bits, star))
    }
}

fn has(bits: u64, v: i8) -> bool {
    u32::try_from(v).is_ok_and(|v| v < 64 && bits & (1u64 << v) != 0)
}

impl Cron {
    fn parse(text: &str, zone: TimeZone) -> Option<Cron> {
        let text = match text {
            "@yearly" | "@annually" => "0 0 0 1 1 *",
            "@monthly" => "0 0 0 1 * *",
            "@weekly" => "0 0 0 * * 0",
            "@daily" | "@midnight" => "0 0 0 * * *",
            "@hourly" => "0 0 * * * *",
            t => t,
        };
        let f: Vec<&str> = text.split_whitespace().collect();
        let [s, mi, h, dom, mo, dow] = f.as_slice() else {
            return None;
        };
        let field = |min, max, names| Field { min, max, names };
        let (seconds, _) = field(0, 59, &[]).parse(s)?;
        let (minutes, _) = field(0, 59, &[]).parse(mi)?;
        let (hours, _) = field(0, 23, &[]).parse(h)?;
        let (days, dom_star) = field(1, 31, &[]).parse(dom)?;
        let (months, _) = field(1, 12, MONTH_NAMES).parse(mo)?;
        let (weekdays, dow_star) = field(0, 6, DAY_NAMES).parse(dow)?;
        Some(Cron {
            seconds,
            minutes,
            hours,
            days,
            months,
            weekdays,
            any_day: dom_star || dow_star,
            zone,
        })
    }

    fn day_matches(&self, d: Date) -> bool {
        let dom = has(self.days, d.day());
        let dow = has(self.weekdays, d.weekday().to_sunday_zero_offset());
        if self.any_day {
            dom && dow
        } else {
            dom || dow
        }
    }

    /// The first whole second after `now` (unix nanos) the pattern matches, in its zone.
    fn next_after(&self, now: i64) -> Option<i64> {
        let start = jiff::Timestamp::from_second(now.div_euclid(NANOS) + 1).ok()?;
        let mut t: DateTime = start.to_zoned(self.zone.clone()).datetime();
        for _ in 0..CRON_SEARCH_STEPS {
            let date = t.date();
            if !has(self.months, t.month()) {
                t = date
                    .first_of_month()
                    .checked_add(jiff::Span::new().months(1))
                    .ok()?
                    .into();
                continue;
            }
            if !self.day_matches(date) {
                t = date.tomorrow().ok()?.into();
                continue;
            }
            if !has(self.hours, t.hour()) {
                t = date
                    .at(t.hour(), 0, 0, 0)
                    .checked_add(jiff::Span::new().hours(1))
                    .ok()?;
                continue;
            }
            if !has(self.minutes, t.minute()) {
                t = date
                    .at(t.hour(), t.minute(), 0, 0)
                    .checked_add(jiff::Span::new().minutes(1))
                    .ok()?;
                continue;
            }
            if !has(self.seconds, t.second()) {
                t = t.checked_add(jiff::Span::new().seconds(1)).ok()?;
                continue;
            }
            // A civil time that a DST change skips maps to the later instant.
            let at = t.to_zoned(self.zone.clone()).ok()?.timestamp();
            let nanos = i64::try_from(at.as_nanosecond()).ok()?;
            if nanos > now {
                return Some(nanos);
            }
            t = t.checked_add(jiff::Span::new().seconds(1)).ok()?;
        }
        None
    }
}

impl Pattern {
    /// Parses `Nats-Schedule` (with `Nats-Schedule-Time-Zone`, which only cron takes).
    ///
    /// # Errors
    /// `10189` for a pattern it can not read, `10223` for an unknown zone.
    pub fn parse(text: &str, zone: Option<&str>, now: i64) -> Result<Pattern, ApiError> {
        if let Some(at) = text.strip_prefix("@at ") {
            if zone.is_some() {
                return Err(pattern_invalid());
            }
            return parse_rfc3339(at.trim())
                .map(Pattern::At)
                .ok_or_else(pattern_invalid);
        }
        if let Some(every) = text.strip_prefix("@every ") {
            if zone.is_some() {
                return Err(pattern_invalid());
            }
            return parse_go_duration(every.trim())
                .filter(|d| *d >= NANOS)
                .map(Pattern::Every)
                .ok_or_else(pattern_invalid);
        }
        let zone = match zone {
            None | Some("UTC") => TimeZone::UTC,
            Some("Local") => TimeZone::system(),
            Some(name) => TimeZone::get(name)
                .map_err(|_| ApiError::from_kind(ErrorKind::ScheduleTimeZoneInvalid))?,
        };
        let cron = Cron::parse(text, zone).ok_or_else(pattern_invalid)?;
        // A pattern that never matches (31 February) is refused rather than kept idle.
        cron.next_after(now).ok_or_else(pattern_invalid)?;
        Ok(Pattern::Cron(Box::new(cron)))
    }

    /// The time it fires next after `now` (armed at `now`, or just fired at `now`); `@at`
    /// gives its time whether or not it is past.
    pub fn next_after(&self, now: i64) -> Option<i64> {
        match self {
            Pattern::At(t) => Some(*t),
            Pattern::Every(d) => now
                .div_euclid(NANOS)
                .checked_mul(NANOS)
                .and_then(|s| s.checked_add(*d)),
            Pattern::Cron(c) => c.next_after(now),
        }
    }
}

/// A schedule as its message's headers define it.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// When it fires.
    pub pattern: Pattern,
    /// The subject a firing publishes to.
    pub target: String,
    /// The subject whose newest message a firing copies instead of the schedule's own.
    pub source: Option<String>,
    /// `Nats-TTL` for what a firing publishes.
    pub ttl: Option<String>,
    /// What a firing publishes rolls up its subject.
    pub rollup: bool,
}

/// What a stream needs to know to check a schedule.
pub struct StreamRules<'a> {
    /// The stream's subjects.
    pub subjects: &'a [String],
    /// `allow_msg_ttl`.
    pub allow_msg_ttl: bool,
}

impl StreamRules<'_> {
    /// Whether a literal subject is one of the stream's.
    fn owns(&self, subject: &str) -> bool {
        self.subjects.iter().any(|f| {
            crate::subject::subject::subject_matches_filter(subject.as_bytes(), f.as_bytes())
        })
    }
}

fn literal(s: &str) -> bool {
    crate::subject::subject::is_valid_publish_subject(s.as_bytes())
}

/// Reads and checks the schedule a message on `subject` defines (its headers carry
/// [`SCHEDULE`]).
///
/// # Errors
/// nats-server's error for the first header that is wrong: pattern `10189`, target `10190`,
/// source `10203`, TTL `10191` (or `10166` when the stream has no per-message TTLs), rollup
/// `10192`, zone `10223`.
pub fn parse(
    map: &HeaderMap,
    subject: &str,
    rules: &StreamRules<'_>,
    now: i64,
) -> Result<Schedule, ApiError> {
    let text = map.get(SCHEDULE).unwrap_or_default();
    let pattern = Pattern::parse(text.trim(), map.get(TIME_ZONE), now)?;
    let target = map.get(TARGET).unwrap_or_default();
    if !literal(target) || target == subject || !rules.owns(target) {
        return Err(ApiError::from_kind(ErrorKind::ScheduleTargetInvalid));
    }
    let source = map.get(SOURCE);
    if let Some(src) = source {
        if !literal(src) || src == subject || src == target || !rules.owns(src) {
            return Err(ApiError::from_kind(ErrorKind::ScheduleSourceInvalid));
        }
    }
    let ttl = map.get(TTL);
    if let Some(t) = ttl {
        if parse_msg_ttl(t).is_none() {
            return Err(ApiError::from_kind(ErrorKind::ScheduleTtlInvalid));
        }
        if !rules.allow_msg_ttl {
            return Err(ApiError::msg_ttl_disabled());
        }
    }
    let rollup = match map.get(ROLLUP) {
        None => false,
        Some("sub") => true,
        Some(_) => return Err(ApiError::from_kind(ErrorKind::ScheduleRollupInvalid)),
    };
    // The schedule itself is stored with `Nats-Rollup: sub`; a client may say so, not more.
    if map.get("Nats-Rollup").is_some_and(|r| r != "sub") {
        return Err(ApiError::from_kind(ErrorKind::ScheduleRollupInvalid));
    }
    Ok(Schedule {
        pattern,
        target: target.to_owned(),
        source: source.map(str::to_owned),
        ttl: ttl.map(str::to_owned),
        rollup,
    })
}

/// The header block a schedule is stored with: the client's, plus `Nats-Rollup: sub` (one
/// schedule per subject).
pub fn stored_headers(map: &HeaderMap) -> Bytes {
    let mut m = map.clone();
    if m.get("Nats-Rollup").is_none() {
        m.append("Nats-Rollup", "sub");
    }
    m.encode()
}

/// Headers a fired message does not inherit: the schedule's control headers and those that
/// only made sense for the publish that stored it (dedupe, expectations, its own TTL and
/// rollup, batch and counter headers).
fn inherited(name: &str) -> bool {
    !(name.starts_with("Nats-Schedule")
        || name.starts_with("Nats-Expected-")
        || name.starts_with("Nats-Batch-")
        || matches!(
            name,
            "Nats-Msg-Id" | "Nats-TTL" | "Nats-Rollup" | "Nats-Incr" | SCHEDULER
        ))
}

/// The headers of the message a firing publishes. `base` is the header block of the message it
/// copies (the schedule's or the source's newest); `next` the time it fires after this (`None`
/// for `@at`: `purge`).
pub fn fired_headers(
    base: Option<&Bytes>,
    schedule_subject: &str,
    s: &Schedule,
    next: Option<i64>,
) -> Bytes {
    let mut out = HeaderMap::default();
    if let Some(map) = base.and_then(|b| HeaderMap::parse(b).ok()) {
        out.fields = map
            .fields
            .into_iter()
            .filter(|(n, _)| inherited(n))
            .collect();
    }
    out.append(SCHEDULER, schedule_subject);
    match next {
        Some(t) => out.append(NEXT, &rfc3339_nanos(t)),
        None => out.append(NEXT, "purge"),
    }
    if let Some(t) = &s.ttl {
        out.append("Nats-TTL", t);
    }
    if s.rollup {
        out.append("Nats-Rollup", "sub");
    }
    out.encode()
}

/// The armed schedules of one stream: by subject (the schedule message's sequence and next
/// fire time) and by due time.
#[derive(Debug, Default)]
pub struct Armed {
    by_subject: BTreeMap<String, (u64, i64)>,
    due: BTreeSet<(i64, String)>,
}

impl Armed {
    /// Arms (or re-arms) the schedule stored as `seq` on `subject` to fire at `at`.
    pub fn arm(&mut self, subject: &str, seq: u64, at: i64) {
        self.disarm(subject);
        self.by_subject.insert(subject.to_owned(), (seq, at));
        self.due.insert((at, subject.to_owned()));
    }

    /// Forgets the schedule on `subject`.
    pub fn disarm(&mut self, subject: &str) {
        if let Some((_, at)) = self.by_subject.remove(subject) {
            self.due.remove(&(at, subject.to_owned()));
        }
    }

    /// Whether `subject` has an armed schedule.
    pub fn contains(&self, subject: &str) -> bool {
        self.by_subject.contains_key(subject)
    }

    /// Every armed schedule: subject, message sequence, fire time (a snapshot's image).
    pub fn export(&self) -> Vec<(String, u64, i64)> {
        self.by_subject
            .iter()
            .map(|(s, (seq, at))| (s.clone(), *seq, *at))
            .collect()
    }

    /// The earliest fire time.
    pub fn next_deadline(&self) -> Option<i64> {
        self.due.iter().next().map(|(t, _)| *t)
    }

    /// Takes the schedule due first if it is due by `now`: its subject and message sequence.
    pub fn pop_due(&mut self, now: i64) -> Option<(String, u64)> {
        let (at, subject) = self.due.iter().next().cloned()?;
        if at > now {
            return None;
        }
        self.due.remove(&(at, subject.clone()));
        let (seq, _) = self.by_subject.remove(&subject)?;
        Some((subject, seq))
    }

    /// How many are armed.
    pub fn len(&self) -> usize {
        self.by_subject.len()
    }

    /// Whether none is armed.
    pub fn is_empty(&self) -> bool {
        self.by_subject.is_empty()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// 2026-12-03T18:19:36.316Z
    const NOW: i64 = 1_796_321_976_316_000_000;

    fn at(text: &str) -> i64 {
        parse_rfc3339(text).unwrap()
    }

    fn next(p: &str, tz: Option<&str>, now: i64) -> String {
        rfc3339_nanos(Pattern::parse(p, tz, now).unwrap().next_after(now).unwrap())
    }

    #[test]
    fn patterns_nats_server_refuses_are_refused() {
        for p in [
            "@every 5",
            "@every 500ms",
            "@every 0s",
            "0 0 * *",
            "0 0 0 * * * 2030",
            "0 0 0 * * 7",
            "0 0 5-2 * * *",
            "60 0 0 * * *",
            "@foo",
            "@at tomorrow",
            "0 0 0 31 2 *",
        ] {
            assert_eq!(
                Pattern::parse(p, None, NOW).unwrap_err().err_code,
                10189,
                "{p}"
            );
        }
        // Zones are for cron only.
        assert_eq!(
            Pattern::parse("@every 1s", Some("Europe/Paris"), NOW)
                .unwrap_err()
                .err_code,
            10189
        );
        assert_eq!(
            Pattern::parse("0 0 5 * * *", Some("Nowhere/X"), NOW)
                .unwrap_err()
                .err_code,
            10223
        );
        assert_eq!(
            Pattern::parse("0 0 5 * * *", Some(""), NOW)
                .unwrap_err()
                .err_code,
            10223
        );
    }

    #[test]
    fn every_fires_on_whole_seconds() {
        assert_eq!(next("@every 1s", None, NOW), "2026-12-03T18:19:37Z");
        assert_eq!(next("@every 1h30m", None, NOW), "2026-12-03T19:49:36Z");
        assert_eq!(next("@every 1.5s", None, NOW), "2026-12-03T18:19:37.5Z");
    }

    #[test]
    fn at_keeps_its_time_in_utc() {
        assert_eq!(
            next("@at 2099-11-10T23:00:00+02:00", None, NOW),
            "2099-11-10T21:00:00Z"
        );
        assert_eq!(
            next("@at 2009-11-10T23:00:00Z", None, NOW),
            "2009-11-10T23:00:00Z"
        );
    }

    #[test]
    fn cron_fields_lists_ranges_steps_and_names() {
        assert_eq!(next("* * * * * *", None, NOW), "2026-12-03T18:19:37Z");
        assert_eq!(next("@hourly", None, NOW), "2026-12-03T19:00:00Z");
        assert_eq!(next("@daily", None, NOW), "2026-12-04T00:00:00Z");
        assert_eq!(next("@monthly", None, NOW), "2027-01-01T00:00:00Z");
        assert_eq!(next("@yearly", None, NOW), "2027-01-01T00:00:00Z");
        // 2026-12-03 is a Thursday; the next Sunday is the 6th.
        assert_eq!(next("@weekly", None, NOW), "2026-12-06T00:00:00Z");
        assert_eq!(next("*/15 * * * * *", None, NOW), "2026-12-03T18:19:45Z");
        assert_eq!(next("0 0 0-23/5 * * *", None, NOW), "2026-12-03T20:00:00Z");
        assert_eq!(
            next("0 30 4 * jan-mar *", None, NOW),
            "2027-01-01T04:30:00Z"
        );
        assert_eq!(
            next("0 0 12 ? * MON,wed", None, NOW),
            "2026-12-07T12:00:00Z"
        );
        // Day of month and day of week both restricted: either matches (Friday the 4th).
        assert_eq!(next("0 30 4 1,15 * 5", None, NOW), "2026-12-04T04:30:00Z");
        // `N/step` runs to the end of the field.
        assert_eq!(next("50/5 * * * * *", None, NOW), "2026-12-03T18:19:50Z");
    }

    #[test]
    fn cron_runs_in_its_zone_across_dst() {
        // 05:00 in Paris is 04:00 UTC in winter.
        assert_eq!(
            next("0 0 5 * * *", Some("Europe/Paris"), NOW),
            "2026-12-04T04:00:00Z"
        );
        assert_eq!(
            next("0 0 5 * * *", Some("UTC"), NOW),
            "2026-12-04T05:00:00Z"
        );
        // 02:30 does not exist in New York on 2027-03-14 (clocks jump 02:00 → 03:00): it fires
        // at the instant the gap maps to, 03:30 EDT = 07:30 UTC.
        let before = at("2027-03-14T05:00:00Z");
        assert_eq!(
            next("0 30 2 * * *", Some("America/New_York"), before),
            "2027-03-14T07:30:00Z"
        );
    }

    fn headers(fields: &[(&str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::default();
        for (k, v) in fields {
            m.append(k, v);
        }
        m
    }

    fn check(fields: &[(&str, &str)], ttl: bool) -> Result<Schedule, ApiError> {
        let subjects = ["sched.>".to_owned(), "target.>".to_owned()];
        let rules = StreamRules {
            subjects: &subjects,
            allow_msg_ttl: ttl,
        };
        parse(&headers(fields), "sched.a", &rules, NOW)
    }

    #[test]
    fn header_checks_answer_nats_server_codes() {
        let code = |f: &[(&str, &str)], ttl| check(f, ttl).unwrap_err().err_code;
        let s = (SCHEDULE, "@every 1s");
        assert_eq!(code(&[s], true), 10190);
        assert_eq!(code(&[s, (TARGET, "other.a")], true), 10190);
        assert_eq!(code(&[s, (TARGET, "target.*")], true), 10190);
        assert_eq!(code(&[s, (TARGET, "sched.a")], true), 10190);
        let t = (TARGET, "target.a");
        assert_eq!(code(&[s, t, (SOURCE, "target.*")], true), 10203);
        assert_eq!(code(&[s, t, (SOURCE, "target.a")], true), 10203);
        assert_eq!(code(&[s, t, (SOURCE, "sched.a")], true), 10203);
        assert_eq!(code(&[s, t, (SOURCE, "q.x")], true), 10203);
        assert_eq!(code(&[s, t, (TTL, "abc")], true), 10191);
        assert_eq!(code(&[s, t, (TTL, "5s")], false), 10166);
        assert_eq!(code(&[s, t, (ROLLUP, "all")], true), 10192);
        assert_eq!(code(&[s, t, ("Nats-Rollup", "all")], true), 10192);
        let ok = check(&[s, t, (SOURCE, "target.b"), (ROLLUP, "sub")], true).unwrap();
        assert_eq!(ok.target, "target.a");
        assert!(ok.rollup);
    }

    #[test]
    fn fired_message_drops_control_headers_and_says_who_and_when() {
        let s = check(
            &[
                (SCHEDULE, "@every 1s"),
                (TARGET, "target.a"),
                (TTL, "30s"),
                (ROLLUP, "sub"),
            ],
            true,
        )
        .unwrap();
        let stored = stored_headers(&headers(&[
            ("foo", "bar"),
            (SCHEDULE, "@every 1s"),
            (TARGET, "target.a"),
            ("Nats-Msg-Id", "m1"),
            ("Nats-Expected-Stream", "S"),
        ]));
        let h = fired_headers(
            Some(&stored),
            "sched.a",
            &s,
            Some(at("2026-12-03T18:19:40Z")),
        );
        assert_eq!(
            HeaderMap::parse(&h).unwrap().fields,
            vec![
                ("foo".to_owned(), "bar".to_owned()),
                (SCHEDULER.to_owned(), "sched.a".to_owned()),
                (NEXT.to_owned(), "2026-12-03T18:19:40Z".to_owned()),
                ("Nats-TTL".to_owned(), "30s".to_owned()),
                ("Nats-Rollup".to_owned(), "sub".to_owned()),
            ]
        );
        let once = fired_headers(None, "sched.a", &s, None);
        assert!(HeaderMap::parse(&once).unwrap().get(NEXT) == Some("purge"));
    }

    #[test]
    fn armed_pops_in_due_order_and_rearming_replaces() {
        let mut a = Armed::default();
        a.arm("s.b", 2, 20);
        a.arm("s.a", 1, 10);
        a.arm("s.b", 3, 5);
        assert_eq!(a.len(), 2);
        assert_eq!(a.next_deadline(), Some(5));
        assert_eq!(a.pop_due(4), None);
        assert_eq!(a.pop_due(30), Some(("s.b".to_owned(), 3)));
        assert_eq!(a.pop_due(30), Some(("s.a".to_owned(), 1)));
        assert!(a.is_empty());
    }
}
