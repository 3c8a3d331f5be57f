//! Tenant onboarding: `operator init`, `account add|revoke`, `signing-key add`, `user
//! add|revoke`, `creds`, `describe` and `server config` (security spec §3.3).
//!
//! The operator identity signs only its own JWT; accounts are signed by the operator signing
//! key (`strict_signing_key_usage`), users by the account key or a role's scoped key. Accounts
//! refuse bearer tokens unless asked. Everything lands in the [`Keystore`] with private modes.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context};
use serde_json::json;

use crate::auth::creds::{format_creds, parse_creds};
use crate::auth::jwt::claims::{ScopedSigningKey, SigningKey, UserPermissionsLimits};
use crate::auth::jwt::{self, AccountClaims, ClaimType, Claims, OperatorClaims, UserClaims};
use crate::auth::nkeys::{KeyPair, Role};
use crate::ctl::keystore::Keystore;
use crate::ctl::policy;

/// Name of the system account created by `operator init`.
pub const SYSTEM_ACCOUNT: &str = "SYS";

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// `sealctl operator init`.
///
/// # Errors
/// Keystore I/O, or an existing operator without `--force`.
pub fn operator_init(ks: &Keystore, name: &str, force: bool) -> anyhow::Result<()> {
    if ks.root().join("operator.jwt").exists() && !force {
        bail!(
            "an operator already exists in {}; use --force to replace it",
            ks.root().display()
        );
    }
    let identity = KeyPair::generate(Role::Operator);
    let signer = KeyPair::generate(Role::Operator);
    let sys = KeyPair::generate(Role::Account);
    let mut op = Claims {
        sub: identity.public_key(),
        name: name.to_owned(),
        nats: OperatorClaims {
            kind: "operator".into(),
            version: 2,
            signing_keys: vec![signer.public_key()],
            system_account: Some(sys.public_key()),
            strict_signing_key_usage: true,
            ..Default::default()
        },
        ..Default::default()
    };
    let token = jwt::encode(&mut op, &identity);
    ks.write(
        Path::new("operator.jwt"),
        format!("{token}\n").as_bytes(),
        true,
    )?;
    ks.write(
        Path::new("operator.seed"),
        format!("{}\n", identity.seed().as_str()).as_bytes(),
        true,
    )?;
    ks.write(
        Path::new("operator-signing.seed"),
        format!("{}\n", signer.seed().as_str()).as_bytes(),
        true,
    )?;
    let dir = Keystore::account_dir(SYSTEM_ACCOUNT);
    ks.write(
        &dir.join("account.seed"),
        format!("{}\n", sys.seed().as_str()).as_bytes(),
        true,
    )?;
    let sys_signer = KeyPair::generate(Role::Account);
    ks.write(
        &dir.join("signing.seed"),
        format!("{}\n", sys_signer.seed().as_str()).as_bytes(),
        true,
    )?;
    let mut acc = Claims {
        sub: sys.public_key(),
        name: SYSTEM_ACCOUNT.into(),
        nats: AccountClaims {
            kind: "account".into(),
            version: 2,
            signing_keys: vec![SigningKey::Key(sys_signer.public_key())],
            ..Default::default()
        },
        ..Default::default()
    };
    ks.store_account(SYSTEM_ACCOUNT, &mut acc)?;
    // A system-account user for `account push`: may only talk to the claims API.
    let sys_user = KeyPair::generate(Role::User);
    let mut perms = UserPermissionsLimits {
        subs: 10,
        data: -1,
        payload: -1,
        ..Default::default()
    };
    perms.publish.allow = vec![
        "$SYS.REQ.CLAIMS.UPDATE".into(),
        "$SYS.REQ.ACCOUNT.*.CLAIMS.>".into(),
        "$SYS.REQ.SERVER.PING.>".into(),
        "$SYS.REQ.SERVER.PING".into(),
    ];
    perms.subscribe.allow = vec!["_INBOX.>".into()];
    let mut uc = Claims {
        sub: sys_user.public_key(),
        name: "sys".into(),
        nats: UserClaims {
            kind: "user".into(),
            version: 2,
            perms,
            issuer_account: Some(sys.public_key()),
            ..Default::default()
        },
        ..Default::default()
    };
    let token = jwt::encode(&mut uc, &sys_signer);
    ks.write(
        &dir.join("users").join("sys.creds"),
        format_creds(&token, &sys_user.seed()).as_bytes(),
        true,
    )?;
    println!("operator {name}: {}", identity.public_key());
    println!("  signing key:    {}", signer.public_key());
    println!("  system account: {}", sys.public_key());
    println!(
        "The identity seed is in {}: move it offline; daily signing uses the signing key.",
        ks.root().join("operator.seed").display()
    );
    Ok(())
}

/// `sealctl account add`.
///
/// # Errors
/// Missing operator, an existing account, a bad policy.
pub fn account_add(
    ks: &Keystore,
    name: &str,
    limits: Option<&Path>,
    allow_bearer: bool,
) -> anyhow::Result<()> {
    if name == SYSTEM_ACCOUNT {
        bail!("{SYSTEM_ACCOUNT} is the system account; tenants are never placed in it");
    }
    let dir = Keystore::account_dir(name);
    if ks.root().join(&dir).join("account.jwt").exists() {
        bail!("account {name} already exists");
    }
    let mut limits = match limits {
        Some(p) => policy::load_account(p)?,
        None => Default::default(),
    };
    if !allow_bearer {
        limits.disallow_bearer = true;
    }
    let key = KeyPair::generate(Role::Account);
    ks.write(
        &dir.join("account.seed"),
        format!("{}\n", key.seed().as_str()).as_bytes(),
        false,
    )?;
    // Users are signed by this unscoped signing key, never by the identity key: the operator is
    // strict (as nats-server enforces it), and the identity seed can then be vaulted.
    let signer = KeyPair::generate(Role::Account);
    ks.write(
        &dir.join("signing.seed"),
        format!("{}\n", signer.seed().as_str()).as_bytes(),
        false,
    )?;
    let mut claims = Claims {
        sub: key.public_key(),
        name: name.to_owned(),
        nats: AccountClaims {
            kind: "account".into(),
            version: 2,
            limits,
            signing_keys: vec![SigningKey::Key(signer.public_key())],
            ..Default::default()
        },
        ..Default::default()
    };
    ks.store_account(name, &mut claims)?;
    println!("account {name}: {}", key.public_key());
    Ok(())
}

/// `sealctl account revoke`: every user issued until now is revoked.
///
/// # Errors
/// Missing account.
pub fn account_revoke(ks: &Keystore, name: &str) -> anyhow::Result<()> {
    let (mut claims, _) = ks.account(name)?;
    claims.nats.revocations.insert("*".into(), now());
    ks.store_account(name, &mut claims)?;
    println!(
        "account {name}: all users issued until now are revoked; push the account to apply it"
    );
    Ok(())
}

/// `sealctl signing-key add`.
///
/// # Errors
/// Missing account, a bad policy, an existing role.
pub fn signing_key_add(
    ks: &Keystore,
    account: &str,
    role: &str,
    policy_path: &Path,
) -> anyhow::Result<()> {
    let (mut claims, _) = ks.account(account)?;
    if claims
        .nats
        .signing_keys
        .iter()
        .any(|k| matches!(k, SigningKey::Scoped(s) if s.role == role))
    {
        bail!("account {account} already has a signing key for role {role}");
    }
    let template = policy::load_user(policy_path)?;
    let key = KeyPair::generate(Role::Account);
    let seed_path = Keystore::account_dir(account).join(format!("signing-{role}.seed"));
    ks.write(
        &seed_path,
        format!("{}\n", key.seed().as_str()).as_bytes(),
        false,
    )?;
    claims
        .nats
        .signing_keys
        .push(SigningKey::Scoped(Box::new(ScopedSigningKey {
            kind: "user_scope".into(),
            key: key.public_key(),
            role: role.to_owned(),
            template,
            description: None,
        })));
    ks.store_account(account, &mut claims)?;
    println!(
        "account {account}: signing key for role {role}: {}",
        key.public_key()
    );
    Ok(())
}

/// What `user add` was asked for.
pub struct UserSpec<'a> {
    /// Account name.
    pub account: &'a str,
    /// User name.
    pub name: &'a str,
    /// Policy file (signed by the account key).
    pub policy: Option<&'a Path>,
    /// Role (signed by the role's scoped key).
    pub role: Option<&'a str>,
    /// Validity (`30d`).
    pub expiry: Option<&'a str>,
    /// Bearer token.
    pub bearer: bool,
    /// Destination of the creds file.
    pub out: Option<&'a Path>,
    /// Replace existing creds.
    pub force: bool,
}

/// `sealctl user add`: returns the path of the written .creds file.
///
/// # Errors
/// Missing account or role, bad policy or expiry, existing creds without `--force`.
pub fn user_add(ks: &Keystore, spec: &UserSpec<'_>) -> anyhow::Result<PathBuf> {
    let (account, account_key) = ks.account(spec.account)?;
    let user = KeyPair::generate(Role::User);
    let (signer, mut perms, issuer_account) = match spec.role {
        Some(role) => {
            let seed = Keystore::account_dir(spec.account).join(format!("signing-{role}.seed"));
            let signer = ks
                .seed(&seed, Role::Account)
                .with_context(|| format!("no signing key for role {role}"))?;
            (
                signer,
                UserPermissionsLimits::default(),
                Some(account.sub.clone()),
            )
        }
        None => {
            let perms = match spec.policy {
                Some(p) => policy::load_user(p)?,
                None => UserPermissionsLimits {
                    subs: -1,
                    data: -1,
                    payload: -1,
                    ..Default::default()
                },
            };
            // The operator is strict: users are signed by the account's signing key, not its
            // identity key (whose seed can then be vaulted).
            let seed = Keystore::account_dir(spec.account).join("signing.seed");
            let signer = ks
                .seed(&seed, Role::Account)
                .context("no account signing key")?;
            drop(account_key);
            (signer, perms, Some(account.sub.clone()))
        }
    };
    if spec.bearer {
        if spec.role.is_some() {
            bail!("--bearer cannot be combined with --role (scoped users carry no claims of their own)");
        }
        perms.bearer_token = true;
    }
    let exp = match spec.expiry {
        Some(e) => {
            let d = humantime::parse_duration(e).map_err(|err| anyhow!("--expiry {e:?}: {err}"))?;
            now() + d.as_secs() as i64
        }
        None => 0,
    };
    let mut claims = Claims {
        sub: user.public_key(),
        name: spec.name.to_owned(),
        exp,
        nats: UserClaims {
            kind: "user".into(),
            version: 2,
            perms,
            issuer_account,
            ..Default::default()
        },
        ..Default::default()
    };
    let token = jwt::encode(&mut claims, &signer);
    let creds = format_creds(&token, &user.seed());
    let path = match spec.out {
        Some(out) => {
            let ks_out = Keystore::new(out.parent().unwrap_or(Path::new(".")));
            let file = out
                .file_name()
                .ok_or_else(|| anyhow!("--out needs a file name"))?;
            ks_out.write(Path::new(file), creds.as_bytes(), spec.force)?
        }
        None => {
            let rel = Keystore::account_dir(spec.account)
                .join("users")
                .join(format!("{}.creds", spec.name));
            ks.write(&rel, creds.as_bytes(), spec.force)?
        }
    };
    println!(
        "user {} in {}: {} -> {}",
        spec.name,
        spec.account,
        user.public_key(),
        path.display()
    );
    Ok(path)
}

/// `sealctl user revoke`.
///
/// # Errors
/// Missing account or user.
pub fn user_revoke(ks: &Keystore, account: &str, user: &str) -> anyhow::Result<()> {
    let (mut claims, _) = ks.account(account)?;
    let key = if user.starts_with('U') && user.len() == 56 {
        user.to_owned()
    } else {
        let rel = Keystore::account_dir(account)
            .join("users")
            .join(format!("{user}.creds"));
        let (token, _) = parse_creds(&ks.read(&rel)?).map_err(|e| anyhow!("{e}"))?;
        let c: Claims<UserClaims> =
            jwt::decode(&token, ClaimType::User).map_err(|e| anyhow!("{e}"))?;
        c.sub
    };
    claims.nats.revocations.insert(key.clone(), now());
    ks.store_account(account, &mut claims)?;
    println!(
        "revoked {key} in {account}; push the account (or update resolver_preload) to apply it"
    );
    Ok(())
}

/// `sealctl creds`: writes an existing user's creds file elsewhere.
///
/// # Errors
/// Missing user, existing destination without `--force`.
pub fn creds(
    ks: &Keystore,
    account: &str,
    user: &str,
    out: &Path,
    force: bool,
) -> anyhow::Result<()> {
    let rel = Keystore::account_dir(account)
        .join("users")
        .join(format!("{user}.creds"));
    let text = zeroize::Zeroizing::new(ks.read(&rel)?);
    let (token, seed) = parse_creds(&text).map_err(|e| anyhow!("{e}"))?;
    let ks_out = Keystore::new(out.parent().unwrap_or(Path::new(".")));
    let file = out
        .file_name()
        .ok_or_else(|| anyhow!("--out needs a file name"))?;
    let path = ks_out.write(
        Path::new(file),
        format_creds(&token, &seed).as_bytes(),
        force,
    )?;
    println!("{}", path.display());
    Ok(())
}

/// `sealctl describe`: decodes a JWT of any type and verifies its signature.
///
/// # Errors
/// Not a JWT.
pub fn describe(token_or_file: &str) -> anyhow::Result<()> {
    let text = if Path::new(token_or_file).exists() {
        std::fs::read_to_string(token_or_file)?
    } else {
        token_or_file.to_owned()
    };
    let token = match parse_creds(&text) {
        Ok((t, _)) => t,
        Err(_) => text
            .lines()
            .map(str::trim)
            .find(|l| l.starts_with("eyJ"))
            .unwrap_or(text.trim())
            .to_owned(),
    };
    let (kind, out) = if let Ok(c) = jwt::decode::<OperatorClaims>(&token, ClaimType::Operator) {
        ("operator", serde_json::to_value(c)?)
    } else if let Ok(c) = jwt::decode::<AccountClaims>(&token, ClaimType::Account) {
        ("account", serde_json::to_value(c)?)
    } else {
        match jwt::decode::<UserClaims>(&token, ClaimType::User) {
            Ok(c) => ("user", serde_json::to_value(c)?),
            Err(e) => bail!("not a valid NATS JWT: {e}"),
        }
    };
    println!(
        "{}",
        serde_json::to_string_pretty(
            &json!({ "type": kind, "signature": "valid", "claims": out })
        )?
    );
    Ok(())
}

/// `sealctl server config`: the operator and resolver block for the server config (memory
/// resolver, or a directory resolver that accepts pushes; every account is preloaded).
///
/// # Errors
/// Missing operator.
pub fn server_config(ks: &Keystore, resolver_dir: Option<&Path>) -> anyhow::Result<String> {
    let (op_token, op) = ks.operator_jwt()?;
    let mut out = String::from("# Generated by sealctl server config\n");
    out.push_str(&format!("operator: \"{op_token}\"\n"));
    if let Some(sys) = &op.nats.system_account {
        out.push_str(&format!("system_account: {sys}\n"));
    }
    match resolver_dir {
        Some(dir) => out.push_str(&format!(
            "resolver: {{ type: full, dir: \"{}\" }}\nresolver_preload: {{\n",
            dir.display()
        )),
        None => out.push_str("resolver: MEMORY\nresolver_preload: {\n"),
    }
    for name in ks.account_names()? {
        let token = ks.read(&Keystore::account_dir(&name).join("account.jwt"))?;
        let c: Claims<AccountClaims> =
            jwt::decode(token.trim(), ClaimType::Account).map_err(|e| anyhow!("{name}: {e}"))?;
        out.push_str(&format!("  # {name}\n  {}: \"{}\"\n", c.sub, token.trim()));
    }
    out.push_str("}\n");
    Ok(out)
}

/// `sealctl account push`: sends the account JWT to a running server and prints its answer.
///
/// # Errors
/// Connection or authentication failure, or the server refusing the JWT.
pub async fn account_push(
    ks: &Keystore,
    name: &str,
    server: &str,
    creds: Option<&Path>,
) -> anyhow::Result<()> {
    let dir = Keystore::account_dir(name);
    let token = ks.read(&dir.join("account.jwt"))?;
    let claims: Claims<AccountClaims> =
        jwt::decode(token.trim(), ClaimType::Account).map_err(|e| anyhow!("{e}"))?;
    let creds = match creds {
        Some(c) => c.to_path_buf(),
        None => ks
            .root()
            .join(Keystore::account_dir(SYSTEM_ACCOUNT))
            .join("users")
            .join("sys.creds"),
    };
    let auth = crate::ctl::client::Auth {
        creds: Some(creds),
        ..Default::default()
    };
    let mut client =
        crate::ctl::client::Client::connect(&super::bench::addr_of(server), &auth).await?;
    let subject = format!("$SYS.REQ.ACCOUNT.{}.CLAIMS.UPDATE", claims.sub);
    let reply = client
        .request(
            &subject,
            token.trim().as_bytes(),
            std::time::Duration::from_secs(5),
        )
        .await?;
    let v: serde_json::Value = serde_json::from_slice(&reply).context("reply is not JSON")?;
    if let Some(err) = v.get("error") {
        bail!(
            "server refused the account JWT: {}",
            err.get("description")
                .and_then(|d| d.as_str())
                .unwrap_or("unknown error")
        );
    }
    println!(
        "account {name} pushed: {}",
        v["data"]["message"].as_str().unwrap_or("ok")
    );
    Ok(())
}
