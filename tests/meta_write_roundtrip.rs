//! Write → read round trips: every fixture CDL parsed, its metadata written by
//! `meta::writer`, read back by `meta::read_dataset`, must give the same model (groups,
//! dimensions, variables, types, attributes).

use std::path::PathBuf;

use nczarrfs::cdl::parser::parse_cdl_file;
use nczarrfs::location::{Format, Mode};
use nczarrfs::meta::read_dataset;
use nczarrfs::meta::writer::{write_metadata, Dialect, WriteOptions};
use nczarrfs::model::{Dataset, GroupId, NczarrLayout};
use nczarrfs::zmap::MemoryMap;
use nczarrfs::Error;

fn shared() -> PathBuf {
    std::env::var("NCZARRFS_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared")))
}

/// A comparable description of a dataset, group by group (storage details left out).
fn describe(ds: &Dataset) -> Vec<String> {
    let mut out = Vec::new();
    for g in ds.groups_preorder() {
        let group = ds.group(g);
        out.push(format!("group {}", ds.group_fqn(g)));
        for d in &group.dims {
            let d = ds.dim(*d);
            out.push(format!("  dim {} {} {}", d.name, d.len, d.unlimited));
        }
        for a in &group.attrs {
            out.push(format!("  :{} = {:?}", a.name, a.value));
        }
        for v in &group.vars {
            let var = ds.var(*v);
            let dims: Vec<String> = var.dims.iter().map(|d| ds.dim_fqn(*d)).collect();
            out.push(format!(
                "  var {} {} {:?}",
                var.nctype.cdl_name(),
                var.name,
                dims
            ));
            for a in &var.attrs {
                out.push(format!("    {}:{} = {:?}", var.name, a.name, a.value));
            }
        }
        let _: GroupId = g;
    }
    out
}

fn fixture_cdls() -> Vec<PathBuf> {
    let fx = shared().join("fixtures");
    let mut out = Vec::new();
    for dir in [
        "nczarr_test",
        "ncdump_refs",
        "ncdump_refs/cdl",
        "nc_test4_refs",
    ] {
        let Ok(rd) = std::fs::read_dir(fx.join(dir)) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "cdl") {
                let text = std::fs::read_to_string(&p).unwrap_or_default();
                if text.trim_start().starts_with("netcdf") && !text.contains("= @") {
                    out.push(p);
                }
            }
        }
    }
    out.sort();
    out
}

#[test]
fn nczarr_round_trip_of_every_fixture() {
    let files = fixture_cdls();
    assert!(files.len() > 30);
    for f in files {
        let parsed = parse_cdl_file(&f).unwrap();
        let map = MemoryMap::new();
        write_metadata(&map, &parsed.dataset, &WriteOptions::default()).unwrap();
        let mode = Mode {
            format: Some(Format::NcZarr),
            ..Mode::default()
        };
        let back = read_dataset(&map, &mode).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert_eq!(
            describe(&back),
            describe(&parsed.dataset),
            "{}",
            f.display()
        );
    }
}

/// The layouts of netcdf-c before 4.9.3 round trip every fixture they can hold; the others
/// are refused as unsupported, never written.
#[test]
fn older_layouts_round_trip_what_they_hold() {
    let mode = Mode {
        format: Some(Format::NcZarr),
        ..Mode::default()
    };
    for layout in [NczarrLayout::LowerCaseKeys, NczarrLayout::UpperCaseKeys] {
        let mut written = 0;
        for f in fixture_cdls() {
            let parsed = parse_cdl_file(&f).unwrap();
            let map = MemoryMap::new();
            let opts = WriteOptions {
                layout,
                ..WriteOptions::default()
            };
            match write_metadata(&map, &parsed.dataset, &opts) {
                Ok(()) => written += 1,
                Err(Error::Unsupported(_)) => continue,
                Err(e) => panic!("{}: {e}", f.display()),
            }
            let back = read_dataset(&map, &mode).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            assert_eq!(back.provenance.layout, Some(layout), "{}", f.display());
            assert_eq!(
                describe(&back),
                describe(&parsed.dataset),
                "{}",
                f.display()
            );
        }
        assert!(written > 15, "{layout:?}: only {written} fixtures written");
    }
}

#[test]
fn pure_zarr_round_trip_keeps_names_and_dims() {
    let f = shared().join("fixtures/ncdump_refs/cdl/ref_tst_group_data.cdl");
    let parsed = parse_cdl_file(&f).unwrap();
    let map = MemoryMap::new();
    let opts = WriteOptions {
        dialect: Dialect::Zarr,
        ..WriteOptions::default()
    };
    write_metadata(&map, &parsed.dataset, &opts).unwrap();
    let mode = Mode {
        format: Some(Format::Zarr),
        ..Mode::default()
    };
    let back = read_dataset(&map, &mode).unwrap();
    let names = |ds: &Dataset| -> Vec<String> {
        (0..ds.vars.len())
            .map(|i| {
                let id = nczarrfs::model::VarId(i);
                format!("{} {:?}", ds.var_fqn(id), ds.var_shape(id))
            })
            .collect()
    };
    let mut a = names(&back);
    let mut b = names(&parsed.dataset);
    a.sort();
    b.sort();
    assert_eq!(a, b);
}
