//! Checks that run after mapping, in two strengths, mirroring nats-server:
//!
//! - [`ServerOptions::check`] is what `-t` adds to parsing: anything recorded as a check
//!   warning (a bare number of seconds for a duration, `accounts` inside `authorization`)
//!   fails it. nats-server's `-t` does not run the start-up checks below.
//! - [`ServerOptions::validate`] is what a normal start adds, after command-line flags are
//!   applied: relations between options (`max_payload` ≤ `max_pending`, an HTTPS port needs
//!   a TLS certificate, `no_auth_user` must name a configured user).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::error::{ConfigError, Location};
use super::options::ServerOptions;

impl ServerOptions {
    /// What `-t` checks beyond parsing: fails with the first check warning.
    ///
    /// # Errors
    /// The first entry of [`ServerOptions::check_warnings`].
    pub fn check(&self) -> Result<(), ConfigError> {
        match self.check_warnings.first() {
            Some(warning) => Err(warning.clone()),
            None => Ok(()),
        }
    }

    /// Start-up checks across options (after flags are applied).
    ///
    /// # Errors
    /// A [`ConfigError`] located at the configuration file as a whole (or `<command line>`
    /// when there is none), naming the options involved.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let at = || {
            let file: Arc<Path> = Arc::from(
                self.config_file
                    .clone()
                    .unwrap_or_else(|| PathBuf::from("<command line>")),
            );
            Location::whole_file(file)
        };
        if self.max_payload > self.max_pending {
            return Err(ConfigError::invalid(
                at(),
                format!(
                    "max_payload ({}) cannot be higher than max_pending ({})",
                    self.max_payload, self.max_pending
                ),
            ));
        }
        if !self.cluster.routes.is_empty() && !self.cluster.enabled() {
            return Err(ConfigError::invalid(
                at(),
                "solicited routes require cluster capabilities, e.g. --cluster",
            ));
        }
        if self.cluster.enabled() && self.jetstream.enabled {
            if self.server_name.is_none() {
                return Err(ConfigError::invalid(
                    at(),
                    "jetstream cluster requires `server_name` to be set",
                ));
            }
            if self.cluster.name.is_none() {
                return Err(ConfigError::invalid(
                    at(),
                    "jetstream cluster requires `cluster.name` to be set",
                ));
            }
        }
        if self.https_port.is_some() && self.tls.as_ref().is_none_or(|t| t.cert_file.is_none()) {
            return Err(ConfigError::invalid(
                at(),
                "https_port requires a tls block with cert_file and key_file",
            ));
        }
        if let Some(name) = &self.no_auth_user {
            let known = self
                .authorization
                .users
                .iter()
                .chain(self.accounts.iter().flat_map(|a| a.users.iter()))
                .any(|u| u.user.as_deref() == Some(name) || u.nkey.as_deref() == Some(name));
            if !known {
                return Err(ConfigError::invalid(
                    at(),
                    format!(
                        "no_auth_user: \"{name}\" not present as user or nkey in authorization block or account configuration"
                    ),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::options::parse_str;
    use std::path::Path;

    #[test]
    fn check_fails_on_a_bare_seconds_duration_but_parsing_succeeds() {
        let o = parse_str("port: 1\nping_interval: 60", Path::new("w.conf")).unwrap();
        assert_eq!(o.ping_interval.as_secs(), 60);
        assert_eq!(
            o.check().unwrap_err().to_string(),
            "w.conf:2:1: invalid use of field \"ping_interval\": ping_interval should be converted to a duration"
        );
    }

    #[test]
    fn validate_rejects_a_payload_above_max_pending() {
        let o = parse_str("max_payload: 70MB", Path::new("p.conf")).unwrap();
        assert!(o.check().is_ok());
        assert_eq!(
            o.validate().unwrap_err().to_string(),
            "<command line>: max_payload (73400320) cannot be higher than max_pending (67108864)"
        );
    }

    #[test]
    fn validate_requires_no_auth_user_to_exist() {
        let o = parse_str(
            "accounts { A { users [{user: a, password: b}] } }\nno_auth_user: zz",
            Path::new("a.conf"),
        )
        .unwrap();
        assert!(o
            .validate()
            .unwrap_err()
            .to_string()
            .contains("no_auth_user"));
        let o = parse_str(
            "accounts { A { users [{user: a, password: b}] } }\nno_auth_user: a",
            Path::new("a.conf"),
        )
        .unwrap();
        assert!(o.validate().is_ok());
    }

    #[test]
    fn validate_requires_tls_for_https() {
        let o = parse_str("https: 8443", Path::new("h.conf")).unwrap();
        assert!(o.validate().is_err());
    }
}
