//! R1 streams in the meta group: a stream without replicas has no group of its own, but its
//! name and subjects are still the cluster's, as in nats-server (whose meta group assigns
//! every stream). Before an R1 stream is created — or its subjects change — on a server, that
//! server proposes a *claim* (`MetaCmd::Claim`: account, config, server); applying it, every
//! member records it unless the name is another server's or a replicated stream's, or its
//! subjects overlap another stream of the account, so two servers can no longer each create a
//! stream of the same name, and every server can name every stream (`STREAM.NAMES`, account
//! info).
//!
//! The same check on every member, from the table alone, makes the outcome the same
//! everywhere; the proposer reads the table after its entry is applied to learn whether it
//! won. A delete releases the claim first (`MetaCmd::Release`), so a stream is never gone
//! while its name stays taken by a quorum that cannot hear about it.
//!
//! Streams this server holds without a claim — created before the meta group formed, or by an
//! earlier build — are claimed by [`ClusterJs::reconcile_claims`] on the membership tick; a
//! claim of this server whose stream is gone here on two ticks in a row is released. Until the
//! meta group has formed, R1 streams stay per node, as before (a server whose peers never
//! form one, a mixed cluster with nats-server peers).

use std::collections::BTreeSet;

use tracing::warn;

use crate::jetstream::api::ApiError;
use crate::jetstream::config::{subjects_collide, StreamConfig};

use super::{ClusterJs, MetaCmd, API_WAIT, META};

/// An R1 stream's entry in the meta table.
#[derive(Debug, Clone)]
pub(super) struct Claim {
    /// The server that holds the stream.
    pub(super) server: String,
    /// Its config (subjects for overlap checks and `STREAM.NAMES`' subject filter).
    pub(super) config: StreamConfig,
}

/// A table key: account and stream name.
type Key = (String, String);

fn overlaps(a: &StreamConfig, b: &StreamConfig) -> bool {
    a.name != b.name
        && a.subjects
            .iter()
            .any(|x| b.subjects.iter().any(|y| subjects_collide(x, y)))
}

impl ClusterJs {
    /// Whether the meta group has been formed (claims are kept from then on).
    pub(super) fn meta_formed(&self) -> bool {
        self.node.status(META).is_some_and(|s| !s.voters.is_empty())
    }

    /// Why `config` cannot be held in `account` by `holder` (`None`: a replicated stream)
    /// given the meta table, if it cannot: its name is a replicated stream's or another
    /// server's R1 stream (10058), or its subjects overlap another stream's (10065).
    pub(super) fn conflict(
        &self,
        account: &str,
        config: &StreamConfig,
        holder: Option<&str>,
    ) -> Option<ApiError> {
        let key = (account.to_owned(), config.name.clone());
        {
            let assignments = self.assignments.lock().unwrap_or_else(|p| p.into_inner());
            if holder.is_some() && assignments.contains_key(&key) {
                return Some(ApiError::stream_name_in_use());
            }
            if assignments
                .iter()
                .any(|((acc, _), a)| acc == account && overlaps(&a.config, config))
            {
                return Some(ApiError::subjects_overlap());
            }
        }
        let claims = self.claims.lock().unwrap_or_else(|p| p.into_inner());
        if claims
            .get(&key)
            .is_some_and(|c| holder != Some(c.server.as_str()))
        {
            return Some(ApiError::stream_name_in_use());
        }
        if claims
            .iter()
            .any(|((acc, _), c)| acc == account && overlaps(&c.config, config))
        {
            return Some(ApiError::subjects_overlap());
        }
        None
    }

    /// Applies a claim: recorded unless [`ClusterJs::conflict`] refuses it.
    pub(super) fn apply_claim(&self, account: String, config: StreamConfig, server: String) {
        if let Some(e) = self.conflict(&account, &config, Some(&server)) {
            warn!(account = %account, stream = %config.name, server = %server, error = %e.to_json(), "an R1 stream's claim was refused");
            return;
        }
        self.claims
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((account, config.name.clone()), Claim { server, config });
    }

    /// Applies a release: the claim goes if `server` holds it.
    pub(super) fn apply_release(&self, account: String, name: String, server: &str) {
        let mut claims = self.claims.lock().unwrap_or_else(|p| p.into_inner());
        let key = (account, name);
        if claims.get(&key).is_some_and(|c| c.server == server) {
            claims.remove(&key);
        }
    }

    fn claimed_here(&self, key: &Key, config: &StreamConfig) -> bool {
        self.claims
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .is_some_and(|c| c.server == self.name && c.config.subjects == config.subjects)
    }

    /// Claims `config`'s name and subjects for this server, before an R1 stream is created
    /// here or its subjects change. Nothing to do before the meta group forms.
    ///
    /// # Errors
    /// 10058 when the name is taken elsewhere, 10065 when the subjects overlap another
    /// stream's, 10008 without a meta leader.
    pub(crate) fn claim(&self, account: &str, config: &StreamConfig) -> Result<(), ApiError> {
        if !self.meta_formed() {
            return Ok(());
        }
        let key = (account.to_owned(), config.name.clone());
        if self.claimed_here(&key, config) {
            return Ok(());
        }
        if let Some(e) = self.conflict(account, config, Some(&self.name)) {
            return Err(e);
        }
        // A group formed a moment ago elects its first leader within about 2 s.
        let _ = self.runtime.block_on(self.node.wait_leader(META, API_WAIT));
        self.propose_meta(&MetaCmd::Claim {
            account: account.to_owned(),
            config: Box::new(config.clone()),
            server: self.name.clone(),
        })?;
        // Applied here by now: the table says whether this claim won.
        if self.claimed_here(&key, config) {
            return Ok(());
        }
        Err(self
            .conflict(account, config, Some(&self.name))
            .unwrap_or_else(ApiError::stream_name_in_use))
    }

    /// Releases this server's claim on an R1 stream before it is deleted here.
    ///
    /// # Errors
    /// 10008 without a meta quorum (the stream is then not deleted).
    pub(crate) fn release(&self, account: &str, name: &str) -> Result<(), ApiError> {
        let key = (account.to_owned(), name.to_owned());
        let mine = self
            .claims
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .is_some_and(|c| c.server == self.name);
        if !mine {
            return Ok(());
        }
        self.propose_meta(&MetaCmd::Release {
            account: account.to_owned(),
            name: name.to_owned(),
            server: self.name.clone(),
        })
    }

    /// Claims the R1 streams this server holds without a claim, and releases claims of this
    /// server whose stream was gone on the previous tick too. Called on the membership tick
    /// once the meta group has a leader; a refused claim is reported once.
    pub(super) async fn reconcile_claims(&self) {
        let Some(js) = self.js() else { return };
        let mut held = BTreeSet::new();
        for acc in js.accounts() {
            for s in acc.streams.all() {
                if s.group.is_some() {
                    continue;
                }
                let key = (acc.name.clone(), s.cfg.name.clone());
                held.insert(key.clone());
                if self.claimed_here(&key, &s.cfg) {
                    continue;
                }
                if let Some(e) = self.conflict(&acc.name, &s.cfg, Some(&self.name)) {
                    let mut refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
                    if refused.insert(key) {
                        warn!(account = %acc.name, stream = %s.cfg.name, error = %e.to_json(), "a stream of this server clashes with another server's: its name or subjects are not claimed in the cluster");
                    }
                    continue;
                }
                let cmd = MetaCmd::Claim {
                    account: acc.name.clone(),
                    config: Box::new(s.cfg.clone()),
                    server: self.name.clone(),
                };
                if self.propose_meta_async(&cmd).await.is_err() {
                    return;
                }
            }
        }
        let gone: Vec<Key> = self
            .claims
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(k, c)| c.server == self.name && !held.contains(*k))
            .map(|(k, _)| k.clone())
            .collect();
        let before = std::mem::replace(
            &mut *self.unheld.lock().unwrap_or_else(|p| p.into_inner()),
            gone.iter().cloned().collect(),
        );
        for (account, name) in gone.into_iter().filter(|k| before.contains(k)) {
            let cmd = MetaCmd::Release {
                account,
                name,
                server: self.name.clone(),
            };
            if self.propose_meta_async(&cmd).await.is_err() {
                return;
            }
        }
    }

    /// Deletes `account`'s replicated streams through the meta group, as a tenant purge's
    /// first step: every replica erases its copy and forgets its group's key. (Its R1
    /// streams are erased by each server's own purge; their claims go with them, released
    /// on the membership tick.) Nothing to do before the meta group forms. Blocks: call it
    /// off the runtime's threads.
    ///
    /// # Errors
    /// 10008 without a meta quorum.
    pub(crate) fn purge_replicated(&self, account: &str) -> Result<(), ApiError> {
        if !self.meta_formed() {
            return Ok(());
        }
        let names: Vec<String> = self
            .assignments
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .filter(|(acc, _)| acc == account)
            .map(|(_, name)| name.clone())
            .collect();
        for name in names {
            self.propose_meta(&MetaCmd::Delete {
                account: account.to_owned(),
                name,
            })?;
        }
        Ok(())
    }

    /// The account's streams the meta table knows, with their configs: replicated streams
    /// and other servers' R1 streams alike (this server's own are in its table too).
    pub(crate) fn known_streams(&self, account: &str) -> Vec<StreamConfig> {
        let mut out: Vec<StreamConfig> = self
            .assignments
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|((acc, _), _)| acc == account)
            .map(|(_, a)| a.config.clone())
            .collect();
        out.extend(
            self.claims
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .filter(|((acc, _), _)| acc == account)
                .map(|(_, c)| c.config.clone()),
        );
        out
    }
}
