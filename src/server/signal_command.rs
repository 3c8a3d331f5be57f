//! `--signal <cmd>[=<pid|pidfile>]`: tells a running server what to do, as nats-server's flag
//! does, by sending the matching Unix signal.
//!
//! | command | signal |
//! |---|---|
//! | `stop` | SIGKILL |
//! | `quit` | SIGINT |
//! | `term` | SIGTERM |
//! | `reopen` | SIGUSR1 |
//! | `reload` | SIGHUP |
//! | `ldm` | SIGUSR2 |

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::config::cli::{SignalCommand, SignalRequest};

/// Resolves the target process and sends the signal.
///
/// # Errors
/// A readable reason when the pid is missing or invalid, or the signal cannot be sent.
pub fn send(req: &SignalRequest) -> Result<(), String> {
    let sig = match req.command {
        SignalCommand::Stop => Signal::SIGKILL,
        SignalCommand::Quit => Signal::SIGINT,
        SignalCommand::Term => Signal::SIGTERM,
        SignalCommand::Reopen => Signal::SIGUSR1,
        SignalCommand::Reload => Signal::SIGHUP,
        SignalCommand::Ldm => Signal::SIGUSR2,
    };
    let target = req
        .target
        .as_deref()
        .ok_or_else(|| "no server pid given: use --signal <cmd>=<pid or pid file>".to_owned())?;
    let pid_text = match target.parse::<i32>() {
        Ok(_) => target.to_owned(),
        Err(_) => std::fs::read_to_string(target)
            .map_err(|e| format!("could not read pid file {target}: {e}"))?
            .trim()
            .to_owned(),
    };
    let pid: i32 = pid_text
        .parse()
        .map_err(|_| format!("invalid pid {pid_text:?}"))?;
    if pid <= 0 {
        return Err(format!("invalid pid {pid}"));
    }
    kill(Pid::from_raw(pid), sig).map_err(|e| format!("could not signal process {pid}: {e}"))
}
