//! Operator mode: who signs accounts, where account JWTs come from, and the CONNECT checks for
//! a user JWT (security spec §2.7, in the reference's order, one wire error for all).
//!
//! Trusted signers are the operator identity keys (unless `strict_signing_key_usage`) and their
//! signing keys, from `operator:` JWTs or `trusted_keys`. Account JWTs come from a memory
//! resolver (`resolver_preload`, plus updates verified before they are stored). An account that
//! uses a feature we do not implement and that changes who may do what (auth callout,
//! mappings, activation-token imports) is refused, never silently half-applied.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use data_encoding::{BASE64, BASE64URL_NOPAD, BASE64_NOPAD};

use super::jwt::claims::{SigningKey, UserPermissionsLimits};
use super::jwt::{self, AccountClaims, ClaimType, Claims, OperatorClaims, UserClaims};
use super::nkeys::{self, Role};
use super::permissions::{Permissions, Rules};
use super::{AuthError, Credentials, Identity};

/// Why the trust configuration itself is unusable (a startup error).
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    /// An operator JWT or file could not be loaded.
    #[error("operator {what}: {reason}")]
    Operator {
        /// Which entry.
        what: String,
        /// Why.
        reason: String,
    },
    /// A `trusted_keys` entry is not an operator key.
    #[error("trusted key {0:?} is not an operator public key")]
    TrustedKey(String),
    /// A preloaded account JWT is invalid or untrusted.
    #[error("resolver_preload entry for {id}: {reason}")]
    Preload {
        /// Account id.
        id: String,
        /// Why.
        reason: String,
    },
}

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Trust anchors and the account resolver.
pub struct Trust {
    signers: HashSet<String>,
    accounts: RwLock<HashMap<String, Arc<Claims<AccountClaims>>>>,
    /// An operator sets `strict_signing_key_usage`: identity keys sign nothing day to day, so
    /// users signed by an account's identity key (rather than one of its signing keys) are
    /// refused, as the reference refuses them.
    strict: bool,
    /// The full resolver's directory: verified account JWTs are persisted as `<id>.jwt`.
    dir: Option<std::path::PathBuf>,
    /// The system account's public key, if configured.
    pub system_account: Option<String>,
}

impl Trust {
    /// Builds trust from `operator:` entries (inline JWTs or file paths), `trusted_keys` and
    /// `resolver_preload`.
    ///
    /// # Errors
    /// [`TrustError`] naming the bad entry.
    pub fn new(
        operators: &[String],
        trusted_keys: &[String],
        preload: &[(String, String)],
        system_account: Option<String>,
    ) -> Result<Self, TrustError> {
        let mut signers = HashSet::new();
        let mut sys = system_account;
        let mut strict = false;
        for entry in operators {
            let text = if entry.trim_start().starts_with("eyJ") {
                entry.clone()
            } else {
                std::fs::read_to_string(entry).map_err(|e| TrustError::Operator {
                    what: entry.clone(),
                    reason: e.to_string(),
                })?
            };
            let token = armored_token(&text);
            let op: Claims<OperatorClaims> =
                jwt::decode(&token, ClaimType::Operator).map_err(|e| TrustError::Operator {
                    what: entry.clone(),
                    reason: e.to_string(),
                })?;
            let self_signed = op.iss == op.sub;
            if !self_signed && !op.nats.signing_keys.contains(&op.iss) {
                return Err(TrustError::Operator {
                    what: entry.clone(),
                    reason: "operator JWT is neither self-signed nor signed by its signing key"
                        .into(),
                });
            }
            if op.nats.strict_signing_key_usage {
                strict = true;
            } else {
                signers.insert(op.sub.clone());
            }
            signers.extend(op.nats.signing_keys.iter().cloned());
            if sys.is_none() {
                sys = op.nats.system_account.clone();
            }
        }
        for k in trusted_keys {
            if !nkeys::is_public_key(k, &[Role::Operator]) {
                return Err(TrustError::TrustedKey(k.clone()));
            }
            signers.insert(k.clone());
        }
        let trust = Trust {
            signers,
            accounts: RwLock::new(HashMap::new()),
            strict,
            dir: None,
            system_account: sys,
        };
        for (id, token) in preload {
            match trust.update_account(token, Some(id)) {
                Ok(_) => {}
                // As nats-server: an account whose claims break the operator's limits is
                // logged and left out (its users are refused); the server still starts.
                Err(AuthError::AccountLimits(reason)) => {
                    tracing::warn!(account = %id, %reason, "account JWT has validation issues; its users are refused");
                }
                Err(e) => {
                    return Err(TrustError::Preload {
                        id: id.clone(),
                        reason: e.to_string(),
                    })
                }
            }
        }
        Ok(trust)
    }

    /// Adds a full resolver directory: loads every `<id>.jwt` in it (each verified; a bad file is
    /// an error) and persists later updates there.
    ///
    /// # Errors
    /// [`TrustError::Preload`] for a file that does not verify, or the directory's I/O error.
    pub fn with_directory(mut self, dir: &std::path::Path) -> Result<Self, TrustError> {
        std::fs::create_dir_all(dir).map_err(|e| TrustError::Preload {
            id: dir.display().to_string(),
            reason: e.to_string(),
        })?;
        let entries = std::fs::read_dir(dir).map_err(|e| TrustError::Preload {
            id: dir.display().to_string(),
            reason: e.to_string(),
        })?;
        for e in entries.flatten() {
            let path = e.path();
            if path.extension().and_then(|x| x.to_str()) != Some("jwt") {
                continue;
            }
            let id = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let token = std::fs::read_to_string(&path).map_err(|e| TrustError::Preload {
                id: id.clone(),
                reason: e.to_string(),
            })?;
            self.update_account(token.trim(), Some(&id))
                .map_err(|e| TrustError::Preload {
                    id,
                    reason: e.to_string(),
                })?;
        }
        self.dir = Some(dir.to_path_buf());
        Ok(self)
    }

    /// Verifies, stores and (with a full resolver) persists an account JWT pushed by an
    /// operator. Nothing is stored unless every check passes.
    ///
    /// # Errors
    /// [`AuthError::Account`] naming the failed check, or the persistence error.
    pub fn push_account(
        &self,
        token: &str,
        expected_id: Option<&str>,
    ) -> Result<String, AuthError> {
        self.accept(token, expected_id, true)
    }

    /// Verifies `token` completely and stores it; with `persist` (and a full resolver) also
    /// writes `<id>.jwt` atomically before the in-memory copy changes.
    fn accept(
        &self,
        token: &str,
        expected_id: Option<&str>,
        persist: bool,
    ) -> Result<String, AuthError> {
        let acc = self.verify_account(token)?;
        if let Some(id) = expected_id {
            if acc.sub != id {
                return Err(AuthError::Account(format!(
                    "JWT subject {} does not match {id}",
                    acc.sub
                )));
            }
        }
        if let (true, Some(dir)) = (persist, &self.dir) {
            let tmp = dir.join(format!(".{}.jwt.tmp", acc.sub));
            let dst = dir.join(format!("{}.jwt", acc.sub));
            let write = || -> std::io::Result<()> {
                use std::io::Write;
                let mut f = std::fs::File::create(&tmp)?;
                f.write_all(token.as_bytes())?;
                f.sync_all()?;
                std::fs::rename(&tmp, &dst)?;
                std::fs::File::open(dir)?.sync_all()
            };
            write().map_err(|e| {
                AuthError::Account(format!("could not persist the account JWT: {e}"))
            })?;
        }
        let id = acc.sub.clone();
        self.accounts
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.clone(), Arc::new(acc));
        Ok(id)
    }

    /// The raw claims lookup for `$SYS.REQ.ACCOUNT.<id>.CLAIMS.LOOKUP`-style queries: whether
    /// `user` (issued at `iat`) is revoked in the current account JWT.
    pub fn is_revoked(&self, account: &str, user: &str, iat: i64) -> bool {
        self.account(account).is_some_and(|a| {
            let r = |k: &str| a.nats.revocations.get(k).is_some_and(|t| *t >= iat);
            r(user) || r("*")
        })
    }

    /// Verifies an account JWT completely (signature, trusted issuer, expiry, supported
    /// features, and `sub == expected_id` when given) and only then stores it (in memory).
    ///
    /// # Errors
    /// [`AuthError::Account`] naming the failed check.
    pub fn update_account(
        &self,
        token: &str,
        expected_id: Option<&str>,
    ) -> Result<String, AuthError> {
        self.accept(token, expected_id, false)
    }

    fn verify_account(&self, token: &str) -> Result<Claims<AccountClaims>, AuthError> {
        let acc: Claims<AccountClaims> = jwt::decode(token, ClaimType::Account)
            .map_err(|e| AuthError::Account(e.to_string()))?;
        if !self.signers.contains(&acc.iss) {
            return Err(AuthError::Account(format!(
                "issuer {} is not a trusted operator key",
                acc.iss
            )));
        }
        if acc.exp != 0 && acc.exp <= now_secs() {
            return Err(AuthError::Account("account JWT expired".into()));
        }
        if acc.nats.authorization.is_some() {
            return Err(AuthError::Account(
                "auth callout (authorization) is not supported".into(),
            ));
        }
        if acc.nats.mappings.is_some() {
            return Err(AuthError::Account(
                "subject mappings are not supported".into(),
            ));
        }
        if acc.nats.imports.iter().any(|i| i.token.is_some()) {
            return Err(AuthError::Account(
                "activation-token imports are not supported".into(),
            ));
        }
        validate_account_limits(&acc.nats)?;
        Ok(acc)
    }

    /// When `id`'s current account JWT expires (unix seconds; `None`: never, or unknown).
    pub fn account_expiry(&self, id: &str) -> Option<i64> {
        self.account(id).and_then(|a| (a.exp != 0).then_some(a.exp))
    }

    /// The account claims for `id`, if the resolver has them.
    pub fn account(&self, id: &str) -> Option<Arc<Claims<AccountClaims>>> {
        self.accounts
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
    }

    /// The CONNECT checks for a user JWT.
    ///
    /// # Errors
    /// [`AuthError`] naming the failed step.
    pub fn authenticate(&self, c: &Credentials<'_>) -> Result<Identity, AuthError> {
        let token = c.jwt.ok_or(AuthError::Missing)?;
        let user: Claims<UserClaims> =
            jwt::decode(token, ClaimType::User).map_err(|e| AuthError::Jwt(e.to_string()))?;
        let (account, perms) = self.grant(&user)?;
        if !c.type_allowed(&perms.allowed_connection_types) {
            return Err(AuthError::ConnectionType(c.connection_type()));
        }
        if perms.bearer_token {
            if !c.tls {
                return Err(AuthError::Jwt(
                    "bearer token on a connection without TLS".into(),
                ));
            }
        } else {
            let sig = c.sig.ok_or(AuthError::Jwt("no nonce signature".into()))?;
            verify_nonce(&user.sub, &[Role::User], c.nonce, sig)?;
        }
        if let Some(src) = &perms.src {
            if !source_allowed(src, c.ip)? {
                return Err(AuthError::Jwt("source address not allowed".into()));
            }
        }
        let mut id = identity(&user, &account, &perms);
        id.websocket = c.websocket;
        Ok(id)
    }

    /// Checks a connected user's JWT again after its account's claims changed: what the
    /// connection must do now. The nonce and the source address were checked at CONNECT and
    /// do not change.
    pub fn recheck(&self, user_jwt: &str, current: &Identity) -> Recheck {
        let Ok(user) = jwt::decode::<UserClaims>(user_jwt, ClaimType::User) else {
            return Recheck::Refused;
        };
        let account_id = user.nats.issuer_account.as_ref().unwrap_or(&user.iss);
        if let Some(a) = self.account(account_id) {
            if a.exp != 0 && a.exp <= now_secs() {
                return Recheck::AccountExpired;
            }
        }
        if self.is_revoked(account_id, &user.sub, user.iat) {
            return Recheck::Revoked;
        }
        match self.grant(&user) {
            Err(_) => Recheck::Refused,
            Ok((account, perms)) => {
                let way = Credentials {
                    websocket: current.websocket,
                    ..Credentials::default()
                };
                if !way.type_allowed(&perms.allowed_connection_types) {
                    return Recheck::Refused;
                }
                let mut now = identity(&user, &account, &perms);
                now.websocket = current.websocket;
                if now.same_grant(current) {
                    Recheck::Unchanged
                } else {
                    Recheck::Changed(now)
                }
            }
        }
    }

    /// Everything about a user JWT that depends on the claims alone (not on the connection):
    /// validity, the account, the signing key and its scope, default permissions, bearer and
    /// connection-type rules, revocation. Returns the account and the effective permissions.
    fn grant(
        &self,
        user: &Claims<UserClaims>,
    ) -> Result<(Arc<Claims<AccountClaims>>, UserPermissionsLimits), AuthError> {
        if user.nats.proxy_required {
            return Err(AuthError::Jwt("proxy_required is not supported".into()));
        }
        let now = now_secs();
        if user.exp != 0 && user.exp <= now {
            return Err(AuthError::Jwt("user JWT expired".into()));
        }
        if user.nbf != 0 && user.nbf > now {
            return Err(AuthError::Jwt("user JWT not yet valid".into()));
        }
        let account_id = match &user.nats.issuer_account {
            Some(a) => {
                if !nkeys::is_public_key(a, &[Role::Account]) {
                    return Err(AuthError::Jwt(
                        "issuer_account is not an account key".into(),
                    ));
                }
                a.clone()
            }
            None => user.iss.clone(),
        };
        let account = self
            .account(&account_id)
            .ok_or_else(|| AuthError::Account(format!("unknown account {account_id}")))?;
        if account.exp != 0 && account.exp <= now {
            return Err(AuthError::Account("account JWT expired".into()));
        }
        let mut perms = if user.iss == account.sub {
            if self.strict {
                return Err(AuthError::Jwt(
                    "strict signing key usage: the user is signed by the account identity key, not a signing key".into(),
                ));
            }
            user.nats.perms.clone()
        } else {
            match account
                .nats
                .signing_keys
                .iter()
                .find(|k| k.key() == user.iss)
            {
                None => {
                    return Err(AuthError::Jwt(
                        "user issuer is not the account or its signing key".into(),
                    ))
                }
                Some(SigningKey::Key(_)) => user.nats.perms.clone(),
                Some(SigningKey::Scoped(scope)) => {
                    if user.nats.perms != UserPermissionsLimits::default() {
                        return Err(AuthError::Jwt(
                            "user signed by a scoped key carries its own permissions or limits"
                                .into(),
                        ));
                    }
                    expand_template(&scope.template, user)?
                }
            }
        };
        // A user without permissions of its own gets the account's default permissions
        // (nats-server: replaced as a whole, never merged; `resp` counts as a permission).
        if perms.publish.is_empty() && perms.subscribe.is_empty() && perms.resp.is_none() {
            if let Some(d) = &account.nats.default_permissions {
                perms.publish = d.publish.clone();
                perms.subscribe = d.subscribe.clone();
                perms.resp = d.resp.clone();
            }
        }
        // 0 is what a JWT without the field decodes to (and nats-server enforces no data
        // limit at all); a positive limit is one this server cannot honour.
        if perms.data > 0 {
            return Err(AuthError::Jwt(
                "a data limit is set and this server does not enforce data limits".into(),
            ));
        }
        if perms.bearer_token && account.nats.limits.disallow_bearer {
            return Err(AuthError::Jwt(
                "bearer tokens are disallowed by the account".into(),
            ));
        }
        if self.is_revoked(&account_id, &user.sub, user.iat) {
            return Err(AuthError::Jwt("user JWT revoked".into()));
        }
        if perms.times.is_some() {
            return Err(AuthError::Jwt(
                "connect time windows (times) are not supported".into(),
            ));
        }
        Ok((account, perms))
    }
}

/// What a connected user must do after its account's claims changed ([`Trust::recheck`]).
#[derive(Debug)]
pub enum Recheck {
    /// Same permissions and limits: nothing to do.
    Unchanged,
    /// Still allowed, with other permissions or limits (the connection is closed so that the
    /// client reconnects under the new ones; nothing is half-applied).
    Changed(Identity),
    /// The account revokes this user: `User Authentication Revoked`.
    Revoked,
    /// The account JWT expired: `Account Authentication Expired`.
    AccountExpired,
    /// No longer allowed at all (its signing key was removed, say): closed without a
    /// message, as nats-server does.
    Refused,
}

/// `None` for "unlimited" (any negative value), else the limit.
fn limit(v: i64) -> Option<u64> {
    u64::try_from(v).ok()
}

/// The tighter of two optional limits.
fn min_limit(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn identity(
    user: &Claims<UserClaims>,
    account: &Claims<AccountClaims>,
    perms: &UserPermissionsLimits,
) -> Identity {
    let l = &account.nats.limits;
    Identity {
        user: Some(if user.name.is_empty() {
            user.sub.clone()
        } else {
            user.name.clone()
        }),
        account: Some(account.sub.clone()),
        permissions: to_permissions(perms),
        max_subs: min_limit(limit(perms.subs), limit(l.subs)),
        max_payload: min_limit(limit(perms.payload), limit(l.payload)),
        expires_at: (user.exp != 0).then_some(user.exp),
        account_expires_at: (account.exp != 0).then_some(account.exp),
        account_conn_limit: limit(l.conn),
        user_key: Some((user.sub.clone(), user.iat)),
        websocket: false,
    }
}

/// The account limits this server enforces at load time (as nats-server's JWT validation
/// does), and the ones it cannot enforce, which refuse the JWT (fail closed).
fn validate_account_limits(a: &AccountClaims) -> Result<(), AuthError> {
    validate_limits(a).map_err(AuthError::AccountLimits)
}

fn validate_limits(a: &AccountClaims) -> Result<(), String> {
    let l = &a.limits;
    let over = |n: usize, max: i64| max >= 0 && n as u64 > max as u64;
    if over(a.imports.len(), l.imports) {
        return Err("the account contains more imports than allowed by the operator".into());
    }
    if over(a.exports.len(), l.exports) {
        return Err("the account contains more exports than allowed by the operator".into());
    }
    // nats-server checks this only when `exports` is limited too; a wildcard export the
    // operator forbade is refused here either way.
    if !l.wildcards
        && a.exports
            .iter()
            .any(|e| e.subject.split('.').any(|t| t == "*" || t == ">"))
    {
        return Err(
            "the account contains wildcard exports that are not allowed by the operator".into(),
        );
    }
    if l.data >= 0 {
        return Err("a data limit is set and this server does not enforce data limits".into());
    }
    for imp in &a.imports {
        let Some(local) = &imp.local_subject else {
            continue;
        };
        let (from, onto) = if imp.kind.eq_ignore_ascii_case("service") {
            (local.as_str(), imp.subject.as_str())
        } else {
            (imp.subject.as_str(), local.as_str())
        };
        if let Err(e) = crate::subject::mapping::validate_mapping(from, onto) {
            return Err(format!("import {:?} mapped to {local:?}: {e}", imp.subject));
        }
    }
    Ok(())
}

/// Extracts the token from an armored JWT file, or returns the text trimmed.
fn armored_token(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .find(|l| l.starts_with("eyJ"))
        .unwrap_or(text.trim())
        .to_owned()
}

fn expand_template(
    t: &UserPermissionsLimits,
    user: &Claims<UserClaims>,
) -> Result<UserPermissionsLimits, AuthError> {
    let expand = |list: &[String]| -> Result<Vec<String>, AuthError> {
        list.iter()
            .map(|s| {
                let out = s
                    .replace("{{name()}}", &user.name)
                    .replace("{{subject()}}", &user.sub);
                if out.contains("{{") {
                    Err(AuthError::Jwt(format!(
                        "unsupported template function in {s:?}"
                    )))
                } else {
                    Ok(out)
                }
            })
            .collect()
    };
    let mut p = t.clone();
    p.publish.allow = expand(&t.publish.allow)?;
    p.publish.deny = expand(&t.publish.deny)?;
    p.subscribe.allow = expand(&t.subscribe.allow)?;
    p.subscribe.deny = expand(&t.subscribe.deny)?;
    Ok(p)
}

fn to_permissions(p: &UserPermissionsLimits) -> Option<Arc<Permissions>> {
    let rules = |r: &super::jwt::claims::SubjectPermission| {
        (!r.is_empty()).then(|| Rules::new(&r.allow, &r.deny))
    };
    let perms = Permissions {
        publish: rules(&p.publish),
        subscribe: rules(&p.subscribe),
        responses: p.resp.as_ref().map(|r| {
            let ttl = if r.ttl > 0 {
                Duration::from_nanos(r.ttl as u64)
            } else {
                Duration::from_secs(120)
            };
            (u32::try_from(r.max.max(1)).unwrap_or(u32::MAX), ttl)
        }),
    };
    (perms != Permissions::default()).then(|| Arc::new(perms))
}

/// Verifies a nonce signature (base64url, or standard base64 as the reference accepts).
pub(crate) fn verify_nonce(
    public: &str,
    roles: &[Role],
    nonce: &str,
    sig: &str,
) -> Result<(), AuthError> {
    let raw = BASE64URL_NOPAD
        .decode(sig.trim_end_matches('=').as_bytes())
        .or_else(|_| BASE64.decode(sig.as_bytes()))
        .or_else(|_| BASE64_NOPAD.decode(sig.as_bytes()))
        .map_err(|_| AuthError::BadSignature)?;
    nkeys::verify(public, roles, nonce.as_bytes(), &raw).map_err(|_| AuthError::BadSignature)
}

fn source_allowed(src: &serde_json::Value, ip: Option<IpAddr>) -> Result<bool, AuthError> {
    let list: Vec<String> = match src {
        serde_json::Value::String(s) => s
            .split(',')
            .map(|x| x.trim().to_owned())
            .filter(|x| !x.is_empty())
            .collect(),
        serde_json::Value::Array(a) => a
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        _ => return Err(AuthError::Jwt("malformed src".into())),
    };
    if list.is_empty() {
        return Ok(true);
    }
    let Some(ip) = ip else { return Ok(false) };
    for cidr in list {
        let (net, bits) = cidr.split_once('/').unwrap_or((cidr.as_str(), ""));
        let net: IpAddr = net
            .parse()
            .map_err(|_| AuthError::Jwt(format!("malformed src entry {cidr:?}")))?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let bits: u32 = if bits.is_empty() {
            max
        } else {
            bits.parse()
                .map_err(|_| AuthError::Jwt(format!("malformed src entry {cidr:?}")))?
        };
        if bits > max {
            return Err(AuthError::Jwt(format!("malformed src entry {cidr:?}")));
        }
        let to_u128 = |a: IpAddr| match a {
            IpAddr::V4(v) => u128::from(u32::from(v)),
            IpAddr::V6(v) => u128::from(v),
        };
        if net.is_ipv4() != ip.is_ipv4() {
            continue;
        }
        let shift = max - bits;
        let (a, b) = (to_u128(net), to_u128(ip));
        if shift >= 128 || (a >> shift) == (b >> shift) {
            return Ok(true);
        }
    }
    Ok(false)
}
