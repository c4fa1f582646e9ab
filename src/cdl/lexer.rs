//! Tokens of CDL as ncgen reads them: names with backslash escapes, typed numeric literals
//! (`1b`, `2us`, `3ll`, `1.5f`, `0x1F`, `NaNf`, `-Infinity`), quoted strings and characters
//! with C escapes, `_` (the fill marker) and punctuation. `//` and `/* */` comments are
//! skipped.

use crate::model::NcType;
use crate::{Error, Result};

/// A position in the source text (1-based line and column, in characters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pos {
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
}

impl Pos {
    /// The error at this position of the CDL file `file`.
    pub fn error(self, file: &str, reason: impl Into<String>) -> Error {
        Error::Cdl {
            file: file.to_string(),
            line: self.line,
            column: self.column,
            reason: reason.into(),
        }
    }
}

/// A numeric literal with the type its spelling implies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Number {
    /// An integer; `suffix` is the type named by a suffix (`b`, `ub`, `s`, `us`, `u`, `ll`,
    /// `ull`), `None` when there is none (the parser then picks the narrowest of int, uint,
    /// int64, uint64 that holds it).
    Int {
        /// The value, wide enough for every 64-bit signed or unsigned literal.
        value: i128,
        /// The type named by the suffix.
        suffix: Option<NcType>,
        /// Written in hexadecimal (`0x10`): ncgen reads such a constant in data and typed
        /// attributes, but not as a dimension length.
        hex: bool,
    },
    /// A floating-point literal; `single` for an `f` suffix (and `NaNf`, `Infinityf`).
    Float {
        /// The value; for a `single` literal, a value of `f32` (the literal rounded to float).
        value: f64,
        /// Whether the literal is a `float` rather than a `double`.
        single: bool,
    },
}

/// One CDL token.
#[derive(Debug, Clone, PartialEq)]
pub enum Tok {
    /// A name (escapes already removed); keywords are names too, except the section headers.
    Ident(String),
    /// A section header: `dimensions:`, `variables:`, `data:`, `types:` or `group:`
    /// (the word without the colon).
    Section(&'static str),
    /// An absolute path name such as `/g1/d` (escapes removed).
    Path(String),
    /// A double-quoted string as bytes (escapes decoded).
    Str(Vec<u8>),
    /// A single-quoted character constant.
    Char(u8),
    /// A number.
    Num(Number),
    /// `_`: the fill value.
    Fill,
    /// `{`
    LBrace,
    /// `}`
    RBrace,
    /// `(`
    LParen,
    /// `)`
    RParen,
    /// `,`
    Comma,
    /// `;`
    Semi,
    /// `=`
    Eq,
    /// `:`
    Colon,
    /// `*` (only in vlen declarations, which are refused)
    Star,
    /// End of input.
    Eof,
}

impl Tok {
    /// The token where a value is expected: ncgen's words for special values (`NaN`,
    /// `Infinityf`, `DoubleInf`, ...) are numbers there, and names where a name is
    /// expected (netCDF allows a variable `nan`, and ncdump prints its name bare).
    pub fn into_value(self) -> Tok {
        match self {
            Tok::Ident(word) => match special_number(&word) {
                Some(n) => Tok::Num(n),
                None => Tok::Ident(word),
            },
            other => other,
        }
    }

    /// A short description for error messages.
    pub fn describe(&self) -> String {
        match self {
            Tok::Ident(s) => format!("name {s:?}"),
            Tok::Section(s) => format!("\"{s}:\""),
            Tok::Path(s) => format!("path {s:?}"),
            Tok::Str(_) => "string constant".into(),
            Tok::Char(_) => "character constant".into(),
            Tok::Num(_) => "number".into(),
            Tok::Fill => "\"_\"".into(),
            Tok::LBrace => "\"{\"".into(),
            Tok::RBrace => "\"}\"".into(),
            Tok::LParen => "\"(\"".into(),
            Tok::RParen => "\")\"".into(),
            Tok::Comma => "\",\"".into(),
            Tok::Semi => "\";\"".into(),
            Tok::Eq => "\"=\"".into(),
            Tok::Colon => "\":\"".into(),
            Tok::Star => "\"*\"".into(),
            Tok::Eof => "end of input".into(),
        }
    }
}

/// A token and where it starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Token {
    /// The token.
    pub tok: Tok,
    /// Where it starts.
    pub pos: Pos,
}

/// Splits CDL text into tokens.
pub fn tokenize(text: &str, file: &str) -> Result<Vec<Token>> {
    let mut lx = Lexer::new(text, file);
    let mut out = Vec::new();
    loop {
        let t = lx.next_token()?;
        let end = t.tok == Tok::Eof;
        out.push(t);
        if end {
            return Ok(out);
        }
    }
}

/// Reads CDL text one token at a time, so that no more than the token at hand is held
/// besides the text.
pub struct Lexer<'a> {
    text: &'a str,
    /// Byte offset of the next character.
    i: usize,
    line: usize,
    column: usize,
    file: &'a str,
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || !c.is_ascii()
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '@' | '+' | '-') || !c.is_ascii()
}

/// The characters a name may hold escaped with a backslash (ncgen.l's `idescaped`); letters,
/// digits and `_ . @ + -` stand unescaped.
const NAME_ESCAPES: &str = " !\"#$%&'()*,:;<=>?[\\]^`{|}~";

/// Whether `\c` is an escape ncgen.l reads in a name: one of [`NAME_ESCAPES`], or a digit
/// at the start (`\1abc`, as a name may not begin with a digit).
fn is_name_escape(c: char, at_start: bool) -> bool {
    NAME_ESCAPES.contains(c) || (at_start && c.is_ascii_digit())
}

const SECTIONS: [&str; 5] = ["dimensions", "variables", "data", "types", "group"];

impl<'a> Lexer<'a> {
    /// A lexer at the start of `text`; `file` names it in error messages.
    pub fn new(text: &'a str, file: &'a str) -> Self {
        Lexer {
            text,
            i: 0,
            line: 1,
            column: 1,
            file,
        }
    }

    fn peek(&self, k: usize) -> Option<char> {
        self.text[self.i..].chars().nth(k)
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek(0)?;
        self.i += c.len_utf8();
        if c == '\n' {
            self.line += 1;
            self.column = 1;
        } else {
            self.column += 1;
        }
        Some(c)
    }

    fn pos(&self) -> Pos {
        Pos {
            line: self.line,
            column: self.column,
        }
    }

    fn err(&self, pos: Pos, reason: impl Into<String>) -> Error {
        pos.error(self.file, reason)
    }

    /// Skips white space, `//` comments to the end of the line and `/* */` comments (ncgen.l
    /// has both; an unterminated `/*` is an error).
    fn skip_blanks(&mut self) -> Result<()> {
        while let Some(c) = self.peek(0) {
            if c.is_whitespace() {
                self.bump();
            } else if c == '/' && self.peek(1) == Some('/') {
                while let Some(c) = self.peek(0) {
                    if c == '\n' {
                        break;
                    }
                    self.bump();
                }
            } else if c == '/' && self.peek(1) == Some('*') {
                let start = self.pos();
                self.bump();
                self.bump();
                loop {
                    match self.bump() {
                        Some('*') if self.peek(0) == Some('/') => {
                            self.bump();
                            break;
                        }
                        Some(_) => {}
                        None => return Err(self.err(start, "unterminated /* */ comment")),
                    }
                }
            } else {
                break;
            }
        }
        Ok(())
    }

    /// The next token ([`Tok::Eof`] at the end, and again after it).
    pub fn next_token(&mut self) -> Result<Token> {
        self.skip_blanks()?;
        let pos = self.pos();
        let Some(c) = self.peek(0) else {
            return Ok(Token { tok: Tok::Eof, pos });
        };
        let simple = match c {
            '{' => Some(Tok::LBrace),
            '}' => Some(Tok::RBrace),
            '(' => Some(Tok::LParen),
            ')' => Some(Tok::RParen),
            ',' => Some(Tok::Comma),
            ';' => Some(Tok::Semi),
            '=' => Some(Tok::Eq),
            ':' => Some(Tok::Colon),
            '*' => Some(Tok::Star),
            _ => None,
        };
        if let Some(tok) = simple {
            self.bump();
            return Ok(Token { tok, pos });
        }
        let tok = match c {
            '"' => {
                self.bump();
                Tok::Str(self.quoted('"', pos)?)
            }
            '\'' => {
                self.bump();
                let bytes = self.quoted('\'', pos)?;
                match bytes.as_slice() {
                    [b] => Tok::Char(*b),
                    _ => return Err(self.err(pos, "a character constant must hold one byte")),
                }
            }
            '/' => {
                let mut path = String::new();
                while self.peek(0) == Some('/') {
                    self.bump();
                    path.push('/');
                    let npos = self.pos();
                    let name = self.name()?;
                    if name.is_empty() {
                        return Err(self.err(npos, "empty name in path"));
                    }
                    path.push_str(&name);
                }
                Tok::Path(path)
            }
            c if c.is_ascii_digit()
                || ((c == '-' || c == '+' || c == '.')
                    && self
                        .peek(1)
                        .is_some_and(|d| d.is_ascii_digit() || d == '.' || d == 'I')) =>
            {
                Tok::Num(self.number(pos)?)
            }
            c if is_name_start(c) || c == '\\' => {
                let name = self.name()?;
                if SECTIONS.contains(&name.as_str()) && self.peek(0) == Some(':') {
                    self.bump();
                    let word = SECTIONS.iter().find(|s| **s == name).copied().unwrap_or("");
                    Tok::Section(word)
                } else if name == "_" {
                    Tok::Fill
                } else {
                    Tok::Ident(name)
                }
            }
            other => return Err(self.err(pos, format!("unexpected character {other:?}"))),
        };
        Ok(Token { tok, pos })
    }

    /// A name: name characters and backslash-escaped characters (`\ `, `\:`, …), in Unicode
    /// normalization form C, as ncgen (netcdf-c) stores every name: `e` and U+0301 are `é`.
    fn name(&mut self) -> Result<String> {
        let mut s = String::new();
        while let Some(c) = self.peek(0) {
            if let Some(b) = crate::meta::json::raw_byte_of(c) {
                return Err(self.err(
                    self.pos(),
                    format!("byte 0x{b:02X} in a name is not UTF-8 (netCDF names are)"),
                ));
            }
            if c == '\\' {
                let epos = self.pos();
                self.bump();
                match self.bump() {
                    Some(e) if is_name_escape(e, s.is_empty()) => s.push(e),
                    Some(e) => {
                        return Err(self.err(
                            epos,
                            format!(
                                "\"\\{e}\" is not an escape ncgen takes in a name: a name may \
                                 escape a leading digit and the characters {NAME_ESCAPES}"
                            ),
                        ))
                    }
                    None => return Err(self.err(self.pos(), "backslash at end of input")),
                }
            } else if is_name_char(c) {
                // A `+`/`-` only continues a name; `x=-1` never reaches here because `=` ends it.
                self.bump();
                s.push(c);
            } else {
                break;
            }
        }
        Ok(unicode_normalization::UnicodeNormalization::nfc(s.as_str()).collect())
    }

    /// The body of a quoted string after the opening quote, with C escapes decoded.
    fn quoted(&mut self, quote: char, start: Pos) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        loop {
            let Some(c) = self.bump() else {
                return Err(self.err(start, "unterminated string constant"));
            };
            if c == quote {
                return Ok(out);
            }
            if c != '\\' {
                if let Some(b) = crate::meta::json::raw_byte_of(c) {
                    out.push(b);
                    continue;
                }
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                continue;
            }
            let epos = self.pos();
            let Some(e) = self.bump() else {
                return Err(self.err(start, "unterminated string constant"));
            };
            let byte = match e {
                'n' => b'\n',
                't' => b'\t',
                'r' => b'\r',
                'a' => 7,
                'b' => 8,
                'f' => 12,
                'v' => 11,
                '\\' => b'\\',
                '"' => b'"',
                '\'' => b'\'',
                '?' => b'?',
                'x' | 'X' => {
                    let mut v: u32 = 0;
                    let mut n = 0;
                    while n < 2 {
                        match self.peek(0).and_then(|d| d.to_digit(16)) {
                            Some(d) => {
                                v = v * 16 + d;
                                self.bump();
                                n += 1;
                            }
                            None => break,
                        }
                    }
                    if n == 0 {
                        return Err(self.err(epos, "\\x escape without hex digits"));
                    }
                    v as u8
                }
                '0'..='7' => {
                    // In strings, exactly three digits ("Bad octal constant" in ncgen). A
                    // character constant takes one to three, as in C: netcdf-c's own tests
                    // write `'\0'` for NUL (ref_nulls.cdl, whose baseline holds 0b).
                    let mut v: u32 = e.to_digit(8).unwrap_or(0);
                    for _ in 0..2 {
                        match self.peek(0).and_then(|d| d.to_digit(8)) {
                            Some(d) => {
                                v = v * 8 + d;
                                self.bump();
                            }
                            None if quote == '\'' => break,
                            None => {
                                return Err(self.err(
                                    epos,
                                    "an octal escape in a string takes three digits \
                                     (\\000 to \\377), as in ncgen",
                                ))
                            }
                        }
                    }
                    if v > 255 {
                        return Err(self.err(epos, "octal escape out of range"));
                    }
                    v as u8
                }
                '\n' => {
                    // ncgen.l's escape is a backslash and any character but a line break:
                    // ncgen refuses a backslash ending a line (C would join the lines).
                    let backslash = Pos {
                        column: epos.column - 1,
                        ..epos
                    };
                    return Err(self.err(
                        backslash,
                        "a backslash before a line break in a quoted constant, which ncgen \
                         refuses (write \\n for a newline)",
                    ));
                }
                other => {
                    // ncgen keeps the character after an unknown escape.
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(other.encode_utf8(&mut buf).as_bytes());
                    continue;
                }
            };
            out.push(byte);
        }
    }

    /// A numeric literal starting at the current character.
    fn number(&mut self, pos: Pos) -> Result<Number> {
        let mut text = String::new();
        if let Some(c @ ('-' | '+')) = self.peek(0) {
            self.bump();
            text.push(c);
        }
        // Signed infinities are spelled like names.
        if self.peek(0) == Some('I') {
            let name = self.name()?;
            let full = format!("{text}{name}");
            return special_number(&full)
                .ok_or_else(|| self.err(pos, format!("malformed number {full:?}")));
        }
        while let Some(c) = self.peek(0) {
            let prev = text.chars().last();
            let exp_sign = matches!(c, '+' | '-')
                && matches!(prev, Some('e' | 'E'))
                && !text.starts_with("0x")
                && !text.starts_with("-0x")
                && !text.starts_with("+0x");
            if c.is_ascii_alphanumeric() || c == '.' || exp_sign {
                self.bump();
                text.push(c);
            } else {
                break;
            }
        }
        parse_number(&text).map_err(|e| match e {
            BadNumber::Malformed => self.err(pos, format!("malformed number {text:?}")),
            // As ncgen: "integer constant out of range", whatever type it is given to.
            BadNumber::OutOfRange => self.err(
                pos,
                format!("integer constant {text} out of range (beyond 64 bits)"),
            ),
        })
    }
}

/// ncgen.l's keywords for special values: `NaN`, `nan`, `NaNf`, `nanf`, `Infinity`,
/// `Infinityf`, `Inff` (each infinity also with `-`), and `DoubleInf`, `FloatInf`. No other
/// spelling is one: ncgen (4.9.0) refuses a `+` before any of them (`+Infinity`), a `-`
/// before the others (`-NaN`, `-DoubleInf`), and other cases (`NAN`, `infinity`, `inf`).
fn special_number(text: &str) -> Option<Number> {
    let (neg, body) = match text.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, text),
    };
    let (value, single, signed) = match body {
        "NaN" | "nan" => (f64::NAN, false, false),
        "NaNf" | "nanf" => (f32::NAN as f64, true, false),
        "Infinity" => (f64::INFINITY, false, true),
        "Infinityf" | "Inff" => (f64::INFINITY, true, true),
        "DoubleInf" => (f64::INFINITY, false, false),
        "FloatInf" => (f64::INFINITY, true, false),
        _ => return None,
    };
    if neg && !signed {
        return None;
    }
    let value = if neg { -value } else { value };
    Some(Number::Float { value, single })
}

/// Why the text of a numeric literal is not a number.
#[derive(Debug, Clone, Copy, PartialEq)]
enum BadNumber {
    /// Not the spelling of a number.
    Malformed,
    /// An integer whose magnitude takes more than 64 bits, which ncgen refuses ("integer
    /// constant out of range") rather than read as a double.
    OutOfRange,
}

/// Parses the text of a numeric literal with its optional type suffix.
fn parse_number(text: &str) -> std::result::Result<Number, BadNumber> {
    use BadNumber::Malformed;
    let (neg, body) = match text.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, text),
    };
    let lower = body.to_ascii_lowercase();
    let is_hex = lower.starts_with("0x");
    let looks_float = !is_hex && (lower.contains('.') || lower.contains('e'));
    // An `f` suffix needs a `.` or an exponent before it (ncgen.l's FLTNUMBER): `1f` is
    // malformed, not a float.
    if looks_float {
        // ncgen.l's double literals may end in `d` or `l` (`1.5L` is a double).
        let (digits, single) = match lower.strip_suffix('f') {
            Some(d) => (d, true),
            None => (
                lower
                    .strip_suffix('d')
                    .or_else(|| lower.strip_suffix('l'))
                    .unwrap_or(&lower),
                false,
            ),
        };
        // A literal beyond the range of its type is an infinity, as strtod (and so ncgen) has
        // it. An `f` literal is a float constant (ncgen reads it with `%e` into a float): its
        // value is the nearest float, whatever type it is then converted to.
        let mut v: f64 = if single {
            f64::from(digits.parse::<f32>().map_err(|_| Malformed)?)
        } else {
            digits.parse().map_err(|_| Malformed)?
        };
        if neg {
            v = -v;
        }
        return Ok(Number::Float { value: v, single });
    }
    // Integer: split the suffix off the end (hex digits include b/d/f, so for hex only the
    // unambiguous suffixes s/us/u/ll/ull/l are recognised).
    let suffixes: [(&str, NcType); 8] = [
        ("ull", NcType::UInt64),
        ("ll", NcType::Int64),
        ("ul", NcType::UInt),
        ("ub", NcType::UByte),
        ("us", NcType::UShort),
        ("u", NcType::UInt),
        ("s", NcType::Short),
        ("l", NcType::Int),
    ];
    let mut digits = lower.as_str();
    let mut suffix = None;
    for (s, t) in suffixes {
        if is_hex && s == "ub" {
            continue;
        }
        if let Some(d) = digits.strip_suffix(s) {
            digits = d;
            suffix = Some(t);
            break;
        }
    }
    if suffix.is_none() && !is_hex {
        if let Some(d) = digits.strip_suffix('b') {
            digits = d;
            suffix = Some(NcType::Byte);
        } else if let Some(d) = digits.strip_suffix('d') {
            let v: f64 = d.parse().map_err(|_| Malformed)?;
            return Ok(Number::Float {
                value: if neg { -v } else { v },
                single: false,
            });
        }
    }
    let (radix_digits, radix) = if let Some(h) = digits.strip_prefix("0x") {
        (h, 16)
    } else if digits.len() > 1 && digits.starts_with('0') {
        (&digits[1..], 8)
    } else {
        (digits, 10)
    };
    let magnitude = u64::from_str_radix(radix_digits, radix).map_err(|e| match e.kind() {
        std::num::IntErrorKind::PosOverflow => BadNumber::OutOfRange,
        _ => Malformed,
    })?;
    let magnitude = i128::from(magnitude);
    Ok(Number::Int {
        value: if neg { -magnitude } else { magnitude },
        suffix,
        hex: is_hex,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<Tok> {
        tokenize(s, "t")
            .unwrap()
            .into_iter()
            .map(|t| t.tok)
            .collect()
    }

    #[test]
    fn names_are_normalized_to_nfc() {
        let t = toks("v\u{65}\u{301} /g\u{65}\u{301}/x");
        assert_eq!(t[0], Tok::Ident("v\u{e9}".into()));
        assert_eq!(t[1], Tok::Path("/g\u{e9}/x".into()));
    }

    #[test]
    fn numbers_and_suffixes() {
        let int = |value, suffix| {
            Tok::Num(Number::Int {
                value,
                suffix,
                hex: false,
            })
        };
        let hex = |value, suffix| {
            Tok::Num(Number::Int {
                value,
                suffix,
                hex: true,
            })
        };
        assert_eq!(
            toks("1b 2UB -3s 4us 5 6u 7ll 8ULL 0x1F 017 0x10s"),
            vec![
                int(1, Some(NcType::Byte)),
                int(2, Some(NcType::UByte)),
                int(-3, Some(NcType::Short)),
                int(4, Some(NcType::UShort)),
                int(5, None),
                int(6, Some(NcType::UInt)),
                int(7, Some(NcType::Int64)),
                int(8, Some(NcType::UInt64)),
                hex(31, None),
                int(15, None),
                hex(16, Some(NcType::Short)),
                Tok::Eof
            ]
        );
        let fl = |value, single| Tok::Num(Number::Float { value, single });
        assert_eq!(
            toks("1.5f 2. -1e3 3.5d .5 1.e-2F"),
            vec![
                fl(1.5, true),
                fl(2.0, false),
                fl(-1000.0, false),
                fl(3.5, false),
                fl(0.5, false),
                fl(f64::from(0.01f32), true),
                Tok::Eof
            ]
        );
        let values = |text| {
            toks(text)
                .into_iter()
                .map(Tok::into_value)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            values("Inff -Inff FloatInf DoubleInf 1.5L 1.5e3l"),
            vec![
                fl(f64::INFINITY, true),
                fl(f64::NEG_INFINITY, true),
                fl(f64::INFINITY, true),
                fl(f64::INFINITY, false),
                fl(1.5, false),
                fl(1500.0, false),
                Tok::Eof
            ]
        );
        assert_eq!(toks("NaNf")[0], Tok::Ident("NaNf".into()));
        match &values("NaNf -Infinity Infinityf")[..] {
            [Tok::Num(Number::Float {
                value: a,
                single: true,
            }), Tok::Num(Number::Float {
                value: b,
                single: false,
            }), Tok::Num(Number::Float {
                value: c,
                single: true,
            }), Tok::Eof] => {
                assert!(a.is_nan());
                assert_eq!(*b, f64::NEG_INFINITY);
                assert_eq!(*c, f64::INFINITY);
            }
            other => panic!("{other:?}"),
        }
    }

    /// Debian's ncgen 4.9.0 refuses these where a value is expected ("syntax error,
    /// unexpected invalid token" for a sign, "Non-simple list of values" for a name).
    #[test]
    fn only_ncgens_spellings_of_special_values_are_numbers() {
        for refused in ["+Infinity", "+Infinityf", "+Inff", "-Inf"] {
            assert!(tokenize(refused, "f.cdl").is_err(), "{refused}");
        }
        for refused in ["+NaN", "-NaN", "+nan", "-NaNf", "-DoubleInf", "+FloatInf"] {
            assert!(tokenize(refused, "f.cdl").is_err(), "{refused}");
        }
        for name in [
            "NAN", "Nan", "nanF", "infinity", "INFINITY", "inf", "Inf", "inff",
        ] {
            assert_eq!(
                toks(name)[0].clone().into_value(),
                Tok::Ident(name.into()),
                "{name}"
            );
        }
    }

    #[test]
    fn a_float_suffix_needs_a_point_or_an_exponent() {
        // ncgen.l's FLTNUMBER: `1.f` and `1e0f` are floats, `1f` is not a number.
        let e = tokenize("x = 1f ;", "f.cdl").unwrap_err().to_string();
        assert_eq!(e, "f.cdl:1:5: malformed number \"1f\"");
        assert!(matches!(
            toks("1.f 1e0f")[..],
            [
                Tok::Num(Number::Float { single: true, .. }),
                Tok::Num(Number::Float { single: true, .. }),
                Tok::Eof
            ]
        ));
    }

    #[test]
    fn float_literals_are_rounded_to_float() {
        // 0.1f is the float nearest 0.1, and 16777217.f the float 2^24 (2^24 + 1 is not a
        // float), whatever type they are then converted to.
        let fl = |value| {
            Tok::Num(Number::Float {
                value,
                single: true,
            })
        };
        assert_eq!(
            toks("0.1f 16777217.f -1.1e0F"),
            vec![
                fl(f64::from(0.1f32)),
                fl(16777216.0),
                fl(f64::from(-1.1f32)),
                Tok::Eof
            ]
        );
    }

    #[test]
    fn strings_names_comments() {
        assert_eq!(
            toks(r#""a\n\t\"\\\000\x41\101" 'x' '\0' // comment"#),
            vec![
                Tok::Str(b"a\n\t\"\\\0AA".to_vec()),
                Tok::Char(b'x'),
                Tok::Char(0),
                Tok::Eof
            ]
        );
        assert_eq!(
            toks(r"dimensions: a\ b /g/d x-1.y _ data:"),
            vec![
                Tok::Section("dimensions"),
                Tok::Ident("a b".into()),
                Tok::Path("/g/d".into()),
                Tok::Ident("x-1.y".into()),
                Tok::Fill,
                Tok::Section("data"),
                Tok::Eof
            ]
        );
    }

    #[test]
    fn octal_escapes_in_strings_take_three_digits() {
        // ncgen.l: `\ooo` in strings, fewer digits are "Bad octal constant"; a character
        // constant may have fewer, as in C.
        assert_eq!(
            toks(r#""\0123\101" '\377' '\0' '\12'"#),
            vec![
                Tok::Str(b"\n3A".to_vec()),
                Tok::Char(255),
                Tok::Char(0),
                Tok::Char(10),
                Tok::Eof
            ]
        );
        for bad in [r#""a\0b""#, r#""\12""#, r#""\1""#] {
            let e = tokenize(bad, "f.cdl").unwrap_err().to_string();
            assert!(
                e.contains("f.cdl:1:") && e.contains("three digits"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn names_take_the_escapes_ncgen_takes() {
        assert_eq!(
            toks(r"\1abc a\ b\:c\\d\#e\{f\~"),
            vec![
                Tok::Ident("1abc".into()),
                Tok::Ident("a b:c\\d#e{f~".into()),
                Tok::Eof
            ]
        );
        // ncgen.l's ID has no escaped letters, `_ . @ + -`, nor digits after the start.
        for bad in [r"\_x", r"a\x41", r"a\.b", r"a\1", r"\a"] {
            let e = tokenize(bad, "f.cdl").unwrap_err().to_string();
            assert!(
                e.contains("f.cdl:1:") && e.contains("not an escape"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn block_comments_are_skipped() {
        assert_eq!(
            toks("a /* b\n * c */ d/**/e /* / * */"),
            vec![
                Tok::Ident("a".into()),
                Tok::Ident("d".into()),
                Tok::Ident("e".into()),
                Tok::Eof
            ]
        );
        let e = tokenize("x\n /* never closed", "f.cdl").unwrap_err();
        assert_eq!(e.to_string(), "f.cdl:2:2: unterminated /* */ comment");
    }

    #[test]
    fn integer_constants_beyond_64_bits_are_out_of_range() {
        // ncgen: "integer constant out of range", also where a double is expected.
        assert_eq!(
            toks("18446744073709551615 -18446744073709551615 0xffffffffffffffff"),
            vec![
                Tok::Num(Number::Int {
                    value: u64::MAX.into(),
                    suffix: None,
                    hex: false
                }),
                Tok::Num(Number::Int {
                    value: -i128::from(u64::MAX),
                    suffix: None,
                    hex: false
                }),
                Tok::Num(Number::Int {
                    value: u64::MAX.into(),
                    suffix: None,
                    hex: true
                }),
                Tok::Eof
            ]
        );
        for bad in [
            "18446744073709551616",
            "18446744073709551617ULL",
            "-18446744073709551616",
            "02000000000000000000000",
            "0x10000000000000000",
            "1844674407370955161700000000000000000000000000",
        ] {
            let e = tokenize(&format!("a = 1.5,\n  {bad} ;"), "f.cdl").unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("f.cdl:2:3: integer constant {bad} out of range (beyond 64 bits)")
            );
        }
        // Written with a point or an exponent, it is a double (the nearest is 2^64).
        assert_eq!(
            toks("18446744073709551617.0 1.8446744073709551617e19"),
            vec![
                Tok::Num(Number::Float {
                    value: 2f64.powi(64),
                    single: false
                }),
                Tok::Num(Number::Float {
                    value: 2f64.powi(64),
                    single: false
                }),
                Tok::Eof
            ]
        );
    }

    #[test]
    fn a_backslash_before_a_line_break_in_a_string_is_refused() {
        // ncgen.l's escape is a backslash and any character but a line break; `\` before a
        // carriage return keeps the carriage return, as in ncgen.
        assert_eq!(
            toks("\"ab\\\r\ncd\" \"a\\\"b\\\\\" \"x\\ny\" \"p\nq\""),
            vec![
                Tok::Str(b"ab\r\ncd".to_vec()),
                Tok::Str(b"a\"b\\".to_vec()),
                Tok::Str(b"x\ny".to_vec()),
                Tok::Str(b"p\nq".to_vec()),
                Tok::Eof
            ]
        );
        for bad in ["v:s = \"ab\\\ncd\" ;", "v = '\\\n' ;"] {
            let e = tokenize(&format!("x\n  {bad}"), "f.cdl")
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("f.cdl:2:") && e.contains("backslash before a line break"),
                "{bad}: {e}"
            );
        }
        let e = tokenize("v:s = \"ab\\\ncd\" ;", "f.cdl").unwrap_err();
        assert!(e.to_string().starts_with("f.cdl:1:10: "), "{e}");
    }

    #[test]
    fn errors_have_positions() {
        let e = tokenize("netcdf x {\n  \"abc", "f.cdl").unwrap_err();
        assert_eq!(e.to_string(), "f.cdl:2:3: unterminated string constant");
    }
}
