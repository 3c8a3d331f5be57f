//! Tests for the options mapping (`options.rs` and `accounts.rs`).

use super::super::accounts::{
    AccountJetStream, ExportKind as Kind, ResponsePermission, ResponseType as Response,
};
use super::super::error::ConfigError;
use super::super::parse::ParseSettings;
use super::super::tls::HandshakeFirst;
use super::*;
use std::collections::HashMap;

fn opts(text: &str) -> ServerOptions {
    opts_env(text, &HashMap::new()).unwrap_or_else(|e| panic!("{e}"))
}

fn err(text: &str) -> String {
    match opts_env(text, &HashMap::new()) {
        Ok(_) => panic!("accepted: {text}"),
        Err(e) => e.to_string(),
    }
}

fn opts_env(text: &str, env: &HashMap<String, String>) -> Result<ServerOptions, ConfigError> {
    let lookup = |name: &str| env.get(name).cloned();
    let settings = ParseSettings {
        env: &lookup,
        includes: true,
    };
    parse_str_with(text, Path::new("t.conf"), &settings)
}

const USER_NKEY: &str = "UDQADTGJ76UFLDUXDPCF3C3HZ5AD34NVJLD42YMLHWZKM3GQTRDDC7HL";
/// `{"typ":"JWT","alg":"ed25519-nkey"}.{"sub":"x"}.sig` (shape only).
const SHAPED_JWT: &str = "eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.eyJzdWIiOiJ4In0.c2ln";

#[test]
fn defaults_match_nats_server() {
    let o = ServerOptions::default();
    assert_eq!(o.host, "0.0.0.0");
    assert_eq!(o.port, 4222);
    assert_eq!(o.max_payload, 1_048_576);
    assert_eq!(o.max_control_line, 4096);
    assert_eq!(o.max_pending, 64 << 20);
    assert_eq!(o.max_connections, 65_536);
    assert_eq!(o.ping_interval, Duration::from_secs(120));
    assert_eq!(o.ping_max, 2);
    assert_eq!(o.write_deadline, Duration::from_secs(10));
    assert_eq!(o.lame_duck_duration, Duration::from_secs(120));
    assert_eq!(o.lame_duck_grace_period, Duration::from_secs(10));
    assert_eq!(o.auth_timeout, Duration::from_secs(2));
    assert!(o.logtime);
    assert!(o.jetstream.strict);
    assert!(!o.jetstream.enabled);
    assert_eq!(o.http_base_path, "/");
}

#[test]
fn the_spec_example_is_accepted_verbatim_with_the_listed_values() {
    let o = opts(
        r#"# hash comment
// slash comment
listen = 127.0.0.1:14227
http_port 18227
server_name: "edge-1"
PAYLOAD = 2MB
max_payload: $PAYLOAD
ping_interval: "45s"
max_connections: 1K
max_pending: 64MB;
jetstream: { store_dir = '/var/lib/sealstream', max_mem = 1G, max_file: 5GB }
authorization { token: "s3cr3t", timeout: 3 }
"#,
    );
    assert_eq!(o.host, "127.0.0.1");
    assert_eq!(o.port, 14227);
    assert_eq!(o.http_port, Some(18227));
    assert_eq!(o.server_name.as_deref(), Some("edge-1"));
    assert_eq!(o.max_payload, 2_097_152);
    assert_eq!(o.ping_interval, Duration::from_secs(45));
    assert_eq!(o.max_connections, 1000);
    assert_eq!(o.max_pending, 64 << 20);
    assert!(o.jetstream.enabled);
    assert_eq!(o.jetstream.max_memory_store, Some(1_000_000_000));
    assert_eq!(o.jetstream.max_file_store, Some(5_368_709_120));
    assert_eq!(
        o.jetstream.store_dir,
        Some(PathBuf::from("/var/lib/sealstream"))
    );
    assert_eq!(o.authorization.token.as_deref(), Some("s3cr3t"));
    assert_eq!(o.auth_timeout, Duration::from_secs(3));
    assert!(o.check_warnings.is_empty());
    assert!(o.check().is_ok());
}

#[test]
fn websocket_block_needs_tls_or_no_tls_and_refuses_what_it_cannot_enforce() {
    let o = opts("websocket { port: -1, no_tls: true, compression: true }");
    let w = o.websocket.unwrap();
    assert_eq!((w.port, w.no_tls, w.compression), (-1, true, true));
    assert_eq!(w.host, "0.0.0.0");
    let o = opts("ws { listen: \"127.0.0.1:8080\", no_tls: true, handshake_timeout: \"5s\" }");
    let w = o.websocket.unwrap();
    assert_eq!((w.host.as_str(), w.port), ("127.0.0.1", 8080));
    assert_eq!(w.handshake_timeout, Duration::from_secs(5));
    assert!(err("websocket { port: 8080 }").contains("websocket requires TLS"));
    assert!(err("websocket { port: 1, no_tls: true, jwt_cookie: c }").contains("not supported"));
    assert!(err("websocket { port: 1, no_tls: true, nonsense: 1 }").contains("nonsense"));
}

#[test]
fn a_json_document_is_a_config_file() {
    let o = opts("{\n  \"port\": 4567\n}\n");
    assert_eq!(o.port, 4567);
    let o = opts("{\"port\": 4568, \"jetstream\": true}");
    assert_eq!(o.port, 4568);
    assert!(o.jetstream.enabled);
    let o = opts("# a comment first\n{\n  \"jetstream\": {\"max_mem\": \"1G\"}\n}");
    assert!(o.jetstream.enabled);
}

#[test]
fn unquoted_2m_ping_interval_is_two_million_seconds_with_a_warning() {
    let o = opts("ping_interval: 2m");
    assert_eq!(o.ping_interval, Duration::from_secs(2_000_000));
    assert_eq!(
        o.check().unwrap_err().to_string(),
        "t.conf:1:1: invalid use of field \"ping_interval\": ping_interval should be converted to a duration"
    );
}

#[test]
fn durations_accept_go_strings_and_bare_seconds_where_nats_does() {
    let o = opts(
        "write_deadline: \"1m30s\"\nlame_duck_duration: \"1m\"\nlame_duck_grace_period: \"500ms\"",
    );
    assert_eq!(o.write_deadline, Duration::from_secs(90));
    assert_eq!(o.lame_duck_duration, Duration::from_secs(60));
    assert_eq!(o.lame_duck_grace_period, Duration::from_millis(500));
    let o = opts("write_deadline: 5");
    assert_eq!(o.write_deadline, Duration::from_secs(5));
    assert_eq!(o.check_warnings.len(), 1);
    assert!(err("lame_duck_grace_period: 5").contains("expected a duration string"));
    assert!(err("lame_duck_duration: \"20s\"").contains("minimum is 30 seconds"));
    assert_eq!(
        err("ping_interval: \"2x\""),
        "t.conf:1:1: error parsing ping_interval: time: unknown unit \"x\" in duration \"2x\""
    );
}

#[test]
fn unknown_fields_are_errors_at_every_level_with_positions() {
    assert_eq!(
        err("port: 4222\nfoo: 1"),
        "t.conf:2:1: unknown field \"foo\""
    );
    assert_eq!(
        err("jetstream {\n  foo: 1}"),
        "t.conf:2:3: unknown field \"foo\""
    );
    assert_eq!(
        err("authorization { users [{user: a, password: b, foo: 1}] }"),
        "t.conf:1:47: unknown field \"foo\""
    );
    assert_eq!(
        err("authorization { users [{user: a, permissions: { publish: { allow: a, foo: 1 } }}] }"),
        "t.conf:1:70: unknown field \"foo\""
    );
    assert_eq!(
        err("accounts { A { jetstream: disabled, foo: 1 } }"),
        "t.conf:1:37: unknown field \"foo\""
    );
    assert!(err("accounts { A { jetstream: { foo: 1 } } }").contains("unknown field \"foo\""));
    assert!(
        err("accounts { A { limits: { max_conn: 1, foo: 1 } } }").contains("unknown field \"foo\"")
    );
    assert!(err("jetstream { limits: { foo: 1 } }").contains("unknown field \"foo\""));
    assert!(err("d = 2026-01-02T15:04:05Z").contains("unknown field \"d\""));
}

#[test]
fn wrong_types_name_the_field_and_the_expected_type() {
    assert_eq!(
        err("port: \"4222\""),
        "t.conf:1:1: invalid value for field \"port\": expected an integer"
    );
    assert_eq!(
        err("  debug: 1"),
        "t.conf:1:3: invalid value for field \"debug\": expected a boolean"
    );
    assert!(err("server_name: 2026-01-02T15:04:05Z").contains("expected a string"));
    assert!(err("max_payload: 1_000").contains("expected an integer"));
    assert!(err("jetstream: 1").contains("Expected map, bool or string"));
    assert!(err("jetstream: foo").contains("Expected 'enabled' or 'disabled'"));
}

#[test]
fn keys_are_case_insensitive_and_keep_their_spelling_in_messages() {
    let o = opts("Port: 4222\nJetStream { Store_Dir: /x }");
    assert_eq!(o.port, 4222);
    assert_eq!(o.jetstream.store_dir, Some(PathBuf::from("/x")));
    assert_eq!(err("Foo: 1"), "t.conf:1:1: unknown field \"Foo\"");
}

#[test]
fn keys_used_only_as_variables_are_not_unknown() {
    let o = opts("A = 1\njetstream { max_mem: $A }");
    assert_eq!(o.jetstream.max_memory_store, Some(1));
    assert_eq!(o.ignored, Vec::<String>::new());
}

#[test]
fn variables_come_from_the_environment_when_not_in_the_file() {
    let env: HashMap<String, String> = [
        ("SNAME", "from-env"),
        ("JS_SIZE", "1GB"),
        ("JS_KEY", "\"s3cr3t key\""),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let o = opts_env(
        "server_name = $SNAME\njetstream { max_file_store: $JS_SIZE, key: $JS_KEY }",
        &env,
    )
    .unwrap();
    assert_eq!(o.server_name.as_deref(), Some("from-env"));
    assert_eq!(o.jetstream.max_file_store, Some(1 << 30));
    assert_eq!(o.jetstream.key.as_deref(), Some("s3cr3t key"));
    let e = opts_env("server_name: $NOPE", &env)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "t.conf:1:14: variable reference for \"NOPE\" can not be found"
    );
}

#[test]
fn listen_http_and_https_accept_port_or_host_port_and_later_keys_win() {
    let o = opts("listen: \"[::1]:4223\"");
    assert_eq!((o.host.as_str(), o.port), ("::1", 4223));
    let o = opts("listen: \":4224\"");
    assert_eq!((o.host.as_str(), o.port), ("0.0.0.0", 4224));
    let o = opts("listen: 4225");
    assert_eq!(o.port, 4225);
    let o = opts("listen: 127.0.0.1:1\nport: 2");
    assert_eq!((o.host.as_str(), o.port), ("127.0.0.1", 2));
    let o = opts("port: 2\nlisten: 127.0.0.1:1");
    assert_eq!(o.port, 1);
    let o = opts("http: \"127.0.0.1:8222\"\nhttps: 8443\nhttp_base_path: /mon");
    assert_eq!(o.http_host, "127.0.0.1");
    assert_eq!(o.http_port, Some(8222));
    assert_eq!(o.https_port, Some(8443));
    assert_eq!(o.http_base_path, "/mon");
    assert_eq!(opts("monitor_port: -1").http_port, Some(-1));
    assert!(err("listen: x").contains("could not parse address string \"x\""));
    assert_eq!(opts("port: -1").port, -1);
}

#[test]
fn limits_and_logging_options_map_with_their_aliases() {
    let o = opts(
        "max_control_line: 1kb\nmax_conn: 10\nmax_subs: 5\nmax_sub_tokens: 16\nping_max: 3\n\
         debug: true\ntrace: yes\ntrace_verbose: on\nlogtime: false\nlogtime_utc: true\n\
         log_file: /var/log/s.log\nlog_size_limit: 1MB\nlog_max_num: 3\nsyslog: true\n\
         remote_syslog: \"udp://h:514\"\npid_file: s.pid\nports_file_dir: /tmp\n\
         client_advertise: \"h:4222\"\nno_header_support: true\nmax_traced_msg_len: 10\n\
         system: SYS\nno_system_account: true\nno_auth_user: bob\nallow_non_tls: true",
    );
    assert_eq!(o.max_control_line, 1024);
    assert_eq!(o.max_connections, 10);
    assert_eq!(o.max_subscriptions, 5);
    assert_eq!(o.max_sub_tokens, 16);
    assert_eq!(o.ping_max, 3);
    assert!(o.debug && o.trace && o.trace_verbose && !o.logtime && o.logtime_utc);
    assert_eq!(o.log_file, Some(PathBuf::from("/var/log/s.log")));
    assert_eq!(o.logfile_size_limit, 1 << 20);
    assert_eq!(o.logfile_max_num, 3);
    assert!(o.syslog);
    assert_eq!(o.remote_syslog.as_deref(), Some("udp://h:514"));
    assert_eq!(o.pid_file, Some(PathBuf::from("s.pid")));
    assert_eq!(o.ports_file_dir, Some(PathBuf::from("/tmp")));
    assert_eq!(o.client_advertise.as_deref(), Some("h:4222"));
    assert!(o.no_header_support);
    assert_eq!(o.max_traced_msg_len, 10);
    assert_eq!(o.system_account.as_deref(), Some("SYS"));
    assert!(o.no_system_account && o.allow_non_tls);
    assert_eq!(o.no_auth_user.as_deref(), Some("bob"));
    let o = opts("logfile: a.log\npidfile: b.pid");
    assert_eq!(o.log_file, Some(PathBuf::from("a.log")));
    assert_eq!(o.pid_file, Some(PathBuf::from("b.pid")));
}

#[test]
fn server_name_with_spaces_and_oversized_limits_are_rejected() {
    assert_eq!(
        err("server_name: \"a b\""),
        "t.conf:1:1: server name cannot contain spaces"
    );
    assert!(err("max_payload: 2147483648").contains("max_payload value is too big"));
    assert!(err("max_control_line: 2GB").contains("max_control_line value is too big"));
    assert_eq!(opts("max_payload: -5").max_payload, -5);
}

#[test]
fn write_timeout_is_a_policy_not_a_duration() {
    let o = opts("write_timeout: close");
    assert_eq!(o.ignored, ["write_timeout"]);
    assert!(err("write_timeout: \"1s\"").contains("'default', 'close' or 'retry'"));
}

#[test]
fn jetstream_accepts_every_form() {
    assert!(opts("jetstream: enabled").jetstream.enabled);
    assert!(opts("jetstream: true").jetstream.enabled);
    assert!(opts("jetstream: yes").jetstream.enabled);
    assert!(!opts("jetstream: disabled").jetstream.enabled);
    assert!(opts("jetstream: {}").jetstream.enabled);
    assert!(!opts("jetstream: { enabled: false }").jetstream.enabled);
    let o = opts(
        "jetstream {\n storedir: /a\n max_mem_store: \"1G\"\n max_file_store: 10GB\n domain: hub\n \
         sync: always\n ek: k1\n prev_ek: k0\n key_file: /k\n cipher: ChaChaPoly\n strict: false\n}",
    );
    let js = &o.jetstream;
    assert_eq!(js.store_dir, Some(PathBuf::from("/a")));
    assert_eq!(js.max_memory_store, Some(1_000_000_000));
    assert_eq!(js.max_file_store, Some(10 << 30));
    assert_eq!(js.domain.as_deref(), Some("hub"));
    assert_eq!(js.sync_interval, Some(SyncInterval::Always));
    assert_eq!(js.key.as_deref(), Some("k1"));
    assert_eq!(js.prev_key.as_deref(), Some("k0"));
    assert_eq!(js.key_file, Some(PathBuf::from("/k")));
    assert_eq!(js.cipher.as_deref(), Some("chacha"));
    assert!(!js.strict);
    let o = opts("jetstream { store: /b, max_memory_store: 0, encryption_key: x, prev_encryption_key: y, sync_interval: \"10s\", cipher: aes }");
    assert_eq!(o.jetstream.max_memory_store, Some(0));
    assert_eq!(
        o.jetstream.sync_interval,
        Some(SyncInterval::Every(Duration::from_secs(10)))
    );
    assert_eq!(o.jetstream.cipher.as_deref(), Some("aes"));
    assert!(err("jetstream { cipher: foo }").contains("Unknown cipher type: \"foo\""));
    assert!(err("jetstream { max_memory_store: 1.5 }").contains("expected a size"));
    let o = opts("jetstream { sync_interval: 5 }");
    assert_eq!(o.check_warnings.len(), 1);
}

#[test]
fn top_level_store_dir_is_accepted_but_not_twice() {
    let o = opts("store_dir: /a\njetstream: enabled");
    assert_eq!(o.jetstream.store_dir, Some(PathBuf::from("/a")));
    assert!(o.jetstream.enabled);
    assert_eq!(
        err("store_dir: /a\njetstream { store_dir: /b }"),
        "t.conf:2:13: Duplicate 'store_dir' configuration"
    );
    let o = opts("jetstream { store_dir: /a\nstore_dir: /b }");
    assert_eq!(o.jetstream.store_dir, Some(PathBuf::from("/b")));
}

#[test]
fn unsupported_keys_are_parsed_and_listed_as_ignored() {
    let o = opts(
        "cluster { name: c, listen: 0.0.0.0:6222, routes: [nats://a:6222] }\n\
         gateway {}\nleafnodes {}\nmqtt {}\nmappings { \"a.*\": \"b.$1\" }\n\
         jetstream { limits: { max_ack_pending: 1 }, max_concurrent_io: 16 }",
    );
    assert_eq!(o.cluster.port, 6222);
    assert_eq!(o.cluster.name.as_deref(), Some("c"));
    assert_eq!(o.cluster.routes, ["nats://a:6222"]);
    for path in [
        "gateway",
        "leafnodes",
        "mqtt",
        "mappings",
        "jetstream.limits",
        "jetstream.max_concurrent_io",
    ] {
        assert!(
            o.ignored.iter().any(|p| p == path),
            "{path} in {:?}",
            o.ignored
        );
    }
    assert!(err("jetstream { max_concurrent_io: 1 }").contains("between 4 and 8192"));
}

#[test]
fn authorization_with_users_and_permissions_maps_the_spec_example() {
    let o = opts(
        r#"authorization {
  timeout: 0.5
  default_permissions: { publish: "pub.>" }
  users: [
    {user: alice, password: "$2a$11$W2zko751KUvVy59mUTWmpOdWjpEm5qhcCZRd05GjI/sSOT.xtiHyG"}
    {user: bob, password: pw, permissions: {
        publish:   {allow: ["foo.>", "_INBOX.>"], deny: ["foo.secret"]}
        subscribe: ["foo.>", "_INBOX.>", "work.* workers"]
        allow_responses: true
    }}
    {nkey: UDQADTGJ76UFLDUXDPCF3C3HZ5AD34NVJLD42YMLHWZKM3GQTRDDC7HL}
    {user: svc, password: x, allowed_connection_types: ["STANDARD", "websocket"]}
  ]
}"#,
    );
    let a = &o.authorization;
    assert_eq!(o.auth_timeout, Duration::from_millis(500));
    assert_eq!(a.timeout, Some(Duration::from_millis(500)));
    assert_eq!(a.users.len(), 4);
    let alice = &a.users[0];
    assert!(alice.password.as_deref().unwrap().starts_with("$2a$11$"));
    let defaults = alice.permissions.as_ref().unwrap();
    assert_eq!(defaults.publish.as_ref().unwrap().allow, ["pub.>"]);
    let bob = a.users[1].permissions.as_ref().unwrap();
    assert_eq!(bob.publish.as_ref().unwrap().allow, ["foo.>", "_INBOX.>"]);
    assert_eq!(bob.publish.as_ref().unwrap().deny, ["foo.secret"]);
    assert_eq!(bob.subscribe.as_ref().unwrap().allow[2], "work.* workers");
    assert_eq!(
        bob.allow_responses,
        Some(ResponsePermission {
            max: 1,
            expires: Duration::from_secs(120)
        })
    );
    assert_eq!(a.users[2].nkey.as_deref(), Some(USER_NKEY));
    assert_eq!(
        a.users[3].allowed_connection_types,
        ["STANDARD", "WEBSOCKET"]
    );
    assert_eq!(a.users[3].account, None);
}

#[test]
fn permission_aliases_and_response_maps_are_understood() {
    let o = opts(
        "authorization { users [{user: a, password: b, permissions: { pub: \"a\", sub: { deny: \"b\" }, allow_responses: {max: 2, expires: \"1m\"} }}, \
         {user: c, permissions: { import: \"x\", export: [\"y\"], publish_allow_responses: false }}] }",
    );
    let p = o.authorization.users[0].permissions.as_ref().unwrap();
    assert_eq!(p.publish.as_ref().unwrap().allow, ["a"]);
    assert_eq!(p.subscribe.as_ref().unwrap().deny, ["b"]);
    assert_eq!(
        p.allow_responses,
        Some(ResponsePermission {
            max: 2,
            expires: Duration::from_secs(60)
        })
    );
    let p = o.authorization.users[1].permissions.as_ref().unwrap();
    assert_eq!(p.publish.as_ref().unwrap().allow, ["x"]);
    assert_eq!(p.subscribe.as_ref().unwrap().allow, ["y"]);
    assert_eq!(p.allow_responses, None);
}

#[test]
fn authorization_rules_match_nats_server() {
    let o = opts("authorization { user: a, password: b }");
    assert_eq!(o.authorization.user.as_deref(), Some("a"));
    assert!(err("authorization { token: a, user: b, password: c }")
        .contains("Cannot have a user/pass and token"));
    assert!(
        err("authorization { user: a, password: b, users: [{user: c}] }")
            .contains("single user/pass and a users array")
    );
    assert!(
        err("authorization { token: a, users [{user: a}] }").contains("token and a users array")
    );
    assert!(err("authorization { users [{user: a}, {user: a}] }").contains("Duplicate user \"a\""));
    assert!(err(&format!(
        "authorization {{ users [{{nkey: {USER_NKEY}}}, {{nkey: {USER_NKEY}}}] }}"
    ))
    .contains("Duplicate nkey"));
    assert!(err("authorization { users [{password: a}] }").contains("User entry requires a user"));
    assert!(err("authorization { users [{nkey: UDQA...}] }")
        .contains("Not a valid public nkey for a user"));
    assert!(
        err("authorization { users [{user: a, allowed_connection_types: [FOO]}] }")
            .contains("invalid connection types [\"FOO\"]")
    );
    assert!(err("authorization { timeout: \"x\" }").contains("invalid duration"));
    let o = opts("authorization { timeout: \"2s\", auth_callout: { issuer: x } }");
    assert_eq!(o.auth_timeout, Duration::from_secs(2));
    assert_eq!(o.ignored, ["authorization.auth_callout"]);
}

#[test]
fn accounts_map_the_spec_example_with_exports_imports_and_jetstream() {
    let o = opts(&format!(
        r#"accounts {{
  A: {{
    jetstream: enabled
    users: [ {{user: alice, password: pw}}, {{nkey: {USER_NKEY}}} ]
    exports: [
      {{stream: "pub.>"}}
      {{service: "svc.>", response_type: singleton}}
      {{service: "priv.>", accounts: [B], response_type: Stream}}
    ]
  }}
  B: {{
    users: [ {{user: bob, password: pw}} ]
    jetstream: {{ max_mem: 1G, disk: 2GB, streams: 10, consumers: 5, max_bytes: true, mem_max_stream_bytes: 1K, disk_max_stream_bytes: 2K, max_ack_pending: 100 }}
    imports: [
      {{stream:  {{account: A, subject: "pub.>"}}, prefix: "from_a"}}
      {{service: {{account: A, subject: "svc.>"}}, to: "asvc.>"}}
    ]
  }}
  SYS: {{ users: [ {{user: admin, password: pw}} ] }}
}}
system_account: SYS
no_auth_user: bob"#
    ));
    assert_eq!(o.accounts.len(), 3);
    let a = &o.accounts[0];
    assert_eq!(a.name, "A");
    assert_eq!(a.jetstream, Some(AccountJetStream::default()));
    assert_eq!(a.users[0].account.as_deref(), Some("A"));
    assert_eq!(a.users[1].nkey.as_deref(), Some(USER_NKEY));
    assert_eq!(a.exports.len(), 3);
    assert_eq!(a.exports[0].kind, Kind::Stream);
    assert_eq!(a.exports[1].response_type, Response::Singleton);
    assert_eq!(a.exports[2].accounts, ["B"]);
    assert_eq!(a.exports[2].response_type, Response::Stream);
    let b = &o.accounts[1];
    let js = b.jetstream.unwrap();
    assert_eq!(js.max_memory, 1_000_000_000);
    assert_eq!(js.max_file, 2 << 30);
    assert_eq!(
        (js.max_streams, js.max_consumers, js.max_ack_pending),
        (10, 5, 100)
    );
    assert!(js.max_bytes_required);
    assert_eq!(
        (js.memory_max_stream_bytes, js.store_max_stream_bytes),
        (1000, 2000)
    );
    assert_eq!(b.imports[0].kind, Kind::Stream);
    assert_eq!(b.imports[0].account, "A");
    assert_eq!(b.imports[0].prefix.as_deref(), Some("from_a"));
    assert_eq!(b.imports[1].kind, Kind::Service);
    assert_eq!(b.imports[1].to.as_deref(), Some("asvc.>"));
    assert_eq!(o.system_account.as_deref(), Some("SYS"));
    assert!(o.validate().is_ok());
}

#[test]
fn account_rules_match_nats_server() {
    assert!(
        err("accounts { B { imports [{stream: {account: ZZ, subject: \"a.>\"}}] } }")
            .contains("\"ZZ\" account not defined for stream import")
    );
    assert!(err(
        "accounts { A { exports [{stream: \"a.b\"}] }, B { imports [{stream: {account: A, subject: \"a.*\"}}] } }"
    )
    .contains("Error adding stream import \"a.*\": stream import not authorized"));
    assert!(err(
        "accounts { A { exports [{stream: \"a.>\", accounts: [C]}] }, B { imports [{stream: {account: A, subject: \"a.b\"}}] }, C {} }"
    )
    .contains("not authorized"));
    assert!(err(
        "accounts { A { exports [{service: \"a.>\"}] }, B { imports [{stream: {account: A, subject: \"a.b\"}}] } }"
    )
    .contains("stream import not authorized"));
    let o = opts(
        "accounts { B { imports [{stream: {account: A, subject: \"x.y\"}}] }, A { exports [{stream: \">\"}, {stream: \"q.*.c\"}] } }",
    );
    assert_eq!(o.accounts[0].imports[0].account, "A");
    opts(
        "accounts { A { exports [{stream: \"a.*.c\"}, {service: \"s.>\", accounts: [B]}] }, B { imports [{stream: {account: A, subject: \"a.*.c\"}}, {service: {account: A, subject: \"s.x\"}, to: \"z.x\"}] } }",
    );
    assert!(
        err("accounts { A { exports [{stream: \"a.>\", service: \"b\"}] } }")
            .contains("Detected service \"b\" but already saw a stream")
    );
    assert!(
        err("accounts { A { exports [{service: \"a.>\", response_type: bogus}] } }")
            .contains("Unknown response type: \"bogus\"")
    );
    assert!(
        err("accounts { A { users [{user: a}] }, B { users [{user: a}] } }")
            .contains("Duplicate user \"a\"")
    );
    assert!(
        err("accounts { A { users [{user: a}] } }\nauthorization { users: [{user: a}] }")
            .contains("Duplicate user \"a\"")
    );
    assert!(err("accounts { A { users [{user: a, account: B}] } }")
        .contains("unknown field \"account\""));
    assert!(err("accounts { A { nkey: x } }").contains("Not a valid public nkey for an account"));
    let o = opts("accounts: [A, B]");
    assert_eq!(
        o.accounts
            .iter()
            .map(|a| a.name.as_str())
            .collect::<Vec<_>>(),
        ["A", "B"]
    );
    let o = opts("accounts { A { mappings: { a: b }, default_permissions: { publish: x }, users: [{user: u}] } }");
    assert_eq!(o.ignored, ["accounts.A.mappings"]);
    let u = &o.accounts[0].users[0];
    assert_eq!(
        u.permissions
            .as_ref()
            .unwrap()
            .publish
            .as_ref()
            .unwrap()
            .allow,
        ["x"]
    );
    let o = opts("accounts { $SYS: {} }");
    assert_eq!(o.accounts[0].name, "$SYS");
}

#[test]
fn accounts_inside_authorization_load_but_fail_the_check_like_nats_server() {
    let o = opts(
        "authorization {\n  accounts: {\n    ACME: { users: [ { user: \"alice\", password: \"secret\" } ] }\n  }\n}",
    );
    assert_eq!(o.accounts.len(), 1);
    assert_eq!(o.accounts[0].name, "ACME");
    assert_eq!(o.accounts[0].users[0].user.as_deref(), Some("alice"));
    assert_eq!(o.accounts[0].users[0].account.as_deref(), Some("ACME"));
    let e = o.check().unwrap_err().to_string();
    assert!(
        e.starts_with("t.conf:2:3: invalid use of field \"accounts\""),
        "{e}"
    );
}

#[test]
fn cluster_tls_always_verifies_and_needs_a_ca() {
    let dir = tempfile::tempdir().unwrap();
    let file = |n: &str| {
        let p = dir.path().join(n);
        std::fs::write(&p, "pem").unwrap();
        p.display().to_string()
    };
    let (cert, key, ca) = (file("c.pem"), file("k.pem"), file("ca.pem"));
    let text = format!(
        "cluster {{ port: -1, tls {{ cert_file: \"{cert}\", key_file: \"{key}\", ca_file: \"{ca}\", timeout: 3 }} }}"
    );
    let t = opts(&text).cluster.tls.unwrap();
    assert!(t.verify, "route TLS is always verified");
    assert_eq!(t.timeout, Duration::from_secs(3));
    let no_ca =
        format!("cluster {{ port: -1, tls {{ cert_file: \"{cert}\", key_file: \"{key}\" }} }}");
    assert!(err(&no_ca).contains("requires cert_file, key_file and ca_file"));
    let insecure = format!(
        "cluster {{ port: -1, tls {{ cert_file: \"{cert}\", key_file: \"{key}\", ca_file: \"{ca}\", insecure: true }} }}"
    );
    assert!(err(&insecure).contains("'insecure' is not supported"));
}

#[test]
fn tls_block_maps_and_checks_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("c.pem");
    let key = dir.path().join("k.pem");
    std::fs::write(&cert, "cert").unwrap();
    std::fs::write(&key, "key").unwrap();
    let text = format!(
        "tls {{ cert_file: \"{}\", key_file: \"{}\", ca_file: \"{}\", verify: true, timeout: 0.5, \
         handshake_first: \"300ms\", min_version: \"1.3\", cipher_suites: [TLS_AES_128_GCM_SHA256], \
         curve_preferences: [X25519, CurveP256], pinned_certs: [\"{}\"], verify_and_map: true, insecure: true }}",
        cert.display(),
        key.display(),
        cert.display(),
        "AB".repeat(32)
    );
    let t = opts(&text).tls.unwrap();
    assert_eq!(t.cert_file.as_deref(), Some(cert.as_path()));
    assert!(t.verify && t.verify_and_map && t.insecure);
    assert_eq!(t.timeout, Duration::from_millis(500));
    assert_eq!(
        t.handshake_first,
        HandshakeFirst::Fallback(Duration::from_millis(300))
    );
    assert_eq!(t.min_version.as_deref(), Some("1.3"));
    assert_eq!(t.curve_preferences, ["X25519", "CurveP256"]);
    assert_eq!(t.pinned_certs, ["ab".repeat(32)]);
    let with = |extra: &str| {
        format!(
            "tls {{ cert_file: \"{}\", key_file: \"{}\", {extra} }}",
            cert.display(),
            key.display()
        )
    };
    assert_eq!(
        opts(&with("first: true")).tls.unwrap().handshake_first,
        HandshakeFirst::On
    );
    assert_eq!(
        opts(&with("immediate: auto")).tls.unwrap().handshake_first,
        HandshakeFirst::Fallback(Duration::from_millis(50))
    );
    assert_eq!(
        opts(&with("handshake_first: false"))
            .tls
            .unwrap()
            .handshake_first,
        HandshakeFirst::Off
    );
    assert!(err(&with("handshake_first: bogus")).contains("is invalid"));
    assert!(err(&with("min_version: \"1.1\"")).contains("unsupported TLS version"));
    assert!(err(&with("cipher_suites: [FOO]")).contains("unrecognized cipher FOO"));
    assert!(
        err(&with("cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]")).contains("insecure cipher suites")
    );
    assert!(opts(&with(
        "cipher_suites: [TLS_RSA_WITH_RC4_128_SHA], allow_insecure_cipher_suites: true"
    ))
    .tls
    .is_some());
    assert!(err(&with("curve_preferences: [x25519]")).contains("unrecognized curve preference"));
    assert!(err(&with("pinned_certs: [abc]")).contains("pinned_certs"));
    assert!(err(&with("foo: 1")).contains("error parsing tls config, unknown field \"foo\""));
    assert!(err("tls { cert_file: c.pem }").contains("missing 'key_file'"));
    assert!(
        err("tls { cert_file: /nonexistent/c.pem, key_file: /nonexistent/k.pem }")
            .contains("error parsing X509 certificate/key pair: open /nonexistent/c.pem")
    );
    assert_eq!(opts("tls {}").tls, Some(TlsOptions::default()));
}

#[test]
fn operator_mode_options_map_and_check_shapes() {
    let o = opts(&format!(
        "operator: \"{SHAPED_JWT}\"\nresolver: MEMORY\nresolver_preload: {{\n  ACCT: \"{SHAPED_JWT}\"\n}}"
    ));
    assert_eq!(o.operator, [SHAPED_JWT]);
    assert_eq!(o.resolver, Some(ResolverConfig::Memory));
    assert_eq!(
        o.resolver_preload,
        [("ACCT".to_string(), SHAPED_JWT.to_string())]
    );
    assert!(err("operator: /nope/op.jwt").contains("error parsing operator JWT: open /nope/op.jwt"));
    assert!(err("resolver_preload: { A: \"eyJ...\" }").contains("invalid account JWT"));
    assert!(err("trusted: [ODB]")
        .contains("trust key \"ODB\" required to be a valid public operator nkey"));
    let dir = tempfile::tempdir().unwrap();
    let op = dir.path().join("op.jwt");
    std::fs::write(&op, format!("{SHAPED_JWT}\n")).unwrap();
    let o = opts(&format!("operators: [\"{}\"]", op.display()));
    assert_eq!(o.operator.len(), 1);
}

#[test]
fn resolver_forms_follow_the_spec() {
    assert_eq!(opts("resolver: MEM").resolver, Some(ResolverConfig::Memory));
    assert_eq!(
        opts("resolver: URL(\"http://x/jwt/v1/accounts/\")").resolver,
        Some(ResolverConfig::Url("http://x/jwt/v1/accounts/".into()))
    );
    assert_eq!(
        opts("resolver: {type: full, dir: \"./jwt\", allow_delete: false, interval: \"2m\", limit: 1000, timeout: \"1.9s\"}").resolver,
        Some(ResolverConfig::Dir {
            kind: "full".into(),
            dir: PathBuf::from("./jwt"),
            allow_delete: false,
            interval: Some(Duration::from_secs(120)),
            limit: Some(1000),
            ttl: None,
            timeout: Some(Duration::from_millis(1900)),
        })
    );
    let Some(ResolverConfig::Dir { kind, ttl, .. }) =
        opts("resolver: {type: cache, dir: /j, ttl: \"1h\", limit: 10}").resolver
    else {
        panic!("not a dir resolver")
    };
    assert_eq!(
        (kind.as_str(), ttl),
        ("cache", Some(Duration::from_secs(3600)))
    );
    assert!(err("resolver: FOO").contains("error parsing account resolver"));
    assert_eq!(opts("resolver: mem").resolver, Some(ResolverConfig::Memory));
    assert_eq!(
        opts("resolver: URL(http://memo/)").resolver,
        Some(ResolverConfig::Url("http://memo/".into()))
    );
    assert!(err("resolver: URL({http://x/\")").contains("error parsing account resolver url"));
    assert!(err("resolver: URL(\"http://h:k90/\")").contains("error parsing account resolver url"));
    assert!(err("resolver: {type: cache, ttl: \"1h\"}").contains("needs a dir"));
    let o = opts("resolver: {type: full, dir: x, hard_delete: true}");
    assert_eq!(o.ignored, ["resolver.hard_delete"]);
}

#[test]
fn includes_merge_into_options_at_top_level_and_inside_jetstream() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("js.inc"), "max_mem: 1G\nstore_dir: /inc\n").unwrap();
    std::fs::write(dir.path().join("top.inc"), "port: 5000\nserver_name: inc\n").unwrap();
    let main = dir.path().join("main.conf");
    std::fs::write(
        &main,
        "include top.inc\nport: 6000\njetstream { include \"js.inc\" }\n",
    )
    .unwrap();
    let o = load_file(&main).unwrap();
    assert_eq!(o.port, 6000);
    assert_eq!(o.server_name.as_deref(), Some("inc"));
    assert_eq!(o.jetstream.max_memory_store, Some(1_000_000_000));
    assert_eq!(o.jetstream.store_dir, Some(PathBuf::from("/inc")));
    assert_eq!(o.config_file.as_deref(), Some(main.as_path()));
    std::fs::write(&main, "jetstream { include top.inc }\n").unwrap();
    let e = load_file(&main).unwrap_err().to_string();
    assert!(e.ends_with("top.inc:1:1: unknown field \"port\""), "{e}");
}

#[test]
fn empty_and_unreadable_files_are_errors() {
    assert_eq!(
        err("# only a comment\n"),
        "t.conf: config has no values or is empty"
    );
    let e = load_file(Path::new("/nonexistent/x.conf"))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("/nonexistent/x.conf: cannot read configuration file"),
        "{e}"
    );
}

#[test]
fn cluster_blocks_map_and_refuse_what_would_not_hold() {
    let o = opts(
        "cluster { name: C1, listen: 127.0.0.1:-1, no_advertise: true, connect_retries: 3,\n\
         authorization { user: ruser, password: rpass, timeout: 2 }, pool_size: -1,\n\
         routes: [\"nats-route://ruser:rpass@127.0.0.1:4248\"] }",
    );
    let c = &o.cluster;
    assert_eq!(
        (c.host.as_str(), c.port, c.no_advertise),
        ("127.0.0.1", -1, true)
    );
    assert_eq!(
        (c.user.as_deref(), c.password.as_deref()),
        (Some("ruser"), Some("rpass"))
    );
    assert_eq!((c.connect_retries, c.pool_size), (3, -1));
    assert_eq!(c.pool(), None);
    let pinned = opts("cluster { port: -1, pool_size: 0, accounts: [A, B] }");
    assert_eq!(pinned.cluster.pool(), Some(3));
    assert_eq!(pinned.cluster.pinned_accounts, ["A", "B"]);
    assert_eq!(
        opts("cluster { port: -1, pool_size: 1000 }").cluster.pool(),
        Some(64)
    );
    for (text, err) in [
        (
            "cluster { name: \"a b\" }",
            "cluster name cannot contain spaces",
        ),
        (
            "cluster { compression: bogus }",
            "unsupported compression mode \"bogus\"",
        ),
        (
            "cluster { routes: [\"nats-route://[::1\"] }",
            "error parsing route url",
        ),
        (
            "cluster { authorization { users: [] } }",
            "does not allow multiple users",
        ),
        (
            "cluster { authorization { token: t } }",
            "does not support tokens",
        ),
        (
            "cluster { tls { cert_file: x } }",
            "missing 'key_file' in TLS configuration",
        ),
        ("cluster { bogus_field: 1 }", "unknown field"),
        (
            "cluster { accounts: [A, A] }",
            "found duplicate account name \"A\" in pinned accounts list [\"A\" \"A\" \"$SYS\"]",
        ),
        (
            "cluster { pool_size: -1, accounts: [A] }",
            "pool_size cannot be negative if pinned accounts are specified",
        ),
    ] {
        let e = parse_str(text, std::path::Path::new("t.conf")).unwrap_err();
        assert!(e.to_string().contains(err), "{text}: {e}");
    }
}

#[test]
fn raft_segment_size_is_a_size_within_bounds() {
    let o = opts("jetstream { raft_segment_size: 4MB }");
    assert_eq!(o.jetstream.raft_segment_size, Some(4 << 20));
    assert_eq!(opts("jetstream: enabled").jetstream.raft_segment_size, None);
    assert!(err("jetstream { raft_segment_size: 1KB }")
        .contains("Expected raft_segment_size between 1MB and 1GB"));
    assert!(err("jetstream { raft_segment_size: 2GB }").contains("raft_segment_size"));
}
