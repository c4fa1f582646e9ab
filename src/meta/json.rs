//! A small, lenient JSON reader for Zarr metadata objects.
//!
//! serde_json cannot be used directly on these objects for two reasons: xarray/zarr-python
//! write bare `NaN`/`Infinity` literals (invalid JSON), and netcdf-c shows an attribute whose
//! value is a JSON structure as the text of that structure *with the numbers spelled as they
//! were stored* (`[0.,0.,1.]` stays `[0.,0.,1.]`). So numbers keep their lexeme here, objects
//! keep their key order, and [`Json::unparse`] reproduces netcdf-c's spelling.

use std::collections::HashMap;

use crate::error::capped;
use crate::{Error, Result};

/// A parsed JSON value; numbers keep their source text.
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    /// `null`
    Null,
    /// `true` / `false`
    Bool(bool),
    /// A number as written (`1`, `-2.5e3`, `0.`), or `NaN`, `Infinity`, `-Infinity`.
    Num(String),
    /// A string with escapes decoded.
    Str(String),
    /// A string whose bytes are not UTF-8: netcdf-c writes a char attribute's bytes into the
    /// JSON as they are, whatever they are.
    Bytes(Vec<u8>),
    /// An array.
    Arr(Vec<Json>),
    /// An object, in stored key order.
    Obj(Vec<(String, Json)>),
}

impl Json {
    /// Parses `text` (the content of the object at `key`, used in error messages).
    ///
    /// Bytes that are not UTF-8 are accepted inside string values only (see [`Json::Bytes`]).
    pub fn parse(key: &str, text: &[u8]) -> Result<Json> {
        let mut p = Parser {
            key,
            s: text,
            pos: 0,
        };
        p.ws();
        let v = p.value(0)?;
        p.ws();
        if p.pos != p.s.len() {
            return Err(p.err("trailing characters after the JSON value"));
        }
        Ok(v)
    }

    /// The member `name` of an object.
    pub fn get(&self, name: &str) -> Option<&Json> {
        match self {
            Json::Obj(members) => members.iter().find(|(k, _)| k == name).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The string content, if this is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The value as a non-negative integer, if it is a number spelled as one.
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Json::Num(n) => n.parse().ok(),
            _ => None,
        }
    }

    /// Whether the value is a number or one of the non-finite literals.
    pub fn is_number(&self) -> bool {
        matches!(self, Json::Num(_))
    }

    /// The text netcdf-c shows for a JSON-valued attribute: arrays as `[a,b]`, objects as
    /// `{"k": v, "k2": w}`, numbers as stored.
    pub fn unparse(&self) -> String {
        let mut out = String::new();
        self.unparse_into(&mut out);
        out
    }

    fn unparse_into(&self, out: &mut String) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Num(n) => out.push_str(n),
            Json::Str(s) => quote_into(s, out),
            Json::Bytes(b) => quote_into(&String::from_utf8_lossy(b), out),
            Json::Arr(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    v.unparse_into(out);
                }
                out.push(']');
            }
            Json::Obj(members) => {
                out.push('{');
                for (i, (k, v)) in members.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    quote_into(k, out);
                    out.push_str(": ");
                    v.unparse_into(out);
                }
                out.push('}');
            }
        }
    }

    /// Converts to a serde_json value (codec descriptions are handed on in that form);
    /// non-finite numbers become the strings `"NaN"`, `"Infinity"`, `"-Infinity"`.
    pub fn to_serde(&self) -> serde_json::Value {
        self.to_serde_with(false)
    }

    /// [`Json::to_serde`] that keeps the bare tokens `NaN`, `Infinity` and `-Infinity` as they
    /// are (see [`bare_non_finite`]) for a writer that puts the value back where it was read.
    pub fn to_serde_keeping_bare_tokens(&self) -> serde_json::Value {
        self.to_serde_with(true)
    }

    fn to_serde_with(&self, bare: bool) -> serde_json::Value {
        use serde_json::Value;
        match self {
            Json::Null => Value::Null,
            Json::Bool(b) => Value::Bool(*b),
            Json::Num(n) => {
                if let Ok(i) = n.parse::<i64>() {
                    Value::from(i)
                } else if let Ok(u) = n.parse::<u64>() {
                    Value::from(u)
                } else {
                    match n.parse::<f64>() {
                        Ok(f) if f.is_finite() => Value::from(f),
                        Ok(f) if bare => bare_non_finite(f),
                        _ => Value::String(n.clone()),
                    }
                }
            }
            Json::Str(s) => Value::String(s.clone()),
            Json::Bytes(b) => Value::String(carry_raw_bytes(b)),
            Json::Arr(items) => Value::Array(items.iter().map(|j| j.to_serde_with(bare)).collect()),
            Json::Obj(members) => Value::Object(
                members
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_serde_with(bare)))
                    .collect(),
            ),
        }
    }
}

/// Where [`carry_raw_bytes`] and [`carry_controls_raw`] put a byte `b` that the JSON must hold
/// as it is: the character `RAW_BYTE_BASE + b`, in the last private-use plane, which no text
/// of a dataset uses.
const RAW_BYTE_BASE: u32 = 0x10_FF00;

/// Where [`bare_non_finite`] puts its tokens: the character `BARE_TOKEN_BASE + i` for
/// `BARE_TOKENS[i]`, between the stand-ins of control bytes and those of bytes 0x80 and up.
const BARE_TOKEN_BASE: u32 = RAW_BYTE_BASE + 0x40;

/// The bare tokens that [`bare_non_finite`] stands in for.
const BARE_TOKENS: [&[u8]; 3] = [b"NaN", b"Infinity", b"-Infinity"];

/// Text for `bytes` that a `serde_json` value can hold: valid UTF-8 as it is, every other byte
/// as a stand-in character that [`restore_raw_bytes`] turns back into the byte once the value
/// is serialized. netcdf-c writes a char attribute's bytes into the JSON as they are, and
/// reads them back so; this is how nczarrfs writes them too.
pub fn carry_raw_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for &b in chunk.invalid() {
            out.extend(char::from_u32(RAW_BYTE_BASE + u32::from(b)));
        }
    }
    out
}

/// `text` with its control characters other than `\b`, `\f`, `\n`, `\r` and `\t` as
/// stand-ins that [`restore_raw_bytes`] writes as the bytes themselves, not as the `\u00XX`
/// escapes JSON asks for. That is how netcdf-c writes them, and the only way it reads them
/// back: it does not decode `\u` escapes (so `"a\u0001"` reads as `au0001`), while strict JSON
/// readers such as Python's refuse the raw bytes. For NCZarr, which is for netcdf-c.
pub fn carry_controls_raw(text: String) -> String {
    if !text.bytes().any(is_raw_control) {
        return text;
    }
    text.chars()
        .map(|c| match u8::try_from(c) {
            Ok(b) if is_raw_control(b) => char::from_u32(RAW_BYTE_BASE + u32::from(b)).unwrap_or(c),
            _ => c,
        })
        .collect()
}

/// A control byte that JSON has no short escape for.
fn is_raw_control(b: u8) -> bool {
    b < 0x20 && !matches!(b, b'\x08' | b'\x0c' | b'\n' | b'\r' | b'\t')
}

/// The byte a stand-in character of [`carry_raw_bytes`] stands for.
pub fn raw_byte_of(c: char) -> Option<u8> {
    let b = u32::from(c).checked_sub(RAW_BYTE_BASE)?;
    u8::try_from(b).ok().filter(|b| *b >= 0x80)
}

/// `x` as a JSON number, or, when it is not finite, a string that [`restore_raw_bytes`] writes
/// as the bare token `NaN`, `Infinity` or `-Infinity`. That is not JSON, but it is how
/// Python's `json` (zarr-python) and netcdf-c 4.9.0 write such floats, and the only spelling
/// 4.9.0 reads.
pub fn bare_non_finite(x: f64) -> serde_json::Value {
    let token = if x.is_nan() {
        0
    } else if x == f64::INFINITY {
        1
    } else if x == f64::NEG_INFINITY {
        2
    } else {
        return serde_json::json!(x);
    };
    serde_json::Value::String(
        char::from_u32(BARE_TOKEN_BASE + token)
            .into_iter()
            .collect(),
    )
}

/// Serialized JSON with the stand-ins of [`carry_raw_bytes`] and [`carry_controls_raw`]
/// replaced by their bytes, and those of [`bare_non_finite`], quotes included, by their
/// tokens.
pub fn restore_raw_bytes(json: Vec<u8>) -> Vec<u8> {
    // The stand-ins U+10FF00..U+10FFFF in UTF-8: F4 8F BC..BF xx.
    let marked = |w: &[u8]| w[0] == 0xF4 && w[1] == 0x8F && (0xBC..=0xBF).contains(&w[2]);
    if !json.windows(3).any(marked) {
        return json;
    }
    let mut out = Vec::with_capacity(json.len());
    let mut i = 0;
    while i < json.len() {
        let rest = &json[i..];
        let code = (rest.len() >= 4 && marked(rest))
            .then(|| std::str::from_utf8(&rest[..4]).ok()?.chars().next())
            .flatten()
            .map(u32::from);
        let token = code
            .and_then(|c| c.checked_sub(BARE_TOKEN_BASE))
            .and_then(|t| BARE_TOKENS.get(t as usize));
        match (code, token) {
            // A token stands alone in its string: the quotes around it go too.
            (Some(_), Some(token))
                if i > 0 && json[i - 1] == b'"' && rest.get(4) == Some(&b'"') =>
            {
                out.pop();
                out.extend_from_slice(token);
                i += 5;
            }
            (Some(c), _) => {
                out.push((c - RAW_BYTE_BASE) as u8);
                i += 4;
            }
            (None, _) => {
                out.push(json[i]);
                i += 1;
            }
        }
    }
    out
}

/// The first lone UTF-16 surrogate that JSON `text` escapes (`\ud800` not followed by a
/// low surrogate, or a low one alone), which [`Json::parse`] reads as U+FFFD.
pub fn lone_surrogate(text: &[u8]) -> Option<u32> {
    let hex4 = |at: usize| -> Option<u32> {
        let h = std::str::from_utf8(text.get(at..at + 4)?).ok()?;
        u32::from_str_radix(h, 16).ok()
    };
    let mut i = 0;
    while i < text.len() {
        if text[i] != b'\\' {
            i += 1;
            continue;
        }
        if text.get(i + 1) != Some(&b'u') {
            i += 2;
            continue;
        }
        let Some(cp) = hex4(i + 2) else {
            i += 2;
            continue;
        };
        i += 6;
        match cp {
            0xD800..0xDC00 => {
                let low = text.get(i..i + 2) == Some(b"\\u")
                    && hex4(i + 2).is_some_and(|lo| (0xDC00..0xE000).contains(&lo));
                if !low {
                    return Some(cp);
                }
                i += 6;
            }
            0xDC00..0xE000 => return Some(cp),
            _ => {}
        }
    }
    None
}

/// The complaint about a metadata field that does not hold the one value allowed:
/// `zarr_format "3" is not 3`, showing the value as written (cut by [`capped`]), or
/// `zarr_format is missing (it must be 3)`.
pub fn not_expected(field: &str, value: Option<&Json>, expected: &str) -> String {
    match value {
        Some(v) => format!("{field} {} is not {expected}", capped(&v.unparse())),
        None => format!("{field} is missing (it must be {expected})"),
    }
}

/// Appends `s` as a JSON string literal (quotes, backslashes and control characters escaped).
pub fn quote_into(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Nesting deeper than this is refused rather than risking the stack.
const MAX_DEPTH: usize = 256;

/// Members of an object looked through for a repeated key before an index of them is built.
const SCANNED_MEMBERS: usize = 32;

struct Parser<'a> {
    key: &'a str,
    s: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn err(&self, reason: &str) -> Error {
        let upto = &self.s[..self.pos.min(self.s.len())];
        let line = upto.iter().filter(|b| **b == b'\n').count() + 1;
        let column = upto.len() - upto.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1) + 1;
        Error::CorruptJson {
            key: self.key.to_string(),
            line,
            column,
            reason: reason.to_string(),
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn literal(&mut self, word: &str) -> bool {
        if self.s[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            true
        } else {
            false
        }
    }

    fn value(&mut self, depth: usize) -> Result<Json> {
        if depth > MAX_DEPTH {
            return Err(self.err("nesting too deep"));
        }
        match self.peek() {
            None => Err(self.err("unexpected end of input")),
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => Ok(match String::from_utf8(self.string()?) {
                Ok(text) => Json::Str(text),
                Err(e) => Json::Bytes(e.into_bytes()),
            }),
            Some(b't') if self.literal("true") => Ok(Json::Bool(true)),
            Some(b'f') if self.literal("false") => Ok(Json::Bool(false)),
            Some(b'n') if self.literal("null") => Ok(Json::Null),
            Some(b'N') if self.literal("NaN") => Ok(Json::Num("NaN".into())),
            Some(b'I') if self.literal("Infinity") => Ok(Json::Num("Infinity".into())),
            Some(b'-') if self.literal("-Infinity") => Ok(Json::Num("-Infinity".into())),
            Some(b'-' | b'+' | b'.' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.err("expected a JSON value")),
        }
    }

    fn number(&mut self) -> Result<Json> {
        let start = self.pos;
        if matches!(self.peek(), Some(b'-' | b'+')) {
            self.pos += 1;
        }
        let mut digits = 0;
        while let Some(c) = self.peek() {
            match c {
                b'0'..=b'9' => digits += 1,
                b'.' => {}
                b'e' | b'E' => {
                    // The exponent may carry its own sign.
                    if matches!(self.s.get(self.pos + 1), Some(b'-' | b'+')) {
                        self.pos += 1;
                    }
                }
                _ => break,
            }
            self.pos += 1;
        }
        let text = std::str::from_utf8(&self.s[start..self.pos]).unwrap_or_default();
        // Accept C-style spellings (`0.`, `.5`) that netcdf-c writes, but not garbage.
        let canonical = text.strip_prefix('+').unwrap_or(text);
        if digits == 0 || canonical.parse::<f64>().is_err() {
            self.pos = start;
            return Err(self.err("malformed number"));
        }
        Ok(Json::Num(canonical.to_string()))
    }

    fn hex4(&mut self) -> Result<u32> {
        let h = self
            .s
            .get(self.pos..self.pos + 4)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            .ok_or_else(|| self.err("bad \\u escape"))?;
        self.pos += 4;
        Ok(h)
    }

    fn string(&mut self) -> Result<Vec<u8>> {
        let start = self.pos;
        self.pos += 1; // opening quote
                       // Most strings have no escape: they are copied in one piece.
        let rest = &self.s[self.pos.min(self.s.len())..];
        let plain = rest.iter().position(|&c| c == b'"' || c == b'\\');
        let mut out: Vec<u8> = match plain {
            Some(n) if rest[n] == b'"' => {
                self.pos += n + 1;
                return Ok(rest[..n].to_vec());
            }
            Some(n) => {
                self.pos += n;
                rest[..n].to_vec()
            }
            None => {
                self.pos = self.s.len();
                return Err(self.err("unterminated string"));
            }
        };
        // The first escape of a lone UTF-16 surrogate, if any.
        let mut lone = None;
        loop {
            let Some(c) = self.peek() else {
                return Err(self.err("unterminated string"));
            };
            self.pos += 1;
            match c {
                b'"' => break,
                b'\\' => {
                    let Some(e) = self.peek() else {
                        return Err(self.err("unterminated string"));
                    };
                    self.pos += 1;
                    match e {
                        b'"' => out.push(b'"'),
                        b'\\' => out.push(b'\\'),
                        b'/' => out.push(b'/'),
                        b'b' => out.push(8),
                        b'f' => out.push(12),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'u' => {
                            let cp = self.hex4()?;
                            let ch = match cp {
                                0xD800..0xDC00 => self
                                    .low_surrogate()
                                    .map(|lo| 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00)),
                                _ => Some(cp),
                            }
                            .and_then(char::from_u32);
                            // Python's json (zarr-python) writes one, and reads it back as
                            // itself; no Rust string can hold it.
                            let ch = ch.unwrap_or_else(|| {
                                lone.get_or_insert(cp);
                                '\u{FFFD}'
                            });
                            let mut buf = [0u8; 4];
                            out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                        }
                        _ => return Err(self.err("bad escape in string")),
                    }
                }
                c => out.push(c),
            }
        }
        if let Some(cp) = lone {
            log::warn!(
                "{}: the JSON string {} holds \\u{cp:04x}, a lone UTF-16 surrogate, which is not \
                 Unicode: it reads as U+FFFD",
                self.key,
                capped(&String::from_utf8_lossy(&self.s[start..self.pos]))
            );
        }
        Ok(out)
    }

    /// The low surrogate escaped next (`\udc00` to `\udfff`), which completes a high one; the
    /// position stays when none follows (what follows is read for itself).
    fn low_surrogate(&mut self) -> Option<u32> {
        let at = self.pos;
        if self.literal("\\u") {
            if let Ok(lo @ 0xDC00..0xE000) = self.hex4() {
                return Some(lo);
            }
        }
        self.pos = at;
        None
    }

    fn array(&mut self, depth: usize) -> Result<Json> {
        self.pos += 1;
        let mut items = Vec::new();
        self.ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Json::Arr(items));
        }
        loop {
            self.ws();
            items.push(self.value(depth + 1)?);
            self.ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Json::Arr(items));
                }
                _ => return Err(self.err("expected ',' or ']'")),
            }
        }
    }

    fn object(&mut self, depth: usize) -> Result<Json> {
        self.pos += 1;
        let mut members: Vec<(String, Json)> = Vec::new();
        // Where each key is, once there are too many members to look through: a consolidated
        // `.zmetadata` has one per object of the dataset.
        let mut index: HashMap<String, usize> = HashMap::new();
        self.ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Json::Obj(members));
        }
        loop {
            self.ws();
            if self.peek() != Some(b'"') {
                return Err(self.err("expected a string key"));
            }
            let k = String::from_utf8(self.string()?)
                .map_err(|_| self.err("member name is not UTF-8"))?;
            self.ws();
            if self.peek() != Some(b':') {
                return Err(self.err("expected ':'"));
            }
            self.pos += 1;
            self.ws();
            let v = self.value(depth + 1)?;
            // A repeated key replaces the earlier value, as in every JSON library.
            if members.len() == SCANNED_MEMBERS && index.is_empty() {
                index.extend(members.iter().enumerate().map(|(i, (n, _))| (n.clone(), i)));
            }
            let earlier = if members.len() < SCANNED_MEMBERS {
                members.iter().position(|(name, _)| *name == k)
            } else {
                index.get(&k).copied()
            };
            match earlier {
                Some(i) => members[i].1 = v,
                None => {
                    if members.len() >= SCANNED_MEMBERS {
                        index.insert(k.clone(), members.len());
                    }
                    members.push((k, v));
                }
            }
            self.ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(Json::Obj(members));
                }
                _ => return Err(self.err("expected ',' or '}'")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_non_finite_tokens_are_written_unquoted_and_read_back() {
        let v = serde_json::json!({"a": [bare_non_finite(f64::NAN), bare_non_finite(1.5)],
            "b": bare_non_finite(f64::INFINITY), "c": bare_non_finite(f64::NEG_INFINITY),
            "d": "NaN"});
        let text = restore_raw_bytes(serde_json::to_vec(&v).unwrap());
        assert_eq!(
            String::from_utf8(text.clone()).unwrap(),
            r#"{"a":[NaN,1.5],"b":Infinity,"c":-Infinity,"d":"NaN"}"#
        );
        let back = Json::parse("k", &text).unwrap();
        assert!(matches!(back.get("a"), Some(Json::Arr(a)) if a[0] == Json::Num("NaN".into())));
        assert_eq!(back.get("c"), Some(&Json::Num("-Infinity".into())));
    }

    #[test]
    fn a_repeated_key_replaces_its_value_in_place_in_objects_of_any_size() {
        for n in [3usize, 31, 32, 33, 200] {
            let mut text: Vec<String> = (0..n).map(|i| format!("\"k{i}\": {i}")).collect();
            // Repeats of the first and the last key, after all the others.
            text.push("\"k0\": \"first again\"".into());
            text.push(format!("\"k{}\": \"last again\"", n - 1));
            let j = Json::parse("t", format!("{{{}}}", text.join(", ")).as_bytes()).unwrap();
            let Json::Obj(members) = &j else {
                panic!("not an object")
            };
            let keys: Vec<String> = members.iter().map(|(k, _)| k.clone()).collect();
            let want: Vec<String> = (0..n).map(|i| format!("k{i}")).collect();
            assert_eq!(keys, want, "{n} members");
            assert_eq!(j.get("k0").and_then(Json::as_str), Some("first again"));
            let last = format!("k{}", n - 1);
            assert_eq!(j.get(&last).and_then(Json::as_str), Some("last again"));
            if n > 2 {
                assert_eq!(j.get("k1").and_then(Json::as_u64), Some(1));
            }
        }
    }

    fn p(s: &str) -> Json {
        Json::parse("k", s.as_bytes()).unwrap()
    }

    #[test]
    fn keeps_order_and_lexemes() {
        let v = p(r#"{"b": [0.,0.,1.], "a": 1.0, "c": NaN, "d": -Infinity}"#);
        let Json::Obj(m) = &v else { panic!() };
        assert_eq!(m[0].0, "b");
        assert_eq!(m[1].1, Json::Num("1.0".into()));
        assert_eq!(m[2].1, Json::Num("NaN".into()));
        assert_eq!(m[3].1, Json::Num("-Infinity".into()));
        assert_eq!(v.get("b").unwrap().unparse(), "[0.,0.,1.]");
    }

    #[test]
    fn unparse_like_netcdf_c() {
        // Expected text from ref_jsonconvention.cdl (varjson1).
        let v = p(r#"{"key1": [1,2,3], "key2": {"key3": "abc"}}"#);
        assert_eq!(v.unparse(), r#"{"key1": [1,2,3], "key2": {"key3": "abc"}}"#);
        let v = p("[ [1.0, 0.0] , [\"a\\\"b\"] ]");
        assert_eq!(v.unparse(), r#"[[1.0,0.0],["a\"b"]]"#);
    }

    #[test]
    fn decodes_unicode_escapes() {
        assert_eq!(
            p(r#""caf\u00e9 \ud83d\ude00""#),
            Json::Str("café 😀".into())
        );
    }

    #[test]
    fn lone_surrogates_read_as_replacement_characters_and_are_found() {
        // What Python's json reads back as the surrogate itself: no Rust string holds one.
        for (text, lone, read) in [
            (r#""x\ud800y""#, Some(0xD800), "x\u{FFFD}y"),
            (r#""\udc00""#, Some(0xDC00), "\u{FFFD}"),
            // A high surrogate before an escape that is no low one: both are read.
            (r#""\ud800\u0041""#, Some(0xD800), "\u{FFFD}A"),
            (r#""\ud800\ud800\udc00""#, Some(0xD800), "\u{FFFD}\u{10000}"),
            (r#""\ud83d\ude00""#, None, "\u{1F600}"),
            (r#""\\ud800""#, None, "\\ud800"),
            (r#""\u00e9""#, None, "\u{e9}"),
        ] {
            assert_eq!(lone_surrogate(text.as_bytes()), lone, "{text}");
            assert_eq!(p(text), Json::Str(read.to_string()), "{text}");
        }
        assert_eq!(lone_surrogate(br#"{"a\ud800": 1}"#), Some(0xD800));
        assert_eq!(
            lone_surrogate(br#"{"a": "\n\"\\", "b": "\udfff"}"#),
            Some(0xDFFF)
        );
        assert!(Json::parse("k", br#""\ud800\uzzzz""#).is_err());
    }

    #[test]
    fn strings_with_and_without_escapes() {
        assert_eq!(p(r#""plain text""#), Json::Str("plain text".into()));
        assert_eq!(p(r#""""#), Json::Str(String::new()));
        assert_eq!(p(r#""ab\"cd\n\\""#), Json::Str("ab\"cd\n\\".into()));
        assert_eq!(p(r#""\tx""#), Json::Str("\tx".into()));
        assert_eq!(p(r#"["é", "a\/b"]"#).unparse(), r#"["é","a/b"]"#);
        for bad in [&b"\"abc"[..], b"\"ab\\", b"\"a\\q\"", b"{\"\xff\": 1}"] {
            assert!(Json::parse("k", bad).is_err(), "{bad:?}");
        }
        // netcdf-c writes a char attribute's bytes as they are.
        assert_eq!(
            Json::parse("k", b"\"a\xff\"").unwrap(),
            Json::Bytes(b"a\xff".to_vec())
        );
        let carried = carry_raw_bytes(b"caf\xe9 \xff\xfe");
        assert_eq!(carried.chars().count(), 7);
        let json = serde_json::to_vec(&serde_json::json!({ "a": carried })).unwrap();
        assert_eq!(restore_raw_bytes(json), b"{\"a\":\"caf\xe9 \xff\xfe\"}");
        // The position of an unterminated string is the end of the text.
        match Json::parse("k", b"{\"a\": \"xyz") {
            Err(Error::CorruptJson { line, column, .. }) => assert_eq!((line, column), (1, 11)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn errors_have_positions() {
        match Json::parse("g/.zattrs", b"{\n  \"a\": [1,\n}") {
            Err(Error::CorruptJson {
                key, line, column, ..
            }) => {
                assert_eq!(key, "g/.zattrs");
                assert_eq!(line, 3);
                assert_eq!(column, 1);
            }
            other => panic!("{other:?}"),
        }
        for bad in [
            "",
            "{",
            "[1 2]",
            "{\"a\" 1}",
            "nul",
            "-",
            "1.2.3",
            "\"abc",
            "{} x",
        ] {
            assert!(Json::parse("k", bad.as_bytes()).is_err(), "{bad}");
        }
    }

    #[test]
    fn deep_nesting_is_refused() {
        let s = "[".repeat(10_000);
        assert!(Json::parse("k", s.as_bytes()).is_err());
    }

    #[test]
    fn to_serde_values() {
        let v = p(r#"{"id": "blosc", "clevel": 5, "x": 1.5, "n": NaN}"#).to_serde();
        assert_eq!(v["clevel"], serde_json::json!(5));
        assert_eq!(v["x"], serde_json::json!(1.5));
        assert_eq!(v["n"], serde_json::json!("NaN"));
    }
}
