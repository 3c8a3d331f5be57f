//! `sealctl audit`'s printing and progress bars, and `sealctl store rotate-master`. The audit
//! itself is [`crate::audit`] (the server runs the same checks on its live store).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use zeroize::Zeroizing;

use crate::audit::{Phase, Progress, Report};
use crate::store::meta::{KeySource, MetaOptions, MetaStore};

/// Draws `progress` on stderr (one bar per phase) until `done` is dropped; hidden unless
/// `enabled`.
pub fn draw(progress: Arc<Progress>, enabled: bool) -> Option<std::thread::JoinHandle<()>> {
    if !enabled {
        return None;
    }
    Some(std::thread::spawn(move || {
        let mut shown: Option<(Phase, indicatif::ProgressBar)> = None;
        // The audit holds the other reference; when it is dropped the audit is over.
        while Arc::strong_count(&progress) > 1 {
            let phase = progress.phase();
            let (done, total) = progress.position();
            if shown.as_ref().is_none_or(|(p, _)| *p != phase) {
                if let Some((_, pb)) = shown.take() {
                    pb.finish_and_clear();
                }
                if phase != Phase::Idle {
                    let pb = crate::ctl::progress::bar(Some(total), phase.name(), false);
                    if let Ok(style) = indicatif::ProgressStyle::with_template(
                        "{msg:>12} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
                    ) {
                        pb.set_style(style.progress_chars("=> "));
                    }
                    shown = Some((phase, pb));
                }
            }
            if let Some((_, pb)) = &shown {
                pb.set_length(total);
                pb.set_position(done);
            }
            // The next redraw (nothing unparks this thread).
            std::thread::park_timeout(std::time::Duration::from_millis(100));
        }
        if let Some((_, pb)) = shown {
            pb.finish_and_clear();
        }
    }))
}

/// Prints the human summary.
pub fn print_summary(r: &Report) {
    println!("store:   {}", r.store);
    println!(
        "files:   {} ({} bytes), {} blocks framed",
        r.files, r.bytes, r.blocks_framed
    );
    if r.keyed {
        let msgs: u64 = r.streams.iter().map(|s| s.messages).sum();
        println!(
            "streams: {} ({} messages authenticated), {} plaintext fragments searched",
            r.streams.len(),
            msgs,
            r.needles
        );
        if r.needles_too_short > 0 {
            println!(
                "         ({} fragments too short to tell a leak from chance in this much ciphertext were not searched)",
                r.needles_too_short
            );
        }
    } else {
        println!("no key: structure and entropy checked only");
    }
    if let Some(raft) = &r.raft {
        println!(
            "raft:    {} records of {} groups authenticated ({} of them rotating a key); not opened: {} sealed with dropped group keys, {} of groups no longer here",
            raft.records,
            raft.groups,
            raft.groups_rotating,
            raft.dropped_key_records,
            raft.other_records
        );
        for g in &r.raft_groups {
            println!(
                "         group {} ({}): {} records, {} key{}, rotated {} times",
                g.group,
                g.stream.as_deref().unwrap_or("stream not named offline"),
                g.records,
                g.keys,
                if g.keys == 1 { "" } else { "s" },
                g.key_generation
            );
        }
    }
    if r.findings.is_empty() {
        println!("result:  clean");
        return;
    }
    println!("findings:");
    for f in &r.findings {
        let at = f.offset.map(|o| format!(" @ {o}")).unwrap_or_default();
        println!("  [{:?}] {}{at}: {}", f.class, f.path, f.detail);
    }
}

/// `sealctl store rotate-master`: opens the store with the current key and rewraps every data
/// key under the new one (see `docs/key-hierarchy.md` §4).
///
/// # Errors
/// Wrong current key, no new key given, or a store error.
pub fn rotate_master(
    store: &Path,
    key: Option<String>,
    key_file: Option<PathBuf>,
    new_key: Option<String>,
    new_key_file: Option<PathBuf>,
) -> anyhow::Result<()> {
    let root = if store.join("STORE").exists() {
        store.to_path_buf()
    } else {
        store.join("jetstream")
    };
    let current = match (key, key_file) {
        (Some(k), _) => KeySource::Passphrase(Zeroizing::new(k)),
        (None, Some(f)) => KeySource::KeyFile(f),
        (None, None) => KeySource::Auto,
    };
    let new = match (new_key, new_key_file) {
        (Some(k), _) => KeySource::Passphrase(Zeroizing::new(k)),
        (None, Some(f)) => {
            if !f.exists() {
                crate::crypto::MasterKey::generate_key_file(&f)?;
            }
            KeySource::KeyFile(f)
        }
        (None, None) => {
            anyhow::bail!("give --new-key (or SEALSTREAM_NEW_STORE_KEY) or --new-key-file")
        }
    };
    let described = new.describe();
    let mut meta = MetaStore::open(&root, current, MetaOptions::default())?;
    meta.rotate_master(new)?;
    println!("master key rotated; the store now opens with {described}");
    Ok(())
}

/// `sealctl audit --live`: asks the running servers to audit their stores and collects the
/// reports (printed as they arrive, unless `--json`). As the system account every server of
/// the cluster audits, found first (`$SYS.REQ.SERVER.PING`): one after another
/// (`$SYS.REQ.SERVER.<id>.AUDIT`, each awaited up to `--wait`), or with `--all-at-once` all
/// together (`$SYS.REQ.SERVER.PING.AUDIT`, the reports awaited up to `--wait`). As a tenant
/// (`--tenant`, `$JS.API.ACCOUNT.AUDIT`) each server of `--server` (comma-separated) audits
/// the caller's account in its own store; one server named stands for its whole cluster (the
/// others from its INFO's `connect_urls`).
///
/// # Errors
/// Connection errors; a server that refused or could not audit (exit 7); no answer.
pub async fn live(
    target: &super::conn::Target,
    a: &crate::ctl::args::AuditArgs,
) -> anyhow::Result<Vec<Report>> {
    use futures::StreamExt as _;
    use serde_json::{json, Value};
    let wait = super::util::parse_duration(&a.wait).map_err(|e| anyhow::anyhow!("--wait: {e}"))?;
    let mut body = json!({});
    if let Some(acc) = &a.account {
        body["account"] = json!(acc);
    }
    if let Some(n) = a.bytes_per_sec {
        body["bytes_per_sec"] = json!(n);
    }
    if !a.canary.is_empty() {
        body["canaries"] = json!(a.canary);
    }
    let mut reports = Vec::new();
    let mut failed = Vec::new();
    let take = |who: String, v: &Value, reports: &mut Vec<Report>, failed: &mut Vec<String>| {
        let data = v.get("data").or_else(|| v.get("report"));
        match data.map(|d| serde_json::from_value::<Report>(d.clone())) {
            Some(Ok(r)) => {
                if !a.conn.json {
                    println!("== {who}");
                    print_summary(&r);
                }
                reports.push(r);
            }
            _ => {
                let why = v
                    .pointer("/error/description")
                    .and_then(Value::as_str)
                    .unwrap_or("no report in the answer");
                failed.push(format!("{who}: {why}"));
            }
        }
    };
    if a.tenant {
        let mut urls: std::collections::VecDeque<String> = target
            .url
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(str::to_owned)
            .collect();
        // One server named: the cluster's other servers are found in its INFO's
        // `connect_urls` (a tenant cannot ask the system account who is there).
        let discover = urls.len() == 1;
        let mut seen_ids = std::collections::BTreeSet::new();
        let mut seen_urls = std::collections::BTreeSet::new();
        while let Some(url) = urls.pop_front() {
            if !seen_urls.insert(url.clone()) {
                continue;
            }
            let one = super::conn::Target {
                url: url.clone(),
                explicit: true,
            };
            let s = match super::conn::Session::open(&one, &a.conn).await {
                Ok(s) => s,
                Err(e) if discover && !seen_ids.is_empty() => {
                    failed.push(format!("{url}: {e}"));
                    continue;
                }
                Err(e) => return Err(e),
            };
            let info = s.client.server_info();
            if !seen_ids.insert(info.server_id.clone()) {
                continue;
            }
            if discover {
                let scheme = url.split_once("://").map_or("nats", |(s, _)| s);
                for other in &info.connect_urls {
                    urls.push_back(format!("{scheme}://{other}"));
                }
            }
            let url = url.as_str();
            let inbox = s.client.new_inbox();
            let mut sub = s.client.subscribe(inbox.clone()).await?;
            s.client
                .publish_with_reply(
                    "$JS.API.ACCOUNT.AUDIT",
                    inbox,
                    serde_json::to_vec(&body)?.into(),
                )
                .await?;
            s.client.flush().await?;
            match tokio::time::timeout(wait, sub.next()).await {
                Ok(Some(m)) if !m.payload.is_empty() => {
                    let v: Value = serde_json::from_slice(&m.payload)?;
                    take(url.to_owned(), &v, &mut reports, &mut failed);
                }
                _ => failed.push(format!("{url}: no answer within {}", a.wait)),
            }
        }
    } else if !a.all_at_once {
        // One node at a time: at most one replica of each group is slowed by an audit.
        let s = super::conn::Session::open(target, &a.conn).await?;
        for (name, id) in servers(&s.client).await? {
            let v = ask_server(&s.client, &id, "AUDIT", &body, Some(wait)).await;
            take(name, &v, &mut reports, &mut failed);
        }
    } else {
        let s = super::conn::Session::open(target, &a.conn).await?;
        let servers = servers(&s.client).await?.len();
        let inbox = s.client.new_inbox();
        let mut answers = s.client.subscribe(inbox.clone()).await?;
        s.client
            .publish_with_reply(
                "$SYS.REQ.SERVER.PING.AUDIT",
                inbox,
                serde_json::to_vec(&body)?.into(),
            )
            .await?;
        s.client.flush().await?;
        let until = tokio::time::Instant::now() + wait;
        let mut answered = 0;
        while answered < servers {
            match tokio::time::timeout_at(until, answers.next()).await {
                Ok(Some(m)) if !m.payload.is_empty() => {
                    answered += 1;
                    let v: Value = serde_json::from_slice(&m.payload)?;
                    let who = v
                        .pointer("/server/name")
                        .and_then(Value::as_str)
                        .unwrap_or("?")
                        .to_owned();
                    take(who, &v, &mut reports, &mut failed);
                }
                Ok(Some(_)) => {}
                _ => {
                    failed.push(format!(
                        "{} of {servers} servers did not answer within {}",
                        servers - answered,
                        a.wait
                    ));
                    break;
                }
            }
        }
    }
    if !failed.is_empty() {
        for f in &failed {
            eprintln!("audit not done: {f}");
        }
        std::process::exit(7);
    }
    Ok(reports)
}

/// `sealctl store rotate-master-live`: every running server (or the one named) rotates its
/// store's master key to `new_key_file` on its own host (`$SYS.REQ.SERVER.PING.ROTATE_MASTER`;
/// each server answers for itself).
///
/// # Errors
/// Connection errors; no server answered; a server that could not rotate (named).
pub async fn rotate_master_live(
    s: &super::conn::Session,
    new_key_file: &Path,
    server_name: Option<&str>,
) -> anyhow::Result<()> {
    use serde_json::{json, Value};
    let body = json!({ "new_key_file": new_key_file });
    // The servers, by name and id: each is asked on its own subject.
    let mut servers = servers(&s.client).await?;
    if let Some(name) = server_name {
        servers.retain(|(n, _)| n == name);
        if servers.is_empty() {
            anyhow::bail!("no server named {name} answered");
        }
    }
    let mut failed = false;
    for (name, id) in servers {
        let v = ask_server(&s.client, &id, "ROTATE_MASTER", &body, None).await;
        if s.json {
            println!("{}", serde_json::to_string(&v)?);
        }
        match v.pointer("/error/description").and_then(Value::as_str) {
            Some(why) => {
                failed = true;
                eprintln!("{name}: master key NOT rotated: {why}");
            }
            None if !s.json => println!(
                "{name}: master key rotated; the store now opens with {}. Start it with {} from now on.",
                v.pointer("/data/key").and_then(Value::as_str).unwrap_or("?"),
                v.pointer("/data/restart_with").and_then(Value::as_str).unwrap_or("?")
            ),
            None => {}
        }
    }
    if failed {
        std::process::exit(1);
    }
    Ok(())
}

/// Asks the server with id `id` to do `verb` (`$SYS.REQ.SERVER.<id>.<VERB>`, answered when it
/// is done) and waits up to `wait` (the client's default request timeout without): its JSON
/// answer, or `{"error": {"description": why}}` when it gave none — the one shape every
/// caller reads, whatever went wrong.
async fn ask_server(
    client: &async_nats::Client,
    id: &str,
    verb: &str,
    body: &serde_json::Value,
    wait: Option<std::time::Duration>,
) -> serde_json::Value {
    let failed = |why: String| serde_json::json!({ "error": { "description": why } });
    let payload = match serde_json::to_vec(body) {
        Ok(p) => p,
        Err(e) => return failed(e.to_string()),
    };
    let mut request = async_nats::Request::new().payload(payload.into());
    if wait.is_some() {
        request = request.timeout(wait);
    }
    match client
        .send_request(format!("$SYS.REQ.SERVER.{id}.{verb}"), request)
        .await
    {
        Ok(m) if m.payload.is_empty() => failed("an empty answer".into()),
        Ok(m) => serde_json::from_slice(&m.payload)
            .unwrap_or_else(|e| failed(format!("an answer that is not JSON: {e}"))),
        Err(e) => failed(match wait {
            Some(w) => format!("no answer within {w:?}: {e}"),
            None => format!("no answer: {e}"),
        }),
    }
}

/// Every server that answers `$SYS.REQ.SERVER.PING` within a second: (name, id).
///
/// # Errors
/// Connection errors; nobody answered (not a system account user).
async fn servers(client: &async_nats::Client) -> anyhow::Result<Vec<(String, String)>> {
    use futures::StreamExt as _;
    use serde_json::Value;
    let inbox = client.new_inbox();
    let mut pongs = client.subscribe(inbox.clone()).await?;
    client
        .publish_with_reply("$SYS.REQ.SERVER.PING", inbox, "{}".into())
        .await?;
    client.flush().await?;
    let mut servers = Vec::new();
    let until = tokio::time::Instant::now() + std::time::Duration::from_secs(1);
    while let Ok(Some(m)) = tokio::time::timeout_at(until, pongs.next()).await {
        if let Ok(v) = serde_json::from_slice::<Value>(&m.payload) {
            let field = |k: &str| {
                v.pointer(k)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned()
            };
            servers.push((field("/server/name"), field("/server/id")));
        }
    }
    if servers.is_empty() {
        anyhow::bail!("no server answered $SYS.REQ.SERVER.PING (a system account user is needed)");
    }
    Ok(servers)
}

/// `sealctl store rekey-live`: every running server rotates the data keys of its file streams
/// (or of `account`, or of one `stream`) and re-seals them in the background at `pace`
/// (`$SYS.REQ.SERVER.<id>.REKEY` to each, answered when each server is done). Prints one line
/// per stream.
///
/// # Errors
/// Connection errors; no server answered; a server or stream that could not be re-sealed
/// (exit 1, named).
pub async fn rekey_live(
    s: &super::conn::Session,
    account: Option<&str>,
    stream: Option<&str>,
    pace: Option<u64>,
    wait: std::time::Duration,
) -> anyhow::Result<()> {
    use serde_json::{json, Value};
    let mut body = json!({});
    if let Some(a) = account {
        body["account"] = json!(a);
    }
    if let Some(st) = stream {
        body["stream"] = json!(st);
    }
    if let Some(p) = pace {
        body["bytes_per_sec"] = json!(p);
    }
    let mut failed = false;
    // A named stream of a cluster: the servers without a replica of it say so; only all of
    // them saying so is an error.
    let mut holders = 0usize;
    let mut without = Vec::new();
    // One server after another, each answering once it is done.
    for (name, id) in servers(&s.client).await? {
        let v = ask_server(&s.client, &id, "REKEY", &body, Some(wait)).await;
        if s.json {
            println!("{}", serde_json::to_string(&v)?);
        }
        if let Some(why) = v.pointer("/error/description").and_then(Value::as_str) {
            if stream.is_some() && why.starts_with(NO_SUCH_STREAM) {
                without.push(name);
                continue;
            }
            failed = true;
            eprintln!("{name}: not re-sealed: {why}");
            continue;
        }
        holders += 1;
        for st in v
            .pointer("/data/streams")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let label = format!(
                "{name}: {}/{}",
                st["account"].as_str().unwrap_or("?"),
                st["stream"].as_str().unwrap_or("?")
            );
            match st.get("error").and_then(Value::as_str) {
                Some(e) => {
                    failed = true;
                    eprintln!("{label}: NOT re-sealed: {e}");
                }
                None if !s.json => {
                    let destroyed: Vec<String> = st["destroyed_versions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|v| format!("v{v}"))
                        .collect();
                    // `bytes_after`: what a server of an earlier build answers.
                    let bytes = st.get("bytes_rewritten").unwrap_or(&st["bytes_after"]);
                    println!(
                        "{label}: re-sealed under data key v{} ({} segments, {} bytes); destroyed {}",
                        st["dek_version"], st["segments_rewritten"], bytes,
                        if destroyed.is_empty() {
                            "none".to_owned()
                        } else {
                            destroyed.join(", ")
                        }
                    );
                }
                None => {}
            }
            // A replica of a replicated stream: its group key on that server too.
            if let Some(g) = st.get("group_key") {
                match g.get("error").and_then(Value::as_str) {
                    Some(e) => {
                        failed = true;
                        eprintln!("{label}: group key NOT rotated: {e}");
                    }
                    None if !s.json => println!(
                        "{label}: group key rotated to generation {}; older destroyed",
                        g["generation"]
                    ),
                    None => {}
                }
            }
        }
    }
    if let Some(st) = stream.filter(|_| holders == 0 && !without.is_empty()) {
        failed = true;
        eprintln!("no server holds a file stream {st:?} of this account");
    } else if !without.is_empty() && !s.json {
        println!("without a replica of it: {}", without.join(", "));
    }
    if failed {
        std::process::exit(1);
    }
    Ok(())
}

/// How a server without the named stream answers a re-sealing request
/// (`server/jetstream/rekey.rs`).
const NO_SUCH_STREAM: &str = "no such file stream on this server";

/// `sealctl account purge`: asks every server to crypto-erase `account`
/// (`$JS.API.ACCOUNT.PURGE.<account>`, which each server of a cluster answers for its own
/// store) and, with `attest`, signs what they destroyed.
///
/// # Errors
/// Connection errors; no server answered; a server that could not erase (exit 1, named).
pub async fn purge_account(
    s: &super::conn::Session,
    account: &str,
    attest: Option<&Path>,
    sign_with: Option<&Path>,
) -> anyhow::Result<()> {
    use futures::StreamExt as _;
    use serde_json::Value;
    let expect = servers(&s.client).await?.len();
    let inbox = s.client.new_inbox();
    let mut answers = s.client.subscribe(inbox.clone()).await?;
    s.client
        .publish_with_reply(format!("$JS.API.ACCOUNT.PURGE.{account}"), inbox, "".into())
        .await?;
    s.client.flush().await?;
    let until = tokio::time::Instant::now() + s.timeout.max(std::time::Duration::from_secs(30));
    let mut erasures = Vec::new();
    let mut answered = 0;
    let mut failed = false;
    while answered < expect {
        let Ok(Some(m)) = tokio::time::timeout_at(until, answers.next()).await else {
            break;
        };
        if m.payload.is_empty() {
            continue;
        }
        answered += 1;
        let v: Value = serde_json::from_slice(&m.payload)?;
        if let Some(why) = v.pointer("/error/description").and_then(Value::as_str) {
            failed = true;
            eprintln!("not erased: {why}");
            continue;
        }
        match v.get("erased") {
            Some(e) => {
                let e: crate::audit::Erasure = serde_json::from_value(e.clone())?;
                if !s.json {
                    println!(
                        "{}: account {} erased: key {} and {} stream key sets destroyed; keyring generation {} {}",
                        e.server,
                        e.account,
                        e.account_key,
                        e.stream_keys.len(),
                        e.keyring_generation,
                        if e.verified_absent { "holds none of them" } else { "STILL HOLDS SOME" }
                    );
                }
                failed |= !e.verified_absent;
                erasures.push(e);
            }
            None if !s.json => println!("a server had no JetStream data of {account}"),
            None => {}
        }
    }
    if answered < expect {
        failed = true;
        eprintln!("{} of {expect} servers did not answer", expect - answered);
    }
    if s.json {
        println!("{}", serde_json::to_string_pretty(&erasures)?);
    }
    if let (Some(out), Some(seed_file)) = (attest, sign_with) {
        let seed = Zeroizing::new(std::fs::read_to_string(seed_file)?);
        let signed = crate::audit::attest::sign(&[], &erasures, u8::from(failed), seed.trim())
            .map_err(anyhow::Error::msg)?;
        std::fs::write(out, signed)?;
        if !s.json {
            println!("attestation: {} (signed)", out.display());
        }
    }
    if failed {
        std::process::exit(1);
    }
    Ok(())
}
