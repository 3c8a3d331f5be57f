//! Clusters of real server processes on loopback: sealstream nodes, nats-server nodes, or a
//! mix (spec/cluster.md). Each node gets random client and monitoring ports and a fixed route
//! port picked at start, so a node restarted with [`TestCluster::restart`] is found again by
//! the others' configured routes.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::{repo_path, server_binary, spin_pause, TestServer};

/// Which server a node runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The binary under test (`SEALSTREAM_TEST_SERVER` or sealstream).
    UnderTest,
    /// The reference nats-server from the project's virtualenv.
    NatsServer,
}

/// One node: its process and what it was started with.
pub struct Node {
    /// The process (client port, monitoring port, log).
    pub server: TestServer,
    /// Server name (`n1`, `n2`, ...).
    pub name: String,
    kind: Kind,
    route_port: u16,
    seeds: Vec<String>,
    conf: Option<String>,
    /// Network namespace and address, for nodes on hosts of their own.
    place: Place,
    /// JetStream's store, kept across restarts (nodes started by [`TestCluster::start_js`]).
    store: Option<std::sync::Arc<tempfile::TempDir>>,
}

/// Where a node runs.
#[derive(Debug, Clone)]
struct Place {
    netns: Option<String>,
    host: String,
}

impl Place {
    fn loopback() -> Self {
        Place {
            netns: None,
            host: "127.0.0.1".into(),
        }
    }
}

/// A running cluster; nodes stop on drop.
pub struct TestCluster {
    /// The nodes, `n1` first.
    pub nodes: Vec<Node>,
    /// Cluster name.
    pub name: String,
}

/// The reference nats-server binary, when the virtualenv has one.
pub fn nats_server_binary() -> Option<PathBuf> {
    let p = repo_path(".venv/bin/nats-server");
    p.exists().then_some(p)
}

impl TestCluster {
    /// Starts one node per entry of `kinds`; every node after the first has the first as its
    /// only seed route (the rest of the mesh comes from gossip). `conf` is every node's
    /// config file body (accounts, say).
    pub fn start(kinds: &[Kind], conf: Option<&str>) -> Self {
        let places = vec![Place::loopback(); kinds.len()];
        Self::start_at(kinds, conf, places)
    }

    /// As [`TestCluster::start`], node `i` on host `i` of `hosts` (a network namespace each).
    pub fn start_on(hosts: &super::netns::Hosts, kinds: &[Kind], conf: Option<&str>) -> Self {
        let places = (0..kinds.len())
            .map(|i| Place {
                netns: Some(hosts.ns(i)),
                host: hosts.addr(i),
            })
            .collect();
        Self::start_at(kinds, conf, places)
    }

    /// `n` sealstream nodes with JetStream on, each with a store of its own that survives
    /// [`TestCluster::restart`]: a full mesh of configured routes, as a JetStream cluster is
    /// configured.
    pub fn start_js(n: usize) -> Self {
        Self::start_js_conf(n, None)
    }

    /// As [`TestCluster::start_js`], every node also reading the config body `conf`
    /// (accounts, a system account).
    pub fn start_js_conf(n: usize, conf: Option<&str>) -> Self {
        Self::start_js_each(&vec![conf; n])
    }

    /// As [`TestCluster::start_js`], node `i` reading the config body `confs[i]`.
    pub fn start_js_each(confs: &[Option<&str>]) -> Self {
        let places = vec![Place::loopback(); confs.len()];
        Self::start_js_at(confs, places)
    }

    /// As [`TestCluster::start_js`], node `i` on host `i` of `hosts` (a network namespace
    /// each), so that a test can cut nodes off from each other.
    pub fn start_js_on(hosts: &super::netns::Hosts, n: usize, conf: Option<&str>) -> Self {
        let places = (0..n)
            .map(|i| Place {
                netns: Some(hosts.ns(i)),
                host: hosts.addr(i),
            })
            .collect();
        Self::start_js_at(&vec![conf; n], places)
    }

    fn start_js_at(confs: &[Option<&str>], places: Vec<Place>) -> Self {
        let n = confs.len();
        let mut c = TestCluster {
            nodes: Vec::new(),
            name: "C1".to_owned(),
        };
        let ports: Vec<u16> = (0..n).map(|_| super::reserved_port()).collect();
        let seeds: Vec<String> = ports
            .iter()
            .zip(&places)
            .map(|(p, place)| format!("nats-route://{}:{p}", place.host))
            .collect();
        for (i, place) in places.into_iter().enumerate() {
            let seeds = seeds.clone();
            let name = format!("n{}", i + 1);
            let store = std::sync::Arc::new(tempfile::tempdir().expect("tempdir"));
            let conf = confs[i];
            let server = spawn_node_with(
                Kind::UnderTest,
                &name,
                &c.name,
                ports[i],
                &seeds,
                conf,
                &place,
                Some(store.path()),
                &[],
            );
            c.nodes.push(Node {
                server,
                name,
                kind: Kind::UnderTest,
                route_port: ports[i],
                seeds,
                conf: conf.map(str::to_owned),
                place,
                store: Some(store),
            });
        }
        c
    }

    fn start_at(kinds: &[Kind], conf: Option<&str>, places: Vec<Place>) -> Self {
        let name = "C1".to_owned();
        let mut c = TestCluster {
            nodes: Vec::new(),
            name,
        };
        let mut first_route = 0;
        for ((i, kind), place) in kinds.iter().enumerate().zip(places) {
            let seeds = if i == 0 {
                Vec::new()
            } else {
                vec![format!(
                    "nats-route://{}:{first_route}",
                    c.nodes[0].place.host
                )]
            };
            let node_name = format!("n{}", i + 1);
            // Each node picks its own route port; a restart reuses it.
            let server = spawn_node(*kind, &node_name, &c.name, 0, &seeds, conf, &place);
            let route_port = server.cluster_port.expect("route port");
            if i == 0 {
                first_route = route_port;
            }
            c.nodes.push(Node {
                server,
                name: node_name,
                kind: *kind,
                route_port,
                seeds,
                conf: conf.map(str::to_owned),
                place,
                store: None,
            });
        }
        c
    }

    /// Starts one more node of `kind` with its own config body, seeded with node 1's route.
    /// Returns its index.
    pub fn join(&mut self, kind: Kind, conf: Option<&str>) -> usize {
        let seeds = vec![format!(
            "nats-route://127.0.0.1:{}",
            self.nodes[0].route_port
        )];
        let name = format!("n{}", self.nodes.len() + 1);
        let place = Place::loopback();
        let server = spawn_node(kind, &name, &self.name, 0, &seeds, conf, &place);
        let route_port = server.cluster_port.expect("route port");
        self.nodes.push(Node {
            server,
            name,
            kind,
            route_port,
            seeds,
            conf: conf.map(str::to_owned),
            place,
            store: None,
        });
        self.nodes.len() - 1
    }

    /// Whether every node runs the reference server (tests of sealstream-only behaviour
    /// return early then).
    pub fn is_reference(&self) -> bool {
        self.nodes
            .iter()
            .all(|n| n.server.is_reference() || n.kind == Kind::NatsServer)
    }

    /// `nats://127.0.0.1:<client port>` of node `i`.
    pub fn url(&self, i: usize) -> String {
        self.nodes[i].server.url()
    }

    /// Names of the peers node `i` has routes to (distinct; pooled connections count once).
    pub fn peers_of(&self, i: usize) -> Vec<String> {
        let (code, body) = self.nodes[i].server.http_get("/routez");
        assert_eq!(code, 200, "{body}");
        // nats-server answers chunked: the JSON is between the first `{` and the last `}`.
        let json = match (body.find('{'), body.rfind('}')) {
            (Some(a), Some(b)) if a < b => &body[a..=b],
            _ => body.as_str(),
        };
        let v: serde_json::Value = serde_json::from_str(json)
            .unwrap_or_else(|e| panic!("/routez of n{}: {e}: {body:?}", i + 1));
        let mut names: Vec<String> = v["routes"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|r| r["remote_name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names.dedup();
        names
    }

    /// Waits until every node has a route to every other node.
    pub fn wait_full_mesh(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        let n = self.nodes.len();
        loop {
            let done = (0..n).all(|i| self.peers_of(i).len() == n - 1);
            if done {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "no full mesh: {:?}",
                (0..n).map(|i| self.peers_of(i)).collect::<Vec<_>>()
            );
            spin_pause(Duration::from_millis(50));
        }
    }

    /// Kills node `i` (SIGKILL when not `graceful`).
    pub fn stop(&mut self, i: usize, graceful: bool) {
        self.nodes[i].server.stop(graceful);
    }

    /// Starts node `i` again on its route port (its client port changes).
    pub fn restart(&mut self, i: usize) {
        self.restart_with_env(i, &[]);
    }

    /// As [`TestCluster::restart`], with `env` set for this start of node `i` alone (a
    /// server's test hooks).
    pub fn restart_with_env(&mut self, i: usize, env: &[(&str, &str)]) {
        let node = &mut self.nodes[i];
        node.server.stop(false);
        // The old process's store is the new one's: no audit while it runs.
        node.server.skip_audit();
        let store = node.store.clone();
        node.server = spawn_node_with(
            node.kind,
            &node.name,
            &self.name,
            node.route_port,
            &node.seeds,
            node.conf.as_deref(),
            &node.place,
            store.as_ref().map(|s| s.path()),
            env,
        );
    }
}

fn spawn_node(
    kind: Kind,
    name: &str,
    cluster: &str,
    route_port: u16,
    seeds: &[String],
    conf: Option<&str>,
    place: &Place,
) -> TestServer {
    spawn_node_with(
        kind,
        name,
        cluster,
        route_port,
        seeds,
        conf,
        place,
        None,
        &[],
    )
}

#[allow(
    clippy::too_many_arguments,
    reason = "a test helper's plain parameter list"
)]
fn spawn_node_with(
    kind: Kind,
    name: &str,
    cluster: &str,
    route_port: u16,
    seeds: &[String],
    conf: Option<&str>,
    place: &Place,
    store: Option<&std::path::Path>,
    env: &[(&str, &str)],
) -> TestServer {
    let (bin, reference) = match kind {
        Kind::UnderTest => server_binary(),
        Kind::NatsServer => (
            nats_server_binary().expect("nats-server in .venv (scripts/setup-test-env)"),
            true,
        ),
    };
    let mut args: Vec<String> = vec![
        "-n".into(),
        name.into(),
        "-m".into(),
        "-1".into(),
        "--cluster_name".into(),
        cluster.into(),
        "--cluster".into(),
        if route_port == 0 {
            format!("nats://{}:-1", place.host)
        } else {
            format!("nats://{}:{route_port}", place.host)
        },
    ];
    if !seeds.is_empty() {
        args.push("--routes".into());
        args.push(seeds.join(","));
    }
    if let Some(sd) = store {
        args.extend(["-js".into(), "-sd".into(), sd.display().to_string()]);
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut s = TestServer::spawn_at(
        place.netns.as_deref(),
        &place.host,
        &bin,
        reference,
        dir,
        args,
        conf.map(str::to_owned),
        env,
    );
    // nats-server logs its route listener after "Server is ready": wait for the line.
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.cluster_port.is_none() {
        let log = s.log_text();
        s.cluster_port = log
            .lines()
            .find_map(|l| l.split("Listening for route connections on ").nth(1))
            .and_then(|rest| rest.trim().rsplit(':').next()?.parse().ok());
        assert!(
            Instant::now() < deadline,
            "no route listener in the log:\n{log}"
        );
        if s.cluster_port.is_none() {
            spin_pause(Duration::from_millis(20));
        }
    }
    s
}
