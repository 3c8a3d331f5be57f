//! A stream's rollback checkpoint, kept in the sealed catalog: the durable high-water mark of
//! its segment log and the generation of every consumer's state file.
//!
//! Why: each file under `s/<stream>/` authenticates on its own, so a file swapped for an older
//! copy of itself (a segment cut back to an earlier size, a consumer state from yesterday)
//! would still open. The catalog is one generation-numbered log sealed under the store's
//! keys; recording these marks there makes "one file older than the rest" a mismatch that
//! recovery and the audit report (`log ends before the recorded durable mark`, `consumer
//! state older than the catalog records`). A rollback of the whole store directory together
//! with its catalog is not detectable this way (SECURITY.md says what is).
//!
//! Layout (little endian): version `1` (u8); mark present (u8 0/1) then segment id, block
//! index, last sequence (u64 each); consumer count (u32) then per consumer 16 id bytes and the
//! generation (u64).

use crate::store::recovery::DurableMark;

use super::ids::ConsumerId;

const VERSION: u8 = 1;

/// What the catalog records about one stream's files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamCheckpoint {
    /// The segment log's last durable block when the checkpoint was taken (`None`: empty).
    pub mark: Option<DurableMark>,
    /// Each consumer's state generation at that time (a state file may only be newer).
    pub consumers: Vec<(ConsumerId, u64)>,
}

impl StreamCheckpoint {
    /// The recorded generation of `id`, if the checkpoint knows the consumer.
    pub fn consumer_generation(&self, id: ConsumerId) -> Option<u64> {
        self.consumers
            .iter()
            .find(|(c, _)| *c == id)
            .map(|(_, g)| *g)
    }

    /// Checks a consumer's state generation as found on disk (`None`: no state file) against
    /// the recorded one.
    ///
    /// # Errors
    /// The reason, when the state is older than (or missing against) the checkpoint.
    pub fn check_consumer(&self, id: ConsumerId, found: Option<u64>) -> Result<(), String> {
        match self.consumer_generation(id) {
            Some(recorded) if found.is_none_or(|g| g < recorded) => Err(format!(
                "consumer state older than the catalog records (generation {} < {recorded}): rolled back",
                found.map_or("missing".to_owned(), |g| g.to_string())
            )),
            _ => Ok(()),
        }
    }

    /// The bytes stored in the catalog.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(30 + self.consumers.len() * 24);
        out.push(VERSION);
        match &self.mark {
            None => out.push(0),
            Some(m) => {
                out.push(1);
                out.extend_from_slice(&m.segment_id.to_le_bytes());
                out.extend_from_slice(&m.block_index.to_le_bytes());
                out.extend_from_slice(&m.last_seq.to_le_bytes());
            }
        }
        let n = u32::try_from(self.consumers.len()).unwrap_or(u32::MAX);
        out.extend_from_slice(&n.to_le_bytes());
        for (id, g) in self.consumers.iter().take(n as usize) {
            out.extend_from_slice(id.as_bytes());
            out.extend_from_slice(&g.to_le_bytes());
        }
        out
    }

    /// Parses catalog bytes; `None` when they are not a checkpoint of this version.
    pub fn decode(b: &[u8]) -> Option<Self> {
        let mut r = Reader(b);
        if r.u8()? != VERSION {
            return None;
        }
        let mark = match r.u8()? {
            0 => None,
            1 => Some(DurableMark {
                segment_id: r.u64()?,
                block_index: r.u64()?,
                last_seq: r.u64()?,
            }),
            _ => return None,
        };
        let n = r.u32()?;
        let mut consumers = Vec::new();
        for _ in 0..n {
            let id: [u8; 16] = r.take(16)?.try_into().ok()?;
            consumers.push((ConsumerId(id), r.u64()?));
        }
        r.0.is_empty()
            .then_some(StreamCheckpoint { mark, consumers })
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let (head, rest) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1)?.first().copied()
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoints_round_trip_and_refuse_garbage() {
        let c = StreamCheckpoint {
            mark: Some(DurableMark {
                segment_id: 3,
                block_index: 9,
                last_seq: 120,
            }),
            consumers: vec![(ConsumerId([7; 16]), 5)],
        };
        assert_eq!(StreamCheckpoint::decode(&c.encode()), Some(c.clone()));
        assert_eq!(c.consumer_generation(ConsumerId([7; 16])), Some(5));
        let empty = StreamCheckpoint::default();
        assert_eq!(StreamCheckpoint::decode(&empty.encode()), Some(empty));
        let mut bad = c.encode();
        bad.push(0);
        assert_eq!(StreamCheckpoint::decode(&bad), None);
        assert_eq!(StreamCheckpoint::decode(&[2, 0, 0, 0, 0, 0]), None);
        assert_eq!(StreamCheckpoint::decode(&[]), None);
    }
}
