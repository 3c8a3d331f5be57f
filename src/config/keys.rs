//! Shape checks for the public keys and JWTs a configuration may name.
//!
//! nats-server rejects a malformed user nkey, trusted operator key or preloaded account JWT
//! while *parsing* the file (so `-t` fails), and sealstream must too. These checks only look
//! at the encoding: an nkey public key is 56 base32 characters whose first letter names the
//! key type and whose last two decoded bytes are a CRC-16 of the rest; a JWT is three
//! base64url parts, the first two of them JSON objects. Signatures and claims are verified by
//! the auth module, which this module must not depend on.

/// The type letter that starts a public nkey.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// `O...`: an operator.
    Operator,
    /// `A...`: an account.
    Account,
    /// `U...`: a user.
    User,
    /// `N...`: a server.
    Server,
}

impl KeyKind {
    fn letter(self) -> char {
        match self {
            KeyKind::Operator => 'O',
            KeyKind::Account => 'A',
            KeyKind::User => 'U',
            KeyKind::Server => 'N',
        }
    }
}

fn base32_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 5 / 8);
    let mut buffer: u32 = 0;
    let mut bits = 0u32;
    for c in text.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'2'..=b'7' => c - b'2' + 26,
            _ => return None,
        };
        buffer = (buffer << 5) | u32::from(v);
        bits += 5;
        if bits >= 8 {
            bits -= 8;
            out.push(((buffer >> bits) & 0xff) as u8);
        }
    }
    Some(out)
}

/// CRC-16/XMODEM (polynomial 0x1021, initial value 0), as nkeys use.
fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// True when `key` is a well-formed public nkey of type `kind`.
pub fn is_public_key(key: &str, kind: KeyKind) -> bool {
    if key.len() != 56 || !key.starts_with(kind.letter()) {
        return false;
    }
    let Some(raw) = base32_decode(key) else {
        return false;
    };
    if raw.len() != 35 {
        return false;
    }
    let Some((body, crc)) = raw.split_at_checked(33) else {
        return false;
    };
    let stored = crc
        .first()
        .zip(crc.get(1))
        .map(|(lo, hi)| u16::from(*lo) | (u16::from(*hi) << 8));
    stored == Some(crc16(body))
}

fn base64url_decode(text: &str) -> Option<Vec<u8>> {
    let text = text.trim_end_matches('=');
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let mut buffer: u32 = 0;
    let mut bits = 0u32;
    for c in text.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' | b'+' => 62,
            b'_' | b'/' => 63,
            _ => return None,
        };
        buffer = (buffer << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(((buffer >> bits) & 0xff) as u8);
        }
    }
    Some(out)
}

fn is_json_object(part: &str) -> bool {
    base64url_decode(part)
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .is_some_and(|text| {
            let t = text.trim();
            t.starts_with('{') && t.ends_with('}')
        })
}

/// True when `text` has the shape of a JWT: `header.claims.signature`, base64url, with JSON
/// objects for header and claims. Does not verify anything.
pub fn looks_like_jwt(text: &str) -> bool {
    let mut parts = text.trim().split('.');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(header), Some(claims), Some(signature), None) => {
            is_json_object(header)
                && is_json_object(claims)
                && base64url_decode(signature).is_some_and(|s| !s.is_empty())
        }
        _ => false,
    }
}

/// Finds a JWT in the text of an operator or account file: either the whole (trimmed) text or
/// a line of it (files written by tools may wrap the token in `-----BEGIN ...-----` lines).
pub fn find_jwt(text: &str) -> Option<&str> {
    let trimmed = text.trim();
    if looks_like_jwt(trimmed) {
        return Some(trimmed);
    }
    text.lines().map(str::trim).find(|l| looks_like_jwt(l))
}

#[cfg(test)]
mod tests {
    use super::*;

    const USER: &str = "UDQADTGJ76UFLDUXDPCF3C3HZ5AD34NVJLD42YMLHWZKM3GQTRDDC7HL";

    #[test]
    fn a_known_user_key_passes_and_a_damaged_one_fails() {
        assert!(is_public_key(USER, KeyKind::User));
        assert!(!is_public_key(USER, KeyKind::Account));
        let damaged = USER.replace("DQAD", "DQAE");
        assert!(!is_public_key(&damaged, KeyKind::User));
        assert!(!is_public_key("UDQA...", KeyKind::User));
        assert!(!is_public_key("ODB", KeyKind::Operator));
    }

    #[test]
    fn jwt_shape_needs_three_parts_with_json_header_and_claims() {
        // {"typ":"JWT","alg":"ed25519-nkey"} . {"sub":"x"} . "sig"
        let jwt = "eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.eyJzdWIiOiJ4In0.c2ln";
        assert!(looks_like_jwt(jwt));
        assert!(!looks_like_jwt(
            "eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.eyJ..."
        ));
        assert!(!looks_like_jwt("a.b.c"));
        assert_eq!(
            find_jwt(&format!("-----BEGIN X-----\n{jwt}\n------END X------\n")),
            Some(jwt)
        );
    }
}
