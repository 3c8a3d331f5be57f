//! The operator's keystore: where `sealctl` keeps the keys and JWTs it issues.
//!
//! ```text
//! <keys>/operator.jwt               operator JWT (self-signed)
//! <keys>/operator.seed              operator identity seed — store offline after `operator init`
//! <keys>/operator-signing.seed      operator signing key: signs accounts day to day
//! <keys>/accounts/<NAME>/account.jwt, account.seed, signing-<role>.seed
//! <keys>/accounts/<NAME>/users/<USER>.creds
//! ```
//!
//! Directories are created 0700 and files 0600; nothing is overwritten unless asked.
//! This is the operator's private directory, not the server's store.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use crate::auth::jwt::{self, AccountClaims, ClaimType, Claims, OperatorClaims};
use crate::auth::nkeys::{KeyPair, Role};

/// Where the keys live.
pub struct Keystore {
    root: PathBuf,
}

impl Keystore {
    /// A keystore rooted at `root` (not created yet).
    pub fn new(root: &Path) -> Self {
        Keystore {
            root: root.to_path_buf(),
        }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn mkdir(&self, p: &Path) -> anyhow::Result<()> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(p)
            .with_context(|| format!("create {}", p.display()))
    }

    /// Writes a private file (0600), refusing to overwrite unless `force`.
    pub fn write(&self, rel: &Path, content: &[u8], force: bool) -> anyhow::Result<PathBuf> {
        let path = self.root.join(rel);
        if let Some(dir) = path.parent() {
            self.mkdir(dir)?;
        }
        if path.exists() && !force {
            bail!("{} exists; use --force to replace it", path.display());
        }
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("write {}", path.display()))?;
        f.write_all(content)?;
        f.sync_all()?;
        Ok(path)
    }

    /// Reads a file of the keystore.
    pub fn read(&self, rel: &Path) -> anyhow::Result<String> {
        let path = self.root.join(rel);
        std::fs::read_to_string(&path).with_context(|| {
            format!(
                "read {} (run `sealctl operator init` first?)",
                path.display()
            )
        })
    }

    /// A seed of `role` from the keystore.
    pub fn seed(&self, rel: &Path, role: Role) -> anyhow::Result<KeyPair> {
        let text = zeroize::Zeroizing::new(self.read(rel)?);
        KeyPair::from_seed(text.trim(), &[role])
            .map_err(|e| anyhow::anyhow!("{}: {e}", rel.display()))
    }

    /// The operator signing key.
    pub fn operator_signer(&self) -> anyhow::Result<KeyPair> {
        self.seed(Path::new("operator-signing.seed"), Role::Operator)
    }

    /// The operator JWT.
    pub fn operator_jwt(&self) -> anyhow::Result<(String, Claims<OperatorClaims>)> {
        let token = self.read(Path::new("operator.jwt"))?.trim().to_owned();
        let claims = jwt::decode(&token, ClaimType::Operator)
            .map_err(|e| anyhow::anyhow!("operator.jwt: {e}"))?;
        Ok((token, claims))
    }

    /// Path of an account's directory.
    pub fn account_dir(name: &str) -> PathBuf {
        Path::new("accounts").join(name)
    }

    /// An account's claims and key.
    pub fn account(&self, name: &str) -> anyhow::Result<(Claims<AccountClaims>, KeyPair)> {
        let dir = Self::account_dir(name);
        let token = self.read(&dir.join("account.jwt"))?;
        let claims = jwt::decode(token.trim(), ClaimType::Account)
            .map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
        let key = self.seed(&dir.join("account.seed"), Role::Account)?;
        Ok((claims, key))
    }

    /// Re-signs and stores an account JWT with the operator signing key; returns the token.
    pub fn store_account(
        &self,
        name: &str,
        claims: &mut Claims<AccountClaims>,
    ) -> anyhow::Result<String> {
        let token = jwt::encode(claims, &self.operator_signer()?);
        self.write(
            &Self::account_dir(name).join("account.jwt"),
            format!("{token}\n").as_bytes(),
            true,
        )?;
        Ok(token)
    }

    /// Names of every account in the keystore.
    pub fn account_names(&self) -> anyhow::Result<Vec<String>> {
        let dir = self.root.join("accounts");
        let mut names = Vec::new();
        if let Ok(rd) = std::fs::read_dir(&dir) {
            for e in rd.flatten() {
                if e.path().join("account.jwt").exists() {
                    names.push(e.file_name().to_string_lossy().into_owned());
                }
            }
        }
        names.sort();
        Ok(names)
    }
}
