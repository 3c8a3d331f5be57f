//! `sealctl`: the operator's command-line tool.
//!
//! It talks to a running server as an ordinary NATS client, so every command works against
//! nats-server too — which is how the load tool compares the two. Argument definitions live in
//! [`args`], one file per command under [`commands`].

pub mod args;
pub mod commands;

use std::process::ExitCode;

use clap::Parser;

/// Parses the command line and runs the command; the process exit code.
pub fn main() -> ExitCode {
    let cli = args::Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sealctl: cannot start runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sealctl: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs one parsed command.
///
/// # Errors
/// Whatever the command reports; printed by [`main`].
pub async fn run(cli: args::Cli) -> anyhow::Result<()> {
    match cli.command {
        args::Command::Bench(b) => commands::bench::run(&cli.server, b).await,
    }
}
