//! `.creds` files: a user JWT and its nkey seed in armored blocks (security spec §1.3).
//!
//! Parsing tolerates the 5-dash/6-dash marker quirk, LF or CRLF, and old files with a bare seed
//! line; the seed comes back zeroizing. Writing produces the exact layout clients read.

use zeroize::Zeroizing;

/// Why a creds file could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredsError {
    /// No JWT block.
    #[error("no JWT block in credentials")]
    NoJwt,
    /// No seed block or bare seed line.
    #[error("no nkey seed in credentials")]
    NoSeed,
}

fn is_marker(line: &str) -> bool {
    let l = line.trim();
    l.starts_with("---") && l.ends_with("---") && l.len() > 6
}

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '=' | '-')
}

/// Parses a creds file into (JWT, seed).
///
/// # Errors
/// [`CredsError`] when either part is missing.
pub fn parse_creds(text: &str) -> Result<(String, Zeroizing<String>), CredsError> {
    let lines: Vec<&str> = text.lines().map(|l| l.trim_end_matches('\r')).collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i + 2 < lines.len() + 1 {
        let (Some(open), Some(body), Some(close)) =
            (lines.get(i), lines.get(i + 1), lines.get(i + 2))
        else {
            break;
        };
        if is_marker(open)
            && is_marker(close)
            && !body.trim().is_empty()
            && body.trim().chars().all(is_token_char)
        {
            blocks.push(body.trim().to_owned());
            i += 3;
        } else {
            i += 1;
        }
    }
    let mut it = blocks.into_iter();
    let jwt = it.next().ok_or(CredsError::NoJwt)?;
    let seed = match it.next() {
        Some(s) => s,
        None => lines
            .iter()
            .map(|l| l.trim())
            .find(|l| l.starts_with("SU") || l.starts_with("SA") || l.starts_with("SO"))
            .map(str::to_owned)
            .ok_or(CredsError::NoSeed)?,
    };
    Ok((jwt, Zeroizing::new(seed)))
}

/// Formats a user creds file.
pub fn format_creds(jwt: &str, seed: &str) -> Zeroizing<String> {
    Zeroizing::new(format!(
        "-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n\
************************* IMPORTANT *************************\n\
NKEY Seed printed below can be used to sign and prove identity.\n\
NKEYs are sensitive and should be treated as secrets.\n\n\
-----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n\n\
*************************************************************\n"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formatted_creds_parse_back() {
        let text = format_creds("eyJ.a.b", "SUAKX6T6YQHEPV3I");
        let (jwt, seed) = parse_creds(&text).unwrap();
        assert_eq!(jwt, "eyJ.a.b");
        assert_eq!(seed.as_str(), "SUAKX6T6YQHEPV3I");
        let crlf = text.replace('\n', "\r\n");
        assert_eq!(parse_creds(&crlf).unwrap().0, "eyJ.a.b");
    }

    #[test]
    fn missing_parts_are_errors() {
        assert_eq!(parse_creds("nothing"), Err(CredsError::NoJwt));
        assert_eq!(
            parse_creds("-----BEGIN X-----\nabc\n------END X------\n"),
            Err(CredsError::NoSeed)
        );
    }
}
