//! Decodes chunks that numcodecs 0.16 and netcdf-c 4.10.1 wrote (tests/data/codecs, see its
//! README) and compares them with the raw inputs; checks that deterministic codecs encode
//! byte-for-byte like numcodecs.

use std::path::PathBuf;

use nczarrfs::codec::Pipeline;
use serde_json::Value;

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/codecs")
}

struct Vector {
    name: String,
    raw: Vec<u8>,
    encoded: Vec<u8>,
    pipeline: Pipeline,
    compressor_id: String,
}

fn vectors() -> Vec<Vector> {
    let dir = data_dir();
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    let list = manifest["vectors"].as_array().unwrap();
    assert!(list.len() >= 40, "manifest lists {} vectors", list.len());
    list.iter()
        .map(|v| {
            let filters = v["filters"].as_array().unwrap();
            let compressor = &v["compressor"];
            let es = v["element_size"].as_u64().unwrap() as usize;
            let name = v["encoded"].as_str().unwrap().to_string();
            Vector {
                raw: std::fs::read(dir.join(v["input"].as_str().unwrap())).unwrap(),
                encoded: std::fs::read(dir.join(&name)).unwrap(),
                pipeline: Pipeline::from_v2(filters, Some(compressor), es)
                    .unwrap_or_else(|e| panic!("{name}: {e}")),
                compressor_id: compressor["id"].as_str().unwrap().to_string(),
                name,
            }
        })
        .collect()
}

#[test]
fn reference_chunks_decode_to_their_inputs() {
    for v in vectors() {
        let got = v.pipeline.decode(v.encoded.clone());
        assert_eq!(got.as_deref().ok(), Some(&v.raw[..]), "{}", v.name);
        let got = v.pipeline.decode_expect(v.encoded.clone(), v.raw.len());
        assert_eq!(got.as_deref().ok(), Some(&v.raw[..]), "{}", v.name);
        assert!(
            v.pipeline
                .decode_expect(v.encoded.clone(), v.raw.len() - 1)
                .is_err(),
            "{}: a smaller expected size must fail",
            v.name
        );
    }
}

#[test]
fn our_encoding_round_trips_and_matches_deterministic_codecs() {
    for v in vectors() {
        let enc = v.pipeline.encode(v.raw.clone()).unwrap();
        assert_eq!(
            v.pipeline.decode_expect(enc.clone(), v.raw.len()).unwrap(),
            v.raw,
            "{}",
            v.name
        );
        let deterministic = ["shuffle", "fletcher32", "crc32c", "crc32", "adler32"];
        match v.compressor_id.as_str() {
            // No encoder freedom: the bytes must be numcodecs'.
            _ if v.pipeline.ids().iter().all(|id| deterministic.contains(id)) => {
                assert_eq!(enc, v.encoded, "{}", v.name)
            }
            // The blosc header records version, flags (shuffle kind, compressor), typesize,
            // sizes and blocksize: it must agree with what c-blosc did under numcodecs.
            "blosc" => {
                assert_eq!(enc[0], v.encoded[0], "{}: format version", v.name);
                assert_eq!(enc[2..12], v.encoded[2..12], "{}: blosc header", v.name)
            }
            _ => {}
        }
    }
}

#[test]
fn corrupted_reference_chunks_fail_cleanly() {
    for v in vectors() {
        for i in [0, v.encoded.len() / 2, v.encoded.len() - 1] {
            let mut bad = v.encoded.clone();
            bad[i] ^= 0x5a;
            // Compressors without a checksum may decode a flipped literal to other bytes; what
            // matters is an error or a result of the right size, never a panic.
            if let Ok(out) = v.pipeline.decode_expect(bad, v.raw.len()) {
                assert_eq!(out.len(), v.raw.len(), "{}", v.name);
            }
        }
        let truncated = v.encoded[..v.encoded.len() - 1].to_vec();
        if let Ok(out) = v.pipeline.decode(truncated) {
            // Only codecs that pass data through unchecked may accept a shorter stream.
            assert!(
                v.name.contains("shuffle"),
                "{}: {} bytes",
                v.name,
                out.len()
            );
        }
    }
}
