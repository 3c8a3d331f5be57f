//! Who may connect, and as whom.
//!
//! This module decides authentication from the credentials a client presents in CONNECT. It
//! knows nothing about sockets or the config file: the server builds an [`Authenticator`] from
//! plain [`UserEntry`] values and asks it one question per connection.
//!
//! Supported today: no auth, a single token, and users with passwords (plain text or bcrypt
//! `$2a$`/`$2b$`/`$2y$` hashes), each optionally bound to a named account, plus `no_auth_user`.
//! Comparisons of secrets are constant-time. The wire never says which check failed; the log
//! does.
#![deny(clippy::indexing_slicing)]

pub mod creds;
pub mod jwt;
pub mod nkeys;

use subtle::ConstantTimeEq;

/// Credentials from CONNECT.
#[derive(Debug, Default, Clone)]
pub struct Credentials<'a> {
    /// `user`.
    pub user: Option<&'a str>,
    /// `pass`.
    pub pass: Option<&'a str>,
    /// `auth_token`.
    pub token: Option<&'a str>,
}

impl Credentials<'_> {
    fn is_empty(&self) -> bool {
        self.user.is_none() && self.pass.is_none() && self.token.is_none()
    }
}

/// A configured user.
#[derive(Clone)]
pub struct UserEntry {
    /// User name.
    pub user: String,
    /// Plain password or a bcrypt hash.
    pub password: String,
    /// Account the user belongs to; `None` = the global account.
    pub account: Option<String>,
}

/// Who a client turned out to be.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// Authenticated user name, if any.
    pub user: Option<String>,
    /// Account to bind to; `None` = the global account.
    pub account: Option<String>,
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
    /// Unknown user.
    #[error("unknown user {0:?}")]
    UnknownUser(String),
    /// Wrong password.
    #[error("wrong password for user {0:?}")]
    BadPassword(String),
}

enum Mode {
    Open,
    Token(String),
    Users(Vec<UserEntry>),
}

/// Decides CONNECT credentials.
pub struct Authenticator {
    mode: Mode,
    no_auth_user: Option<String>,
}

impl Authenticator {
    /// No authentication: every client is admitted to the global account.
    pub fn open() -> Self {
        Authenticator {
            mode: Mode::Open,
            no_auth_user: None,
        }
    }

    /// A single token for all clients.
    pub fn token(token: String) -> Self {
        Authenticator {
            mode: Mode::Token(token),
            no_auth_user: None,
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
        }
    }

    /// Whether INFO must say `auth_required` (false with `no_auth_user`, as the reference).
    pub fn required(&self) -> bool {
        match &self.mode {
            Mode::Open => false,
            Mode::Token(_) => true,
            Mode::Users(_) => self.no_auth_user.is_none(),
        }
    }

    /// Whether any authentication is configured at all.
    pub fn enabled(&self) -> bool {
        !matches!(self.mode, Mode::Open)
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
            Mode::Users(users) => {
                if c.is_empty() {
                    if let Some(name) = &self.no_auth_user {
                        let u = users
                            .iter()
                            .find(|u| &u.user == name)
                            .ok_or_else(|| AuthError::UnknownUser(name.clone()))?;
                        return Ok(Identity {
                            user: Some(u.user.clone()),
                            account: u.account.clone(),
                        });
                    }
                    return Err(AuthError::Missing);
                }
                let name = c.user.ok_or(AuthError::Missing)?;
                let u = users
                    .iter()
                    .find(|u| u.user == name)
                    .ok_or_else(|| AuthError::UnknownUser(name.to_owned()))?;
                if secret_matches(c.pass.unwrap_or(""), &u.password) {
                    Ok(Identity {
                        user: Some(u.user.clone()),
                        account: u.account.clone(),
                    })
                } else {
                    Err(AuthError::BadPassword(name.to_owned()))
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
        Credentials { user, pass, token }
    }

    #[test]
    fn token_must_match_exactly() {
        let a = Authenticator::token("s3cr3t".into());
        assert!(a.required());
        assert!(a.authenticate(&creds(None, None, Some("s3cr3t"))).is_ok());
        assert_eq!(
            a.authenticate(&creds(None, None, Some("s3cr3"))),
            Err(AuthError::BadToken)
        );
        assert_eq!(
            a.authenticate(&creds(None, None, None)),
            Err(AuthError::Missing)
        );
    }

    #[test]
    fn users_bind_to_their_account() {
        let a = Authenticator::users(
            vec![UserEntry {
                user: "alice".into(),
                password: "pw".into(),
                account: Some("A".into()),
            }],
            None,
        );
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
    }

    #[test]
    fn bcrypt_hashes_are_verified() {
        let hash = bcrypt::hash("pw", 4).unwrap();
        let a = Authenticator::users(
            vec![UserEntry {
                user: "u".into(),
                password: hash,
                account: None,
            }],
            None,
        );
        assert!(a.authenticate(&creds(Some("u"), Some("pw"), None)).is_ok());
        assert!(a
            .authenticate(&creds(Some("u"), Some("nope"), None))
            .is_err());
    }

    #[test]
    fn no_auth_user_admits_credential_less_clients() {
        let a = Authenticator::users(
            vec![UserEntry {
                user: "bob".into(),
                password: "pw".into(),
                account: None,
            }],
            Some("bob".into()),
        );
        assert!(!a.required());
        assert_eq!(
            a.authenticate(&creds(None, None, None))
                .unwrap()
                .user
                .as_deref(),
            Some("bob")
        );
    }
}
