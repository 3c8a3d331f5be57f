//! `sealctl operator`, `account`, `user`, `signing-key` and `creds`: the nsc side.

use clap::{Args, Subcommand};

/// Where the operator keeps keys.
#[derive(Debug, Clone, Args)]
pub struct KeysArg {
    /// Keystore directory (created 0700).
    #[arg(long = "keys", env = "SEALCTL_KEYS", default_value = "sealstream-keys")]
    pub keys: std::path::PathBuf,
}

/// `sealctl operator ...`.
#[derive(Debug, Subcommand)]
pub enum OperatorCmd {
    /// Create the operator identity, its signing key and the system account.
    Init {
        /// Operator name.
        #[arg(long, default_value = "OP")]
        name: String,
        /// Replace an existing operator.
        #[arg(long)]
        force: bool,
        /// Keystore.
        #[command(flatten)]
        keys: KeysArg,
    },
}

/// `sealctl account ...`.
#[derive(Debug, Subcommand)]
pub enum AccountCmd {
    /// Create a tenant account signed by the operator signing key.
    Add {
        /// Account name.
        name: String,
        /// Account limits policy (policies/*.conf).
        #[arg(long)]
        limits: Option<std::path::PathBuf>,
        /// Allow bearer user tokens (off by default).
        #[arg(long)]
        allow_bearer: bool,
        /// Keystore.
        #[command(flatten)]
        keys: KeysArg,
    },
    /// Send the account JWT to a running server (`$SYS.REQ.ACCOUNT.<id>.CLAIMS.UPDATE`).
    Push {
        /// Account name.
        name: String,
        /// A system-account user's creds (default: the keystore's SYS user).
        #[arg(long)]
        creds: Option<std::path::PathBuf>,
        /// Keystore.
        #[command(flatten)]
        keys: KeysArg,
    },
    /// Crypto-erase the account's JetStream data on the running servers (from a system
    /// account user: `$JS.API.ACCOUNT.PURGE.<account>`): its keys are destroyed, then its
    /// files. With `--attest`, a signed statement of which keys each server destroyed.
    Purge {
        /// Account name.
        name: String,
        /// Write a signed attestation of the erase to this file (needs `--sign-with`).
        #[arg(long, requires = "sign_with")]
        attest: Option<std::path::PathBuf>,
        /// The nkey seed file that signs it (an audit key, or the operator's).
        #[arg(long)]
        sign_with: Option<std::path::PathBuf>,
        /// Connection options.
        #[command(flatten)]
        conn: super::ConnArgs,
    },
    /// Revoke every user of the account issued until now.
    Revoke {
        /// Account name.
        name: String,
        /// Keystore.
        #[command(flatten)]
        keys: KeysArg,
    },
}

/// `sealctl user ...`.
#[derive(Debug, Subcommand)]
pub enum UserCmd {
    /// Issue a user and write its .creds file.
    Add {
        /// Account name.
        account: String,
        /// User name.
        name: String,
        /// User permissions policy (policies/*.conf), signed by the account key.
        #[arg(long, conflicts_with = "role")]
        policy: Option<std::path::PathBuf>,
        /// Sign with this role's scoped signing key (permissions come from its template).
        #[arg(long)]
        role: Option<String>,
        /// Validity, e.g. `30d`, `12h`.
        #[arg(long)]
        expiry: Option<String>,
        /// A bearer token (no nonce signature; accepted over TLS only).
        #[arg(long)]
        bearer: bool,
        /// Where to write the .creds file (default: in the keystore).
        #[arg(long)]
        out: Option<std::path::PathBuf>,
        /// Replace an existing .creds file.
        #[arg(long)]
        force: bool,
        /// Keystore.
        #[command(flatten)]
        keys: KeysArg,
    },
    /// Revoke a user (by name in the keystore, or by public key).
    Revoke {
        /// Account name.
        account: String,
        /// User name or `U...` public key.
        user: String,
        /// Keystore.
        #[command(flatten)]
        keys: KeysArg,
    },
}

/// `sealctl signing-key ...`.
#[derive(Debug, Subcommand)]
pub enum SigningKeyCmd {
    /// Add a scoped signing key for a role; users it signs get the policy's permissions.
    Add {
        /// Account name.
        account: String,
        /// Role name.
        #[arg(long)]
        role: String,
        /// User permissions policy for the role.
        #[arg(long)]
        policy: std::path::PathBuf,
        /// Keystore.
        #[command(flatten)]
        keys: KeysArg,
    },
}

/// `sealctl creds`.
#[derive(Debug, Clone, Args)]
pub struct CredsArgs {
    /// Account name.
    pub account: String,
    /// User name.
    pub user: String,
    /// Destination file.
    #[arg(long)]
    pub out: std::path::PathBuf,
    /// Replace an existing file.
    #[arg(long)]
    pub force: bool,
    /// Keystore.
    #[command(flatten)]
    pub keys: KeysArg,
}
