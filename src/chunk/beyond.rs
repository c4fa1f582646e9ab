//! Values stored past an array's recorded extent: a writer stores chunks before the metadata
//! that records their records, so one that is killed or fails in between leaves chunks holding
//! values beyond the recorded length of an unlimited dimension. They are invisible until a
//! later writer grows the dimension over them; [`ChunkEngine::fill_beyond`] makes that region
//! fill first.

use std::sync::Arc;

use rayon::prelude::*;

use super::{io_parallel, ChunkEngine, VarPlan};
use crate::model::{ChunkKeyEncoding, Dataset, NcType, VarId};
use crate::zmap::join_key;
use crate::Result;

/// The stored objects of an array (chunks, or shards of a sharded array) at or past a given
/// index along one axis.
#[derive(Debug, Default, PartialEq)]
struct Beyond {
    /// Keys of objects, or of key prefixes holding only objects, wholly past the index.
    whole: Vec<String>,
    /// Object grid coordinates of the objects the index falls inside.
    straddling: Vec<Vec<u64>>,
}

/// Where along `axis` the objects of chunk length `chunk` lie relative to index `kept`: those
/// at object coordinate `first_beyond` and after hold only indices `>= kept`, the one at
/// `straddle` (if any) holds indices on both sides.
struct Cut {
    axis: usize,
    first_beyond: u64,
    straddle: Option<u64>,
}

impl Cut {
    fn new(axis: usize, chunk: u64, kept: u64) -> Cut {
        Cut {
            axis,
            first_beyond: kept.div_ceil(chunk),
            straddle: (kept % chunk != 0).then_some(kept / chunk),
        }
    }
}

/// A chunk coordinate as keys spell it (no sign, no leading zeros).
fn coordinate(name: &str) -> Option<u64> {
    name.parse::<u64>().ok().filter(|c| c.to_string() == name)
}

/// Lists the objects of the array stored under `key` with chunk key encoding `encoding` and
/// `rank` dimensions that lie at or past `cut`: one listing of the array for a `.`
/// separator; for `/`, one per level down to the cut's axis (one in all when it is the first
/// axis) plus the straddling objects' subtree. Names that are no chunk key (metadata, temporary
/// files) are passed over.
fn list_beyond(
    map: &dyn crate::zmap::ZMap,
    key: &str,
    encoding: &ChunkKeyEncoding,
    rank: usize,
    cut: &Cut,
) -> Result<Beyond> {
    let mut found = Beyond::default();
    let (separator, prefix) = match encoding {
        ChunkKeyEncoding::V2 { separator } => (*separator, ""),
        ChunkKeyEncoding::Default { separator } => (*separator, "c"),
    };
    if separator == '/' {
        let root = match prefix {
            "" => key.to_string(),
            c => join_key(&[key, c]),
        };
        list_level(map, &root, rank, cut, &mut Vec::new(), &mut found)?;
        return Ok(found);
    }
    for name in map.search(key)? {
        let coords = match prefix {
            "" => Some(name.as_str()),
            c => name
                .strip_prefix(c)
                .and_then(|rest| rest.strip_prefix(separator)),
        }
        .map(|rest| {
            rest.split(separator)
                .map(coordinate)
                .collect::<Option<Vec<u64>>>()
        });
        let Some(Some(coords)) = coords.filter(|c| c.as_ref().is_some_and(|c| c.len() == rank))
        else {
            continue;
        };
        if coords[cut.axis] >= cut.first_beyond {
            found.whole.push(join_key(&[key, &name]));
        } else if Some(coords[cut.axis]) == cut.straddle {
            found.straddling.push(coords);
        }
    }
    Ok(found)
}

/// One level of [`list_beyond`] for keys nested with `/`: the coordinates `coords` so far
/// are those of the key prefix `prefix`.
fn list_level(
    map: &dyn crate::zmap::ZMap,
    prefix: &str,
    rank: usize,
    cut: &Cut,
    coords: &mut Vec<u64>,
    found: &mut Beyond,
) -> Result<()> {
    let level = coords.len();
    for name in map.search(prefix)? {
        let Some(c) = coordinate(&name) else {
            continue;
        };
        let child = join_key(&[prefix, &name]);
        if level == cut.axis {
            if c >= cut.first_beyond {
                found.whole.push(child);
                continue;
            }
            if Some(c) != cut.straddle {
                continue;
            }
        }
        coords.push(c);
        if level + 1 == rank {
            found.straddling.push(coords.clone());
        } else {
            list_level(map, &child, rank, cut, coords, found)?;
        }
        coords.pop();
    }
    Ok(())
}

/// Sets the elements of the native C-order `chunk` (shape `shape`, `fill.len()`-byte
/// elements) whose index along `axis` is `from` or more to `fill`, unless they hold `fill` or
/// `also_fill` already; whether any changed.
fn fill_from(
    chunk: &mut [u8],
    shape: &[usize],
    axis: usize,
    from: usize,
    fill: &[u8],
    also_fill: Option<&[u8]>,
) -> bool {
    let along = shape[axis];
    let row = shape[axis + 1..].iter().product::<usize>() * fill.len();
    if from >= along || row == 0 {
        return false;
    }
    let mut changed = false;
    for block in chunk.chunks_exact_mut(along * row) {
        for slot in block[from * row..].chunks_exact_mut(fill.len()) {
            if slot != fill && Some(&*slot) != also_fill {
                slot.copy_from_slice(fill);
                changed = true;
            }
        }
    }
    changed
}

/// netCDF's default fill of a float variable whose declared fill is that value rounded:
/// netcdf-c stores its default as `9.96921e+36` in the metadata (which unstored chunks read
/// as) but fills the rest of the chunks it writes with the exact value. Both are fill.
fn netcdf_c_fill(plan: &VarPlan) -> Option<Vec<u8>> {
    let default = plan.nctype.default_fill();
    let value = |bytes: &[u8]| match plan.nctype {
        NcType::Float => Some(f64::from(f32::from_le_bytes(bytes.try_into().ok()?))),
        NcType::Double => Some(f64::from_le_bytes(bytes.try_into().ok()?)),
        _ => None,
    };
    let (declared, exact) = (value(&plan.fill)?, value(&default)?);
    (declared != exact && (declared - exact).abs() <= exact.abs() * 1e-6).then_some(default)
}

impl ChunkEngine {
    /// Makes every element of `var` at index `kept` or beyond along `axis` hold its fill value,
    /// in storage and in the cache: stored objects (chunks, shards) lying wholly there are
    /// deleted at once; a chunk (an inner chunk of a sharded array) that `kept` falls inside,
    /// or that lies beyond it inside a shard that `kept` falls inside, is set to fill there
    /// and left in the cache as a changed chunk, stored with the next flush.
    ///
    /// A writer calls this before it first grows a dimension past the length `kept` it found
    /// stored: what a killed or failed writer stored there would otherwise show through where
    /// the new records read as fill. It costs one listing of the variable's chunk keys (more
    /// when the axis is not the first and the keys nest with `/`) and a read of each
    /// straddling chunk.
    pub fn fill_beyond(&self, ds: &Dataset, var: VarId, axis: usize, kept: u64) -> Result<()> {
        let plan = self.plan(ds, var)?;
        let storage = &ds.var(var).storage;
        let rank = plan.chunk_shape.len();
        // An NCZarr scalar's `[1]` has no unlimited axis to grow.
        if axis >= rank || storage.chunks.len() != rank {
            return Ok(());
        }
        let cut = Cut::new(axis, storage.chunks[axis], kept);
        let _guard = self.write_lock.lock().unwrap_or_else(|e| e.into_inner());
        let beyond = list_beyond(
            self.map.as_ref(),
            &storage.key,
            &storage.key_encoding,
            rank,
            &cut,
        )?;
        io_parallel(self.map.concurrent_gets(), || {
            beyond
                .whole
                .par_iter()
                .try_for_each(|key| self.map.delete(key))
        })?;
        let sharded = plan.v3.as_ref().is_some_and(|c| c.is_sharded());
        for outer in &beyond.straddling {
            if !sharded {
                self.fill_chunk_beyond(&plan, outer, axis, kept)?;
                continue;
            }
            // The inner chunks of the shard at or past `kept` (inside the array along the
            // other axes).
            let ranges: Vec<(u64, u64)> = (0..rank)
                .map(|d| {
                    let per = storage.chunks[d] / plan.chunk_shape[d];
                    let (lo, hi) = (outer[d] * per, (outer[d] + 1) * per);
                    match d == axis {
                        true => (lo.max(kept / plan.chunk_shape[d]), hi),
                        false => (lo, hi.min(plan.grid[d].div_ceil(plan.chunk_shape[d]))),
                    }
                })
                .collect();
            if ranges.iter().any(|(lo, hi)| lo >= hi) {
                continue;
            }
            let mut inner: Vec<u64> = ranges.iter().map(|r| r.0).collect();
            loop {
                self.fill_chunk_beyond(&plan, &inner, axis, kept)?;
                let Some(d) = (0..rank).rev().find(|&d| inner[d] + 1 < ranges[d].1) else {
                    break;
                };
                inner[d] += 1;
                for (i, r) in inner.iter_mut().zip(&ranges).skip(d + 1) {
                    *i = r.0;
                }
            }
        }
        Ok(())
    }

    /// Sets the elements of the chunk at engine grid `coords` at index `kept` or beyond along
    /// `axis` to fill: in the cache (where a read may have left it with those values), and
    /// stored with the next flush, if that changes anything.
    fn fill_chunk_beyond(
        &self,
        plan: &Arc<VarPlan>,
        coords: &[u64],
        axis: usize,
        kept: u64,
    ) -> Result<()> {
        let Some(chunk) = self.fetch(plan, coords, false, None)? else {
            return Ok(());
        };
        let first = coords[axis] * plan.chunk_shape[axis];
        let from = usize::try_from(kept.saturating_sub(first)).unwrap_or(usize::MAX);
        let mut chunk = Arc::unwrap_or_clone(chunk);
        let also_fill = netcdf_c_fill(plan);
        let shape = &plan.chunk_shape_usize;
        if !fill_from(
            &mut chunk,
            shape,
            axis,
            from,
            &plan.fill,
            also_fill.as_deref(),
        ) {
            return Ok(());
        }
        self.cache.insert(
            &plan.chunk_key(coords),
            Arc::new(chunk),
            Some(Arc::clone(plan)),
            &mut |k, d, p| self.write_back(k, d, p),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zmap::{MemoryMap, ZMap};

    fn map_with(keys: &[&str]) -> MemoryMap {
        let map = MemoryMap::new();
        for k in keys {
            map.put(k, b"x").unwrap();
        }
        map
    }

    #[test]
    fn objects_past_the_cut_in_every_key_encoding() {
        let cut = Cut::new(0, 4, 6);
        assert_eq!((cut.first_beyond, cut.straddle), (2, Some(1)));
        let dotted = map_with(&["a/.zarray", "a/0.0", "a/1.0", "a/1.1", "a/2.1", "a/10.0"]);
        let found = list_beyond(
            &dotted,
            "a",
            &ChunkKeyEncoding::V2 { separator: '.' },
            2,
            &cut,
        );
        let want = Beyond {
            whole: vec!["a/10.0".into(), "a/2.1".into()],
            straddling: vec![vec![1, 0], vec![1, 1]],
        };
        assert_eq!(found.unwrap(), want);
        let nested = map_with(&["a/.zarray", "a/0/0", "a/1/0", "a/1/1", "a/2/1", "a/10/0"]);
        let found = list_beyond(
            &nested,
            "a",
            &ChunkKeyEncoding::V2 { separator: '/' },
            2,
            &cut,
        );
        let want = Beyond {
            whole: vec!["a/10".into(), "a/2".into()],
            straddling: vec![vec![1, 0], vec![1, 1]],
        };
        assert_eq!(found.unwrap(), want);
        let v3 = map_with(&["a/zarr.json", "a/c/0/0", "a/c/1/1", "a/c/3/0"]);
        let found = list_beyond(
            &v3,
            "a",
            &ChunkKeyEncoding::Default { separator: '/' },
            2,
            &cut,
        );
        let want = Beyond {
            whole: vec!["a/c/3".into()],
            straddling: vec![vec![1, 1]],
        };
        assert_eq!(found.unwrap(), want);
        let v3_dotted = map_with(&["a/zarr.json", "a/c.0.0", "a/c.1.1", "a/c.3.0"]);
        let encoding = ChunkKeyEncoding::Default { separator: '.' };
        let found = list_beyond(&v3_dotted, "a", &encoding, 2, &cut);
        let want = Beyond {
            whole: vec!["a/c.3.0".into()],
            straddling: vec![vec![1, 1]],
        };
        assert_eq!(found.unwrap(), want);
        // A cut along the second axis, on a chunk boundary: nothing straddles.
        let cut = Cut::new(1, 2, 4);
        let found = list_beyond(
            &nested,
            "a",
            &ChunkKeyEncoding::V2 { separator: '/' },
            2,
            &cut,
        );
        assert_eq!(found.unwrap(), Beyond::default());
        let cut = Cut::new(1, 2, 2);
        let found = list_beyond(
            &nested,
            "a",
            &ChunkKeyEncoding::V2 { separator: '/' },
            2,
            &cut,
        );
        let want = Beyond {
            whole: vec!["a/1/1".into(), "a/2/1".into()],
            straddling: vec![],
        };
        assert_eq!(found.unwrap(), want);
    }

    #[test]
    fn fill_from_an_index_along_an_axis() {
        // A 2x3 chunk of bytes, from index 1 along the second axis.
        let mut chunk = vec![1, 2, 3, 4, 5, 6];
        assert!(fill_from(&mut chunk, &[2, 3], 1, 1, &[0], None));
        assert_eq!(chunk, [1, 0, 0, 4, 0, 0]);
        assert!(!fill_from(&mut chunk, &[2, 3], 1, 1, &[0], None));
        assert!(fill_from(&mut chunk, &[2, 3], 0, 1, &[9], None));
        assert_eq!(chunk, [1, 0, 0, 9, 9, 9]);
        assert!(!fill_from(&mut chunk, &[2, 3], 0, 2, &[9], None));
        // Another spelling of the fill stays.
        let mut chunk = vec![1, 7, 3, 4, 5, 6];
        assert!(fill_from(&mut chunk, &[6], 0, 1, &[9], Some(&[7])));
        assert_eq!(chunk, [1, 7, 9, 9, 9, 9]);
    }
}
