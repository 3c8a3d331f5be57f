//! Keyring generations: `keyring/kr-<gen:08>.bin`, the sealed list of every wrapped data key.
//!
//! A generation holds, each wrapped by the KEK with AAD binding store, owner id, version and
//! kek_id ([`Kek::wrap`]):
//!
//! - the catalog's data keys (owner [`CATALOG_OWNER`]), one per catalog key version;
//! - per account (random [`AccountId`], never a name): the account's own data key and, grouped
//!   under it, every stream's data keys by version, with the stream's current version;
//! - per account, a few **spare** stream keys: a random [`StreamId`] and its version-1 key,
//!   made ahead of need. Creating a stream claims a spare by appending its catalog record —
//!   no keyring generation is written (a generation is the whole keyring, O(streams), plus
//!   five fsyncs; creates were dominated by it). A spare the catalog names is that stream's
//!   key (`claim_spares` at open); an unclaimed spare never sealed anything. A generation is
//!   written when an account's spares run out (refilled to [`SPARE_KEYS`]), and dropping an
//!   account drops its spares with it.
//!
//! **Why grouped by account rather than an account key that wraps stream keys:** tenant erasure
//! must be one atomic step. Grouping makes "drop the account" a single new generation without
//! the group, committed by one `STORE` rename, exactly like dropping one stream; the KEK still
//! wraps every data key directly as the spec's hierarchy says, so master rotation rewraps one
//! flat set and opening a stream never needs a chain of unwraps. An account-level wrapping key
//! would add a second wrap layer (and `DataKey` deliberately exposes no bytes to wrap with)
//! without making erasure any more atomic. The grouping itself is inside the seal, so which
//! streams belong to one tenant is not visible on disk.
//!
//! The body is sealed under a fresh per-generation key (wrapped by the KEK in the file header,
//! owner = `"keyring\0" || gen`), so the structure (accounts, counts, versions) is ciphertext
//! too. `STORE`'s active slot names the one generation in force; any other `kr-*` file is a
//! leftover of a crashed update and is shredded at startup, after the key was verified.
//!
//! ```text
//! offset  size  field
//!      0     8  magic "SEALKRNG"
//!      8     4  format version (u32 LE, = 1)
//!     12     4  reserved, zero
//!     16    16  store_uuid
//!     32     8  generation (u64 LE; equals the file name)
//!     40    16  kek_id of the wrapping KEK
//!     56    72  body key wrapped by the KEK (owner "keyring\0" || gen, version 1)
//!    128     4  sealed body length (u32 LE)
//!    132     4  reserved, zero
//!    136     n  sealed body: nonce(24) || ciphertext || tag(16),
//!               AAD = "sealstream keyring v1" || bytes 0..136
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::crypto::keys::WRAPPED_LEN;
use crate::crypto::{DataKey, Kek, KeyError, SealKey, WrappedKey};

use super::codec::{PutLe, Reader};
use super::ids::{AccountId, StreamId};

/// Directory of keyring generations under `store_dir`.
pub(crate) const KEYRING_DIR: &str = "keyring";
/// Reserved owner id of the catalog's data keys (random ids are never all-zero).
pub(crate) const CATALOG_OWNER: [u8; 16] = [0u8; 16];
/// The owner of the Raft log's two secrets (pseudonyms at version 1, group keys at version 2).
pub(crate) const RAFT_OWNER: [u8; 16] = *b"raft secrets\0\0\0\0";
/// Marks the Raft secrets' section after the spares (zero padding reads as "none").
const RAFT_TAG: u32 = 0x5246_5431;
const MAGIC: &[u8; 8] = b"SEALKRNG";
const FORMAT_VERSION: u32 = 1;
const HEADER_LEN: usize = 136;
const AAD_DOMAIN: &[u8] = b"sealstream keyring v1";
const BODY_PURPOSE: &[u8] = b"keyring body";
/// Plaintext bodies are padded to a multiple of this (blurs per-account counts a little).
const BODY_BUCKET: usize = 512;
/// Largest keyring file accepted (checked before reading it whole).
pub(crate) const MAX_KEYRING_FILE: u64 = 64 << 20;
const VERSIONED_KEY_LEN: usize = 4 + WRAPPED_LEN;
/// Spare stream keys an account's group is refilled to when a create finds none.
pub(crate) const SPARE_KEYS: usize = 64;

/// Path of generation `gen`.
pub(crate) fn keyring_path(root: &Path, gen: u64) -> PathBuf {
    root.join(KEYRING_DIR).join(format!("kr-{gen:08}.bin"))
}

/// The generation in a canonical keyring file name, if it is one.
pub(crate) fn parse_keyring_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("kr-")?.strip_suffix(".bin")?;
    let gen: u64 = if digits.bytes().all(|b| b.is_ascii_digit()) {
        digits.parse().ok()?
    } else {
        return None;
    };
    (format!("{gen:08}") == digits).then_some(gen)
}

fn body_owner(gen: u64) -> [u8; 16] {
    let mut o = [0u8; 16];
    let (a, b) = o.split_at_mut(8);
    a.copy_from_slice(b"keyring\0");
    b.copy_from_slice(&gen.to_le_bytes());
    o
}

/// A stream's wrapped data keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StreamKeys {
    /// The version new segments use.
    pub(crate) current: u32,
    /// Every version still kept, wrapped.
    pub(crate) keys: BTreeMap<u32, WrappedKey>,
}

impl StreamKeys {
    /// A new stream's keys: version 1 only.
    pub(crate) fn first(wrapped: WrappedKey) -> Self {
        StreamKeys {
            current: 1,
            keys: BTreeMap::from([(1, wrapped)]),
        }
    }
}

/// An account's group: its own key and its streams' keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AccountKeys {
    /// The account key's version.
    pub(crate) version: u32,
    /// The account key, wrapped (owner = account id).
    pub(crate) key: WrappedKey,
    /// Streams of this account.
    pub(crate) streams: BTreeMap<StreamId, StreamKeys>,
    /// Spare stream ids with their version-1 keys, wrapped (owner = the id), not yet claimed
    /// by a catalog record.
    pub(crate) spares: BTreeMap<StreamId, WrappedKey>,
}

impl AccountKeys {
    /// A new group: the account key and no streams.
    pub(crate) fn new(version: u32, key: WrappedKey) -> Self {
        AccountKeys {
            version,
            key,
            streams: BTreeMap::new(),
            spares: BTreeMap::new(),
        }
    }

    /// Adds spares until there are [`SPARE_KEYS`].
    pub(crate) fn refill_spares(&mut self, kek: &Kek) {
        while self.spares.len() < SPARE_KEYS {
            let sid = StreamId::random();
            self.spares.insert(sid, new_wrapped(kek, &sid.0, 1).1);
        }
    }
}

/// One keyring generation, decoded (keys still wrapped).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Keyring {
    /// This generation.
    pub(crate) gen: u64,
    /// The catalog generation in force.
    pub(crate) catalog_gen: u64,
    /// Records the catalog held when this generation was written: a shorter catalog was
    /// truncated (rolled back) and is refused.
    pub(crate) catalog_watermark: u64,
    /// Catalog data keys by version; the highest seals the catalog generation in force.
    pub(crate) catalog_keys: BTreeMap<u32, WrappedKey>,
    /// Account groups.
    pub(crate) accounts: BTreeMap<AccountId, AccountKeys>,
    /// The clustered node's Raft log secrets (pseudonyms, group keys), wrapped (owner
    /// [`RAFT_OWNER`], versions 1 and 2). Kept here, not derived from the master key, so that
    /// a master-key rotation rewraps them instead of changing them (which would orphan the
    /// log). `None` in generations written before they were kept.
    pub(crate) raft: Option<[WrappedKey; 2]>,
}

impl Keyring {
    /// Whether every wrapped key of this generation is in `next` unchanged: replacing this
    /// generation by `next` destroys no key (a stream or account was added, say), so the old
    /// file need not be shredded — everything it holds lives on in `next`.
    pub(crate) fn kept_by(&self, next: &Keyring) -> bool {
        let streams_kept = |g: &AccountKeys, n: &AccountKeys| {
            g.streams.iter().all(|(id, ks)| {
                n.streams
                    .get(id)
                    .is_some_and(|nk| ks.keys.iter().all(|(v, k)| nk.keys.get(v) == Some(k)))
            }) && g.spares.iter().all(|(id, k)| {
                n.spares.get(id) == Some(k)
                    || n.streams
                        .get(id)
                        .is_some_and(|nk| nk.keys.get(&1) == Some(k))
            })
        };
        self.catalog_keys
            .iter()
            .all(|(v, k)| next.catalog_keys.get(v) == Some(k))
            && self.accounts.iter().all(|(a, g)| {
                next.accounts
                    .get(a)
                    .is_some_and(|n| n.version == g.version && n.key == g.key && streams_kept(g, n))
            })
            && self.raft.is_none_or(|r| next.raft == Some(r))
    }

    /// The catalog key version in force.
    pub(crate) fn catalog_version(&self) -> Option<u32> {
        self.catalog_keys.keys().next_back().copied()
    }

    /// A stream's keys and its account.
    pub(crate) fn stream(&self, id: &StreamId) -> Option<(&AccountId, &StreamKeys)> {
        self.accounts
            .iter()
            .find_map(|(a, g)| g.streams.get(id).map(|s| (a, s)))
    }

    /// Whether this generation holds a key for `id`, as a stream's or as a spare.
    pub(crate) fn holds(&self, id: &StreamId) -> bool {
        self.accounts
            .values()
            .any(|g| g.streams.contains_key(id) || g.spares.contains_key(id))
    }

    /// A stream's keys, mutably.
    pub(crate) fn stream_mut(&mut self, id: &StreamId) -> Option<&mut StreamKeys> {
        self.accounts
            .values_mut()
            .find_map(|g| g.streams.get_mut(id))
    }

    /// Moves each spare that the catalog names as a stream of its account into that
    /// account's streams (the catalog record is what claimed it).
    pub(crate) fn claim_spares<'a>(
        &mut self,
        streams: impl IntoIterator<Item = (&'a AccountId, &'a StreamId)>,
    ) {
        for (aid, sid) in streams {
            if let Some(g) = self.accounts.get_mut(aid) {
                if let Some(w) = g.spares.remove(sid) {
                    g.streams.insert(*sid, StreamKeys::first(w));
                }
            }
        }
    }

    /// Removes a stream's keys; returns whether it was present.
    pub(crate) fn remove_stream(&mut self, id: &StreamId) -> bool {
        self.accounts
            .values_mut()
            .any(|g| g.streams.remove(id).is_some())
    }

    /// The same keys, rewrapped from `old` to `new` (a master-key rotation).
    ///
    /// # Errors
    /// [`KeyError::Unwrap`] when a key does not open under `old`.
    pub(crate) fn rewrap(&self, old: &Kek, new: &Kek) -> Result<Keyring, KeyError> {
        let re = |w: &WrappedKey, owner: &[u8; 16], v: u32| -> Result<WrappedKey, KeyError> {
            let dek = old.unwrap(w, owner, v)?;
            Ok(new.wrap(&dek, owner, v))
        };
        let mut out = self.clone();
        for (v, w) in out.catalog_keys.iter_mut() {
            *w = re(w, &CATALOG_OWNER, *v)?;
        }
        for (aid, g) in out.accounts.iter_mut() {
            g.key = re(&g.key, &aid.0, g.version)?;
            for (sid, s) in g.streams.iter_mut() {
                for (v, w) in s.keys.iter_mut() {
                    *w = re(w, &sid.0, *v)?;
                }
            }
            for (sid, w) in g.spares.iter_mut() {
                *w = re(w, &sid.0, 1)?;
            }
        }
        if let Some([names, groups]) = out.raft.as_mut() {
            *names = re(names, &RAFT_OWNER, 1)?;
            *groups = re(groups, &RAFT_OWNER, 2)?;
        }
        Ok(out)
    }

    /// Unwraps every key once (open-time check that the whole keyring belongs to `kek`).
    ///
    /// # Errors
    /// A reason naming the first key that did not unwrap.
    pub(crate) fn verify_all(&self, kek: &Kek) -> Result<(), String> {
        for (v, w) in &self.catalog_keys {
            kek.unwrap(w, &CATALOG_OWNER, *v)
                .map_err(|_| format!("catalog key v{v} does not unwrap"))?;
        }
        for (aid, g) in &self.accounts {
            kek.unwrap(&g.key, &aid.0, g.version)
                .map_err(|_| "an account key does not unwrap".to_string())?;
            for (sid, s) in &g.streams {
                for (v, w) in &s.keys {
                    kek.unwrap(w, &sid.0, *v)
                        .map_err(|_| format!("stream {sid} key v{v} does not unwrap"))?;
                }
            }
            for (sid, w) in &g.spares {
                kek.unwrap(w, &sid.0, 1)
                    .map_err(|_| format!("spare {sid} key does not unwrap"))?;
            }
        }
        if let Some([names, groups]) = &self.raft {
            kek.unwrap(names, &RAFT_OWNER, 1)
                .and_then(|_| kek.unwrap(groups, &RAFT_OWNER, 2))
                .map_err(|_| "a Raft log secret does not unwrap".to_string())?;
        }
        Ok(())
    }

    fn encode_body(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.put_u64(self.catalog_gen);
        b.put_u64(self.catalog_watermark);
        put_keys(&mut b, &self.catalog_keys);
        b.put_u32(len_u32(self.accounts.len()));
        for (aid, g) in &self.accounts {
            b.extend_from_slice(&aid.0);
            b.put_u32(g.version);
            b.extend_from_slice(&g.key);
            b.put_u32(len_u32(g.streams.len()));
            for (sid, s) in &g.streams {
                b.extend_from_slice(&sid.0);
                b.put_u32(s.current);
                put_keys(&mut b, &s.keys);
            }
        }
        // Spares follow the groups, so a generation without any reads as zero padding.
        let with_spares: Vec<_> = self
            .accounts
            .iter()
            .filter(|(_, g)| !g.spares.is_empty())
            .collect();
        if !with_spares.is_empty() || self.raft.is_some() {
            b.put_u32(len_u32(with_spares.len()));
            for (aid, g) in with_spares {
                b.extend_from_slice(&aid.0);
                b.put_u32(len_u32(g.spares.len()));
                for (sid, w) in &g.spares {
                    b.extend_from_slice(&sid.0);
                    b.extend_from_slice(w);
                }
            }
        }
        if let Some([names, groups]) = &self.raft {
            b.put_u32(RAFT_TAG);
            b.extend_from_slice(names);
            b.extend_from_slice(groups);
        }
        let padded = b.len().div_ceil(BODY_BUCKET).max(1) * BODY_BUCKET;
        b.resize(padded, 0);
        b
    }

    fn decode_body(gen: u64, body: &[u8]) -> Result<Keyring, &'static str> {
        let mut r = Reader::new(body);
        let catalog_gen = r.u64()?;
        let catalog_watermark = r.u64()?;
        let catalog_keys = read_keys(&mut r)?;
        if catalog_keys.is_empty() {
            return Err("no catalog key");
        }
        let mut accounts = BTreeMap::new();
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..r.count(16 + VERSIONED_KEY_LEN + 4)? {
            let aid = AccountId(r.array()?);
            let version = r.u32()?;
            let key = r.array()?;
            let mut streams = BTreeMap::new();
            for _ in 0..r.count(16 + 8)? {
                let sid = StreamId(r.array()?);
                let current = r.u32()?;
                let keys = read_keys(&mut r)?;
                if !keys.contains_key(&current) {
                    return Err("stream's current key version missing");
                }
                if !seen.insert(sid) {
                    return Err("stream listed twice");
                }
                streams.insert(sid, StreamKeys { current, keys });
            }
            if accounts
                .insert(
                    aid,
                    AccountKeys {
                        version,
                        key,
                        streams,
                        spares: BTreeMap::new(),
                    },
                )
                .is_some()
            {
                return Err("account listed twice");
            }
        }
        let groups = if r.remaining() >= 4 {
            r.count(16 + 4)?
        } else {
            0
        };
        for _ in 0..groups {
            let aid = AccountId(r.array()?);
            let n = r.count(16 + WRAPPED_LEN)?;
            let g = accounts
                .get_mut(&aid)
                .ok_or("spares of an unknown account")?;
            if n == 0 || !g.spares.is_empty() {
                return Err("spare group empty or listed twice");
            }
            for _ in 0..n {
                let sid = StreamId(r.array()?);
                if !seen.insert(sid) {
                    return Err("spare listed twice or as a stream");
                }
                g.spares.insert(sid, r.array()?);
            }
        }
        let raft = if r.remaining() >= 4 {
            match r.u32()? {
                RAFT_TAG => Some([r.array()?, r.array()?]),
                0 => None,
                _ => return Err("unknown section after the spares"),
            }
        } else {
            None
        };
        r.finish_zero_padding()?;
        Ok(Keyring {
            gen,
            catalog_gen,
            catalog_watermark,
            catalog_keys,
            accounts,
            raft,
        })
    }

    /// The sealed file bytes of this generation under `kek`.
    pub(crate) fn seal(&self, kek: &Kek, store_uuid: &[u8; 16]) -> Vec<u8> {
        let owner = body_owner(self.gen);
        let body_key = DataKey::generate();
        let sealed = body_key.purpose_key(&owner, BODY_PURPOSE);
        let body = zeroize::Zeroizing::new(self.encode_body());
        let sealed_len = len_u32(body.len() + crate::crypto::seal::OVERHEAD);
        let mut h = Vec::with_capacity(HEADER_LEN + body.len() + 64);
        h.extend_from_slice(MAGIC);
        h.put_u32(FORMAT_VERSION);
        h.put_u32(0);
        h.extend_from_slice(store_uuid);
        h.put_u64(self.gen);
        h.extend_from_slice(&kek.id());
        h.extend_from_slice(&kek.wrap(&body_key, &owner, 1));
        h.put_u32(sealed_len);
        h.put_u32(0);
        let ct = sealed.seal(&aad(&h), &body);
        h.extend_from_slice(&ct);
        h
    }

    /// Opens generation `gen` from its file bytes.
    ///
    /// # Errors
    /// A reason naming the field or check that failed.
    pub(crate) fn open(
        bytes: &[u8],
        kek: &Kek,
        store_uuid: &[u8; 16],
        gen: u64,
    ) -> Result<Keyring, String> {
        let mut r = Reader::new(bytes);
        let s = |m: &'static str| m.to_string();
        let header = r
            .take(HEADER_LEN)
            .map_err(|_| "shorter than its header".to_string())?;
        let mut h = Reader::new(header);
        if &h.array::<8>().map_err(s)? != MAGIC {
            return Err("bad magic".into());
        }
        let version = h.u32().map_err(s)?;
        if version != FORMAT_VERSION {
            return Err(format!("unsupported format version {version}"));
        }
        if h.u32().map_err(s)? != 0 {
            return Err("reserved bytes not zero".into());
        }
        if &h.array::<16>().map_err(s)? != store_uuid {
            return Err("store_uuid differs from STORE".into());
        }
        let file_gen = h.u64().map_err(s)?;
        if file_gen != gen {
            return Err(format!(
                "generation field {file_gen} differs from the file name"
            ));
        }
        if !kek.id_matches(&h.array::<16>().map_err(s)?) {
            return Err("kek_id differs from the STORE slot".into());
        }
        let wrapped: WrappedKey = h.array().map_err(s)?;
        let sealed_len = h.u32().map_err(s)? as usize;
        if h.u32().map_err(s)? != 0 {
            return Err("reserved bytes not zero".into());
        }
        if r.remaining() != sealed_len {
            return Err(format!(
                "body length field {sealed_len}, file holds {}",
                r.remaining()
            ));
        }
        let owner = body_owner(gen);
        let body_key = kek
            .unwrap(&wrapped, &owner, 1)
            .map_err(|_| "body key does not unwrap".to_string())?;
        let body = zeroize::Zeroizing::new(
            body_key
                .purpose_key(&owner, BODY_PURPOSE)
                .open(&aad(header), r.rest())
                .map_err(|_| "body does not authenticate".to_string())?,
        );
        let kr = Keyring::decode_body(gen, &body).map_err(|m| format!("body: {m}"))?;
        kr.verify_all(kek)?;
        Ok(kr)
    }
}

fn aad(header: &[u8]) -> Vec<u8> {
    let mut a = AAD_DOMAIN.to_vec();
    a.extend_from_slice(header);
    a
}

fn put_keys(b: &mut Vec<u8>, keys: &BTreeMap<u32, WrappedKey>) {
    b.put_u32(len_u32(keys.len()));
    for (v, w) in keys {
        b.put_u32(*v);
        b.extend_from_slice(w);
    }
}

fn read_keys(r: &mut Reader<'_>) -> Result<BTreeMap<u32, WrappedKey>, &'static str> {
    let mut out = BTreeMap::new();
    for _ in 0..r.count(VERSIONED_KEY_LEN)? {
        let v = r.u32()?;
        let w: WrappedKey = r.array()?;
        if out.insert(v, w).is_some() {
            return Err("key version listed twice");
        }
    }
    Ok(out)
}

fn len_u32(n: usize) -> u32 {
    u32::try_from(n).expect("keyring counts and sizes are bounded far below 4 GiB")
}

/// Seals a generation, refusing (before anything is written) one that a later open would
/// reject as too large.
///
/// # Errors
/// [`super::MetaError::Invalid`] above [`MAX_KEYRING_FILE`].
pub(crate) fn seal_within_limit(
    kr: &Keyring,
    kek: &Kek,
    store_uuid: &[u8; 16],
) -> Result<Vec<u8>, super::MetaError> {
    let bytes = kr.seal(kek, store_uuid);
    if bytes.len() as u64 > MAX_KEYRING_FILE {
        return Err(super::MetaError::Invalid {
            what: "keyring",
            reason: "would exceed the keyring size limit (too many streams or key versions)",
        });
    }
    Ok(bytes)
}

/// Wraps a fresh data key and returns it with its wrapped form.
pub(crate) fn new_wrapped(kek: &Kek, owner: &[u8; 16], version: u32) -> (DataKey, WrappedKey) {
    let dek = DataKey::generate();
    let w = kek.wrap(&dek, owner, version);
    (dek, w)
}

/// The catalog sealing key from the catalog data key.
pub(crate) fn catalog_seal_key(dek: &DataKey) -> SealKey {
    dek.purpose_key(&CATALOG_OWNER, b"catalog")
}

#[cfg(test)]
#[expect(clippy::indexing_slicing, reason = "tests index known-length values")]
mod tests {
    use super::*;
    use crate::crypto::{MasterKey, Secret};

    fn sample(kek: &Kek) -> Keyring {
        let mut accounts = BTreeMap::new();
        let aid = AccountId::random();
        let sid = StreamId::random();
        let mut keys = BTreeMap::new();
        keys.insert(1, new_wrapped(kek, &sid.0, 1).1);
        keys.insert(2, new_wrapped(kek, &sid.0, 2).1);
        let mut streams = BTreeMap::new();
        streams.insert(sid, StreamKeys { current: 2, keys });
        let spares = (0..2)
            .map(|_| {
                let id = StreamId::random();
                (id, new_wrapped(kek, &id.0, 1).1)
            })
            .collect();
        accounts.insert(
            aid,
            AccountKeys {
                version: 1,
                key: new_wrapped(kek, &aid.0, 1).1,
                streams,
                spares,
            },
        );
        // A second group without spares: only groups with some are listed in the body.
        let other = AccountId::random();
        accounts.insert(other, AccountKeys::new(1, new_wrapped(kek, &other.0, 1).1));
        let mut catalog_keys = BTreeMap::new();
        catalog_keys.insert(1, new_wrapped(kek, &CATALOG_OWNER, 1).1);
        Keyring {
            gen: 5,
            catalog_gen: 2,
            catalog_watermark: 9,
            catalog_keys,
            accounts,
            raft: None,
        }
    }

    #[test]
    fn keyring_round_trips_and_refuses_every_bit_flip() {
        let uuid = [1u8; 16];
        let kek = Kek::derive(&MasterKey::from_bytes(Secret::random()), &uuid);
        let kr = sample(&kek);
        let bytes = kr.seal(&kek, &uuid);
        assert_eq!(Keyring::open(&bytes, &kek, &uuid, 5).unwrap(), kr);
        assert!(Keyring::open(&bytes, &kek, &uuid, 6).is_err());
        assert!(Keyring::open(&bytes, &kek, &[2; 16], 5).is_err());
        for bit in 0..bytes.len() * 8 {
            let mut b = bytes.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(Keyring::open(&b, &kek, &uuid, 5).is_err(), "bit {bit}");
        }
        assert!(Keyring::open(&bytes[..bytes.len() - 1], &kek, &uuid, 5).is_err());
    }

    #[test]
    fn only_a_generation_that_drops_a_key_needs_shredding() {
        let uuid = [1u8; 16];
        let kek = Kek::derive(&MasterKey::from_bytes(Secret::random()), &uuid);
        let kr = sample(&kek);
        // A stream added: nothing of the old generation is lost.
        let mut added = kr.clone();
        let (aid, _) = kr.accounts.iter().next().unwrap();
        let sid = StreamId::random();
        let mut keys = BTreeMap::new();
        keys.insert(1, new_wrapped(&kek, &sid.0, 1).1);
        added
            .accounts
            .get_mut(aid)
            .unwrap()
            .streams
            .insert(sid, StreamKeys { current: 1, keys });
        assert!(kr.kept_by(&added));
        // A stream, a key version, an account, a catalog key dropped, or everything rewrapped:
        // the old generation holds a key the new one does not.
        assert!(!added.kept_by(&kr));
        let mut dropped_version = kr.clone();
        for g in dropped_version.accounts.values_mut() {
            for k in g.streams.values_mut() {
                k.keys.remove(&1);
            }
        }
        assert!(!kr.kept_by(&dropped_version));
        let mut no_account = kr.clone();
        no_account.accounts.clear();
        assert!(!kr.kept_by(&no_account));
        let mut new_catalog = kr.clone();
        new_catalog.catalog_keys.clear();
        new_catalog
            .catalog_keys
            .insert(2, new_wrapped(&kek, &CATALOG_OWNER, 2).1);
        assert!(!kr.kept_by(&new_catalog));
        let other = Kek::derive(&MasterKey::from_bytes(Secret::random()), &uuid);
        assert!(!kr.kept_by(&kr.rewrap(&kek, &other).unwrap()));
    }

    #[test]
    fn a_claimed_spare_is_kept_and_a_dropped_one_is_not() {
        let uuid = [1u8; 16];
        let kek = Kek::derive(&MasterKey::from_bytes(Secret::random()), &uuid);
        let kr = sample(&kek);
        let (aid, g) = kr
            .accounts
            .iter()
            .find(|(_, g)| !g.spares.is_empty())
            .unwrap();
        let spare = *g.spares.keys().next().unwrap();
        let mut claimed = kr.clone();
        claimed.claim_spares([(aid, &spare)]);
        let group = &claimed.accounts[aid];
        assert!(!group.spares.contains_key(&spare));
        assert_eq!(group.streams[&spare].keys[&1], g.spares[&spare]);
        assert!(
            kr.kept_by(&claimed),
            "claiming moves a key, it destroys none"
        );
        // A claimed spare is a stream like any other: it opens, and dropping it destroys it.
        let bytes = claimed.seal(&kek, &uuid);
        assert_eq!(Keyring::open(&bytes, &kek, &uuid, 5).unwrap(), claimed);
        let mut dropped = claimed.clone();
        assert!(dropped.remove_stream(&spare));
        assert!(!claimed.kept_by(&dropped));
        let mut no_spares = kr.clone();
        no_spares.accounts.get_mut(aid).unwrap().spares.clear();
        assert!(!kr.kept_by(&no_spares));
        // An account claiming another group's spare claims nothing.
        let mut wrong = kr.clone();
        wrong.claim_spares([(&AccountId::random(), &spare)]);
        assert_eq!(wrong, kr);
    }

    #[test]
    fn refill_tops_spares_up_and_every_spare_unwraps() {
        let uuid = [1u8; 16];
        let kek = Kek::derive(&MasterKey::from_bytes(Secret::random()), &uuid);
        let mut kr = sample(&kek);
        for g in kr.accounts.values_mut() {
            g.refill_spares(&kek);
            assert_eq!(g.spares.len(), SPARE_KEYS);
        }
        kr.verify_all(&kek).unwrap();
        let other = Kek::derive(&MasterKey::from_bytes(Secret::random()), &uuid);
        kr.rewrap(&kek, &other).unwrap().verify_all(&other).unwrap();
        let bytes = kr.seal(&kek, &uuid);
        assert_eq!(Keyring::open(&bytes, &kek, &uuid, 5).unwrap(), kr);
    }

    #[test]
    fn rewrap_moves_every_key_to_the_new_kek() {
        let uuid = [1u8; 16];
        let old = Kek::derive(&MasterKey::from_bytes(Secret::random()), &uuid);
        let new = Kek::derive(&MasterKey::from_bytes(Secret::random()), &uuid);
        let kr = sample(&old);
        let re = kr.rewrap(&old, &new).unwrap();
        re.verify_all(&new).unwrap();
        assert!(re.verify_all(&old).is_err());
        assert!(kr.verify_all(&new).is_err());
    }

    #[test]
    fn only_canonical_names_parse() {
        assert_eq!(parse_keyring_name("kr-00000012.bin"), Some(12));
        assert_eq!(parse_keyring_name("kr-123456789.bin"), Some(123_456_789));
        assert_eq!(parse_keyring_name("kr-12.bin"), None);
        assert_eq!(parse_keyring_name("kr-000000012.bin"), None);
        assert_eq!(parse_keyring_name("kr-0000001a.bin"), None);
    }
}
