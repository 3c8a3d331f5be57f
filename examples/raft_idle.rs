//! One node of the idle-groups measurement (issue 15: "check early that 300 idle R3 groups on 3
//! nodes stay under 5 % CPU and 150 KiB RSS per group per node").
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
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use openraft::BasicNode;
use sealstream::consensus::{mux::MuxNode, timing, NodeId};

struct Args {
    id: NodeId,
    listen: SocketAddr,
    peers: BTreeMap<NodeId, String>,
    groups: u64,
    ready_file: Option<String>,
}

fn parse_args() -> Result<Args> {
    let mut id = None;
    let mut listen = None;
    let mut peers = BTreeMap::new();
    let mut groups = 300;
    let mut ready_file = None;
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
            other => bail!("unknown flag {other}"),
        }
    }
    Ok(Args {
        id: id.ok_or_else(|| anyhow!("--id is required"))?,
        listen: listen.ok_or_else(|| anyhow!("--listen is required"))?,
        peers,
        groups,
        ready_file,
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
    let mut rafts = Vec::new();
    for group in 0..args.groups {
        let proposer = group % nodes == (args.id - 1) % nodes;
        let raft = node
            .add_group(group, proposer.then(|| members.clone()))
            .await?;
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
    if let Some(path) = &args.ready_file {
        std::fs::write(path, format!("{} {leading}\n", args.groups))?;
    }
    // Idle until killed; the groups keep heartbeating.
    std::future::pending::<()>().await;
    Ok(())
}
