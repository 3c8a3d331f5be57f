//! The `STORE` header: 4 KiB, fixed layout, two key slots (A/B) and an active-slot byte.
//!
//! ```text
//! offset  size  field
//!      0     8  magic "SEALSTOR"
//!      8     4  format version (u32 LE, = 1)
//!     12     4  header length (u32 LE, = 4096)
//!     16    16  store_uuid
//!     32     1  active slot: 0x41 'A' or 0x42 'B' (Hamming distance 2: one flipped bit
//!               never selects the other slot)
//!     33    31  reserved, zero
//!     64   128  slot A
//!    192   128  slot B
//!    320  3744  reserved, zero
//!   4064    32  SHA-256 of bytes 0..4064 (unkeyed: tells accidental damage apart from a wrong
//!               key before any key is derived)
//!
//! slot (128 bytes)
//!      0     1  state: 0 empty (whole slot zero), 1 in use
//!      1     1  kdf kind: 1 argon2id passphrase, 2 key file
//!      2     2  reserved, zero
//!      4     4  argon2 m (KiB)   \
//!      8     4  argon2 t          |  zero for a key file
//!     12     4  argon2 p          |
//!     16    16  argon2 salt      /
//!     32    16  kek_id
//!     48     8  keyring generation (u64 LE) this slot's KEK opens
//!     56    40  reserved, zero
//!     96    32  HMAC-SHA256 under the slot's KEK-derived header key over
//!               "sealstream store-slot v1" || bytes 0..32 of the header || slot letter ||
//!               slot bytes 0..96
//! ```
//!
//! The header is always rewritten whole through `tmp/` + rename (see [`super::tmp`]), so a
//! reader sees either the previous or the next version. The active-slot byte is not covered
//! by a MAC (the two slots are under different keys during a rotation); selecting the wrong
//! slot can only produce a wrong-key or missing-keyring error, never a silent open.

use crate::crypto::{KdfParams, Kek};
use sha2::{Digest, Sha256};

use super::codec::{PutLe, Reader};

/// Name of the header file under `store_dir`.
pub(crate) const STORE_FILE: &str = "STORE";
/// Size of the header file.
pub(crate) const HEADER_LEN: usize = 4096;
const MAGIC: &[u8; 8] = b"SEALSTOR";
/// Format version written by this code.
pub(crate) const FORMAT_VERSION: u32 = 1;
const SLOT_LEN: usize = 128;
const SLOT_BODY_LEN: usize = 96;
const SLOT_A_OFF: usize = 64;
const SLOTS_END: usize = SLOT_A_OFF + 2 * SLOT_LEN;
const CHECKSUM_OFF: usize = HEADER_LEN - 32;
const ACTIVE_A: u8 = 0x41;
const ACTIVE_B: u8 = 0x42;
const SLOT_MAC_DOMAIN: &[u8] = b"sealstream store-slot v1";

/// One of the two header slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SlotId {
    /// Slot A.
    A,
    /// Slot B.
    B,
}

impl SlotId {
    fn index(self) -> usize {
        match self {
            SlotId::A => 0,
            SlotId::B => 1,
        }
    }

    fn letter(self) -> u8 {
        match self {
            SlotId::A => ACTIVE_A,
            SlotId::B => ACTIVE_B,
        }
    }

    /// The other slot.
    pub(crate) fn other(self) -> SlotId {
        match self {
            SlotId::A => SlotId::B,
            SlotId::B => SlotId::A,
        }
    }
}

/// How a slot's master key is obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KdfKind {
    /// argon2id over a passphrase with the slot's parameters and salt.
    Passphrase,
    /// 32 bytes from a key file.
    KeyFile,
}

/// One key slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Slot {
    /// Passphrase or key file.
    pub(crate) kdf: KdfKind,
    /// argon2id parameters and salt (all zero for a key file).
    pub(crate) params: KdfParams,
    /// Id of the KEK this slot was made with.
    pub(crate) kek_id: [u8; 16],
    /// Keyring generation this slot's KEK opens.
    pub(crate) keyring_gen: u64,
    mac: [u8; 32],
}

/// Outcome of checking a key against the active slot.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum SlotCheck {
    /// Key id and MAC both match.
    Ok,
    /// A different key (or a damaged salt/parameter field that the checksum did not catch).
    WrongKey,
    /// The key is right but the slot was edited.
    Corrupt(&'static str),
}

impl Slot {
    /// A new slot for `kek`, MACed.
    pub(crate) fn new(
        kek: &Kek,
        store_uuid: &[u8; 16],
        id: SlotId,
        kdf: KdfKind,
        params: KdfParams,
        keyring_gen: u64,
    ) -> Slot {
        let mut s = Slot {
            kdf,
            params,
            kek_id: kek.id(),
            keyring_gen,
            mac: [0; 32],
        };
        s.mac = kek.mac(&mac_input(store_uuid, id, &s.body()));
        s
    }

    /// This slot with another keyring generation, re-MACed under the same KEK.
    pub(crate) fn with_keyring_gen(
        &self,
        kek: &Kek,
        store_uuid: &[u8; 16],
        id: SlotId,
        gen: u64,
    ) -> Slot {
        Slot::new(kek, store_uuid, id, self.kdf, self.params, gen)
    }

    fn body(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(SLOT_BODY_LEN);
        b.put_u8(1);
        b.put_u8(match self.kdf {
            KdfKind::Passphrase => 1,
            KdfKind::KeyFile => 2,
        });
        b.put_u16(0);
        b.put_u32(self.params.m_kib);
        b.put_u32(self.params.t);
        b.put_u32(self.params.p);
        b.extend_from_slice(&self.params.salt);
        b.extend_from_slice(&self.kek_id);
        b.put_u64(self.keyring_gen);
        b.resize(SLOT_BODY_LEN, 0);
        b
    }

    /// Checks `kek` against this slot: key id first, then the MAC. When the id differs but the
    /// MAC verifies with this KEK's id substituted, the id field itself was damaged.
    pub(crate) fn check(&self, kek: &Kek, store_uuid: &[u8; 16], id: SlotId) -> SlotCheck {
        if kek.id_matches(&self.kek_id) {
            if kek.verify_mac(&mac_input(store_uuid, id, &self.body()), &self.mac) {
                SlotCheck::Ok
            } else {
                SlotCheck::Corrupt("slot MAC does not verify")
            }
        } else {
            let mut fixed = self.clone();
            fixed.kek_id = kek.id();
            if kek.verify_mac(&mac_input(store_uuid, id, &fixed.body()), &self.mac) {
                SlotCheck::Corrupt("slot kek_id field altered")
            } else {
                SlotCheck::WrongKey
            }
        }
    }
}

fn mac_input(store_uuid: &[u8; 16], id: SlotId, body: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(SLOT_MAC_DOMAIN.len() + 32 + 1 + body.len());
    m.extend_from_slice(SLOT_MAC_DOMAIN);
    m.extend_from_slice(MAGIC);
    m.put_u32(FORMAT_VERSION);
    m.put_u32(HEADER_LEN as u32);
    m.extend_from_slice(store_uuid);
    m.put_u8(id.letter());
    m.extend_from_slice(body);
    m
}

/// The decoded `STORE` header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StoreHeader {
    /// The store's random id (bound into every AAD and key derivation).
    pub(crate) store_uuid: [u8; 16],
    /// Which slot is in force.
    pub(crate) active: SlotId,
    slots: [Option<Slot>; 2],
}

impl StoreHeader {
    /// A header with only `active` filled.
    pub(crate) fn new(store_uuid: [u8; 16], active: SlotId, slot: Slot) -> Self {
        let mut slots = [None, None];
        if let Some(s) = slots.get_mut(active.index()) {
            *s = Some(slot);
        }
        StoreHeader {
            store_uuid,
            active,
            slots,
        }
    }

    /// A slot, if in use.
    pub(crate) fn slot(&self, id: SlotId) -> Option<&Slot> {
        self.slots.get(id.index()).and_then(Option::as_ref)
    }

    /// The active slot (always in use in a decoded header).
    pub(crate) fn active_slot(&self) -> Option<&Slot> {
        self.slot(self.active)
    }

    /// Replaces one slot.
    pub(crate) fn set_slot(&mut self, id: SlotId, slot: Slot) {
        if let Some(s) = self.slots.get_mut(id.index()) {
            *s = Some(slot);
        }
    }

    /// The 4 KiB on-disk form.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(HEADER_LEN);
        b.extend_from_slice(MAGIC);
        b.put_u32(FORMAT_VERSION);
        b.put_u32(HEADER_LEN as u32);
        b.extend_from_slice(&self.store_uuid);
        b.put_u8(self.active.letter());
        b.resize(SLOT_A_OFF, 0);
        for id in [SlotId::A, SlotId::B] {
            match self.slot(id) {
                Some(s) => {
                    b.extend_from_slice(&s.body());
                    b.extend_from_slice(&s.mac);
                }
                None => b.resize(b.len() + SLOT_LEN, 0),
            }
        }
        b.resize(CHECKSUM_OFF, 0);
        let sum: [u8; 32] = Sha256::digest(&b).into();
        b.extend_from_slice(&sum);
        b
    }

    /// Parses and checks structure and checksum (no key needed).
    ///
    /// # Errors
    /// A short reason naming the field.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, String> {
        if bytes.len() != HEADER_LEN {
            return Err(format!("length {} (expected {HEADER_LEN})", bytes.len()));
        }
        let (body, sum) = bytes.split_at(CHECKSUM_OFF);
        let expect: [u8; 32] = Sha256::digest(body).into();
        if !bool::from(subtle::ConstantTimeEq::ct_eq(sum, expect.as_slice())) {
            return Err("checksum mismatch (damaged header)".into());
        }
        let mut r = Reader::new(body);
        let e = |m: &'static str| m.to_string();
        if &r.array::<8>().map_err(e)? != MAGIC {
            return Err("bad magic".into());
        }
        let version = r.u32().map_err(e)?;
        if version != FORMAT_VERSION {
            return Err(format!("unsupported format version {version}"));
        }
        if r.u32().map_err(e)? as usize != HEADER_LEN {
            return Err("bad header length field".into());
        }
        let store_uuid = r.array::<16>().map_err(e)?;
        let active = match r.u8().map_err(e)? {
            ACTIVE_A => SlotId::A,
            ACTIVE_B => SlotId::B,
            _ => return Err("invalid active-slot byte".into()),
        };
        if !r.take(SLOT_A_OFF - 33).map_err(e)?.iter().all(|b| *b == 0) {
            return Err("reserved bytes not zero".into());
        }
        let mut slots = [None, None];
        for (i, slot) in slots.iter_mut().enumerate() {
            *slot = decode_slot(r.take(SLOT_LEN).map_err(e)?)
                .map_err(|m| format!("slot {}: {m}", if i == 0 { 'A' } else { 'B' }))?;
        }
        debug_assert_eq!(r.position(), SLOTS_END);
        if !r.rest().iter().all(|b| *b == 0) {
            return Err("reserved bytes not zero".into());
        }
        let h = StoreHeader {
            store_uuid,
            active,
            slots,
        };
        if h.active_slot().is_none() {
            return Err("active slot is empty".into());
        }
        Ok(h)
    }
}

fn decode_slot(b: &[u8]) -> Result<Option<Slot>, &'static str> {
    let mut r = Reader::new(b);
    match r.u8()? {
        0 => {
            return if b.iter().all(|x| *x == 0) {
                Ok(None)
            } else {
                Err("empty slot not zero")
            };
        }
        1 => {}
        _ => return Err("invalid state byte"),
    }
    let kdf = match r.u8()? {
        1 => KdfKind::Passphrase,
        2 => KdfKind::KeyFile,
        _ => return Err("invalid kdf kind"),
    };
    if r.u16()? != 0 {
        return Err("reserved bytes not zero");
    }
    let params = KdfParams {
        m_kib: r.u32()?,
        t: r.u32()?,
        p: r.u32()?,
        salt: r.array()?,
    };
    if kdf == KdfKind::KeyFile
        && params
            != (KdfParams {
                m_kib: 0,
                t: 0,
                p: 0,
                salt: [0; 16],
            })
    {
        return Err("key-file slot carries kdf parameters");
    }
    let kek_id = r.array()?;
    let keyring_gen = r.u64()?;
    if !r.take(SLOT_BODY_LEN - 56)?.iter().all(|x| *x == 0) {
        return Err("reserved bytes not zero");
    }
    let mac = r.array()?;
    r.finish()?;
    Ok(Some(Slot {
        kdf,
        params,
        kek_id,
        keyring_gen,
        mac,
    }))
}

/// Parameters recorded for a key-file slot.
pub(crate) const NO_KDF_PARAMS: KdfParams = KdfParams {
    m_kib: 0,
    t: 0,
    p: 0,
    salt: [0; 16],
};

#[cfg(test)]
#[expect(clippy::indexing_slicing, reason = "tests index known-length values")]
mod tests {
    use super::*;
    use crate::crypto::{MasterKey, Secret};

    fn kek(uuid: &[u8; 16]) -> Kek {
        Kek::derive(&MasterKey::from_bytes(Secret::random()), uuid)
    }

    #[test]
    fn header_round_trips_and_checks_slots() {
        let uuid = [3u8; 16];
        let k = kek(&uuid);
        let slot = Slot::new(&k, &uuid, SlotId::A, KdfKind::KeyFile, NO_KDF_PARAMS, 7);
        let h = StoreHeader::new(uuid, SlotId::A, slot);
        let bytes = h.encode();
        assert_eq!(bytes.len(), HEADER_LEN);
        let back = StoreHeader::decode(&bytes).unwrap();
        assert_eq!(back, h);
        let s = back.active_slot().unwrap();
        assert_eq!(s.check(&k, &uuid, SlotId::A), SlotCheck::Ok);
        assert_eq!(s.check(&kek(&uuid), &uuid, SlotId::A), SlotCheck::WrongKey);
        assert_eq!(
            s.check(&k, &uuid, SlotId::B),
            SlotCheck::Corrupt("slot MAC does not verify")
        );
        let mut altered = s.clone();
        altered.kek_id[0] ^= 1;
        assert_eq!(
            altered.check(&k, &uuid, SlotId::A),
            SlotCheck::Corrupt("slot kek_id field altered")
        );
    }

    #[test]
    fn every_single_bit_flip_is_caught_without_a_key() {
        let uuid = [4u8; 16];
        let k = kek(&uuid);
        let params = KdfParams {
            m_kib: 65536,
            t: 3,
            p: 4,
            salt: [9; 16],
        };
        let mut h = StoreHeader::new(
            uuid,
            SlotId::A,
            Slot::new(&k, &uuid, SlotId::A, KdfKind::Passphrase, params, 1),
        );
        h.set_slot(
            SlotId::B,
            Slot::new(&k, &uuid, SlotId::B, KdfKind::KeyFile, NO_KDF_PARAMS, 2),
        );
        let bytes = h.encode();
        for bit in 0..bytes.len() * 8 {
            let mut b = bytes.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(StoreHeader::decode(&b).is_err(), "bit {bit}");
        }
    }
}
