//! Who may connect, and as whom.
//!
//! This module decides authentication from the credentials a client presents in CONNECT. It
//! knows nothing about sockets or the config file: the server builds an [`Authenticator`] from
//! plain [`UserEntry`] values and asks it one question per connection.
//!
//! Modes: no auth; a single token; configured users with passwords (plain text, bcrypt
//! `$2a$`/`$2b$`/`$2y$` hashes, or argon2id PHC strings `$argon2id$...`) or nkeys (nonce signature), each optionally bound to a named
//! account, plus `no_auth_user`; and operator mode, where user JWTs chain to trusted operator
//! keys through account JWTs ([`trust`]). [`permissions`] decides what an identity may publish
//! and subscribe to.
//! Comparisons of secrets are constant-time. The wire never says which check failed; the log
//! does.
#![deny(clippy::indexing_slicing)]

pub mod creds;
pub mod jwt;
pub mod nkeys;
pub mod permissions;
pub mod trust;

use std::net::IpAddr;
use std::sync::Arc;

use subtle::ConstantTimeEq;

pub use permissions::Permissions;
pub use trust::{Trust, TrustError};

/// Credentials from CONNECT, plus what the server knows about the connection.
#[derive(Debug, Default, Clone)]
pub struct Credentials<'a> {
    /// `user`.
    pub user: Option<&'a str>,
    /// `pass`.
    pub pass: Option<&'a str>,
    /// `auth_token`.
    pub token: Option<&'a str>,
    /// `nkey` (bare nkey users).
    pub nkey: Option<&'a str>,
    /// `jwt` (operator mode).
    pub jwt: Option<&'a str>,
    /// `sig`: signature over the nonce.
    pub sig: Option<&'a str>,
    /// The nonce this connection's INFO carried.
    pub nonce: &'a str,
    /// The connection is TLS.
    pub tls: bool,
    /// The client's address.
    pub ip: Option<IpAddr>,
    /// Identities from a verified client certificate (SAN e-mails and DNS names, subject DN),
    /// for `verify_and_map`.
    pub cert_identities: &'a [String],
    /// The client came in over WebSocket (connection type `WEBSOCKET`, else `STANDARD`).
    pub websocket: bool,
}

impl Credentials<'_> {
    /// The connection type `allowed_connection_types` lists are checked against.
    pub fn connection_type(&self) -> &'static str {
        if self.websocket {
            "WEBSOCKET"
        } else {
            "STANDARD"
        }
    }

    /// Whether a user restricted to `allowed` may connect this way (empty: any type).
    pub fn type_allowed(&self, allowed: &[String]) -> bool {
        allowed.is_empty()
            || allowed
                .iter()
                .any(|t| t.eq_ignore_ascii_case(self.connection_type()))
    }
}

impl Credentials<'_> {
    fn is_empty(&self) -> bool {
        self.user.is_none()
            && self.pass.is_none()
            && self.token.is_none()
            && self.nkey.is_none()
            && self.jwt.is_none()
    }
}

/// A configured user: a name with a password, or a public nkey.
#[derive(Clone, Default)]
pub struct UserEntry {
    /// User name (absent for nkey users).
    pub user: Option<String>,
    /// Plain password or a bcrypt hash.
    pub password: Option<String>,
    /// Public user nkey (`U...`).
    pub nkey: Option<String>,
    /// Account the user belongs to; `None` = the global account.
    pub account: Option<String>,
    /// Permissions; `None` = everything.
    pub permissions: Option<Arc<Permissions>>,
    /// Connection types the user may use (`STANDARD`, `WEBSOCKET`, ...); empty = any.
    pub allowed_connection_types: Vec<String>,
}

/// Who a client turned out to be, and what it may do.
#[derive(Debug, Clone, Default)]
pub struct Identity {
    /// Authenticated user name (or nkey), if any.
    pub user: Option<String>,
    /// Account to bind to; `None` = the global account.
    pub account: Option<String>,
    /// Permissions; `None` = everything.
    pub permissions: Option<Arc<Permissions>>,
    /// Subscription limit from the user's claims; `None` = server limit only.
    pub max_subs: Option<u64>,
    /// Authenticated over WebSocket (a claims recheck tests the connection type again).
    pub websocket: bool,
    /// Payload limit from the user's claims.
    pub max_payload: Option<u64>,
    /// When the user's credentials expire (unix seconds).
    pub expires_at: Option<i64>,
    /// When the user's account JWT expires (unix seconds). Not part of the grant: a pushed
    /// account JWT may extend it, and the connection checks again when it is reached.
    pub account_expires_at: Option<i64>,
    /// The account's connection limit.
    pub account_conn_limit: Option<u64>,
    /// The user's public key and JWT issue time (operator mode), for revocation checks on
    /// account updates.
    pub user_key: Option<(String, i64)>,
}

impl Identity {
    /// Whether `other` grants exactly the same permissions and limits.
    pub fn same_grant(&self, other: &Identity) -> bool {
        self.permissions == other.permissions
            && self.max_subs == other.max_subs
            && self.max_payload == other.max_payload
            && self.expires_at == other.expires_at
    }
}

/// Why authentication failed (logged, never sent to the client).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No credentials and no `no_auth_user`.
    #[error("no credentials presented")]
    Missing,
    /// Token did not match.
    #[error("token mismatch")]
    BadToken,
    /// The account's claims break the operator's limits (imports, exports, wildcard
    /// exports) or carry a limit this server cannot enforce.
    #[error("account: {0}")]
    AccountLimits(String),
    /// Unknown user.
    #[error("unknown user {0:?}")]
    UnknownUser(String),
    /// Wrong password.
    #[error("wrong password for user {0:?}")]
    BadPassword(String),
    /// The nonce signature did not verify.
    #[error("nonce signature does not verify")]
    BadSignature,
    /// A user JWT check failed.
    #[error("user JWT: {0}")]
    Jwt(String),
    /// The account could not be resolved or is not trusted.
    #[error("account: {0}")]
    Account(String),
    /// The user's `allowed_connection_types` exclude this connection's type.
    #[error("connection type {0} not allowed")]
    ConnectionType(&'static str),
}

enum Mode {
    Open,
    Token(String),
    Users(Vec<UserEntry>),
    Operator(Trust),
}

/// Decides CONNECT credentials.
pub struct Authenticator {
    mode: Mode,
    no_auth_user: Option<String>,
    tls_map: bool,
}

impl Authenticator {
    /// No authentication: every client is admitted to the global account.
    pub fn open() -> Self {
        Authenticator {
            mode: Mode::Open,
            no_auth_user: None,
            tls_map: false,
        }
    }

    /// A single token for all clients.
    pub fn token(token: String) -> Self {
        Authenticator {
            mode: Mode::Token(token),
            no_auth_user: None,
            tls_map: false,
        }
    }

    /// A list of users; `no_auth_user` names the user that credential-less clients become.
    pub fn users(users: Vec<UserEntry>, no_auth_user: Option<String>) -> Self {
        if users.is_empty() {
            return Authenticator::open();
        }
        Authenticator {
            mode: Mode::Users(users),
            no_auth_user,
            tls_map: false,
        }
    }

    /// Operator (JWT) mode.
    pub fn operator(trust: Trust) -> Self {
        Authenticator {
            mode: Mode::Operator(trust),
            no_auth_user: None,
            tls_map: false,
        }
    }

    /// Turns on `verify_and_map`: a verified client certificate selects the user.
    pub fn with_tls_map(mut self, on: bool) -> Self {
        self.tls_map = on;
        self
    }

    /// Whether INFO must say `auth_required` (false with `no_auth_user`, as the reference).
    pub fn required(&self) -> bool {
        match &self.mode {
            Mode::Open => false,
            Mode::Token(_) | Mode::Operator(_) => true,
            Mode::Users(_) => self.no_auth_user.is_none(),
        }
    }

    /// Whether any authentication is configured at all.
    pub fn enabled(&self) -> bool {
        !matches!(self.mode, Mode::Open)
    }

    /// Whether INFO must carry a nonce (nkey users or operator mode).
    pub fn needs_nonce(&self) -> bool {
        match &self.mode {
            Mode::Operator(_) => true,
            Mode::Users(u) => u.iter().any(|u| u.nkey.is_some()),
            _ => false,
        }
    }

    /// The operator-mode trust, when configured.
    pub fn trust(&self) -> Option<&Trust> {
        match &self.mode {
            Mode::Operator(t) => Some(t),
            _ => None,
        }
    }

    /// Authenticates one client.
    ///
    /// # Errors
    /// [`AuthError`] naming the failed check, for the log.
    pub fn authenticate(&self, c: &Credentials<'_>) -> Result<Identity, AuthError> {
        match &self.mode {
            Mode::Open => Ok(Identity::default()),
            Mode::Token(t) => {
                let given = c.token.ok_or(AuthError::Missing)?;
                if secret_matches(given, t) {
                    Ok(Identity::default())
                } else {
                    Err(AuthError::BadToken)
                }
            }
            Mode::Operator(trust) => trust.authenticate(c),
            Mode::Users(users) => {
                let found = |u: &UserEntry| {
                    if !c.type_allowed(&u.allowed_connection_types) {
                        return Err(AuthError::ConnectionType(c.connection_type()));
                    }
                    Ok(Identity {
                        user: u.user.clone().or_else(|| u.nkey.clone()),
                        account: u.account.clone(),
                        permissions: u.permissions.clone(),
                        websocket: c.websocket,
                        ..Identity::default()
                    })
                };
                if self.tls_map {
                    let u = users
                        .iter()
                        .find(|u| {
                            u.user
                                .as_ref()
                                .is_some_and(|n| c.cert_identities.iter().any(|i| i == n))
                        })
                        .ok_or_else(|| {
                            AuthError::UnknownUser(
                                c.cert_identities.first().cloned().unwrap_or_default(),
                            )
                        })?;
                    return found(u);
                }
                if c.is_empty() {
                    if let Some(name) = &self.no_auth_user {
                        let u = users
                            .iter()
                            .find(|u| u.user.as_deref() == Some(name.as_str()))
                            .ok_or_else(|| AuthError::UnknownUser(name.clone()))?;
                        return found(u);
                    }
                    return Err(AuthError::Missing);
                }
                if let Some(nkey) = c.nkey {
                    let u = users
                        .iter()
                        .find(|u| u.nkey.as_deref() == Some(nkey))
                        .ok_or_else(|| AuthError::UnknownUser(nkey.to_owned()))?;
                    let sig = c.sig.ok_or(AuthError::BadSignature)?;
                    trust::verify_nonce(nkey, &[nkeys::Role::User], c.nonce, sig)?;
                    return found(u);
                }
                let name = c.user.ok_or(AuthError::Missing)?;
                let u = users
                    .iter()
                    .find(|u| u.user.as_deref() == Some(name))
                    .ok_or_else(|| AuthError::UnknownUser(name.to_owned()))?;
                match &u.password {
                    Some(pw) if secret_matches(c.pass.unwrap_or(""), pw) => found(u),
                    _ => Err(AuthError::BadPassword(name.to_owned())),
                }
            }
        }
    }
}

/// Whether `configured` is a bcrypt hash (compared by verification, not equality).
pub fn is_bcrypt(configured: &str) -> bool {
    ["$2a$", "$2b$", "$2x$", "$2y$"]
        .iter()
        .any(|p| configured.starts_with(p))
}

/// Compares a presented secret with a configured one: bcrypt hashes are verified, plain
/// secrets compared in constant time.
fn secret_matches(given: &str, configured: &str) -> bool {
    if is_bcrypt(configured) {
        return bcrypt::verify(given, configured).unwrap_or(false);
    }
    if configured.starts_with("$argon2id$") {
        use argon2::password_hash::{PasswordHash, PasswordVerifier};
        return PasswordHash::new(configured)
            .map(|h| {
                argon2::Argon2::default()
                    .verify_password(given.as_bytes(), &h)
                    .is_ok()
            })
            .unwrap_or(false);
    }
    bool::from(given.as_bytes().ct_eq(configured.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds<'a>(
        user: Option<&'a str>,
        pass: Option<&'a str>,
        token: Option<&'a str>,
    ) -> Credentials<'a> {
        Credentials {
            user,
            pass,
            token,
            ..Credentials::default()
        }
    }

    fn entry(user: &str, password: String, account: Option<&str>) -> UserEntry {
        UserEntry {
            user: Some(user.into()),
            password: Some(password),
            account: account.map(str::to_owned),
            ..UserEntry::default()
        }
    }

    #[test]
    fn token_must_match_exactly() {
        let a = Authenticator::token("s3cr3t".into());
        assert!(a.required());
        assert!(a.authenticate(&creds(None, None, Some("s3cr3t"))).is_ok());
        assert_eq!(
            a.authenticate(&creds(None, None, Some("s3cr3")))
                .unwrap_err(),
            AuthError::BadToken
        );
        assert_eq!(
            a.authenticate(&creds(None, None, None)).unwrap_err(),
            AuthError::Missing
        );
    }

    #[test]
    fn users_bind_to_their_account() {
        let a = Authenticator::users(vec![entry("alice", "pw".into(), Some("A"))], None);
        let id = a
            .authenticate(&creds(Some("alice"), Some("pw"), None))
            .unwrap();
        assert_eq!(id.account.as_deref(), Some("A"));
        assert!(a
            .authenticate(&creds(Some("alice"), Some("px"), None))
            .is_err());
        assert!(a
            .authenticate(&creds(Some("bob"), Some("pw"), None))
            .is_err());
        assert!(!a.needs_nonce());
    }

    #[test]
    fn bcrypt_hashes_are_verified() {
        let hash = bcrypt::hash("pw", 4).unwrap();
        let a = Authenticator::users(vec![entry("u", hash, None)], None);
        assert!(a.authenticate(&creds(Some("u"), Some("pw"), None)).is_ok());
        assert!(a
            .authenticate(&creds(Some("u"), Some("nope"), None))
            .is_err());
    }

    #[test]
    fn argon2id_phc_strings_are_verified() {
        use argon2::password_hash::{PasswordHasher, SaltString};
        let salt = SaltString::encode_b64(b"0123456789abcdef").unwrap();
        let params = argon2::Params::new(1024, 1, 1, None).unwrap();
        let a2 = argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
        let phc = a2.hash_password(b"pw", &salt).unwrap().to_string();
        let a = Authenticator::users(vec![entry("u", phc, None)], None);
        assert!(a.authenticate(&creds(Some("u"), Some("pw"), None)).is_ok());
        assert!(a.authenticate(&creds(Some("u"), Some("px"), None)).is_err());
    }

    #[test]
    fn no_auth_user_admits_credential_less_clients() {
        let a = Authenticator::users(vec![entry("bob", "pw".into(), None)], Some("bob".into()));
        assert!(!a.required());
        assert_eq!(
            a.authenticate(&creds(None, None, None))
                .unwrap()
                .user
                .as_deref(),
            Some("bob")
        );
    }

    #[test]
    fn nkey_users_need_a_nonce_signature() {
        let kp = nkeys::KeyPair::generate(nkeys::Role::User);
        let pk = kp.public_key();
        let a = Authenticator::users(
            vec![UserEntry {
                nkey: Some(pk.clone()),
                ..UserEntry::default()
            }],
            None,
        );
        assert!(a.needs_nonce());
        let sig = data_encoding::BASE64URL_NOPAD.encode(&kp.sign(b"abc"));
        let ok = Credentials {
            nkey: Some(&pk),
            sig: Some(&sig),
            nonce: "abc",
            ..Credentials::default()
        };
        assert!(a.authenticate(&ok).is_ok());
        let std_sig = data_encoding::BASE64.encode(&kp.sign(b"abc"));
        let std_ok = Credentials {
            nkey: Some(&pk),
            sig: Some(&std_sig),
            nonce: "abc",
            ..Credentials::default()
        };
        assert!(
            a.authenticate(&std_ok).is_ok(),
            "standard base64 accepted too"
        );
        let replay = Credentials {
            nkey: Some(&pk),
            sig: Some(&sig),
            nonce: "abd",
            ..Credentials::default()
        };
        assert_eq!(
            a.authenticate(&replay).unwrap_err(),
            AuthError::BadSignature
        );
    }
}
