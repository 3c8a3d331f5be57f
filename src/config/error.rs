//! The one error type of the config module, and the source positions it carries.
//!
//! Every failure an operator can cause with a configuration file (a syntax slip, an unknown
//! key, a value of the wrong type, a missing include) becomes a [`ConfigError`] whose
//! `Display` is `<file>:<line>:<col>: <reason>`, the shape `nats-server -t` prints, so editors
//! and scripts that jump to `file:line:col` keep working. Lines and columns are 1-based and
//! columns count characters, not bytes.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

/// Where something is in a configuration source: the file and a 1-based line and column.
///
/// `line == 0` means "the file as a whole" (for example when it cannot be opened); `Display`
/// then prints only the file name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Location {
    /// The file the text came from (the `origin` given to the parser for in-memory text).
    pub file: Arc<Path>,
    /// 1-based line number, or 0 when the location is the whole file.
    pub line: u32,
    /// 1-based column in characters, or 0 when the location is the whole file.
    pub col: u32,
}

impl Location {
    /// A position inside `file`.
    pub fn new(file: Arc<Path>, line: u32, col: u32) -> Self {
        Location { file, line, col }
    }

    /// The file as a whole (no line or column).
    pub fn whole_file(file: Arc<Path>) -> Self {
        Location {
            file,
            line: 0,
            col: 0,
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}", self.file.display())
        } else {
            write!(f, "{}:{}:{}", self.file.display(), self.line, self.col)
        }
    }
}

/// What went wrong, without the position. `Display` gives the reason part of the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigErrorKind {
    /// The text is not valid configuration syntax.
    #[error("{0}")]
    Syntax(String),
    /// A key that no option at this level understands.
    #[error("unknown field \"{0}\"")]
    UnknownField(String),
    /// A value of the wrong type or shape for a known key.
    #[error("invalid value for field \"{field}\": expected {expected}")]
    InvalidValue {
        /// The key as written in the file.
        field: String,
        /// What the key accepts, e.g. "an integer".
        expected: String,
    },
    /// A value that is accepted at start-up but that `-t` rejects, e.g. a bare number of
    /// seconds where a duration string is expected.
    #[error("invalid use of field \"{field}\": {reason}")]
    InvalidUse {
        /// The key as written in the file.
        field: String,
        /// Why the use is discouraged.
        reason: String,
    },
    /// A value of the right type that breaks a rule of the option (range, conflicts, ...).
    #[error("{0}")]
    Invalid(String),
    /// A `$VARIABLE` that cannot be resolved, or resolves in a cycle.
    #[error("{0}")]
    Variable(String),
    /// An `include` that cannot be read.
    #[error("error parsing include file \"{path}\": {reason}")]
    Include {
        /// The path as written after `include`.
        path: String,
        /// The underlying failure.
        reason: String,
    },
    /// The configuration file itself cannot be read.
    #[error("cannot read configuration file: {0}")]
    Io(String),
    /// The file parsed but holds no keys at all.
    #[error("config has no values or is empty")]
    Empty,
}

/// A configuration error at a position: `Display` is `<file>:<line>:<col>: <reason>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{location}: {kind}")]
pub struct ConfigError {
    /// Where the problem is.
    pub location: Location,
    /// What the problem is.
    pub kind: ConfigErrorKind,
}

impl ConfigError {
    /// Builds an error at `location`.
    pub fn new(location: Location, kind: ConfigErrorKind) -> Self {
        ConfigError { location, kind }
    }

    /// A syntax error at `location`.
    pub fn syntax(location: Location, reason: impl Into<String>) -> Self {
        ConfigError::new(location, ConfigErrorKind::Syntax(reason.into()))
    }

    /// A rule violation (`ConfigErrorKind::Invalid`) at `location`.
    pub fn invalid(location: Location, reason: impl Into<String>) -> Self {
        ConfigError::new(location, ConfigErrorKind::Invalid(reason.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn display_is_file_line_col_reason() {
        let file: Arc<Path> = Arc::from(PathBuf::from("w.conf"));
        let err = ConfigError::new(
            Location::new(file.clone(), 2, 1),
            ConfigErrorKind::UnknownField("x".into()),
        );
        assert_eq!(err.to_string(), "w.conf:2:1: unknown field \"x\"");
        let whole = ConfigError::new(Location::whole_file(file), ConfigErrorKind::Empty);
        assert_eq!(
            whole.to_string(),
            "w.conf: config has no values or is empty"
        );
    }

    #[test]
    fn invalid_value_names_the_field_and_the_expected_type() {
        let file: Arc<Path> = Arc::from(PathBuf::from("a.conf"));
        let err = ConfigError::new(
            Location::new(file, 1, 1),
            ConfigErrorKind::InvalidValue {
                field: "port".into(),
                expected: "an integer".into(),
            },
        );
        assert_eq!(
            err.to_string(),
            "a.conf:1:1: invalid value for field \"port\": expected an integer"
        );
    }
}
