//! Property tests of the codec pipelines: every chain round-trips arbitrary data, and no input,
//! however malformed, makes a decoder panic or exceed its bound.

use nczarrfs::codec::Pipeline;
use proptest::prelude::*;
use serde_json::{json, Value};

/// Chains to exercise: (filters, compressor, element size).
fn chains() -> Vec<(Vec<Value>, Value, usize)> {
    let mut out = vec![
        (vec![], json!({"id": "zlib", "level": 1}), 4),
        (vec![], json!({"id": "gzip", "level": 9}), 4),
        (vec![], json!({"id": "zstd", "level": 3}), 8),
        (
            vec![],
            json!({"id": "zstd", "level": -5, "checksum": true}),
            8,
        ),
        (vec![], json!({"id": "bz2", "level": 1}), 2),
        (vec![], json!({"id": "lz4", "acceleration": 1}), 4),
        (vec![], json!({"id": "shuffle", "elementsize": 8}), 8),
        (vec![], json!({"id": "fletcher32"}), 4),
        (vec![], json!({"id": "crc32c"}), 4),
        (vec![], json!({"id": "crc32"}), 4),
        (vec![], json!({"id": "adler32"}), 4),
        (
            vec![
                json!({"id": "shuffle", "elementsize": 0}),
                json!({"id": "zlib", "level": 4}),
            ],
            json!({"id": "fletcher32"}),
            4,
        ),
        (
            vec![
                json!({"id": "bz2", "level": 9}),
                json!({"id": "zlib", "level": 2}),
            ],
            json!({"id": "crc32c"}),
            2,
        ),
    ];
    // numcodecs' compressors: snappy, which it lacks, is read but not written.
    for cname in ["blosclz", "lz4", "lz4hc", "zlib", "zstd"] {
        for shuffle in [-1, 0, 1, 2] {
            out.push((
                vec![],
                json!({"id": "blosc", "cname": cname, "clevel": 5, "shuffle": shuffle,
                       "blocksize": 0}),
                [1, 2, 4, 8][(shuffle + 1) as usize],
            ));
        }
    }
    out
}

fn pipelines() -> Vec<Pipeline> {
    chains()
        .into_iter()
        .map(|(f, c, es)| Pipeline::from_v2(&f, Some(&c), es).unwrap())
        .collect()
}

/// Data with runs, so that compressors take their match paths too.
fn data() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec((any::<u8>(), 1usize..40), 0..200)
        .prop_map(|runs| runs.into_iter().flat_map(|(b, n)| vec![b; n]).collect())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_chain_round_trips(data in data()) {
        for p in pipelines() {
            let enc = p.encode(data.clone()).unwrap();
            prop_assert_eq!(&p.decode(enc.clone()).unwrap(), &data, "{:?}", p.ids());
            prop_assert_eq!(&p.decode_expect(enc.clone(), data.len()).unwrap(), &data, "{:?}", p.ids());
            // Straight into a caller's buffer, as chunks are read.
            let mut out = vec![0xA5u8; data.len()];
            p.decode_into(&enc, &mut out, &mut Default::default()).unwrap();
            prop_assert_eq!(&out, &data, "{:?}", p.ids());
        }
    }

    #[test]
    fn garbage_never_panics(garbage in prop::collection::vec(any::<u8>(), 0..600),
                            expected in 0usize..5000) {
        for p in pipelines() {
            let _ = p.decode(garbage.clone());
            if let Ok(out) = p.decode_expect(garbage.clone(), expected) {
                prop_assert_eq!(out.len(), expected);
            }
            let _ = p.decode_into(&garbage, &mut vec![0u8; expected], &mut Default::default());
        }
    }

    #[test]
    fn corrupted_streams_never_panic(data in data(), flips in prop::collection::vec(any::<(usize, u8)>(), 1..4)) {
        for p in pipelines() {
            let mut enc = p.encode(data.clone()).unwrap();
            if enc.is_empty() {
                continue;
            }
            for (i, x) in &flips {
                let n = enc.len();
                enc[i % n] ^= x | 1;
            }
            let _ = p.decode(enc.clone());
            let _ = p.decode_into(&enc, &mut vec![0u8; data.len()], &mut Default::default());
            if let Ok(out) = p.decode_expect(enc, data.len()) {
                prop_assert_eq!(out.len(), data.len());
            }
        }
    }

    #[test]
    fn plausible_blosc_headers_with_garbage_bodies_never_panic(
        body in prop::collection::vec(any::<u8>(), 0..400),
        flags in any::<u8>(),
        typesize in any::<u8>(),
        nbytes in 0u32..100_000,
        blocksize in 0u32..100_000,
    ) {
        // A header that passes blosc_cbuffer_validate (its cbytes is the true length), so the
        // decompressor itself meets the garbage.
        let cbytes = (16 + body.len()) as u32;
        let mut chunk = vec![2, 1, flags, typesize];
        chunk.extend(nbytes.to_le_bytes());
        chunk.extend(blocksize.to_le_bytes());
        chunk.extend(cbytes.to_le_bytes());
        chunk.extend(&body);
        let p = Pipeline::from_v2(&[], Some(&json!({"id": "blosc"})), 4).unwrap();
        let _ = p.decode(chunk.clone());
        let _ = p.decode_into(&chunk, &mut vec![0u8; nbytes as usize], &mut Default::default());
        let _ = p.decode_expect(chunk, nbytes as usize);
    }

    #[test]
    fn lz4_size_headers_are_bounded(size in any::<i32>(), body in prop::collection::vec(any::<u8>(), 0..200)) {
        let p = Pipeline::from_v2(&[], Some(&json!({"id": "lz4"})), 4).unwrap();
        let mut chunk = size.to_le_bytes().to_vec();
        chunk.extend(&body);
        // A lying header may not make us allocate more than the caller's bound.
        prop_assert!(size <= 1000 || p.decode_expect(chunk.clone(), 1000).is_err());
        prop_assert!(
            size <= 1000
                || p.decode_into(&chunk, &mut [0u8; 1000], &mut Default::default()).is_err()
        );
        let _ = p.decode_expect(chunk, 1000);
    }
}

#[test]
fn bombs_are_refused_by_every_compressor() {
    let zeros = vec![0u8; 4 << 20];
    for p in pipelines() {
        let enc = p.encode(zeros.clone()).unwrap();
        let ids = p.ids();
        if ids
            .iter()
            .all(|id| ["shuffle", "fletcher32", "crc32c", "crc32", "adler32"].contains(id))
        {
            continue;
        }
        assert!(
            enc.len() < zeros.len() / 8,
            "{ids:?} compressed to {}",
            enc.len()
        );
        assert!(p.decode_expect(enc, 4096).is_err(), "{ids:?}");
    }
}
