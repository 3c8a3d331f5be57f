//! One node of the idle-groups measurement (issue 15: "check early that 300 idle R3 groups on 3
//! nodes stay under 5 % CPU and 150 KiB RSS per group per node"), and of the consensus layer's
//! write measurement (`--store DIR --writes N`: groups on the node's sealed log; once ready, the
//! node commits N commands of `--size` bytes to the groups it leads, `--window` in flight, and
//! reports commits per second and fsyncs per commit).
//!
//! Each node hosts every group; node `i` of `n` proposes the first membership of the groups
//! with `group % n == i - 1`, so leadership starts spread over the nodes. Once every group this
//! node hosts knows its leader it prints `ready` (and writes `--ready-file`), then idles until
//! killed. `scripts/bench_raft_idle.py` runs three of them and measures CPU and RSS.
//!
//! ```text
//! cargo run --release --example raft_idle -- --id 1 --listen 127.0.0.1:7001 \
//!     --peer 2=127.0.0.1:7002 --peer 3=127.0.0.1:7003 --groups 300
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use openraft::BasicNode;
use sealstream::consensus::memory::CountingMachine;
use sealstream::consensus::sealed_log::SealedLog;
use sealstream::consensus::{mux::MuxNode, timing, Command, NodeId};
use sealstream::crypto::{SealKey, Secret};

struct Args {
    id: NodeId,
    listen: SocketAddr,
    peers: BTreeMap<NodeId, String>,
    groups: u64,
    ready_file: Option<String>,
    store: Option<String>,
    writes: u64,
    window: usize,
    size: usize,
}

fn parse_args() -> Result<Args> {
    let mut id = None;
    let mut listen = None;
    let mut peers = BTreeMap::new();
    let mut groups = 300;
    let mut ready_file = None;
    let mut store = None;
    let (mut writes, mut window, mut size) = (0, 256, 1024);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| anyhow!("{flag} needs a value"))?;
        match flag.as_str() {
            "--id" => id = Some(value.parse().context("--id")?),
            "--listen" => listen = Some(value.parse().context("--listen")?),
            "--peer" => {
                let (peer, addr) = value
                    .split_once('=')
                    .ok_or_else(|| anyhow!("--peer takes id=host:port"))?;
                peers.insert(peer.parse().context("--peer id")?, addr.to_string());
            }
            "--groups" => groups = value.parse().context("--groups")?,
            "--ready-file" => ready_file = Some(value),
            "--store" => store = Some(value),
            "--writes" => writes = value.parse().context("--writes")?,
            "--window" => window = value.parse().context("--window")?,
            "--size" => size = value.parse().context("--size")?,
            other => bail!("unknown flag {other}"),
        }
    }
    Ok(Args {
        id: id.ok_or_else(|| anyhow!("--id is required"))?,
        listen: listen.ok_or_else(|| anyhow!("--listen is required"))?,
        peers,
        groups,
        ready_file,
        store,
        writes,
        window: window.max(1),
        size,
    })
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = parse_args()?;
    let node = MuxNode::bind(args.id, args.listen, timing::raft_config("idle")).await?;
    let mut members: BTreeMap<NodeId, BasicNode> = args
        .peers
        .iter()
        .map(|(id, addr)| (*id, BasicNode::new(addr)))
        .collect();
    members.insert(args.id, BasicNode::new(node.addr()));
    let nodes = members.len() as u64;
    let log = match &args.store {
        Some(dir) => Some(SealedLog::open(
            Path::new(dir),
            Secret::random(),
            Vec::new(),
        )?),
        None => None,
    };
    let mut rafts = Vec::new();
    for group in 0..args.groups {
        let proposer = group % nodes == (args.id - 1) % nodes;
        let members = proposer.then(|| members.clone());
        let raft = match &log {
            Some(log) => {
                let key = SealKey::new(Secret::random());
                node.add_group_on(
                    group,
                    log.group(group, key),
                    CountingMachine::new(),
                    members,
                )
                .await?
            }
            None => node.add_group(group, members).await?,
        };
        rafts.push(raft);
    }
    let mut leading = 0;
    for raft in &rafts {
        let metrics = raft
            .wait(Some(Duration::from_secs(60)))
            .metrics(|m| m.current_leader.is_some(), "a leader")
            .await?;
        if metrics.current_leader == Some(args.id) {
            leading += 1;
        }
    }
    println!("ready groups={} leading={leading}", args.groups);
    let mut report = format!("{} {leading}", args.groups);
    if args.writes > 0 {
        let led: Vec<_> = rafts
            .iter()
            .filter(|r| r.metrics().borrow().current_leader == Some(args.id))
            .cloned()
            .collect();
        if led.is_empty() {
            bail!("this node leads no group to write to");
        }
        let (syncs0, records0) = log.as_ref().map(|l| l.io_counts()).unwrap_or_default();
        let started = std::time::Instant::now();
        let mut inflight = tokio::task::JoinSet::new();
        for n in 0..args.writes {
            if inflight.len() >= args.window {
                if let Some(done) = inflight.join_next().await {
                    done??;
                }
            }
            let raft = led[(n as usize) % led.len()].clone();
            let command = Command(vec![b'x'; args.size].into());
            inflight.spawn(async move { raft.client_write(command).await.map(|_| ()) });
        }
        while let Some(done) = inflight.join_next().await {
            done??;
        }
        let secs = started.elapsed().as_secs_f64();
        let (syncs, records) = log.as_ref().map(|l| l.io_counts()).unwrap_or_default();
        let line = format!(
            "writes={} secs={secs:.3} per_sec={:.0} syncs={} records={}",
            args.writes,
            args.writes as f64 / secs,
            syncs - syncs0,
            records - records0
        );
        println!("{line}");
        report = format!("{report} {line}");
    }
    if let Some(path) = &args.ready_file {
        std::fs::write(path, format!("{report}\n"))?;
    }
    // Idle until killed; the groups keep heartbeating.
    std::future::pending::<()>().await;
    Ok(())
}
