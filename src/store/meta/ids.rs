//! Opaque 128-bit ids: [`StreamId`], [`ConsumerId`], [`AccountId`].
//!
//! Ids are random (OS CSPRNG), never derived from names, and never all-zero (the all-zero and
//! all-`0xff` values are reserved owner ids for the catalog key, see [`super::keyring`]). On disk
//! they appear as 32 lowercase hex characters in paths and as 16 raw bytes inside seals.

use std::fmt;

macro_rules! opaque_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub [u8; 16]);

        impl $name {
            /// A fresh random id (never one of the reserved values).
            pub fn random() -> Self {
                $name(random_unreserved_id())
            }

            /// The 16 raw bytes.
            pub fn as_bytes(&self) -> &[u8; 16] {
                &self.0
            }

            /// The 32-character lowercase hex form used in paths.
            pub fn to_hex(&self) -> String {
                data_encoding::HEXLOWER.encode(&self.0)
            }

            /// Parses the 32-character lowercase hex form (as found in a path).
            pub fn from_hex(s: &str) -> Option<Self> {
                parse_hex_id(s).map($name)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.to_hex())
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self.to_hex())
            }
        }
    };
}

opaque_id!(
    /// A stream's id: names its directory `s/<id hex>/` and owns its data keys.
    StreamId
);
opaque_id!(
    /// A consumer's id: names its state file `s/<stream>/c/<id hex>.st`.
    ConsumerId
);
opaque_id!(
    /// An account's id: groups its streams' keys in the keyring (never visible on disk).
    AccountId
);

/// A random id that is neither all-zero nor all-`0xff` (reserved owner ids).
pub(crate) fn random_unreserved_id() -> [u8; 16] {
    loop {
        let id = crate::crypto::random_id();
        if id != [0u8; 16] && id != [0xffu8; 16] {
            return id;
        }
    }
}

/// Parses exactly 32 lowercase hex characters.
pub(crate) fn parse_hex_id(s: &str) -> Option<[u8; 16]> {
    if s.len() != 32
        || !s
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    let v = data_encoding::HEXLOWER.decode(s.as_bytes()).ok()?;
    v.as_slice().try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_refuses_other_spellings() {
        let id = StreamId::random();
        assert_eq!(StreamId::from_hex(&id.to_hex()), Some(id));
        assert_eq!(StreamId::from_hex(&id.to_hex().to_uppercase()), None);
        assert_eq!(StreamId::from_hex("abc"), None);
        assert_ne!(ConsumerId::random().0, [0; 16]);
    }
}
