//! Parser: tokens from `lex.rs` into a [`Value`] tree, with variables and includes resolved.
//!
//! What this layer decides, and nothing more:
//! - **Tree shape.** A document is a map; maps keep their entries in file order. A later entry
//!   with exactly the same key replaces the earlier one and moves to the later position, so
//!   "later key wins" also holds between different keys that set the same option (`listen`
//!   then `port`). Keys keep their original spelling; [`Map::get`] is case-insensitive.
//! - **Variables.** `$NAME` looks up a key spelled exactly `NAME` defined *earlier* in the
//!   current map or an enclosing one, then the environment. An environment value is parsed
//!   as a config value (`1GB` becomes an integer) and may itself refer to other environment
//!   variables; a repeat is reported as a cycle. An entry used this way is flagged
//!   [`Entry::used_as_variable`] so the options layer does not call it an unknown field.
//! - **Includes.** `include path` reads `path` relative to the directory of the including
//!   file, parses it on its own and merges its top-level entries into the map where the
//!   directive stands.
//!
//! Option names, types and defaults are not known here; `options.rs` maps the tree.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::error::{ConfigError, ConfigErrorKind, Location};
use super::lex::{lex, Token, TokenKind};

/// How deep `include` may nest before it is treated as a cycle.
pub const MAX_INCLUDE_DEPTH: usize = 10;

/// A parsed value with the location of its first character.
#[derive(Debug, Clone, PartialEq)]
pub struct Value {
    /// The value itself.
    pub kind: ValueKind,
    /// Where it was written (for a `$VAR`, where the reference was written).
    pub location: Location,
}

/// The kinds of value the language has.
#[derive(Debug, Clone, PartialEq)]
pub enum ValueKind {
    /// Quoted, raw, multi-line or bare text.
    String(String),
    /// An integer, size suffix applied.
    Integer(i64),
    /// A floating-point number.
    Float(f64),
    /// A boolean keyword.
    Bool(bool),
    /// A `YYYY-MM-DDTHH:MM:SSZ` datetime, as written.
    Datetime(String),
    /// `[ ... ]`
    Array(Vec<Value>),
    /// `{ ... }` or a whole document.
    Map(Map),
}

impl Value {
    /// The map inside, if this is a map.
    pub fn as_map(&self) -> Option<&Map> {
        match &self.kind {
            ValueKind::Map(m) => Some(m),
            _ => None,
        }
    }

    /// A short name of the value's type for messages ("a string", "a map", ...).
    pub fn type_name(&self) -> &'static str {
        match self.kind {
            ValueKind::String(_) => "a string",
            ValueKind::Integer(_) => "an integer",
            ValueKind::Float(_) => "a float",
            ValueKind::Bool(_) => "a boolean",
            ValueKind::Datetime(_) => "a datetime",
            ValueKind::Array(_) => "an array",
            ValueKind::Map(_) => "a map",
        }
    }
}

/// One `key: value` entry of a map.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The key as written (quotes removed, case kept for messages).
    pub key: String,
    /// Where the key was written; option errors point here, as nats-server's do.
    pub key_location: Location,
    /// The value.
    pub value: Value,
    /// True when a later `$KEY` referred to this entry. Such entries are exempt from the
    /// unknown-field check.
    pub used_as_variable: bool,
}

/// An ordered map of entries; see the module docs for duplicate handling.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Map {
    entries: Vec<Entry>,
}

impl Map {
    /// An empty map.
    pub fn new() -> Self {
        Map::default()
    }

    /// All entries in file order (duplicates already resolved).
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The last entry whose key equals `key` ignoring ASCII case.
    pub fn get(&self, key: &str) -> Option<&Entry> {
        self.entries
            .iter()
            .rev()
            .find(|e| e.key.eq_ignore_ascii_case(key))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the map has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Adds `entry`; an existing entry with exactly the same key is removed first (but keeps
    /// its "used as variable" mark, which is about the key, not the value).
    pub fn insert(&mut self, mut entry: Entry) {
        if let Some(i) = self.entries.iter().position(|e| e.key == entry.key) {
            let old = self.entries.remove(i);
            entry.used_as_variable |= old.used_as_variable;
        }
        self.entries.push(entry);
    }

    fn find_exact_mut(&mut self, key: &str) -> Option<&mut Entry> {
        self.entries.iter_mut().rev().find(|e| e.key == key)
    }
}

/// Environment lookup used for `$VAR` references not defined in the file.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Knobs for a parse: where `$VAR` looks when the file does not define it, and whether
/// `include` may read files (the fuzzer turns it off).
#[derive(Clone, Copy)]
pub struct ParseSettings<'a> {
    /// Environment lookup.
    pub env: EnvLookup<'a>,
    /// Whether `include` directives may read files.
    pub includes: bool,
}

fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

impl Default for ParseSettings<'static> {
    /// The process environment, includes allowed.
    fn default() -> Self {
        ParseSettings {
            env: &process_env,
            includes: true,
        }
    }
}

/// Reads and parses a configuration file.
///
/// # Errors
/// A [`ConfigError`] if the file cannot be read, is not UTF-8, or does not parse.
pub fn parse_file(path: &Path) -> Result<Value, ConfigError> {
    parse_file_with(path, &ParseSettings::default())
}

/// [`parse_file`] with explicit settings.
///
/// # Errors
/// As [`parse_file`].
pub fn parse_file_with(path: &Path, settings: &ParseSettings<'_>) -> Result<Value, ConfigError> {
    let file: Arc<Path> = Arc::from(path.to_path_buf());
    let bytes = std::fs::read(path).map_err(|e| {
        ConfigError::new(
            Location::whole_file(file.clone()),
            ConfigErrorKind::Io(e.to_string()),
        )
    })?;
    parse_bytes(&bytes, path, settings)
}

/// Parses in-memory text; `origin` names it in messages and anchors relative includes.
///
/// # Errors
/// A [`ConfigError`] at the first problem.
pub fn parse_str(text: &str, origin: &Path) -> Result<Value, ConfigError> {
    parse_str_with(text, origin, &ParseSettings::default())
}

/// [`parse_str`] with explicit settings.
///
/// # Errors
/// A [`ConfigError`] at the first problem.
pub fn parse_str_with(
    text: &str,
    origin: &Path,
    settings: &ParseSettings<'_>,
) -> Result<Value, ConfigError> {
    let mut state = State {
        settings,
        env_stack: Vec::new(),
        include_depth: 0,
    };
    let file: Arc<Path> = Arc::from(origin.to_path_buf());
    let map = parse_document(text, &file, &mut state)?;
    Ok(Value {
        kind: ValueKind::Map(map),
        location: Location::new(file, 1, 1),
    })
}

/// Parses raw bytes; invalid UTF-8 is a syntax error at the first bad byte.
///
/// # Errors
/// A [`ConfigError`] at the first problem.
pub fn parse_bytes(
    bytes: &[u8],
    origin: &Path,
    settings: &ParseSettings<'_>,
) -> Result<Value, ConfigError> {
    let text = utf8(bytes, origin)?;
    parse_str_with(text, origin, settings)
}

fn utf8<'b>(bytes: &'b [u8], origin: &Path) -> Result<&'b str, ConfigError> {
    std::str::from_utf8(bytes).map_err(|e| {
        let valid = bytes.get(..e.valid_up_to()).unwrap_or_default();
        // The prefix is valid UTF-8 by definition of `valid_up_to`.
        let prefix = std::str::from_utf8(valid).unwrap_or_default();
        let line = prefix.matches('\n').count() + 1;
        let col = prefix
            .rsplit('\n')
            .next()
            .unwrap_or_default()
            .chars()
            .count()
            + 1;
        ConfigError::syntax(
            Location::new(
                Arc::from(origin.to_path_buf()),
                u32::try_from(line).unwrap_or(u32::MAX),
                u32::try_from(col).unwrap_or(u32::MAX),
            ),
            "invalid UTF-8",
        )
    })
}

/// State shared by a document and the sub-parses it triggers (environment values, includes).
struct State<'s, 'e> {
    settings: &'s ParseSettings<'e>,
    /// Environment variables being expanded, innermost last, to report cycles.
    env_stack: Vec<String>,
    include_depth: usize,
}

fn parse_document(
    text: &str,
    file: &Arc<Path>,
    state: &mut State<'_, '_>,
) -> Result<Map, ConfigError> {
    let tokens = lex(text, file)?;
    let mut parser = Parser {
        tokens: tokens.into_iter(),
        file: file.clone(),
        scopes: Vec::new(),
        state,
    };
    parser.map_body(false)
}

struct Parser<'p, 's, 'e> {
    tokens: std::vec::IntoIter<Token>,
    file: Arc<Path>,
    /// Maps under construction, outermost first: the variable scopes.
    scopes: Vec<Map>,
    state: &'p mut State<'s, 'e>,
}

impl Parser<'_, '_, '_> {
    fn loc(&self, token: &Token) -> Location {
        Location::new(self.file.clone(), token.line, token.col)
    }

    fn eof_error(&self) -> ConfigError {
        ConfigError::syntax(
            Location::whole_file(self.file.clone()),
            "unexpected end of file",
        )
    }

    fn map_body(&mut self, closing: bool) -> Result<Map, ConfigError> {
        self.scopes.push(Map::new());
        loop {
            let Some(token) = self.tokens.next() else {
                if closing {
                    return Err(self.eof_error());
                }
                break;
            };
            let location = self.loc(&token);
            match token.kind {
                TokenKind::MapEnd if closing => break,
                TokenKind::Key(key) => {
                    let value = self.value()?;
                    self.current_scope().insert(Entry {
                        key,
                        key_location: location,
                        value,
                        used_as_variable: false,
                    });
                }
                TokenKind::Include(path) => self.include(&path, location)?,
                other => {
                    return Err(ConfigError::syntax(
                        location,
                        format!("unexpected {other:?} where a key was expected"),
                    ))
                }
            }
        }
        Ok(self.scopes.pop().unwrap_or_default())
    }

    fn current_scope(&mut self) -> &mut Map {
        if self.scopes.is_empty() {
            self.scopes.push(Map::new());
        }
        self.scopes
            .last_mut()
            .expect("invariant: the scope stack was just made non-empty")
    }

    fn value(&mut self) -> Result<Value, ConfigError> {
        let token = self.tokens.next().ok_or_else(|| self.eof_error())?;
        self.value_from(token)
    }

    fn value_from(&mut self, token: Token) -> Result<Value, ConfigError> {
        let location = self.loc(&token);
        let kind = match token.kind {
            TokenKind::String(s) => ValueKind::String(s),
            TokenKind::Integer(n) => ValueKind::Integer(n),
            TokenKind::Float(f) => ValueKind::Float(f),
            TokenKind::Bool(b) => ValueKind::Bool(b),
            TokenKind::Datetime(d) => ValueKind::Datetime(d),
            TokenKind::MapStart => ValueKind::Map(self.map_body(true)?),
            TokenKind::ArrayStart => {
                let mut items = Vec::new();
                loop {
                    let next = self.tokens.next().ok_or_else(|| self.eof_error())?;
                    if next.kind == TokenKind::ArrayEnd {
                        break;
                    }
                    items.push(self.value_from(next)?);
                }
                ValueKind::Array(items)
            }
            TokenKind::Variable(name) => return self.resolve(&name, location),
            other => {
                return Err(ConfigError::syntax(
                    location,
                    format!("unexpected {other:?} where a value was expected"),
                ))
            }
        };
        Ok(Value { kind, location })
    }

    fn resolve(&mut self, name: &str, location: Location) -> Result<Value, ConfigError> {
        for scope in self.scopes.iter_mut().rev() {
            if let Some(entry) = scope.find_exact_mut(name) {
                entry.used_as_variable = true;
                let mut value = entry.value.clone();
                value.location = location;
                return Ok(value);
            }
        }
        let variable_error =
            |reason: String| ConfigError::new(location.clone(), ConfigErrorKind::Variable(reason));
        if self.state.env_stack.iter().any(|n| n == name) {
            return Err(variable_error(format!(
                "variable reference cycle for \"{name}\""
            )));
        }
        let Some(text) = (self.state.settings.env)(name) else {
            return Err(variable_error(format!(
                "variable reference for \"{name}\" can not be found"
            )));
        };
        self.state.env_stack.push(name.to_string());
        let env_file: Arc<Path> = Arc::from(PathBuf::from(format!("${name}")));
        let parsed = parse_document(&format!("pk={text}"), &env_file, self.state);
        self.state.env_stack.pop();
        let map = parsed.map_err(|e| {
            variable_error(format!(
                "variable reference for \"{name}\" could not be parsed: {}",
                e.kind
            ))
        })?;
        let mut value = map
            .get("pk")
            .map(|e| e.value.clone())
            .ok_or_else(|| variable_error(format!("variable \"{name}\" has no value")))?;
        value.location = location;
        Ok(value)
    }

    fn include(&mut self, path: &str, location: Location) -> Result<(), ConfigError> {
        let include_error = |reason: String| {
            ConfigError::new(
                location.clone(),
                ConfigErrorKind::Include {
                    path: path.to_string(),
                    reason,
                },
            )
        };
        if !self.state.settings.includes {
            return Err(include_error("includes are disabled".into()));
        }
        if self.state.include_depth >= MAX_INCLUDE_DEPTH {
            return Err(include_error(format!(
                "includes nested more than {MAX_INCLUDE_DEPTH} deep (an include cycle?)"
            )));
        }
        let full = match self.file.parent() {
            Some(dir) => dir.join(path),
            None => PathBuf::from(path),
        };
        let bytes = std::fs::read(&full).map_err(|e| include_error(e.to_string()))?;
        let text = utf8(&bytes, &full)?;
        let file: Arc<Path> = Arc::from(full);
        self.state.include_depth += 1;
        let parsed = parse_document(text, &file, self.state);
        self.state.include_depth -= 1;
        for entry in parsed?.entries {
            self.current_scope().insert(entry);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse_env(text: &str, env: &[(&str, &str)]) -> Result<Map, ConfigError> {
        let vars: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let lookup = move |name: &str| vars.get(name).cloned();
        let settings = ParseSettings {
            env: &lookup,
            includes: true,
        };
        parse_str_with(text, Path::new("t.conf"), &settings).map(|v| match v.kind {
            ValueKind::Map(m) => m,
            _ => unreachable!(),
        })
    }

    fn parse(text: &str) -> Map {
        parse_env(text, &[]).unwrap_or_else(|e| panic!("{e}"))
    }

    fn kind<'m>(map: &'m Map, key: &str) -> &'m ValueKind {
        &map.get(key).unwrap().value.kind
    }

    #[test]
    fn later_duplicate_keys_win_and_move_to_the_end() {
        let m = parse("port: 1\nlisten: x:2\nport: 3");
        let keys: Vec<&str> = m.entries().iter().map(|e| e.key.as_str()).collect();
        assert_eq!(keys, ["listen", "port"]);
        assert_eq!(kind(&m, "port"), &ValueKind::Integer(3));
    }

    #[test]
    fn lookup_ignores_case_but_keys_keep_their_spelling() {
        let m = parse("Port: 4222");
        let e = m.get("port").unwrap();
        assert_eq!(e.key, "Port");
        assert_eq!(e.key_location.line, 1);
    }

    #[test]
    fn variables_resolve_from_earlier_keys_and_mark_them_used() {
        let m = parse("PAYLOAD = 2MB\nmax_payload: $PAYLOAD");
        assert_eq!(kind(&m, "max_payload"), &ValueKind::Integer(2 << 20));
        assert!(m.get("PAYLOAD").unwrap().used_as_variable);
        assert!(!m.get("max_payload").unwrap().used_as_variable);
    }

    #[test]
    fn variables_see_enclosing_maps_but_not_inner_ones() {
        let m = parse("X = 1\njetstream { max_mem = $X }");
        let js = m.get("jetstream").unwrap().value.as_map().unwrap();
        assert_eq!(kind(js, "max_mem"), &ValueKind::Integer(1));
        let err = parse_env("jetstream { A = 1 }\nserver_name = $A", &[]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "t.conf:2:15: variable reference for \"A\" can not be found"
        );
    }

    #[test]
    fn variable_names_are_case_sensitive_and_must_be_defined_earlier() {
        assert!(parse_env("A = 1; b: $a", &[]).is_err());
        assert!(parse_env("b: $U\nU = 1", &[]).is_err());
        assert!(parse_env("A = $A", &[]).is_err());
    }

    #[test]
    fn environment_values_are_parsed_as_config_values() {
        let m = parse_env(
            "a: $SZ\nb: $NM\nc: $Q",
            &[("SZ", "1GB"), ("NM", "hello"), ("Q", "\"1GB\"")],
        )
        .unwrap();
        assert_eq!(kind(&m, "a"), &ValueKind::Integer(1 << 30));
        assert_eq!(kind(&m, "b"), &ValueKind::String("hello".into()));
        assert_eq!(kind(&m, "c"), &ValueKind::String("1GB".into()));
        let err = parse_env("a: $NM2", &[("NM2", "a b")]).unwrap_err();
        assert!(err.to_string().contains("could not be parsed"), "{err}");
    }

    #[test]
    fn environment_cycles_are_errors() {
        let err = parse_env("a: $C1", &[("C1", "$C2"), ("C2", "$C1")]).unwrap_err();
        assert!(err.to_string().contains("cycle"), "{err}");
        let err = parse_env("a: $S", &[("S", "$S")]).unwrap_err();
        assert!(err.to_string().contains("cycle"), "{err}");
    }

    #[test]
    fn quoted_dollars_and_bcrypt_hashes_are_literal() {
        let m =
            parse("a: \"syn-$X\"\nb: $2a$11$W2zko751KUvVy59mUTWmpOdWjpEm5qhcCZRd05GjI/sSOT.xtiHyG");
        assert_eq!(kind(&m, "a"), &ValueKind::String("syn-$X".into()));
        assert!(matches!(kind(&m, "b"), ValueKind::String(s) if s.starts_with("$2a$11$")));
    }

    #[test]
    fn includes_merge_at_top_level_and_inside_maps() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/js.inc"), "max_mem: 1G\n").unwrap();
        std::fs::write(dir.path().join("sub/top.inc"), "port: 5000\nname: inc\n").unwrap();
        std::fs::write(dir.path().join("sub/nested.inc"), "include js.inc\n").unwrap();
        let main = dir.path().join("main.conf");
        let text = "include sub/top.inc\nport: 6000\njetstream { include \"sub/nested.inc\" }\n";
        let v = parse_str(text, &main).unwrap();
        let m = v.as_map().unwrap();
        assert_eq!(kind(m, "port"), &ValueKind::Integer(6000));
        assert_eq!(kind(m, "name"), &ValueKind::String("inc".into()));
        let js = m.get("jetstream").unwrap().value.as_map().unwrap();
        let e = js.get("max_mem").unwrap();
        assert_eq!(e.value.kind, ValueKind::Integer(1_000_000_000));
        assert!(e.key_location.file.ends_with("sub/js.inc"));
    }

    #[test]
    fn include_errors_name_the_path_and_position() {
        let dir = tempfile::tempdir().unwrap();
        let main = dir.path().join("main.conf");
        let err = parse_str("port: 1\ninclude nope.inc", &main).unwrap_err();
        assert_eq!(err.location.line, 2);
        assert!(err
            .to_string()
            .contains("error parsing include file \"nope.inc\""));
    }

    #[test]
    fn include_cycles_stop() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.conf"), "include a.conf\n").unwrap();
        let err = parse_file(&dir.path().join("a.conf")).unwrap_err();
        assert!(err.to_string().contains("nested more than"), "{err}");
    }

    #[test]
    fn includes_can_be_disabled() {
        let settings = ParseSettings {
            env: &|_| None,
            includes: false,
        };
        let err = parse_str_with("include x", Path::new("t.conf"), &settings).unwrap_err();
        assert!(err.to_string().contains("includes are disabled"));
    }

    #[test]
    fn invalid_utf8_is_a_positioned_syntax_error() {
        let settings = ParseSettings::default();
        let err = parse_bytes(b"a: 1\nb: \xff", Path::new("t.conf"), &settings).unwrap_err();
        assert_eq!(err.to_string(), "t.conf:2:4: invalid UTF-8");
    }

    #[test]
    fn arrays_hold_maps() {
        let m = parse("users: [\n {user: a, password: b}\n {user: c, password: d}\n]");
        let ValueKind::Array(items) = kind(&m, "users") else {
            panic!("not an array")
        };
        assert_eq!(items.len(), 2);
        assert_eq!(
            items[1].as_map().unwrap().get("user").unwrap().value.kind,
            ValueKind::String("c".into())
        );
    }
}
