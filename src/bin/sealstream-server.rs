//! `sealstream-server`: flags → logging → config → [`sealstream::server::run`]; nothing else.
//!
//! Flags and the config file follow nats-server's, so an operator's command line and
//! `nats-server.conf` work unchanged.

use std::process::ExitCode;

use sealstream::config::cli::{CliArgs, USAGE};
use sealstream::config::{self, ServerOptions};
use sealstream::server::{self, log_format::NatsFormat};
use tracing::{error, warn, Level};
use tracing_subscriber::fmt::writer::MakeWriterExt;

const NAME: &str = "sealstream-server";

/// mimalloc instead of glibc malloc: see `Cargo.toml` and docs/PERFORMANCE.md (the
/// `system-alloc` feature leaves it out for heap profiling).
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args = match CliArgs::parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            eprint!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    if args.show_help || args.show_tls_help {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    if args.show_version {
        println!(
            "{NAME}: v{} (sealstream {})",
            server::NATS_COMPAT_VERSION,
            env!("CARGO_PKG_VERSION")
        );
        return ExitCode::SUCCESS;
    }
    if let Some(req) = &args.signal {
        return match server::signal_command::send(req) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{NAME}: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let mut opts = match &args.config_file {
        Some(path) => match config::load_file(path) {
            Ok(o) => o,
            Err(e) => {
                eprintln!("{NAME}: Parse error: {e}");
                return ExitCode::FAILURE;
            }
        },
        None => ServerOptions::default(),
    };
    if args.check_config {
        return match opts.check() {
            Ok(()) => {
                let shown = args
                    .config_file
                    .as_ref()
                    .map_or("<none>".into(), |p| p.display().to_string());
                println!("{NAME}: configuration file {shown} is valid");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{NAME}: Parse error: {e}");
                ExitCode::FAILURE
            }
        };
    }
    opts.apply_cli(&args);
    if let Err(e) = opts.validate() {
        eprintln!("{NAME}: {e}");
        return ExitCode::FAILURE;
    }
    if let Err(e) = init_logging(&opts) {
        eprintln!("{NAME}: {e}");
        return ExitCode::FAILURE;
    }
    if let Err(e) = sealstream::crypto::disable_core_dumps() {
        warn!("could not disable core dumps (key material could reach a core file): {e}");
    }
    for flag in &args.unsupported {
        warn!("flag {flag} is not supported (no clustering) and is ignored");
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{NAME}: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(server::run(opts)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// The environment variable whose tracing directives replace the log filter the flags chose.
const LOG_FILTER_ENV: &str = "SEALSTREAM_LOG";

/// Installs the nats-style log formatter on stderr, and on the `-l` file too when given.
fn init_logging(opts: &ServerOptions) -> Result<(), String> {
    let level = if opts.trace {
        Level::TRACE
    } else if opts.debug {
        Level::DEBUG
    } else {
        Level::INFO
    };
    // openraft reports every vote and replication retry; they are routine in a cluster that
    // elects (a node restarting, a leader killed), so only its errors reach the log unless
    // tracing is asked for.
    let raft = if opts.trace { level } else { Level::ERROR };
    // `SEALSTREAM_LOG`, when set, replaces the whole filter (tracing's directives, e.g.
    // `info,openraft=warn`): for troubleshooting what the flags do not show.
    let directives = std::env::var(LOG_FILTER_ENV)
        .ok()
        .filter(|d| !d.trim().is_empty())
        .unwrap_or_else(|| {
            format!(
                "{},openraft={}",
                level.as_str().to_ascii_lowercase(),
                raft.as_str().to_ascii_lowercase()
            )
        });
    let filter = tracing_subscriber::EnvFilter::new(directives);
    let builder = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_env_filter(filter)
        .event_format(NatsFormat::new(opts.logtime));
    match &opts.log_file {
        Some(path) => {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| format!("could not open log file {}: {e}", path.display()))?;
            // The file first: a harness that sees a line on stderr finds it in the file too.
            let writer = std::sync::Mutex::new(file).and(std::io::stderr);
            builder.with_writer(writer).init();
        }
        None => builder.with_writer(std::io::stderr).init(),
    }
    Ok(())
}
