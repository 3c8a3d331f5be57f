//! The key hierarchy (see `docs/key-hierarchy.md`):
//!
//! ```text
//! passphrase --argon2id(salt, m, t, p)--> MK      or      key file (32 random bytes) --> MK
//! MK  --HKDF-SHA256(salt = store_uuid, "sealstream kek v1")-->      KEK
//! KEK --HKDF("sealstream kek-id v1")-->                             kek_id (16 B, wrong-key check)
//! KEK --HKDF("sealstream header-mac v1")-->                         header MAC key
//! KEK --XChaCha20-Poly1305 wrap (AAD binds owner and version)-->    DEK[owner, version]
//! DEK --HKDF(salt = owner id, "sealstream seg v1" || segment id)--> segment key
//! ```
//!
//! Every derived key is a [`Key32`] (zeroized on drop). Key files hold exactly 32 raw bytes or
//! the text `sealstream-key-v1:<base64url>`, and are refused when group or others may read them.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use hkdf::Hkdf;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use super::seal::{SealKey, OVERHEAD};
use super::secret::{Key32, Secret};

/// Prefix of the text form of a key file.
pub const KEY_FILE_PREFIX: &str = "sealstream-key-v1:";
/// Length of a wrapped data key: nonce, 32 key bytes, tag.
pub const WRAPPED_LEN: usize = 32 + OVERHEAD;

/// Why a key could not be made, loaded or opened.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The argon2id parameters are below the floor or malformed.
    #[error("key derivation parameters too weak or invalid: {0}")]
    WeakParams(String),
    /// The key file could not be read or written.
    #[error("key file {path}: {source}")]
    KeyFileIo {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The key file is readable by group or others.
    #[error("key file {0} is readable by group or others (chmod 600 it)")]
    KeyFilePermissions(PathBuf),
    /// The key file holds neither 32 raw bytes nor the text form.
    #[error(
        "key file {0} is not a sealstream key (32 raw bytes or sealstream-key-v1:<base64url>)"
    )]
    KeyFileFormat(PathBuf),
    /// A wrapped key did not open: wrong KEK, wrong owner or version, or edited bytes.
    #[error("wrapped key did not authenticate")]
    Unwrap,
}

/// Argon2id parameters, stored in the store header next to the salt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KdfParams {
    /// Memory in KiB.
    pub m_kib: u32,
    /// Passes.
    pub t: u32,
    /// Lanes.
    pub p: u32,
    /// Random salt.
    pub salt: [u8; 16],
}

impl KdfParams {
    /// Lowest memory accepted when opening a store (64 MiB).
    pub const MIN_M_KIB: u32 = 64 * 1024;
    /// Lowest pass count accepted.
    pub const MIN_T: u32 = 3;

    /// The defaults for a new store (m = 256 MiB, t = 3, p = 4) with a random salt.
    pub fn new_random() -> Self {
        KdfParams {
            m_kib: 256 * 1024,
            t: 3,
            p: 4,
            salt: super::random_id(),
        }
    }

    /// Refuses parameters below the floor.
    ///
    /// # Errors
    /// [`KeyError::WeakParams`].
    pub fn validate(&self) -> Result<(), KeyError> {
        if self.m_kib < Self::MIN_M_KIB || self.t < Self::MIN_T || self.p == 0 {
            return Err(KeyError::WeakParams(format!(
                "m={} KiB t={} p={} (need m >= {} KiB, t >= {}, p >= 1)",
                self.m_kib,
                self.t,
                self.p,
                Self::MIN_M_KIB,
                Self::MIN_T
            )));
        }
        Ok(())
    }
}

/// The master key: from a passphrase (argon2id) or a key file.
pub struct MasterKey(Key32);

impl MasterKey {
    /// Stretches a passphrase with argon2id.
    ///
    /// # Errors
    /// [`KeyError::WeakParams`] when the parameters are below the floor.
    pub fn from_passphrase(passphrase: &[u8], params: &KdfParams) -> Result<Self, KeyError> {
        params.validate()?;
        Self::from_passphrase_unchecked(passphrase, params)
    }

    /// Like [`MasterKey::from_passphrase`] without the parameter floor: for tests and benches
    /// that cannot afford 256 MiB per derivation. Never used for a real store.
    #[doc(hidden)]
    pub fn from_passphrase_unchecked(
        passphrase: &[u8],
        params: &KdfParams,
    ) -> Result<Self, KeyError> {
        let p = argon2::Params::new(params.m_kib, params.t, params.p, Some(32))
            .map_err(|e| KeyError::WeakParams(e.to_string()))?;
        let a = argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, p);
        let mut err = None;
        let key = Secret::from_fn(|out| {
            if let Err(e) = a.hash_password_into(passphrase, &params.salt, out) {
                err = Some(KeyError::WeakParams(e.to_string()));
            }
        });
        match err {
            Some(e) => Err(e),
            None => Ok(MasterKey(key)),
        }
    }

    /// A master key from raw bytes (a key file's content).
    pub fn from_bytes(bytes: Key32) -> Self {
        MasterKey(bytes)
    }

    /// Loads a key file: refuses group/other-readable files and anything but 32 raw bytes or
    /// the `sealstream-key-v1:` text form.
    ///
    /// # Errors
    /// [`KeyError`] naming the file and the problem.
    pub fn load_key_file(path: &Path) -> Result<Self, KeyError> {
        let io = |e| KeyError::KeyFileIo {
            path: path.to_owned(),
            source: e,
        };
        let meta = std::fs::metadata(path).map_err(io)?;
        if meta.permissions().mode() & 0o077 != 0 {
            return Err(KeyError::KeyFilePermissions(path.to_owned()));
        }
        let raw = zeroize::Zeroizing::new(std::fs::read(path).map_err(io)?);
        if raw.len() == 32 {
            return Ok(MasterKey(Secret::from_fn(|k| k.copy_from_slice(&raw))));
        }
        let text =
            std::str::from_utf8(&raw).map_err(|_| KeyError::KeyFileFormat(path.to_owned()))?;
        let b64 = text
            .trim()
            .strip_prefix(KEY_FILE_PREFIX)
            .ok_or_else(|| KeyError::KeyFileFormat(path.to_owned()))?;
        let bytes = zeroize::Zeroizing::new(
            data_encoding::BASE64URL_NOPAD
                .decode(b64.as_bytes())
                .map_err(|_| KeyError::KeyFileFormat(path.to_owned()))?,
        );
        if bytes.len() != 32 {
            return Err(KeyError::KeyFileFormat(path.to_owned()));
        }
        Ok(MasterKey(Secret::from_fn(|k| k.copy_from_slice(&bytes))))
    }

    /// Creates a new key file (mode 0600, never overwriting) holding a random key in text form,
    /// fsyncs it and its directory, and returns the key.
    ///
    /// # Errors
    /// [`KeyError::KeyFileIo`], including when the file already exists.
    pub fn generate_key_file(path: &Path) -> Result<Self, KeyError> {
        let io = |e| KeyError::KeyFileIo {
            path: path.to_owned(),
            source: e,
        };
        let key = Secret::random();
        let text = zeroize::Zeroizing::new(format!(
            "{KEY_FILE_PREFIX}{}\n",
            data_encoding::BASE64URL_NOPAD.encode(key.expose())
        ));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(io)?;
        f.write_all(text.as_bytes()).map_err(io)?;
        f.sync_all().map_err(io)?;
        if let Some(dir) = path.parent() {
            let dir = if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            };
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(io)?;
        }
        Ok(MasterKey(key))
    }
}

fn hkdf(ikm: &[u8], salt: &[u8], info: &[&[u8]]) -> Key32 {
    let hk = Hkdf::<Sha256>::new(Some(salt), ikm);
    let info: Vec<u8> = info.concat();
    Secret::from_fn(|out| {
        hk.expand(&info, out)
            .expect("32 bytes is a valid HKDF-SHA256 output length");
    })
}

/// The key-encryption key of one store.
pub struct Kek {
    wrap: SealKey,
    id: [u8; 16],
    mac_key: Key32,
    store_uuid: [u8; 16],
}

/// A wrapped data key as stored in a keyring.
pub type WrappedKey = [u8; WRAPPED_LEN];

impl Kek {
    /// Derives the KEK of the store `store_uuid` from the master key.
    pub fn derive(mk: &MasterKey, store_uuid: &[u8; 16]) -> Self {
        let kek = hkdf(mk.0.expose(), store_uuid, &[b"sealstream kek v1"]);
        let id_full = hkdf(kek.expose(), store_uuid, &[b"sealstream kek-id v1"]);
        let mut id = [0u8; 16];
        id.copy_from_slice(id_full.expose().get(..16).unwrap_or(&[0u8; 16]));
        let mac_key = hkdf(kek.expose(), store_uuid, &[b"sealstream header-mac v1"]);
        Kek {
            wrap: SealKey::new(kek),
            id,
            mac_key,
            store_uuid: *store_uuid,
        }
    }

    /// The public key id stored in the header (a wrong key gives a different id).
    pub fn id(&self) -> [u8; 16] {
        self.id
    }

    /// Whether `id` is this KEK's id (constant time).
    pub fn id_matches(&self, id: &[u8; 16]) -> bool {
        bool::from(self.id.ct_eq(id))
    }

    /// HMAC-SHA256 under the KEK-derived header key.
    pub fn mac(&self, data: &[u8]) -> [u8; 32] {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(self.mac_key.expose())
            .expect("HMAC takes any key length");
        m.update(data);
        m.finalize().into_bytes().into()
    }

    /// Checks a MAC made by [`Kek::mac`] (constant time).
    pub fn verify_mac(&self, data: &[u8], mac: &[u8; 32]) -> bool {
        bool::from(self.mac(data).ct_eq(mac))
    }

    fn wrap_aad(&self, owner: &[u8; 16], version: u32) -> Vec<u8> {
        let mut aad = b"sealstream dek v1".to_vec();
        aad.extend_from_slice(&self.store_uuid);
        aad.extend_from_slice(owner);
        aad.extend_from_slice(&version.to_le_bytes());
        aad.extend_from_slice(&self.id);
        aad
    }

    /// Wraps a data key for `owner` (a stream, account or the catalog) at `version`.
    pub fn wrap(&self, dek: &DataKey, owner: &[u8; 16], version: u32) -> WrappedKey {
        let sealed = self
            .wrap
            .seal(&self.wrap_aad(owner, version), dek.0.expose());
        let mut out = [0u8; WRAPPED_LEN];
        out.copy_from_slice(&sealed);
        out
    }

    /// Unwraps a data key; fails unless owner, version, store and KEK all match.
    ///
    /// # Errors
    /// [`KeyError::Unwrap`].
    pub fn unwrap(
        &self,
        wrapped: &WrappedKey,
        owner: &[u8; 16],
        version: u32,
    ) -> Result<DataKey, KeyError> {
        let plain = zeroize::Zeroizing::new(
            self.wrap
                .open(&self.wrap_aad(owner, version), wrapped)
                .map_err(|_| KeyError::Unwrap)?,
        );
        if plain.len() != 32 {
            return Err(KeyError::Unwrap);
        }
        Ok(DataKey(Secret::from_fn(|k| k.copy_from_slice(&plain))))
    }
}

/// A random data key (per stream, per account, or for the catalog).
pub struct DataKey(Key32);

impl DataKey {
    /// A fresh random data key.
    pub fn generate() -> Self {
        DataKey(Secret::random())
    }

    /// A secret kept in the keyring as a data key (wrapped like one).
    pub fn from_secret(secret: Key32) -> Self {
        DataKey(secret)
    }

    /// The secret itself (for the rare key that is used as is: the Raft log's secrets).
    pub fn into_secret(self) -> Key32 {
        self.0
    }

    /// The sealing key for one segment of `owner` (domain separation per segment).
    pub fn segment_key(&self, owner: &[u8; 16], segment_id: u64) -> SealKey {
        SealKey::new(hkdf(
            self.0.expose(),
            owner,
            &[b"sealstream seg v1", &segment_id.to_le_bytes()],
        ))
    }

    /// A sealing key for another purpose of `owner` (consumer state, catalog records).
    pub fn purpose_key(&self, owner: &[u8; 16], purpose: &[u8]) -> SealKey {
        SealKey::new(hkdf(
            self.0.expose(),
            owner,
            &[b"sealstream purpose v1 ", purpose],
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fast_params() -> KdfParams {
        KdfParams {
            m_kib: 64,
            t: 1,
            p: 1,
            salt: [7; 16],
        }
    }

    #[test]
    fn weak_parameters_are_refused() {
        assert!(MasterKey::from_passphrase(b"pw", &fast_params()).is_err());
        assert!(KdfParams::new_random().validate().is_ok());
    }

    #[test]
    fn same_passphrase_and_salt_give_the_same_kek_id() {
        let a = MasterKey::from_passphrase_unchecked(b"pw", &fast_params()).unwrap();
        let b = MasterKey::from_passphrase_unchecked(b"pw", &fast_params()).unwrap();
        let c = MasterKey::from_passphrase_unchecked(b"px", &fast_params()).unwrap();
        let uuid = [1u8; 16];
        assert!(Kek::derive(&a, &uuid).id_matches(&Kek::derive(&b, &uuid).id()));
        assert!(!Kek::derive(&a, &uuid).id_matches(&Kek::derive(&c, &uuid).id()));
        assert!(!Kek::derive(&a, &uuid).id_matches(&Kek::derive(&a, &[2u8; 16]).id()));
    }

    #[test]
    fn wrapped_keys_bind_owner_and_version() {
        let mk = MasterKey::from_bytes(Secret::random());
        let kek = Kek::derive(&mk, &[9; 16]);
        let dek = DataKey::generate();
        let w = kek.wrap(&dek, &[1; 16], 3);
        assert!(kek.unwrap(&w, &[1; 16], 3).is_ok());
        assert!(kek.unwrap(&w, &[2; 16], 3).is_err());
        assert!(kek.unwrap(&w, &[1; 16], 4).is_err());
        let other = Kek::derive(&MasterKey::from_bytes(Secret::random()), &[9; 16]);
        assert!(other.unwrap(&w, &[1; 16], 3).is_err());
        let seg = dek.segment_key(&[1; 16], 5);
        let sealed = seg.seal(b"a", b"b");
        let again = kek
            .unwrap(&w, &[1; 16], 3)
            .unwrap()
            .segment_key(&[1; 16], 5);
        assert_eq!(again.open(b"a", &sealed).unwrap(), b"b");
        assert!(dek.segment_key(&[1; 16], 6).open(b"a", &sealed).is_err());
    }

    #[test]
    fn key_files_round_trip_and_refuse_loose_permissions() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("k.key");
        let k = MasterKey::generate_key_file(&p).unwrap();
        let again = MasterKey::load_key_file(&p).unwrap();
        assert_eq!(k.0.expose(), again.0.expose());
        assert!(
            MasterKey::generate_key_file(&p).is_err(),
            "never overwrites"
        );
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            MasterKey::load_key_file(&p),
            Err(KeyError::KeyFilePermissions(_))
        ));
        let raw = dir.path().join("raw.key");
        std::fs::write(&raw, [5u8; 32]).unwrap();
        std::fs::set_permissions(&raw, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(
            MasterKey::load_key_file(&raw).unwrap().0.expose(),
            &[5u8; 32]
        );
        let bad = dir.path().join("bad.key");
        std::fs::write(&bad, b"not a key").unwrap();
        std::fs::set_permissions(&bad, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(
            MasterKey::load_key_file(&bad),
            Err(KeyError::KeyFileFormat(_))
        ));
    }
}
