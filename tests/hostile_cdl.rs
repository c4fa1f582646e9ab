//! Hostile CDL, as a property: `gen`'s input damaged at one token (a length that overflows, a
//! number out of range, a keyword or punctuation out of place, a special attribute with a bad
//! value) or cut short is either refused with a message or generates a dataset; it never
//! panics. The pristine texts are netcdf-c's CDL fixtures and the shipped sample.

use std::path::PathBuf;

use proptest::prelude::*;

use nczarrfs::cdl::parser::parse_cdl;
use nczarrfs::cli::generate;
use nczarrfs::create::CreateOptions;
use nczarrfs::location::{Location, Mode, Storage};

fn fixture(rel: &str) -> PathBuf {
    std::env::var("NCZARRFS_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared")))
        .join("fixtures")
        .join(rel)
}

fn texts() -> Vec<String> {
    let mut paths: Vec<PathBuf> = [
        "ncdump_refs/cdl/ref_tst_group_data.cdl",
        "ncdump_refs/cdl/ref_dimscope.cdl",
        "ncdump_refs/cdl/ref_tst_nans.cdl",
        "ncdump_refs/cdl/ref_tst_nul4.cdl",
        "ncdump_refs/ref_tst_mud4.cdl",
        "ncdump_refs/ref_tst_mud4_chars.cdl",
        "nczarr_test/ref_string.cdl",
        "nczarr_test/ref_whole.cdl",
        "nczarr_test/ref_scalar.cdl",
        "nczarr_test/ref_nulls.cdl",
        "nczarr_test/ref_jsonconvention.cdl",
        "nczarr_test/ref_misc2.cdl",
        "nczarr_test/ref_bzip2.cdl",
        "nczarr_test/ref_filtered.cdl",
    ]
    .iter()
    .map(|p| fixture(p))
    .collect();
    paths.push(PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/samples/weather.cdl"
    )));
    paths
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .collect()
}

/// Tokens that break a CDL text where a value, a name or punctuation was. No length between
/// a few thousand and 2^31 is here: such a variable is valid CDL whose fill values `gen`
/// holds in memory, which tests the machine rather than the parser.
const HOSTILE: &[&str] = &[
    "0",
    "-1",
    "1",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999",
    "1e400",
    "-1e400",
    "NaN",
    "-NaNf",
    "Infinity",
    "-Infinityf",
    "0x7fffffffffffffff",
    "1LL",
    "255UB",
    "-129b",
    "70000s",
    "1.5f",
    "_",
    "UNLIMITED",
    "\"\"",
    "\"\\377\\000\"",
    "'\\0'",
    "'ab'",
    "{",
    "}",
    "(",
    ")",
    "=",
    ";",
    ",",
    ":",
    "*",
    "-",
    "//",
    "data:",
    "variables:",
    "dimensions:",
    "types:",
    "group: g {",
    "string",
    "char",
    "int64",
    "ubyte",
    "double",
    "x",
    "/nonexistent",
    "/nonexistent/dim",
    "_FillValue",
    "_Storage",
    "\"contiguous\"",
    "_ChunkSizes",
    "_Filter",
    "\"307,9\"",
    "\"32001,0,0,0,0,5,1,1\"",
    "_Codecs",
    "\"[{\\\"id\\\": \\\"nope\\\"}]\"",
    "_Endianness",
    "\"big\"",
    "_NoFill",
    "\"true\"",
    "_DeflateLevel",
    "_Shuffle",
    "_Format",
    "\"classic\"",
];

/// The byte ranges of the CDL text's tokens: runs of name characters, quoted strings and
/// characters, and single punctuation characters.
fn tokens(text: &str) -> Vec<(usize, usize)> {
    let bytes = text.as_bytes();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        match bytes[i] {
            q @ (b'"' | b'\'') => {
                i += 1;
                while i < bytes.len() && bytes[i] != q {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i = (i + 1).min(bytes.len());
            }
            c if c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-' | b'+' | b'/') => {
                while i < bytes.len()
                    && (bytes[i].is_ascii_alphanumeric()
                        || matches!(bytes[i], b'_' | b'.' | b'-' | b'+' | b'/'))
                {
                    i += 1;
                }
            }
            c if c.is_ascii_whitespace() => {
                i += 1;
                continue;
            }
            _ => i += 1,
        }
        spans.push((start, i));
    }
    spans
}

/// The numbers of `HOSTILE` and the fill marker `_`, put where the text has a number: a
/// damage that more often leaves valid CDL, so that generation sees it.
const NUMBERS: std::ops::Range<usize> = 0..20;

#[derive(Debug, Clone)]
enum Damage {
    /// The token at this index (modulo their number) replaced by `HOSTILE[which]`.
    Replace { token: usize, which: usize },
    /// The number at this index (modulo their number) replaced by `HOSTILE[which]`.
    Renumber { number: usize, which: usize },
    /// The token at this index removed.
    Remove { token: usize },
    /// The text cut at this fraction (in thousandths) of its length.
    Truncate { at: u16 },
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        6 => (any::<usize>(), 0..HOSTILE.len())
            .prop_map(|(token, which)| Damage::Replace { token, which }),
        6 => (any::<usize>(), NUMBERS)
            .prop_map(|(number, which)| Damage::Renumber { number, which }),
        1 => any::<usize>().prop_map(|token| Damage::Remove { token }),
        1 => (0u16..1000).prop_map(|at| Damage::Truncate { at }),
    ]
}

fn apply(damage: &Damage, text: &str) -> String {
    let spans = tokens(text);
    let numbers: Vec<(usize, usize)> = spans
        .iter()
        .copied()
        .filter(|&(a, _)| {
            text[a..]
                .trim_start_matches('-')
                .starts_with(|c: char| c.is_ascii_digit())
        })
        .collect();
    let splice = |spans: &[(usize, usize)], i: usize, with: &str| {
        let (a, b) = spans[i % spans.len()];
        format!("{} {with} {}", &text[..a], &text[b..])
    };
    match *damage {
        Damage::Replace { token, which } => splice(&spans, token, HOSTILE[which]),
        Damage::Renumber { number, which } => splice(&numbers, number, HOSTILE[which]),
        Damage::Remove { token } => splice(&spans, token, ""),
        Damage::Truncate { at } => {
            let mut cut = text.len() * at as usize / 1000;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text[..cut].to_string()
        }
    }
}

/// Parses the damaged text and, when it parses (with no dimension of more than 2^20),
/// generates it into a scratch map in memory.
/// Errors are expected; panics are the failure.
fn exercise(text: &str) {
    let Ok(parsed) = parse_cdl(text, "damaged.cdl") else {
        return;
    };
    // A dimension of millions gets netcdf-c's default chunks of hundreds of MB, stored full
    // of fill around the few values given: valid, but a test of memory bandwidth, not of
    // the code.
    if parsed.dataset.dims.iter().any(|d| d.len > 1 << 20) {
        return;
    }
    let scratch = Location {
        original: "memory".into(),
        storage: Storage::Memory,
        mode: Mode::default(),
    };
    // Half the texts without fill (`gen -x`), which writes the fill after short data.
    let no_fill = text.len() % 2 == 0;
    let _ = generate(parsed, &scratch, CreateOptions::default(), no_fill);
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(1500),
        ..ProptestConfig::default()
    })]

    #[test]
    fn damaged_cdl_generates_or_is_refused(
        text in any::<prop::sample::Index>(),
        damage in damage(),
    ) {
        let texts = texts();
        exercise(&apply(&damage, &texts[text.index(texts.len())]));
    }
}

#[test]
fn every_text_generates_undamaged() {
    // Otherwise the property above would test only the refusal of broken texts.
    for text in texts() {
        let parsed = parse_cdl(&text, "pristine.cdl").unwrap_or_else(|e| panic!("{e}"));
        let scratch = Location {
            original: "memory".into(),
            storage: Storage::Memory,
            mode: Mode::default(),
        };
        generate(parsed, &scratch, CreateOptions::default(), false)
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn overflowing_dimensions_are_refused_at_the_declaration() {
    // 2^32 x 2^32 elements wrapped to 0 in a release build, and the data section then indexed
    // an empty buffer (a panic).
    let text = "netcdf wrap {\ndimensions:\n x = 4294967296 ;\n y = 4294967296 ;\n\
                variables:\n double v(x, y) ;\ndata:\n v = 1, 2 ;\n}\n";
    let err = parse_cdl(text, "wrap.cdl")
        .expect_err("refused")
        .to_string();
    assert!(
        err.contains("wrap.cdl:6:") && err.contains("overflow"),
        "{err}"
    );
    // Two records along an unlimited dimension after one of 2^63.
    let grown = "netcdf grown {\ndimensions:\n x = 9223372036854775808 ;\n u = UNLIMITED ;\n\
                 variables:\n byte v(x, u) ;\ndata:\n v = {1, 2} ;\n}\n";
    let err = parse_cdl(grown, "grown.cdl")
        .expect_err("refused")
        .to_string();
    assert!(
        err.contains("grown.cdl:8:") && err.contains("overflow"),
        "{err}"
    );
}
