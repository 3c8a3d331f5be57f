//! Log lines in nats-server's shape: `[pid] 2026/11/29 10:00:00.123456 [INF] message`.
//!
//! Operators grep for these, and client libraries' test harnesses wait for
//! `Listening for client connections on HOST:PORT` and `Server is ready` in exactly this form,
//! so the binary installs this formatter on its tracing subscriber. Structured fields follow the
//! message as `key=value`.

use std::fmt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The nats-server style line formatter.
#[derive(Debug, Clone)]
pub struct NatsFormat {
    pid: u32,
    with_time: bool,
}

impl NatsFormat {
    /// A formatter; `with_time` mirrors `logtime`.
    pub fn new(with_time: bool) -> Self {
        NatsFormat {
            pid: std::process::id(),
            with_time,
        }
    }
}

fn level_tag(l: &Level) -> &'static str {
    match *l {
        Level::ERROR => "[ERR]",
        Level::WARN => "[WRN]",
        Level::INFO => "[INF]",
        Level::DEBUG => "[DBG]",
        Level::TRACE => "[TRC]",
    }
}

impl<S, N> FormatEvent<S, N> for NatsFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        write!(w, "[{}] ", self.pid)?;
        if self.with_time {
            let now = time::OffsetDateTime::now_utc();
            write!(
                w,
                "{:04}/{:02}/{:02} {:02}:{:02}:{:02}.{:06} ",
                now.year(),
                u8::from(now.month()),
                now.day(),
                now.hour(),
                now.minute(),
                now.second(),
                now.microsecond()
            )?;
        }
        write!(w, "{} ", level_tag(event.metadata().level()))?;
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let ext = span.extensions();
                if let Some(fields) = ext.get::<tracing_subscriber::fmt::FormattedFields<N>>() {
                    if !fields.is_empty() {
                        write!(w, "{{{fields}}} ")?;
                    }
                }
            }
        }
        ctx.format_fields(w.by_ref(), event)?;
        writeln!(w)
    }
}
