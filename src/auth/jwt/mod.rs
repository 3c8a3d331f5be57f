//! NATS JWTs: decode, verify and issue (security spec §2).
//!
//! A token is `base64url(header) . base64url(claims) . base64url(signature)` with header
//! `{"typ":"JWT","alg":"ed25519-nkey"}` and an Ed25519 signature by the key in `iss` over the
//! ASCII of `header.claims`. The `jsonwebtoken` crate cannot parse the `ed25519-nkey` algorithm
//! name, so this is our own small module over [`super::nkeys`].
//!
//! [`decode`] checks, in order: size cap, three segments, header, claim type and version,
//! signature by `iss`, and the issuer's role for the claim type. Trust (is this issuer one we
//! trust?) is decided by the caller.
//!
//! **Version 1 tokens** (the format before NATS 2.2, still in the clients' test suites and in
//! older deployments) are read as nats-server reads them: header `alg` `ed25519` (or
//! `ed25519-nkey`), the claim type at the top level instead of in `nats`, and the signature
//! over the claims segment alone. They are rewritten into the version-2 shape before the
//! typed parse ([`upgrade_v1`]): the type and the moved fields (`tags`, `issuer_account`) go
//! into `nats`, and a user's absent `subs`/`data`/`payload` mean no limit, as they did in
//! version 1. A version-1 user with the deprecated `max` limit is refused, as nats-server does.

pub mod claims;

use data_encoding::{BASE32_NOPAD, BASE64URL_NOPAD};
use serde::de::DeserializeOwned;
use serde::Serialize;
use sha2::{Digest, Sha512_256};

use super::nkeys::{self, KeyPair, Role};
pub use claims::{AccountClaims, Claims, OperatorClaims, UserClaims};

/// Largest user JWT accepted.
pub const MAX_USER_JWT: usize = 64 * 1024;
/// Largest operator or account JWT accepted.
pub const MAX_ACCOUNT_JWT: usize = 1024 * 1024;

const HEADER: &str = r#"{"typ":"JWT","alg":"ed25519-nkey"}"#;

/// The claim types we read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimType {
    /// `operator`.
    Operator,
    /// `account`.
    Account,
    /// `user`.
    User,
}

impl ClaimType {
    fn name(self) -> &'static str {
        match self {
            ClaimType::Operator => "operator",
            ClaimType::Account => "account",
            ClaimType::User => "user",
        }
    }

    fn issuer_roles(self) -> &'static [Role] {
        match self {
            ClaimType::Operator | ClaimType::Account => &[Role::Operator],
            ClaimType::User => &[Role::Account],
        }
    }

    fn subject_roles(self) -> &'static [Role] {
        match self {
            ClaimType::Operator => &[Role::Operator],
            ClaimType::Account => &[Role::Account],
            ClaimType::User => &[Role::User],
        }
    }

    fn cap(self) -> usize {
        match self {
            ClaimType::User => MAX_USER_JWT,
            _ => MAX_ACCOUNT_JWT,
        }
    }
}

/// Why a token was refused (logged; the wire only says `Authorization Violation`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwtError {
    /// Bigger than the cap for its type.
    #[error("token larger than {0} bytes")]
    TooLarge(usize),
    /// Not three base64url segments of JSON.
    #[error("malformed token: {0}")]
    Malformed(&'static str),
    /// Header is not `typ` JWT with `alg` `ed25519-nkey` (or version 1's `ed25519`).
    #[error("unsupported token header (need typ JWT, alg ed25519-nkey or ed25519)")]
    Header,
    /// A different claim type than expected.
    #[error("token is a {found:?} token, expected {expected}")]
    WrongType {
        /// Type found.
        found: String,
        /// Type expected.
        expected: &'static str,
    },
    /// `nats.version` above 2.
    #[error("claim version {0} is newer than supported")]
    Version(u64),
    /// The signature does not verify with `iss`, or `iss`/`sub` has the wrong role.
    #[error("signature or key check failed: {0}")]
    Signature(String),
}

fn json_of(segment: &str, what: &'static str) -> Result<serde_json::Value, JwtError> {
    let bytes = BASE64URL_NOPAD
        .decode(segment.trim_end_matches('=').as_bytes())
        .map_err(|_| JwtError::Malformed(what))?;
    serde_json::from_slice(&bytes).map_err(|_| JwtError::Malformed(what))
}

/// Decodes and verifies a token of `kind` (signature by its own `iss`; trust is the caller's).
///
/// # Errors
/// [`JwtError`] naming the failed check.
pub fn decode<T: DeserializeOwned>(token: &str, kind: ClaimType) -> Result<Claims<T>, JwtError> {
    let token = token.trim();
    if token.len() > kind.cap() {
        return Err(JwtError::TooLarge(kind.cap()));
    }
    let mut parts = token.split('.');
    let (Some(h), Some(c), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(JwtError::Malformed("need three segments"));
    };
    let header = json_of(h, "header")?;
    let typ_ok = header
        .get("typ")
        .and_then(|v| v.as_str())
        .is_some_and(|t| t.eq_ignore_ascii_case("jwt"));
    let alg_ok = header.get("alg").and_then(|v| v.as_str()).is_some_and(|a| {
        a.eq_ignore_ascii_case("ed25519-nkey") || a.eq_ignore_ascii_case("ed25519")
    });
    if !typ_ok || !alg_ok {
        return Err(JwtError::Header);
    }
    let mut value = json_of(c, "claims")?;
    // A claim type at the top level marks a version-1 token.
    let v1 = value.get("type").is_some_and(serde_json::Value::is_string);
    if v1 {
        upgrade_v1(&mut value)?;
    }
    let nats = value
        .get("nats")
        .ok_or(JwtError::Malformed("no nats claims"))?;
    let found = nats.get("type").and_then(|v| v.as_str()).unwrap_or("");
    if found != kind.name() {
        return Err(JwtError::WrongType {
            found: found.to_owned(),
            expected: kind.name(),
        });
    }
    let version = nats.get("version").and_then(|v| v.as_u64()).unwrap_or(0);
    if version > 2 {
        return Err(JwtError::Version(version));
    }
    let claims: Claims<T> =
        serde_json::from_value(value).map_err(|_| JwtError::Malformed("claims shape"))?;
    let sig = BASE64URL_NOPAD
        .decode(s.trim_end_matches('=').as_bytes())
        .map_err(|_| JwtError::Malformed("signature encoding"))?;
    // Version 1 signed the claims segment; version 2 signs `header.claims`.
    let signing_input = if v1 {
        c
    } else {
        token
            .get(..h.len() + 1 + c.len())
            .ok_or(JwtError::Malformed("segments"))?
    };
    nkeys::verify(
        &claims.iss,
        kind.issuer_roles(),
        signing_input.as_bytes(),
        &sig,
    )
    .map_err(|e| JwtError::Signature(format!("iss: {e}")))?;
    nkeys::decode_public(&claims.sub, kind.subject_roles())
        .map_err(|e| JwtError::Signature(format!("sub: {e}")))?;
    Ok(claims)
}

/// Rewrites version-1 claims into the version-2 shape (see the module docs).
///
/// # Errors
/// [`JwtError::Malformed`] for a `nats` that is not an object, or a user's deprecated `max`.
fn upgrade_v1(value: &mut serde_json::Value) -> Result<(), JwtError> {
    let top = value
        .as_object_mut()
        .ok_or(JwtError::Malformed("claims shape"))?;
    let kind = top.remove("type").unwrap_or_default();
    let moved: Vec<(String, serde_json::Value)> = ["tags", "issuer_account"]
        .iter()
        .filter_map(|k| top.remove(*k).map(|v| ((*k).to_owned(), v)))
        .collect();
    let nats = top
        .entry("nats")
        .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()))
        .as_object_mut()
        .ok_or(JwtError::Malformed("nats claims"))?;
    if kind == "user" {
        if nats
            .get("max")
            .and_then(serde_json::Value::as_i64)
            .is_some_and(|m| m != -1)
        {
            return Err(JwtError::Malformed(
                "version-1 user limit max is not supported",
            ));
        }
        nats.remove("max");
        for limit in ["subs", "data", "payload"] {
            nats.entry(limit).or_insert((-1).into());
        }
    }
    for (k, v) in moved {
        nats.entry(k).or_insert(v);
    }
    nats.insert("type".into(), kind);
    nats.insert("version".into(), 1.into());
    Ok(())
}

/// Signs `claims` with `signer`: sets `iss`, `iat` (when 0) and `jti` (SHA-512/256 of the claims
/// JSON with an empty `jti`, base32), and returns the token.
///
/// # Panics
/// Never in practice: serialising these claim types cannot fail.
pub fn encode<T: Serialize>(claims: &mut Claims<T>, signer: &KeyPair) -> String {
    claims.iss = signer.public_key();
    if claims.iat == 0 {
        claims.iat = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
    }
    claims.jti.clear();
    let body = serde_json::to_vec(claims).expect("claims serialise");
    claims.jti = BASE32_NOPAD.encode(&Sha512_256::digest(&body));
    let body = serde_json::to_vec(claims).expect("claims serialise");
    let signing_input = format!(
        "{}.{}",
        BASE64URL_NOPAD.encode(HEADER.as_bytes()),
        BASE64URL_NOPAD.encode(&body)
    );
    let sig = signer.sign(signing_input.as_bytes());
    format!("{signing_input}.{}", BASE64URL_NOPAD.encode(&sig))
}

/// Fuzz entry point (JWTs arrive in CONNECT from unauthenticated peers): decodes `data` as a
/// token of every claim type, which must never panic; then signs `data` (taken as claims,
/// with a known issuer and subject put in) and checks that the token verifies and that
/// flipping any one byte of it — header, claims or signature — makes verification fail.
#[doc(hidden)]
pub fn fuzz_decode(data: &[u8]) {
    use std::sync::OnceLock;
    static KEYS: OnceLock<(KeyPair, KeyPair)> = OnceLock::new();
    let text = String::from_utf8_lossy(data);
    for kind in [ClaimType::Operator, ClaimType::Account, ClaimType::User] {
        let _ = decode::<serde_json::Value>(&text, kind);
    }
    let (issuer, user) = KEYS.get_or_init(|| {
        (
            KeyPair::generate(Role::Account),
            KeyPair::generate(Role::User),
        )
    });
    let mut claims = match serde_json::from_slice::<serde_json::Value>(data) {
        Ok(serde_json::Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    claims.insert("iss".into(), issuer.public_key().into());
    claims.insert("sub".into(), user.public_key().into());
    let mut nats = match claims.remove("nats") {
        Some(serde_json::Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    nats.insert("type".into(), "user".into());
    nats.insert("version".into(), 2.into());
    claims.insert("nats".into(), nats.into());
    let header = BASE64URL_NOPAD.encode(br#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
    let body = BASE64URL_NOPAD.encode(serde_json::Value::Object(claims).to_string().as_bytes());
    let input = format!("{header}.{body}");
    let sig = BASE64URL_NOPAD.encode(&issuer.sign(input.as_bytes()));
    let token = format!("{input}.{sig}");
    if decode::<UserClaims>(&token, ClaimType::User).is_err() {
        return; // claims of a shape a user JWT cannot have (or over the size cap)
    }
    let at = data.first().map_or(0, |b| usize::from(*b)) * 7919 % token.len();
    let mut bytes = token.clone().into_bytes();
    if let Some(b) = bytes.get_mut(at) {
        *b ^= 0x01;
    }
    let Ok(mutated) = String::from_utf8(bytes) else {
        return;
    };
    assert!(
        decode::<UserClaims>(&mutated, ClaimType::User).is_err(),
        "a token with byte {at} changed still verifies"
    );
}

#[cfg(test)]
#[expect(clippy::indexing_slicing, reason = "tests index known-good values")]
mod tests {
    use super::*;

    #[test]
    fn fuzz_entry_holds_for_sample_inputs() {
        for input in [
            &b""[..],
            b"garbage",
            br#"{"nats":{"pub":{"allow":["a.>"]},"subs":-1}}"#,
            br#"{"exp":1,"nats":{"type":"account"}}"#,
            b"eyJ0eXAiOiJKV1QifQ.e30.AAAA",
        ] {
            fuzz_decode(input);
        }
    }

    /// A version-1 token as the v1 libraries wrote it: lowercase `typ`, `alg` `ed25519`, the
    /// type and tags at the top level, the signature over the claims segment only.
    fn v1_token(issuer: &KeyPair, claims: serde_json::Value, sign_header_too: bool) -> String {
        let h = BASE64URL_NOPAD.encode(br#"{"typ":"jwt","alg":"ed25519"}"#);
        let c = BASE64URL_NOPAD.encode(claims.to_string().as_bytes());
        let input = if sign_header_too {
            format!("{h}.{c}")
        } else {
            c.clone()
        };
        let sig = BASE64URL_NOPAD.encode(&issuer.sign(input.as_bytes()));
        format!("{h}.{c}.{sig}")
    }

    #[test]
    fn version_1_tokens_read_as_nats_server_reads_them() {
        let operator = KeyPair::generate(Role::Operator);
        let account = KeyPair::generate(Role::Account);
        let user = KeyPair::generate(Role::User);
        let user_json = |nats: serde_json::Value| {
            serde_json::json!({
                "jti": "X", "iat": 1_553_840_944, "iss": account.public_key(),
                "name": "foo-user", "sub": user.public_key(), "type": "user",
                "tags": ["t"], "nats": nats,
            })
        };
        let token = v1_token(
            &account,
            user_json(serde_json::json!({"pub":{},"sub":{"allow":["a.>"]}})),
            false,
        );
        let u = decode::<UserClaims>(&token, ClaimType::User).unwrap();
        assert_eq!((u.nats.kind.as_str(), u.nats.version), ("user", 1));
        assert_eq!(u.nats.tags, ["t"]);
        assert_eq!(u.nats.perms.subscribe.allow, ["a.>"]);
        // Version 1 had no user limits: absent means none, not zero.
        assert_eq!(
            (u.nats.perms.subs, u.nats.perms.data, u.nats.perms.payload),
            (-1, -1, -1)
        );
        // A signature over `header.claims` is a version-2 signature: refused for v1 claims.
        let wrong = v1_token(&account, user_json(serde_json::json!({})), true);
        assert!(matches!(
            decode::<UserClaims>(&wrong, ClaimType::User),
            Err(JwtError::Signature(_))
        ));
        // The deprecated `max` limit is refused rather than ignored.
        let max = v1_token(&account, user_json(serde_json::json!({"max": 5})), false);
        assert!(decode::<UserClaims>(&max, ClaimType::User).is_err());
        // Another issuer's signature, or a changed claim, fails as for version 2.
        let other = v1_token(
            &KeyPair::generate(Role::Account),
            user_json(serde_json::json!({})),
            false,
        );
        let mut parts: Vec<&str> = other.split('.').collect();
        let good: Vec<&str> = token.split('.').collect();
        parts[2] = good[2];
        assert!(decode::<UserClaims>(&parts.join("."), ClaimType::User).is_err());
        // A version-1 operator has no `nats` object at all.
        let op = serde_json::json!({
            "jti": "Y", "iat": 1, "iss": operator.public_key(), "name": "test_operator",
            "sub": operator.public_key(), "type": "operator",
        });
        let o =
            decode::<OperatorClaims>(&v1_token(&operator, op, false), ClaimType::Operator).unwrap();
        assert_eq!((o.nats.kind.as_str(), o.nats.version), ("operator", 1));
        // A version-1 account keeps its limits.
        let acc = serde_json::json!({
            "jti": "Z", "iat": 1, "iss": operator.public_key(), "name": "foo",
            "sub": account.public_key(), "type": "account",
            "nats": {"limits": {"subs": 10, "conn": -1, "wildcards": true}},
        });
        let a =
            decode::<AccountClaims>(&v1_token(&operator, acc, false), ClaimType::Account).unwrap();
        assert_eq!(a.nats.limits.subs, 10);
        // A user token presented as an account token is still the wrong type.
        assert!(matches!(
            decode::<AccountClaims>(&token, ClaimType::Account),
            Err(JwtError::WrongType { .. })
        ));
    }

    fn user_claims(sub: &str) -> Claims<UserClaims> {
        Claims {
            sub: sub.to_owned(),
            name: "alice".into(),
            nats: UserClaims {
                kind: "user".into(),
                version: 2,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn issued_tokens_decode_and_verify() {
        let account = KeyPair::generate(Role::Account);
        let user = KeyPair::generate(Role::User);
        let mut c = user_claims(&user.public_key());
        c.nats.perms.publish.allow = vec!["orders.>".into()];
        c.nats.perms.subs = -1;
        let token = encode(&mut c, &account);
        let back: Claims<UserClaims> = decode(&token, ClaimType::User).unwrap();
        assert_eq!(back.iss, account.public_key());
        assert_eq!(back.nats.perms.publish.allow, ["orders.>"]);
        assert_eq!(back.nats.perms.subs, -1);
        assert!(!back.jti.is_empty());
    }

    #[test]
    fn tampered_wrong_type_and_wrong_issuer_role_are_refused() {
        let account = KeyPair::generate(Role::Account);
        let user = KeyPair::generate(Role::User);
        let token = encode(&mut user_claims(&user.public_key()), &account);
        let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
        let mut claims = BASE64URL_NOPAD.decode(parts[1].as_bytes()).unwrap();
        let pos = claims.windows(5).position(|w| w == b"alice").unwrap();
        claims[pos] = b'A';
        parts[1] = BASE64URL_NOPAD.encode(&claims);
        assert!(matches!(
            decode::<UserClaims>(&parts.join("."), ClaimType::User),
            Err(JwtError::Signature(_))
        ));
        assert!(matches!(
            decode::<AccountClaims>(&token, ClaimType::Account),
            Err(JwtError::WrongType { .. })
        ));
        let operator = KeyPair::generate(Role::Operator);
        let by_operator = encode(&mut user_claims(&user.public_key()), &operator);
        assert!(matches!(
            decode::<UserClaims>(&by_operator, ClaimType::User),
            Err(JwtError::Signature(_))
        ));
        assert!(decode::<UserClaims>("a.b", ClaimType::User).is_err());
        assert!(matches!(
            decode::<UserClaims>(&"x".repeat(MAX_USER_JWT + 1), ClaimType::User),
            Err(JwtError::TooLarge(_))
        ));
    }

    #[test]
    fn missing_user_limits_mean_none_and_account_limits_mean_unlimited() {
        let c: UserClaims = serde_json::from_str(r#"{"type":"user","version":2}"#).unwrap();
        assert_eq!((c.perms.subs, c.perms.data, c.perms.payload), (0, 0, 0));
        let a: AccountClaims = serde_json::from_str(r#"{"type":"account","version":2}"#).unwrap();
        assert_eq!(a.limits.conn, -1);
        assert_eq!(a.limits.disk_storage, 0);
    }

    #[test]
    fn scoped_and_plain_signing_keys_both_parse() {
        let a: AccountClaims = serde_json::from_str(
            r#"{"type":"account","version":2,"signing_keys":["AKEY",{"kind":"user_scope","key":"AK2","role":"svc","template":{"pub":{"allow":["a.>"]},"subs":-1}}]}"#,
        )
        .unwrap();
        assert_eq!(a.signing_keys[0].key(), "AKEY");
        match &a.signing_keys[1] {
            claims::SigningKey::Scoped(s) => assert_eq!(s.template.publish.allow, ["a.>"]),
            other => panic!("{other:?}"),
        }
    }
}
