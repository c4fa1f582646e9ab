//! The CDL writer behind `nczarrfs dump`: the text Debian's `ncdump` prints for the same
//! content stored as netCDF-4/HDF5, byte for byte.
//!
//! The layout rules (indentation by group depth, the 80-column wrapping of the data section,
//! the `{ }` record markers of variables with several unlimited dimensions, which values print
//! as `_`) follow ncdump's behaviour as observed with `ncgen -k nc4` + `ncdump`; the
//! expected outputs used by the tests come from those tools (tests/data/dump/).
//!
//! Values are read in blocks of whole trailing dimensions so that memory stays bounded for
//! big variables, and written through a buffered writer.

use std::ffi::OsStr;
use std::io::{self, BufWriter, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::cdl::fmt::{
    double_data, escape_name, escape_name_bytes, escape_text, float_data, quote_char_row,
    write_attr_cdl, write_attr_cdl_with, CFormat, Precision,
};
use crate::cdl::special;
use crate::cdl::times::TimeUnits;
use crate::chunk::{ChunkEngine, Hyperslab};
use crate::model::{AttrValue, Attribute, Dataset, GroupId, NcType, VarId};
use crate::{Error, Result};

/// Options of `dump`, named after ncdump's flags.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DumpOptions {
    /// `-h`: header only, no data section.
    pub header_only: bool,
    /// `-c`: data only for coordinate variables.
    pub coords_only: bool,
    /// `-v a,b`: data only for these variables (names, relative paths `g/v` or full names
    /// `/g/v`); the header is still printed in full.
    pub vars: Option<Vec<String>>,
    /// `-n`: the name on the `netcdf NAME {` line instead of the one derived from the location.
    pub name: Option<String>,
    /// `-s`: the special virtual attributes (storage, filters, codecs, byte order, format).
    pub special: bool,
    /// `-F`: with `special`, every filter in `_Filter` instead of `_Fletcher32`, `_Shuffle`
    /// and `_DeflateLevel` for the standard ones.
    pub all_filters: bool,
    /// `-p f[,d]` or `-d f[,d]`: significant digits of `float` values, in attributes and
    /// data, where not ncdump's default.
    pub float_digits: Option<usize>,
    /// The `d` of `-p f,d` or `-d f,d`: significant digits of `double` values.
    pub double_digits: Option<usize>,
    /// Whether floats ignore `C_format` attributes, printing with `float_digits` (`-p f`,
    /// as ncdump does; `-d` leaves `C_format` in force).
    pub float_digits_override_c_format: bool,
    /// Whether doubles ignore `C_format` attributes, printing with `double_digits`.
    pub double_digits_override_c_format: bool,
    /// `-l len`: the maximum line length of the data section (ncdump's default is 80).
    pub line_len: Option<usize>,
    /// `-b lang` / `-f lang`: comments in the data section giving the indices of values.
    pub annotate: Option<Annotate>,
    /// `-t` (`' '`) / `-i` (`'T'`): values of time variables (CF `units` such as `days since
    /// 2000-01-01`) as dates, with this character between date and time.
    pub times: Option<char>,
    /// `-g a,b`: data only for the variables of these groups (names, matching groups of
    /// that name at any depth, or full names `/g/h`); the header is still printed in full.
    pub groups: Option<Vec<String>>,
}

/// Comments with the indices of data values (`ncdump -b` and `-f`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Annotate {
    /// `-b`: a comment before each row of a variable of two or more dimensions.
    pub brief: bool,
    /// `-f`: a comment after every value.
    pub full: bool,
    /// Fortran conventions (`f`): indices from 1, fastest-varying first; else C's.
    pub fortran: bool,
}

impl Annotate {
    /// The comment `-f` puts after value `iel` of the row at `cor` (the row's indices, one
    /// fewer than the variable's rank), ending the line: `  // v(1,2,3)\n    `. A scalar is
    /// `v(0)`, or `v(1)` in Fortran (where ncdump prints whatever its memory holds).
    fn value_comment(&self, name: &str, cor: &[u64], iel: u64) -> String {
        let indices: Vec<String> = if self.fortran {
            std::iter::once(iel + 1)
                .chain(cor.iter().rev().map(|c| c + 1))
                .map(|i| i.to_string())
                .collect()
        } else {
            cor.iter()
                .copied()
                .chain(std::iter::once(iel))
                .map(|i| i.to_string())
                .collect()
        };
        format!("  // {}({})\n    ", escape_name(name), indices.join(","))
    }

    /// The comment `-b` puts before a row of `ncols` values at `cor`: `// v(0,1, 0-9)`.
    fn row_comment(&self, name: &str, cor: &[u64], ncols: u64) -> String {
        let mut text = format!("// {}(", escape_name(name));
        if self.fortran {
            text.push_str(&if ncols == 1 {
                "1".to_string()
            } else {
                format!("1-{ncols} ")
            });
            for c in cor.iter().rev() {
                text.push_str(&format!(",{}", c + 1));
            }
        } else {
            for c in cor {
                text.push_str(&format!("{c},"));
            }
            text.push_str(&if ncols == 1 {
                "0".to_string()
            } else {
                format!(" 0-{}", ncols - 1)
            });
        }
        text.push_str(")\n");
        text
    }
}

/// ncdump's default maximum line length (`-l`), of which it uses all but two columns.
const DEFAULT_LINE_LEN: usize = 80;

/// Target size of one block of values read from the chunk engine.
const BLOCK_BYTES: usize = 4 << 20;

/// Variables whose names are CDL keywords get a space before the `:` of their attributes.
const KEYWORDS: [&str; 5] = ["variables", "dimensions", "data", "group", "types"];

/// Writes the CDL of `ds` as `ncdump [-h] [-c] [-v ...]` prints it, reading values through
/// `engine`. `name` is the dataset name unless `opts.name` overrides it; its bytes are
/// written as they are, UTF-8 or not, as ncdump writes a file's name. `out_name` names
/// `out` in the error of a failed write (`standard output`, a file's path).
pub fn dump(
    ds: &Dataset,
    engine: &ChunkEngine,
    name: impl AsRef<OsStr>,
    opts: &DumpOptions,
    out: &mut dyn Write,
    out_name: &Path,
) -> Result<()> {
    let mut read = |v: VarId, slab: &Hyperslab, buf: &mut [u8]| engine.read(ds, v, slab, buf);
    dump_with_reader(ds, name, opts, &mut read, out, out_name)
}

/// A source of variable values: fills the buffer with the hyperslab's values in native
/// representation (what [`ChunkEngine::read`] does).
pub type ValueReader<'a> = dyn FnMut(VarId, &Hyperslab, &mut [u8]) -> Result<()> + 'a;

/// [`dump`] with values coming from any reader (tests, in-memory datasets).
pub fn dump_with_reader(
    ds: &Dataset,
    name: impl AsRef<OsStr>,
    opts: &DumpOptions,
    read: &mut ValueReader<'_>,
    out: &mut dyn Write,
    out_name: &Path,
) -> Result<()> {
    let only_vars = match &opts.vars {
        Some(vars) => Some(ds.select_vars(vars).map_err(Error::NotFound)?),
        None => None,
    };
    let only_groups = match &opts.groups {
        Some(groups) => Some(ds.select_groups(groups).map_err(Error::NotFound)?),
        None => None,
    };
    let mut w = Cdl::new(out, out_name);
    w.only_vars = only_vars;
    w.only_groups = only_groups;
    w.special = opts.special.then_some(opts.all_filters);
    let default = Precision::default();
    w.prec = Precision {
        float: opts.float_digits.unwrap_or(default.float),
        double: opts.double_digits.unwrap_or(default.double),
    };
    w.explicit = (
        opts.float_digits_override_c_format,
        opts.double_digits_override_c_format,
    );
    w.max_line = opts.line_len.unwrap_or(DEFAULT_LINE_LEN).saturating_sub(2);
    w.annotate = opts.annotate;
    w.times = opts.times;
    let name = match &opts.name {
        Some(name) => name.as_bytes(),
        None => name.as_ref().as_bytes(),
    };
    w.raw(b"netcdf ")?;
    w.raw(&escape_name_bytes(name))?;
    w.raw(b" {\n")?;
    w.group(ds, Dataset::ROOT, opts, read)?;
    w.raw(b"}\n")?;
    w.flush()
}

/// The header of one group as ncdump prints it, without indentation: `dimensions:`,
/// `variables:` (declarations and attributes) and `// global attributes:` (root) or
/// `// group attributes:`; no data and no subgroups.
pub fn group_header(ds: &Dataset, group: GroupId) -> String {
    let mut buf = Vec::new();
    let mut w = Cdl::new(&mut buf, Path::new(IN_MEMORY));
    // Writing to a Vec cannot fail.
    let _ = w.group_header(ds, group, 0).and_then(|()| w.flush());
    drop(w);
    String::from_utf8_lossy(&buf).into_owned()
}

/// One variable's declaration and attribute lines as ncdump prints them, without group
/// indentation: `\tint v(d) ;\n\t\tv:units = "m" ;\n`.
pub fn var_header(ds: &Dataset, var: VarId) -> String {
    let mut buf = Vec::new();
    let mut w = Cdl::new(&mut buf, Path::new(IN_MEMORY));
    let _ = w.var_decl(ds, var, 0).and_then(|()| w.flush());
    drop(w);
    String::from_utf8_lossy(&buf).into_owned()
}

/// An attribute's values for a file of their own: the CDL value list (`-999.f`,
/// `1LL, 2LL`, `"a", "b"` for strings), except for `char` attributes whose raw text is
/// returned unquoted and unescaped.
pub fn attr_values(value: &AttrValue) -> String {
    match value {
        AttrValue::Char(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        v => {
            let mut out = Vec::new();
            write_attr_cdl(v, &mut out);
            String::from_utf8_lossy(&out).into_owned()
        }
    }
}

/// The data line(s) of one variable as ncdump prints them in a group at `depth`, given all of
/// its values in native representation (C order). Returns the empty string when a dimension
/// has length 0 (ncdump prints nothing for such variables).
pub fn var_data(ds: &Dataset, var: VarId, values: &[u8], depth: usize) -> Result<String> {
    let mut buf = Vec::new();
    let mut w = Cdl::new(&mut buf, Path::new(IN_MEMORY));
    let mut read = |_: VarId, slab: &Hyperslab, out: &mut [u8]| {
        copy_slab(
            &ds.var_shape(var),
            ds.var(var).element_size(),
            values,
            slab,
            out,
        )
    };
    w.indent = depth * 2;
    w.var_data(ds, var, &mut read)?;
    w.flush()?;
    drop(w);
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// Copies a hyperslab (unit stride) out of a whole array held in memory.
fn copy_slab(
    shape: &[u64],
    elsize: usize,
    all: &[u8],
    slab: &Hyperslab,
    out: &mut [u8],
) -> Result<()> {
    let total: u64 = shape.iter().product();
    if all.len() as u64 != total * elsize as u64 {
        return Err(Error::Invalid(format!(
            "{} bytes of values for {total} elements of {elsize} bytes",
            all.len()
        )));
    }
    let n: u64 = slab.count.iter().product();
    let mut idx = vec![0u64; shape.len()];
    for k in 0..n as usize {
        let mut off = 0u64;
        for d in 0..shape.len() {
            off = off * shape[d] + slab.start[d] + idx[d] * slab.stride[d];
        }
        let src = off as usize * elsize;
        out[k * elsize..(k + 1) * elsize].copy_from_slice(&all[src..src + elsize]);
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < slab.count[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    Ok(())
}

/// What the in-memory output of one header or data piece is called (writing to a `Vec`
/// cannot fail, but the writer needs a name for its output).
const IN_MEMORY: &str = "in-memory text";

/// Text of a `char` attribute as C reads it: up to its first NUL.
fn c_text(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// A variable's time units (`-t`), from its `units` and `calendar` text attributes.
fn time_units_of(var: &crate::model::Variable) -> Option<TimeUnits> {
    let text = |name: &str| match &var.attr(name)?.value {
        AttrValue::Char(bytes) => Some(c_text(bytes)),
        _ => None,
    };
    TimeUnits::parse(&text("units")?, text("calendar").as_deref())
}

/// A numeric attribute's values as doubles (nothing for text).
fn attr_numbers(value: &AttrValue) -> Vec<f64> {
    match value {
        AttrValue::Byte(v) => v.iter().map(|x| f64::from(*x)).collect(),
        AttrValue::UByte(v) => v.iter().map(|x| f64::from(*x)).collect(),
        AttrValue::Short(v) => v.iter().map(|x| f64::from(*x)).collect(),
        AttrValue::UShort(v) => v.iter().map(|x| f64::from(*x)).collect(),
        AttrValue::Int(v) => v.iter().map(|x| f64::from(*x)).collect(),
        AttrValue::UInt(v) => v.iter().map(|x| f64::from(*x)).collect(),
        AttrValue::Int64(v) => v.iter().map(|x| *x as f64).collect(),
        AttrValue::UInt64(v) => v.iter().map(|x| *x as f64).collect(),
        AttrValue::Float(v) => v.iter().map(|x| f64::from(*x)).collect(),
        AttrValue::Double(v) => v.clone(),
        AttrValue::Char(_) | AttrValue::Str(_) => Vec::new(),
    }
}

/// One native numeric element as a double (ncdump's `to_double`).
fn number_at(nctype: NcType, val: &[u8]) -> f64 {
    let mut a = [0u8; 8];
    let n = nctype.size().min(8);
    a[..n].copy_from_slice(&val[..n]);
    match nctype {
        NcType::Byte => f64::from(a[0] as i8),
        NcType::UByte => f64::from(a[0]),
        NcType::Short => f64::from(i16::from_ne_bytes([a[0], a[1]])),
        NcType::UShort => f64::from(u16::from_ne_bytes([a[0], a[1]])),
        NcType::Int => f64::from(i32::from_ne_bytes([a[0], a[1], a[2], a[3]])),
        NcType::UInt => f64::from(u32::from_ne_bytes([a[0], a[1], a[2], a[3]])),
        NcType::Int64 => i64::from_ne_bytes(a) as f64,
        NcType::UInt64 => u64::from_ne_bytes(a) as f64,
        NcType::Float => f64::from(f32_at(val)),
        NcType::Double => f64_at(val),
        NcType::Char | NcType::String => f64::NAN,
    }
}

/// Whether `-g name` selects `group`: a full name (`/a/b`) names one group, a plain name
/// every group so named; a relative path names none, as in ncdump.
/// The fill value ncdump compares data with to print `_`.
enum Fill {
    /// No fill (byte and ubyte without a `_FillValue` attribute).
    None,
    /// A numeric fill as one native element.
    Native(Vec<u8>),
    /// A string fill.
    Str(Vec<u8>),
}

fn fill_of(ds: &Dataset, var: VarId) -> Fill {
    let v = ds.var(var);
    let attr = v
        .attr("_FillValue")
        .filter(|a| a.value.nctype() == v.nctype && a.value.len() == 1);
    if let Some(Attribute { value, .. }) = attr {
        return match value {
            AttrValue::Byte(x) => Fill::Native(x[0].to_ne_bytes().to_vec()),
            AttrValue::UByte(x) => Fill::Native(x.clone()),
            AttrValue::Short(x) => Fill::Native(x[0].to_ne_bytes().to_vec()),
            AttrValue::UShort(x) => Fill::Native(x[0].to_ne_bytes().to_vec()),
            AttrValue::Int(x) => Fill::Native(x[0].to_ne_bytes().to_vec()),
            AttrValue::UInt(x) => Fill::Native(x[0].to_ne_bytes().to_vec()),
            AttrValue::Int64(x) => Fill::Native(x[0].to_ne_bytes().to_vec()),
            AttrValue::UInt64(x) => Fill::Native(x[0].to_ne_bytes().to_vec()),
            AttrValue::Float(x) => Fill::Native(x[0].to_ne_bytes().to_vec()),
            AttrValue::Double(x) => Fill::Native(x[0].to_ne_bytes().to_vec()),
            AttrValue::Char(x) => Fill::Native(x.clone()),
            AttrValue::Str(x) => Fill::Str(x[0].as_bytes().to_vec()),
        };
    }
    match v.nctype {
        // ncdump does not apply default fills to bytes ("too risky").
        NcType::Byte | NcType::UByte => Fill::None,
        NcType::String => Fill::Str(Vec::new()),
        t => Fill::Native(t.default_fill()),
    }
}

fn f32_at(b: &[u8]) -> f32 {
    f32::from_ne_bytes([b[0], b[1], b[2], b[3]])
}

fn f64_at(b: &[u8]) -> f64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    f64::from_ne_bytes(a)
}

/// ncdump's fill comparison: exact for integers; for floating point within a relative
/// machine epsilon of the fill, and NaN matches NaN, infinity matches infinity of same sign.
fn is_fill(nctype: NcType, fill: &Fill, val: &[u8]) -> bool {
    match fill {
        Fill::None => false,
        Fill::Str(s) => val[..val.iter().position(|&b| b == 0).unwrap_or(val.len())] == s[..],
        Fill::Native(f) => match nctype {
            NcType::Float => {
                let (v1, v2) = (f32_at(f), f32_at(val));
                if (v1 > 0.0) != (v2 > 0.0) {
                    false
                } else if v1.is_finite() && v2.is_finite() {
                    (v1 - v2).abs() <= (f32::EPSILON * v2).abs()
                } else {
                    (v1.is_nan() && v2.is_nan()) || (v1.is_infinite() && v2.is_infinite())
                }
            }
            NcType::Double => {
                let (v1, v2) = (f64_at(f), f64_at(val));
                if (v1 > 0.0) != (v2 > 0.0) {
                    false
                } else if v1.is_finite() && v2.is_finite() {
                    (v1 - v2).abs() <= (f64::EPSILON * v2).abs()
                } else {
                    (v1.is_nan() && v2.is_nan()) || (v1.is_infinite() && v2.is_infinite())
                }
            }
            _ => f[..] == val[..f.len().min(val.len())],
        },
    }
}

/// The variable's `C_format` attribute as ncdump uses it: a `char` attribute shorter than
/// 100 characters. Formats outside [`CFormat`]'s subset are ignored.
fn c_format_of(ds: &Dataset, var: VarId) -> Option<CFormat> {
    match &ds.var(var).attr("C_format")?.value {
        AttrValue::Char(b) if !b.is_empty() && b.len() < 100 => {
            CFormat::parse(std::str::from_utf8(b).ok()?.trim_end_matches('\0'))
        }
        _ => None,
    }
}

/// One value formatted with a `C_format`, when the conversion suits the type.
fn format_with(c: &CFormat, nctype: NcType, val: &[u8]) -> Option<String> {
    // ncdump passes the types of 32 bits and fewer as C ints, the others as long longs.
    let int = |v: i128| c.format_int(v, 32);
    match nctype {
        NcType::Float => Some(f32_at(val))
            .filter(|x| x.is_finite())
            .and_then(|x| c.format_float(f64::from(x))),
        NcType::Double => Some(f64_at(val))
            .filter(|x| x.is_finite())
            .and_then(|x| c.format_float(x)),
        NcType::Byte => int(i128::from(val[0] as i8)),
        NcType::UByte => int(i128::from(val[0])),
        NcType::Short => int(i128::from(i16::from_ne_bytes([val[0], val[1]]))),
        NcType::UShort => int(i128::from(u16::from_ne_bytes([val[0], val[1]]))),
        NcType::Int => int(i128::from(i32::from_ne_bytes([
            val[0], val[1], val[2], val[3],
        ]))),
        NcType::UInt => int(i128::from(u32::from_ne_bytes([
            val[0], val[1], val[2], val[3],
        ]))),
        NcType::Int64 | NcType::UInt64 => {
            let mut a = [0u8; 8];
            a.copy_from_slice(&val[..8]);
            let v = if nctype == NcType::Int64 {
                i128::from(i64::from_ne_bytes(a))
            } else {
                i128::from(u64::from_ne_bytes(a))
            };
            c.format_int(v, 64)
        }
        NcType::Char | NcType::String => None,
    }
}

/// One value of a non-`char` variable as ncdump prints it in the data section.
fn format_value(
    nctype: NcType,
    cfmt: Option<&CFormat>,
    prec: Precision,
    val: &[u8],
    out: &mut Vec<u8>,
) {
    if let Some(text) = cfmt.and_then(|c| format_with(c, nctype, val)) {
        out.extend_from_slice(text.as_bytes());
        return;
    }
    let text = match nctype {
        NcType::Byte => (val[0] as i8).to_string(),
        NcType::UByte => val[0].to_string(),
        NcType::Short => i16::from_ne_bytes([val[0], val[1]]).to_string(),
        NcType::UShort => u16::from_ne_bytes([val[0], val[1]]).to_string(),
        NcType::Int => i32::from_ne_bytes([val[0], val[1], val[2], val[3]]).to_string(),
        NcType::UInt => u32::from_ne_bytes([val[0], val[1], val[2], val[3]]).to_string(),
        NcType::Int64 => {
            let mut a = [0u8; 8];
            a.copy_from_slice(&val[..8]);
            i64::from_ne_bytes(a).to_string()
        }
        NcType::UInt64 => {
            let mut a = [0u8; 8];
            a.copy_from_slice(&val[..8]);
            u64::from_ne_bytes(a).to_string()
        }
        NcType::Float => float_data(f32_at(val), prec.float),
        NcType::Double => double_data(f64_at(val), prec.double),
        NcType::Char => {
            quote_char_row(&val[..1], out);
            return;
        }
        NcType::String => {
            let end = val.iter().position(|&b| b == 0).unwrap_or(val.len());
            out.push(b'"');
            escape_text(&val[..end], out);
            out.push(b'"');
            return;
        }
    };
    out.extend_from_slice(text.as_bytes());
}

/// Reads a variable in blocks of consecutive elements (C order), each block a hyperslab of
/// whole trailing dimensions of at most about [`BLOCK_BYTES`].
struct BlockReader {
    var: VarId,
    shape: Vec<u64>,
    elsize: usize,
    /// The dimension along which blocks are cut.
    split: usize,
    /// Indices along `split` per block.
    step: u64,
    /// Start index of the next block for dimensions `0..=split`.
    next: Vec<u64>,
    done: bool,
    buf: Vec<u8>,
    pos: usize,
}

impl BlockReader {
    /// `whole_rows` keeps each row (the last dimension) inside one block, for `char`
    /// variables whose rows print as one string.
    fn new(var: VarId, shape: Vec<u64>, elsize: usize, whole_rows: bool) -> Self {
        let max_split = if whole_rows {
            shape.len().saturating_sub(2)
        } else {
            shape.len().saturating_sub(1)
        };
        let rank = shape.len();
        let mut split = 0;
        let mut inner = elsize as u64 * shape.iter().product::<u64>();
        if rank > 0 {
            inner /= shape[0].max(1);
            while split < max_split && inner > BLOCK_BYTES as u64 {
                split += 1;
                inner /= shape[split].max(1);
            }
        }
        let step = if rank == 0 {
            1
        } else if whole_rows && split + 1 == rank {
            shape[split]
        } else {
            (BLOCK_BYTES as u64 / inner.max(1)).clamp(1, shape[split].max(1))
        };
        BlockReader {
            var,
            next: vec![0; rank.min(split + 1)],
            shape,
            elsize,
            split,
            step,
            done: false,
            buf: Vec::new(),
            pos: 0,
        }
    }

    fn fill(&mut self, read: &mut ValueReader<'_>) -> Result<()> {
        if self.done {
            return Err(Error::Invalid("read past the end of a variable".into()));
        }
        let rank = self.shape.len();
        let mut slab = Hyperslab::whole(&self.shape);
        if rank > 0 {
            for d in 0..self.split {
                slab.start[d] = self.next[d];
                slab.count[d] = 1;
            }
            let s = self.split;
            slab.start[s] = self.next[s];
            slab.count[s] = self.step.min(self.shape[s] - self.next[s]);
            // Advance like an odometer over dimensions 0..=split.
            self.next[s] += slab.count[s];
            let mut d = s;
            while self.next[d] >= self.shape[d] {
                if d == 0 {
                    self.done = true;
                    break;
                }
                self.next[d] = 0;
                d -= 1;
                self.next[d] += 1;
            }
        } else {
            self.done = true;
        }
        let n: u64 = slab.count.iter().product();
        self.buf.resize(n as usize * self.elsize, 0);
        self.pos = 0;
        read(self.var, &slab, &mut self.buf)
    }

    /// The next `n` elements; `n` must not straddle a block boundary (one element always
    /// fits; a whole row fits when blocks are cut above the last dimension).
    fn take(&mut self, n: usize, read: &mut ValueReader<'_>) -> Result<&[u8]> {
        if self.pos >= self.buf.len() {
            self.fill(read)?;
        }
        let len = n * self.elsize;
        if self.pos + len > self.buf.len() {
            return Err(Error::Invalid("row straddles a read block".into()));
        }
        let s = &self.buf[self.pos..self.pos + len];
        self.pos += len;
        Ok(s)
    }
}

/// The output state: the writer, the current group indentation and ncdump's line position
/// for wrapping the data section.
struct Cdl<'w> {
    out: BufWriter<&'w mut dyn Write>,
    /// What `out` is, for the error of a failed write.
    out_name: &'w Path,
    indent: usize,
    linep: usize,
    /// `-s` and `-F` (see [`DumpOptions`]).
    special: Option<bool>,
    /// Digits of floating-point values.
    prec: Precision,
    /// Whether floats, and doubles, ignore `C_format` (see [`DumpOptions`]).
    explicit: (bool, bool),
    /// Longest data line, less two columns.
    max_line: usize,
    /// `-b` or `-f`.
    annotate: Option<Annotate>,
    /// `-t` / `-i`: the separator of date and time.
    times: Option<char>,
    /// With `-t`: the `bounds` attributes seen so far, (bounds variable name, its time
    /// variable), latest last. ncdump keys them by name alone, in any group.
    bounds: Vec<(String, VarId)>,
    /// ncdump's line position for the date comments of attributes (kept from one attribute
    /// to the next, as ncdump keeps it).
    comment_pos: usize,
    /// `-v`: the only variables whose data is printed.
    only_vars: Option<Vec<VarId>>,
    /// `-g`: the only groups whose data is printed.
    only_groups: Option<Vec<GroupId>>,
}

impl<'w> Cdl<'w> {
    fn new(out: &'w mut dyn Write, out_name: &'w Path) -> Self {
        Cdl {
            out: BufWriter::with_capacity(1 << 16, out),
            out_name,
            indent: 0,
            linep: 0,
            special: None,
            prec: Precision::default(),
            explicit: (false, false),
            max_line: DEFAULT_LINE_LEN - 2,
            annotate: None,
            times: None,
            bounds: Vec::new(),
            comment_pos: 0,
            only_vars: None,
            only_groups: None,
        }
    }

    fn raw(&mut self, b: &[u8]) -> Result<()> {
        self.out.write_all(b).map_err(|e| self.io_err(e))
    }

    fn flush(&mut self) -> Result<()> {
        self.out.flush().map_err(|e| self.io_err(e))
    }

    /// A failed write of the output as the error that names it.
    fn io_err(&self, e: io::Error) -> Error {
        Error::io(self.out_name, e)
    }

    fn indent_out(&mut self) -> Result<()> {
        for _ in 0..self.indent {
            self.out.write_all(b" ").map_err(|e| self.io_err(e))?;
        }
        Ok(())
    }

    /// ncdump's `lput`: writes a piece that must not be split, first breaking the line (with
    /// the group indentation plus four spaces) if the piece would pass the maximum length.
    fn lput(&mut self, s: &[u8]) -> Result<()> {
        let nn = s.len();
        if nn + self.linep > self.max_line && nn > 2 {
            self.raw(b"\n")?;
            self.indent_out()?;
            self.raw(b"    ")?;
            self.linep = 4 + self.indent;
        }
        self.raw(s)?;
        if s.last() == Some(&b'\n') {
            self.linep = self.indent;
        } else {
            self.linep += nn;
        }
        Ok(())
    }

    /// Writes the group `root` and every group below it, each subgroup inside its
    /// `group: NAME {` ... `} // group NAME` lines. Iterative, not recursive: groups nested
    /// thousands deep would overflow a thread's stack (a mount thread's, for @header.cdl).
    fn group(
        &mut self,
        ds: &Dataset,
        root: GroupId,
        opts: &DumpOptions,
        read: &mut ValueReader<'_>,
    ) -> Result<()> {
        /// What is left to write, the next step last.
        enum Step {
            /// A subgroup: its opening line, its header and data, then its subgroups.
            Open(GroupId),
            /// The line that closes the subgroup of this (escaped) name.
            Close(String),
        }
        self.group_content(ds, root, opts, read)?;
        let mut steps: Vec<Step> = ds
            .group(root)
            .groups
            .iter()
            .rev()
            .map(|&g| Step::Open(g))
            .collect();
        while let Some(step) = steps.pop() {
            match step {
                Step::Open(g) => {
                    let name = escape_name(&ds.group(g).name);
                    self.raw(b"\n")?;
                    self.indent_out()?;
                    self.raw(format!("group: {name} {{\n").as_bytes())?;
                    self.indent += 2;
                    self.group_content(ds, g, opts, read)?;
                    steps.push(Step::Close(name));
                    steps.extend(ds.group(g).groups.iter().rev().map(|&sub| Step::Open(sub)));
                }
                Step::Close(name) => {
                    self.indent_out()?;
                    self.raw(format!("}} // group {name}\n").as_bytes())?;
                    self.indent -= 2;
                }
            }
        }
        Ok(())
    }

    /// The header and data of group `g`, at the current indentation, without its subgroups.
    fn group_content(
        &mut self,
        ds: &Dataset,
        g: GroupId,
        opts: &DumpOptions,
        read: &mut ValueReader<'_>,
    ) -> Result<()> {
        let depth = self.indent;
        self.group_header(ds, g, depth)?;
        let group = ds.group(g);
        let selected = self.only_groups.as_ref().is_none_or(|ids| ids.contains(&g));
        if !opts.header_only && selected {
            if !group.vars.is_empty() {
                self.indent_out()?;
                self.raw(b"data:\n")?;
            }
            for &v in &group.vars {
                if self.only_vars.as_ref().is_some_and(|ids| !ids.contains(&v)) {
                    continue;
                }
                if opts.coords_only && !is_coord_var(ds, v) {
                    continue;
                }
                self.var_data(ds, v, read)?;
            }
        }
        Ok(())
    }

    fn group_header(&mut self, ds: &Dataset, g: GroupId, indent: usize) -> Result<()> {
        self.indent = indent;
        let group = ds.group(g);
        if !group.dims.is_empty() {
            self.indent_out()?;
            self.raw(b"dimensions:\n")?;
        }
        for &d in &group.dims {
            let dim = ds.dim(d);
            self.indent_out()?;
            let line = if dim.unlimited {
                format!(
                    "\t{} = UNLIMITED ; // ({} currently)\n",
                    escape_name(&dim.name),
                    dim.len
                )
            } else {
                format!("\t{} = {} ;\n", escape_name(&dim.name), dim.len)
            };
            self.raw(line.as_bytes())?;
        }
        if !group.vars.is_empty() {
            self.indent_out()?;
            self.raw(b"variables:\n")?;
        }
        for &v in &group.vars {
            self.var_decl(ds, v, indent)?;
        }
        let attrs: Vec<&Attribute> = group
            .attrs
            .iter()
            .filter(|a| !(g == Dataset::ROOT && a.name == "_NCProperties"))
            .collect();
        let specials = match self.special {
            Some(_) if g == Dataset::ROOT => special::global_specials(ds),
            _ => Vec::new(),
        };
        // ncdump -s prints the heading of every group, its attributes or not.
        if !attrs.is_empty() || self.special.is_some() {
            self.raw(b"\n")?;
            self.indent_out()?;
            self.raw(if g == Dataset::ROOT {
                b"// global attributes:\n"
            } else {
                b"// group attributes:\n"
            })?;
        }
        for a in attrs {
            self.attr_line("", a, None)?;
        }
        for (name, value) in specials {
            self.special_line("", name, &value)?;
        }
        Ok(())
    }

    /// A virtual attribute of `ncdump -s`: unlike real attributes, no type prefix and no
    /// blank before the `:` of a variable named like a CDL keyword.
    fn special_line(&mut self, varname: &str, name: &str, value: &str) -> Result<()> {
        self.indent_out()?;
        let line = format!("\t\t{}:{name} = {value} ;\n", escape_name(varname));
        self.raw(line.as_bytes())
    }

    fn var_decl(&mut self, ds: &Dataset, v: VarId, indent: usize) -> Result<()> {
        self.indent = indent;
        let var = ds.var(v);
        let mut line = format!("\t{} {}", var.nctype.cdl_name(), escape_name(&var.name));
        if !var.dims.is_empty() {
            let names: Vec<String> = var
                .dims
                .iter()
                .map(|&d| dim_ref(ds, var.group, d))
                .collect();
            line.push('(');
            line.push_str(&names.join(", "));
            line.push(')');
        }
        line.push_str(" ;\n");
        self.indent_out()?;
        self.raw(line.as_bytes())?;
        let own_times = self.times.and_then(|_| time_units_of(var));
        for a in &var.attrs {
            self.attr_line(&var.name, a, own_times.as_ref())?;
            if self.times.is_some() && a.name == "bounds" {
                if let AttrValue::Char(text) = &a.value {
                    self.bounds.push((c_text(text), v));
                }
            }
        }
        if let Some(all_filters) = self.special {
            for (name, value) in special::var_specials(ds, v, all_filters) {
                self.special_line(&var.name, name, &value)?;
            }
        }
        Ok(())
    }

    /// One attribute line; `times`, the time units of the variable, adds the dates of a
    /// numeric attribute's values as a comment (`-t`).
    fn attr_line(&mut self, varname: &str, a: &Attribute, times: Option<&TimeUnits>) -> Result<()> {
        let mut line = Vec::with_capacity(64);
        line.extend_from_slice(b"\t\t");
        if a.value.nctype() == NcType::String {
            line.extend_from_slice(b"string ");
        }
        line.extend_from_slice(escape_name(varname).as_bytes());
        if KEYWORDS.contains(&varname) {
            line.push(b' ');
        }
        line.push(b':');
        line.extend_from_slice(escape_name(&a.name).as_bytes());
        line.extend_from_slice(b" = ");
        write_attr_cdl_with(&a.value, self.prec, &mut line);
        line.extend_from_slice(b" ;");
        if let (Some(tu), Some(sep)) = (times, self.times) {
            let values = attr_numbers(&a.value);
            let wrap = values.len() > 2;
            for (i, x) in values.iter().enumerate() {
                let mut text = tu.format(*x, sep).unwrap_or_else(|| {
                    let mut plain = Vec::new();
                    write_attr_cdl_with(&a.value.element(i), self.prec, &mut plain);
                    String::from_utf8_lossy(&plain).into_owned()
                });
                if i + 1 < values.len() {
                    text.push(',');
                }
                self.date_comment(&mut line, &text, i == 0, wrap);
            }
        }
        line.push(b'\n');
        self.indent_out()?;
        self.raw(&line)
    }

    /// ncdump's `lput2`: one date of an attribute's comment, after a blank or, when
    /// wrapping and at the first or past the line length, on a new comment line.
    fn date_comment(&mut self, line: &mut Vec<u8>, text: &str, first: bool, wrap: bool) {
        self.comment_pos += 1 + text.len();
        let newline = wrap && (first || self.comment_pos > self.max_line + 2);
        if newline {
            line.push(b'\n');
            line.extend(std::iter::repeat_n(b' ', self.indent));
            line.extend_from_slice(b"\t\t  ");
            self.comment_pos = 16 + 2 + text.len();
        } else {
            line.push(b' ');
        }
        if first || newline {
            line.extend_from_slice(b"// ");
            self.comment_pos += 3;
        }
        line.extend_from_slice(text.as_bytes());
    }

    /// The time units a variable's data is printed with under `-t`: its own, or those of the
    /// time variable whose `bounds` name it (ncdump looks the name up in every group).
    fn data_time_units(&self, ds: &Dataset, v: VarId) -> Option<TimeUnits> {
        let var = ds.var(v);
        if matches!(var.nctype, NcType::Char | NcType::String) {
            return None;
        }
        let owner = self
            .bounds
            .iter()
            .rev()
            .find(|(name, _)| *name == var.name)
            .map_or(v, |(_, parent)| *parent);
        time_units_of(ds.var(owner))
    }

    fn var_data(&mut self, ds: &Dataset, v: VarId, read: &mut ValueReader<'_>) -> Result<()> {
        let var = ds.var(v);
        let shape = ds.var_shape(v);
        if shape.contains(&0) {
            return Ok(());
        }
        let rank = shape.len();
        let fill = fill_of(ds, v);
        let cfmt = match var.nctype {
            NcType::Float if self.explicit.0 => None,
            NcType::Double if self.explicit.1 => None,
            _ => c_format_of(ds, v),
        };
        let prec = self.prec;
        let times = match self.times {
            Some(sep) => self.data_time_units(ds, v).map(|tu| (tu, sep)),
            None => None,
        };
        let unlimited: Vec<bool> = var.dims.iter().map(|&d| ds.dim(d).unlimited).collect();
        self.raw(b"\n")?;
        self.indent_out()?;
        self.raw(b" ")?;
        self.raw(escape_name(&var.name).as_bytes())?;
        if rank <= 1 {
            self.raw(b" = ")?;
            self.linep = var.name.len() + 4 + self.indent;
        } else {
            self.raw(b" =\n  ")?;
            self.linep = 2 + self.indent;
        }
        let ncols = if rank == 0 {
            1
        } else {
            shape[rank - 1] as usize
        };
        let is_char = var.nctype == NcType::Char;
        let elsize = var.element_size();
        if elsize == 0 {
            return Err(Error::Unreadable {
                var: ds.var_fqn(v),
                reason: "zero element size".into(),
            });
        }
        // Char rows are printed as whole strings, so blocks must hold whole rows.
        let mut blocks = BlockReader::new(v, shape.clone(), elsize, is_char);
        let nrows: u64 = if rank == 0 {
            1
        } else {
            shape[..rank - 1].iter().product()
        };
        let mut idx = vec![0u64; rank.saturating_sub(1)];
        let mut piece = Vec::with_capacity(64);
        let full = self.annotate.filter(|a| a.full);
        for row in 0..nrows {
            // Opening record markers: one per unlimited dimension (below the first) whose
            // sub-block starts at this row.
            for level in 1..rank {
                if unlimited[level] && idx[level..].iter().all(|&i| i == 0) {
                    self.lput(b"{")?;
                }
            }
            if let Some(a) = self.annotate.filter(|a| a.brief && rank > 1 && ncols > 0) {
                // Printed outside ncdump's line accounting, which restarts after it.
                self.raw(a.row_comment(&var.name, &idx, ncols as u64).as_bytes())?;
                self.indent_out()?;
                self.raw(b"    ")?;
                self.linep = 4 + self.indent;
            }
            // Closing markers: one per unlimited dimension whose sub-block ends at this row.
            let marks = (1..rank)
                .filter(|&level| {
                    unlimited[level] && (level..rank - 1).all(|m| idx[m] == shape[m] - 1)
                })
                .count();
            piece.clear();
            if is_char {
                let vals = blocks.take(ncols, read)?;
                let mut text = Vec::with_capacity(ncols + 2);
                quote_char_row(vals, &mut text);
                // ncdump prints the string without moving its line position.
                self.raw(&text)?;
            } else {
                for i in 0..ncols {
                    let val = blocks.take(1, read)?;
                    piece.clear();
                    if is_fill(var.nctype, &fill, val) {
                        piece.push(b'_');
                    } else if let Some(date) = times
                        .as_ref()
                        .and_then(|(tu, sep)| tu.format(number_at(var.nctype, val), *sep))
                    {
                        piece.extend_from_slice(date.as_bytes());
                    } else {
                        format_value(var.nctype, cfmt.as_ref(), prec, val, &mut piece);
                    }
                    if i + 1 < ncols {
                        piece.extend_from_slice(b", ");
                        match full {
                            // Annotated values bypass the line accounting too.
                            Some(a) => {
                                self.raw(&piece)?;
                                let note = a.value_comment(&var.name, &idx, i as u64);
                                self.raw(note.as_bytes())?;
                            }
                            None => self.lput(&piece)?,
                        }
                    }
                }
            }
            piece.extend(std::iter::repeat_n(b'}', marks));
            if let Some(a) = full {
                self.raw(&piece)?;
                self.raw(if row + 1 == nrows { b";" } else { b"," })?;
                let note = a.value_comment(&var.name, &idx, ncols as u64 - 1);
                self.raw(note.as_bytes())?;
            } else {
                self.lput(&piece)?;
                if row + 1 == nrows {
                    self.lput(b" ;")?;
                    self.lput(b"\n")?;
                } else {
                    self.lput(b",\n")?;
                    self.lput(b"  ")?;
                }
            }
            for d in (0..idx.len()).rev() {
                idx[d] += 1;
                if idx[d] < shape[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
        Ok(())
    }
}

/// Whether ncdump's `-c` treats the variable as a coordinate variable: one dimension, and a
/// dimension of the same name visible from its group.
fn is_coord_var(ds: &Dataset, v: VarId) -> bool {
    let var = ds.var(v);
    var.dims.len() == 1 && ds.find_dim_visible(var.group, &var.name).is_some()
}

/// How a variable's dimension is named in its declaration: the plain name when the name
/// resolves to that dimension from the variable's group, else prefixed with the full name of
/// the nearest ancestor group from which it does (ncdump's rule).
///
/// A dimension of a group that is no ancestor of the variable's (`/a/e` for a variable of
/// `/b`) resolves from none of them. ncdump 4.9.0's walk up the groups then ends at the root
/// group when that has dimensions of its own, and prints `/e`; otherwise it prints the
/// defining group's full name in the plain cases, which is what is printed then (valid CDL).
fn dim_ref(ds: &Dataset, group: GroupId, d: crate::model::DimId) -> String {
    let dim = ds.dim(d);
    let name = &dim.name;
    let mut resolving = Some(group);
    while let Some(g) = resolving {
        if ds.find_dim_visible(g, name) == Some(d) {
            break;
        }
        resolving = ds.group(g).parent;
    }
    let prefix_group = match resolving {
        Some(g) if g == group => return escape_name(name),
        Some(g) => g,
        None if ds.dims.iter().any(|x| x.group == Dataset::ROOT) => Dataset::ROOT,
        None => dim.group,
    };
    let fqn = ds.group_fqn(prefix_group);
    let sep = if fqn == "/" { "" } else { "/" };
    format!("{}{sep}{}", escape_name(&fqn), escape_name(name))
}
