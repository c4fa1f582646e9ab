//! Value and name formatting exactly as ncdump prints it: C `printf` conversions (`%g`,
//! `%#g`), ncdump's trailing-zero trimming, the CDL suffixes of attribute values and the
//! escaping rules for names, text attributes, `char` data and `string` data.
//!
//! Every function here is pure, so the byte-exactness of the CDL writer can be tested without
//! storage.

use crate::model::{AttrValue, NcType};

/// Significant digits ncdump uses for `float` values (`FLT_DIGITS`).
pub const FLOAT_DIGITS: usize = 7;
/// Significant digits ncdump uses for `double` values (`DBL_DIGITS`).
pub const DOUBLE_DIGITS: usize = 15;

/// Significant digits of floating-point values (`ncdump -p float,double`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Precision {
    /// Digits of `float` values.
    pub float: usize,
    /// Digits of `double` values.
    pub double: usize,
}

impl Default for Precision {
    fn default() -> Self {
        Precision {
            float: FLOAT_DIGITS,
            double: DOUBLE_DIGITS,
        }
    }
}

/// C's `%.{prec}g` (or `%#.{prec}g` when `alt`) of a finite value, as glibc prints it:
/// correctly rounded, ties to even, exponent with at least two digits.
pub fn printf_g(x: f64, prec: usize, alt: bool) -> String {
    let prec = prec.max(1);
    // The decimal exponent after rounding to `prec` significant digits decides the style.
    let sci = format!("{:.*e}", prec - 1, x);
    let (mantissa, exp) = split_exponent(&sci);
    if exp < -4 || exp >= prec as i32 {
        let mut m = mantissa.to_string();
        if alt {
            if !m.contains('.') {
                m.push('.');
            }
        } else {
            strip_fraction_zeros(&mut m);
        }
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{m}e{sign}{:02}", exp.unsigned_abs())
    } else {
        let decimals = (prec as i32 - 1 - exp) as usize;
        let mut s = format!("{x:.decimals$}");
        if alt {
            if !s.contains('.') {
                s.push('.');
            }
        } else {
            strip_fraction_zeros(&mut s);
        }
        s
    }
}

/// Splits Rust's `1.5e-7` scientific form into mantissa and exponent.
fn split_exponent(sci: &str) -> (&str, i32) {
    match sci.find('e') {
        Some(i) => (&sci[..i], sci[i + 1..].parse().unwrap_or(0)),
        None => (sci, 0),
    }
}

/// `%g` without `#`: drop trailing zeros of the fraction, and the point if nothing is left.
fn strip_fraction_zeros(s: &mut String) {
    if s.contains('.') {
        while s.ends_with('0') {
            s.pop();
        }
        if s.ends_with('.') {
            s.pop();
        }
    }
}

/// ncdump's `tztrim`: removes trailing zeros after the decimal point but keeps the point
/// itself (`1.500000e+20` → `1.5e+20`, `100.0000` → `100.`).
pub fn tztrim(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut i = usize::from(bytes.first() == Some(&b'-'));
    while i < bytes.len() && (bytes[i].is_ascii_digit() || bytes[i] == b'.') {
        i += 1;
    }
    // `i` is the end of the numeric run; the exponent or suffix (if any) follows.
    if i == 0 || bytes[i - 1] == b'.' {
        return s.to_string();
    }
    let end = i;
    let mut cut = end;
    while cut > 0 && bytes[cut - 1] == b'0' {
        cut -= 1;
    }
    if !s[..end].contains('.') {
        return s.to_string();
    }
    format!("{}{}", &s[..cut], &s[end..])
}

/// A `float` attribute value with `digits` significant digits: `1.5f`, `1.e+20f`, `NaNf`,
/// `-Infinityf`.
pub fn float_attr(v: f32, digits: usize) -> String {
    if v.is_nan() {
        "NaNf".to_string()
    } else if v.is_infinite() {
        if v < 0.0 { "-Infinityf" } else { "Infinityf" }.to_string()
    } else {
        let mut s = tztrim(&printf_g(f64::from(v), digits, true));
        s.push('f');
        s
    }
}

/// A `double` attribute value with `digits` significant digits: `1.5`, `1.e-10`, `NaN`,
/// `Infinity`.
pub fn double_attr(v: f64, digits: usize) -> String {
    if v.is_nan() {
        "NaN".to_string()
    } else if v.is_infinite() {
        if v < 0.0 { "-Infinity" } else { "Infinity" }.to_string()
    } else {
        tztrim(&printf_g(v, digits, true))
    }
}

/// A `float` data value (`%.{digits}g`, no suffix except for the special values).
pub fn float_data(v: f32, digits: usize) -> String {
    if v.is_nan() {
        "NaNf".to_string()
    } else if v.is_infinite() {
        if v < 0.0 { "-Infinityf" } else { "Infinityf" }.to_string()
    } else {
        printf_g(f64::from(v), digits, false)
    }
}

/// A `double` data value (`%.{digits}g`).
pub fn double_data(v: f64, digits: usize) -> String {
    if v.is_nan() {
        "NaN".to_string()
    } else if v.is_infinite() {
        if v < 0.0 { "-Infinity" } else { "Infinity" }.to_string()
    } else {
        printf_g(v, digits, false)
    }
}

/// Whether a byte is a C-locale control character (`iscntrl`).
fn is_cntrl(b: u8) -> bool {
    b < 0x20 || b == 0x7f
}

/// The backslash escape ncdump uses for a byte, if it has a named one.
fn named_escape(b: u8) -> Option<&'static str> {
    Some(match b {
        0x08 => "\\b",
        0x0c => "\\f",
        b'\n' => "\\n",
        b'\r' => "\\r",
        b'\t' => "\\t",
        0x0b => "\\v",
        b'\\' => "\\\\",
        b'\'' => "\\'",
        b'"' => "\\\"",
        _ => return None,
    })
}

/// Length of `bytes` without its trailing NULs (ncdump never prints those).
fn trimmed_len(bytes: &[u8]) -> usize {
    bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1)
}

/// Escapes text as ncdump prints text attributes and `string` values of a netCDF-4 file:
/// named escapes, other control characters as three octal digits, everything else (UTF-8
/// included) raw; trailing NULs dropped. The result has no surrounding quotes.
pub fn escape_text(bytes: &[u8], out: &mut Vec<u8>) {
    for &b in &bytes[..trimmed_len(bytes)] {
        if let Some(e) = named_escape(b) {
            out.extend_from_slice(e.as_bytes());
        } else if is_cntrl(b) {
            out.extend_from_slice(format!("\\{b:03o}").as_bytes());
        } else {
            out.push(b);
        }
    }
}

/// Escapes one row of a `char` variable as ncdump's data section prints it, with quotes:
/// non-printable bytes (including non-ASCII) in octal, and a line break after each embedded
/// newline (`"a\n",` then a new line starting with four spaces and `"`).
pub fn quote_char_row(bytes: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &b in &bytes[..trimmed_len(bytes)] {
        if b == b'\n' {
            out.extend_from_slice(b"\\n\",\n    \"");
        } else if let Some(e) = named_escape(b) {
            out.extend_from_slice(e.as_bytes());
        } else if (0x20..0x7f).contains(&b) {
            out.push(b);
        } else {
            out.extend_from_slice(format!("\\{b:03o}").as_bytes());
        }
    }
    out.push(b'"');
}

/// A name (dimension, variable, attribute, group) with CDL's special characters escaped.
pub fn escape_name(name: &str) -> String {
    String::from_utf8(escape_name_bytes(name.as_bytes()))
        .expect("escapes are ASCII, so the escaped UTF-8 stays UTF-8")
}

/// [`escape_name`] of any bytes, as ncdump escapes a name: the ASCII ones as there, the
/// others (UTF-8 or not, such as those of a file name) unchanged.
pub fn escape_name_bytes(name: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(name.len() + 2);
    if name.first().is_some_and(u8::is_ascii_digit) {
        out.push(b'\\');
    }
    for &b in name {
        match b {
            b' ' | b'!' | b'"' | b'#' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b',' | b':'
            | b';' | b'<' | b'=' | b'>' | b'?' | b'[' | b']' | b'\\' | b'^' | b'`' | b'{'
            | b'|' | b'}' | b'~' => {
                out.push(b'\\');
                out.push(b);
            }
            b if b.is_ascii_control() => out.extend_from_slice(format!("\\%{b:02x}").as_bytes()),
            b => out.push(b),
        }
    }
    out
}

/// The CDL list of an attribute's values as ncdump prints it after `=`: typed suffixes for
/// numbers (`1b`, `2s`, `3`, `4UB`, `5US`, `6U`, `7LL`, `8ULL`, `1.5f`, `1.5`), quoted escaped
/// text for `char` and `string`, `""` for an empty attribute of any type.
pub fn attr_cdl(value: &AttrValue) -> String {
    let mut out = Vec::new();
    write_attr_cdl(value, &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// [`attr_cdl`] appended to a byte buffer (`char` attributes may hold bytes that are not
/// UTF-8; they are written unchanged, as ncdump does).
pub fn write_attr_cdl(value: &AttrValue, out: &mut Vec<u8>) {
    write_attr_cdl_with(value, Precision::default(), out);
}

/// [`write_attr_cdl`] with floating-point values to `prec` digits (`ncdump -p`).
pub fn write_attr_cdl_with(value: &AttrValue, prec: Precision, out: &mut Vec<u8>) {
    fn list<T>(out: &mut Vec<u8>, v: &[T], f: impl Fn(&T, &mut Vec<u8>)) {
        for (i, x) in v.iter().enumerate() {
            if i > 0 {
                out.extend_from_slice(b", ");
            }
            f(x, out);
        }
    }
    fn text(bytes: &[u8], out: &mut Vec<u8>) {
        out.push(b'"');
        escape_text(bytes, out);
        out.push(b'"');
    }
    if value.is_empty() {
        out.extend_from_slice(b"\"\"");
        return;
    }
    let s = |o: &mut Vec<u8>, t: String| o.extend_from_slice(t.as_bytes());
    match value {
        AttrValue::Byte(v) => list(out, v, |x, o| s(o, format!("{x}b"))),
        AttrValue::Short(v) => list(out, v, |x, o| s(o, format!("{x}s"))),
        AttrValue::Int(v) => list(out, v, |x, o| s(o, x.to_string())),
        AttrValue::UByte(v) => list(out, v, |x, o| s(o, format!("{x}UB"))),
        AttrValue::UShort(v) => list(out, v, |x, o| s(o, format!("{x}US"))),
        AttrValue::UInt(v) => list(out, v, |x, o| s(o, format!("{x}U"))),
        AttrValue::Int64(v) => list(out, v, |x, o| s(o, format!("{x}LL"))),
        AttrValue::UInt64(v) => list(out, v, |x, o| s(o, format!("{x}ULL"))),
        AttrValue::Float(v) => list(out, v, |x, o| s(o, float_attr(*x, prec.float))),
        AttrValue::Double(v) => list(out, v, |x, o| s(o, double_attr(*x, prec.double))),
        AttrValue::Char(bytes) => text(bytes, out),
        AttrValue::Str(v) => list(out, v, |x, o| text(x.as_bytes(), o)),
    }
}

/// Whether ncdump prints the attribute's type before its name (only `string` attributes).
pub fn attr_needs_type(value: &AttrValue) -> bool {
    value.nctype() == NcType::String
}

/// A variable's `C_format` attribute: at most one printf conversion with literal text around
/// it, which ncdump hands to `snprintf` with each data value instead of its default format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CFormat {
    prefix: String,
    suffix: String,
    left: bool,
    plus: bool,
    space: bool,
    alt: bool,
    zero: bool,
    width: usize,
    prec: Option<usize>,
    /// The bits of the integer a length modifier converts the argument to (`hh` 8, `h` 16,
    /// `l`, `ll`, `j`, `z`, `q` 64); `None` without one.
    length_bits: Option<u32>,
    /// The conversion; `None` for a format that is only literal text.
    conv: Option<char>,
}

/// printf's literal text: `%%` stands for `%`.
fn unescape_percent(text: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '%' && chars.next() != Some('%') {
            return None;
        }
        out.push(c);
    }
    Some(out)
}

/// The first `%` that starts a conversion (not part of a `%%`).
fn find_conversion(fmt: &str) -> Option<usize> {
    let bytes = fmt.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            if bytes.get(i + 1) != Some(&b'%') {
                return Some(i);
            }
            i += 1;
        }
        i += 1;
    }
    None
}

impl CFormat {
    /// Parses a format of literal text (`%%` for `%`) with at most one conversion among
    /// `d i u o x X e E f F g G`; `None` for anything else (`%s`, `%c`, `%a`, `*` widths,
    /// several conversions), in which case the default format applies.
    pub fn parse(fmt: &str) -> Option<CFormat> {
        let mut f = CFormat {
            prefix: String::new(),
            suffix: String::new(),
            left: false,
            plus: false,
            space: false,
            alt: false,
            zero: false,
            width: 0,
            prec: None,
            length_bits: None,
            conv: None,
        };
        let Some(start) = find_conversion(fmt) else {
            f.prefix = unescape_percent(fmt)?;
            return Some(f);
        };
        f.prefix = unescape_percent(&fmt[..start])?;
        let rest = &fmt[start + 1..];
        let mut chars = rest.char_indices().peekable();
        while let Some(&(_, c)) = chars.peek() {
            match c {
                '-' => f.left = true,
                '+' => f.plus = true,
                ' ' => f.space = true,
                '#' => f.alt = true,
                '0' => f.zero = true,
                _ => break,
            }
            chars.next();
        }
        while let Some(&(_, c)) = chars.peek() {
            let Some(d) = c.to_digit(10) else { break };
            f.width = f.width.checked_mul(10)?.checked_add(d as usize)?;
            chars.next();
        }
        if chars.peek().map(|&(_, c)| c) == Some('.') {
            chars.next();
            let mut p: usize = 0;
            while let Some(&(_, c)) = chars.peek() {
                let Some(d) = c.to_digit(10) else { break };
                p = p.checked_mul(10)?.checked_add(d as usize)?;
                chars.next();
            }
            f.prec = Some(p);
        }
        let mut modifier = String::new();
        while let Some(&(_, c)) = chars
            .peek()
            .filter(|&&(_, c)| matches!(c, 'h' | 'l' | 'L' | 'q' | 'j' | 'z' | 't'))
        {
            modifier.push(c);
            chars.next();
        }
        f.length_bits = match modifier.as_str() {
            "" | "L" => None,
            "hh" => Some(8),
            "h" => Some(16),
            "l" | "ll" | "q" | "j" | "z" | "t" => Some(64),
            _ => return None,
        };
        let (i, conv) = chars.next()?;
        if !"diuoxXeEfFgG".contains(conv) {
            return None;
        }
        f.conv = Some(conv);
        f.suffix = unescape_percent(&rest[i + conv.len_utf8()..])?;
        Some(f)
    }

    /// Whether the conversion is for floating-point values (`e f g` and upper-case forms).
    pub fn is_float(&self) -> bool {
        self.conv.is_some_and(|c| "eEfFgG".contains(c))
    }

    /// Formats a finite floating-point value; `None` if the conversion is an integer one.
    pub fn format_float(&self, x: f64) -> Option<String> {
        let Some(conv) = self.conv else {
            return Some(self.prefix.clone());
        };
        if !self.is_float() {
            return None;
        }
        let p = self.prec.unwrap_or(6);
        let mut body = match conv.to_ascii_lowercase() {
            'f' => {
                let mut s = format!("{:.p$}", x.abs());
                if self.alt && p == 0 {
                    s.push('.');
                }
                s
            }
            'e' => {
                let sci = format!("{:.p$e}", x.abs());
                let (m, exp) = split_exponent(&sci);
                let mut m = m.to_string();
                if self.alt && p == 0 {
                    m.push('.');
                }
                let sign = if exp < 0 { '-' } else { '+' };
                format!("{m}e{sign}{:02}", exp.unsigned_abs())
            }
            _ => printf_g(x.abs(), p, self.alt),
        };
        if conv.is_ascii_uppercase() {
            body = body.to_ascii_uppercase();
        }
        Some(self.pad(x.is_sign_negative(), body))
    }

    /// Formats an integer value passed to printf as an integer of `arg_bits` bits (ncdump
    /// passes netCDF's types of 32 bits and fewer as C `int`s, the 64-bit ones as `long
    /// long`s): as C does, the conversion reads those bits as signed (`d i`) or unsigned
    /// (`u o x X`), narrowed by an `h` or `hh` modifier. `None` for floating-point
    /// conversions.
    pub fn format_int(&self, v: i128, arg_bits: u32) -> Option<String> {
        let Some(conv) = self.conv else {
            return Some(self.prefix.clone());
        };
        if self.is_float() {
            return None;
        }
        let bits = self.length_bits.unwrap_or(arg_bits);
        let low = (v as u128) & (u128::MAX >> (128 - bits));
        let v = match conv {
            'd' | 'i' if low >> (bits - 1) == 1 => low as i128 - (1i128 << bits),
            _ => low as i128,
        };
        let mag = v.unsigned_abs();
        let mut body = match conv {
            'o' => format!("{mag:o}"),
            'x' => format!("{mag:x}"),
            'X' => format!("{mag:X}"),
            _ => mag.to_string(),
        };
        if let Some(p) = self.prec {
            while body.len() < p {
                body.insert(0, '0');
            }
        }
        if self.alt && mag != 0 {
            match conv {
                'o' if !body.starts_with('0') => body.insert(0, '0'),
                'x' => body.insert_str(0, "0x"),
                'X' => body.insert_str(0, "0X"),
                _ => {}
            }
        }
        Some(self.pad(v < 0, body))
    }

    /// Adds the sign and the padding to `width`, then the literal text around.
    fn pad(&self, negative: bool, body: String) -> String {
        let sign = if negative {
            "-"
        } else if self.plus && self.conv.is_some_and(|c| "dieEfFgG".contains(c)) {
            "+"
        } else if self.space && self.conv.is_some_and(|c| "dieEfFgG".contains(c)) {
            " "
        } else {
            ""
        };
        let len = sign.len() + body.len();
        // Whatever lies past ncdump's buffer is cut below; no need to pad further.
        let fill = self.width.saturating_sub(len).min(PRINTF_BUFFER);
        // C ignores `0` with `-`, and for integers when a precision is given.
        let zero = self.zero && !self.left && (self.prec.is_none() || self.is_float());
        let mut out = self.prefix.clone();
        if self.left {
            out.push_str(sign);
            out.push_str(&body);
            out.extend(std::iter::repeat_n(' ', fill));
        } else if zero {
            out.push_str(sign);
            out.extend(std::iter::repeat_n('0', fill));
            out.push_str(&body);
        } else {
            out.extend(std::iter::repeat_n(' ', fill));
            out.push_str(sign);
            out.push_str(&body);
        }
        out.push_str(&self.suffix);
        // ncdump formats into a buffer of 100 bytes (`PRIM_LEN`), which cuts longer texts.
        if out.len() >= PRINTF_BUFFER {
            let mut end = PRINTF_BUFFER - 1;
            while !out.is_char_boundary(end) {
                end -= 1;
            }
            out.truncate(end);
        }
        out
    }
}

/// The size of ncdump's buffer for one formatted value.
const PRINTF_BUFFER: usize = 100;

#[cfg(test)]
mod tests {
    use super::*;

    // Expected strings below are what C printf / Debian ncdump 4.9.0 print for these values
    // (checked with `python3 -c "print('%.7g' % x)"`, whose `%` formatting follows C, and with
    // ncgen + ncdump on the same values; see tests/data/dump/README.md).
    #[test]
    fn printf_g_matches_c() {
        let cases: &[(f64, usize, &str)] = &[
            (0.1, 7, "0.1"),
            (1e-10, 7, "1e-10"),
            (1e20, 7, "1e+20"),
            (123456.7, 7, "123456.7"),
            (1234567.0, 7, "1234567"),
            (12345678.0, 7, "1.234568e+07"),
            (1234568.5, 7, "1234568"),
            (1234567.5, 7, "1234568"),
            (0.0001, 7, "0.0001"),
            (0.00001, 7, "1e-05"),
            (0.0, 7, "0"),
            (-0.0, 7, "-0"),
            (1e300, 15, "1e+300"),
            (std::f64::consts::PI, 15, "3.14159265358979"),
            (100.0, 15, "100"),
        ];
        for (x, p, want) in cases {
            assert_eq!(printf_g(*x, *p, false), *want, "{x}");
        }
        assert_eq!(printf_g(100.0, 7, true), "100.0000");
        assert_eq!(printf_g(1e-10, 7, true), "1.000000e-10");
        assert_eq!(printf_g(0.0, 7, true), "0.000000");
    }

    #[test]
    fn attribute_numbers_match_ncdump() {
        // From `ncdump` of an ncgen-made file (tests/data/dump/types.cdl).
        let f = [
            0.1f32,
            1e-10,
            1e20,
            3.402_823_5e38,
            1e-45,
            -0.0,
            1.5,
            100.0,
            123456.7,
            1234567.0,
            12345678.0,
        ];
        assert_eq!(
            attr_cdl(&AttrValue::Float(f.to_vec())),
            "0.1f, 1.e-10f, 1.e+20f, 3.402823e+38f, 1.401298e-45f, -0.f, 1.5f, 100.f, \
             123456.7f, 1234567.f, 1.234568e+07f"
        );
        let d = [
            0.1,
            1e-10,
            1e20,
            f64::MAX,
            5e-324,
            -0.0,
            1.5,
            100.0,
            std::f64::consts::PI,
            1e15,
            1e16,
            123456789012345678.0,
        ];
        assert_eq!(
            attr_cdl(&AttrValue::Double(d.to_vec())),
            "0.1, 1.e-10, 1.e+20, 1.79769313486232e+308, 4.94065645841247e-324, -0., 1.5, \
             100., 3.14159265358979, 1.e+15, 1.e+16, 1.23456789012346e+17"
        );
        assert_eq!(attr_cdl(&AttrValue::UByte(vec![1, 255])), "1UB, 255UB");
        assert_eq!(attr_cdl(&AttrValue::UShort(vec![65535])), "65535US");
        assert_eq!(attr_cdl(&AttrValue::UInt(vec![4294967295])), "4294967295U");
        assert_eq!(
            attr_cdl(&AttrValue::Int64(vec![-9223372036854775807, 1])),
            "-9223372036854775807LL, 1LL"
        );
        assert_eq!(
            attr_cdl(&AttrValue::UInt64(vec![u64::MAX])),
            "18446744073709551615ULL"
        );
        assert_eq!(attr_cdl(&AttrValue::Byte(vec![1, -2])), "1b, -2b");
        assert_eq!(attr_cdl(&AttrValue::Short(vec![1, -32768])), "1s, -32768s");
        assert_eq!(attr_cdl(&AttrValue::Int(vec![])), "\"\"");
        assert_eq!(
            attr_cdl(&AttrValue::Float(vec![
                f32::NEG_INFINITY,
                f32::NAN,
                f32::INFINITY
            ])),
            "-Infinityf, NaNf, Infinityf"
        );
        assert_eq!(
            attr_cdl(&AttrValue::Double(vec![
                f64::NEG_INFINITY,
                f64::NAN,
                f64::INFINITY
            ])),
            "-Infinity, NaN, Infinity"
        );
    }

    #[test]
    fn text_escapes_match_ncdump() {
        assert_eq!(
            attr_cdl(&AttrValue::Char(b"line1\nline2\n\tq\"b\\s".to_vec())),
            r#""line1\nline2\n\tq\"b\\s""#
        );
        assert_eq!(
            attr_cdl(&AttrValue::Char(
                b"ab\x00cd\x01\x7f\xc3\xa9\x00\x00".to_vec()
            )),
            "\"ab\\000cd\\001\\177\u{e9}\""
        );
        assert_eq!(
            attr_cdl(&AttrValue::Str(vec![
                "x".into(),
                "y\"q".into(),
                "a\nb\tc\\".into()
            ])),
            r#""x", "y\"q", "a\nb\tc\\""#
        );
        let mut row = Vec::new();
        quote_char_row(b"d\"\n", &mut row);
        assert_eq!(row, b"\"d\\\"\\n\",\n    \"\"");
        row.clear();
        quote_char_row(b"\xc3\xa9\0", &mut row);
        assert_eq!(row, b"\"\\303\\251\"");
    }

    #[test]
    fn names_are_escaped() {
        assert_eq!(escape_name("3d"), "\\3d");
        assert_eq!(escape_name("a b:c%d"), "a\\ b\\:c%d");
        assert_eq!(escape_name("x y"), "x\\ y");
        assert_eq!(escape_name("plain_name.v-1"), "plain_name.v-1");
        assert_eq!(escape_name("é\u{7f}\u{1}"), "é\\%7f\\%01");
        // ncdump's own escaping of a file's name, bytes beyond ASCII as they are.
        assert_eq!(escape_name_bytes(b"1d\xff x"), b"\\1d\xff\\ x");
    }

    #[test]
    fn c_format_matches_c_printf() {
        // Expected texts from CPython's `%` operator, which follows C's printf.
        let f = |fmt: &str, x: f64| CFormat::parse(fmt).and_then(|c| c.format_float(x));
        assert_eq!(f("%.3f", 1.23456).as_deref(), Some("1.235"));
        assert_eq!(f("%8.2f", -2.5).as_deref(), Some("   -2.50"));
        assert_eq!(f("%-8.2e|", 12345.678).as_deref(), Some("1.23e+04|"));
        assert_eq!(f("%+010.3g", 0.000123456).as_deref(), Some("+00.000123"));
        assert_eq!(f("%G", 1e-20).as_deref(), Some("1E-20"));
        assert_eq!(f("%#.0f", 2.0).as_deref(), Some("2."));
        assert_eq!(f("%d", 2.0), None);
        let i = |fmt: &str, v: i128| CFormat::parse(fmt).and_then(|c| c.format_int(v, 32));
        assert_eq!(i("%5d", -42).as_deref(), Some("  -42"));
        assert_eq!(i("%05ld", 42).as_deref(), Some("00042"));
        assert_eq!(i("%#x", 255).as_deref(), Some("0xff"));
        assert_eq!(i("%.4d", 7).as_deref(), Some("0007"));
        assert_eq!(i("v=%d m", 3).as_deref(), Some("v=3 m"));
        assert_eq!(CFormat::parse("%s"), None);
        assert_eq!(CFormat::parse("%d %d"), None);
        assert_eq!(CFormat::parse("%*d"), None);
    }

    #[test]
    fn c_format_follows_printf_on_its_edges() {
        // Expected texts: Debian ncdump 4.9.0 of the same values and C_format (glibc printf).
        let f = |fmt: &str, x: f64| CFormat::parse(fmt).and_then(|c| c.format_float(x));
        let i = |fmt: &str, v: i128, bits| CFormat::parse(fmt).and_then(|c| c.format_int(v, bits));
        assert_eq!(f("%e%%", 1.5).as_deref(), Some("1.500000e+00%"));
        assert_eq!(f("%% %g", 2.0).as_deref(), Some("% 2"));
        assert_eq!(f("no value", 2.0).as_deref(), Some("no value"));
        assert_eq!(i("no value", 7, 32).as_deref(), Some("no value"));
        assert_eq!(i("%x", -1, 32).as_deref(), Some("ffffffff"));
        assert_eq!(i("%u", -1, 32).as_deref(), Some("4294967295"));
        assert_eq!(i("%o", -1, 32).as_deref(), Some("37777777777"));
        assert_eq!(i("%d", 4_000_000_000, 32).as_deref(), Some("-294967296"));
        // C's own conversions of the int argument by `hh` and `h`, and 64-bit arguments.
        assert_eq!(i("%hhd", 300, 32).as_deref(), Some("44"));
        assert_eq!(i("%hx", -1, 32).as_deref(), Some("ffff"));
        assert_eq!(i("%llx", -1, 64).as_deref(), Some("ffffffffffffffff"));
        assert_eq!(
            i("%lld", i128::from(i64::MIN), 64).as_deref(),
            Some("-9223372036854775808")
        );
        // snprintf into ncdump's 100-byte buffer keeps 99 characters.
        assert_eq!(i("%200d", 5, 32).map(|s| s.len()), Some(99));
        assert_eq!(CFormat::parse("%a"), None);
        assert_eq!(CFormat::parse("%c"), None);
        assert_eq!(CFormat::parse("50%"), None);
    }

    #[test]
    fn tztrim_keeps_point() {
        assert_eq!(tztrim("100.0000"), "100.");
        assert_eq!(tztrim("1.500000e+20"), "1.5e+20");
        assert_eq!(tztrim("-0.000000"), "-0.");
        assert_eq!(tztrim("12345"), "12345");
    }
}
