//! Consumers: catalog records (create, look up, reconfigure, delete) and sealed consumer
//! state files (`s/<stream_id>/c/<consumer_id>.st`, written via `tmp/`).

use std::fs;
use std::path::PathBuf;

use super::catalog::Record;
use super::consumer_state::{self, ConsumerState, Owner, CONSUMER_DIR, MAX_CONSUMER_STATE};
use super::error::io_err;
use super::ids::{ConsumerId, StreamId};
use super::streams::{validate_config, validate_name};
use super::tmp;
use super::{ConsumerMeta, MetaError, MetaStore, Step};

impl MetaStore {
    fn consumer_path(&self, stream: &StreamId, consumer: &ConsumerId) -> PathBuf {
        self.stream_dir(stream)
            .join(CONSUMER_DIR)
            .join(consumer_state::state_file_name(consumer))
    }

    fn live_consumer(&self, stream: &StreamId, consumer: &ConsumerId) -> Result<(), MetaError> {
        match self.state.consumers.get(consumer) {
            Some(c) if c.stream == *stream => Ok(()),
            _ => Err(MetaError::ConsumerNotFound(consumer.to_hex())),
        }
    }

    fn consumer_meta(&self, id: &ConsumerId) -> Option<ConsumerMeta> {
        let c = self.state.consumers.get(id)?;
        Some(ConsumerMeta {
            consumer_id: *id,
            stream_id: c.stream,
            name: c.name.clone(),
            config: c.config.clone(),
        })
    }

    /// Creates a consumer on a stream.
    ///
    /// # Errors
    /// [`MetaError::StreamNotFound`], [`MetaError::ConsumerExists`], [`MetaError::Invalid`],
    /// I/O (fatal).
    pub fn create_consumer(
        &mut self,
        stream_id: StreamId,
        name: &str,
        config: &[u8],
    ) -> Result<ConsumerId, MetaError> {
        validate_name("consumer name", name)?;
        validate_config(config)?;
        if !self.state.streams.contains_key(&stream_id) {
            return Err(MetaError::StreamNotFound(stream_id.to_hex()));
        }
        if self
            .state
            .consumer_by_name
            .contains_key(&(stream_id, name.to_owned()))
        {
            return Err(MetaError::ConsumerExists);
        }
        self.mutate(|s| {
            let id = ConsumerId::random();
            s.append(vec![Record::ConsumerCreate {
                id,
                stream: stream_id,
                name: name.to_owned(),
                config: config.to_vec(),
            }])?;
            Ok(id)
        })
    }

    /// The consumers of a stream, ordered by name.
    ///
    /// # Errors
    /// [`MetaError::StreamNotFound`].
    pub fn list_consumers(&self, stream_id: StreamId) -> Result<Vec<ConsumerMeta>, MetaError> {
        if !self.state.streams.contains_key(&stream_id) {
            return Err(MetaError::StreamNotFound(stream_id.to_hex()));
        }
        Ok(self
            .state
            .consumer_by_name
            .range((stream_id, String::new())..)
            .take_while(|((s, _), _)| *s == stream_id)
            .filter_map(|(_, id)| self.consumer_meta(id))
            .collect())
    }

    /// Looks a consumer up by (stream, name).
    pub fn consumer_by_name(&self, stream_id: StreamId, name: &str) -> Option<ConsumerMeta> {
        let id = self
            .state
            .consumer_by_name
            .get(&(stream_id, name.to_owned()))?;
        self.consumer_meta(id)
    }

    /// Replaces a consumer's config.
    ///
    /// # Errors
    /// [`MetaError::ConsumerNotFound`], [`MetaError::Invalid`], I/O (fatal).
    pub fn update_consumer_config(
        &mut self,
        consumer_id: ConsumerId,
        config: &[u8],
    ) -> Result<(), MetaError> {
        validate_config(config)?;
        if !self.state.consumers.contains_key(&consumer_id) {
            return Err(MetaError::ConsumerNotFound(consumer_id.to_hex()));
        }
        self.mutate(|s| {
            s.append(vec![Record::ConsumerConfig {
                id: consumer_id,
                config: config.to_vec(),
            }])
        })
    }

    /// Deletes a consumer: catalog record first, then its state file. Its name stays sealed
    /// in the catalog until the next compaction (which changes the catalog key).
    ///
    /// # Errors
    /// [`MetaError::ConsumerNotFound`], I/O (fatal).
    pub fn delete_consumer(
        &mut self,
        stream_id: StreamId,
        consumer_id: ConsumerId,
    ) -> Result<(), MetaError> {
        self.live_consumer(&stream_id, &consumer_id)?;
        self.mutate(|s| {
            s.append(vec![Record::ConsumerDelete { id: consumer_id }])?;
            tmp::remove_file_durable(&s.consumer_path(&stream_id, &consumer_id))?;
            s.step(Step::ConsumerStateWritten)
        })
    }

    /// Persists a consumer's state (whole-file seal under the stream's current data key,
    /// written via `tmp/`, fsynced, renamed, directory fsynced).
    ///
    /// # Errors
    /// [`MetaError::ConsumerNotFound`], [`MetaError::Invalid`] above [`MAX_CONSUMER_STATE`],
    /// I/O (fatal).
    pub fn persist_consumer_state(
        &mut self,
        stream_id: StreamId,
        consumer_id: ConsumerId,
        generation: u64,
        bytes: &[u8],
    ) -> Result<(), MetaError> {
        if bytes.len() > MAX_CONSUMER_STATE {
            return Err(MetaError::Invalid {
                what: "consumer state",
                reason: "larger than MAX_CONSUMER_STATE",
            });
        }
        self.live_consumer(&stream_id, &consumer_id)?;
        self.mutate(|s| {
            let handle = s.open_stream(stream_id)?;
            let owner = Owner {
                store_uuid: &handle.store_uuid,
                stream: &stream_id,
                consumer: &consumer_id,
            };
            let sealed =
                consumer_state::seal(&handle.dek, handle.dek_version, &owner, generation, bytes);
            tmp::create_dir_durable(&handle.dir.join(CONSUMER_DIR))?;
            tmp::write_atomic(&s.root, &s.consumer_path(&stream_id, &consumer_id), &sealed)?;
            s.step(Step::ConsumerStateWritten)
        })
    }

    /// Loads a consumer's state; `None` when none was persisted yet.
    ///
    /// # Errors
    /// [`MetaError::ConsumerStateCorrupt`] naming the file (that consumer is offline; the
    /// store carries on), [`MetaError::ConsumerNotFound`], I/O.
    pub fn load_consumer_state(
        &self,
        stream_id: StreamId,
        consumer_id: ConsumerId,
    ) -> Result<Option<ConsumerState>, MetaError> {
        self.live_consumer(&stream_id, &consumer_id)?;
        let path = self.consumer_path(&stream_id, &consumer_id);
        let corrupt = |reason: String| MetaError::ConsumerStateCorrupt {
            path: path.clone(),
            reason,
        };
        let meta = match fs::metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err("stat", &path)(e)),
        };
        if meta.len() > (MAX_CONSUMER_STATE + 1024) as u64 {
            return Err(corrupt("file exceeds the size limit".into()));
        }
        let bytes = fs::read(&path).map_err(io_err("read", &path))?;
        let version = consumer_state::peek_dek_version(&bytes).map_err(|r| corrupt(r.into()))?;
        let dek = match self.stream_key(stream_id, version) {
            Ok(k) => k,
            Err(MetaError::DekVersion { .. }) => {
                return Err(corrupt(format!(
                    "sealed with data key version {version}, which the keyring does not hold"
                )))
            }
            Err(e) => return Err(e),
        };
        let owner = Owner {
            store_uuid: &self.header.store_uuid,
            stream: &stream_id,
            consumer: &consumer_id,
        };
        consumer_state::open(&dek, &owner, &bytes)
            .map(Some)
            .map_err(|r| corrupt(r.into()))
    }

    /// Data key versions used by the consumer state files of a stream (for
    /// [`MetaStore::drop_dek_version`]). Unreadable headers count as "any version".
    pub(super) fn consumer_state_versions(
        &self,
        stream_id: &StreamId,
    ) -> Result<Vec<Option<u32>>, MetaError> {
        let dir = self.stream_dir(stream_id).join(CONSUMER_DIR);
        let mut out = Vec::new();
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(io_err("list", &dir)(e)),
        };
        for e in entries {
            let e = e.map_err(io_err("list", &dir))?;
            let name = e.file_name();
            if consumer_state::parse_state_file_name(&name.to_string_lossy()).is_none() {
                continue;
            }
            let mut head = [0u8; 16];
            let version = fs::File::open(e.path())
                .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
                .ok()
                .and_then(|()| consumer_state::peek_dek_version(&head).ok());
            out.push(version);
        }
        Ok(out)
    }
}
