//! `sealctl`: the operator's command-line tool.
//!
//! It talks to a running server as an ordinary NATS client, so every command works against
//! nats-server too — which is how the load tool compares the two. Argument definitions live in
//! [`args`], one file per command under [`commands`].

pub mod args;
pub mod client;
pub mod commands;
pub mod keystore;
pub mod policy;

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
    use args::{AccountCmd, Command, OperatorCmd, ServerCmd, SigningKeyCmd, UserCmd};
    use commands::tenant;
    use keystore::Keystore;
    match cli.command {
        Command::Bench(b) => commands::bench::run(&cli.server, b).await,
        Command::Operator {
            cmd: OperatorCmd::Init { name, force, keys },
        } => tenant::operator_init(&Keystore::new(&keys.keys), &name, force),
        Command::Account { cmd } => match cmd {
            AccountCmd::Add {
                name,
                limits,
                allow_bearer,
                keys,
            } => tenant::account_add(
                &Keystore::new(&keys.keys),
                &name,
                limits.as_deref(),
                allow_bearer,
            ),
            AccountCmd::Revoke { name, keys } => {
                tenant::account_revoke(&Keystore::new(&keys.keys), &name)
            }
            AccountCmd::Push { name, creds, keys } => {
                let ks = Keystore::new(&keys.keys);
                tenant::account_push(&ks, &name, &cli.server, creds.as_deref()).await
            }
        },
        Command::SigningKey {
            cmd:
                SigningKeyCmd::Add {
                    account,
                    role,
                    policy,
                    keys,
                },
        } => tenant::signing_key_add(&Keystore::new(&keys.keys), &account, &role, &policy),
        Command::User { cmd } => match cmd {
            UserCmd::Add {
                account,
                name,
                policy,
                role,
                expiry,
                bearer,
                out,
                force,
                keys,
            } => {
                let spec = tenant::UserSpec {
                    account: &account,
                    name: &name,
                    policy: policy.as_deref(),
                    role: role.as_deref(),
                    expiry: expiry.as_deref(),
                    bearer,
                    out: out.as_deref(),
                    force,
                };
                tenant::user_add(&Keystore::new(&keys.keys), &spec).map(|_| ())
            }
            UserCmd::Revoke {
                account,
                user,
                keys,
            } => tenant::user_revoke(&Keystore::new(&keys.keys), &account, &user),
        },
        Command::Creds(c) => tenant::creds(
            &Keystore::new(&c.keys.keys),
            &c.account,
            &c.user,
            &c.out,
            c.force,
        ),
        Command::Describe { token } => tenant::describe(&token),
        Command::Store {
            cmd:
                args::StoreCmd::RotateMaster {
                    store,
                    key,
                    key_file,
                    new_key,
                    new_key_file,
                },
        } => commands::audit::rotate_master(&store, key, key_file, new_key, new_key_file),
        Command::Audit(a) => {
            let opts = commands::audit::AuditOptions {
                store: a.store,
                key: a.key.map(zeroize::Zeroizing::new),
                key_file: a.key_file,
                no_key: a.no_key,
                canaries: a.canary,
                progress: !a.json,
            };
            let report = tokio::task::spawn_blocking(move || commands::audit::audit(&opts)).await?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                commands::audit::print_summary(&report);
            }
            let code = report.exit_code();
            if code != 0 {
                std::process::exit(i32::from(code));
            }
            Ok(())
        }
        Command::Server {
            cmd: ServerCmd::Config { keys, resolver_dir },
        } => {
            print!(
                "{}",
                tenant::server_config(&Keystore::new(&keys.keys), resolver_dir.as_deref())?
            );
            Ok(())
        }
    }
}
