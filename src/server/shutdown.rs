//! Signals and the server's way out.
//!
//! SIGTERM and SIGINT stop the server gracefully: stop accepting, flush what every connection
//! has queued, close them, exit 0. SIGUSR2 enters lame-duck mode: stop accepting, tell clients
//! (`ldm: true` in an async INFO) so they reconnect elsewhere, wait the grace period, then close
//! clients evenly over `lame_duck_duration`. SIGHUP reloads TLS certificates and the config
//! file's authorization (new connections use them; existing ones keep theirs).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::client::CloseReason;
use super::Shared;

/// How long a graceful stop waits for connections to flush.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// The one cancellation token every long-lived task watches.
pub(crate) struct Shutdown {
    token: CancellationToken,
}

impl Shutdown {
    pub(crate) fn new() -> Self {
        Shutdown {
            token: CancellationToken::new(),
        }
    }

    pub(crate) fn token(&self) -> CancellationToken {
        self.token.clone()
    }

    pub(crate) fn cancel(&self) {
        self.token.cancel();
    }
}

/// Waits for a stop signal (or the end of lame-duck mode).
/// The signal streams, installed before the server says it is ready (a SIGTERM that arrives
/// right after "Server is ready" must be a graceful stop, not the default kill).
pub(crate) struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    usr2: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    usr1: tokio::signal::unix::Signal,
}

impl Signals {
    /// Installs the handlers; `None` (logged) when the OS refuses.
    pub(crate) fn install() -> Option<Self> {
        let (Ok(term), Ok(int), Ok(usr2), Ok(hup), Ok(usr1)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::user_defined2()),
            signal(SignalKind::hangup()),
            signal(SignalKind::user_defined1()),
        ) else {
            warn!("could not install signal handlers; stop the server with SIGKILL");
            return None;
        };
        Some(Signals {
            term,
            int,
            usr2,
            hup,
            usr1,
        })
    }
}

/// Serves signals until one asks the server to stop.
pub(crate) async fn wait_for_signals(
    shared: &Arc<Shared>,
    shutdown: &Shutdown,
    signals: Option<Signals>,
) {
    let Some(mut sg) = signals else {
        std::future::pending::<()>().await;
        return;
    };
    loop {
        tokio::select! {
            _ = sg.term.recv() => { info!("Trapped \"terminated\" signal"); return }
            _ = sg.int.recv() => { info!("Trapped \"interrupt\" signal"); return }
            _ = sg.usr2.recv() => {
                lame_duck(shared, shutdown).await;
                return;
            }
            _ = sg.hup.recv() => reload(shared),
            _ = sg.usr1.recv() => info!("log file reopen requested (SIGUSR1): nothing to reopen"),
        }
    }
}

/// Lame-duck mode: stop accepting, advertise `ldm`, close clients gradually.
async fn lame_duck(shared: &Arc<Shared>, shutdown: &Shutdown) {
    info!("Entering lame duck mode, stop accepting new clients");
    shared.lame_duck.store(true, Ordering::Relaxed);
    shutdown.cancel();
    if let Some(cluster) = &shared.cluster {
        cluster.broadcast(
            &super::route::conn::our_info(shared, cluster, None, None),
            None,
        );
    }
    let clients = shared.clients();
    for c in &clients {
        let info = shared.info_line(c, false, None, None);
        if let Ok(true) = c.outbound.push_raw(&info) {
            c.outbound.wake();
        }
    }
    let total = shared.opts.lame_duck_duration;
    let grace = shared.opts.lame_duck_grace_period.min(total);
    tokio::time::sleep(grace).await;
    let spread = total.saturating_sub(grace);
    let step = if clients.is_empty() {
        Duration::ZERO
    } else {
        spread / clients.len() as u32
    };
    info!(
        "Closing {} existing clients over {:?}",
        clients.len(),
        spread
    );
    for c in clients {
        c.close(CloseReason::ServerShutdown);
        tokio::time::sleep(step).await;
    }
}

/// Closes every connection (flushing queued output) and waits for them to go away.
pub(crate) async fn close_clients(shared: &Arc<Shared>) {
    for c in shared.clients() {
        c.close(CloseReason::ServerShutdown);
    }
    let deadline = tokio::time::Instant::now() + DRAIN_TIMEOUT;
    loop {
        let gone = shared.clients_gone.notified();
        tokio::pin!(gone);
        gone.as_mut().enable();
        if shared.num_clients() == 0 {
            return;
        }
        if tokio::time::timeout_at(deadline, gone).await.is_err() {
            return;
        }
    }
}

/// SIGHUP: re-read TLS certificates and the config file's authorization. A failure keeps the
/// current configuration and is logged.
fn reload(shared: &Arc<Shared>) {
    if let Some(tls) = &shared.tls {
        match tls.reload() {
            Ok(()) => info!("Reloaded: TLS certificate and key"),
            Err(e) => warn!("TLS reload failed, keeping the current certificate: {e}"),
        }
    }
    if let Some(tls) = shared.cluster.as_ref().and_then(|c| c.tls.as_ref()) {
        match tls.reload() {
            Ok(()) => info!("Reloaded: route TLS certificate and key"),
            Err(e) => warn!("route TLS reload failed, keeping the current certificate: {e}"),
        }
    }
    match shared.reload_auth() {
        Ok(true) => info!("Reloaded: authorization"),
        Ok(false) => info!("Reload: no configuration file, nothing else to reload"),
        Err(e) => warn!("authorization reload failed, keeping the current one: {e}"),
    }
}
