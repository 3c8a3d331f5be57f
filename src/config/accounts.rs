//! Authorization, users, permissions and accounts: the `authorization { }` and `accounts { }`
//! blocks (spec §5 and §6) mapped onto plain data.
//!
//! Checks made here because nats-server makes them while parsing (so `-t` fails on them):
//! at most one of token / user+password / users list; every user has a `user` or an `nkey`;
//! nkeys are well-formed public user keys; user names and nkeys are unique across
//! `authorization` and all accounts; connection types are known; exports are either a stream
//! or a service; response types are known; every import names a defined account.
//!
//! One deliberate difference: an `accounts` map nested inside `authorization` (a shape some
//! operations guides use) is accepted and merged with the top-level accounts, but recorded as
//! a check warning, because `nats-server -t` rejects it (`unknown field "accounts"`).

use std::collections::HashSet;
use std::time::Duration;

use super::error::{ConfigError, ConfigErrorKind, Location};
use super::field::{self, key, Collected};
use super::keys::{self, KeyKind};
use super::parse::{Entry, Map, Value, ValueKind};

/// The `authorization` block: single-account authentication.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuthorizationOptions {
    /// Single token for all clients (plain or bcrypt).
    pub token: Option<String>,
    /// Single user name for all clients.
    pub user: Option<String>,
    /// Password for `user` (plain or bcrypt).
    pub password: Option<String>,
    /// Users of the global account.
    pub users: Vec<UserConfig>,
    /// Time to receive CONNECT, if set here.
    pub timeout: Option<Duration>,
    /// Permissions for users that have none of their own.
    pub default_permissions: Option<Permissions>,
}

/// One user, from `authorization.users` or `accounts.<name>.users`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UserConfig {
    /// User name (`user`, `username`).
    pub user: Option<String>,
    /// Password (`password`, `pass`), plain or bcrypt.
    pub password: Option<String>,
    /// Public user nkey (`U...`).
    pub nkey: Option<String>,
    /// The user's own permissions (or the applicable default permissions).
    pub permissions: Option<Permissions>,
    /// Allowed connection types, upper-cased (`STANDARD`, `WEBSOCKET`, ...); empty = all.
    pub allowed_connection_types: Vec<String>,
    /// The account the user belongs to, when it came from an `accounts` block.
    pub account: Option<String>,
}

/// Publish/subscribe permissions of a user.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Permissions {
    /// `publish` (`pub`, `import`).
    pub publish: Option<SubjectPermission>,
    /// `subscribe` (`sub`, `export`); entries may be `"subject queue"`.
    pub subscribe: Option<SubjectPermission>,
    /// `allow_responses` (`publish_allow_responses`).
    pub allow_responses: Option<ResponsePermission>,
}

/// Allow and deny lists of subjects. Deny beats allow; an empty allow list allows all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubjectPermission {
    /// Allowed subjects.
    pub allow: Vec<String>,
    /// Denied subjects.
    pub deny: Vec<String>,
}

/// Permission to publish replies to received requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponsePermission {
    /// Replies allowed per request.
    pub max: i64,
    /// How long the permission lasts.
    pub expires: Duration,
}

impl Default for ResponsePermission {
    /// `allow_responses: true`: one reply within two minutes.
    fn default() -> Self {
        ResponsePermission {
            max: 1,
            expires: Duration::from_secs(120),
        }
    }
}

/// One account of an `accounts` block.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AccountConfig {
    /// Account name.
    pub name: String,
    /// Its users (each with `account` set to this name).
    pub users: Vec<UserConfig>,
    /// Per-account JetStream, if mentioned.
    pub jetstream: Option<AccountJetStream>,
    /// What the account offers others.
    pub exports: Vec<ExportConfig>,
    /// What the account takes from others.
    pub imports: Vec<ImportConfig>,
}

/// Per-account JetStream limits; `-1` = unlimited (within server limits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccountJetStream {
    /// `enabled`/map = true, `disabled` = false.
    pub enabled: bool,
    /// `max_memory` (`max_mem`, `mem`, `memory`).
    pub max_memory: i64,
    /// `max_file` (`max_store`, `max_disk`, `store`, `disk`).
    pub max_file: i64,
    /// `max_streams` (`streams`).
    pub max_streams: i64,
    /// `max_consumers` (`consumers`).
    pub max_consumers: i64,
    /// `max_bytes_required` (`max_bytes`).
    pub max_bytes_required: bool,
    /// `memory_max_stream_bytes` (`mem_max_stream_bytes`).
    pub memory_max_stream_bytes: i64,
    /// `store_max_stream_bytes` (`disk_max_stream_bytes`).
    pub store_max_stream_bytes: i64,
    /// `max_ack_pending`.
    pub max_ack_pending: i64,
}

impl Default for AccountJetStream {
    /// `jetstream: enabled`: on, no limits of its own.
    fn default() -> Self {
        AccountJetStream {
            enabled: true,
            max_memory: -1,
            max_file: -1,
            max_streams: -1,
            max_consumers: -1,
            max_bytes_required: false,
            memory_max_stream_bytes: -1,
            store_max_stream_bytes: -1,
            max_ack_pending: -1,
        }
    }
}

/// Stream or service, for exports and imports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportKind {
    /// Messages flow from exporter to importer subscribers.
    Stream,
    /// Requests flow from importer to exporter, replies back.
    Service,
}

/// How many replies a service export sends per request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ResponseType {
    /// One reply (default).
    #[default]
    Singleton,
    /// Any number of replies.
    Stream,
    /// One reply in several parts.
    Chunked,
}

/// One `exports` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportConfig {
    /// Stream or service.
    pub kind: ExportKind,
    /// Exported subject.
    pub subject: String,
    /// Service response type (meaningless for streams).
    pub response_type: ResponseType,
    /// Accounts allowed to import; empty = public.
    pub accounts: Vec<String>,
}

/// One `imports` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportConfig {
    /// Stream or service.
    pub kind: ExportKind,
    /// The exporting account.
    pub account: String,
    /// The exporter's subject.
    pub subject: String,
    /// Stream imports: prefix added to delivered subjects.
    pub prefix: Option<String>,
    /// Local subject (rename).
    pub to: Option<String>,
}

/// What `authorization` yields: its options plus any accounts nested inside it.
pub(super) struct Authorization {
    pub(super) options: AuthorizationOptions,
    pub(super) nested_accounts: Vec<AccountConfig>,
}

/// An import to authorize once every account is known.
struct PendingImport {
    importer: String,
    account: String,
    kind: ExportKind,
    subject: String,
    location: Location,
}

/// Cross-block facts checked once everything is read.
#[derive(Default)]
pub(super) struct Registry {
    imports: Vec<PendingImport>,
    users: HashSet<String>,
    nkeys: HashSet<String>,
}

pub(super) fn authorization(
    e: &Entry,
    c: &mut Collected,
    registry: &mut Registry,
) -> Result<Authorization, ConfigError> {
    let m = field::map(e)?;
    let mut a = AuthorizationOptions::default();
    let mut nested = Vec::new();
    let mut users_entry = None;
    for item in m.entries() {
        match key(item).as_str() {
            "token" => a.token = Some(field::string(item)?),
            "user" | "username" => a.user = Some(field::string(item)?),
            "password" | "pass" => a.password = Some(field::string(item)?),
            "timeout" => a.timeout = Some(field::seconds(item)?),
            "default_permissions" => a.default_permissions = Some(permissions(item)?),
            "users" => users_entry = Some(item),
            "accounts" => {
                nested.extend(accounts(item, "authorization.accounts", c, registry)?);
                c.warnings.push(ConfigError::new(
                    item.key_location.clone(),
                    ConfigErrorKind::InvalidUse {
                        field: item.key.clone(),
                        reason: "nats-server does not accept accounts inside authorization \
                                 (unknown field); move the block to the top level"
                            .into(),
                    },
                ));
            }
            "auth_callout" | "callout" => {
                field::map(item)?;
                c.ignore("authorization.auth_callout");
            }
            _ => field::unknown_unless_variable(item)?,
        }
    }
    if let Some(item) = users_entry {
        a.users = users(item, None, registry)?;
    }
    if a.token.is_some() && (a.user.is_some() || a.password.is_some()) {
        return Err(field::invalid(e, "Cannot have a user/pass and token"));
    }
    if users_entry.is_some() && a.user.is_some() {
        return Err(field::invalid(
            e,
            "Can not have a single user/pass and a users array",
        ));
    }
    if users_entry.is_some() && a.token.is_some() {
        return Err(field::invalid(e, "Can not have a token and a users array"));
    }
    if let Some(user) = &a.user {
        remember_user(registry, user, &e.key_location)?;
    }
    if let Some(defaults) = &a.default_permissions {
        for u in a.users.iter_mut().filter(|u| u.permissions.is_none()) {
            u.permissions = Some(defaults.clone());
        }
    }
    Ok(Authorization {
        options: a,
        nested_accounts: nested,
    })
}

fn remember_user(registry: &mut Registry, user: &str, at: &Location) -> Result<(), ConfigError> {
    if !registry.users.insert(user.to_string()) {
        return Err(ConfigError::invalid(
            at.clone(),
            format!("Duplicate user \"{user}\" detected"),
        ));
    }
    Ok(())
}

/// Connection types nats-server knows.
const CONNECTION_TYPES: &[&str] = &[
    "STANDARD",
    "WEBSOCKET",
    "LEAFNODE",
    "LEAFNODE_WS",
    "MQTT",
    "MQTT_WS",
    "IN_PROCESS",
];

fn users(
    e: &Entry,
    account: Option<&str>,
    registry: &mut Registry,
) -> Result<Vec<UserConfig>, ConfigError> {
    let ValueKind::Array(items) = &e.value.kind else {
        return Err(field::invalid_value(e, "a list of users"));
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let Some(m) = item.as_map() else {
            return Err(field::invalid_item(
                &item.location,
                &e.key,
                "a list of user maps",
            ));
        };
        out.push(user(m, &item.location, account, registry)?);
    }
    Ok(out)
}

fn user(
    m: &Map,
    at: &Location,
    account: Option<&str>,
    registry: &mut Registry,
) -> Result<UserConfig, ConfigError> {
    let mut u = UserConfig {
        account: account.map(str::to_string),
        ..UserConfig::default()
    };
    for item in m.entries() {
        match key(item).as_str() {
            "user" | "username" => u.user = Some(field::string(item)?),
            "password" | "pass" => u.password = Some(field::string(item)?),
            "nkey" => {
                let k = field::string(item)?;
                if !keys::is_public_key(&k, KeyKind::User) {
                    return Err(field::invalid(item, "Not a valid public nkey for a user"));
                }
                u.nkey = Some(k);
            }
            "permissions" => u.permissions = Some(permissions(item)?),
            "allowed_connection_types" => {
                let list = field::string_list(item)?;
                let upper: Vec<String> = list.iter().map(|s| s.to_ascii_uppercase()).collect();
                let bad: Vec<&String> = list
                    .iter()
                    .zip(&upper)
                    .filter(|(_, up)| !CONNECTION_TYPES.contains(&up.as_str()))
                    .map(|(orig, _)| orig)
                    .collect();
                if !bad.is_empty() {
                    return Err(field::invalid(
                        item,
                        format!("invalid connection types {bad:?}"),
                    ));
                }
                u.allowed_connection_types = upper;
            }
            _ => field::unknown_unless_variable(item)?,
        }
    }
    match (&u.user, &u.nkey) {
        (None, None) => {
            return Err(ConfigError::invalid(
                at.clone(),
                "User entry requires a user",
            ))
        }
        (Some(name), _) => remember_user(registry, name, at)?,
        (None, Some(nkey)) => {
            if !registry.nkeys.insert(nkey.clone()) {
                return Err(ConfigError::invalid(
                    at.clone(),
                    format!("Duplicate nkey \"{nkey}\" detected"),
                ));
            }
        }
    }
    Ok(u)
}

fn permissions(e: &Entry) -> Result<Permissions, ConfigError> {
    let m = field::map(e)?;
    let mut p = Permissions::default();
    for item in m.entries() {
        match key(item).as_str() {
            "publish" | "pub" | "import" => p.publish = Some(subject_permission(item)?),
            "subscribe" | "sub" | "export" => p.subscribe = Some(subject_permission(item)?),
            "allow_responses" | "publish_allow_responses" => {
                p.allow_responses = response_permission(item)?
            }
            _ => field::unknown_unless_variable(item)?,
        }
    }
    Ok(p)
}

fn subject_permission(e: &Entry) -> Result<SubjectPermission, ConfigError> {
    match &e.value.kind {
        ValueKind::String(_) | ValueKind::Array(_) => Ok(SubjectPermission {
            allow: field::string_list(e)?,
            deny: Vec::new(),
        }),
        ValueKind::Map(m) => {
            let mut sp = SubjectPermission::default();
            for item in m.entries() {
                match key(item).as_str() {
                    "allow" => sp.allow = field::string_list(item)?,
                    "deny" => sp.deny = field::string_list(item)?,
                    _ => field::unknown_unless_variable(item)?,
                }
            }
            Ok(sp)
        }
        _ => Err(field::invalid_value(
            e,
            "a subject, a list of subjects or {allow, deny}",
        )),
    }
}

fn response_permission(e: &Entry) -> Result<Option<ResponsePermission>, ConfigError> {
    match &e.value.kind {
        ValueKind::Bool(true) => Ok(Some(ResponsePermission::default())),
        ValueKind::Bool(false) => Ok(None),
        ValueKind::Map(m) => {
            let mut rp = ResponsePermission::default();
            let mut scratch = Collected::default();
            for item in m.entries() {
                match key(item).as_str() {
                    "max" | "max_msgs" | "max_messages" | "max_responses" => {
                        rp.max = field::int(item)?
                    }
                    "expires" | "expiration" | "ttl" => {
                        rp.expires = field::duration(item, false, &mut scratch)?
                    }
                    _ => field::unknown_unless_variable(item)?,
                }
            }
            Ok(Some(rp))
        }
        _ => Err(field::invalid_value(e, "true, false or {max, expires}")),
    }
}

pub(super) fn accounts(
    e: &Entry,
    path: &str,
    c: &mut Collected,
    registry: &mut Registry,
) -> Result<Vec<AccountConfig>, ConfigError> {
    match &e.value.kind {
        ValueKind::Array(items) => items
            .iter()
            .map(|item| match &item.kind {
                ValueKind::String(name) => Ok(AccountConfig {
                    name: name.clone(),
                    ..AccountConfig::default()
                }),
                _ => Err(field::invalid_item(
                    &item.location,
                    &e.key,
                    "a list of account names",
                )),
            })
            .collect(),
        ValueKind::Map(m) => {
            let mut out = Vec::with_capacity(m.len());
            for item in m.entries() {
                out.push(account(item, path, c, registry)?);
            }
            Ok(out)
        }
        _ => Err(field::invalid_value(e, "a map of accounts")),
    }
}

fn account(
    e: &Entry,
    path: &str,
    c: &mut Collected,
    registry: &mut Registry,
) -> Result<AccountConfig, ConfigError> {
    let name = e.key.clone();
    let m = field::map(e)?;
    let mut acc = AccountConfig {
        name: name.clone(),
        ..AccountConfig::default()
    };
    let mut users_entry = None;
    let mut defaults = None;
    for item in m.entries() {
        let k = key(item);
        match k.as_str() {
            "users" => users_entry = Some(item),
            "jetstream" => acc.jetstream = Some(account_jetstream(item)?),
            "exports" => acc.exports = exports(item, c)?,
            "imports" => acc.imports = imports(item, &name, c, registry)?,
            "default_permissions" => defaults = Some(permissions(item)?),
            "nkey" => {
                let k = field::string(item)?;
                if !keys::is_public_key(&k, KeyKind::Account) {
                    return Err(field::invalid(
                        item,
                        format!("Not a valid public nkey for an account: \"{k}\""),
                    ));
                }
                c.ignore(format!("{path}.{name}.nkey"));
            }
            "limits" => {
                for limit in field::map(item)?.entries() {
                    match key(limit).as_str() {
                        "max_connections" | "max_conn" | "max_subscriptions" | "max_subs"
                        | "max_payload" | "max_pay" | "max_leafnodes" | "max_leafs" => {
                            field::int(limit)?;
                        }
                        _ => field::unknown_unless_variable(limit)?,
                    }
                }
                c.ignore(format!("{path}.{name}.limits"));
            }
            "mappings" | "maps" | "msg_trace" => c.ignore(format!("{path}.{name}.{k}")),
            _ => field::unknown_unless_variable(item)?,
        }
    }
    if let Some(item) = users_entry {
        acc.users = users(item, Some(&name), registry)?;
    }
    if let Some(defaults) = defaults {
        for u in acc.users.iter_mut().filter(|u| u.permissions.is_none()) {
            u.permissions = Some(defaults.clone());
        }
    }
    Ok(acc)
}

fn account_jetstream(e: &Entry) -> Result<AccountJetStream, ConfigError> {
    let mut js = AccountJetStream::default();
    match &e.value.kind {
        ValueKind::Bool(b) => js.enabled = *b,
        ValueKind::String(s) => match s.to_ascii_lowercase().as_str() {
            "enabled" | "enable" => {}
            "disabled" | "disable" => js.enabled = false,
            _ => {
                return Err(field::invalid(
                    e,
                    format!("Expected 'enabled' or 'disabled' for string value, got '{s}'"),
                ))
            }
        },
        ValueKind::Map(m) => {
            for item in m.entries() {
                match key(item).as_str() {
                    "max_memory" | "max_mem" | "mem" | "memory" => {
                        js.max_memory = field::size(item)?
                    }
                    "max_file" | "max_store" | "max_disk" | "store" | "disk" => {
                        js.max_file = field::size(item)?
                    }
                    "max_streams" | "streams" => js.max_streams = field::int(item)?,
                    "max_consumers" | "consumers" => js.max_consumers = field::int(item)?,
                    "max_bytes_required" | "max_bytes" | "max_stream_bytes" => {
                        js.max_bytes_required = field::boolean(item)?
                    }
                    "memory_max_stream_bytes" | "mem_max_stream_bytes" => {
                        js.memory_max_stream_bytes = field::size(item)?
                    }
                    "store_max_stream_bytes" | "disk_max_stream_bytes" => {
                        js.store_max_stream_bytes = field::size(item)?
                    }
                    "max_ack_pending" => js.max_ack_pending = field::int(item)?,
                    _ => field::unknown_unless_variable(item)?,
                }
            }
        }
        _ => {
            return Err(field::invalid_value(
                e,
                "enabled, disabled or a map of limits",
            ))
        }
    }
    Ok(js)
}

fn items_of<'a>(e: &'a Entry, what: &str) -> Result<Vec<(&'a Map, &'a Value)>, ConfigError> {
    let ValueKind::Array(items) = &e.value.kind else {
        return Err(field::invalid_value(e, what));
    };
    items
        .iter()
        .map(|item| {
            item.as_map()
                .map(|m| (m, item))
                .ok_or_else(|| field::invalid_item(&item.location, &e.key, what))
        })
        .collect()
}

fn set_kind(
    slot: &mut Option<(ExportKind, String)>,
    kind: ExportKind,
    subject: String,
    item: &Entry,
) -> Result<(), ConfigError> {
    if let Some((prev, _)) = slot {
        let (this, seen) = match (kind, prev) {
            (ExportKind::Service, _) => ("service", "stream"),
            (ExportKind::Stream, _) => ("stream", "service"),
        };
        return Err(field::invalid(
            item,
            format!("Detected {this} \"{subject}\" but already saw a {seen}"),
        ));
    }
    *slot = Some((kind, subject));
    Ok(())
}

fn exports(e: &Entry, c: &mut Collected) -> Result<Vec<ExportConfig>, ConfigError> {
    let mut out = Vec::new();
    for (m, value) in items_of(e, "a list of exports")? {
        let mut kind: Option<(ExportKind, String)> = None;
        let mut response_type = ResponseType::default();
        let mut allowed = Vec::new();
        for item in m.entries() {
            let k = key(item);
            match k.as_str() {
                "stream" => set_kind(&mut kind, ExportKind::Stream, field::string(item)?, item)?,
                "service" => set_kind(&mut kind, ExportKind::Service, field::string(item)?, item)?,
                "response_type" | "response" => {
                    let s = field::string(item)?;
                    response_type = match s.to_ascii_lowercase().as_str() {
                        "singleton" | "single" => ResponseType::Singleton,
                        "stream" => ResponseType::Stream,
                        "chunked" | "chunk" => ResponseType::Chunked,
                        _ => {
                            return Err(field::invalid(
                                item,
                                format!("Unknown response type: \"{s}\""),
                            ))
                        }
                    };
                }
                "accounts" => allowed = field::string_list(item)?,
                "response_threshold"
                | "threshold"
                | "latency"
                | "account_token_position"
                | "advertise"
                | "allow_trace" => c.ignore(format!("exports.{k}")),
                _ => field::unknown_unless_variable(item)?,
            }
        }
        let Some((kind, subject)) = kind else {
            return Err(ConfigError::invalid(
                value.location.clone(),
                "export needs a stream or a service subject",
            ));
        };
        out.push(ExportConfig {
            kind,
            subject,
            response_type,
            accounts: allowed,
        });
    }
    Ok(out)
}

fn import_source(item: &Entry) -> Result<(String, String), ConfigError> {
    let m = field::map(item)?;
    let mut account = None;
    let mut subject = None;
    for inner in m.entries() {
        match key(inner).as_str() {
            "account" => account = Some(field::string(inner)?),
            "subject" => subject = Some(field::string(inner)?),
            _ => field::unknown_unless_variable(inner)?,
        }
    }
    match (account, subject) {
        (Some(a), Some(s)) => Ok((a, s)),
        _ => Err(field::invalid_value(item, "{account, subject}")),
    }
}

fn imports(
    e: &Entry,
    importer: &str,
    c: &mut Collected,
    registry: &mut Registry,
) -> Result<Vec<ImportConfig>, ConfigError> {
    let mut out = Vec::new();
    for (m, value) in items_of(e, "a list of imports")? {
        let mut source: Option<(ExportKind, String)> = None;
        let mut account = String::new();
        let mut prefix = None;
        let mut to = None;
        for item in m.entries() {
            let k = key(item);
            match k.as_str() {
                "stream" | "service" => {
                    let kind = if k == "stream" {
                        ExportKind::Stream
                    } else {
                        ExportKind::Service
                    };
                    let (acc, subject) = import_source(item)?;
                    set_kind(&mut source, kind, subject, item)?;
                    account = acc;
                }
                "prefix" => prefix = Some(field::string(item)?),
                "to" => to = Some(field::string(item)?),
                "share" | "allow_trace" => c.ignore(format!("imports.{k}")),
                _ => field::unknown_unless_variable(item)?,
            }
        }
        let Some((kind, subject)) = source else {
            return Err(ConfigError::invalid(
                value.location.clone(),
                "import needs a stream or a service",
            ));
        };
        if let Some(to) = &to {
            // A service import maps the importer's `to` onto the export; a stream import
            // maps the export onto the importer's `to`. Either way the wildcards must match.
            let (what, from, onto) = match kind {
                ExportKind::Service => ("service", to.as_str(), subject.as_str()),
                ExportKind::Stream => ("stream", subject.as_str(), to.as_str()),
            };
            if let Err(e) = crate::subject::mapping::validate_mapping(from, onto) {
                return Err(ConfigError::invalid(
                    value.location.clone(),
                    format!("Error adding {what} import \"{subject}\": failed to create mapping transform for {what} import subject from \"{from}\" to \"{onto}\": {e}"),
                ));
            }
        }
        registry.imports.push(PendingImport {
            importer: importer.to_string(),
            account: account.clone(),
            kind,
            subject: subject.clone(),
            location: value.location.clone(),
        });
        out.push(ImportConfig {
            kind,
            account,
            subject,
            prefix,
            to,
        });
    }
    Ok(out)
}

/// True when the export subject `pattern` covers every subject `subject` can match (`*` one
/// token, `>` one or more trailing tokens).
fn covers(pattern: &str, subject: &str) -> bool {
    let mut p = pattern.split('.');
    let mut s = subject.split('.');
    loop {
        match (p.next(), s.next()) {
            (None, None) => return true,
            (Some(">"), Some(_)) => return true,
            (Some("*"), Some(t)) if t != ">" => {}
            (Some(a), Some(b)) if a == b => {}
            _ => return false,
        }
    }
}

/// Checks that need every account: an import must name a defined account that exports a
/// covering subject of the same kind to the importer (nats-server checks this while parsing).
pub(super) fn check_users_and_imports(
    accounts: &[AccountConfig],
    registry: &Registry,
) -> Result<(), ConfigError> {
    for import in &registry.imports {
        let what = match import.kind {
            ExportKind::Stream => "stream",
            ExportKind::Service => "service",
        };
        let Some(exporter) = accounts.iter().find(|a| a.name == import.account) else {
            return Err(ConfigError::invalid(
                import.location.clone(),
                format!(
                    "\"{}\" account not defined for {what} import",
                    import.account
                ),
            ));
        };
        let authorized = exporter.exports.iter().any(|x| {
            x.kind == import.kind
                && covers(&x.subject, &import.subject)
                && (x.accounts.is_empty() || x.accounts.contains(&import.importer))
        });
        if !authorized {
            return Err(ConfigError::invalid(
                import.location.clone(),
                format!(
                    "Error adding {what} import \"{}\": {what} import not authorized",
                    import.subject
                ),
            ));
        }
    }
    Ok(())
}
