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
pub mod progress;

use std::process::ExitCode;

/// Parses the command line and runs the command; the process exit code.
pub fn main() -> ExitCode {
    use clap::{CommandFactory, FromArgMatches};
    quiet_on_closed_stdout();
    let matches = args::Cli::command().get_matches();
    let cli = match args::Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    if cli.no_progress {
        progress::disable();
    }
    // A saved context supplies the URL unless the user gave one (flag or NATS_URL).
    let explicit = !matches!(
        matches.value_source("server"),
        None | Some(clap::parser::ValueSource::DefaultValue)
    );
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
    match rt.block_on(run_with(cli, explicit)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // JetStream API errors print as the server gave them: `error: stream not found (10059)`.
            match e.downcast_ref::<commands::conn::JsApiError>() {
                Some(j) => eprintln!("error: {j}"),
                None => eprintln!("sealctl: {e:#}"),
            }
            ExitCode::FAILURE
        }
    }
}

/// `sealctl stream info X | head -3`: once the reader has gone, `println!` panics with a broken
/// pipe. Rust ignores SIGPIPE (restoring it needs `unsafe`), so end the process quietly the way
/// a CLI killed by SIGPIPE does (status 141 = 128 + 13) instead of printing a panic.
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.starts_with("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(141);
        }
        default(info);
    }));
}

/// Runs one parsed command, `--server` counting as given when `server_explicit` (otherwise a
/// selected context's URL wins).
///
/// # Errors
/// Whatever the command reports; printed by [`main`].
pub async fn run_with(cli: args::Cli, server_explicit: bool) -> anyhow::Result<()> {
    use args::{CheckCmd, Command, RaftCmd, ReportCmd, ServerCmd};
    use commands::conn::{Session, Target};
    let target = Target {
        url: cli.server.clone(),
        explicit: server_explicit,
    };
    match cli.command {
        Command::Stream(a) => {
            let s = Session::open(&target, &a.conn).await?;
            commands::stream::run(&s, a.cmd).await
        }
        Command::Consumer(a) => {
            let s = Session::open(&target, &a.conn).await?;
            commands::consumer::run(&s, a.cmd).await
        }
        Command::Kv(a) => {
            let s = Session::open(&target, &a.conn).await?;
            commands::kv::run(&s, a.cmd).await
        }
        Command::Pub(a) => {
            let s = Session::open(&target, &a.conn).await?;
            commands::msg::publish(&s, &a).await
        }
        Command::Sub(a) => {
            let s = Session::open(&target, &a.conn).await?;
            commands::msg::subscribe(&s, &a).await
        }
        Command::Req(a) => {
            let s = Session::open(&target, &a.conn).await?;
            commands::msg::request(&s, &a).await
        }
        Command::Reply(a) => {
            let s = Session::open(&target, &a.conn).await?;
            commands::msg::reply(&s, &a).await
        }
        Command::Context { cmd } => commands::context::run(&target, cmd),
        Command::Server {
            cmd: ServerCmd::Info(conn),
        } => {
            let s = Session::open(&target, &conn).await?;
            commands::server::info(&s).await
        }
        Command::Server {
            cmd: ServerCmd::Ping { count, conn },
        } => {
            let s = Session::open(&target, &conn).await?;
            commands::server::ping(&s, count).await
        }
        Command::Server {
            cmd: ServerCmd::Check {
                cmd: CheckCmd::Jetstream(a),
            },
        } => {
            let code = commands::server::check_jetstream(&target, &a.conn, &a).await;
            if code != 0 {
                std::process::exit(code);
            }
            Ok(())
        }
        Command::Server {
            cmd: ServerCmd::Check {
                cmd: CheckCmd::Healthz(a),
            },
        } => {
            let code = commands::server::check_healthz(&a).await;
            if code != 0 {
                std::process::exit(code);
            }
            Ok(())
        }
        Command::Server {
            cmd: ServerCmd::Report {
                cmd: ReportCmd::Jetstream(a),
            },
        } => {
            let s = Session::open(&target, &a.conn).await?;
            commands::server::report_jetstream(&s, a.expect).await
        }
        Command::Server {
            cmd:
                ServerCmd::Raft {
                    cmd: RaftCmd::StepDown { preferred, conn },
                },
        } => {
            let s = Session::open(&target, &conn).await?;
            commands::server::raft_step_down(&s, preferred.as_deref()).await
        }
        Command::Server {
            cmd:
                ServerCmd::Raft {
                    cmd:
                        RaftCmd::PeerRemove {
                            peer,
                            peer_id,
                            conn,
                        },
                },
        } => {
            let s = Session::open(&target, &conn).await?;
            commands::server::raft_peer_remove(&s, &peer, peer_id).await
        }
        Command::Audit(a) if a.stores.is_empty() && (a.live || server_explicit) => {
            let reports = commands::audit::live(&target, &a).await?;
            finish_audit(&a, reports)
        }
        Command::Account {
            cmd:
                args::AccountCmd::Purge {
                    name,
                    attest,
                    sign_with,
                    conn,
                },
        } => {
            let s = Session::open(&target, &conn).await?;
            commands::audit::purge_account(&s, &name, attest.as_deref(), sign_with.as_deref()).await
        }
        Command::Store {
            cmd:
                args::StoreCmd::RekeyLive {
                    account,
                    stream,
                    bytes_per_sec,
                    wait,
                    conn,
                },
        } => {
            let s = Session::open(&target, &conn).await?;
            let wait = commands::util::parse_duration(&wait)
                .map_err(|e| anyhow::anyhow!("--wait: {e}"))?;
            commands::audit::rekey_live(
                &s,
                account.as_deref(),
                stream.as_deref(),
                bytes_per_sec,
                wait,
            )
            .await
        }
        Command::Store {
            cmd:
                args::StoreCmd::RotateMasterLive {
                    new_key_file,
                    server_name,
                    conn,
                },
        } => {
            let s = Session::open(&target, &conn).await?;
            commands::audit::rotate_master_live(&s, &new_key_file, server_name.as_deref()).await
        }
        other => {
            run(args::Cli {
                server: cli.server,
                no_progress: cli.no_progress,
                command: other,
            })
            .await
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
            // Talks to the servers: `run_with` takes it (with the connection target).
            AccountCmd::Purge { .. } => {
                anyhow::bail!("sealctl account purge needs a server connection")
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
        Command::AuditKey {
            cmd: args::AuditKeyCmd::Init { out },
        } => {
            let key = crate::auth::nkeys::KeyPair::generate(crate::auth::nkeys::Role::Server);
            {
                use std::io::Write;
                use std::os::unix::fs::OpenOptionsExt;
                // Never over an existing key: losing it would orphan its attestations.
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&out)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", out.display()))?;
                f.write_all(key.seed().as_bytes())?;
                f.sync_all()?;
            }
            println!("{}", key.public_key());
            eprintln!(
                "audit key seed written to {} (keep it secret; give auditors the public key above)",
                out.display()
            );
            Ok(())
        }
        Command::Audit(args::AuditArgs {
            cmd:
                Some(args::AuditCmd::Verify {
                    report,
                    signer,
                    stores,
                    key,
                    key_file,
                }),
            ..
        }) => {
            let text = std::fs::read_to_string(&report)?;
            let attestation = match crate::audit::attest::verify(&text, signer.as_deref()) {
                Ok(a) => a,
                Err(e) => {
                    println!("signature: INVALID ({e})");
                    std::process::exit(5);
                }
            };
            println!(
                "signature: valid, by {} ({}, issued {})",
                attestation.signer, attestation.tool, attestation.issued
            );
            for e in &attestation.erasures {
                println!(
                    "attested erasure: account {} on {} (store {}): account key {}, {} stream key sets, {} spare keys destroyed; keyring generation {} {}",
                    e.account,
                    e.server,
                    e.store_id,
                    e.account_key,
                    e.stream_keys.len(),
                    e.spare_keys,
                    e.keyring_generation,
                    if e.verified_absent { "holds none of them" } else { "NOT verified" }
                );
            }
            for r in &attestation.stores {
                println!(
                    "attested: {} (store {}), {} streams, {} segments, {} findings, exit code {}",
                    r.store,
                    r.store_id.as_deref().unwrap_or("-"),
                    r.streams.len(),
                    r.segments.len(),
                    r.findings.len(),
                    attestation.exit_code
                );
            }
            let mut differs = false;
            for (i, store) in stores.iter().enumerate() {
                let Some(attested) = attestation.stores.get(i) else {
                    println!("{}: not in the attestation", store.display());
                    differs = true;
                    continue;
                };
                let opts = crate::audit::AuditOptions {
                    store: store.clone(),
                    key: key.clone().map(zeroize::Zeroizing::new),
                    key_file: key_file.clone(),
                    no_key: !attested.keyed,
                    canaries: Vec::new(),
                    progress: crate::audit::Progress::new(),
                };
                let bar = commands::audit::draw(opts.progress.clone(), progress::enabled(false));
                let now = tokio::task::spawn_blocking(move || crate::audit::audit(&opts)).await?;
                if let Some(bar) = bar {
                    let _ = bar.join();
                }
                let d = crate::audit::attest::differences(attested, &now);
                if d.is_empty() {
                    println!("{}: matches the attestation", store.display());
                } else {
                    differs = true;
                    println!("{}: DIFFERS from the attestation:", store.display());
                    for line in d {
                        println!("  {line}");
                    }
                }
            }
            if differs {
                std::process::exit(6);
            }
            Ok(())
        }
        Command::Audit(a) => {
            if a.stores.is_empty() {
                anyhow::bail!(
                    "which store? `sealctl audit STORE...` or `sealctl audit verify REPORT`"
                );
            }
            // Every node's store in turn; the exit code is the first store's that is not
            // clean (0 when all are).
            let mut reports = Vec::new();
            for store in &a.stores {
                let opts = crate::audit::AuditOptions {
                    store: store.clone(),
                    key: a.key.clone().map(zeroize::Zeroizing::new),
                    key_file: a.key_file.clone(),
                    no_key: a.no_key,
                    canaries: a.canary.clone(),
                    progress: crate::audit::Progress::new(),
                };
                let bar =
                    commands::audit::draw(opts.progress.clone(), progress::enabled(a.conn.json));
                let report =
                    tokio::task::spawn_blocking(move || crate::audit::audit(&opts)).await?;
                if let Some(bar) = bar {
                    let _ = bar.join();
                }
                if !a.conn.json {
                    if a.stores.len() > 1 {
                        println!("== {}", store.display());
                    }
                    commands::audit::print_summary(&report);
                }
                reports.push(report);
            }
            finish_audit(&a, reports)
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
        // The client commands need to know whether `--server` was given; `main` routes them
        // through `run_with`, and so does this.
        other => {
            Box::pin(run_with(
                args::Cli {
                    server: cli.server,
                    no_progress: cli.no_progress,
                    command: other,
                },
                true,
            ))
            .await
        }
    }
}

/// The end of every `sealctl audit`: the signed attestation, the JSON, the exit code (the
/// first report's that is not clean).
fn finish_audit(a: &args::AuditArgs, reports: Vec<crate::audit::Report>) -> anyhow::Result<()> {
    let code = reports
        .iter()
        .map(crate::audit::Report::exit_code)
        .find(|c| *c != 0)
        .unwrap_or(0);
    if let (Some(out), Some(seed_file)) = (&a.attest, &a.sign_with) {
        let seed = zeroize::Zeroizing::new(std::fs::read_to_string(seed_file)?);
        let signed = crate::audit::attest::sign(&reports, &[], code, seed.trim())
            .map_err(anyhow::Error::msg)?;
        std::fs::write(out, signed)?;
        if !a.conn.json {
            println!("attestation: {} (signed)", out.display());
        }
    }
    if a.conn.json {
        match reports.as_slice() {
            [one] => println!("{}", serde_json::to_string_pretty(one)?),
            all => println!(
                "{}",
                serde_json::to_string_pretty(
                    &serde_json::json!({"stores": all, "exit_code": code})
                )?
            ),
        }
    }
    if code != 0 {
        std::process::exit(i32::from(code));
    }
    Ok(())
}
