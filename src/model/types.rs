//! netCDF types, Zarr storage dtypes, and typed attribute values.

/// The netCDF-4 atomic types that NCZarr supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NcType {
    /// 8-bit signed integer (`byte`).
    Byte,
    /// 8-bit unsigned integer (`ubyte`).
    UByte,
    /// 16-bit signed integer (`short`).
    Short,
    /// 16-bit unsigned integer (`ushort`).
    UShort,
    /// 32-bit signed integer (`int`).
    Int,
    /// 32-bit unsigned integer (`uint`).
    UInt,
    /// 64-bit signed integer (`int64`).
    Int64,
    /// 64-bit unsigned integer (`uint64`).
    UInt64,
    /// 32-bit IEEE float (`float`).
    Float,
    /// 64-bit IEEE float (`double`).
    Double,
    /// One 8-bit character (`char`).
    Char,
    /// A string (`string`); fixed-width in Zarr storage.
    String,
}

impl NcType {
    /// Every type, in netCDF's type-number order.
    pub const ALL: [NcType; 12] = [
        NcType::Byte,
        NcType::Char,
        NcType::Short,
        NcType::Int,
        NcType::Float,
        NcType::Double,
        NcType::UByte,
        NcType::UShort,
        NcType::UInt,
        NcType::Int64,
        NcType::UInt64,
        NcType::String,
    ];

    /// The CDL keyword (`byte`, `ushort`, `string`, …).
    pub fn cdl_name(self) -> &'static str {
        match self {
            NcType::Byte => "byte",
            NcType::UByte => "ubyte",
            NcType::Short => "short",
            NcType::UShort => "ushort",
            NcType::Int => "int",
            NcType::UInt => "uint",
            NcType::Int64 => "int64",
            NcType::UInt64 => "uint64",
            NcType::Float => "float",
            NcType::Double => "double",
            NcType::Char => "char",
            NcType::String => "string",
        }
    }

    /// Parses a CDL keyword, accepting ncgen's synonyms (`long`, `real`, `unsigned int`, …).
    pub fn from_cdl_name(name: &str) -> Option<NcType> {
        Some(match name {
            "byte" => NcType::Byte,
            "ubyte" => NcType::UByte,
            "short" => NcType::Short,
            "ushort" => NcType::UShort,
            "int" | "long" | "integer" => NcType::Int,
            "uint" => NcType::UInt,
            "int64" => NcType::Int64,
            "uint64" => NcType::UInt64,
            "float" | "real" => NcType::Float,
            "double" => NcType::Double,
            "char" => NcType::Char,
            "string" => NcType::String,
            _ => return None,
        })
    }

    /// Size in bytes of one value; 0 for `string` (its width is per variable).
    pub fn size(self) -> usize {
        match self {
            NcType::Byte | NcType::UByte | NcType::Char => 1,
            NcType::Short | NcType::UShort => 2,
            NcType::Int | NcType::UInt | NcType::Float => 4,
            NcType::Int64 | NcType::UInt64 | NcType::Double => 8,
            NcType::String => 0,
        }
    }

    /// netCDF's default fill value (`NC_FILL_*`) as one native little-endian element; empty
    /// for `string` (the default string fill is the empty string).
    pub fn default_fill(self) -> Vec<u8> {
        match self {
            NcType::Byte => (-127i8).to_le_bytes().to_vec(),
            NcType::UByte => 255u8.to_le_bytes().to_vec(),
            NcType::Short => (-32767i16).to_le_bytes().to_vec(),
            NcType::UShort => 65535u16.to_le_bytes().to_vec(),
            NcType::Int => (-2147483647i32).to_le_bytes().to_vec(),
            NcType::UInt => 4294967295u32.to_le_bytes().to_vec(),
            NcType::Int64 => (-9223372036854775806i64).to_le_bytes().to_vec(),
            NcType::UInt64 => 18446744073709551614u64.to_le_bytes().to_vec(),
            NcType::Float => 9.969_21e36_f32.to_le_bytes().to_vec(),
            NcType::Double => 9.969_209_968_386_869e36_f64.to_le_bytes().to_vec(),
            NcType::Char => vec![0],
            NcType::String => Vec::new(),
        }
    }

    /// Whether the type is an integer type.
    pub fn is_integer(self) -> bool {
        !matches!(
            self,
            NcType::Float | NcType::Double | NcType::Char | NcType::String
        )
    }
}

/// Byte order of a stored dtype.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteOrder {
    /// `<`
    Little,
    /// `>`
    Big,
    /// `|` (single bytes, strings)
    NotApplicable,
}

/// The kind letter of a NumPy-style dtype.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DtypeKind {
    /// `b`: boolean (one byte).
    Bool,
    /// `i`: signed integer.
    Int,
    /// `u`: unsigned integer.
    UInt,
    /// `f`: IEEE float (2, 4 or 8 bytes).
    Float,
    /// `S`: fixed-width byte string of `size` bytes.
    Bytes,
    /// `U`: fixed-width UCS-4 string; `size` is in bytes (4 per character).
    Unicode,
}

/// A stored element type: a NumPy dtype such as `<i4`, `>f8`, `|S12`, `<U5`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZarrDtype {
    /// Byte order.
    pub order: ByteOrder,
    /// Kind.
    pub kind: DtypeKind,
    /// Size of one stored element in bytes.
    pub size: usize,
}

impl ZarrDtype {
    /// Parses a NumPy dtype string (`<i4`, `|S1`, `<U3`, `|b1`, …).
    pub fn parse(text: &str) -> Option<ZarrDtype> {
        let mut chars = text.chars();
        let order = match chars.next()? {
            '<' => ByteOrder::Little,
            '>' => ByteOrder::Big,
            '|' | '=' => ByteOrder::NotApplicable,
            _ => return None,
        };
        let kind = match chars.next()? {
            'b' => DtypeKind::Bool,
            'i' => DtypeKind::Int,
            'u' => DtypeKind::UInt,
            'f' => DtypeKind::Float,
            'S' => DtypeKind::Bytes,
            'U' => DtypeKind::Unicode,
            _ => return None,
        };
        let n: usize = chars.as_str().parse().ok()?;
        let size = match kind {
            DtypeKind::Unicode => n.checked_mul(4)?,
            _ => n,
        };
        let valid = match kind {
            DtypeKind::Bool => size == 1,
            DtypeKind::Int | DtypeKind::UInt => matches!(size, 1 | 2 | 4 | 8),
            DtypeKind::Float => matches!(size, 2 | 4 | 8),
            DtypeKind::Bytes | DtypeKind::Unicode => size > 0,
        };
        valid.then_some(ZarrDtype { order, kind, size })
    }

    /// Whether netCDF has no type of this one (`bool`, `float16`), whose values are read as
    /// the netCDF type that holds them (`ubyte`, `float`).
    pub fn netcdf_lacks(&self) -> bool {
        self.kind == DtypeKind::Bool || (self.kind == DtypeKind::Float && self.size == 2)
    }

    /// The NumPy spelling (`<i4`, `|S12`, `<U5`).
    pub fn to_numpy(&self) -> String {
        let order = match self.order {
            ByteOrder::Little => '<',
            ByteOrder::Big => '>',
            ByteOrder::NotApplicable => '|',
        };
        let (kind, n) = match self.kind {
            DtypeKind::Bool => ('b', self.size),
            DtypeKind::Int => ('i', self.size),
            DtypeKind::UInt => ('u', self.size),
            DtypeKind::Float => ('f', self.size),
            DtypeKind::Bytes => ('S', self.size),
            DtypeKind::Unicode => ('U', self.size / 4),
        };
        format!("{order}{kind}{n}")
    }
}

/// Typed attribute values: one vector per netCDF type.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    /// `byte` values.
    Byte(Vec<i8>),
    /// `ubyte` values.
    UByte(Vec<u8>),
    /// `short` values.
    Short(Vec<i16>),
    /// `ushort` values.
    UShort(Vec<u16>),
    /// `int` values.
    Int(Vec<i32>),
    /// `uint` values.
    UInt(Vec<u32>),
    /// `int64` values.
    Int64(Vec<i64>),
    /// `uint64` values.
    UInt64(Vec<u64>),
    /// `float` values.
    Float(Vec<f32>),
    /// `double` values.
    Double(Vec<f64>),
    /// `char` text as raw bytes (may hold NULs; usually UTF-8).
    Char(Vec<u8>),
    /// `string` values.
    Str(Vec<String>),
}

impl AttrValue {
    /// The netCDF type of the values.
    pub fn nctype(&self) -> NcType {
        match self {
            AttrValue::Byte(_) => NcType::Byte,
            AttrValue::UByte(_) => NcType::UByte,
            AttrValue::Short(_) => NcType::Short,
            AttrValue::UShort(_) => NcType::UShort,
            AttrValue::Int(_) => NcType::Int,
            AttrValue::UInt(_) => NcType::UInt,
            AttrValue::Int64(_) => NcType::Int64,
            AttrValue::UInt64(_) => NcType::UInt64,
            AttrValue::Float(_) => NcType::Float,
            AttrValue::Double(_) => NcType::Double,
            AttrValue::Char(_) => NcType::Char,
            AttrValue::Str(_) => NcType::String,
        }
    }

    /// One value of type `nctype` from its native little-endian element bytes (a fill value,
    /// say); strings end at the first NUL.
    pub fn from_native(nctype: NcType, bytes: &[u8]) -> AttrValue {
        let mut b = [0u8; 8];
        let n = bytes.len().min(8);
        b[..n].copy_from_slice(&bytes[..n]);
        let b2 = [b[0], b[1]];
        let b4 = [b[0], b[1], b[2], b[3]];
        match nctype {
            NcType::Byte => AttrValue::Byte(vec![b[0] as i8]),
            NcType::UByte => AttrValue::UByte(vec![b[0]]),
            NcType::Short => AttrValue::Short(vec![i16::from_le_bytes(b2)]),
            NcType::UShort => AttrValue::UShort(vec![u16::from_le_bytes(b2)]),
            NcType::Int => AttrValue::Int(vec![i32::from_le_bytes(b4)]),
            NcType::UInt => AttrValue::UInt(vec![u32::from_le_bytes(b4)]),
            NcType::Int64 => AttrValue::Int64(vec![i64::from_le_bytes(b)]),
            NcType::UInt64 => AttrValue::UInt64(vec![u64::from_le_bytes(b)]),
            NcType::Float => AttrValue::Float(vec![f32::from_le_bytes(b4)]),
            NcType::Double => AttrValue::Double(vec![f64::from_le_bytes(b)]),
            NcType::Char => AttrValue::Char(vec![b[0]]),
            NcType::String => {
                let end = bytes.iter().position(|c| *c == 0).unwrap_or(bytes.len());
                AttrValue::Str(vec![String::from_utf8_lossy(&bytes[..end]).into_owned()])
            }
        }
    }

    /// Number of values (characters for `char`).
    pub fn len(&self) -> usize {
        match self {
            AttrValue::Byte(v) => v.len(),
            AttrValue::UByte(v) => v.len(),
            AttrValue::Short(v) => v.len(),
            AttrValue::UShort(v) => v.len(),
            AttrValue::Int(v) => v.len(),
            AttrValue::UInt(v) => v.len(),
            AttrValue::Int64(v) => v.len(),
            AttrValue::UInt64(v) => v.len(),
            AttrValue::Float(v) => v.len(),
            AttrValue::Double(v) => v.len(),
            AttrValue::Char(v) => v.len(),
            AttrValue::Str(v) => v.len(),
        }
    }

    /// Whether there are no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The value at `i` alone (the character at `i` for `char`); empty past the end.
    pub fn element(&self, i: usize) -> AttrValue {
        fn one<T: Clone>(v: &[T], i: usize) -> Vec<T> {
            v.get(i..=i).unwrap_or_default().to_vec()
        }
        match self {
            AttrValue::Byte(v) => AttrValue::Byte(one(v, i)),
            AttrValue::UByte(v) => AttrValue::UByte(one(v, i)),
            AttrValue::Short(v) => AttrValue::Short(one(v, i)),
            AttrValue::UShort(v) => AttrValue::UShort(one(v, i)),
            AttrValue::Int(v) => AttrValue::Int(one(v, i)),
            AttrValue::UInt(v) => AttrValue::UInt(one(v, i)),
            AttrValue::Int64(v) => AttrValue::Int64(one(v, i)),
            AttrValue::UInt64(v) => AttrValue::UInt64(one(v, i)),
            AttrValue::Float(v) => AttrValue::Float(one(v, i)),
            AttrValue::Double(v) => AttrValue::Double(one(v, i)),
            AttrValue::Char(v) => AttrValue::Char(one(v, i)),
            AttrValue::Str(v) => AttrValue::Str(one(v, i)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_round_trip() {
        for s in ["<i4", ">f8", "|u1", "|S12", "<U5", "|b1", ">i2", "<u8"] {
            assert_eq!(ZarrDtype::parse(s).unwrap().to_numpy(), s);
        }
        assert_eq!(ZarrDtype::parse("<U5").unwrap().size, 20);
        for bad in ["", "<i3", "<x4", "i4", "<f16", "|S0", "<c8"] {
            assert!(ZarrDtype::parse(bad).is_none(), "{bad}");
        }
    }
}
