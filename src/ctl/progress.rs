//! Progress bars for `sealctl`'s long-running work (bench, audit, large `pub --count`,
//! `stream view`).
//!
//! One policy for every command: a bar is drawn on stderr only when stderr is a terminal, never
//! when the command prints `--json`, and never after `--no-progress`. Otherwise the returned
//! bar is hidden, so callers update it unconditionally. Anything a command prints to stdout
//! while a bar is visible goes through [`indicatif::ProgressBar::suspend`] so lines and bar do
//! not interleave on a shared terminal.

use std::io::IsTerminal as _;
use std::sync::atomic::{AtomicBool, Ordering};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Set by `--no-progress`.
static DISABLED: AtomicBool = AtomicBool::new(false);

/// Counts at or above this get a bar in `pub --count` and `stream view`.
pub const MIN_COUNT: u64 = 1000;

/// Turns every progress bar off for this process (`--no-progress`).
pub fn disable() {
    DISABLED.store(true, Ordering::Relaxed);
}

/// Whether a bar would be drawn: stderr is a terminal, not `json`, not `--no-progress`.
pub fn enabled(json: bool) -> bool {
    !json && !DISABLED.load(Ordering::Relaxed) && std::io::stderr().is_terminal()
}

/// A bar counting to `total` (a spinner when `total` is `None`) labelled `what`; hidden unless
/// [`enabled`]`(json)`.
pub fn bar(total: Option<u64>, what: &str, json: bool) -> ProgressBar {
    if !enabled(json) {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::with_draw_target(total, ProgressDrawTarget::stderr());
    let template = if total.is_some() {
        "{msg:>12} [{bar:30}] {human_pos}/{human_len} {per_sec:0} eta {eta}"
    } else {
        "{msg:>12} {spinner} {human_pos} {per_sec:0}"
    };
    if let Ok(style) = ProgressStyle::with_template(template) {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_message(what.to_owned());
    pb
}

/// [`bar`] for a count of messages, hidden below [`MIN_COUNT`].
pub fn count_bar(count: u64, what: &str, json: bool) -> ProgressBar {
    if count < MIN_COUNT {
        return ProgressBar::hidden();
    }
    bar(Some(count), what, json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_and_small_counts_hide_the_bar() {
        assert!(bar(Some(10), "x", true).is_hidden());
        assert!(count_bar(10, "x", false).is_hidden());
        disable();
        assert!(!enabled(false));
        assert!(count_bar(1_000_000, "x", false).is_hidden());
    }
}
