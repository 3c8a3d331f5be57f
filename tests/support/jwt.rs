//! Minting operator, account and user JWTs for tests (with our own issuer, which nats-server
//! accepts too).

use sealstream::auth::jwt::claims::{AccountLimits, UserPermissionsLimits};
use sealstream::auth::jwt::{self, AccountClaims, Claims, OperatorClaims, UserClaims};
use sealstream::auth::nkeys::{KeyPair, Role};

use super::Raw;

/// Unix seconds now.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs() as i64
}

/// An account key and its claims.
pub struct Tenant {
    pub key: KeyPair,
    pub claims: Claims<AccountClaims>,
}

/// An operator and its JWT.
pub struct World {
    pub operator: KeyPair,
    pub operator_jwt: String,
}

impl World {
    pub fn new() -> Self {
        let operator = KeyPair::generate(Role::Operator);
        let mut c = Claims {
            sub: operator.public_key(),
            name: "OP".into(),
            nats: OperatorClaims {
                kind: "operator".into(),
                version: 2,
                ..Default::default()
            },
            ..Default::default()
        };
        let operator_jwt = jwt::encode(&mut c, &operator);
        World {
            operator,
            operator_jwt,
        }
    }

    pub fn tenant(&self, name: &str, limits: AccountLimits) -> Tenant {
        let key = KeyPair::generate(Role::Account);
        let claims = Claims {
            sub: key.public_key(),
            name: name.into(),
            nats: AccountClaims {
                kind: "account".into(),
                version: 2,
                limits,
                ..Default::default()
            },
            ..Default::default()
        };
        Tenant { key, claims }
    }

    pub fn account_jwt(&self, t: &Tenant) -> String {
        jwt::encode(&mut t.claims.clone(), &self.operator)
    }

    /// A config trusting `tenants` and `sys` (the system account), with a full resolver in
    /// `./jwt` (what `$SYS.REQ.CLAIMS.UPDATE` needs) preloaded with all of them.
    pub fn full_resolver_config(&self, tenants: &[&Tenant], sys: &Tenant) -> String {
        let preload: String = tenants
            .iter()
            .chain(std::iter::once(&sys))
            .map(|t| format!("  {}: \"{}\"\n", t.key.public_key(), self.account_jwt(t)))
            .collect();
        format!(
            "operator: \"{}\"\nsystem_account: {}\nresolver: {{ type: full, dir: \"./jwt\" }}\nresolver_preload: {{\n{preload}}}\n",
            self.operator_jwt,
            sys.key.public_key()
        )
    }

    pub fn config(&self, tenants: &[&Tenant]) -> String {
        let preload: String = tenants
            .iter()
            .map(|t| format!("  {}: \"{}\"\n", t.key.public_key(), self.account_jwt(t)))
            .collect();
        format!(
            "operator: \"{}\"\nresolver: MEMORY\nresolver_preload: {{\n{preload}}}\n",
            self.operator_jwt
        )
    }
}

/// A user with unlimited subs/data/payload.
pub fn open_user() -> UserPermissionsLimits {
    UserPermissionsLimits {
        subs: -1,
        data: -1,
        payload: -1,
        ..Default::default()
    }
}

/// A user JWT signed by `signer`.
pub fn user_jwt(
    signer: &KeyPair,
    user: &KeyPair,
    name: &str,
    perms: UserPermissionsLimits,
    edit: impl FnOnce(&mut Claims<UserClaims>),
) -> String {
    let mut c = Claims {
        sub: user.public_key(),
        name: name.into(),
        nats: UserClaims {
            kind: "user".into(),
            version: 2,
            perms,
            ..Default::default()
        },
        ..Default::default()
    };
    edit(&mut c);
    jwt::encode(&mut c, signer)
}

/// CONNECT with a user JWT, signing the nonce from INFO, then PING.
pub fn connect_jwt(r: &mut Raw, token: &str, user: &KeyPair) {
    let nonce = r.info["nonce"]
        .as_str()
        .expect("INFO carries a nonce")
        .to_owned();
    let sig = data_encoding::BASE64URL_NOPAD.encode(&user.sign(nonce.as_bytes()));
    r.send(format!("CONNECT {{\"verbose\":false,\"protocol\":1,\"headers\":true,\"jwt\":\"{token}\",\"sig\":\"{sig}\"}}\r\nPING\r\n").as_bytes());
}
