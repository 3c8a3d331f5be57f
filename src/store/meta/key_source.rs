//! [`KeySource`]: where the master key comes from, resolved from the server configuration.
//!
//! Accepted settings (exactly one may be present, or none for [`KeySource::Auto`]):
//!
//! | setting                          | meaning                                  |
//! |----------------------------------|------------------------------------------|
//! | `jetstream { key: "..." }`       | passphrase (argon2id), as in nats-server |
//! | `jetstream { key_file: "..." }`  | 32-byte key file (raw or text form)      |
//! | `SEALSTREAM_STORE_KEY`           | passphrase from the environment          |
//! | `SEALSTREAM_STORE_KEY_FILE`      | key file path from the environment       |
//!
//! `cipher: chachapoly` (or `chacha`) from nats-server configs is accepted and means what
//! sealstream always does (XChaCha20-Poly1305); `cipher: aes` is refused rather than silently
//! ignored. Two settings at once are refused: guessing which one wins is how stores get opened
//! with the wrong key. The environment value is copied into a zeroizing string, but the
//! process environment keeps its own copy; prefer `key_file` in production.

use std::path::PathBuf;

use zeroize::Zeroizing;

use super::MetaError;

/// Environment variable carrying a passphrase.
pub const ENV_KEY: &str = "SEALSTREAM_STORE_KEY";
/// Environment variable carrying a key file path.
pub const ENV_KEY_FILE: &str = "SEALSTREAM_STORE_KEY_FILE";

/// Where the store's master key comes from. Deliberately not `Debug`.
pub enum KeySource {
    /// A passphrase, stretched with argon2id (parameters and salt live in `STORE`).
    Passphrase(Zeroizing<String>),
    /// A key file: 32 raw bytes or `sealstream-key-v1:<base64url>`, mode 0600.
    KeyFile(PathBuf),
    /// The key file `<store_dir>.key` next to (outside) `store_dir`, generated for a brand-new
    /// store and required for an existing one.
    Auto,
}

/// The key-related part of the `jetstream {}` configuration block.
#[derive(Default)]
pub struct KeyConfig {
    /// `cipher` (`chachapoly`/`chacha`; anything else is refused).
    pub cipher: Option<String>,
    /// `key` (and its aliases `ek`, `encryption_key`): a passphrase.
    pub key: Option<Zeroizing<String>>,
    /// `key_file`: path to a key file.
    pub key_file: Option<PathBuf>,
}

impl KeySource {
    /// A second handle on the same key source (for reopening the store). Deliberately not
    /// `Clone`: copies of a passphrase should be explicit.
    pub fn duplicate(&self) -> KeySource {
        match self {
            KeySource::Passphrase(p) => KeySource::Passphrase(p.clone()),
            KeySource::KeyFile(p) => KeySource::KeyFile(p.clone()),
            KeySource::Auto => KeySource::Auto,
        }
    }

    /// Resolves the key source from the configuration and an environment lookup.
    ///
    /// # Errors
    /// [`MetaError::KeyConfig`] for an unsupported cipher, an empty value, or more than one
    /// key setting.
    pub fn resolve(
        cfg: &KeyConfig,
        env: impl Fn(&str) -> Option<Zeroizing<String>>,
    ) -> Result<KeySource, MetaError> {
        if let Some(c) = &cfg.cipher {
            match c.to_ascii_lowercase().as_str() {
                "chachapoly" | "chacha" | "chacha20" | "chacha20poly1305" => {}
                other => {
                    return Err(MetaError::KeyConfig(format!(
                        "jetstream.cipher {other:?} is not supported: stores are always sealed \
                         with XChaCha20-Poly1305 (use chachapoly or remove the setting)"
                    )))
                }
            }
        }
        let mut found: Vec<(&'static str, KeySource)> = Vec::new();
        if let Some(k) = &cfg.key {
            found.push(("jetstream.key", KeySource::Passphrase(k.clone())));
        }
        if let Some(p) = &cfg.key_file {
            found.push(("jetstream.key_file", KeySource::KeyFile(p.clone())));
        }
        if let Some(k) = env(ENV_KEY) {
            found.push((ENV_KEY, KeySource::Passphrase(k)));
        }
        if let Some(p) = env(ENV_KEY_FILE) {
            found.push((ENV_KEY_FILE, KeySource::KeyFile(PathBuf::from(p.as_str()))));
        }
        if found.len() > 1 {
            let names: Vec<&str> = found.iter().map(|(n, _)| *n).collect();
            return Err(MetaError::KeyConfig(format!(
                "conflicting store key settings ({}); set exactly one",
                names.join(", ")
            )));
        }
        match found.pop() {
            None => Ok(KeySource::Auto),
            Some((name, KeySource::Passphrase(p))) if p.is_empty() => {
                Err(MetaError::KeyConfig(format!("{name} is empty")))
            }
            Some((name, KeySource::KeyFile(p))) if p.as_os_str().is_empty() => {
                Err(MetaError::KeyConfig(format!("{name} is empty")))
            }
            Some((_, source)) => Ok(source),
        }
    }

    /// [`KeySource::resolve`] with the process environment.
    ///
    /// # Errors
    /// As [`KeySource::resolve`].
    pub fn resolve_with_process_env(cfg: &KeyConfig) -> Result<KeySource, MetaError> {
        Self::resolve(cfg, |name| std::env::var(name).ok().map(Zeroizing::new))
    }

    /// A short description for logs (never the key itself).
    pub fn describe(&self) -> String {
        match self {
            KeySource::Passphrase(_) => "passphrase".into(),
            KeySource::KeyFile(p) => format!("key file {}", p.display()),
            KeySource::Auto => "automatic key file".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn no_env(_: &str) -> Option<Zeroizing<String>> {
        None
    }

    #[test]
    fn nats_server_style_key_is_a_passphrase() {
        let cfg = KeyConfig {
            cipher: Some("chachapoly".into()),
            key: Some(Zeroizing::new("s3cret".into())),
            key_file: None,
        };
        assert!(
            matches!(KeySource::resolve(&cfg, no_env), Ok(KeySource::Passphrase(p)) if p.as_str() == "s3cret")
        );
    }

    #[test]
    fn nothing_configured_means_auto_and_env_is_honoured() {
        assert!(matches!(
            KeySource::resolve(&KeyConfig::default(), no_env),
            Ok(KeySource::Auto)
        ));
        let env = |n: &str| (n == ENV_KEY_FILE).then(|| Zeroizing::new("/k".to_string()));
        assert!(
            matches!(KeySource::resolve(&KeyConfig::default(), env), Ok(KeySource::KeyFile(p)) if p == Path::new("/k"))
        );
    }

    #[test]
    fn two_settings_or_aes_or_empty_are_refused() {
        let cfg = KeyConfig {
            key: Some(Zeroizing::new("a".into())),
            ..Default::default()
        };
        let env = |n: &str| (n == ENV_KEY).then(|| Zeroizing::new("b".to_string()));
        assert!(matches!(
            KeySource::resolve(&cfg, env),
            Err(MetaError::KeyConfig(_))
        ));
        let aes = KeyConfig {
            cipher: Some("aes".into()),
            ..Default::default()
        };
        assert!(matches!(
            KeySource::resolve(&aes, no_env),
            Err(MetaError::KeyConfig(_))
        ));
        let empty = KeyConfig {
            key: Some(Zeroizing::new(String::new())),
            ..Default::default()
        };
        assert!(matches!(
            KeySource::resolve(&empty, no_env),
            Err(MetaError::KeyConfig(_))
        ));
    }
}
