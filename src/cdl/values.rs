//! The values of one CDL data list, held as they will be stored: each value is converted to
//! the variable's type when it is read, so that it costs its own bytes (a string its bytes
//! and an end offset) rather than a token, a parsed constant and a placed element. Fill
//! markers (`_`, and in char data the padding of strings to whole rows) are kept as runs of
//! element indices, never as bytes, however long; the fill value is only known once every
//! attribute has been read.

use crate::Error;

/// What the values of a list are converted to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ValueKind {
    /// Fixed-size elements of this many bytes (numbers in native little-endian form).
    Fixed(usize),
    /// Characters: strings spread over rows of `row` characters (see [`ValueList::char_string`]).
    Chars {
        /// The length strings are padded to a multiple of (1: concatenated).
        row: u64,
    },
    /// Strings of any length.
    Strings,
}

/// The converted values of one data list, in element order, fill included.
#[derive(Debug)]
pub(super) struct ValueList {
    kind: ValueKind,
    /// The elements that are not fill, in order: fixed-size elements, or one byte per
    /// character, or the bytes of every string one after the other.
    bytes: Vec<u8>,
    /// Strings only: where each string of `bytes` ends.
    string_ends: Vec<usize>,
    /// Runs of fill elements that a value follows, as (first element, count): ascending and
    /// never adjacent. The fill after the last value is not a run: it is `len - values_end`.
    fills: Vec<(u64, u64)>,
    /// Elements, fill included.
    len: u64,
    /// One past the last element that is not fill.
    values_end: u64,
    /// The first element that is not a value of the variable's type, and why.
    first_error: Option<(u64, Error)>,
    /// Strings only: the longest, in bytes.
    longest: usize,
    /// Characters only: a run of character constants not yet ended (they form one string).
    pending_chars: Vec<u8>,
}

impl ValueList {
    /// An empty list of values of `kind`.
    pub(super) fn new(kind: ValueKind) -> Self {
        ValueList {
            kind,
            bytes: Vec::new(),
            string_ends: Vec::new(),
            fills: Vec::new(),
            len: 0,
            values_end: 0,
            first_error: None,
            longest: 0,
            pending_chars: Vec::new(),
        }
    }

    /// Elements, fill included (for characters, after [`ValueList::finish`]).
    pub(super) fn len(&self) -> u64 {
        self.len
    }

    /// The longest string, in bytes.
    pub(super) fn longest(&self) -> usize {
        self.longest
    }

    /// The buffer that a fixed-size value is appended to; [`ValueList::value_appended`] must
    /// follow the append.
    pub(super) fn bytes_mut(&mut self) -> &mut Vec<u8> {
        &mut self.bytes
    }

    /// Counts the element just appended to [`ValueList::bytes_mut`] (or to `string_ends`),
    /// closing the fill run before it.
    pub(super) fn value_appended(&mut self) {
        if self.len > self.values_end {
            self.fills
                .push((self.values_end, self.len - self.values_end));
        }
        self.len += 1;
        self.values_end = self.len;
    }

    /// Appends `count` fill elements.
    pub(super) fn push_fill(&mut self, count: u64) {
        self.len = self.len.saturating_add(count);
    }

    /// Appends one string value.
    pub(super) fn push_string(&mut self, s: &[u8]) {
        self.bytes.extend_from_slice(s);
        self.string_ends.push(self.bytes.len());
        self.longest = self.longest.max(s.len());
        self.value_appended();
    }

    /// Appends an element that is not a value of the variable's type: it stands as a value
    /// (zero bytes, an empty string), and the first such error is kept for when the element
    /// is found to be stored.
    pub(super) fn push_error(&mut self, error: Error) {
        if self.first_error.is_none() {
            self.first_error = Some((self.len, error));
        }
        match self.kind {
            ValueKind::Fixed(size) => {
                self.bytes.resize(self.bytes.len() + size, 0);
                self.value_appended();
            }
            ValueKind::Chars { .. } => {
                self.end_char_run();
                self.bytes.push(0);
                self.value_appended();
            }
            ValueKind::Strings => self.push_string(b""),
        }
    }

    /// Characters: a character constant, which continues the run of constants before it.
    pub(super) fn char_constant(&mut self, b: u8) {
        self.pending_chars.push(b);
    }

    /// Characters: a string constant, padded with fill to a multiple of the row; an empty
    /// one is a row of fill (ncdump prints an all-NUL row as `""`, and ncgen reads it back as
    /// such).
    pub(super) fn char_string(&mut self, s: &[u8]) {
        self.end_char_run();
        if s.is_empty() {
            self.push_fill(self.row());
        } else {
            self.spread_chars(s);
        }
    }

    /// Characters: `_`, a row of fill as `""` is, which keeps the strings after it at the
    /// start of rows. (ncgen's own count of `_` here varies with what surrounds it: `_, "ab"`
    /// starts "ab" at the last character of the first row, `"ab", _, "cd"` at the last of
    /// the second.)
    pub(super) fn char_fill(&mut self) {
        self.end_char_run();
        self.push_fill(self.row());
    }

    /// Ends the list: a run of character constants at its end becomes a string.
    pub(super) fn finish(&mut self) {
        self.end_char_run();
        self.pending_chars = Vec::new();
    }

    fn row(&self) -> u64 {
        match self.kind {
            ValueKind::Chars { row } => row.max(1),
            _ => 1,
        }
    }

    fn end_char_run(&mut self) {
        if !self.pending_chars.is_empty() {
            let run = std::mem::take(&mut self.pending_chars);
            self.spread_chars(&run);
            self.pending_chars = run;
            self.pending_chars.clear();
        }
    }

    /// The characters of a string, then fill up to a multiple of the row (one run, however
    /// long the row).
    fn spread_chars(&mut self, s: &[u8]) {
        if self.len > self.values_end {
            self.fills
                .push((self.values_end, self.len - self.values_end));
        }
        self.bytes.extend_from_slice(s);
        self.len += s.len() as u64;
        self.values_end = self.len;
        let row = self.row();
        let len = s.len() as u64;
        self.push_fill(len.div_ceil(row).saturating_mul(row) - len);
    }

    /// One past the last value among the first `limit` elements (0: none).
    pub(super) fn values_before(&self, limit: u64) -> u64 {
        let end = self.values_end.min(limit);
        // The element before `end` is fill only inside a run, and a value precedes every run.
        match self.fills.partition_point(|(start, _)| *start < end) {
            0 => end,
            n => {
                let (start, count) = self.fills[n - 1];
                if end <= start + count {
                    start
                } else {
                    end
                }
            }
        }
    }

    /// Characters only: how many of the elements from `start` on are characters rather than
    /// fill, with the first of them appended to `sample` until it holds `sample_len` bytes.
    pub(super) fn chars_from(&self, start: u64, sample: &mut Vec<u8>, sample_len: usize) -> u64 {
        let mut count = 0;
        self.for_each_run_of_values(|element, value, n| {
            let skip = start.saturating_sub(element).min(n);
            let (first, n) = ((value + skip) as usize, n - skip);
            if n == 0 {
                return;
            }
            let take = (sample_len.saturating_sub(sample.len()) as u64).min(n) as usize;
            sample.extend_from_slice(&self.bytes[first..first + take]);
            count += n;
        });
        count
    }

    /// The first element among the first `limit` that is not a value of the variable's type.
    pub(super) fn take_error_before(&mut self, limit: u64) -> Option<Error> {
        match self.first_error.take() {
            Some((at, e)) if at < limit => Some(e),
            _ => None,
        }
    }

    /// Calls `segment(first element, first value, count)` for each run of values, in order.
    fn for_each_run_of_values(&self, mut segment: impl FnMut(u64, u64, u64)) {
        let (mut element, mut value) = (0u64, 0u64);
        for &(start, count) in self.fills.iter().chain([(self.values_end, 0)].iter()) {
            let n = start - element;
            if n > 0 {
                segment(element, value, n);
            }
            value += n;
            element = start + count;
        }
    }

    /// Fixed-size elements (numbers, characters) as the first `rows_len` elements of a
    /// variable: the first `keep` of the list, fill for the rest. The values are moved into
    /// place within their own buffer, which grows to the rows' size: no second copy is made.
    pub(super) fn into_rows(mut self, keep: u64, rows_len: u64, fill: &[u8]) -> Vec<u8> {
        let size = fill.len();
        let keep = keep.min(rows_len) as usize;
        let rows_len = rows_len as usize;
        let mut runs = Vec::with_capacity(self.fills.len() + 1);
        self.for_each_run_of_values(|element, value, n| runs.push((element, value, n)));
        let mut out = std::mem::take(&mut self.bytes);
        drop(self);
        out.resize(rows_len * size, 0);
        let fill_range = |out: &mut [u8], from: usize, to: usize| {
            if size == 1 {
                out[from..to].fill(fill[0]);
            } else if from < to {
                for cell in out[from * size..to * size].chunks_exact_mut(size) {
                    cell.copy_from_slice(fill);
                }
            }
        };
        // From the last run back: a value's element is never before its place in the
        // buffer, so moving the runs back to front overwrites only what has been moved.
        let mut filled_from = rows_len;
        for &(element, value, n) in runs.iter().rev() {
            let (element, value) = (element as usize, value as usize);
            let end = (element + n as usize).min(keep);
            let start = element.min(end);
            fill_range(&mut out, end, filled_from);
            if start < end {
                out.copy_within(value * size..(value + end - start) * size, start * size);
            }
            filled_from = start;
        }
        fill_range(&mut out, 0, filled_from);
        out
    }

    /// Writes the first `count` elements into `rows` (elements of `width` bytes already
    /// holding the fill) from element `base` on: fixed-size values as they are, strings
    /// NUL-padded to `width`.
    pub(super) fn write_into(&self, rows: &mut [u8], base: u64, count: u64, width: usize) {
        self.for_each_run_of_values(|element, value, n| {
            if element >= count {
                return;
            }
            let n = n.min(count - element) as usize;
            let (at, value) = ((base + element) as usize * width, value as usize);
            if self.kind != ValueKind::Strings {
                rows[at..at + n * width]
                    .copy_from_slice(&self.bytes[value * width..(value + n) * width]);
                return;
            }
            for (j, cell) in rows[at..at + n * width].chunks_exact_mut(width).enumerate() {
                let end = self.string_ends[value + j];
                let start = match value + j {
                    0 => 0,
                    k => self.string_ends[k - 1],
                };
                let s = &self.bytes[start..end];
                cell[..s.len()].copy_from_slice(s);
                cell[s.len()..].fill(0);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed(items: &[Option<u8>]) -> ValueList {
        let mut list = ValueList::new(ValueKind::Fixed(1));
        for item in items {
            match item {
                Some(b) => {
                    list.bytes_mut().push(*b);
                    list.value_appended();
                }
                None => list.push_fill(1),
            }
        }
        list
    }

    /// The rows the list stands for, element by element: the reference for `into_rows`.
    fn expanded(items: &[Option<u8>], keep: u64, rows_len: u64) -> Vec<u8> {
        (0..rows_len as usize)
            .map(|i| match items.get(i) {
                Some(Some(b)) if (i as u64) < keep => *b,
                _ => 0xFF,
            })
            .collect()
    }

    proptest::proptest! {
        #[test]
        fn rows_built_in_place_hold_the_values_and_the_fill(
            items in proptest::collection::vec(proptest::option::of(0u8..200), 0..40),
            keep in 0u64..50,
            extra in 0u64..10,
        ) {
            let rows_len = (items.len() as u64).min(keep) + extra;
            let list = fixed(&items);
            let last = items.iter().rposition(Option::is_some).map_or(0, |i| i as u64 + 1);
            let limit = keep.min(items.len() as u64);
            let last_kept = items[..limit as usize]
                .iter()
                .rposition(Option::is_some)
                .map_or(0, |i| i as u64 + 1);
            proptest::prop_assert_eq!(list.values_before(u64::MAX), last);
            proptest::prop_assert_eq!(list.values_before(keep), last_kept);
            let mut rows = vec![0xFF; rows_len as usize];
            list.write_into(&mut rows, 0, keep.min(rows_len), 1);
            proptest::prop_assert_eq!(&rows, &expanded(&items, keep, rows_len));
            proptest::prop_assert_eq!(
                list.into_rows(keep, rows_len, &[0xFF]),
                expanded(&items, keep, rows_len)
            );
        }
    }

    /// An item of char data, for the reference expansion.
    #[derive(Debug, Clone)]
    enum CharItem {
        Constant(u8),
        Str(Vec<u8>),
        Fill,
        /// A number that is no character: an error, standing as one element.
        Number,
    }

    /// ncgen's expansion of strings over characters, element by element (`None`: fill):
    /// runs of character constants form one string, each string is padded to a multiple of
    /// `row`, and an empty string or `_` is a row of fill.
    fn expand_chars_reference(items: &[CharItem], row: u64) -> Vec<Option<u8>> {
        let row = row.max(1) as usize;
        let mut out = Vec::new();
        let mut run: Vec<u8> = Vec::new();
        let string = |out: &mut Vec<Option<u8>>, s: &[u8]| {
            let start = out.len();
            out.extend(s.iter().map(|b| Some(*b)));
            out.resize(start + s.len().div_ceil(row) * row, None);
        };
        for item in items {
            if let CharItem::Constant(b) = item {
                run.push(*b);
                continue;
            }
            if !run.is_empty() {
                string(&mut out, &run);
                run.clear();
            }
            match item {
                CharItem::Str(s) if !s.is_empty() => string(&mut out, s),
                CharItem::Str(_) | CharItem::Fill => out.extend(std::iter::repeat_n(None, row)),
                _ => out.push(Some(0)),
            }
        }
        if !run.is_empty() {
            string(&mut out, &run);
        }
        out
    }

    proptest::proptest! {
        #[test]
        fn chars_spell_the_expansion(
            kinds in proptest::collection::vec((0u8..4, 0usize..7), 0..12),
            row in 1u64..6,
        ) {
            let items: Vec<CharItem> = kinds
                .iter()
                .map(|&(kind, len)| match kind {
                    0 => CharItem::Constant(b'a'),
                    1 => CharItem::Str(vec![b'b'; len]),
                    2 => CharItem::Fill,
                    _ => CharItem::Number,
                })
                .collect();
            let mut list = ValueList::new(ValueKind::Chars { row });
            for item in &items {
                match item {
                    CharItem::Constant(b) => list.char_constant(*b),
                    CharItem::Str(s) => list.char_string(s),
                    CharItem::Fill => list.char_fill(),
                    CharItem::Number => list.push_error(Error::Invalid("number".into())),
                }
            }
            list.finish();
            let expanded = expand_chars_reference(&items, row);
            proptest::prop_assert_eq!(list.len(), expanded.len() as u64);
            let has_error = items.iter().any(|i| matches!(i, CharItem::Number));
            let len = list.len();
            proptest::prop_assert_eq!(list.take_error_before(len).is_some(), has_error);
            let rows: Vec<Option<u8>> = list
                .into_rows(len, len, &[0xFF])
                .into_iter()
                .map(|b| (b != 0xFF).then_some(b))
                .collect();
            proptest::prop_assert_eq!(rows, expanded);
        }
    }

    #[test]
    fn chars_from_counts_the_characters_past_a_place() {
        // Rows of 3: "ab" + fill, "cdef" + fill to 6, then `_` (a row of fill), then "g".
        let mut list = ValueList::new(ValueKind::Chars { row: 3 });
        list.char_string(b"ab");
        list.char_string(b"cdef");
        list.char_fill();
        list.char_string(b"g");
        list.finish();
        let mut sample = Vec::new();
        assert_eq!(list.chars_from(6, &mut sample, 10), 2);
        assert_eq!(sample, b"fg");
        sample.clear();
        assert_eq!(list.chars_from(1, &mut sample, 3), 6);
        assert_eq!(sample, b"bcd");
        assert_eq!(list.chars_from(12, &mut Vec::new(), 3), 1);
        assert_eq!(list.chars_from(15, &mut Vec::new(), 3), 0);
    }

    #[test]
    fn a_huge_char_row_is_counted_not_built() {
        // A string padded to a row of 2^32 characters holds its three bytes only.
        let mut list = ValueList::new(ValueKind::Chars { row: 1 << 32 });
        list.char_string(b"abc");
        list.finish();
        assert_eq!(list.len(), 1 << 32);
        assert_eq!(list.values_before(u64::MAX), 3);
        assert!(list.bytes.capacity() < 64);
    }

    #[test]
    fn strings_are_padded_to_the_width() {
        let mut list = ValueList::new(ValueKind::Strings);
        list.push_string(b"ab");
        list.push_fill(1);
        list.push_string(b"");
        list.push_string(b"xyz");
        assert_eq!(list.longest(), 3);
        let mut rows = b"f\0\0\0".repeat(5);
        list.write_into(&mut rows, 1, 4, 4);
        assert_eq!(rows, b"f\0\0\0ab\0\0f\0\0\0\0\0\0\0xyz\0");
    }
}
