//! A small JSON reader for the diag feed's lines: a tree borrowed from the line (strings
//! without escapes are not copied), numbers parsed by the standard library's correctly
//! rounded `f64` parser — the same value Python's `json` gives, which the reference client
//! reads, so the two clients start from identical inputs.

use std::borrow::Cow;

/// One JSON value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    Null,
    Bool(bool),
    /// A number; `true` when it was written as an integer (no fraction, no exponent).
    Num(f64, bool),
    Str(Cow<'a, str>),
    Arr(Vec<Value<'a>>),
    /// Members in the order written (a repeated key: the last one counts, as in Python).
    Obj(Vec<(Cow<'a, str>, Value<'a>)>),
}

impl<'a> Value<'a> {
    /// The member `key` of an object (None: not an object, or no such member).
    pub fn get(&self, key: &str) -> Option<&Value<'a>> {
        match self {
            Value::Obj(members) => members.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Value<'a>]> {
        match self {
            Value::Arr(items) => Some(items),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// A finite number (Python's `_float_or_none`: anything else is None).
    pub fn as_finite(&self) -> Option<f64> {
        match self {
            Value::Num(x, _) if x.is_finite() => Some(*x),
            _ => None,
        }
    }
}

/// Why a line is not JSON, and the byte offset in the line where that was found.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonError {
    pub offset: usize,
    pub what: &'static str,
}

impl std::fmt::Display for JsonError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at byte {}", self.what, self.offset)
    }
}

/// Deepest nesting accepted (the feed's messages nest 4 levels).
const MAX_DEPTH: usize = 64;

/// Parse one whole JSON text (surrounding whitespace allowed).
pub fn parse(text: &str) -> Result<Value<'_>, JsonError> {
    let mut p = Parser { s: text.as_bytes(), text, i: 0 };
    let v = p.value(0)?;
    p.ws();
    if p.i != p.s.len() {
        return Err(p.err("text after the value"));
    }
    Ok(v)
}

struct Parser<'a> {
    s: &'a [u8],
    text: &'a str,
    i: usize,
}

impl<'a> Parser<'a> {
    fn err(&self, what: &'static str) -> JsonError {
        JsonError { offset: self.i, what }
    }

    fn ws(&mut self) {
        while self.i < self.s.len() && matches!(self.s[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value<'a>, JsonError> {
        if depth > MAX_DEPTH {
            return Err(self.err("nested too deep"));
        }
        self.ws();
        match self.s.get(self.i) {
            None => Err(self.err("unexpected end")),
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => Ok(Value::Str(self.string()?)),
            Some(b't') => self.literal("true", Value::Bool(true)),
            Some(b'f') => self.literal("false", Value::Bool(false)),
            Some(b'n') => self.literal("null", Value::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.err("unexpected character")),
        }
    }

    fn literal(&mut self, word: &'static str, v: Value<'a>) -> Result<Value<'a>, JsonError> {
        if self.s[self.i..].starts_with(word.as_bytes()) {
            self.i += word.len();
            Ok(v)
        } else {
            Err(self.err("unknown literal"))
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value<'a>, JsonError> {
        self.i += 1;
        // The feed's objects have up to a dozen members: one allocation, not four.
        let mut members = Vec::with_capacity(12);
        self.ws();
        if self.s.get(self.i) == Some(&b'}') {
            self.i += 1;
            return Ok(Value::Obj(members));
        }
        loop {
            self.ws();
            if self.s.get(self.i) != Some(&b'"') {
                return Err(self.err("expected a key"));
            }
            let key = self.string()?;
            self.ws();
            if self.s.get(self.i) != Some(&b':') {
                return Err(self.err("expected ':'"));
            }
            self.i += 1;
            let v = self.value(depth + 1)?;
            members.push((key, v));
            self.ws();
            match self.s.get(self.i) {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    return Ok(Value::Obj(members));
                }
                _ => return Err(self.err("expected ',' or '}'")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value<'a>, JsonError> {
        self.i += 1;
        let mut items = Vec::new();
        self.ws();
        if self.s.get(self.i) == Some(&b']') {
            self.i += 1;
            return Ok(Value::Arr(items));
        }
        loop {
            items.push(self.value(depth + 1)?);
            self.ws();
            match self.s.get(self.i) {
                Some(b',') => self.i += 1,
                Some(b']') => {
                    self.i += 1;
                    return Ok(Value::Arr(items));
                }
                _ => return Err(self.err("expected ',' or ']'")),
            }
        }
    }

    fn string(&mut self) -> Result<Cow<'a, str>, JsonError> {
        self.i += 1;
        let start = self.i;
        // Fast path: no escape before the closing quote (every key of the feed).
        while self.i < self.s.len() {
            match self.s[self.i] {
                b'"' => {
                    let s = &self.text[start..self.i];
                    self.i += 1;
                    return Ok(Cow::Borrowed(s));
                }
                b'\\' => break,
                c if c < 0x20 => return Err(self.err("control character in a string")),
                _ => self.i += 1,
            }
        }
        let mut out = String::from(&self.text[start..self.i]);
        loop {
            match self.s.get(self.i) {
                None => return Err(self.err("unterminated string")),
                Some(b'"') => {
                    self.i += 1;
                    return Ok(Cow::Owned(out));
                }
                Some(b'\\') => {
                    self.i += 1;
                    let c = match self.s.get(self.i) {
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'/') => '/',
                        Some(b'b') => '\u{8}',
                        Some(b'f') => '\u{c}',
                        Some(b'n') => '\n',
                        Some(b'r') => '\r',
                        Some(b't') => '\t',
                        Some(b'u') => {
                            let hi = self.hex4()?;
                            let code = if (0xD800..0xDC00).contains(&hi) && self.s[self.i + 1..].starts_with(b"\\u") {
                                self.i += 2;
                                let lo = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return Err(self.err("bad surrogate pair"));
                                }
                                0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                            } else {
                                hi
                            };
                            char::from_u32(code).unwrap_or('\u{fffd}')
                        }
                        _ => return Err(self.err("bad escape")),
                    };
                    out.push(c);
                    self.i += 1;
                }
                Some(&c) if c < 0x20 => return Err(self.err("control character in a string")),
                Some(_) => {
                    // Copy one UTF-8 character (the text is valid UTF-8).
                    let ch = self.text[self.i..].chars().next().unwrap_or('\u{fffd}');
                    out.push(ch);
                    self.i += ch.len_utf8();
                }
            }
        }
    }

    /// Four hex digits after `\u` (leaves `i` on the last digit).
    fn hex4(&mut self) -> Result<u32, JsonError> {
        let digits = self.s.get(self.i + 1..self.i + 5).ok_or_else(|| self.err("short \\u escape"))?;
        let text = std::str::from_utf8(digits).map_err(|_| self.err("bad \\u escape"))?;
        let v = u32::from_str_radix(text, 16).map_err(|_| self.err("bad \\u escape"))?;
        self.i += 4;
        Ok(v)
    }

    fn number(&mut self) -> Result<Value<'a>, JsonError> {
        let start = self.i;
        let mut integer = true;
        if self.s[self.i] == b'-' {
            self.i += 1;
        }
        let digits = |p: &mut Self| {
            let from = p.i;
            while p.i < p.s.len() && p.s[p.i].is_ascii_digit() {
                p.i += 1;
            }
            p.i > from
        };
        if !digits(self) {
            return Err(self.err("expected digits"));
        }
        if self.s.get(self.i) == Some(&b'.') {
            integer = false;
            self.i += 1;
            if !digits(self) {
                return Err(self.err("expected digits after '.'"));
            }
        }
        if matches!(self.s.get(self.i), Some(b'e' | b'E')) {
            integer = false;
            self.i += 1;
            if matches!(self.s.get(self.i), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if !digits(self) {
                return Err(self.err("expected exponent digits"));
            }
        }
        let x: f64 = self.text[start..self.i].parse().map_err(|_| JsonError { offset: start, what: "bad number" })?;
        Ok(Value::Num(x, integer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_feed_line() {
        let line = r#"{"type_id":"LTE_PHY_Serv_Cell_Measurement","timestamp":1795301447.012,"Subpackets":[{"Current SFN":67,"RSRQ":-11.5625,"FTL SNR Rx[0]":null}],"channel_mcs":20}"#;
        let v = parse(line).unwrap();
        assert_eq!(v.get("type_id").and_then(Value::as_str), Some("LTE_PHY_Serv_Cell_Measurement"));
        assert_eq!(v.get("timestamp"), Some(&Value::Num(1795301447.012, false)));
        let sub = &v.get("Subpackets").unwrap().as_array().unwrap()[0];
        assert_eq!(sub.get("Current SFN"), Some(&Value::Num(67.0, true)));
        assert_eq!(sub.get("FTL SNR Rx[0]"), Some(&Value::Null));
        assert_eq!(v.get("channel_mcs").and_then(Value::as_finite), Some(20.0));
    }

    #[test]
    fn escapes_and_last_key_wins() {
        let v = parse(r#"{"a":"x\"y\u00e9\ud83d\ude00","a":[true,false,null]}"#).unwrap();
        assert_eq!(v.get("a"), Some(&Value::Arr(vec![Value::Bool(true), Value::Bool(false), Value::Null])));
        let v = parse(r#"{"a":"x\"y\u00e9\ud83d\ude00"}"#).unwrap();
        assert_eq!(v.get("a").and_then(Value::as_str), Some("x\"yé😀"));
    }

    #[test]
    fn errors_name_the_byte_offset() {
        assert_eq!(parse(r#"{"a":1,}"#).unwrap_err(), JsonError { offset: 7, what: "expected a key" });
        assert_eq!(parse(r#"{"a":1} x"#).unwrap_err().offset, 8);
        assert_eq!(parse(r#"{"a":-}"#).unwrap_err().what, "expected digits");
        assert_eq!(parse(r#"{"a":"#).unwrap_err().what, "unexpected end");
        assert_eq!(parse(r#"{"a":"abc"#).unwrap_err().what, "unterminated string");
    }

    #[test]
    fn numbers_round_like_python() {
        // Correctly rounded: the nearest double of the decimal text.
        for text in ["1795301447.012625", "-11.5625", "0.1", "1e-7", "123456789012345678"] {
            let want: f64 = text.parse().unwrap();
            assert_eq!(parse(text).unwrap(), Value::Num(want, !text.contains(['.', 'e'])));
        }
    }
}
