//! A forgiving reader of almost-JSON: one pass over the text, never backing up, so its work is
//! linear in the text and every byte it reads is counted.
//!
//! It reads what models write instead of JSON: single-quoted strings, unquoted keys, trailing
//! commas, Python's `True`, `False` and `None`. It refuses everything else (a missing comma, a
//! string left open, a key given twice) rather than guess: a guessed argument is worse than an
//! error the model can correct.

use serde_json::{Map, Value};

/// Nesting deeper than this is refused (serde_json's own limit), so hostile text cannot
/// overflow the stack.
const MAX_DEPTH: u32 = 128;

/// At most this many `{` are tried as the start of the object among prose.
const MAX_STARTS: usize = 32;

/// What the reader had to forgive, as flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Forgiven {
    pub(super) trailing_comma: bool,
    pub(super) single_quotes: bool,
    pub(super) unquoted_key: bool,
    pub(super) python_literal: bool,
}

/// Why the reader gave up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stop {
    /// Not almost-JSON here.
    Invalid,
    /// An object gives a key twice: which one counts is a guess, so nothing is read.
    DuplicateKey,
}

/// One reading of one text.
pub(super) struct Scan<'a> {
    text: &'a [u8],
    pos: usize,
    /// Bytes looked at, consumed or not, including those handed whole to serde_json: the
    /// measure of the reader's work.
    pub(super) steps: usize,
    pub(super) forgiven: Forgiven,
}

impl<'a> Scan<'a> {
    pub(super) fn new(text: &'a str) -> Self {
        Scan {
            text: text.as_bytes(),
            pos: 0,
            steps: 0,
            forgiven: Forgiven::default(),
        }
    }

    /// The whole text as one value, whitespace around it allowed.
    pub(super) fn whole(&mut self) -> Result<Value, Stop> {
        let value = self.value(0)?;
        self.skip_ws();
        if self.peek().is_some() {
            return Err(Stop::Invalid);
        }
        Ok(value)
    }

    /// The first object that reads, among whatever text surrounds it (a Markdown fence, a
    /// sentence), with where it starts and ends. Each try goes on from where the last one
    /// stopped, so no byte is read twice.
    pub(super) fn first_object(&mut self) -> Result<(Value, usize, usize), Stop> {
        for _ in 0..MAX_STARTS {
            let start = self.find(b'{').ok_or(Stop::Invalid)?;
            self.pos = start;
            match self.object(0) {
                Ok(value) => return Ok((value, start, self.pos)),
                Err(Stop::DuplicateKey) => return Err(Stop::DuplicateKey),
                Err(Stop::Invalid) => {
                    // The failed try read up to `pos`; an object that starts inside it is not
                    // looked for (it would be read twice), the next `{` from there on is.
                    self.pos = self.pos.max(start + 1);
                }
            }
        }
        Err(Stop::Invalid)
    }

    /// Whether a `{` follows `pos` anywhere: a second object makes the first a guess.
    pub(super) fn another_object_after(&mut self) -> bool {
        self.find(b'{').is_some()
    }

    fn find(&mut self, byte: u8) -> Option<usize> {
        while let Some(b) = self.peek() {
            if b == byte {
                return Some(self.pos);
            }
            self.pos += 1;
        }
        None
    }

    fn peek(&mut self) -> Option<u8> {
        self.steps += 1;
        self.text.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    fn eat(&mut self, byte: u8) -> bool {
        if self.peek() == Some(byte) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn value(&mut self, depth: u32) -> Result<Value, Stop> {
        if depth > MAX_DEPTH {
            return Err(Stop::Invalid);
        }
        self.skip_ws();
        match self.peek().ok_or(Stop::Invalid)? {
            b'{' => self.object(depth),
            b'[' => self.array(depth),
            b'"' | b'\'' => self.string().map(Value::String),
            b'-' | b'0'..=b'9' => self.number(),
            b if is_word_start(b) => self.literal(),
            _ => Err(Stop::Invalid),
        }
    }

    fn object(&mut self, depth: u32) -> Result<Value, Stop> {
        if !self.eat(b'{') || depth > MAX_DEPTH {
            return Err(Stop::Invalid);
        }
        let mut map = Map::new();
        self.skip_ws();
        if self.eat(b'}') {
            return Ok(Value::Object(map));
        }
        loop {
            let key = self.key()?;
            self.skip_ws();
            if !self.eat(b':') {
                return Err(Stop::Invalid);
            }
            let value = self.value(depth + 1)?;
            if map.insert(key, value).is_some() {
                return Err(Stop::DuplicateKey);
            }
            self.skip_ws();
            if self.eat(b'}') {
                return Ok(Value::Object(map));
            }
            if !self.eat(b',') {
                return Err(Stop::Invalid);
            }
            self.skip_ws();
            if self.eat(b'}') {
                self.forgiven.trailing_comma = true;
                return Ok(Value::Object(map));
            }
        }
    }

    fn array(&mut self, depth: u32) -> Result<Value, Stop> {
        if !self.eat(b'[') {
            return Err(Stop::Invalid);
        }
        let mut items = Vec::new();
        self.skip_ws();
        if self.eat(b']') {
            return Ok(Value::Array(items));
        }
        loop {
            items.push(self.value(depth + 1)?);
            self.skip_ws();
            if self.eat(b']') {
                return Ok(Value::Array(items));
            }
            if !self.eat(b',') {
                return Err(Stop::Invalid);
            }
            self.skip_ws();
            if self.eat(b']') {
                self.forgiven.trailing_comma = true;
                return Ok(Value::Array(items));
            }
        }
    }

    /// A key: a string in either quotes, or a bare word (`city`, `max_results`).
    fn key(&mut self) -> Result<String, Stop> {
        self.skip_ws();
        match self.peek().ok_or(Stop::Invalid)? {
            b'"' | b'\'' => self.string(),
            b if is_word_start(b) => {
                self.forgiven.unquoted_key = true;
                Ok(self.word().to_owned())
            }
            _ => Err(Stop::Invalid),
        }
    }

    /// A string in double or single quotes, its escapes read as JSON reads them.
    fn string(&mut self) -> Result<String, Stop> {
        let quote = self.peek().ok_or(Stop::Invalid)?;
        let start = self.pos;
        self.pos += 1;
        // Finds the closing quote, stepping over escapes.
        loop {
            match self.peek().ok_or(Stop::Invalid)? {
                b'\\' => {
                    self.pos += 1;
                    self.peek().ok_or(Stop::Invalid)?;
                    self.pos += 1;
                }
                b if b == quote => break,
                _ => self.pos += 1,
            }
        }
        let body = &self.text[start + 1..self.pos];
        self.pos += 1;
        self.steps += body.len();
        let json = if quote == b'"' {
            std::borrow::Cow::Borrowed(&self.text[start..self.pos])
        } else {
            self.forgiven.single_quotes = true;
            std::borrow::Cow::Owned(double_quoted(body))
        };
        serde_json::from_slice(&json).map_err(|_| Stop::Invalid)
    }

    fn number(&mut self) -> Result<Value, Stop> {
        let start = self.pos;
        while let Some(b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') = self.peek() {
            self.pos += 1;
        }
        let token = &self.text[start..self.pos];
        self.steps += token.len();
        match serde_json::from_slice(token) {
            Ok(number @ Value::Number(_)) => Ok(number),
            _ => Err(Stop::Invalid),
        }
    }

    /// `true`, `false`, `null`, or Python's `True`, `False`, `None`.
    fn literal(&mut self) -> Result<Value, Stop> {
        let value = match self.word() {
            "true" => return Ok(Value::Bool(true)),
            "false" => return Ok(Value::Bool(false)),
            "null" => return Ok(Value::Null),
            "True" => Value::Bool(true),
            "False" => Value::Bool(false),
            "None" => Value::Null,
            _ => return Err(Stop::Invalid),
        };
        self.forgiven.python_literal = true;
        Ok(value)
    }

    /// A bare word: a letter, `_` or `$`, then letters, digits, `_`, `-` or `$`.
    fn word(&mut self) -> &'a str {
        let start = self.pos;
        while let Some(b) = self.peek() {
            if !(is_word_start(b) || b.is_ascii_digit() || b == b'-') {
                break;
            }
            self.pos += 1;
        }
        let text: &'a [u8] = self.text;
        // Only ASCII bytes were taken, so the slice is UTF-8.
        std::str::from_utf8(&text[start..self.pos]).unwrap_or_default()
    }
}

fn is_word_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b == b'$'
}

/// The body of a single-quoted string as a double-quoted JSON string: `\'` becomes `'` and a
/// bare `"` is escaped; every other escape is kept for serde_json to read.
fn double_quoted(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 2);
    out.push(b'"');
    let mut bytes = body.iter().copied();
    while let Some(b) = bytes.next() {
        match b {
            b'\\' => match bytes.next() {
                Some(b'\'') => out.push(b'\''),
                Some(next) => out.extend_from_slice(&[b'\\', next]),
                None => out.push(b'\\'),
            },
            b'"' => out.extend_from_slice(b"\\\""),
            _ => out.push(b),
        }
    }
    out.push(b'"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn whole(text: &str) -> Result<(Value, Forgiven), Stop> {
        let mut scan = Scan::new(text);
        scan.whole().map(|value| (value, scan.forgiven))
    }

    #[test]
    fn reads_what_models_write_instead_of_json() {
        let (value, forgiven) =
            whole("{city: 'Oslo', 'days': [1, 2,], ok: True, note: None,}").unwrap();
        assert_eq!(
            value,
            json!({"city": "Oslo", "days": [1, 2], "ok": true, "note": null})
        );
        assert_eq!(
            forgiven,
            Forgiven {
                trailing_comma: true,
                single_quotes: true,
                unquoted_key: true,
                python_literal: true,
            }
        );
    }

    #[test]
    fn single_quoted_strings_keep_their_escapes_and_double_quotes() {
        let (value, _) = whole(r#"{'q': 'it\'s "here"\n\u00e9'}"#).unwrap();
        assert_eq!(value, json!({"q": "it's \"here\"\n\u{e9}"}));
    }

    #[test]
    fn refuses_rather_than_guesses() {
        for text in [
            r#"{"a": 1 "b": 2}"#,   // a missing comma
            r#"{"a": "open}"#,      // a string left open
            r#"{"a": undefined}"#,  // not a literal of JSON or Python
            r#"{"a": 01.2.3}"#,     // not a number
            r#"{"a": 1,,}"#,        // two commas
            r#"{"a": 1} trailing"#, // text after the whole value
        ] {
            assert_eq!(whole(text).unwrap_err(), Stop::Invalid, "{text}");
        }
        assert_eq!(whole(r#"{"a": 1, a: 2}"#).unwrap_err(), Stop::DuplicateKey);
    }

    #[test]
    fn deep_nesting_is_refused_without_overflowing() {
        let text = "[".repeat(100_000);
        assert_eq!(whole(&text).unwrap_err(), Stop::Invalid);
        let text = "{a:".repeat(100_000);
        assert_eq!(whole(&text).unwrap_err(), Stop::Invalid);
    }

    #[test]
    fn finds_the_object_after_braces_that_are_not_one() {
        let text = r#"Use {name} as before: {"name": "x"} done"#;
        let mut scan = Scan::new(text);
        let (value, start, end) = scan.first_object().unwrap();
        assert_eq!(value, json!({"name": "x"}));
        assert_eq!(&text[start..end], r#"{"name": "x"}"#);
        assert!(!scan.another_object_after());
    }
}
