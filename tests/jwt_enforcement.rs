//! Account claims are enforced, never silently ignored: `default_permissions`, the account
//! limits (`subs`, `payload`, `imports`, `exports`, `wildcards`, `conn`, `data`), and account
//! updates acting on live connections (a removed signing key, a revocation, a lowered
//! connection limit, an expired account). The same tests run against nats-server.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use std::time::Duration;

use sealstream::auth::jwt::claims::{
    AccountLimits, Export, Import, SigningKey, UserPermissionsLimits,
};
use sealstream::auth::nkeys::{KeyPair, Role};
use support::jwt::{connect_jwt, now, open_user, user_jwt, Tenant, World};
use support::{Raw, TestServer};

const T: Duration = Duration::from_secs(5);

/// The next line that is not an INFO or a server PING.
fn next_line(r: &mut Raw) -> Option<String> {
    loop {
        let l = r.read_line(T)?;
        if l.starts_with("INFO") || l == "PING" {
            continue;
        }
        return Some(l);
    }
}

/// A user connected and past its first PONG.
fn login(s: &TestServer, t: &Tenant, signer: &KeyPair, perms: UserPermissionsLimits) -> Raw {
    let user = KeyPair::generate(Role::User);
    let account = t.key.public_key();
    let token = user_jwt(signer, &user, "u", perms, |c| {
        if signer.public_key() != account {
            c.nats.issuer_account = Some(account.clone());
        }
    });
    let mut r = s.raw();
    connect_jwt(&mut r, &token, &user);
    assert_eq!(next_line(&mut r).as_deref(), Some("PONG"));
    r
}

/// A user of `t` (signed by the account key) is refused at CONNECT.
fn expect_refused(s: &TestServer, t: &Tenant) {
    let user = KeyPair::generate(Role::User);
    let token = user_jwt(&t.key, &user, "u", open_user(), |_| {});
    let mut r = s.raw();
    connect_jwt(&mut r, &token, &user);
    assert_eq!(
        next_line(&mut r).as_deref(),
        Some("-ERR 'Authorization Violation'"),
        "{}",
        t.claims.name
    );
}

/// B exports the service `svc.*`; A imports it (mapped onto `local` when given).
fn service_pair(w: &World, local: Option<&str>) -> (Tenant, Tenant) {
    let mut b = w.tenant("B", AccountLimits::default());
    b.claims.nats.exports = vec![Export {
        name: "svc".into(),
        subject: "svc.*".into(),
        kind: "service".into(),
        ..Default::default()
    }];
    let mut a = w.tenant("A", AccountLimits::default());
    a.claims.nats.imports = vec![Import {
        name: "svc".into(),
        subject: "svc.*".into(),
        account: b.key.public_key(),
        local_subject: local.map(str::to_owned),
        kind: "service".into(),
        ..Default::default()
    }];
    (a, b)
}

/// A server trusting `tenants`, with a system account that takes claim updates and a full
/// resolver (what both servers need for `$SYS.REQ.CLAIMS.UPDATE`).
struct Setup {
    w: World,
    sys: Tenant,
    s: TestServer,
}

impl Setup {
    fn new(tenants: &[&Tenant], w: World) -> Self {
        let sys = w.tenant("SYS", AccountLimits::default());
        let conf = w.full_resolver_config(tenants, &sys);
        let s = TestServer::with_config(&conf);
        Setup { w, sys, s }
    }

    /// Pushes `t`'s current claims; returns the server's answer.
    fn push(&self, t: &Tenant) -> String {
        let mut r = login(&self.s, &self.sys, &self.sys.key, open_user());
        let jwt = self.w.account_jwt(t);
        r.send(
            format!(
                "SUB _INBOX.up 1\r\nPUB $SYS.REQ.CLAIMS.UPDATE _INBOX.up {}\r\n{jwt}\r\n",
                jwt.len()
            )
            .as_bytes(),
        );
        let head = next_line(&mut r).expect("claims update answer");
        assert!(head.starts_with("MSG _INBOX.up 1 "), "{head}");
        next_line(&mut r).unwrap()
    }
}

#[test]
fn account_default_permissions_apply_to_users_without_their_own() {
    let w = World::new();
    let mut t = w.tenant("ACME", AccountLimits::default());
    let mut d = UserPermissionsLimits::default();
    d.publish.deny = vec!["admin.>".into()];
    d.subscribe.deny = vec!["payroll.>".into()];
    t.claims.nats.default_permissions = Some(d);
    let s = TestServer::with_config(&w.config(&[&t]));
    let mut victim = login(&s, &t, &t.key, open_user());
    victim.send(b"SUB admin.> 1\r\nPING\r\n");
    assert_eq!(next_line(&mut victim).as_deref(), Some("PONG"));
    let mut r = login(&s, &t, &t.key, open_user());
    r.send(b"SUB payroll.> 1\r\nPUB admin.shutdown 1\r\nx\r\nPUB ok.x 1\r\ny\r\nPING\r\n");
    assert_eq!(
        next_line(&mut r).as_deref(),
        Some("-ERR 'Permissions Violation for Subscription to \"payroll.>\"'")
    );
    assert_eq!(
        next_line(&mut r).as_deref(),
        Some("-ERR 'Permissions Violation for Publish to \"admin.shutdown\"'")
    );
    assert_eq!(next_line(&mut r).as_deref(), Some("PONG"));
    // Nothing reached the other user.
    assert!(victim.silent_for(Duration::from_millis(300)));
    // A user with permissions of its own gets exactly those (defaults replaced, not merged).
    let mut own = open_user();
    own.publish.allow = vec!["admin.>".into()];
    let mut r = login(&s, &t, &t.key, own);
    r.send(b"SUB payroll.> 2\r\nPUB admin.shutdown 1\r\nx\r\nPING\r\n");
    assert_eq!(next_line(&mut r).as_deref(), Some("PONG"));
    assert_eq!(
        next_line(&mut victim).as_deref(),
        Some("MSG admin.shutdown 1 1")
    );
}

#[test]
fn account_subs_and_payload_limits_are_enforced() {
    let w = World::new();
    let t = w.tenant(
        "ACME",
        AccountLimits {
            subs: 2,
            payload: 10,
            ..AccountLimits::default()
        },
    );
    let s = TestServer::with_config(&w.config(&[&t]));
    let mut r = login(&s, &t, &t.key, open_user());
    r.send(b"SUB a 1\r\nSUB b 2\r\nSUB c 3\r\nSUB d 4\r\nPING\r\n");
    assert_eq!(
        next_line(&mut r).as_deref(),
        Some("-ERR 'maximum subscriptions exceeded'")
    );
    assert_eq!(
        next_line(&mut r).as_deref(),
        Some("-ERR 'maximum subscriptions exceeded'")
    );
    assert_eq!(next_line(&mut r).as_deref(), Some("PONG"));
    let big = "x".repeat(100);
    r.send(format!("PUB a 100\r\n{big}\r\n").as_bytes());
    assert_eq!(
        next_line(&mut r).as_deref(),
        Some("-ERR 'Maximum Payload Violation'")
    );
    assert!(r.closed_within(T));
}

#[test]
fn account_jwts_over_their_import_export_or_wildcard_limits_are_refused() {
    let w = World::new();
    let export = |subject: &str| Export {
        name: "e".into(),
        subject: subject.into(),
        kind: "service".into(),
        ..Default::default()
    };
    let mut too_many = w.tenant(
        "MANY",
        AccountLimits {
            exports: 1,
            ..AccountLimits::default()
        },
    );
    too_many.claims.nats.exports = vec![export("a.x"), export("b.x")];
    let mut wild = w.tenant(
        "WILD",
        AccountLimits {
            exports: 5,
            wildcards: false,
            ..AccountLimits::default()
        },
    );
    wild.claims.nats.exports = vec![export("svc.*")];
    let ok = w.tenant("OK", AccountLimits::default());
    let s = TestServer::with_config(&w.config(&[&too_many, &wild, &ok]));
    for t in [&too_many, &wild] {
        expect_refused(&s, t);
    }
    let _ = login(&s, &ok, &ok.key, open_user());
}

#[test]
fn removing_a_signing_key_disconnects_its_users_only() {
    let w = World::new();
    let mut t = w.tenant("ACME", AccountLimits::default());
    let sk1 = KeyPair::generate(Role::Account);
    let sk2 = KeyPair::generate(Role::Account);
    t.claims.nats.signing_keys = vec![
        SigningKey::Key(sk1.public_key()),
        SigningKey::Key(sk2.public_key()),
    ];
    let set = Setup::new(&[&t], w);
    let mut gone = login(&set.s, &t, &sk1, open_user());
    let mut stays = login(&set.s, &t, &sk2, open_user());
    t.claims.nats.signing_keys = vec![SigningKey::Key(sk2.public_key())];
    let answer = set.push(&t);
    assert!(answer.contains("jwt updated"), "{answer}");
    assert!(
        gone.closed_within(T),
        "a user of the removed key stays connected"
    );
    stays.send(b"PING\r\n");
    assert_eq!(next_line(&mut stays).as_deref(), Some("PONG"));
}

#[test]
fn lowering_the_connection_limit_closes_the_newest_connections() {
    let w = World::new();
    let mut t = w.tenant("ACME", AccountLimits::default());
    let set = Setup::new(&[&t], w);
    let mut conns: Vec<Raw> = (0..4)
        .map(|_| login(&set.s, &t, &t.key, open_user()))
        .collect();
    t.claims.nats.limits.conn = 2;
    let answer = set.push(&t);
    assert!(answer.contains("jwt updated"), "{answer}");
    for r in conns.iter_mut().skip(2) {
        assert_eq!(
            next_line(r).as_deref(),
            Some("-ERR 'maximum account active connections exceeded'")
        );
        assert!(r.closed_within(T));
    }
    for r in conns.iter_mut().take(2) {
        r.send(b"PING\r\n");
        assert_eq!(next_line(r).as_deref(), Some("PONG"));
    }
}

#[test]
fn an_expiring_account_disconnects_its_users() {
    let w = World::new();
    let mut t = w.tenant("ACME", AccountLimits::default());
    t.claims.exp = now() + 2;
    let s = TestServer::with_config(&w.config(&[&t]));
    let mut r = login(&s, &t, &t.key, open_user());
    let l = r.read_line(Duration::from_secs(6));
    let l = match l {
        Some(l) if l.starts_with("INFO") || l == "PING" => next_line(&mut r),
        other => other,
    };
    assert_eq!(l.as_deref(), Some("-ERR 'Account Authentication Expired'"));
    assert!(r.closed_within(T));
}

#[test]
fn a_data_limit_this_server_cannot_enforce_refuses_the_account() {
    let w = World::new();
    let t = w.tenant(
        "ACME",
        AccountLimits {
            data: 1000,
            ..AccountLimits::default()
        },
    );
    let s = TestServer::with_config(&w.config(&[&t]));
    if s.is_reference() {
        return; // nats-server ignores `data` (accepts and never enforces it)
    }
    expect_refused(&s, &t);
}

#[test]
fn an_import_mapped_past_its_export_refuses_the_account() {
    let w = World::new();
    let (a, b) = service_pair(&w, Some("x.>"));
    let s = TestServer::with_config(&w.config(&[&a, &b]));
    expect_refused(&s, &a);
}

#[test]
fn renewing_an_expiring_account_keeps_its_connections() {
    let w = World::new();
    let mut t = w.tenant("ACME", AccountLimits::default());
    t.claims.exp = now() + 2;
    let set = Setup::new(&[&t], w);
    let mut r = login(&set.s, &t, &t.key, open_user());
    t.claims.exp = now() + 3600;
    let answer = set.push(&t);
    assert!(answer.contains("jwt updated"), "{answer}");
    // Past the old expiry: still connected, and no permission was changed by the renewal.
    support::spin_pause(Duration::from_secs(3));
    r.send(b"PING\r\n");
    assert_eq!(next_line(&mut r).as_deref(), Some("PONG"));
}

#[test]
fn withdrawing_an_export_stops_an_installed_import() {
    let w = World::new();
    let (a, mut b) = service_pair(&w, None);
    let set = Setup::new(&[&a, &b], w);
    let mut responder = login(&set.s, &b, &b.key, open_user());
    responder.send(b"SUB svc.* 1\r\nPING\r\n");
    assert_eq!(next_line(&mut responder).as_deref(), Some("PONG"));
    let mut requester = login(&set.s, &a, &a.key, open_user());
    requester.send(b"PUB svc.echo 2\r\nhi\r\nPING\r\n");
    assert_eq!(next_line(&mut requester).as_deref(), Some("PONG"));
    let head = next_line(&mut responder).unwrap();
    // nats-server adds a Nats-Request-Info header for header-capable receivers.
    assert!(
        head.starts_with("MSG svc.echo 1 ") || head.starts_with("HMSG svc.echo 1 "),
        "{head}"
    );
    while next_line(&mut responder).as_deref() != Some("hi") {}
    // B withdraws the export: A's publishes no longer reach B.
    b.claims.nats.exports.clear();
    let answer = set.push(&b);
    assert!(answer.contains("jwt updated"), "{answer}");
    requester.send(b"PUB svc.echo 3\r\nbye\r\nPING\r\n");
    assert_eq!(next_line(&mut requester).as_deref(), Some("PONG"));
    assert!(responder.silent_for(Duration::from_millis(500)));
}
