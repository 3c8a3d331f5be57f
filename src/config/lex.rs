//! Lexer for the nats-server configuration language: text in, a flat list of [`Token`]s out.
//!
//! The language is context sensitive (a bare word is a key at the start of an entry and a
//! value after it; `]` ends a word only inside arrays in spirit, but anywhere in practice), so
//! the lexer keeps a stack of contexts (top level, map, array) and decides what a character
//! means from the innermost one. It resolves nothing: variables stay [`TokenKind::Variable`]
//! and includes stay [`TokenKind::Include`]; `parse.rs` handles both.
//!
//! Rules implemented here (checked against `nats-server -t`, v2.15.1):
//! - keys are bare words ending at whitespace, `=` or `:`, or quoted strings; the separator
//!   after a key is `=`, `:` or whitespace alone;
//! - entries end at a new line, `,`, `;`, a comment (`#` or `//`) or the closing `}`;
//! - array elements end at `,`, a new line, a comment or `]` (not `;`, not spaces);
//! - a bare value runs to whitespace, `,`, `;`, `}` or `]`, so `127.0.0.1:4222`,
//!   `URL("http://x/")` and `a#b` are single words, while `a #b` ends at the comment;
//! - numbers take the size suffixes of [`size_multiplier`]; a float with a suffix is an error;
//!   a word that starts with a digit but is neither a number nor a datetime is a string (`1x`,
//!   `1_000`, `1.2.3`); `-` must be followed by a digit;
//! - `$NAME` is a variable, except bcrypt hashes (`$2a$`, `$2b$`, `$2x$`, `$2y$`);
//! - `( ... )` is raw text that ends at a line starting with `)` alone.
//!
//! Invariant: the lexer never panics and never indexes the input; every slice goes through
//! `str::get`. Nesting deeper than [`MAX_DEPTH`] is an error, so later recursive code (the
//! parser, `Drop`) cannot overflow the stack.

use std::path::Path;
use std::sync::Arc;

use super::error::{ConfigError, Location};

/// Deepest allowed nesting of maps and arrays. Real configurations use fewer than ten levels;
/// the limit protects the recursive parser from hostile input.
pub const MAX_DEPTH: usize = 64;

/// What a token is.
#[derive(Debug, Clone, PartialEq)]
pub enum TokenKind {
    /// The key of a map entry, as written (quotes removed).
    Key(String),
    /// An `include <path>` directive, with the path as written.
    Include(String),
    /// `{`
    MapStart,
    /// `}`
    MapEnd,
    /// `[`
    ArrayStart,
    /// `]`
    ArrayEnd,
    /// A quoted, raw, multi-line or bare string value.
    String(String),
    /// An integer value, size suffix already applied.
    Integer(i64),
    /// A floating-point value.
    Float(f64),
    /// `true/false/yes/no/on/off`, any case.
    Bool(bool),
    /// A `YYYY-MM-DDTHH:MM:SSZ` value, kept as written.
    Datetime(String),
    /// A `$NAME` reference, holding `NAME`.
    Variable(String),
}

/// A token with the 1-based line and column of its first character.
#[derive(Debug, Clone, PartialEq)]
pub struct Token {
    /// What was read.
    pub kind: TokenKind,
    /// 1-based line of the first character.
    pub line: u32,
    /// 1-based column (in characters) of the first character.
    pub col: u32,
}

/// Splits `text` into tokens. `file` is used only for error locations.
///
/// # Errors
/// A [`ConfigError`] with the position of the first syntax problem.
pub fn lex(text: &str, file: &Arc<Path>) -> Result<Vec<Token>, ConfigError> {
    Lexer {
        src: text,
        pos: 0,
        line: 1,
        col: 1,
        stack: vec![Ctx::Top],
        tokens: Vec::new(),
        file,
    }
    .run()
}

/// The multiplier for an integer size suffix (case-insensitive), or `None` if `suffix` is not
/// one. Decimal letters are powers of 1000 (`k`, `m`, `g`, `t`, `p`, `e`); `kb`, `ki` and `kib`
/// (and the same for the other letters) are powers of 1024.
pub fn size_multiplier(suffix: &str) -> Option<i64> {
    let lower = suffix.to_ascii_lowercase();
    let (letter, binary) = match lower.as_str() {
        "" => return Some(1),
        s if s.len() == 1 => (s, false),
        s => {
            let letter = s.get(..1)?;
            match s.get(1..)? {
                "b" | "i" | "ib" => (letter, true),
                _ => return None,
            }
        }
    };
    let exp: u32 = match letter {
        "k" => 1,
        "m" => 2,
        "g" => 3,
        "t" => 4,
        "p" => 5,
        "e" => 6,
        _ => return None,
    };
    let base: i64 = if binary { 1024 } else { 1000 };
    base.checked_pow(exp)
}

/// Parses a size such as `64MB`, `1G` or `-1` with the same rules as a bare config integer.
/// Used for size options given as strings (`max_file_store: "1G"`).
pub fn parse_size(text: &str) -> Option<i64> {
    match classify_number(text.trim()) {
        Ok(Some(TokenKind::Integer(n))) => Some(n),
        _ => None,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ctx {
    Top,
    Map,
    Array,
}

struct Lexer<'a> {
    src: &'a str,
    pos: usize,
    line: u32,
    col: u32,
    stack: Vec<Ctx>,
    tokens: Vec<Token>,
    file: &'a Arc<Path>,
}

fn is_space(c: char) -> bool {
    c == ' ' || c == '\t' || c == '\r'
}

/// Characters that end a bare value (besides end of input).
fn ends_bare_value(c: char) -> bool {
    c.is_whitespace() || matches!(c, ',' | ';' | '}' | ']')
}

fn describe(c: Option<char>) -> String {
    match c {
        None => "end of file".to_string(),
        Some('\n') => "a new line".to_string(),
        Some(c) => format!("'{}'", c.escape_debug()),
    }
}

impl Lexer<'_> {
    fn peek(&self) -> Option<char> {
        self.src.get(self.pos..)?.chars().next()
    }

    fn peek2(&self) -> Option<char> {
        let mut chars = self.src.get(self.pos..)?.chars();
        chars.next();
        chars.next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        if c == '\n' {
            self.line = self.line.saturating_add(1);
            self.col = 1;
        } else {
            self.col = self.col.saturating_add(1);
        }
        Some(c)
    }

    fn ctx(&self) -> Ctx {
        self.stack.last().copied().unwrap_or(Ctx::Top)
    }

    fn error_at(&self, line: u32, col: u32, reason: impl Into<String>) -> ConfigError {
        ConfigError::syntax(Location::new(self.file.clone(), line, col), reason)
    }

    fn error_here(&self, reason: impl Into<String>) -> ConfigError {
        self.error_at(self.line, self.col, reason)
    }

    fn push(&mut self, kind: TokenKind, line: u32, col: u32) {
        self.tokens.push(Token { kind, line, col });
    }

    fn at_comment(&self) -> bool {
        match self.peek() {
            Some('#') => true,
            Some('/') => self.peek2() == Some('/'),
            _ => false,
        }
    }

    fn skip_comment(&mut self) {
        while let Some(c) = self.peek() {
            if c == '\n' {
                break;
            }
            self.bump();
        }
    }

    fn skip_spaces(&mut self) {
        while self.peek().is_some_and(is_space) {
            self.bump();
        }
    }

    /// Skips whitespace, new lines and comments; in maps also `,` and `;` (entry terminators).
    fn skip_blank(&mut self, terminators: bool) {
        loop {
            match self.peek() {
                Some(c) if c.is_whitespace() => {
                    self.bump();
                }
                Some(',' | ';') if terminators => {
                    self.bump();
                }
                _ if self.at_comment() => self.skip_comment(),
                _ => break,
            }
        }
    }

    fn run(mut self) -> Result<Vec<Token>, ConfigError> {
        loop {
            match self.ctx() {
                ctx @ (Ctx::Top | Ctx::Map) => {
                    // Inside maps a value consumes its own `,`/`;` (see `end_of_value`), so a
                    // second one starts a key, as in nats-server (`{ ,users: .. }` is the key
                    // ",users").
                    self.skip_blank(ctx == Ctx::Top);
                    match self.peek() {
                        None if ctx == Ctx::Top => return Ok(self.tokens),
                        None => {
                            return Err(self
                                .error_here("unexpected end of file inside a map, expected '}'"))
                        }
                        Some('}') if ctx == Ctx::Map => {
                            let (line, col) = (self.line, self.col);
                            self.bump();
                            self.stack.pop();
                            self.push(TokenKind::MapEnd, line, col);
                            self.end_of_value()?;
                        }
                        Some(_) => self.key_and_value()?,
                    }
                }
                Ctx::Array => {
                    self.skip_blank(false);
                    match self.peek() {
                        None => {
                            return Err(self.error_here(
                                "unexpected end of file inside an array, expected ']'",
                            ))
                        }
                        Some(']') => {
                            let (line, col) = (self.line, self.col);
                            self.bump();
                            self.stack.pop();
                            self.push(TokenKind::ArrayEnd, line, col);
                            self.end_of_value()?;
                        }
                        Some(_) => self.value()?,
                    }
                }
            }
        }
    }

    /// Checks what follows a complete value, in the context that holds the value.
    fn end_of_value(&mut self) -> Result<(), ConfigError> {
        self.skip_spaces();
        if self.ctx() == Ctx::Top {
            // nats-server ignores stray `}` after a top-level value (`port: 1 }`,
            // `jetstream { .. }}`); a `}` that starts a line is a key there, so not here.
            while self.peek() == Some('}') {
                self.bump();
                self.skip_spaces();
            }
        }
        let next = self.peek();
        if self.at_comment() {
            return Ok(());
        }
        match self.ctx() {
            ctx @ (Ctx::Top | Ctx::Map) => {
                match next {
                    Some(',' | ';') if ctx == Ctx::Map => {
                        self.bump();
                        Ok(())
                    }
                    None | Some('\n' | ',' | ';') => Ok(()),
                    Some('}') if ctx == Ctx::Map => Ok(()),
                    other => Err(self.error_here(format!(
                    "expected a value to end with a new line, ',', ';', a comment{}, but got {}",
                    if ctx == Ctx::Map { " or '}'" } else { " or end of file" },
                    describe(other)
                ))),
                }
            }
            Ctx::Array => match next {
                Some(',') => {
                    self.bump();
                    Ok(())
                }
                None | Some('\n' | ']') => Ok(()),
                other => Err(self.error_here(format!(
                    "expected ',' or ']' after an array element, but got {}",
                    describe(other)
                ))),
            },
        }
    }

    fn key_and_value(&mut self) -> Result<(), ConfigError> {
        let (line, col) = (self.line, self.col);
        // Quirks of nats-server kept for compatibility: inside a map a lone `/` before a key
        // is skipped; at top level a final line holding only `}` is ignored.
        if self.ctx() == Ctx::Map && self.peek() == Some('/') && self.peek2() != Some('/') {
            self.bump();
            return Ok(());
        }
        // A `{` where a top-level key is expected opens a block whose keys are top-level keys,
        // as in nats-server: a JSON document (`{ "port": 4222 }`) is a config file. Its `}`
        // is one of the stray ones ignored below and after values.
        if self.ctx() == Ctx::Top && self.peek() == Some('{') {
            self.bump();
            return Ok(());
        }
        if self.ctx() == Ctx::Top
            && self.peek() == Some('}')
            && self
                .src
                .get(self.pos + 1..)
                .is_some_and(|rest| rest.trim().is_empty())
        {
            self.bump();
            return Ok(());
        }
        let (key, quoted) = match self.peek() {
            Some('"') => (self.quoted_string()?, true),
            Some('\'') => (self.raw_string()?, true),
            Some(c @ ('=' | ':' | '{' | '[' | ']' | '}' | '(' | ')')) => {
                return Err(
                    self.error_here(format!("expected a key, but got {}", describe(Some(c))))
                )
            }
            _ => {
                let start = self.pos;
                while self
                    .peek()
                    .is_some_and(|c| !c.is_whitespace() && c != '=' && c != ':')
                {
                    self.bump();
                }
                let key = self.src.get(start..self.pos).unwrap_or_default();
                (key.to_string(), false)
            }
        };

        if !quoted && key.eq_ignore_ascii_case("include") && self.peek().is_some_and(is_space) {
            self.skip_spaces();
            let starts_path = match self.peek() {
                Some('"' | '\'') => true,
                Some(c) => {
                    !ends_bare_value(c) && !matches!(c, '=' | ':' | '{' | '[') && !self.at_comment()
                }
                None => false,
            };
            if starts_path {
                let path = match self.peek() {
                    Some('"') => self.quoted_string()?,
                    Some('\'') => self.raw_string()?,
                    _ => self.bare_word(),
                };
                self.push(TokenKind::Include(path), line, col);
                return self.end_of_value();
            }
        }

        // Without `=` or `:` the value may start on a later line (`debug\n  true`), as in
        // nats-server; after a separator it must be on the same line.
        while self.peek().is_some_and(char::is_whitespace) {
            self.bump();
        }
        let separated = matches!(self.peek(), Some('=' | ':'));
        if separated {
            self.bump();
            self.skip_spaces();
        }
        match self.peek() {
            Some(',') if self.ctx() == Ctx::Map => {
                return Err(self.error_here("unexpected map value terminator ','"))
            }
            // `a = ;` is an empty value in nats-server, not an error.
            Some(',' | ';' | '}') => {
                self.push(TokenKind::Key(key), line, col);
                self.push(TokenKind::String(String::new()), self.line, self.col);
                return self.end_of_value();
            }
            None | Some('\n' | ']') => {
                return Err(self.error_at(line, col, format!("key \"{key}\" has no value")))
            }
            // After `=`/`:` nats-server reads `#` as the start of a value, not a comment.
            Some('#') if separated => {}
            _ if self.at_comment() => {
                return Err(self.error_at(line, col, format!("key \"{key}\" has no value")))
            }
            _ => {}
        }
        self.push(TokenKind::Key(key), line, col);
        self.value()
    }

    fn value(&mut self) -> Result<(), ConfigError> {
        let (line, col) = (self.line, self.col);
        match self.peek() {
            Some(open @ ('{' | '[')) => {
                if self.stack.len() > MAX_DEPTH {
                    return Err(self.error_here(format!(
                        "maps and arrays nested more than {MAX_DEPTH} levels deep"
                    )));
                }
                self.bump();
                if open == '{' {
                    self.stack.push(Ctx::Map);
                    self.push(TokenKind::MapStart, line, col);
                } else {
                    self.stack.push(Ctx::Array);
                    self.push(TokenKind::ArrayStart, line, col);
                }
                Ok(())
            }
            Some('"') => {
                let s = self.quoted_string()?;
                self.push(TokenKind::String(s), line, col);
                self.end_of_value()
            }
            Some('\'') => {
                let s = self.raw_string()?;
                self.push(TokenKind::String(s), line, col);
                self.end_of_value()
            }
            Some('(') => {
                let s = self.block_string()?;
                self.push(TokenKind::String(s), line, col);
                self.end_of_value()
            }
            Some(c) if ends_bare_value(c) => {
                Err(self.error_here(format!("expected a value, but got {}", describe(Some(c)))))
            }
            None => Err(self.error_here("expected a value, but got end of file")),
            Some('.') => Err(self.error_here("floats must start with a digit")),
            Some(_) => {
                let word = self.bare_value();
                let kind =
                    classify_word(&word).map_err(|reason| self.error_at(line, col, reason))?;
                let textual = matches!(
                    kind,
                    TokenKind::String(_) | TokenKind::Bool(_) | TokenKind::Variable(_)
                );
                if textual && self.peek() == Some('\'') {
                    self.bump();
                }
                self.push(kind, line, col);
                self.end_of_value()
            }
        }
    }

    fn bare_word(&mut self) -> String {
        self.bare_word_until(ends_bare_value)
    }

    /// A bare value word, ending at a `'` too: like nats-server, a `'` right after a bare
    /// string is dropped (`ab'` is `ab`), while after a number it is an error.
    fn bare_value(&mut self) -> String {
        self.bare_word_until(|c| ends_bare_value(c) || c == '\'')
    }

    fn bare_word_until(&mut self, stop: impl Fn(char) -> bool) -> String {
        let start = self.pos;
        while self.peek().is_some_and(|c| !stop(c)) {
            self.bump();
        }
        self.src
            .get(start..self.pos)
            .unwrap_or_default()
            .to_string()
    }

    fn quoted_string(&mut self) -> Result<String, ConfigError> {
        let (line, col) = (self.line, self.col);
        self.bump();
        let mut out = String::new();
        loop {
            let Some(c) = self.bump() else {
                return Err(self.error_at(line, col, "unterminated quoted string"));
            };
            match c {
                '"' => return Ok(out),
                '\\' => {
                    let (eline, ecol) = (self.line, self.col.saturating_sub(1));
                    let Some(e) = self.bump() else {
                        return Err(self.error_at(line, col, "unterminated quoted string"));
                    };
                    match e {
                        't' => out.push('\t'),
                        'n' => out.push('\n'),
                        'r' => out.push('\r'),
                        '"' => out.push('"'),
                        '\\' => out.push('\\'),
                        'x' => {
                            let hi = self.bump();
                            let lo = self.bump();
                            let digits = hi.zip(lo).and_then(|(h, l)| Some((h.to_digit(16)?, l.to_digit(16)?)));
                            match digits {
                                // \xHH names a byte; bytes above 0x7F become the Latin-1
                                // character of the same value so the result stays UTF-8.
                                Some((h, l)) => out.push(char::from((h * 16 + l) as u8)),
                                None => {
                                    return Err(self.error_at(
                                        eline,
                                        ecol,
                                        "expected two hexadecimal digits after '\\x'",
                                    ))
                                }
                            }
                        }
                        other => {
                            return Err(self.error_at(
                                eline,
                                ecol,
                                format!(
                                    "invalid escape character {}; only \\xHH, \\t, \\n, \\r, \\\" and \\\\ are allowed",
                                    describe(Some(other))
                                ),
                            ))
                        }
                    }
                }
                c => out.push(c),
            }
        }
    }

    fn raw_string(&mut self) -> Result<String, ConfigError> {
        let (line, col) = (self.line, self.col);
        self.bump();
        let mut out = String::new();
        loop {
            match self.bump() {
                None => return Err(self.error_at(line, col, "unterminated single-quoted string")),
                Some('\'') => return Ok(out),
                Some(c) => out.push(c),
            }
        }
    }

    /// `( ... )`: everything after `(` up to a new line followed by `)` that is itself
    /// followed by a new line or the end of the file. The final new line before `)` is kept.
    fn block_string(&mut self) -> Result<String, ConfigError> {
        let (line, col) = (self.line, self.col);
        self.bump();
        let mut out = String::new();
        loop {
            let Some(c) = self.bump() else {
                return Err(self.error_at(
                    line,
                    col,
                    "unterminated multi-line string: it must end with ')' alone at the start of a line",
                ));
            };
            out.push(c);
            if c == '\n'
                && self.peek() == Some(')')
                && matches!(self.peek2(), None | Some('\n' | '\r'))
            {
                self.bump();
                return Ok(out);
            }
        }
    }
}

fn is_bcrypt(word: &str) -> bool {
    ["$2a$", "$2b$", "$2x$", "$2y$"]
        .iter()
        .any(|p| word.starts_with(p))
}

/// Decides what a bare value word is.
fn classify_word(word: &str) -> Result<TokenKind, String> {
    if let Some(name) = word.strip_prefix('$') {
        if is_bcrypt(word) {
            return Ok(TokenKind::String(word.to_string()));
        }
        if name.is_empty() {
            // A lone `$` is plain text for nats-server.
            return Ok(TokenKind::String(word.to_string()));
        }
        return Ok(TokenKind::Variable(name.to_string()));
    }
    match word.to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" => return Ok(TokenKind::Bool(true)),
        "false" | "no" | "off" => return Ok(TokenKind::Bool(false)),
        _ => {}
    }
    if let Some(kind) = classify_number(word)? {
        return Ok(kind);
    }
    Ok(TokenKind::String(word.to_string()))
}

fn split_digits(s: &str) -> (&str, &str) {
    let n = s.bytes().take_while(u8::is_ascii_digit).count();
    (
        s.get(..n).unwrap_or_default(),
        s.get(n..).unwrap_or_default(),
    )
}

/// Numbers, datetimes, or `None` when the word is a plain string that happens to start
/// with a digit. Errors for `-` without a digit, floats with a suffix and out-of-range values.
fn classify_number(word: &str) -> Result<Option<TokenKind>, String> {
    let (negative, unsigned) = match word.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, word),
    };
    let (int_digits, after) = split_digits(unsigned);
    if int_digits.is_empty() {
        if negative {
            return Err(format!(
                "expected a digit after '-', but got {}",
                describe(unsigned.chars().next())
            ));
        }
        return Ok(None);
    }
    if !negative && after.starts_with('-') {
        return classify_datetime(word).map(Some);
    }
    if let Some(frac) = after.strip_prefix('.') {
        let (frac_digits, rest) = split_digits(frac);
        if frac_digits.is_empty() {
            return Err(format!(
                "floats must have a digit after the '.', but got {}",
                describe(frac.chars().next())
            ));
        }
        if rest.is_empty() {
            return word
                .parse::<f64>()
                .map(|f| Some(TokenKind::Float(f)))
                .map_err(|_| format!("invalid floating-point number \"{word}\""));
        }
        if rest.starts_with(|c: char| c.is_ascii_alphabetic()) {
            return Err(format!(
                "floating-point number \"{word}\" cannot have a size suffix"
            ));
        }
        return Ok(None);
    }
    let Some(multiplier) = size_multiplier(after) else {
        return Ok(None);
    };
    let magnitude: i64 = int_digits
        .parse()
        .map_err(|_| format!("integer \"{word}\" is out of range"))?;
    let value = magnitude
        .checked_mul(multiplier)
        .map(|v| if negative { -v } else { v })
        .ok_or_else(|| format!("integer \"{word}\" is out of range"))?;
    Ok(Some(TokenKind::Integer(value)))
}

/// `YYYY-MM-DDTHH:MM:SSZ` only (Zulu time, as nats-server accepts).
fn classify_datetime(word: &str) -> Result<TokenKind, String> {
    let bad = || format!("invalid datetime \"{word}\": expected YYYY-MM-DDTHH:MM:SSZ");
    let b = word.as_bytes();
    if b.len() != 20 {
        return Err(bad());
    }
    let shape = b"dddd-dd-ddTdd:dd:ddZ";
    let ok = b.iter().zip(shape.iter()).all(|(c, s)| match s {
        b'd' => c.is_ascii_digit(),
        other => c == other,
    });
    if !ok {
        return Err(bad());
    }
    let num = |from: usize, to: usize| -> u32 {
        word.get(from..to)
            .and_then(|s| s.parse().ok())
            .unwrap_or(99)
    };
    let (month, day, hour, minute, second) =
        (num(5, 7), num(8, 10), num(11, 13), num(14, 16), num(17, 19));
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return Err(bad());
    }
    Ok(TokenKind::Datetime(word.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn kinds(text: &str) -> Vec<TokenKind> {
        let file: Arc<Path> = Arc::from(PathBuf::from("t.conf"));
        lex(text, &file)
            .unwrap_or_else(|e| panic!("{e}"))
            .into_iter()
            .map(|t| t.kind)
            .collect()
    }

    fn lex_err(text: &str) -> String {
        let file: Arc<Path> = Arc::from(PathBuf::from("t.conf"));
        lex(text, &file).unwrap_err().to_string()
    }

    fn key(s: &str) -> TokenKind {
        TokenKind::Key(s.into())
    }

    fn string(s: &str) -> TokenKind {
        TokenKind::String(s.into())
    }

    #[test]
    fn all_three_separators_are_accepted() {
        for text in [
            "port = 4222",
            "port: 4222",
            "port 4222",
            "port:4222",
            "port\t4222",
        ] {
            assert_eq!(
                kinds(text),
                vec![key("port"), TokenKind::Integer(4222)],
                "{text}"
            );
        }
    }

    #[test]
    fn entries_end_at_new_lines_commas_and_semicolons() {
        assert_eq!(
            kinds("max_payload = 64KB; max_pending: 10MB\nx: 1, y: 2"),
            vec![
                key("max_payload"),
                TokenKind::Integer(64 * 1024),
                key("max_pending"),
                TokenKind::Integer(10 * 1024 * 1024),
                key("x"),
                TokenKind::Integer(1),
                key("y"),
                TokenKind::Integer(2),
            ]
        );
    }

    #[test]
    fn hash_and_slash_comments_run_to_end_of_line() {
        assert_eq!(
            kinds("# c\n// c\na: b # c\nc: d // e\n"),
            vec![key("a"), string("b"), key("c"), string("d")]
        );
    }

    #[test]
    fn bare_words_keep_colons_slashes_and_inner_hashes() {
        assert_eq!(
            kinds("listen: 127.0.0.1:4222\nresolver: URL(\"http://x/\")\nn: a#b\nm: a//b"),
            vec![
                key("listen"),
                string("127.0.0.1:4222"),
                key("resolver"),
                string("URL(\"http://x/\")"),
                key("n"),
                string("a#b"),
                key("m"),
                string("a//b"),
            ]
        );
    }

    #[test]
    fn size_suffixes_follow_the_spec_table() {
        let cases = [
            ("1k", 1_000),
            ("1K", 1_000),
            ("1kb", 1024),
            ("1Ki", 1024),
            ("1KiB", 1024),
            ("1m", 1_000_000),
            ("1MB", 1 << 20),
            ("1mi", 1 << 20),
            ("1G", 1_000_000_000),
            ("1GB", 1 << 30),
            ("5GB", 5 << 30),
            ("1t", 1_000_000_000_000),
            ("1tb", 1 << 40),
            ("1p", 1_000_000_000_000_000),
            ("1pb", 1 << 50),
            ("1e", 1_000_000_000_000_000_000),
            ("1EB", 1 << 60),
            ("2m", 2_000_000),
            ("-1", -1),
        ];
        for (text, want) in cases {
            assert_eq!(
                kinds(&format!("v: {text}")),
                vec![key("v"), TokenKind::Integer(want)],
                "{text}"
            );
        }
    }

    #[test]
    fn words_that_only_start_with_digits_are_strings() {
        for text in ["1x", "12abc", "1_000", "1.2.3", "127.0.0.1", "1kx"] {
            assert_eq!(
                kinds(&format!("v: {text}")),
                vec![key("v"), string(text)],
                "{text}"
            );
        }
    }

    #[test]
    fn floats_parse_and_reject_suffixes() {
        assert_eq!(kinds("v: 1.5"), vec![key("v"), TokenKind::Float(1.5)]);
        assert_eq!(kinds("v: -0.25"), vec![key("v"), TokenKind::Float(-0.25)]);
        assert!(lex_err("max_payload: 0.5MB").contains("cannot have a size suffix"));
    }

    #[test]
    fn minus_needs_a_digit() {
        assert_eq!(
            lex_err("v: -x"),
            "t.conf:1:4: expected a digit after '-', but got 'x'"
        );
        assert!(lex_err("v: -").contains("expected a digit"));
    }

    #[test]
    fn integers_that_overflow_are_errors() {
        assert!(lex_err("v: 99999999999999999999").contains("out of range"));
        assert!(lex_err("v: 9EB").contains("out of range"));
    }

    #[test]
    fn booleans_are_case_insensitive_keywords() {
        assert_eq!(
            kinds("a: YES; b: Off; c: true; d: FALSE; e: on; f: no"),
            vec![
                key("a"),
                TokenKind::Bool(true),
                key("b"),
                TokenKind::Bool(false),
                key("c"),
                TokenKind::Bool(true),
                key("d"),
                TokenKind::Bool(false),
                key("e"),
                TokenKind::Bool(true),
                key("f"),
                TokenKind::Bool(false),
            ]
        );
    }

    #[test]
    fn double_quoted_strings_support_exactly_the_listed_escapes() {
        assert_eq!(
            kinds(r#"v: "a\tb\nc\rd\"e\\f\x41""#),
            vec![key("v"), string("a\tb\nc\rd\"e\\fA")]
        );
        assert!(lex_err(r#"v: "\u0041""#).contains("invalid escape character 'u'"));
        assert!(lex_err(r#"v: "\x4""#).contains("two hexadecimal digits"));
        assert!(lex_err(r#"v: "abc"#).contains("unterminated"));
    }

    #[test]
    fn single_quoted_strings_are_raw() {
        assert_eq!(kinds(r"v: 'a\tb'"), vec![key("v"), string(r"a\tb")]);
    }

    #[test]
    fn multi_line_strings_end_at_a_lone_closing_paren() {
        assert_eq!(
            kinds("v: (\nabc\n)\nw: 1"),
            vec![key("v"), string("\nabc\n"), key("w"), TokenKind::Integer(1)]
        );
        assert_eq!(kinds("v: (abc def\n)"), vec![key("v"), string("abc def\n")]);
        assert!(lex_err("v: (abc)\n").contains("unterminated multi-line"));
        assert!(lex_err("a { v: (\nx\n) }\n").contains("unterminated multi-line"));
    }

    #[test]
    fn datetimes_are_zulu_only() {
        assert_eq!(
            kinds("d: 2026-01-02T15:04:05Z"),
            vec![key("d"), TokenKind::Datetime("2026-01-02T15:04:05Z".into())]
        );
        assert!(lex_err("d: 2026-01-02T15:04:05+01:00").contains("invalid datetime"));
    }

    #[test]
    fn variables_and_bcrypt_hashes_are_told_apart() {
        assert_eq!(
            kinds("a: $PAYLOAD\nb: $2a$11$abc\nc: \"$X\""),
            vec![
                key("a"),
                TokenKind::Variable("PAYLOAD".into()),
                key("b"),
                string("$2a$11$abc"),
                key("c"),
                string("$X"),
            ]
        );
    }

    #[test]
    fn maps_and_arrays_nest_and_arrays_split_on_commas_or_new_lines() {
        assert_eq!(
            kinds("a { b: [1, 2\n 3,] }\nc: { d = x }"),
            vec![
                key("a"),
                TokenKind::MapStart,
                key("b"),
                TokenKind::ArrayStart,
                TokenKind::Integer(1),
                TokenKind::Integer(2),
                TokenKind::Integer(3),
                TokenKind::ArrayEnd,
                TokenKind::MapEnd,
                key("c"),
                TokenKind::MapStart,
                key("d"),
                string("x"),
                TokenKind::MapEnd,
            ]
        );
        assert!(lex_err("a: [1; 2]").contains("expected ',' or ']'"));
        assert!(lex_err("a: [{x: 1} {x: 2}]").contains("expected ',' or ']'"));
    }

    #[test]
    fn two_values_on_one_line_are_an_error() {
        assert_eq!(
            lex_err("port: 1 port: 2"),
            "t.conf:1:9: expected a value to end with a new line, ',', ';', a comment or end of file, but got 'p'"
        );
    }

    #[test]
    fn include_is_a_directive_only_before_a_path() {
        assert_eq!(
            kinds("include \"a.conf\"\nINCLUDE b.conf\ninclude: 1"),
            vec![
                TokenKind::Include("a.conf".into()),
                TokenKind::Include("b.conf".into()),
                key("include"),
                TokenKind::Integer(1),
            ]
        );
    }

    #[test]
    fn a_key_without_a_value_is_an_error() {
        assert_eq!(lex_err("port\n"), "t.conf:1:1: key \"port\" has no value");
        assert!(lex_err("port:\n1").contains("has no value"));
        assert!(lex_err("port =\n1").contains("has no value"));
    }

    #[test]
    fn nats_server_lexer_quirks_are_kept() {
        // The value may follow on a later line when there is no separator.
        assert_eq!(
            kinds("debug\n  true"),
            vec![key("debug"), TokenKind::Bool(true)]
        );
        // A separator followed by a terminator is an empty value.
        assert_eq!(
            kinds("a = ;\nb: 1"),
            vec![key("a"), string(""), key("b"), TokenKind::Integer(1)]
        );
        assert_eq!(
            kinds("x { a = }"),
            vec![
                key("x"),
                TokenKind::MapStart,
                key("a"),
                string(""),
                TokenKind::MapEnd
            ]
        );
        // Stray `}` after a top-level value is ignored.
        assert_eq!(
            kinds("jetstream { max_mem = 1 }}}\nport: 1 }"),
            vec![
                key("jetstream"),
                TokenKind::MapStart,
                key("max_mem"),
                TokenKind::Integer(1),
                TokenKind::MapEnd,
                key("port"),
                TokenKind::Integer(1),
            ]
        );
        // A single quote ends a bare value.
        assert_eq!(kinds("n: ab'"), vec![key("n"), string("ab")]);
        assert!(lex_err("n: a'b").contains("but got 'b'"));
        // A value cannot start with a dot.
        assert!(lex_err("n: .1").contains("floats must start with a digit"));
        assert!(lex_err("n: 6.abc").contains("floats must have a digit after the '.'"));
        assert!(lex_err("a { n: 0.5' }").contains("but got '\\''"));
        assert_eq!(kinds("a { t: ab' }")[3], string("ab"));
        assert!(lex_err("a { u: , p: c }").contains("unexpected map value terminator"));
        assert_eq!(kinds("a { /b: 1 }")[2], key("b"));
        assert_eq!(
            kinds("port: 1}\n}\n"),
            vec![key("port"), TokenKind::Integer(1)]
        );
        assert!(lex_err("}\nport: 1").contains("expected a key"));
        assert_eq!(kinds("a { ,b: 1 }")[2], key(",b"));
        assert_eq!(kinds("a { b: 1,\n c: 2; }")[4], key("c"));
        assert_eq!(kinds("r:#MEM")[1], string("#MEM"));
        assert_eq!(kinds("a: $")[1], string("$"));
        assert!(lex_err("d: 20260-01-02T15:04:05Z").contains("invalid datetime"));
        assert!(lex_err("n: ]").contains("has no value"));
    }

    #[test]
    fn unclosed_blocks_are_errors() {
        assert!(lex_err("a {").contains("inside a map"));
        assert!(lex_err("a [").contains("inside an array"));
        assert!(kinds("}").is_empty());
    }

    #[test]
    fn deep_nesting_is_refused_without_overflowing() {
        let text = format!("a: {}", "[".repeat(10_000));
        assert!(lex_err(&text).contains("nested more than"));
    }

    #[test]
    fn positions_are_one_based_lines_and_columns() {
        let file: Arc<Path> = Arc::from(PathBuf::from("t.conf"));
        let toks = lex("a: 1\n  bb: \"x\"", &file).unwrap();
        let pos: Vec<(u32, u32)> = toks.iter().map(|t| (t.line, t.col)).collect();
        assert_eq!(pos, vec![(1, 1), (1, 4), (2, 3), (2, 7)]);
    }

    #[test]
    fn crlf_line_endings_work() {
        assert_eq!(
            kinds("port: 1\r\nserver_name: a\r\n"),
            vec![
                key("port"),
                TokenKind::Integer(1),
                key("server_name"),
                string("a")
            ]
        );
    }

    #[test]
    fn parse_size_accepts_the_same_suffixes() {
        assert_eq!(parse_size("1G"), Some(1_000_000_000));
        assert_eq!(parse_size("1GB"), Some(1 << 30));
        assert_eq!(parse_size("abc"), None);
    }
}
