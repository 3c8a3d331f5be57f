//! What a stream copies from other streams: its `mirror` or its `sources`, and its own
//! `subject_transform` (ADR-36) — their shape on the wire, and the checks nats-server makes on
//! them when a stream is created or updated (texts and codes as nats-server 2.15.1 answers,
//! captured by `tests/js_sources.rs` against it).
//!
//! A **mirror** is a read-only copy of one origin stream: it has no subjects of its own, keeps
//! the origin's sequence numbers and timestamps, and may be turned into an ordinary stream by
//! an update that drops the mirror (promotion). **Sources** add other streams' messages to a
//! stream that may also have subjects; each copied message gets the next sequence and a
//! `Nats-Stream-Source` header naming where it came from.

use serde::{Deserialize, Serialize};

use super::null_as_default;
use super::rules::{subjects_collide, valid_name, valid_subject_pattern};
use crate::jetstream::api::errors::{ApiError, ErrorKind};
use crate::subject::transform::{Transform, TransformError};

/// One `src` → `dest` rename of the subjects a stream stores.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SubjectTransformConfig {
    /// Which subjects (`>` when empty).
    #[serde(deserialize_with = "null_as_default")]
    pub src: String,
    /// Where to (`$1`, `{{wildcard(1)}}`, `*` and `>` take what `src` matched).
    #[serde(deserialize_with = "null_as_default")]
    pub dest: String,
}

impl SubjectTransformConfig {
    /// The transform, validated.
    ///
    /// # Errors
    /// Why the destination or the source pattern is refused.
    pub fn compile(&self) -> Result<Transform, TransformError> {
        Transform::new(&self.src, &self.dest)
    }
}

/// Where another account's (or domain's) JetStream API is reached from this account.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ExternalStream {
    /// The API prefix in this account (`$JS.<domain>.API`, or a prefix an import maps).
    #[serde(deserialize_with = "null_as_default")]
    pub api: String,
    /// The delivery prefix (nats-server's consumers deliver under it; echoed).
    #[serde(deserialize_with = "null_as_default")]
    pub deliver: String,
}

/// ADR-60: source through a push consumer the origin's owner made (echoed; see the note on
/// [`StreamSource::consumer`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ConsumerSource {
    /// The consumer's name.
    #[serde(deserialize_with = "null_as_default")]
    pub name: String,
    /// Its deliver subject.
    #[serde(deserialize_with = "null_as_default")]
    pub deliver_subject: String,
}

/// One way a mirror or source copies: the origin subjects matching `filter`, stored as
/// `transform` renames them (unchanged without one). `dest` is the transform's destination as
/// configured (`>` for none), as the `Nats-Stream-Source` header names it.
#[derive(Debug, Clone)]
pub struct Route {
    /// Which origin subjects.
    pub filter: String,
    /// The destination as configured, `>` for none.
    pub dest: String,
    /// The rename, if any.
    pub transform: Option<Transform>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// A `mirror`, or one entry of `sources`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct StreamSource {
    /// The origin stream's name.
    #[serde(deserialize_with = "null_as_default")]
    pub name: String,
    /// Start at this origin sequence (0: from the first).
    #[serde(deserialize_with = "null_as_default", skip_serializing_if = "is_zero")]
    pub opt_start_seq: u64,
    /// Start with the first origin message stored at or after this time (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub opt_start_time: Option<String>,
    /// Copy only the origin's subjects matching this filter.
    #[serde(
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub filter_subject: String,
    /// Copy the subjects matching each `src`, renamed to its `dest`.
    #[serde(
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub subject_transforms: Vec<SubjectTransformConfig>,
    /// The origin is in another account or domain.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external: Option<ExternalStream>,
    /// ADR-60 consumer-bound source. Echoed; this server copies with its own reader and does
    /// not bind to a consumer, so such a source reports an error in its info instead of
    /// copying (see `jetstream::source`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consumer: Option<ConsumerSource>,
}

impl StreamSource {
    /// The `(filter, transform)` pairs this source copies by: its transforms, or its filter
    /// (`>` when none) unchanged.
    ///
    /// # Errors
    /// A transform that does not compile (refused at create; kept for stores written before).
    pub fn routes(&self) -> Result<Vec<Route>, TransformError> {
        if self.subject_transforms.is_empty() {
            let filter = if self.filter_subject.is_empty() {
                ">".to_owned()
            } else {
                self.filter_subject.clone()
            };
            return Ok(vec![Route {
                filter,
                dest: ">".to_owned(),
                transform: None,
            }]);
        }
        self.subject_transforms
            .iter()
            .map(|t| {
                let c = t.compile()?;
                Ok(Route {
                    filter: c.src().to_owned(),
                    dest: t.dest.clone(),
                    transform: Some(c),
                })
            })
            .collect()
    }

    /// Whether the origin is this account's own stream (no `external`, or one naming this
    /// account's API).
    pub fn is_local(&self) -> bool {
        self.external.as_ref().is_none_or(|e| e.api.is_empty())
    }

    /// The checks one mirror or source gets. `stream`: the name of the stream it belongs to.
    fn check(&self, stream: &str, mirror: bool) -> Result<(), ApiError> {
        let kind = |m: ErrorKind, s: ErrorKind| ApiError::from_kind(if mirror { m } else { s });
        if !valid_name(&self.name) {
            return Err(kind(
                ErrorKind::MirrorNameInvalid,
                ErrorKind::SourceNameInvalid,
            ));
        }
        if self.name == stream && self.is_local() {
            return Err(ApiError::invalid_stream_config("detected cycle"));
        }
        if !self.filter_subject.is_empty() && !self.subject_transforms.is_empty() {
            return Err(kind(
                ErrorKind::MirrorFilterAndTransforms,
                ErrorKind::SourceFilterAndTransforms,
            ));
        }
        if !self.filter_subject.is_empty() && !valid_subject_pattern(&self.filter_subject) {
            let what = if mirror {
                "for the mirror invalid subject"
            } else {
                "for the source: invalid subject"
            };
            return Err(ApiError::with_detail(
                ErrorKind::SourceFilterInvalid,
                &format!("subject filter '{}' {what}", self.filter_subject),
            ));
        }
        let routes = self.routes().map_err(|e| {
            ApiError::with_detail(ErrorKind::SourceTransformInvalid, &e.to_string())
        })?;
        for (i, a) in routes.iter().enumerate() {
            if routes
                .iter()
                .take(i)
                .any(|b| subjects_collide(&a.filter, &b.filter))
            {
                return Err(ApiError::from_kind(ErrorKind::SourceFiltersOverlap));
            }
        }
        if let Some(t) = &self.opt_start_time {
            if crate::timefmt::parse_rfc3339(t).is_none() {
                return Err(ApiError::invalid_json(&format!(
                    "parsing time {t:?}: not an RFC 3339 time"
                )));
            }
        }
        if let Some(e) = &self.external {
            if e.api == "$JS.API" || e.api.starts_with("$JS.API.") {
                return Err(ApiError::with_detail(
                    ErrorKind::ExternalApiOverlap,
                    &format!(
                        "stream external api prefix {} must not overlap with $JS.API",
                        e.api
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The start time as unix nanoseconds.
    pub fn start_time(&self) -> Option<i64> {
        self.opt_start_time
            .as_deref()
            .and_then(crate::timefmt::parse_rfc3339)
    }
}

/// The mirror and source rules of a stream config being normalised (before `subjects` gets
/// its default).
pub(super) fn check(
    name: &str,
    subjects: &[String],
    first_seq: Option<u64>,
    mirror: Option<&StreamSource>,
    sources: &[StreamSource],
    transform: Option<&SubjectTransformConfig>,
) -> Result<(), ApiError> {
    if let Some(m) = mirror {
        if !subjects.is_empty() {
            return Err(ApiError::from_kind(ErrorKind::MirrorWithSubjects));
        }
        if !sources.is_empty() {
            return Err(ApiError::from_kind(ErrorKind::MirrorWithSources));
        }
        if first_seq.is_some() {
            return Err(ApiError::from_kind(ErrorKind::MirrorWithFirstSeq));
        }
        m.check(name, true)?;
    }
    for (i, s) in sources.iter().enumerate() {
        s.check(name, false)?;
        let same = |o: &StreamSource| {
            o.name == s.name
                && o.filter_subject == s.filter_subject
                && o.subject_transforms == s.subject_transforms
                && o.external.as_ref().map(|e| &e.api) == s.external.as_ref().map(|e| &e.api)
        };
        if sources.iter().take(i).any(same) {
            return Err(ApiError::from_kind(ErrorKind::DuplicateSource));
        }
    }
    if let Some(t) = transform {
        t.compile().map_err(|e| {
            ApiError::with_detail(ErrorKind::StreamTransformInvalid, &e.to_string())
        })?;
    }
    Ok(())
}
