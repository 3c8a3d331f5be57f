//! Accounts, nkeys and JWTs end to end: operator mode with a memory resolver, nkey users,
//! permissions with exact -ERR texts, account isolation, expiry, revocation, limits.
//! Tokens are minted here with our own issuer; the same tests pass against nats-server.
#![allow(clippy::unwrap_used, reason = "test code: a panic is a failed test")]

mod support;

use std::time::Duration;

use sealstream::auth::jwt::claims::{
    AccountLimits, ScopedSigningKey, SigningKey, UserPermissionsLimits,
};
use sealstream::auth::nkeys::{KeyPair, Role};
use support::jwt::{connect_jwt, now, open_user, user_jwt, World};
use support::{Raw, TestServer};

const T: Duration = Duration::from_secs(5);

fn expect_auth_violation(r: &mut Raw) {
    r.expect_line("-ERR 'Authorization Violation'");
    assert!(r.closed_within(T));
}

#[test]
fn operator_mode_admits_a_signed_user_and_enforces_permissions() {
    let w = World::new();
    let t = w.tenant("ACME", AccountLimits::default());
    let s = TestServer::with_config(&w.config(&[&t]));
    let user = KeyPair::generate(Role::User);
    let mut perms = open_user();
    perms.publish.allow = vec!["orders.>".into()];
    perms.subscribe.allow = vec!["orders.>".into()];
    perms.subscribe.deny = vec!["orders.secret".into()];
    let token = user_jwt(&t.key, &user, "alice", perms, |_| {});
    let mut r = s.raw();
    assert_eq!(r.info["auth_required"], true);
    assert_eq!(r.info["nonce"].as_str().unwrap().len(), 15);
    connect_jwt(&mut r, &token, &user);
    r.expect_line("PONG");
    r.send(b"SUB orders.> 1\r\nPUB orders.new 2\r\nhi\r\nPUB orders.secret 1\r\nx\r\nPUB forbidden 1\r\nx\r\nPING\r\n");
    r.expect_line("MSG orders.new 1 2");
    assert_eq!(r.read_exact_bytes(4, T).unwrap(), b"hi\r\n");
    r.expect_line("-ERR 'Permissions Violation for Publish to \"forbidden\"'");
    r.expect_line("PONG");
    r.send(b"SUB other 2\r\nSUB orders.a q 3\r\nSUB orders.secret 4\r\nPING\r\n");
    r.expect_line("-ERR 'Permissions Violation for Subscription to \"other\"'");
    r.expect_line("-ERR 'Permissions Violation for Subscription to \"orders.secret\"'");
    r.expect_line("PONG");
    // The same subjects again (the connection remembers its decisions): same answers.
    r.send(b"PUB forbidden 1\r\nx\r\nPUB orders.new 2\r\nho\r\nPING\r\n");
    r.expect_line("-ERR 'Permissions Violation for Publish to \"forbidden\"'");
    r.expect_line("MSG orders.new 1 2");
    assert_eq!(r.read_exact_bytes(4, T).unwrap(), b"ho\r\n");
    r.expect_line("PONG");
}

#[test]
fn bad_signature_expired_revoked_and_untrusted_users_are_refused() {
    let w = World::new();
    let mut t = w.tenant("ACME", AccountLimits::default());
    let revoked_user = KeyPair::generate(Role::User);
    t.claims
        .nats
        .revocations
        .insert(revoked_user.public_key(), now() + 5);
    let rogue_op = World::new();
    let rogue = rogue_op.tenant("ROGUE", AccountLimits::default());
    let s = TestServer::with_config(&w.config(&[&t]));
    let user = KeyPair::generate(Role::User);

    // signature by another key
    let token = user_jwt(&t.key, &user, "u", open_user(), |_| {});
    let mut r = s.raw();
    connect_jwt(&mut r, &token, &KeyPair::generate(Role::User));
    expect_auth_violation(&mut r);

    // expired
    let token = user_jwt(&t.key, &user, "u", open_user(), |c| c.exp = now() - 10);
    let mut r = s.raw();
    connect_jwt(&mut r, &token, &user);
    expect_auth_violation(&mut r);

    // revoked (revocation time >= iat)
    let token = user_jwt(&t.key, &revoked_user, "r", open_user(), |_| {});
    let mut r = s.raw();
    connect_jwt(&mut r, &token, &revoked_user);
    expect_auth_violation(&mut r);

    // account not known to this server (signed by another operator)
    let token = user_jwt(&rogue.key, &user, "u", open_user(), |_| {});
    let mut r = s.raw();
    connect_jwt(&mut r, &token, &user);
    expect_auth_violation(&mut r);

    // no credentials
    let mut r = s.raw();
    r.send(b"CONNECT {\"verbose\":false,\"protocol\":1}\r\nPING\r\n");
    expect_auth_violation(&mut r);
}

#[test]
fn accounts_are_isolated_subject_spaces() {
    let w = World::new();
    let a = w.tenant("A", AccountLimits::default());
    let b = w.tenant("B", AccountLimits::default());
    let s = TestServer::with_config(&w.config(&[&a, &b]));
    let (ua, ub) = (KeyPair::generate(Role::User), KeyPair::generate(Role::User));
    let mut ra = s.raw();
    connect_jwt(
        &mut ra,
        &user_jwt(&a.key, &ua, "a", open_user(), |_| {}),
        &ua,
    );
    ra.expect_line("PONG");
    let mut rb = s.raw();
    connect_jwt(
        &mut rb,
        &user_jwt(&b.key, &ub, "b", open_user(), |_| {}),
        &ub,
    );
    rb.expect_line("PONG");
    rb.send(b"SUB orders.> 1\r\nPING\r\n");
    rb.expect_line("PONG");
    ra.send(b"SUB orders.> 1\r\nPUB orders.x 1\r\na\r\nPING\r\n");
    ra.expect_line("MSG orders.x 1 1");
    assert!(
        rb.silent_for(Duration::from_millis(400)),
        "B must not see A's message"
    );
}

#[test]
fn scoped_signing_key_applies_its_template() {
    let w = World::new();
    let mut t = w.tenant("ACME", AccountLimits::default());
    let scoped = KeyPair::generate(Role::Account);
    let mut template = open_user();
    template.publish.allow = vec!["tenant.{{name()}}.>".into()];
    t.claims
        .nats
        .signing_keys
        .push(SigningKey::Scoped(Box::new(ScopedSigningKey {
            kind: "user_scope".into(),
            key: scoped.public_key(),
            role: "svc".into(),
            template,
            description: None,
        })));
    let s = TestServer::with_config(&w.config(&[&t]));
    let user = KeyPair::generate(Role::User);
    let account_id = t.key.public_key();
    let token = user_jwt(
        &scoped,
        &user,
        "dave",
        UserPermissionsLimits::default(),
        |c| {
            c.nats.issuer_account = Some(account_id.clone());
        },
    );
    let mut r = s.raw();
    connect_jwt(&mut r, &token, &user);
    r.expect_line("PONG");
    r.send(b"PUB tenant.dave.x 1\r\na\r\nPUB tenant.eve.x 1\r\nb\r\nPING\r\n");
    r.expect_line("-ERR 'Permissions Violation for Publish to \"tenant.eve.x\"'");
    r.expect_line("PONG");
    // A scoped key's user may not carry its own limits.
    let token = user_jwt(&scoped, &user, "dave", open_user(), |c| {
        c.nats.issuer_account = Some(account_id.clone())
    });
    let mut r = s.raw();
    connect_jwt(&mut r, &token, &user);
    expect_auth_violation(&mut r);
}

#[test]
fn user_without_limits_cannot_subscribe() {
    let w = World::new();
    let t = w.tenant("ACME", AccountLimits::default());
    let s = TestServer::with_config(&w.config(&[&t]));
    let user = KeyPair::generate(Role::User);
    let token = user_jwt(&t.key, &user, "u", UserPermissionsLimits::default(), |_| {});
    let mut r = s.raw();
    connect_jwt(&mut r, &token, &user);
    r.send(b"SUB a 1\r\nPING\r\n");
    // The reference may interleave its -ERR with the first PONG; collect both PONGs.
    let mut lines = Vec::new();
    while lines
        .iter()
        .filter(|l: &&String| l.as_str() == "PONG")
        .count()
        < 2
    {
        let Some(l) = r.read_line(T) else { break };
        lines.push(l);
    }
    assert!(
        lines
            .iter()
            .any(|l| l == "-ERR 'maximum subscriptions exceeded'"),
        "{lines:?}"
    );
    assert!(
        !lines.iter().any(|l| l.contains("Authorization")),
        "{lines:?}"
    );
}

#[test]
fn account_connection_limit_is_enforced() {
    let w = World::new();
    let t = w.tenant(
        "ACME",
        AccountLimits {
            conn: 1,
            ..AccountLimits::default()
        },
    );
    let s = TestServer::with_config(&w.config(&[&t]));
    let user = KeyPair::generate(Role::User);
    let token = user_jwt(&t.key, &user, "u", open_user(), |_| {});
    let mut first = s.raw();
    connect_jwt(&mut first, &token, &user);
    first.expect_line("PONG");
    let mut second = s.raw();
    connect_jwt(&mut second, &token, &user);
    second.expect_line("-ERR 'maximum account active connections exceeded'");
    assert!(second.closed_within(T));
}

#[test]
fn expiring_user_is_disconnected_when_the_jwt_expires() {
    let w = World::new();
    let t = w.tenant("ACME", AccountLimits::default());
    let s = TestServer::with_config(&w.config(&[&t]));
    let user = KeyPair::generate(Role::User);
    let token = user_jwt(&t.key, &user, "u", open_user(), |c| c.exp = now() + 2);
    let mut r = s.raw();
    connect_jwt(&mut r, &token, &user);
    r.expect_line("PONG");
    let line = loop {
        let l = r.read_line(Duration::from_secs(6)).expect("expiry error");
        if l.starts_with("INFO") || l == "PING" {
            continue;
        }
        break l;
    };
    assert_eq!(line, "-ERR 'User Authentication Expired'");
    assert!(r.closed_within(T));
}

#[test]
fn config_nkey_users_sign_the_nonce() {
    let user = KeyPair::generate(Role::User);
    let conf = format!(
        "authorization {{ users: [ {{ nkey: {} }} ] }}\n",
        user.public_key()
    );
    let s = TestServer::with_config(&conf);
    let mut r = s.raw();
    let nonce = r.info["nonce"].as_str().unwrap().to_owned();
    let sig = data_encoding::BASE64URL_NOPAD.encode(&user.sign(nonce.as_bytes()));
    r.send(format!("CONNECT {{\"verbose\":false,\"protocol\":1,\"nkey\":\"{}\",\"sig\":\"{sig}\"}}\r\nPING\r\n", user.public_key()).as_bytes());
    r.expect_line("PONG");
    // A signature over another connection's nonce fails.
    let mut r2 = s.raw();
    r2.send(format!("CONNECT {{\"verbose\":false,\"protocol\":1,\"nkey\":\"{}\",\"sig\":\"{sig}\"}}\r\nPING\r\n", user.public_key()).as_bytes());
    expect_auth_violation(&mut r2);
}

#[test]
fn config_permissions_answer_with_exact_texts_and_keep_the_connection() {
    let conf = r#"
authorization {
  users: [
    { user: alice, password: pw, permissions: { publish: { allow: ["foo.>"], deny: ["foo.secret"] }, subscribe: ["foo.>", "work.* workers"] } }
  ]
}
"#;
    let s = TestServer::with_config(conf);
    let mut r = s.raw();
    r.send(b"CONNECT {\"verbose\":false,\"protocol\":1,\"user\":\"alice\",\"pass\":\"pw\"}\r\nPING\r\n");
    r.expect_line("PONG");
    r.send(b"PUB foo.secret 1\r\nx\r\nPUB bar 1\r\nx\r\nSUB bar q 2\r\nSUB work.a workers 3\r\nSUB work.a 4\r\nPING\r\n");
    r.expect_line("-ERR 'Permissions Violation for Publish to \"foo.secret\"'");
    r.expect_line("-ERR 'Permissions Violation for Publish to \"bar\"'");
    r.expect_line("-ERR 'Permissions Violation for Subscription to \"bar\" using queue \"q\"'");
    r.expect_line("-ERR 'Permissions Violation for Subscription to \"work.a\"'");
    r.expect_line("PONG");
}

#[tokio::test]
async fn async_nats_connects_with_a_creds_file() {
    let w = World::new();
    let t = w.tenant("ACME", AccountLimits::default());
    let s = TestServer::with_config(&w.config(&[&t]));
    let user = KeyPair::generate(Role::User);
    let token = user_jwt(&t.key, &user, "svc", open_user(), |_| {});
    let creds = sealstream::auth::creds::format_creds(&token, &user.seed());
    let client = async_nats::ConnectOptions::with_credentials(&creds)
        .unwrap()
        .connect(s.url())
        .await
        .unwrap();
    let mut sub = client.subscribe("x.y").await.unwrap();
    client.publish("x.y", "hello".into()).await.unwrap();
    use futures::StreamExt;
    let m = tokio::time::timeout(T, sub.next()).await.unwrap().unwrap();
    assert_eq!(m.payload, "hello".as_bytes());
}

#[test]
fn allow_responses_lets_a_responder_answer_once() {
    let conf = r#"
authorization {
  users: [
    { user: svc, password: pw, permissions: { publish: { deny: [">"] }, subscribe: ["svc.>"], allow_responses: true } }
    { user: cli, password: pw }
  ]
}
"#;
    let s = TestServer::with_config(conf);
    let mut svc = s.raw();
    svc.send(b"CONNECT {\"verbose\":false,\"protocol\":1,\"user\":\"svc\",\"pass\":\"pw\"}\r\nSUB svc.echo 1\r\nPING\r\n");
    svc.expect_line("PONG");
    let mut cli = s.raw();
    cli.send(b"CONNECT {\"verbose\":false,\"protocol\":1,\"user\":\"cli\",\"pass\":\"pw\"}\r\nSUB _INBOX.r 1\r\nPUB svc.echo _INBOX.r 2\r\nhi\r\nPING\r\n");
    cli.expect_line("PONG");
    svc.expect_line("MSG svc.echo 1 _INBOX.r 2");
    assert_eq!(svc.read_exact_bytes(4, T).unwrap(), b"hi\r\n");
    // The first reply is allowed, a second one is not, and an unrelated publish never was.
    svc.send(b"PUB _INBOX.r 2\r\nok\r\nPUB _INBOX.r 2\r\nno\r\nPUB other 1\r\nx\r\nPING\r\n");
    svc.expect_line("-ERR 'Permissions Violation for Publish to \"_INBOX.r\"'");
    svc.expect_line("-ERR 'Permissions Violation for Publish to \"other\"'");
    svc.expect_line("PONG");
    cli.expect_line("MSG _INBOX.r 1 2");
    assert_eq!(cli.read_exact_bytes(4, T).unwrap(), b"ok\r\n");
}

#[test]
fn repeated_failures_from_one_address_are_throttled_but_still_answered() {
    if support::server_binary().1 {
        return; // sealstream's throttle policy
    }
    let s = TestServer::with_config("authorization { token: \"s3cr3t\" }\n");
    for _ in 0..25 {
        let mut r = s.raw();
        r.send(b"CONNECT {\"verbose\":false,\"auth_token\":\"bad\",\"protocol\":1}\r\nPING\r\n");
        r.expect_line("-ERR 'Authorization Violation'");
    }
    // Throttled: the INFO of a new connection comes only after the delay, and a right token
    // still works.
    let started = std::time::Instant::now();
    let mut ok = s.raw();
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "connection was delayed"
    );
    ok.send(b"CONNECT {\"verbose\":false,\"auth_token\":\"s3cr3t\",\"protocol\":1}\r\nPING\r\n");
    ok.expect_line("PONG");
    let log = s.log_text();
    assert!(
        log.matches("authentication failed").count() < 25,
        "failure logs are rate-limited"
    );
}

#[test]
fn strict_operators_trust_signing_keys_only() {
    use sealstream::auth::jwt::claims::SigningKey;
    use sealstream::auth::jwt::{self, AccountClaims, Claims, OperatorClaims};
    let identity = KeyPair::generate(Role::Operator);
    let signer = KeyPair::generate(Role::Operator);
    let mut oc = Claims {
        sub: identity.public_key(),
        nats: OperatorClaims {
            kind: "operator".into(),
            version: 2,
            signing_keys: vec![signer.public_key()],
            strict_signing_key_usage: true,
            ..Default::default()
        },
        ..Default::default()
    };
    let op_jwt = jwt::encode(&mut oc, &identity);
    let acc = KeyPair::generate(Role::Account);
    let acc_signer = KeyPair::generate(Role::Account);
    let mut ac = Claims {
        sub: acc.public_key(),
        nats: AccountClaims {
            kind: "account".into(),
            version: 2,
            signing_keys: vec![SigningKey::Key(acc_signer.public_key())],
            ..Default::default()
        },
        ..Default::default()
    };
    let acc_jwt = jwt::encode(&mut ac, &signer);
    let conf = format!(
        "operator: \"{op_jwt}\"\nresolver: MEMORY\nresolver_preload: {{\n  {}: \"{acc_jwt}\"\n}}\n",
        acc.public_key()
    );
    let s = TestServer::with_config(&conf);
    let user = KeyPair::generate(Role::User);
    // Signed by the account's signing key (issuer_account names the account): admitted.
    let account_id = acc.public_key();
    let token = user_jwt(&acc_signer, &user, "u", open_user(), |c| {
        c.nats.issuer_account = Some(account_id.clone())
    });
    let mut r = s.raw();
    connect_jwt(&mut r, &token, &user);
    r.expect_line("PONG");
    // Signed by the account identity key under a strict operator: refused, as the reference does.
    let token = user_jwt(&acc, &user, "u", open_user(), |_| {});
    let mut r = s.raw();
    connect_jwt(&mut r, &token, &user);
    expect_auth_violation(&mut r);
}

#[tokio::test]
async fn jwt_declared_exports_and_imports_cross_accounts() {
    use futures::StreamExt;
    use sealstream::auth::jwt::claims::{Export, Import};
    let w = World::new();
    let mut a = w.tenant("A", AccountLimits::default());
    a.claims.nats.exports = vec![
        Export {
            subject: "pub.>".into(),
            kind: "stream".into(),
            ..Default::default()
        },
        Export {
            subject: "svc.>".into(),
            kind: "service".into(),
            ..Default::default()
        },
    ];
    let mut b = w.tenant("B", AccountLimits::default());
    b.claims.nats.imports = vec![
        Import {
            subject: "pub.>".into(),
            account: a.key.public_key(),
            kind: "stream".into(),
            ..Default::default()
        },
        Import {
            subject: "svc.>".into(),
            account: a.key.public_key(),
            kind: "service".into(),
            local_subject: Some("asvc.>".into()),
            ..Default::default()
        },
    ];
    let c = w.tenant("C", AccountLimits::default());
    let s = TestServer::with_config(&w.config(&[&a, &b, &c]));
    let login = |t: &support::jwt::Tenant, name: &str| {
        let user = KeyPair::generate(Role::User);
        let token = user_jwt(&t.key, &user, name, open_user(), |_| {});
        let creds = sealstream::auth::creds::format_creds(&token, &user.seed());
        let url = s.url();
        async move {
            async_nats::ConnectOptions::with_credentials(&creds)
                .unwrap()
                .connect(url)
                .await
                .unwrap()
        }
    };
    let (ca, cb, cc) = (
        login(&a, "a").await,
        login(&b, "b").await,
        login(&c, "c").await,
    );
    let mut b_pub = cb.subscribe("pub.>").await.unwrap();
    let mut c_pub = cc.subscribe("pub.>").await.unwrap();
    support::sync(&cb).await;
    support::sync(&cc).await;
    let mut svc = ca.subscribe("svc.>").await.unwrap();
    support::sync(&ca).await;
    let ca2 = ca.clone();
    tokio::spawn(async move {
        while let Some(m) = svc.next().await {
            if let Some(r) = m.reply {
                ca2.publish(r, format!("answer:{}", m.subject).into())
                    .await
                    .unwrap();
            }
        }
    });
    ca.publish("pub.news", "hello".into()).await.unwrap();
    support::sync(&ca).await;
    let m = tokio::time::timeout(T, b_pub.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.subject.as_str(), "pub.news");
    assert!(
        tokio::time::timeout(Duration::from_millis(300), c_pub.next())
            .await
            .is_err(),
        "C imports nothing"
    );
    let resp = cb.request("asvc.echo", "x".into()).await.unwrap();
    assert_eq!(resp.payload, "answer:svc.echo".as_bytes());
}

/// A version-1 token as the pre-2.2 tools wrote it: header `{"typ":"jwt","alg":"ed25519"}`,
/// the claim type at the top level, the signature over the claims segment alone.
fn v1_token(signer: &KeyPair, claims: serde_json::Value) -> String {
    use data_encoding::BASE64URL_NOPAD as B64;
    let h = B64.encode(br#"{"typ":"jwt","alg":"ed25519"}"#);
    let c = B64.encode(claims.to_string().as_bytes());
    let sig = B64.encode(&signer.sign(c.as_bytes()));
    format!("{h}.{c}.{sig}")
}

#[tokio::test]
async fn version_1_operator_account_and_user_tokens_still_work() {
    let operator = KeyPair::generate(Role::Operator);
    let account = KeyPair::generate(Role::Account);
    let user = KeyPair::generate(Role::User);
    let op_jwt = v1_token(
        &operator,
        serde_json::json!({"jti": "A", "iat": now(), "iss": operator.public_key(),
            "name": "old_operator", "sub": operator.public_key(), "type": "operator"}),
    );
    let acc_jwt = v1_token(
        &operator,
        serde_json::json!({"jti": "B", "iat": now(), "iss": operator.public_key(), "name": "foo",
            "sub": account.public_key(), "type": "account",
            "nats": {"limits": {"subs": -1, "conn": -1, "imports": -1, "exports": -1,
                "data": -1, "payload": -1, "wildcards": true}}}),
    );
    let user_claims = serde_json::json!({"jti": "C", "iat": now(), "iss": account.public_key(),
        "name": "foo-user", "sub": user.public_key(), "type": "user",
        "nats": {"pub": {}, "sub": {}}});
    let conf = format!(
        "operator: \"{op_jwt}\"\nresolver: MEMORY\nresolver_preload: {{\n  {}: \"{acc_jwt}\"\n}}\n",
        account.public_key()
    );
    let s = TestServer::with_config(&conf);
    let creds =
        sealstream::auth::creds::format_creds(&v1_token(&account, user_claims), &user.seed());
    let client = async_nats::ConnectOptions::with_credentials(&creds)
        .unwrap()
        .connect(s.url())
        .await
        .unwrap();
    // No user limits in version 1: several subscriptions are fine.
    let mut subs = Vec::new();
    for i in 0..5 {
        subs.push(client.subscribe(format!("x.{i}")).await.unwrap());
    }
    client.publish("x.3", "hello".into()).await.unwrap();
    use futures::StreamExt;
    let m = tokio::time::timeout(T, subs[3].next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.payload, "hello".as_bytes());
    // A version-1 user signed by another account is refused.
    let stranger = KeyPair::generate(Role::Account);
    let forged = v1_token(
        &stranger,
        serde_json::json!({"jti": "D", "iat": now(), "iss": stranger.public_key(),
            "name": "x", "sub": user.public_key(), "type": "user", "nats": {}}),
    );
    let mut r = s.raw();
    connect_jwt(&mut r, &forged, &user);
    r.expect_line("-ERR 'Authorization Violation'");
}
