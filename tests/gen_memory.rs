//! The memory `gen` takes to parse a CDL data section, counted by a global allocator of
//! this test binary's own: the values are converted as they are read, so a value costs
//! about its own bytes, and a data section whose rows would take more than allowed is
//! refused with the variable's name before they are built.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use nczarrfs::cdl::parser::{parse_cdl, parse_cdl_with_budget};

/// The system allocator, counting the bytes held and the most held since the last reset.
struct Counting;

static HELD: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let held = HELD.fetch_add(layout.size(), Ordering::SeqCst) + layout.size();
            PEAK.fetch_max(held, Ordering::SeqCst);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        HELD.fetch_sub(layout.size(), Ordering::SeqCst);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            // Counted as the new block beside the old one, as a copying realloc holds both.
            let held = HELD.fetch_add(new_size, Ordering::SeqCst) + new_size;
            PEAK.fetch_max(held, Ordering::SeqCst);
            HELD.fetch_sub(layout.size(), Ordering::SeqCst);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// One measurement at a time: the counters are the whole process's.
static MEASURING: Mutex<()> = Mutex::new(());

/// The most bytes held at once while `text` is parsed, beyond what was held before (the
/// text itself), and the bytes of the first variable's rows.
fn peak_while_parsing(text: &str) -> (usize, usize) {
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let before = HELD.load(Ordering::SeqCst);
    PEAK.store(before, Ordering::SeqCst);
    let parsed = parse_cdl(text, "m.cdl").unwrap_or_else(|e| panic!("{e}"));
    let peak = PEAK.load(Ordering::SeqCst) - before;
    let rows = parsed.vars[0].data.as_ref().map_or(0, Vec::len);
    (peak, rows)
}

fn cdl(dims: &str, decl: &str, values: impl Iterator<Item = String>) -> String {
    let values: Vec<String> = values.collect();
    format!(
        "netcdf m {{\ndimensions:\n{dims}\nvariables:\n {decl} ;\ndata:\n v = {} ;\n}}\n",
        values.join(", ")
    )
}

const N: usize = 1_000_000;

#[test]
fn a_value_takes_about_its_own_bytes_while_parsing() {
    let cases = [
        (
            "int",
            cdl(
                &format!(" n = {N} ;"),
                "int v(n)",
                (0..N).map(|i| (i as i64 * 2039 - 1_000_000_000).to_string()),
            ),
            4,
        ),
        (
            "double, 3-D with fill",
            cdl(
                " t = UNLIMITED ;\n y = 10 ;\n x = 100 ;",
                "double v(t, y, x)",
                (0..N).map(|i| match i % 10 {
                    3 => "_".to_string(),
                    _ => format!("{}.25", i),
                }),
            ),
            8,
        ),
        (
            "string",
            cdl(
                &format!(" n = {N} ;"),
                "string v(n)",
                (0..N).map(|i| format!("\"s{}\"", i % 100_000)),
            ),
            6,
        ),
        (
            "char rows",
            cdl(
                &format!(" n = {} ;\n w = 10 ;", N / 10),
                "char v(n, w)",
                (0..N / 10).map(|i| format!("\"abcd{:06}\"", i)),
            ),
            1,
        ),
        (
            "int records of an inner unlimited dimension",
            cdl(
                " r = UNLIMITED ;\n s = UNLIMITED ;",
                "int v(r, s)",
                (0..N / 100).map(|_| format!("{{{}}}", vec!["1"; 100].join(", "))),
            ),
            4,
        ),
    ];
    for (what, text, value_bytes) in cases {
        let (peak, rows) = peak_while_parsing(&text);
        eprintln!("{what}: {} bytes per value at the peak", peak / N);
        assert_eq!(rows, N * value_bytes, "{what}");
        // The values converted, grown in place to the rows (twice their size at most while
        // a vector grows), and little else: the tokens, parsed constants and placed
        // elements this replaced took over 200 bytes per value.
        let bound = 3 * N * value_bytes + N * 8 + (1 << 20);
        assert!(
            peak < bound,
            "{what}: {peak} bytes at the peak for {N} values of {value_bytes} bytes \
             (bound {bound})"
        );
    }
}

#[test]
fn rows_beyond_the_budget_are_refused_with_the_variable_name() {
    // 1000 ints in rows of 10: 4000 bytes, refused by a budget of one byte less.
    let text = cdl(
        " r = 100 ;\n c = 10 ;",
        "int v(r, c)",
        (0..1000).map(|i| i.to_string()),
    );
    let parsed = parse_cdl_with_budget(&text, "b.cdl", 4000).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(parsed.vars[0].data.as_ref().map(Vec::len), Some(4000));
    let err = parse_cdl_with_budget(&text, "b.cdl", 3999)
        .expect_err("over the budget")
        .to_string();
    assert!(err.contains("/v") && err.contains("rows"), "{err}");
    // The rows up to the last value count, not the values: one value in the 7th row of
    // strings 5 bytes wide is 7 rows of 10 such strings.
    let text = cdl(
        " r = 100 ;\n c = 10 ;",
        "string v(r, c)",
        (0..61).map(|i| {
            if i == 60 {
                "\"abcde\"".into()
            } else {
                "_".into()
            }
        }),
    );
    let parsed = parse_cdl_with_budget(&text, "b.cdl", 350).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(parsed.vars[0].data.as_ref().map(Vec::len), Some(350));
    let err = parse_cdl_with_budget(&text, "b.cdl", 349)
        .expect_err("over the budget")
        .to_string();
    assert!(err.contains("/v"), "{err}");
}
