//! The CDL writer against Debian ncdump: each test builds by hand the model of a CDL file in
//! tests/data/dump/, and compares our dump with the `.dmp` that `ncgen -k nc4` + `ncdump`
//! produced from that CDL (see tests/data/dump/README.md). Values come from an in-memory
//! reader, so these tests do not depend on storage or the chunk engine.

use std::collections::HashMap;
use std::path::Path;

use nczarrfs::cdl::writer::{attr_values, dump_with_reader, var_header, DumpOptions};
use nczarrfs::chunk::Hyperslab;
use nczarrfs::model::{
    AttrValue, Attribute, Dataset, DimId, GroupId, NcType, VarId, VarStorage, Variable,
};
use nczarrfs::Result;

fn expected(name: &str) -> String {
    let path = format!("{}/tests/data/dump/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A dataset under construction plus the values of its variables (native, C order).
#[derive(Default)]
struct Builder {
    ds: Dataset,
    values: HashMap<VarId, Vec<u8>>,
}

fn attr(name: &str, value: AttrValue) -> Attribute {
    Attribute {
        name: name.into(),
        value,
    }
}

fn text(s: &str) -> AttrValue {
    AttrValue::Char(s.as_bytes().to_vec())
}

impl Builder {
    fn dim(&mut self, g: GroupId, name: &str, len: u64, unlimited: bool) -> DimId {
        self.ds.add_dim(g, name, len, unlimited)
    }

    fn var(
        &mut self,
        g: GroupId,
        name: &str,
        nctype: NcType,
        dims: &[DimId],
        attrs: Vec<Attribute>,
        values: Vec<u8>,
    ) -> VarId {
        self.var_w(g, name, nctype, dims, attrs, values, 0)
    }

    #[allow(clippy::too_many_arguments)]
    fn var_w(
        &mut self,
        g: GroupId,
        name: &str,
        nctype: NcType,
        dims: &[DimId],
        attrs: Vec<Attribute>,
        values: Vec<u8>,
        string_width: usize,
    ) -> VarId {
        let id = self.ds.add_var(Variable {
            name: name.into(),
            group: g,
            nctype,
            dims: dims.to_vec(),
            string_width,
            attrs,
            storage: VarStorage::default(),
        });
        self.values.insert(id, values);
        id
    }

    fn dump(&self, name: &str, opts: &DumpOptions) -> String {
        let mut out = Vec::new();
        let ds = &self.ds;
        let mut read = |v: VarId, slab: &Hyperslab, buf: &mut [u8]| -> Result<()> {
            let shape = ds.var_shape(v);
            let es = ds.var(v).element_size();
            let all = &self.values[&v];
            let n: u64 = slab.count.iter().product();
            assert_eq!(buf.len() as u64, n * es as u64);
            let mut idx = vec![0u64; shape.len()];
            for k in 0..n as usize {
                let mut off = 0u64;
                for d in 0..shape.len() {
                    off = off * shape[d] + slab.start[d] + idx[d] * slab.stride[d];
                }
                let src = off as usize * es;
                buf[k * es..(k + 1) * es].copy_from_slice(&all[src..src + es]);
                for d in (0..shape.len()).rev() {
                    idx[d] += 1;
                    if idx[d] < slab.count[d] {
                        break;
                    }
                    idx[d] = 0;
                }
            }
            Ok(())
        };
        dump_with_reader(
            ds,
            name,
            opts,
            &mut read,
            &mut out,
            Path::new("test output"),
        )
        .expect("dump");
        String::from_utf8(out).expect("utf-8")
    }
}

fn le<T: Copy, const N: usize>(vals: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    vals.iter().flat_map(|v| f(*v)).collect()
}
fn i32s(v: &[i32]) -> Vec<u8> {
    le(v, i32::to_ne_bytes)
}
fn f32s(v: &[f32]) -> Vec<u8> {
    le(v, f32::to_ne_bytes)
}
fn f64s(v: &[f64]) -> Vec<u8> {
    le(v, f64::to_ne_bytes)
}
fn strings(v: &[&str], width: usize) -> Vec<u8> {
    v.iter()
        .flat_map(|s| {
            let mut b = s.as_bytes().to_vec();
            b.resize(width, 0);
            b
        })
        .collect()
}

fn types_model() -> Builder {
    let mut b = Builder::default();
    let r = Dataset::ROOT;
    let x = b.dim(r, "x", 3, false);
    let t = b.dim(r, "t", 2, true);
    let s = b.dim(r, "s", 2, false);
    let nlong = b.dim(r, "nlong", 40, false);
    b.var(
        r,
        "f",
        NcType::Float,
        &[x],
        vec![
            attr(
                "a1",
                AttrValue::Float(vec![
                    0.1,
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
                ]),
            ),
            attr("_FillValue", AttrValue::Float(vec![-999.0])),
        ],
        f32s(&[0.1, -999.0, 1e-10]),
    );
    b.var(
        r,
        "d",
        NcType::Double,
        &[x],
        vec![attr(
            "a1",
            AttrValue::Double(vec![
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
            ]),
        )],
        f64s(&[0.1, std::f64::consts::PI, 1e300]),
    );
    b.var(
        r,
        "b",
        NcType::Byte,
        &[t],
        vec![attr("a", AttrValue::Byte(vec![1, -2]))],
        vec![1, (-127i8) as u8],
    );
    b.var(
        r,
        "ub",
        NcType::UByte,
        &[t],
        vec![attr("a", AttrValue::UByte(vec![1, 255]))],
        vec![3, 255],
    );
    b.var(
        r,
        "sh",
        NcType::Short,
        &[s],
        vec![attr("a", AttrValue::Short(vec![1, -32768]))],
        le(&[-32767i16, 2], i16::to_ne_bytes),
    );
    b.var(
        r,
        "us",
        NcType::UShort,
        &[s],
        vec![attr("a", AttrValue::UShort(vec![65535]))],
        le(&[1u16, 2], u16::to_ne_bytes),
    );
    b.var(
        r,
        "i",
        NcType::Int,
        &[s],
        vec![attr("a", AttrValue::Int(vec![i32::MIN, 5]))],
        i32s(&[1, 2]),
    );
    b.var(
        r,
        "ui",
        NcType::UInt,
        &[s],
        vec![attr("a", AttrValue::UInt(vec![u32::MAX]))],
        le(&[1u32, 2], u32::to_ne_bytes),
    );
    b.var(
        r,
        "ll",
        NcType::Int64,
        &[s],
        vec![attr("a", AttrValue::Int64(vec![-9223372036854775807, 1]))],
        le(&[1i64, 2], i64::to_ne_bytes),
    );
    b.var(
        r,
        "ull",
        NcType::UInt64,
        &[s],
        vec![attr("a", AttrValue::UInt64(vec![u64::MAX]))],
        le(&[1u64, 2], u64::to_ne_bytes),
    );
    b.var(
        r,
        "c",
        NcType::Char,
        &[s, x],
        vec![
            attr("a", text("line1\nline2\n\tq\"b\\s")),
            attr("e", text("")),
        ],
        b"abcd\"\n".to_vec(),
    );
    b.var_w(
        r,
        "st",
        NcType::String,
        &[s],
        vec![attr("a", AttrValue::Str(vec!["x".into()]))],
        strings(&["hello", "wor\tld"], 8),
        8,
    );
    b.var(
        r,
        "sc",
        NcType::Int,
        &[],
        vec![attr("a", AttrValue::Int(vec![1]))],
        i32s(&[7]),
    );
    let mut big = vec![
        0.1,
        0.2,
        0.3,
        1e-300,
        -1.5,
        123_456_789.123_456_79,
        0.0,
        -0.0,
    ];
    big.extend((1..=31).map(f64::from));
    big.push(9.969209968386869e36);
    b.var(r, "big", NcType::Double, &[nlong], vec![], f64s(&big));
    let mut fd = vec![0.1f32, 0.2, 0.3, 1e-30, -1.5, 1234567.5, 1234568.5, -0.0];
    fd.extend((1..=31).map(|i| i as f32));
    fd.push(9.96921e36);
    b.var(r, "fd", NcType::Float, &[nlong], vec![], f32s(&fd));
    b.var(
        r,
        "data",
        NcType::Int,
        &[],
        vec![attr("units", text("1"))],
        i32s(&[3]),
    );
    b.ds.groups[0].attrs = vec![attr("g", text("hello")), attr("gs", text("a"))];
    b
}

#[test]
fn all_types_match_ncdump() {
    assert_eq!(
        types_model().dump("types", &DumpOptions::default()),
        expected("types.dmp")
    );
}

fn groups_model() -> Builder {
    let mut b = Builder::default();
    let r = Dataset::ROOT;
    let x = b.dim(r, "x", 2, false);
    let y = b.dim(r, "y", 3, false);
    b.var(r, "x", NcType::Int, &[x], vec![], i32s(&[10, 20]));
    b.var(
        r,
        "v",
        NcType::Int,
        &[x, y],
        vec![attr("_FillValue", AttrValue::Int(vec![-1]))],
        i32s(&[1, 2, -1, 4, 5, 6]),
    );
    let g1 = b.ds.add_group(r, "g1");
    let gy = b.dim(g1, "y", 25, false);
    let z = b.dim(g1, "z", 2, false);
    let mut yv: Vec<f64> = (1..=25).map(f64::from).collect();
    yv[0] = 1000000.5;
    b.var(g1, "y", NcType::Double, &[gy], vec![], f64s(&yv));
    let mut w: Vec<i16> = (1..=25).collect();
    w.extend((1..=25).map(|i| i * 100));
    b.var(
        g1,
        "w",
        NcType::Short,
        &[x, gy],
        vec![],
        le(&w, i16::to_ne_bytes),
    );
    let mut name = b"first".to_vec();
    name.resize(25, 0);
    name.extend_from_slice(b"second one");
    name.resize(50, 0);
    b.var(g1, "name", NcType::Char, &[z, gy], vec![], name);
    b.var(
        g1,
        "q",
        NcType::Float,
        &[],
        vec![attr("units", text("m"))],
        f32s(&[2.5]),
    );
    b.ds.groups[g1.0].attrs = vec![attr("title", text("in g1"))];
    let inner = b.ds.add_group(g1, "inner");
    b.var(
        inner,
        "v",
        NcType::Int,
        &[gy],
        vec![],
        i32s(&(1..=25).collect::<Vec<_>>()),
    );
    b.var(inner, "u", NcType::Int, &[x], vec![], i32s(&[7, 8]));
    let g2 = b.ds.add_group(r, "g2");
    b.var_w(
        g2,
        "s",
        NcType::String,
        &[],
        vec![],
        strings(&["scalar string"], 16),
        16,
    );
    b
}

#[test]
fn nested_groups_match_ncdump() {
    let b = groups_model();
    assert_eq!(
        b.dump("groups", &DumpOptions::default()),
        expected("groups.dmp")
    );
}

#[test]
fn header_only_matches_ncdump_h() {
    let opts = DumpOptions {
        header_only: true,
        ..Default::default()
    };
    assert_eq!(
        groups_model().dump("groups", &opts),
        expected("groups-h.dmp")
    );
}

#[test]
fn coords_only_matches_ncdump_c() {
    let opts = DumpOptions {
        coords_only: true,
        ..Default::default()
    };
    assert_eq!(
        groups_model().dump("groups", &opts),
        expected("groups-c.dmp")
    );
}

#[test]
fn var_selection_matches_ncdump_v() {
    let opts = DumpOptions {
        vars: Some(vec!["v".into(), "g1/w".into()]),
        ..Default::default()
    };
    assert_eq!(
        groups_model().dump("groups", &opts),
        expected("groups-v.dmp")
    );
    let opts = DumpOptions {
        vars: Some(vec!["/g1/inner/u".into()]),
        name: Some("other".into()),
        ..Default::default()
    };
    assert_eq!(
        groups_model().dump("groups", &opts),
        expected("groups-n-v.dmp")
    );
}

#[test]
fn unknown_var_is_an_error() {
    let b = groups_model();
    let opts = DumpOptions {
        vars: Some(vec!["nosuch".into()]),
        ..Default::default()
    };
    let mut read = |_: VarId, _: &Hyperslab, _: &mut [u8]| -> Result<()> { Ok(()) };
    let err = dump_with_reader(
        &b.ds,
        "g",
        &opts,
        &mut read,
        &mut Vec::new(),
        Path::new("test output"),
    )
    .unwrap_err();
    assert!(err.to_string().contains("nosuch"), "{err}");
}

fn records_model() -> Builder {
    let mut b = Builder::default();
    let r = Dataset::ROOT;
    let rd = b.dim(r, "r", 2, true);
    let s = b.dim(r, "s", 3, true);
    let n = b.dim(r, "n", 2, false);
    let e = b.dim(r, "e", 0, true);
    b.var(
        r,
        "a",
        NcType::Int,
        &[rd, s],
        vec![],
        i32s(&[1, 2, 3, 4, 5, 6]),
    );
    b.var(
        r,
        "b",
        NcType::Int,
        &[rd, n, s],
        vec![],
        i32s(&(1..=12).collect::<Vec<_>>()),
    );
    b.var(
        r,
        "c",
        NcType::Float,
        &[n, rd],
        vec![],
        f32s(&[1.0, 2.0, 3.0, 4.0]),
    );
    b.var(r, "empty", NcType::Int, &[e], vec![], vec![]);
    b.var(r, "e2", NcType::Int, &[n, e], vec![], vec![]);
    b.var(
        r,
        "txt",
        NcType::Char,
        &[rd, s],
        vec![],
        b"abc\0\0\0".to_vec(),
    );
    b
}

#[test]
fn record_markers_match_ncdump() {
    assert_eq!(
        records_model().dump("records", &DumpOptions::default()),
        expected("records.dmp")
    );
}

#[test]
fn per_variable_header_and_attribute_values() {
    let b = types_model();
    let f = b.ds.find_var("f").expect("f");
    assert_eq!(
        var_header(&b.ds, f),
        "\tfloat f(x) ;\n\t\tf:a1 = 0.1f, 1.e-10f, 1.e+20f, 3.402823e+38f, 1.401298e-45f, \
         -0.f, 1.5f, 100.f, 123456.7f, 1234567.f, 1.234568e+07f ;\n\t\tf:_FillValue = -999.f ;\n"
    );
    assert_eq!(attr_values(&AttrValue::Float(vec![-999.0])), "-999.f");
    assert_eq!(attr_values(&AttrValue::Int64(vec![1, 2])), "1LL, 2LL");
    assert_eq!(attr_values(&text("raw \"text\"\n")), "raw \"text\"\n");
    assert_eq!(
        attr_values(&AttrValue::Str(vec!["a".into(), "b".into()])),
        "\"a\", \"b\""
    );
}

#[test]
fn nans_and_infinities_match_ncdump() {
    let mut b = Builder::default();
    let r = Dataset::ROOT;
    let dim = b.dim(r, "dim", 3, false);
    b.var(
        r,
        "fvar",
        NcType::Float,
        &[dim],
        vec![
            attr("_FillValue", AttrValue::Float(vec![f32::NAN])),
            attr(
                "att",
                AttrValue::Float(vec![f32::NEG_INFINITY, f32::NAN, f32::INFINITY]),
            ),
        ],
        f32s(&[f32::NEG_INFINITY, f32::NAN, f32::INFINITY]),
    );
    b.var(
        r,
        "dvar",
        NcType::Double,
        &[dim],
        vec![
            attr("_FillValue", AttrValue::Double(vec![f64::NAN])),
            attr(
                "att",
                AttrValue::Double(vec![f64::NEG_INFINITY, f64::NAN, f64::INFINITY]),
            ),
        ],
        f64s(&[f64::NEG_INFINITY, f64::NAN, f64::INFINITY]),
    );
    assert_eq!(
        b.dump("ref_tst_nans", &DumpOptions::default()),
        expected("ref_tst_nans.dmp")
    );
}

#[test]
fn nul_inside_char_data_matches_ncdump() {
    let mut b = Builder::default();
    let r = Dataset::ROOT;
    let n = b.dim(r, "n", 8, false);
    b.var(
        r,
        "cdata",
        NcType::Char,
        &[n],
        vec![],
        b"abc\0def\0".to_vec(),
    );
    assert_eq!(
        b.dump("ref_tst_nul4", &DumpOptions::default()),
        expected("ref_tst_nul4.dmp")
    );
}

#[test]
fn printf_g_matches_c_on_random_values() {
    use nczarrfs::cdl::fmt::printf_g;
    let table = expected("printf_g.txt");
    for line in table.lines() {
        let mut parts = line.splitn(3, ' ');
        let (bits, plain, alt) = (
            parts.next().expect("bits"),
            parts.next().expect("%g"),
            parts.next().expect("%#g"),
        );
        let (x, prec) = if let Some(h) = bits.strip_prefix('f') {
            let b = u32::from_str_radix(h, 16).expect("hex");
            (f64::from(f32::from_bits(b)), 7)
        } else {
            let b = u64::from_str_radix(&bits[1..], 16).expect("hex");
            (f64::from_bits(b), 15)
        };
        assert_eq!(printf_g(x, prec, false), plain, "{bits}");
        assert_eq!(printf_g(x, prec, true), alt, "{bits}");
    }
}

// 3.14159 is the value written in cformat.cdl, not an approximation of pi.
#[allow(clippy::approx_constant)]
#[test]
fn c_format_attribute_matches_ncdump() {
    let mut b = Builder::default();
    let r = Dataset::ROOT;
    let n = b.dim(r, "n", 3, false);
    b.var(
        r,
        "f",
        NcType::Float,
        &[n],
        vec![attr("C_format", text("%.3f"))],
        f32s(&[3.14159, -2.5, 1e10]),
    );
    b.var(
        r,
        "i",
        NcType::Int,
        &[n],
        vec![attr("C_format", text("%5d"))],
        i32s(&[1, -22, 333]),
    );
    b.var(
        r,
        "d",
        NcType::Double,
        &[n],
        vec![
            attr("C_format", text("%e")),
            attr("_FillValue", AttrValue::Double(vec![-1.0])),
        ],
        f64s(&[12345.678, -1.0, 0.001]),
    );
    assert_eq!(
        b.dump("cformat", &DumpOptions::default()),
        expected("cformat.dmp")
    );
}
