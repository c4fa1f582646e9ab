//! The write side of a `rw` mount, free of inodes: byte writes into a variable's flat `data`
//! file become hyperslab writes (growing the unlimited first dimension when they run past the
//! end), and the text written to an attribute file becomes a typed attribute value.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use crate::cdl::lexer::{tokenize, Tok};
use crate::cdl::parser::parse_cdl;
use crate::chunk::{FailedWrite, Hyperslab};
use crate::create::{AttrTarget, DatasetWriter};
use crate::model::quantize::{Quantize, QuantizeMode};
use crate::model::{AttrValue, Attribute, Dataset, DimId, NcType, VarId};
use crate::{Error, Result};

use super::slab::{element_range_slabs, slab_len};

/// Writes `data` at byte `offset` of `var`'s `data` file and returns how many bytes were
/// taken: all of them, except that a variable which cannot grow takes only what fits before
/// its end (0 when `offset` is at or past it: the caller's `EFBIG`, logged with
/// [`why_fixed_size`]).
///
/// A variable grows when its first dimension is unlimited and used only there: the dimension
/// is extended to cover the whole record the write ends in, so the rest of that record (and any
/// gap before the write) reads as fill. Bytes that cover only part of an element are merged
/// with the element's current value; for a quantized variable, with the bytes earlier writes
/// gave it, kept in `partial` (see [`PartialElements`]).
pub fn write_data(
    w: &mut DatasetWriter,
    var: VarId,
    offset: u64,
    data: &[u8],
    partial: &PartialElements,
) -> Result<usize> {
    let ds = w.model();
    let v = ds
        .vars
        .get(var.0)
        .ok_or_else(|| Error::NotFound(format!("variable #{}", var.0)))?;
    if let Some(why) = &v.storage.unreadable {
        return Err(Error::Unsupported(format!("{}: {why}", ds.var_fqn(var))));
    }
    let esz = v.element_size() as u64;
    if esz == 0 || data.is_empty() {
        return Ok(0);
    }
    let shape = ds.var_shape(var);
    let size = shape.iter().product::<u64>().saturating_mul(esz);
    let grow_dim = growing_dim(ds, var);
    let record_elems: u64 = shape.iter().skip(1).product();
    let mut end = offset
        .checked_add(data.len() as u64)
        .ok_or_else(|| Error::InvalidHyperslab("write past 2^64 bytes".into()))?;
    let mut growth = None;
    if end > size {
        match grow_dim {
            Some(dim) if record_elems > 0 => {
                let records = end.div_ceil(esz).div_ceil(record_elems);
                // Every element the write touches, the ones it covers only in part merged
                // with what they read now (the fill value past the end), is checked before
                // the variable grows, so that a refused value adds no records. The merge is
                // made again once grown: a chunk may hold another spelling of the fill there
                // (netcdf-c stores its default fill exactly and declares it rounded).
                let mut grown = shape.clone();
                grown[0] = records;
                let buf = {
                    let mut kept = partial.lock();
                    let elements = kept_elements(&mut kept, w.model(), var);
                    merge_partial_elements(w, var, &shape, offset, data, elements.as_deref())?
                };
                check_storable(w, var, &grown, offset / esz, &buf)?;
                growth = w.grow_dim_for_write(dim, records)?;
            }
            _ if offset >= size => return Ok(0),
            _ => end = size,
        }
    }
    let data = &data[..(end - offset) as usize];
    // A write that fails having changed nothing leaves the variable as long as it was; one
    // whose first slabs took effect is a short write of their bytes.
    let written = write_grown(w, var, offset, data, partial);
    match (written, growth) {
        (Ok(n), Some(growth)) if n < data.len() => {
            let records = (offset + n as u64).div_ceil(esz).div_ceil(record_elems);
            w.ungrow(growth, records);
            Ok(n)
        }
        (Err(failed), Some(growth)) if !failed.in_part => {
            w.ungrow(growth, 0);
            Err(failed.error)
        }
        (written, _) => written.map_err(|f| f.error),
    }
}

/// Grows `var`'s `data` file to `size` bytes or more without writing a value (`truncate`,
/// `posix_fallocate`): the unlimited first dimension is extended to cover the whole record
/// that byte `size - 1` lies in, so every new element holds one whole fill value, as the
/// records a write adds past its end do. Writing back what the last new byte reads would
/// merge the declared fill into an element whose chunk may hold another spelling of it
/// (netcdf-c's exact default fill), making a value that is neither. `false` when the
/// variable cannot grow (the caller's `EFBIG`, logged with [`why_fixed_size`]).
pub fn grow_data(w: &mut DatasetWriter, var: VarId, size: u64) -> Result<bool> {
    let ds = w.model();
    let v = ds
        .vars
        .get(var.0)
        .ok_or_else(|| Error::NotFound(format!("variable #{}", var.0)))?;
    if let Some(why) = &v.storage.unreadable {
        return Err(Error::Unsupported(format!("{}: {why}", ds.var_fqn(var))));
    }
    let esz = v.element_size() as u64;
    let shape = ds.var_shape(var);
    let record_elems: u64 = shape.iter().skip(1).product();
    if shape.iter().product::<u64>().saturating_mul(esz) >= size {
        return Ok(true);
    }
    match growing_dim(ds, var) {
        Some(dim) if esz > 0 && record_elems > 0 => {
            w.grow_dim(dim, size.div_ceil(esz).div_ceil(record_elems))?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// [`write_data`] of a write that changes no definition, with shared access to the writer
/// (see [`DatasetWriter::try_write_within`]), so that it need not wait for reads that wait on
/// storage: `None` when it needs exclusive access, because it ends past the end of `var`'s
/// `data` file or the dataset's writes cannot run beside reads
/// ([`DatasetWriter::writes_beside_reads`]). The caller lets one such write run at a time.
pub fn write_data_within(
    w: &DatasetWriter,
    var: VarId,
    offset: u64,
    data: &[u8],
    partial: &PartialElements,
) -> Option<Result<usize>> {
    let ds = w.model();
    let v = ds.vars.get(var.0)?;
    let esz = v.element_size() as u64;
    let size = ds.var_shape(var).iter().product::<u64>().checked_mul(esz)?;
    let end = offset.checked_add(data.len() as u64)?;
    if v.storage.unreadable.is_some() || esz == 0 || data.is_empty() || end > size {
        return None;
    }
    if !w.writes_beside_reads().unwrap_or(false) {
        return None;
    }
    Some(write_grown(w, var, offset, data, partial).map_err(|f| f.error))
}

/// The bytes written to elements of quantized variables that writes have covered only in part
/// so far, by variable and element index. A value is quantized from the bytes its writer gave
/// it, as netcdf-c quantizes the values of one write: an element written in pieces (`dd bs=2`
/// of floats, a kernel cutting a write across an element) is stored quantized from what it
/// holds after each piece, and the next piece is merged with those kept bytes, not with the
/// quantized value stored, which lost the low bits of the first piece. An element leaves once
/// its writers have given every byte of it; one never completed keeps the quantized value of
/// its written bytes over what it held before.
///
/// A variable's kept bytes are forgotten when the last open descriptor of its `data` file is
/// released ([`PartialElements::released`]) and at an open with `O_TRUNC`
/// ([`PartialElements::forget`]): a piece written after that merges with the quantized value
/// stored, as a netcdf-c write of part of an element would. When a dimension of the variable
/// grows (through another variable), the kept bytes follow their element to its new index.
#[derive(Debug, Default)]
pub struct PartialElements {
    kept: Mutex<HashMap<VarId, KeptVar>>,
    /// How many descriptors have each variable's `data` file open.
    open: Mutex<HashMap<VarId, usize>>,
}

impl PartialElements {
    fn lock(&self) -> MutexGuard<'_, HashMap<VarId, KeptVar>> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_open(&self) -> MutexGuard<'_, HashMap<VarId, usize>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A descriptor of `var`'s `data` file was opened.
    pub fn opened(&self, var: VarId) {
        *self.lock_open().entry(var).or_default() += 1;
    }

    /// A descriptor of `var`'s `data` file counted by [`PartialElements::opened`] was
    /// released: the last one forgets the bytes kept for the variable, which would otherwise
    /// stay until unmount for every element left written in part.
    pub fn released(&self, var: VarId) {
        let mut open = self.lock_open();
        let Some(n) = open.get_mut(&var) else {
            return;
        };
        *n -= 1;
        if *n == 0 {
            open.remove(&var);
            // With the count still held: a descriptor opened meanwhile must not lose the
            // bytes its first write keeps.
            self.forget(var);
        }
    }

    /// Forgets the bytes kept for `var` (its `data` file opened with `O_TRUNC`: the bytes
    /// written before are no longer the file's, and its unwritten bytes become zeros).
    pub fn forget(&self, var: VarId) {
        self.lock().remove(&var);
    }
}

/// The elements of one variable written in part, indexed in the shape it had then.
#[derive(Debug)]
struct KeptVar {
    /// The variable's type, dimensions and shape when the indices were last checked.
    nctype: NcType,
    dims: Vec<DimId>,
    shape: Vec<u64>,
    elements: BTreeMap<u64, Partial>,
}

/// `var`'s kept elements (see [`PartialElements`]), indexed in its shape in `ds`: a dimension
/// grown since they were kept (another variable's write or `truncate` past the end of the
/// unlimited dimension `var` uses after its first) moves each to its element's new index, and
/// a change of type or dimensions forgets them, so that they never complete another element.
fn kept_elements<'a>(
    kept: &'a mut HashMap<VarId, KeptVar>,
    ds: &Dataset,
    var: VarId,
) -> Option<&'a mut BTreeMap<u64, Partial>> {
    let v = ds.var(var);
    let shape = ds.var_shape(var);
    let k = kept.get_mut(&var)?;
    if k.nctype != v.nctype || k.dims != v.dims {
        kept.remove(&var);
        return None;
    }
    if k.shape != shape {
        k.elements = std::mem::take(&mut k.elements)
            .into_iter()
            .filter_map(|(i, p)| Some((reindex(i, &k.shape, &shape)?, p)))
            .collect();
        k.shape = shape;
    }
    Some(&mut kept.get_mut(&var)?.elements)
}

/// The index in C order in shape `to` of the element at index `index` in shape `from` (same
/// rank): `None` when it lies outside either.
fn reindex(index: u64, from: &[u64], to: &[u64]) -> Option<u64> {
    let mut coords = vec![0; from.len()];
    let mut rest = index;
    for (c, &n) in coords.iter_mut().zip(from).rev() {
        if n == 0 {
            return None;
        }
        *c = rest % n;
        rest /= n;
    }
    if rest != 0 {
        return None;
    }
    coords
        .iter()
        .zip(to)
        .try_fold(0u64, |flat, (&c, &n)| (c < n).then(|| flat * n + c))
}

/// An element of a quantized variable written in part (see [`PartialElements`]).
#[derive(Debug, Clone)]
struct Partial {
    /// The element as written, unquantized: the bytes written over what it held before.
    raw: Vec<u8>,
    /// Which bytes of it were written (bit `i` for byte `i`: quantized elements, float and
    /// double, have at most 8).
    written: u8,
}

/// [`write_data`] of `data` at byte `offset` of `var`, which is long enough for it: the bytes
/// taken, fewer than all when a slab after the first fails having changed nothing.
fn write_grown(
    w: &DatasetWriter,
    var: VarId,
    offset: u64,
    data: &[u8],
    partial: &PartialElements,
) -> std::result::Result<usize, FailedWrite> {
    let nothing = |error| FailedWrite {
        error,
        in_part: false,
    };
    let esz = w.model().var(var).element_size() as u64;
    let end = offset + data.len() as u64;
    let shape = w.model().var_shape(var);
    let setting = quantization(w.model(), var).map_err(nothing)?;
    let mut kept = partial.lock();
    if setting.is_none() {
        // Bytes kept while the variable had a setting would be stale should one come back.
        kept.remove(&var);
    }
    let elements = kept_elements(&mut kept, w.model(), var);
    let mut buf = merge_partial_elements(w, var, &shape, offset, data, elements.as_deref())
        .map_err(nothing)?;
    let raw = setting.map(|(q, fill)| {
        let raw = buf.clone();
        q.apply_at(
            w.model().var(var).nctype,
            &mut buf,
            fill.as_deref(),
            offset / esz,
        );
        raw
    });
    // A value the stored type cannot hold refuses the whole write, not only what follows it.
    check_storable(w, var, &shape, offset / esz, &buf).map_err(nothing)?;
    let mut pos = 0;
    let mut result = Ok(data.len());
    for slab in element_range_slabs(&shape, offset / esz, end.div_ceil(esz)) {
        let n = (slab_len(&slab) * esz) as usize;
        match w.try_write_within(var, &slab, &buf[pos..pos + n]) {
            Ok(()) => pos += n,
            Err(failed) if failed.in_part || pos == 0 => return Err(failed),
            Err(failed) => {
                log::debug!("short write: {}", failed.error);
                result = Ok((offset / esz * esz + pos as u64 - offset) as usize);
                break;
            }
        }
    }
    if let Some(raw) = raw {
        let v = w.model().var(var);
        let k = kept.entry(var).or_insert_with(|| KeptVar {
            nctype: v.nctype,
            dims: v.dims.clone(),
            shape,
            elements: BTreeMap::new(),
        });
        keep_partial(&mut k.elements, esz, offset, end, &raw[..pos]);
        if k.elements.is_empty() {
            kept.remove(&var);
        }
    }
    result
}

/// Records in `kept` (one variable's [`PartialElements`]) the elements stored from `raw`, the
/// unquantized whole elements from element `offset / esz` on, of which bytes `offset..end` of
/// the `data` file were written: an element written whole, or completed, leaves; one written
/// in part keeps its bytes.
fn keep_partial(kept: &mut BTreeMap<u64, Partial>, esz: u64, offset: u64, end: u64, raw: &[u8]) {
    let first = offset / esz;
    for (i, element) in raw.chunks_exact(esz as usize).enumerate() {
        let index = first + i as u64;
        let start = index * esz;
        let from = offset.max(start) - start;
        let to = end.min(start + esz) - start;
        let covered = (from..to).fold(0u8, |mask, b| mask | 1 << b);
        let written = kept.get(&index).map_or(0, |p| p.written) | covered;
        if u32::from(written) == (1u32 << esz) - 1 {
            kept.remove(&index);
        } else {
            kept.insert(
                index,
                Partial {
                    raw: element.to_vec(),
                    written,
                },
            );
        }
    }
}

/// The quantization of `var` and the fill value it leaves alone, as netcdf-c quantizes every
/// write to a variable whose attributes ask for it (and `put` does). A `data` file is written
/// in pieces the kernel cuts as it likes, so BitGroom alternates along the element's position
/// in the file: the values are those of one netcdf-c write of the whole variable. A setting
/// `put` refuses refuses the write.
fn quantization(ds: &Dataset, var: VarId) -> Result<Option<(Quantize, Option<Vec<u8>>)>> {
    let v = ds.var(var);
    let setting = Quantize::of_variable(v)
        .map_err(|e| Error::Invalid(format!("{}: {e}", ds.var_fqn(var))))?;
    Ok(setting.map(|q| (q, crate::meta::quantize_fill(ds, var))))
}

/// The value to store as attribute `name` of `target` for `value` (replacing the attribute
/// `renamed_from` too, for a rename): `value` itself, except that a quantization attribute is
/// stored as netcdf-c's `nc_def_var_quantize` and `gen` store it, one `int` (`3s` written to
/// the file becomes `3`: the attribute is stored untyped, which reads back as `int`, and the
/// mount must not show another type meanwhile). Refused when the variable would then ask for
/// a quantization that `gen` and `put` refuse ([`Quantize::of_variable`]: a type other than
/// float and double, a precision out of range, not one integer, two settings), which would
/// leave every later `put` to the variable refused. Other attributes are not looked at: a
/// dataset that already holds such a setting may still change them.
pub fn quantize_attr_value(
    ds: &Dataset,
    target: AttrTarget,
    name: &str,
    value: AttrValue,
    renamed_from: Option<&str>,
) -> Result<AttrValue> {
    let AttrTarget::Var(v) = target else {
        return Ok(value);
    };
    if QuantizeMode::from_attribute(name).is_none() {
        return Ok(value);
    }
    let mut var = ds.var(v).clone();
    var.attrs
        .retain(|a| a.name != name && Some(a.name.as_str()) != renamed_from);
    var.attrs.push(Attribute {
        name: name.to_string(),
        value,
    });
    match Quantize::of_variable(&var) {
        Ok(Some(q)) => Ok(q.attribute_value()),
        Ok(None) => unreachable!("the variable has the quantization attribute {name}"),
        Err(e) => Err(Error::Invalid(format!("{}: {e}", ds.var_fqn(v)))),
    }
}

/// The dimension a write past the end of `var`'s `data` file grows: its first, when that is
/// unlimited and not used again later in its shape. Growing a dimension that is used again
/// (`w(r, r)`, `q(t, x, t)`) would change the length of rows after the first, which moves
/// every value already stored to another byte offset of the flat file: an append would land
/// on existing values instead of after them.
fn growing_dim(ds: &Dataset, var: VarId) -> Option<DimId> {
    let dims = &ds.var(var).dims;
    let (&first, rest) = dims.split_first()?;
    (ds.dim(first).unlimited && !rest.contains(&first)).then_some(first)
}

/// Why a write past the end of `var`'s `data` file (or a `truncate` that would make it longer)
/// is refused with `EFBIG`, for the log line: "past the end of …".
pub fn why_fixed_size(ds: &Dataset, var: VarId) -> String {
    let dims = &ds.var(var).dims;
    match dims.split_first() {
        Some((&first, rest)) if ds.dim(first).unlimited && rest.contains(&first) => {
            let name = &ds.dim(first).name;
            format!(
                "a variable that uses its unlimited dimension {name} again: growing {name} \
                 would change the length of its rows and move the values already in the \
                 file (`put` can write past its end)"
            )
        }
        _ => "a fixed-size variable".to_string(),
    }
}

/// The whole elements that `data`, written at byte `offset` of `var`'s `data` file, touches
/// (C order, from element `offset / element_size`): `data` itself, with the bytes of an element
/// it covers only in part taken from the bytes `kept` for it (see [`PartialElements`]), or
/// else from what the element reads now, or from the fill value when it lies past `shape` (in
/// records the write is about to add).
fn merge_partial_elements(
    w: &DatasetWriter,
    var: VarId,
    shape: &[u64],
    offset: u64,
    data: &[u8],
    kept: Option<&BTreeMap<u64, Partial>>,
) -> Result<Vec<u8>> {
    let esz = w.model().var(var).element_size() as u64;
    let end = offset + data.len() as u64;
    let (e0, e1) = (offset / esz, end.div_ceil(esz));
    let elements: u64 = shape.iter().product();
    let current = |index: u64, out: &mut [u8]| -> Result<()> {
        if let Some(p) = kept.and_then(|k| k.get(&index)) {
            out.copy_from_slice(&p.raw);
            Ok(())
        } else if index < elements {
            let slab = element_range_slabs(shape, index, index + 1)
                .pop()
                .unwrap_or_else(|| Hyperslab::whole(&[]));
            w.read(var, &slab, out)
        } else {
            out.copy_from_slice(&w.fill_element(var)?);
            Ok(())
        }
    };
    let mut buf = vec![0u8; ((e1 - e0) * esz) as usize];
    let head = (offset - e0 * esz) as usize;
    if head != 0 {
        current(e0, &mut buf[..esz as usize])?;
    }
    if end % esz != 0 && (e1 - 1 != e0 || head == 0) {
        let last = buf.len() - esz as usize;
        current(e1 - 1, &mut buf[last..])?;
    }
    buf[head..head + data.len()].copy_from_slice(data);
    Ok(buf)
}

/// Refuses `buf`, whole elements of `var` from element `first` on (C order in `shape`), when
/// the stored type cannot hold one of them.
fn check_storable(
    w: &DatasetWriter,
    var: VarId,
    shape: &[u64],
    first: u64,
    buf: &[u8],
) -> Result<()> {
    let esz = w.model().var(var).element_size() as u64;
    let last = first + buf.len() as u64 / esz;
    let mut pos = 0;
    for slab in element_range_slabs(shape, first, last) {
        let n = (slab_len(&slab) * esz) as usize;
        w.check_storable(var, &slab, &buf[pos..pos + n])?;
        pos += n;
    }
    Ok(())
}

/// A number as written in a value list.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Num {
    Int(i128),
    Float(f64),
}

/// The attribute value that the text written to an attribute file stands for.
///
/// An existing `char` attribute, text that is not a CDL value list, and an empty file make a
/// `char` attribute holding the bytes (one trailing newline removed, so that `echo` works).
/// A value list of numbers (`1, 2`, `-999.f`, `1LL, 2LL`) is typed as ncgen types it, except
/// that an existing numeric attribute keeps its type when every value converts to it without
/// loss (a float type accepts any number); a list of quoted strings is a `string` attribute if
/// the existing one is, otherwise `char` (concatenated, as in CDL).
pub fn parse_attr_text(text: &[u8], existing: Option<&AttrValue>) -> AttrValue {
    let raw = text.strip_suffix(b"\n").unwrap_or(text).to_vec();
    if matches!(existing, Some(AttrValue::Char(_))) {
        return AttrValue::Char(raw);
    }
    let Some(list) = value_list(text) else {
        return AttrValue::Char(raw);
    };
    if let (Some(AttrValue::Str(_)), Some(strings)) = (existing, string_list(&list)) {
        return AttrValue::Str(strings);
    }
    let Some(parsed) = ncgen_value(&list) else {
        return AttrValue::Char(raw);
    };
    if let (Some(old), Some(nums)) = (existing, numbers(&parsed)) {
        if let Some(v) = convert(&nums, old.nctype()) {
            return v;
        }
    }
    parsed
}

/// The tokens of `text` when it is exactly a comma-separated list of constants.
fn value_list(text: &[u8]) -> Option<Vec<Tok>> {
    let s = std::str::from_utf8(text).ok()?.trim();
    if s.is_empty() {
        return None;
    }
    // Every token stands where a value is expected: `NaN`, `Infinityf` are numbers here, as
    // in ncgen's attribute values and as the attribute files of such values show them.
    let toks: Vec<Tok> = tokenize(s, "-")
        .ok()?
        .into_iter()
        .map(|t| t.tok.into_value())
        .collect();
    let (last, body) = toks.split_last()?;
    if *last != Tok::Eof {
        return None;
    }
    let well_formed = body.iter().enumerate().all(|(i, t)| {
        if i % 2 == 1 {
            *t == Tok::Comma
        } else {
            matches!(t, Tok::Num(_) | Tok::Str(_) | Tok::Char(_))
        }
    });
    (well_formed && body.len() % 2 == 1).then_some(toks)
}

fn string_list(toks: &[Tok]) -> Option<Vec<String>> {
    toks.iter()
        .filter(|t| !matches!(t, Tok::Comma | Tok::Eof))
        .map(|t| match t {
            Tok::Str(b) => String::from_utf8(b.clone()).ok(),
            _ => None,
        })
        .collect()
}

/// The value ncgen gives `:a = LIST ;` (built back from the validated tokens, so that nothing
/// but constants reaches the parser).
fn ncgen_value(toks: &[Tok]) -> Option<AttrValue> {
    let mut cdl = String::from("netcdf a {\n// global attributes:\n:a = ");
    for t in toks {
        match t {
            Tok::Comma => cdl.push_str(", "),
            Tok::Eof => {}
            Tok::Num(_) | Tok::Str(_) | Tok::Char(_) => cdl.push_str(&constant(t)?),
            _ => return None,
        }
    }
    cdl.push_str(" ;\n}\n");
    let parsed = parse_cdl(&cdl, "-").ok()?;
    parsed
        .dataset
        .group(Dataset::ROOT)
        .attrs
        .first()
        .map(|a| a.value.clone())
}

/// One constant token spelled back as CDL.
fn constant(t: &Tok) -> Option<String> {
    use crate::cdl::lexer::Number;
    Some(match t {
        Tok::Num(Number::Int { value, suffix, .. }) => {
            let sfx = match suffix {
                None => "",
                Some(NcType::Byte) => "b",
                Some(NcType::UByte) => "ub",
                Some(NcType::Short) => "s",
                Some(NcType::UShort) => "us",
                Some(NcType::Int) => "",
                Some(NcType::UInt) => "u",
                Some(NcType::Int64) => "ll",
                Some(NcType::UInt64) => "ull",
                Some(_) => return None,
            };
            format!("{value}{sfx}")
        }
        Tok::Num(Number::Float { value, single }) => {
            let sfx = if *single { "f" } else { "" };
            if value.is_nan() {
                format!("NaN{sfx}")
            } else if value.is_infinite() {
                let sign = if *value < 0.0 { "-" } else { "" };
                format!("{sign}Infinity{sfx}")
            } else {
                // `{:e}` is exact and always reads back as a floating-point literal.
                format!("{value:e}{sfx}")
            }
        }
        Tok::Str(b) => quote(b),
        // A character constant stays one (an octal escape spells any byte): ncgen makes a
        // byte of it in an attribute, not text.
        Tok::Char(c) => format!("'\\{c:03o}'"),
        _ => return None,
    })
}

fn quote(bytes: &[u8]) -> String {
    let mut out = Vec::new();
    crate::cdl::fmt::escape_text(bytes, &mut out);
    format!("\"{}\"", String::from_utf8_lossy(&out))
}

fn numbers(v: &AttrValue) -> Option<Vec<Num>> {
    fn ints<T: Copy + Into<i128>>(v: &[T]) -> Option<Vec<Num>> {
        Some(v.iter().map(|x| Num::Int((*x).into())).collect())
    }
    match v {
        AttrValue::Byte(x) => ints(x),
        AttrValue::UByte(x) => ints(x),
        AttrValue::Short(x) => ints(x),
        AttrValue::UShort(x) => ints(x),
        AttrValue::Int(x) => ints(x),
        AttrValue::UInt(x) => ints(x),
        AttrValue::Int64(x) => ints(x),
        AttrValue::UInt64(x) => ints(x),
        AttrValue::Float(x) => Some(x.iter().map(|f| Num::Float(*f as f64)).collect()),
        AttrValue::Double(x) => Some(x.iter().map(|f| Num::Float(*f)).collect()),
        AttrValue::Char(_) | AttrValue::Str(_) => None,
    }
}

/// `nums` as values of type `t`, if none loses its value (floats accept any number).
fn convert(nums: &[Num], t: NcType) -> Option<AttrValue> {
    fn int<T: TryFrom<i128>>(n: &Num) -> Option<T> {
        let i = match *n {
            Num::Int(i) => i,
            Num::Float(f) if f.is_finite() && f.fract() == 0.0 && f.abs() < 1e38 => f as i128,
            Num::Float(_) => return None,
        };
        T::try_from(i).ok()
    }
    fn all<T>(nums: &[Num], f: impl Fn(&Num) -> Option<T>) -> Option<Vec<T>> {
        nums.iter().map(f).collect()
    }
    let float = |n: &Num| match *n {
        Num::Int(i) => i as f64,
        Num::Float(f) => f,
    };
    Some(match t {
        NcType::Byte => AttrValue::Byte(all(nums, int)?),
        NcType::UByte => AttrValue::UByte(all(nums, int)?),
        NcType::Short => AttrValue::Short(all(nums, int)?),
        NcType::UShort => AttrValue::UShort(all(nums, int)?),
        NcType::Int => AttrValue::Int(all(nums, int)?),
        NcType::UInt => AttrValue::UInt(all(nums, int)?),
        NcType::Int64 => AttrValue::Int64(all(nums, int)?),
        NcType::UInt64 => AttrValue::UInt64(all(nums, int)?),
        NcType::Float => AttrValue::Float(all(nums, |n| {
            let x = float(n);
            let y = x as f32;
            (y.is_finite() || !x.is_finite()).then_some(y)
        })?),
        NcType::Double => AttrValue::Double(nums.iter().map(float).collect()),
        NcType::Char | NcType::String => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::create::{CreateOptions, VarOptions};
    use crate::location::Location;

    fn p(text: &str, existing: Option<&AttrValue>) -> AttrValue {
        parse_attr_text(text.as_bytes(), existing)
    }

    #[test]
    fn typed_lists_follow_ncgen() {
        // Types as ncgen gives them to `:a = ... ;` (CDL rules: suffixes, int by default,
        // double for a plain decimal).
        assert_eq!(p("-999.f\n", None), AttrValue::Float(vec![-999.0]));
        assert_eq!(p("1LL, 2LL", None), AttrValue::Int64(vec![1, 2]));
        assert_eq!(p("1, 2\n", None), AttrValue::Int(vec![1, 2]));
        assert_eq!(p("1.5", None), AttrValue::Double(vec![1.5]));
        assert_eq!(p("3b, -4b", None), AttrValue::Byte(vec![3, -4]));
        assert_eq!(p("7us", None), AttrValue::UShort(vec![7]));
        assert_eq!(p("0.1f", None), AttrValue::Float(vec![0.1]));
        assert_eq!(p("\"ab\", \"cd\"", None), AttrValue::Char(b"abcd".to_vec()));
    }

    /// `ncgen -k nc4` then `ncdump` (4.9.0) of `:a = 'a' ;` and the rest: `97b`, `97b, 98b`,
    /// `1.5f, 97.f`, `97., 1.5`, `NaN`, `NaNf, Infinityf`, `1.5, Infinity`. An attribute file shows NaN and infinities
    /// so, and writing that back kept it as text.
    #[test]
    fn special_values_and_character_constants_follow_ncgen() {
        assert_eq!(p("'a'", None), AttrValue::Byte(vec![97]));
        assert_eq!(p("'a', 'b'\n", None), AttrValue::Byte(vec![97, 98]));
        assert_eq!(p("'\\377'", None), AttrValue::Byte(vec![-1]));
        // With floating-point constants, a character constant is its code (`1.5f, 97.f`).
        assert_eq!(p("1.5f, 'a'\n", None), AttrValue::Float(vec![1.5, 97.0]));
        assert_eq!(p("'a', 1.5", None), AttrValue::Double(vec![97.0, 1.5]));
        let AttrValue::Double(nan) = p("NaN\n", None) else {
            panic!("NaN is a double")
        };
        assert!(nan.len() == 1 && nan[0].is_nan());
        let AttrValue::Float(f) = p("NaNf, Infinityf", None) else {
            panic!("NaNf is a float")
        };
        assert!(f[0].is_nan() && f[1] == f32::INFINITY, "{f:?}");
        assert_eq!(
            p("1.5, Infinity", None),
            AttrValue::Double(vec![1.5, f64::INFINITY])
        );
        assert_eq!(
            p("-Infinityf\n", Some(&AttrValue::Float(vec![0.0]))),
            AttrValue::Float(vec![f32::NEG_INFINITY])
        );
        // Words that are no value stay text.
        assert_eq!(p("nan bread", None), AttrValue::Char(b"nan bread".to_vec()));
        // Spellings ncgen refuses as values (a `+` before a special value, other cases) are
        // no number either.
        for text in [
            "+Infinity",
            "+Infinityf",
            "+Inff",
            "+NaN",
            "-NaN",
            "inf",
            "-inf",
        ] {
            let shown = format!("{text}\n");
            let existing = AttrValue::Double(vec![0.0]);
            assert_eq!(p(&shown, None), AttrValue::Char(text.into()), "{text}");
            assert_eq!(
                p(&shown, Some(&existing)),
                AttrValue::Char(text.into()),
                "{text}"
            );
        }
    }

    #[test]
    fn plain_text_is_char() {
        assert_eq!(
            p("hello world\n", None),
            AttrValue::Char(b"hello world".to_vec())
        );
        assert_eq!(p("1 2", None), AttrValue::Char(b"1 2".to_vec()));
        assert_eq!(p("1,", None), AttrValue::Char(b"1,".to_vec()));
        assert_eq!(p("", None), AttrValue::Char(Vec::new()));
        assert_eq!(
            p("x ; :b = 1", None),
            AttrValue::Char(b"x ; :b = 1".to_vec())
        );
        assert_eq!(p("1; :b = 2", None), AttrValue::Char(b"1; :b = 2".to_vec()));
        assert_eq!(
            parse_attr_text(b"\xff\xfe", None),
            AttrValue::Char(b"\xff\xfe".to_vec())
        );
    }

    #[test]
    fn existing_types_are_kept_when_values_fit() {
        let f = AttrValue::Float(vec![0.0]);
        assert_eq!(p("-10, 10", Some(&f)), AttrValue::Float(vec![-10.0, 10.0]));
        let i = AttrValue::Int(vec![0]);
        assert_eq!(p("2.5", Some(&i)), AttrValue::Double(vec![2.5]));
        assert_eq!(p("3.0", Some(&i)), AttrValue::Int(vec![3]));
        let b = AttrValue::UByte(vec![0]);
        assert_eq!(p("300", Some(&b)), AttrValue::Int(vec![300]));
        assert_eq!(p("200", Some(&b)), AttrValue::UByte(vec![200]));
        let c = AttrValue::Char(b"x".to_vec());
        assert_eq!(p("42\n", Some(&c)), AttrValue::Char(b"42".to_vec()));
        let s = AttrValue::Str(vec!["x".into()]);
        assert_eq!(
            p("\"a\", \"b\"\n", Some(&s)),
            AttrValue::Str(vec!["a".into(), "b".into()])
        );
        assert_eq!(p("1, 2", Some(&s)), AttrValue::Int(vec![1, 2]));
    }

    /// A writer over a temporary directory with `t` (unlimited, 2 records) × `x` (3): int
    /// variable `v(t, x)`, and fixed short `f(x)`.
    fn writer(dir: &std::path::Path) -> (DatasetWriter, VarId, VarId) {
        let loc = Location::parse(format!("file://{}#mode=nczarr,file", dir.display())).unwrap();
        let mut w = DatasetWriter::create(&loc, CreateOptions::default()).unwrap();
        let t = w.add_dim(Dataset::ROOT, "t", 0, true).unwrap();
        let x = w.add_dim(Dataset::ROOT, "x", 3, false).unwrap();
        let opts = VarOptions {
            chunks: Some(vec![1, 2]),
            ..VarOptions::default()
        };
        let v = w
            .add_var(Dataset::ROOT, "v", NcType::Int, &[t, x], opts)
            .unwrap();
        let f = w
            .add_var(
                Dataset::ROOT,
                "f",
                NcType::Short,
                &[x],
                VarOptions::default(),
            )
            .unwrap();
        (w, v, f)
    }

    fn ints(w: &DatasetWriter, v: VarId) -> Vec<i32> {
        let shape = w.model().var_shape(v);
        let mut out = vec![0u8; shape.iter().product::<u64>() as usize * 4];
        w.read(v, &Hyperslab::whole(&shape), &mut out).unwrap();
        out.chunks(4)
            .map(|c| i32::from_ne_bytes(c.try_into().unwrap()))
            .collect()
    }

    const FILL: i32 = -2147483647;

    #[test]
    fn appends_grow_whole_records_and_partial_elements_merge() {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, v, _) = writer(&dir.path().join("ds"));
        let bytes: Vec<u8> = [1i32, 2, 3, 4]
            .iter()
            .flat_map(|x| x.to_ne_bytes())
            .collect();
        // 4 elements: one record and a third of the next, which is then filled.
        assert_eq!(
            write_data(&mut w, v, 0, &bytes, &PartialElements::default()).unwrap(),
            16
        );
        assert_eq!(w.model().var_shape(v), vec![2, 3]);
        assert_eq!(ints(&w, v), vec![1, 2, 3, 4, FILL, FILL]);
        // Two bytes into element 4, then its other two bytes.
        let five = 5i32.to_ne_bytes();
        write_data(&mut w, v, 16, &five[..2], &PartialElements::default()).unwrap();
        write_data(&mut w, v, 18, &five[2..], &PartialElements::default()).unwrap();
        assert_eq!(ints(&w, v)[4], 5);
        // A write past the end leaves a hole of fill.
        write_data(
            &mut w,
            v,
            3 * 12 + 4,
            &9i32.to_ne_bytes(),
            &PartialElements::default(),
        )
        .unwrap();
        assert_eq!(w.model().var_shape(v), vec![4, 3]);
        assert_eq!(ints(&w, v)[6..], [FILL, FILL, FILL, FILL, 9, FILL]);
    }

    #[test]
    fn a_refused_element_written_in_part_past_the_end_adds_no_record() {
        let dir = tempfile::tempdir().unwrap();
        let loc = Location::parse(format!(
            "file://{}#mode=nczarr,file",
            dir.path().join("ds").display()
        ))
        .unwrap();
        let opts = CreateOptions {
            zarr_version: 3,
            ..CreateOptions::default()
        };
        let mut w = DatasetWriter::create(&loc, opts).unwrap();
        let t = w.add_dim(Dataset::ROOT, "t", 0, true).unwrap();
        let var_opts = VarOptions {
            string_width: 4,
            ..VarOptions::default()
        };
        let s = w
            .add_var(Dataset::ROOT, "s", NcType::String, &[t], var_opts)
            .unwrap();
        assert_eq!(
            write_data(&mut w, s, 0, b"abcd", &PartialElements::default()).unwrap(),
            4
        );
        // Half of a new element, whose text (with the fill after it) is not UTF-8.
        let refused = write_data(&mut w, s, 4, b"a\xff", &PartialElements::default());
        assert!(
            matches!(refused, Err(Error::Unrepresentable(_))),
            "{refused:?}"
        );
        assert_eq!(w.model().var_shape(s), vec![1]);
        // Half of a new element that is text grows the variable by that element.
        assert_eq!(
            write_data(&mut w, s, 4, b"ef", &PartialElements::default()).unwrap(),
            2
        );
        assert_eq!(w.model().var_shape(s), vec![2]);
    }

    #[test]
    fn fixed_variables_take_what_fits() {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, _, f) = writer(&dir.path().join("ds"));
        assert_eq!(
            write_data(
                &mut w,
                f,
                4,
                &[1, 0, 2, 0, 3, 0],
                &PartialElements::default()
            )
            .unwrap(),
            2
        );
        assert_eq!(
            write_data(&mut w, f, 6, &[1], &PartialElements::default()).unwrap(),
            0
        );
        let mut out = [0u8; 6];
        w.read(f, &Hyperslab::whole(&[3]), &mut out).unwrap();
        assert_eq!(&out[4..], &[1, 0]);
    }

    #[test]
    fn a_variable_using_its_unlimited_dimension_again_does_not_grow_through_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let loc = Location::parse(format!(
            "file://{}#mode=nczarr,file",
            dir.path().join("ds").display()
        ))
        .unwrap();
        let mut w = DatasetWriter::create(&loc, CreateOptions::default()).unwrap();
        let r = w.add_dim(Dataset::ROOT, "r", 0, true).unwrap();
        let u = w.add_dim(Dataset::ROOT, "u", 0, true).unwrap();
        let add = |w: &mut DatasetWriter, name: &str, dims: &[DimId]| {
            w.add_var(
                Dataset::ROOT,
                name,
                NcType::Int,
                dims,
                VarOptions::default(),
            )
            .unwrap()
        };
        let square = add(&mut w, "w", &[r, r]);
        let record = add(&mut w, "a", &[r]);
        let other_unlimited = add(&mut w, "b", &[r, u]);
        w.grow_dim(r, 2).unwrap();
        w.grow_dim(u, 2).unwrap();
        let values: Vec<u8> = [1i32, 2, 3, 4]
            .iter()
            .flat_map(|x| x.to_ne_bytes())
            .collect();
        w.write(square, &Hyperslab::whole(&[2, 2]), &values)
            .unwrap();
        // An append would be stored at element (1, 1) of the 3 × 3 layout: refused.
        assert_eq!(
            write_data(
                &mut w,
                square,
                16,
                &values[..8],
                &PartialElements::default()
            )
            .unwrap(),
            0
        );
        assert!(why_fixed_size(w.model(), square).contains("dimension r again"));
        // A write across the end takes what fits, as for a fixed-size variable.
        assert_eq!(
            write_data(&mut w, square, 8, &values, &PartialElements::default()).unwrap(),
            8
        );
        assert_eq!(ints(&w, square), vec![1, 2, 1, 2]);
        // Records added through another variable keep every value at its index.
        assert_eq!(
            write_data(&mut w, record, 8, &values[..4], &PartialElements::default()).unwrap(),
            4
        );
        assert_eq!(
            ints(&w, square),
            vec![1, 2, FILL, 1, 2, FILL, FILL, FILL, FILL]
        );
        // Another unlimited dimension later in the shape does not grow with the first.
        assert_eq!(
            write_data(
                &mut w,
                other_unlimited,
                24,
                &values[..8],
                &PartialElements::default()
            )
            .unwrap(),
            8
        );
        assert_eq!(w.model().var_shape(other_unlimited), vec![4, 2]);
    }

    /// A writer over a temporary directory with a variable of type `t` and `n` elements,
    /// quantized by attribute `name` = `precision`.
    fn quantized(
        dir: &std::path::Path,
        t: NcType,
        n: u64,
        name: &str,
        precision: i32,
    ) -> (DatasetWriter, VarId) {
        let loc = Location::parse(format!("file://{}#mode=nczarr,file", dir.display())).unwrap();
        let mut w = DatasetWriter::create(&loc, CreateOptions::default()).unwrap();
        let x = w.add_dim(Dataset::ROOT, "x", n, false).unwrap();
        let v = w
            .add_var(Dataset::ROOT, "v", t, &[x], VarOptions::default())
            .unwrap();
        w.put_attr(AttrTarget::Var(v), name, AttrValue::Int(vec![precision]))
            .unwrap();
        (w, v)
    }

    fn stored(w: &DatasetWriter, v: VarId) -> Vec<u8> {
        let shape = w.model().var_shape(v);
        let mut out =
            vec![0u8; shape.iter().product::<u64>() as usize * w.model().var(v).element_size()];
        w.read(v, &Hyperslab::whole(&shape), &mut out).unwrap();
        out
    }

    /// `dd bs=3` of the doubles 1.5 and 0 into a variable BitGroom-quantized to 3 digits: 1.5
    /// has no bits below the kept ones, and a zero is left alone, so both are stored as they
    /// are. Merged with the first piece already quantized, the zero became a tiny number.
    #[test]
    fn an_element_written_in_pieces_is_quantized_from_its_own_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let name = QuantizeMode::BitGroom.attribute();
        let (mut w, v) = quantized(&dir.path().join("ds"), NcType::Double, 2, name, 3);
        let bytes: Vec<u8> = [1.5f64, 0.0].iter().flat_map(|x| x.to_ne_bytes()).collect();
        let partial = PartialElements::default();
        for (i, piece) in bytes.chunks(3).enumerate() {
            write_data(&mut w, v, i as u64 * 3, piece, &partial).unwrap();
        }
        assert_eq!(stored(&w, v), bytes);
        assert!(partial.lock().is_empty());
    }

    fn floats(w: &DatasetWriter, v: VarId) -> Vec<f32> {
        stored(w, v)
            .chunks(4)
            .map(|c| f32::from_ne_bytes(c.try_into().unwrap()))
            .collect()
    }

    /// `q(x, t)` (x = 2, t unlimited at 2) BitRound-quantized to 9 bits holds 1, 2, 3, 4; the
    /// low half of q[1, 0] (element 2) is written, then a write of `a(t)` grows t to 3, which
    /// makes q[1, 0] element 3 and element 2 the new q[0, 2]. The high halves written then
    /// complete each element from its own bytes: element 2 from the fill (0x7cf00000, low
    /// half zero) and `c0e0` makes -7; q[1, 0] from its kept `e000` and `4110` is 0x4110e000
    /// (9.0546875), whose 9 bits round up (the dropped 14 bits are exactly half) to 9.0625.
    /// Its quantized value stored after the first piece, 0x40410000, has no `e000` left: the
    /// bytes kept for element 2 used to complete the new q[0, 2] (-7.0078125 then).
    #[test]
    fn kept_bytes_follow_their_element_when_a_dimension_grows() {
        let dir = tempfile::tempdir().unwrap();
        let loc = Location::parse(format!(
            "file://{}#mode=nczarr,file",
            dir.path().join("ds").display()
        ))
        .unwrap();
        let mut w = DatasetWriter::create(&loc, CreateOptions::default()).unwrap();
        let x = w.add_dim(Dataset::ROOT, "x", 2, false).unwrap();
        let t = w.add_dim(Dataset::ROOT, "t", 0, true).unwrap();
        let add = |w: &mut DatasetWriter, name: &str, dims: &[DimId]| {
            w.add_var(
                Dataset::ROOT,
                name,
                NcType::Float,
                dims,
                VarOptions::default(),
            )
            .unwrap()
        };
        let q = add(&mut w, "q", &[x, t]);
        let a = add(&mut w, "a", &[t]);
        let name = QuantizeMode::BitRound.attribute();
        w.put_attr(AttrTarget::Var(q), name, AttrValue::Int(vec![9]))
            .unwrap();
        w.grow_dim(t, 2).unwrap();
        let partial = PartialElements::default();
        let values: Vec<u8> = [1f32, 2., 3., 4.]
            .iter()
            .flat_map(|x| x.to_ne_bytes())
            .collect();
        write_data(&mut w, q, 0, &values, &partial).unwrap();
        let half = |word: u16| word.to_le_bytes();
        write_data(&mut w, q, 8, &half(0xe000), &partial).unwrap();
        write_data(&mut w, a, 8, &30f32.to_ne_bytes(), &partial).unwrap();
        assert_eq!(w.model().var_shape(q), vec![2, 3]);
        write_data(&mut w, q, 10, &half(0xc0e0), &partial).unwrap();
        write_data(&mut w, q, 14, &half(0x4110), &partial).unwrap();
        let fill = f32::from_bits(0x7cf0_0000);
        assert_eq!(floats(&w, q), vec![1., 2., -7., 9.0625, 4., fill]);
        // Only the new q[0, 2] is still written in part.
        let kept: Vec<u64> = partial.lock()[&q].elements.keys().copied().collect();
        assert_eq!(kept, vec![2]);
    }

    /// Float 5 and 6, BitRound-quantized to 9 bits, each get the low half `e000` through one
    /// of two descriptors (5 is then 0x40a0e000, stored 0x40a10000). With one descriptor
    /// still open, the high half `4110` completes element 0 from its kept bytes, 0x4110e000
    /// rounded up to 9.0625; once the last is released they are forgotten, and element 1's
    /// high half merges with the stored 0x40c10000 (6 with `e000`, rounded up): 0x41100000 is
    /// 9. Nothing is kept after.
    #[test]
    fn the_last_release_forgets_kept_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let name = QuantizeMode::BitRound.attribute();
        let (mut w, v) = quantized(&dir.path().join("ds"), NcType::Float, 2, name, 9);
        let partial = PartialElements::default();
        let values: Vec<u8> = [5f32, 6.].iter().flat_map(|x| x.to_ne_bytes()).collect();
        write_data(&mut w, v, 0, &values, &partial).unwrap();
        partial.opened(v);
        partial.opened(v);
        let half = |word: u16| word.to_le_bytes();
        write_data(&mut w, v, 0, &half(0xe000), &partial).unwrap();
        write_data(&mut w, v, 4, &half(0xe000), &partial).unwrap();
        assert_eq!(floats(&w, v), vec![5.03125, 6.03125]);
        partial.released(v);
        write_data(&mut w, v, 2, &half(0x4110), &partial).unwrap();
        partial.released(v);
        assert!(partial.lock().is_empty());
        write_data(&mut w, v, 6, &half(0x4110), &partial).unwrap();
        assert_eq!(floats(&w, v), vec![9.0625, 9.]);
        // A release of a file no longer counted open changes nothing.
        partial.released(v);
        assert_eq!(partial.lock().len(), 1);
    }

    /// Pieces cut at any byte, written in any order, store what one write of the whole array
    /// stores, in every mode and for both types.
    #[test]
    fn pieces_in_any_order_are_quantized_as_one_write() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for (t, esz) in [(NcType::Float, 4u64), (NcType::Double, 8)] {
            for mode in QuantizeMode::ALL {
                let precision = if mode == QuantizeMode::BitRound { 9 } else { 3 };
                let n = 40u64;
                let values: Vec<u8> = (0..n)
                    .flat_map(|i| {
                        let x = (i as f64 - 17.3) * 91.7309 + if i % 7 == 0 { 0.0 } else { 0.123 };
                        let x = if i % 11 == 0 { 0.0 } else { x };
                        match t {
                            NcType::Float => (x as f32).to_ne_bytes().to_vec(),
                            _ => x.to_ne_bytes().to_vec(),
                        }
                    })
                    .collect();
                let mut want = values.clone();
                Quantize::new(mode, precision.into(), t)
                    .unwrap()
                    .apply(t, &mut want, None);
                for shuffled in [false, true] {
                    let dir = tempfile::tempdir().unwrap();
                    let (mut w, v) =
                        quantized(&dir.path().join("ds"), t, n, mode.attribute(), precision);
                    let mut cuts: Vec<u64> = (0..30).map(|_| 1 + next(n * esz - 1)).collect();
                    cuts.extend([0, n * esz]);
                    cuts.sort_unstable();
                    cuts.dedup();
                    let mut pieces: Vec<(u64, u64)> =
                        cuts.windows(2).map(|c| (c[0], c[1])).collect();
                    if shuffled {
                        for i in (1..pieces.len()).rev() {
                            pieces.swap(i, next(i as u64 + 1) as usize);
                        }
                    }
                    let partial = PartialElements::default();
                    for (a, b) in pieces {
                        let piece = &values[a as usize..b as usize];
                        assert_eq!(
                            write_data(&mut w, v, a, piece, &partial).unwrap(),
                            piece.len()
                        );
                    }
                    assert_eq!(stored(&w, v), want, "{t:?} {mode:?} shuffled: {shuffled}");
                    assert!(partial.lock().is_empty());
                }
            }
        }
    }
}
