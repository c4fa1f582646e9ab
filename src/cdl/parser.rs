//! The CDL parser behind `gen`: ncgen's language for the netCDF-4 data model without
//! user-defined types, turned into a [`Dataset`] plus, per variable, the special attributes
//! ncgen interprets (`_ChunkSizes`, `_DeflateLevel`, …) and the data values.
//!
//! Rules taken from ncgen (and checked against it where the Debian build does not crash):
//! - An untyped attribute takes its type from its constants: strings (with or without
//!   character constants) make one `char` attribute, concatenated; character constants alone
//!   make `byte` values; numbers unify to `double` if any is a double, else `float` if any is a
//!   float, else the narrowest integer type holding every constant's suffix type (an
//!   unsuffixed integer is `int`, or `uint` when it does not fit, or beyond that `int64` if
//!   negative and `uint64` if positive).
//! - `_FillValue` is an ordinary attribute converted to the variable's type.
//! - Character data: each string (a run of character constants counts as one string) is
//!   padded with the fill character to a multiple of the last dimension's length, unless the values run
//!   along that dimension alone (a 1-D variable, or the innermost braces of an unlimited last
//!   dimension), in which case strings are just concatenated (`c(2) = "a", "b"` is `ab`).
//!   An empty string, and `_`, stand for one row of fill (one character when strings are
//!   concatenated), but a scalar's `""` is the NUL, as ncgen stores it.
//!   Characters beyond the variable's size are dropped with a warning, the man page's rule
//!   (ncgen 4.9.0 crashes there); too many numbers are an error.
//! - `NIL` (a null string) is taken in `string` data and attributes only, and stored as "",
//!   as netcdf-c stores a null string in NCZarr.
//! - Unlimited dimensions after the first are given with `{ }`: each braced list holds the
//!   values of one index of the enclosing dimensions, and an unlimited dimension's length is
//!   the largest record count any variable gives it.
//!
//! Data values are returned in the model's native representation: little-endian numbers,
//! char bytes, and strings as UTF-8 NUL-padded to [`Variable::string_width`], which the parser
//! sets to the longest value (data or fill) of the variable, and at least 1.
//! `_nczarr_maxstrlen` and `_nczarr_default_maxstrlen` are kept as ordinary attributes, as
//! ncgen passes them to the library unchanged.

use std::collections::{HashMap, VecDeque};
use std::path::Path;

use super::lexer::{Lexer, Number, Pos, Tok, Token};
use super::values::{ValueKind, ValueList};
use crate::model::{
    element_count, AttrValue, Attribute, Dataset, DimId, GroupId, NcType, VarId, VarStorage,
    Variable,
};
use crate::{Error, Result};

/// The byte order asked for by `_Endianness`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endianness {
    /// `"little"`
    Little,
    /// `"big"`
    Big,
}

/// The storage layout asked for by `_Storage`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageLayout {
    /// `"contiguous"`
    Contiguous,
    /// `"chunked"`
    Chunked,
    /// `"compact"`
    Compact,
}

/// The special (virtual) attributes of one variable: ncgen turns them into storage settings
/// instead of attributes. `None` means "not given".
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SpecialAttrs {
    /// `_ChunkSizes`.
    pub chunk_sizes: Option<Vec<u64>>,
    /// `_DeflateLevel`.
    pub deflate_level: Option<u32>,
    /// `_Shuffle`.
    pub shuffle: Option<bool>,
    /// `_Fletcher32`.
    pub fletcher32: Option<bool>,
    /// `_Endianness`.
    pub endianness: Option<Endianness>,
    /// `_NoFill`.
    pub no_fill: Option<bool>,
    /// `_Storage`.
    pub storage: Option<StorageLayout>,
    /// `_Filter` text as written (HDF5 filter ids and parameters, `|`-separated).
    pub filter: Option<String>,
    /// `_Codecs` text as written (a JSON list of codec objects).
    pub codecs: Option<String>,
    /// `_QuantizeBitGroomNumberOfSignificantDigits`, `_QuantizeGranularBitRoundNumberOf…`,
    /// `_QuantizeBitRoundNumberOfSignificantBits`: the attribute name and its value.
    pub quantize: Option<(String, i64)>,
}

/// Dataset-wide special attributes (ncdump `-s` output); they never become attributes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GlobalSpecials {
    /// `_Format` (`"netCDF-4"`, `"classic"`, …).
    pub format: Option<String>,
    /// `_IsNetcdf4`: ncdump `-s` prints it as an integer (`1`), ncgen also takes the strings
    /// `"true"`, `"false"`, `"1"`, `"0"`.
    pub is_netcdf4: Option<bool>,
    /// `_SuperblockVersion`.
    pub superblock_version: Option<i64>,
    /// `_NCProperties`.
    pub nc_properties: Option<String>,
}

/// What the CDL says about one variable beyond the model.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct VarExtras {
    /// Its special attributes.
    pub special: SpecialAttrs,
    /// Its values in native representation, for the first rows along its first dimension up
    /// to the last value the CDL gives (a scalar's one value); unset elements among them hold
    /// the fill value, and the rows after them are fill. `None` when the CDL gives no data.
    pub data: Option<Vec<u8>>,
}

/// A parsed CDL file.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedCdl {
    /// The name after `netcdf`.
    pub name: String,
    /// The dataset (groups, dimensions with final unlimited lengths, variables, attributes).
    pub dataset: Dataset,
    /// Per variable, indexed like [`Dataset::vars`].
    pub vars: Vec<VarExtras>,
    /// Dataset-wide special attributes.
    pub globals: GlobalSpecials,
    /// Warnings about what the CDL gives that is not stored (char data longer than its
    /// variable, `_ChunkSizes` longer than its variable's rank), each naming its place in
    /// the file and the variable.
    pub warnings: Vec<String>,
}

/// Reads and parses a CDL file; errors name the file.
pub fn parse_cdl_file(path: &Path) -> Result<ParsedCdl> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    parse_cdl_owned(cdl_text(bytes), &path.display().to_string())
}

/// The text of CDL read as bytes. ncdump writes char values as their bytes, which need not be
/// UTF-8 (Latin-1 text); such bytes are carried through to the string constants that hold
/// them (anywhere else they are an error at their place).
pub fn cdl_text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| crate::meta::json::carry_raw_bytes(e.as_bytes()))
}

/// Parses CDL text; `file` names it in error messages. A leading byte order mark is skipped,
/// as ncgen does.
pub fn parse_cdl(text: &str, file: &str) -> Result<ParsedCdl> {
    parse_cdl_with_budget(text, file, memory_budget())
}

/// [`parse_cdl`] of text it owns: the text is dropped once it is read, before the rows of
/// the variables are built.
pub fn parse_cdl_owned(text: String, file: &str) -> Result<ParsedCdl> {
    let declared = read_declarations(&text, file)?;
    drop(text);
    declared.finish(memory_budget())
}

/// [`parse_cdl`] with the memory the rows of one variable's data section may take:
/// `row_budget` bytes (by default half of the machine's memory). A data section whose rows
/// would take more is refused, naming the variable.
pub fn parse_cdl_with_budget(text: &str, file: &str, row_budget: u64) -> Result<ParsedCdl> {
    read_declarations(text, file)?.finish(row_budget)
}

/// Reads the whole text: the dataset, and the data sections with their values converted.
/// Errors come as they did when the text was split into tokens first: the first malformed
/// token anywhere in the text before any other error.
fn read_declarations<'f>(text: &str, file: &'f str) -> Result<Declared<'f>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut p = Parser {
        lexer: Lexer::new(text, file),
        ahead: VecDeque::with_capacity(2),
        prev: Pos::default(),
        lex_error: None,
        file,
        ds: Dataset::new(),
        extras: Vec::new(),
        data: Vec::new(),
        globals: GlobalSpecials::default(),
        warnings: Vec::new(),
    };
    p.fill_ahead();
    let read = p.read_all();
    if let Some(e) = p.lex_error.take() {
        return Err(e);
    }
    let name = match read {
        Ok(name) => name,
        Err(e) => {
            // A malformed token later in the text is the error to report.
            loop {
                match p.lexer.next_token() {
                    Ok(t) if t.tok == Tok::Eof => return Err(e),
                    Ok(_) => {}
                    Err(lexed) => return Err(lexed),
                }
            }
        }
    };
    Ok(Declared {
        file,
        name,
        ds: p.ds,
        extras: p.extras,
        data: p.data,
        globals: p.globals,
        warnings: p.warnings,
    })
}

/// The deepest nesting of braces in a data list: netCDF's limit on a variable's dimensions
/// (`NC_MAX_VAR_DIMS`), since each level of braces stands for a dimension.
const MAX_DATA_BRACES: usize = 1024;

/// A constant in an attribute or data list.
#[derive(Debug, Clone, PartialEq)]
enum Const {
    Num(Number),
    Str(Vec<u8>),
    Char(u8),
    /// `NIL`, the null string: only `string` variables and attributes take it.
    Nil,
}

/// Whether a name is ncgen's `NIL` constant (its lexer's `NIL|nil|Nil`), read as such where
/// a value is expected; elsewhere it stays a name.
fn is_nil(name: &str) -> bool {
    matches!(name, "NIL" | "nil" | "Nil")
}

/// ncgen's refusal of `NIL` anywhere but in a `string` variable or attribute.
const NIL_NOT_STRING: &str =
    "type mismatch: NIL (a null string) can only be given to variables or attributes of type \
     string";

/// One data list: the values of a data section, or of one pair of braces in it.
#[derive(Debug)]
struct DataList {
    items: DataItems,
    /// The first item out of its place, which ncgen refuses: braces among values, or a
    /// value among the braces of an unlimited dimension.
    misplaced: Option<Pos>,
    /// Where the last item starts.
    last: Pos,
}

/// What a data list holds, as the variable's dimensions have it: braces stand for the
/// records of an unlimited dimension after the first, and nowhere else.
#[derive(Debug)]
enum DataItems {
    /// The values along the dimensions from the list's own to the last.
    Values(ValueList),
    /// One list per index of the dimensions up to the next unlimited one, up to the first
    /// misplaced item (the lists after it are read, and dropped).
    Braces(Vec<DataList>),
}

/// What a data list of a variable at a given dimension is read as.
#[derive(Debug, Clone, Copy)]
enum ListLevel {
    /// Values of this kind.
    Values(ValueKind),
    /// Braces whose lists start at this dimension.
    Braces(usize),
    /// Nothing: the list is misplaced, and only its syntax is checked.
    Skipped,
}

/// A data section: `var = list ;`.
#[derive(Debug)]
struct DataSection {
    var: VarId,
    /// Where it starts.
    pos: Pos,
    list: DataList,
}

/// A variable whose data list is being read.
struct DataTarget {
    nctype: NcType,
    dims: Vec<DimId>,
}

struct Parser<'t, 'f> {
    lexer: Lexer<'t>,
    /// The current token and the one after it.
    ahead: VecDeque<Token>,
    /// Where the last token taken (before the end) starts.
    prev: Pos,
    /// The first malformed token: the text reads as ending there.
    lex_error: Option<Error>,
    file: &'f str,
    ds: Dataset,
    extras: Vec<VarExtras>,
    data: Vec<DataSection>,
    globals: GlobalSpecials,
    /// Warnings about what the declarations give that is not stored.
    warnings: Vec<String>,
}

/// The text read: what is left is to size the unlimited dimensions and build the rows.
struct Declared<'f> {
    file: &'f str,
    name: String,
    ds: Dataset,
    extras: Vec<VarExtras>,
    data: Vec<DataSection>,
    globals: GlobalSpecials,
    /// The parser's warnings, before those about the data.
    warnings: Vec<String>,
}

const SPECIAL_VAR_ATTRS: [&str; 12] = [
    "_ChunkSizes",
    "_DeflateLevel",
    "_Shuffle",
    "_Fletcher32",
    "_Endianness",
    "_NoFill",
    "_Storage",
    "_Filter",
    "_Codecs",
    "_QuantizeBitGroomNumberOfSignificantDigits",
    "_QuantizeGranularBitRoundNumberOfSignificantDigits",
    "_QuantizeBitRoundNumberOfSignificantBits",
];

const GLOBAL_SPECIALS: [&str; 4] = [
    "_Format",
    "_IsNetcdf4",
    "_SuperblockVersion",
    "_NCProperties",
];

impl Parser<'_, '_> {
    /// Reads tokens until two are ahead; after the end (or a malformed token), the end.
    fn fill_ahead(&mut self) {
        while self.ahead.len() < 2 {
            let ended =
                self.lex_error.is_some() || self.ahead.back().is_some_and(|t| t.tok == Tok::Eof);
            let t = if ended {
                Token {
                    tok: Tok::Eof,
                    pos: self.ahead.back().map(|t| t.pos).unwrap_or_default(),
                }
            } else {
                match self.lexer.next_token() {
                    Ok(t) => t,
                    Err(e) => {
                        self.lex_error = Some(e);
                        continue;
                    }
                }
            };
            self.ahead.push_back(t);
        }
    }

    fn peek(&self) -> &Tok {
        &self.ahead[0].tok
    }

    fn peek_at(&self, k: usize) -> &Tok {
        &self.ahead[k.min(1)].tok
    }

    fn pos(&self) -> Pos {
        self.ahead[0].pos
    }

    /// Takes the current token; at the end, the end again.
    fn next(&mut self) -> Token {
        if self.ahead[0].tok == Tok::Eof {
            return self.ahead[0].clone();
        }
        let t = self.ahead.pop_front().unwrap_or(Token {
            tok: Tok::Eof,
            pos: Pos::default(),
        });
        self.prev = t.pos;
        self.fill_ahead();
        t
    }

    /// The whole text: the dataset's name.
    fn read_all(&mut self) -> Result<String> {
        let name = self.file_header()?;
        self.group_body(Dataset::ROOT)?;
        self.expect(&Tok::RBrace)?;
        if self.peek() != &Tok::Eof {
            return Err(self.err(
                self.pos(),
                format!("unexpected {} after the end", self.peek().describe()),
            ));
        }
        Ok(name)
    }

    fn err(&self, pos: Pos, reason: impl Into<String>) -> Error {
        pos.error(self.file, reason)
    }

    fn syntax(&self, expected: &str) -> Error {
        self.err(
            self.pos(),
            format!(
                "syntax error: expected {expected}, found {}",
                self.peek().describe()
            ),
        )
    }

    fn expect(&mut self, tok: &Tok) -> Result<Pos> {
        if self.peek() == tok {
            Ok(self.next().pos)
        } else {
            Err(self.syntax(&tok.describe()))
        }
    }

    fn user_types(&self, pos: Pos) -> Error {
        self.err(
            pos,
            "user-defined types are not supported (enum, compound, opaque, vlen)",
        )
    }

    fn name_token(&mut self, what: &str) -> Result<(String, Pos)> {
        match self.peek().clone() {
            Tok::Ident(s) => {
                let pos = self.next().pos;
                crate::model::check_name(&s)
                    .map_err(|r| self.err(pos, format!("illegal {what} name {s:?}: {r}")))?;
                Ok((s, pos))
            }
            _ => Err(self.syntax(&format!("a {what} name"))),
        }
    }

    fn file_header(&mut self) -> Result<String> {
        match self.peek() {
            Tok::Ident(s) if s == "netcdf" => {
                self.next();
            }
            _ => return Err(self.syntax("\"netcdf\"")),
        }
        // The dataset name may be a path-like or dotted name; ncgen takes any name here.
        let name = match self.next().tok {
            Tok::Ident(s) | Tok::Path(s) => s,
            _ => return Err(self.err(self.prev, "syntax error: expected the dataset name")),
        };
        self.expect(&Tok::LBrace)?;
        Ok(name)
    }

    /// The declarations of group `root` and of the groups nested in it, up to (not
    /// including) the root's closing brace. The nesting is kept on an explicit stack, not
    /// the thread's: a text of groups nested a hundred thousand deep is a few megabytes.
    fn group_body(&mut self, root: GroupId) -> Result<()> {
        /// Where in a group body the text is. ncgen's grammar has a group's attributes, then
        /// its sections, each at most once and in this order, then its subgroups (each
        /// followed by attributes of the group): the order of the variants.
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
        enum Mode {
            Start,
            Types,
            Dims,
            Vars,
            Data,
            Groups,
        }
        /// A group whose declarations are being read.
        struct Open {
            g: GroupId,
            mode: Mode,
        }
        let mut open = vec![Open {
            g: root,
            mode: Mode::Start,
        }];
        loop {
            let pos = self.pos();
            let top = open.len() - 1;
            let (g, mode) = (open[top].g, open[top].mode);
            match self.peek().clone() {
                Tok::RBrace | Tok::Eof if open.len() == 1 => return Ok(()),
                Tok::RBrace | Tok::Eof => {
                    // The end of a subgroup.
                    self.expect(&Tok::RBrace)?;
                    open.pop();
                }
                Tok::Section(s) => {
                    self.next();
                    let new = match s {
                        "types" => Mode::Types,
                        "dimensions" => Mode::Dims,
                        "variables" => Mode::Vars,
                        "data" => Mode::Data,
                        _ => {
                            open[top].mode = Mode::Groups;
                            let sub = self.subgroup(g)?;
                            open.push(Open {
                                g: sub,
                                mode: Mode::Start,
                            });
                            continue;
                        }
                    };
                    if mode == Mode::Groups {
                        return Err(self.err(pos, "syntax error: declarations after a subgroup"));
                    }
                    if new == mode {
                        return Err(
                            self.err(pos, format!("syntax error: a second \"{s}:\" section"))
                        );
                    }
                    if new < mode {
                        return Err(self.err(
                            pos,
                            format!(
                                "syntax error: \"{s}:\" after the sections it comes before \
                                 (a group's sections come in the order types, dimensions, \
                                 variables, data)"
                            ),
                        ));
                    }
                    open[top].mode = new;
                }
                _ if mode == Mode::Data && self.attribute_ahead() => {
                    return Err(self.attribute_in_data(pos));
                }
                // A `types:` section may hold attributes, and user-defined types, which are
                // not supported.
                _ if mode == Mode::Types && !self.attribute_ahead() => {
                    return Err(self.user_types(pos))
                }
                Tok::Colon => self.attribute(g, None)?,
                Tok::Ident(word) => {
                    let next = self.peek_at(1).clone();
                    if matches!(word.as_str(), "enum" | "compound" | "opaque")
                        || (NcType::from_cdl_name(&word).is_some() && next == Tok::LParen)
                    {
                        return Err(self.user_types(pos));
                    }
                    if let Some(t) = NcType::from_cdl_name(&word) {
                        if mode == Mode::Data || mode == Mode::Dims {
                            // A dimension or variable named like a type keeps its meaning
                            // as a name in these sections.
                            if next == Tok::Eq {
                                self.named_entry(g, mode == Mode::Dims)?;
                                continue;
                            }
                        }
                        if next == Tok::Colon && self.ds.find_var_in(g, &word).is_some() {
                            // `byte:units = ...` where `byte` is a variable's name.
                            self.attribute(g, None)?;
                            continue;
                        }
                        self.next();
                        match self.peek_at(0).clone() {
                            Tok::Ident(_) | Tok::Path(_)
                                if mode == Mode::Data && self.peek_at(1) == &Tok::Colon =>
                            {
                                return Err(self.attribute_in_data(pos));
                            }
                            Tok::Colon => self.attribute(g, Some(t))?,
                            Tok::Ident(_) | Tok::Path(_) if self.peek_at(1) == &Tok::Colon => {
                                self.attribute(g, Some(t))?
                            }
                            _ => {
                                if mode != Mode::Vars {
                                    return Err(self
                                        .err(pos, "variable declaration outside \"variables:\""));
                                }
                                self.var_decl(g, t)?
                            }
                        }
                    } else if next == Tok::Colon {
                        self.attribute(g, None)?;
                    } else if next == Tok::Eq && (mode == Mode::Dims || mode == Mode::Data) {
                        self.named_entry(g, mode == Mode::Dims)?;
                    } else if matches!(next, Tok::Ident(_)) && mode == Mode::Vars {
                        return Err(self.err(
                            pos,
                            format!("unknown type {word:?}: user-defined types are not supported"),
                        ));
                    } else {
                        return Err(self.syntax("a declaration"));
                    }
                }
                Tok::Path(_) if mode == Mode::Data => self.named_entry(g, false)?,
                _ => return Err(self.syntax("a declaration")),
            }
        }
    }

    /// Whether the next two tokens start an attribute: `:name`, `var:name` or `type :name`
    /// (`type var:name` shows itself once the type is read).
    fn attribute_ahead(&self) -> bool {
        let typed = matches!(self.peek(), Tok::Ident(w) if NcType::from_cdl_name(w).is_some());
        let target = matches!(self.peek(), Tok::Ident(_) | Tok::Path(_));
        self.peek() == &Tok::Colon || ((typed || target) && self.peek_at(1) == &Tok::Colon)
    }

    /// The error for an attribute in a `data:` section, which ncgen's grammar does not
    /// have: there `:c = 1 ;` is most likely the data of `c` mistyped, not an attribute.
    fn attribute_in_data(&self, pos: Pos) -> Error {
        self.err(
            pos,
            "syntax error: an attribute in the \"data:\" section (attributes go before it; \
             a variable's data is \"name = values ;\")",
        )
    }

    fn named_entry(&mut self, g: GroupId, dims: bool) -> Result<()> {
        if dims {
            self.dim_decls(g)
        } else {
            self.data_decl(g)
        }
    }

    /// The start of a subgroup of `parent`, up to its opening brace: the new group.
    fn subgroup(&mut self, parent: GroupId) -> Result<GroupId> {
        let (name, pos) = self.name_token("group")?;
        if self.ds.find_group_in(parent, &name).is_some() {
            return Err(self.err(pos, format!("group {name:?} is defined twice")));
        }
        if self.ds.find_var_in(parent, &name).is_some() {
            return Err(self.err(pos, format!("group {name:?} has the name of a variable")));
        }
        self.expect(&Tok::LBrace)?;
        Ok(self.ds.add_group(parent, &name))
    }

    /// `d = 5, e = UNLIMITED ;`
    fn dim_decls(&mut self, g: GroupId) -> Result<()> {
        loop {
            let (name, pos) = self.name_token("dimension")?;
            self.expect(&Tok::Eq)?;
            let lpos = self.pos();
            let (len, unlimited) = match self.next().tok {
                Tok::Ident(s) if s.eq_ignore_ascii_case("unlimited") => (0, true),
                // ncgen's grammar takes decimal (or octal) integers here, unsuffixed or with
                // `L`, `LL` or `U`: not `2.0`, `0x10` or `2s`. netCDF's NC_UNLIMITED is 0:
                // ncgen defines `d = 0` as unlimited.
                Tok::Num(Number::Int {
                    value,
                    suffix: suffix @ (None | Some(NcType::Int | NcType::Int64 | NcType::UInt)),
                    hex: false,
                }) if (0..=u64::MAX as i128).contains(&value) => {
                    // A suffix's type must hold the length, as ncgen has it ("Value out of
                    // range" for `4294967296u`), and a signed suffix makes the values above
                    // its signed range negative (`4294967295L` is the int -1, as in data):
                    // no length either.
                    let length = suffixed_int(value, suffix, NcType::Int64);
                    if length != Some(value) {
                        let tag = suffix.map_or("", |t| t.cdl_name());
                        return Err(self.err(
                            lpos,
                            format!(
                                "dimension length {value} out of range for its suffix's type {tag}"
                            ),
                        ));
                    }
                    (value as u64, value == 0)
                }
                _ => {
                    return Err(self.err(
                        lpos,
                        "dimension length must be a positive decimal integer, or UNLIMITED \
                         (or 0)",
                    ))
                }
            };
            if self.ds.find_dim_in(g, &name).is_some() {
                return Err(self.err(pos, format!("dimension {name:?} is defined twice")));
            }
            self.ds.add_dim(g, &name, len, unlimited);
            match self.next().tok {
                Tok::Comma => continue,
                Tok::Semi => return Ok(()),
                _ => return Err(self.err(self.prev, "syntax error: expected \",\" or \";\"")),
            }
        }
    }

    /// `type v(d1, d2), w ;` (the type already consumed).
    fn var_decl(&mut self, g: GroupId, t: NcType) -> Result<()> {
        loop {
            let (name, pos) = self.name_token("variable")?;
            let mut dims = Vec::new();
            if self.peek() == &Tok::LParen {
                self.next();
                loop {
                    let dpos = self.pos();
                    let (d, text) = match self.next().tok {
                        Tok::Ident(n) => (self.ds.find_dim_visible(g, &n), n),
                        Tok::Path(p) => (self.ds.find_dim(&p), p),
                        Tok::Star => return Err(self.user_types(dpos)),
                        _ => return Err(self.err(dpos, "syntax error: expected a dimension name")),
                    };
                    let Some(d) = d else {
                        return Err(self.err(dpos, format!("unknown dimension {text:?}")));
                    };
                    dims.push(d);
                    match self.next().tok {
                        Tok::Comma => continue,
                        Tok::RParen => break,
                        _ => {
                            return Err(self.err(self.prev, "syntax error: expected \",\" or \")\""))
                        }
                    }
                }
            }
            if self.ds.find_var_in(g, &name).is_some() {
                return Err(self.err(pos, format!("variable {name:?} is defined twice")));
            }
            // Unlimited dimensions count as 1 here; the data section checks their lengths.
            let lens: Vec<u64> = dims.iter().map(|d| self.ds.dim(*d).len.max(1)).collect();
            if element_count(&lens).is_none() {
                return Err(self.err(
                    pos,
                    format!("variable {name:?}: its dimensions {lens:?} overflow 64-bit sizes"),
                ));
            }
            if self.ds.find_group_in(g, &name).is_some() {
                return Err(self.err(pos, format!("variable {name:?} has the name of a group")));
            }
            self.ds.add_var(Variable {
                name,
                group: g,
                nctype: t,
                dims,
                string_width: if t == NcType::String { 1 } else { 0 },
                attrs: Vec::new(),
                storage: VarStorage::default(),
            });
            self.extras.push(VarExtras::default());
            match self.next().tok {
                Tok::Comma => continue,
                Tok::Semi => return Ok(()),
                _ => return Err(self.err(self.prev, "syntax error: expected \",\" or \";\"")),
            }
        }
    }

    /// `[type] [var]:name = values ;` (a type keyword already consumed when `typed` is set).
    fn attribute(&mut self, g: GroupId, typed: Option<NcType>) -> Result<()> {
        let target = match self.peek().clone() {
            Tok::Colon => None,
            Tok::Ident(v) => {
                let vpos = self.next().pos;
                match self.ds.find_var_in(g, &v) {
                    Some(id) => Some(id),
                    None => {
                        return Err(self.err(vpos, format!("attribute of undefined variable {v:?}")))
                    }
                }
            }
            Tok::Path(p) => {
                let vpos = self.next().pos;
                match self.ds.find_var(&p) {
                    Some(id) => Some(id),
                    None => {
                        return Err(self.err(vpos, format!("attribute of undefined variable {p:?}")))
                    }
                }
            }
            _ => return Err(self.syntax("an attribute")),
        };
        self.expect(&Tok::Colon)?;
        let (name, npos) = match self.peek().clone() {
            Tok::Ident(s) => (s, self.next().pos),
            Tok::Section(s) => (s.to_string(), self.next().pos),
            _ => return Err(self.syntax("an attribute name")),
        };
        crate::model::check_name(&name)
            .map_err(|r| self.err(npos, format!("illegal attribute name {name:?}: {r}")))?;
        self.expect(&Tok::Eq)?;
        let mut values = Vec::new();
        loop {
            let pos = self.pos();
            let c = match self.next().tok.into_value() {
                Tok::Num(n) => Const::Num(n),
                Tok::Str(s) => Const::Str(s),
                Tok::Char(c) => Const::Char(c),
                Tok::Ident(n) if is_nil(&n) => Const::Nil,
                Tok::Fill => {
                    return Err(self.err(
                        pos,
                        format!("attribute {name:?} may not contain fill values (\"_\")"),
                    ))
                }
                Tok::LBrace => return Err(self.user_types(pos)),
                _ => return Err(self.err(pos, "syntax error: expected an attribute value")),
            };
            values.push((c, pos));
            match self.next().tok {
                Tok::Comma => continue,
                Tok::Semi => break,
                _ => return Err(self.err(self.prev, "syntax error: expected \",\" or \";\"")),
            }
        }

        if target.is_none() && g == Dataset::ROOT && GLOBAL_SPECIALS.contains(&name.as_str()) {
            return self.global_special(&name, &values, npos);
        }
        if let Some(v) = target {
            if SPECIAL_VAR_ATTRS.contains(&name.as_str()) {
                return self.var_special(v, &name, &values, npos);
            }
        }
        let value = if let (Some(v), "_FillValue") = (target, name.as_str()) {
            let vt = self.ds.var(v).nctype;
            if let Some(t) = typed {
                if t != vt {
                    return Err(self.err(
                        npos,
                        format!(
                            "type mismatch: _FillValue of type {} for a {} variable",
                            t.cdl_name(),
                            vt.cdl_name()
                        ),
                    ));
                }
            }
            let mut value = self.typed_attr(&values, vt)?;
            // ncdump writes a NUL fill character as "".
            if value == AttrValue::Char(Vec::new()) {
                value = AttrValue::Char(vec![0]);
            }
            if value.len() != 1 {
                return Err(self.err(npos, "_FillValue must have exactly one value"));
            }
            value
        } else {
            match typed {
                Some(t) => self.typed_attr(&values, t)?,
                None => self.untyped_attr(&values)?,
            }
        };
        let attrs = match target {
            Some(v) => &mut self.ds.vars[v.0].attrs,
            None => &mut self.ds.groups[g.0].attrs,
        };
        // An attribute given again takes the new value in its first place, as ncgen (writing
        // each in turn) leaves it.
        match attrs.iter_mut().find(|a| a.name == name) {
            Some(earlier) => earlier.value = value,
            None => attrs.push(Attribute { name, value }),
        }
        Ok(())
    }

    fn global_special(&mut self, name: &str, values: &[(Const, Pos)], pos: Pos) -> Result<()> {
        match name {
            "_SuperblockVersion" => match values {
                [(Const::Num(Number::Int { value, .. }), _)] => {
                    self.globals.superblock_version = Some(*value as i64)
                }
                _ => return Err(self.err(pos, "_SuperblockVersion must be one integer")),
            },
            "_IsNetcdf4" => {
                let flag = match values {
                    [(Const::Num(Number::Int { value, .. }), _)] => Some(*value != 0),
                    _ => match join_text(values).as_deref() {
                        Some("true" | "1") => Some(true),
                        Some("false" | "0") => Some(false),
                        _ => None,
                    },
                };
                let Some(flag) = flag else {
                    return Err(self.err(
                        pos,
                        "_IsNetcdf4 must be an integer or one of \"true\", \"false\", \"1\", \"0\"",
                    ));
                };
                self.globals.is_netcdf4 = Some(flag);
            }
            _ => {
                let Some(t) = join_text(values) else {
                    return Err(self.err(pos, format!("type mismatch: {name} must be a string")));
                };
                if name == "_Format" {
                    if !FORMAT_NAMES.contains(&t.as_str()) {
                        return Err(self.err(
                            pos,
                            format!(
                                "_Format: {t:?} is not a format name ncgen knows (one of {})",
                                FORMAT_NAMES.join(", ")
                            ),
                        ));
                    }
                    self.globals.format = Some(t);
                } else {
                    self.globals.nc_properties = Some(t);
                }
            }
        }
        Ok(())
    }

    fn var_special(
        &mut self,
        v: VarId,
        name: &str,
        values: &[(Const, Pos)],
        pos: Pos,
    ) -> Result<()> {
        let text = join_text(values);
        let ints: Option<Vec<i128>> = values
            .iter()
            .map(|(c, _)| match c {
                Const::Num(Number::Int { value, .. }) => Some(*value),
                Const::Num(Number::Float { value, .. }) if value.fract() == 0.0 => {
                    Some(*value as i128)
                }
                _ => None,
            })
            .collect();
        let flag = |s: &Option<String>, ints: &Option<Vec<i128>>| -> Option<bool> {
            if let Some(s) = s {
                match s.to_ascii_lowercase().as_str() {
                    "true" | "1" => return Some(true),
                    "false" | "0" => return Some(false),
                    _ => return None,
                }
            }
            match ints.as_deref() {
                Some([i]) => Some(*i != 0),
                _ => None,
            }
        };
        let err_at = self.err(pos, String::new());
        let bad = |what: &str| match &err_at {
            Error::Cdl {
                file, line, column, ..
            } => Error::Cdl {
                file: file.clone(),
                line: *line,
                column: *column,
                reason: format!("{name}: expected {what}"),
            },
            other => Error::Invalid(other.to_string()),
        };
        let ndims = self.ds.var(v).dims.len();
        let sp = &mut self.extras[v.0].special;
        match name {
            "_ChunkSizes" => {
                let Some(mut ints) = ints else {
                    return Err(bad("integers from 0"));
                };
                if ndims == 0 {
                    // As netcdf-c, which refuses to chunk a scalar ("Invalid argument").
                    return Err(self.err(pos, format!("{name}: a scalar has no chunks")));
                }
                // As ncgen, which hands netcdf-c as many lengths as the rank: a missing one
                // is 0, extra ones go unread, and netcdf-c picks its default for a 0.
                if ints.len() > ndims {
                    self.warnings.push(format!(
                        "{}:{}:{}: _ChunkSizes of {} has {} lengths for {ndims} dimension(s): \
                         the last {} ignored, as ncgen ignores them",
                        self.file,
                        pos.line,
                        pos.column,
                        crate::error::quoted(&self.ds.var_fqn(v)),
                        ints.len(),
                        ints.len() - ndims,
                    ));
                }
                // Only the lengths netcdf-c reads are checked: ncgen takes `0, -2` on one
                // dimension.
                ints.resize(ndims, 0);
                if !ints.iter().all(|x| (0..=u32::MAX as i128).contains(x)) {
                    return Err(bad("integers from 0"));
                }
                // A chunk longer than its fixed dimension is kept, though ncgen refuses it
                // ("Bad chunk sizes"): Zarr allows it (zarr-python writes such arrays, a copy
                // of a record variable to pure Zarr makes one), netcdf-c reads it, and `dump
                // -s` prints it, whose output must make the same storage again.
                sp.chunk_sizes = Some(ints.iter().map(|x| *x as u64).collect());
            }
            "_DeflateLevel" => match ints.as_deref() {
                Some([l]) if (0..=9).contains(l) => sp.deflate_level = Some(*l as u32),
                // ncgen compresses only with a level of 0 or more: a negative one is none.
                Some([l]) if *l < 0 => sp.deflate_level = Some(0),
                _ => return Err(bad("one integer from 0 to 9, or a negative one for none")),
            },
            "_Shuffle" => {
                sp.shuffle = Some(flag(&text, &ints).ok_or_else(|| bad("\"true\" or \"false\""))?)
            }
            "_Fletcher32" => {
                sp.fletcher32 =
                    Some(flag(&text, &ints).ok_or_else(|| bad("\"true\" or \"false\""))?)
            }
            "_NoFill" => {
                sp.no_fill = Some(flag(&text, &ints).ok_or_else(|| bad("\"true\" or \"false\""))?)
            }
            "_Endianness" => {
                sp.endianness = Some(
                    match text.as_deref().map(str::to_ascii_lowercase).as_deref() {
                        Some("little") => Endianness::Little,
                        Some("big") => Endianness::Big,
                        // ncgen refuses "native" ("illegal value").
                        _ => return Err(bad("\"little\" or \"big\"")),
                    },
                )
            }
            "_Storage" => {
                sp.storage = Some(
                    match text.as_deref().map(str::to_ascii_lowercase).as_deref() {
                        Some("contiguous") => StorageLayout::Contiguous,
                        Some("chunked") => StorageLayout::Chunked,
                        Some("compact") => StorageLayout::Compact,
                        _ => return Err(bad("\"contiguous\", \"chunked\" or \"compact\"")),
                    },
                );
                // The last of `_ChunkSizes` and a layout without chunks wins, as in ncgen:
                // `_ChunkSizes = 5` then `_Storage = "contiguous"` is one whole-array chunk.
                if sp.storage != Some(StorageLayout::Chunked) {
                    sp.chunk_sizes = None;
                }
            }
            "_Filter" => sp.filter = Some(text.ok_or_else(|| bad("a string"))?),
            "_Codecs" => sp.codecs = Some(text.ok_or_else(|| bad("a string"))?),
            _ => match ints.as_deref() {
                Some([n]) => sp.quantize = Some((name.to_string(), *n as i64)),
                _ => return Err(bad("one integer")),
            },
        }
        Ok(())
    }

    /// Converts attribute constants to type `t`.
    fn typed_attr(&self, values: &[(Const, Pos)], t: NcType) -> Result<AttrValue> {
        match t {
            NcType::Char => {
                let mut out = Vec::new();
                for (c, pos) in values {
                    match c {
                        Const::Str(s) => out.extend_from_slice(s),
                        Const::Char(b) => out.push(*b),
                        Const::Num(_) => {
                            return Err(
                                self.err(*pos, "type mismatch: a number in a char attribute")
                            )
                        }
                        Const::Nil => return Err(self.err(*pos, NIL_NOT_STRING)),
                    }
                }
                Ok(AttrValue::Char(out))
            }
            NcType::String => {
                let mut out = Vec::new();
                for (c, pos) in values {
                    out.push(self.to_string_value(c, *pos)?);
                }
                Ok(AttrValue::Str(out))
            }
            _ => {
                let mut bytes = Vec::new();
                for (c, pos) in values {
                    self.to_native(c, t, *pos, &mut bytes)?;
                }
                Ok(attr_from_native(t, &bytes))
            }
        }
    }

    fn untyped_attr(&self, values: &[(Const, Pos)]) -> Result<AttrValue> {
        // ncgen refuses it too ("Non-simple list of values for untyped attribute").
        if let Some((_, pos)) = values.iter().find(|(c, _)| *c == Const::Nil) {
            return Err(self.err(
                *pos,
                "an untyped attribute cannot hold NIL: declare it as `string`",
            ));
        }
        let any_str = values.iter().any(|(c, _)| matches!(c, Const::Str(_)));
        let all_chars = values.iter().all(|(c, _)| matches!(c, Const::Char(_)));
        if any_str || all_chars {
            if let Some((_, pos)) = values.iter().find(|(c, _)| matches!(c, Const::Num(_))) {
                return Err(self.err(*pos, "type mismatch: numbers and strings in one attribute"));
            }
            if all_chars {
                return self.typed_attr(values, NcType::Byte);
            }
            return self.typed_attr(values, NcType::Char);
        }
        let mut float = None::<bool>;
        let mut ints = Vec::new();
        for (c, pos) in values {
            match c {
                Const::Num(Number::Float { single, .. }) => {
                    float = Some(float.unwrap_or(true) && *single);
                }
                Const::Num(Number::Int { value, suffix, .. }) => {
                    ints.push(suffix.unwrap_or_else(|| natural_int_type(*value)));
                }
                Const::Char(_) => ints.push(NcType::Byte),
                Const::Str(_) | Const::Nil => {
                    return Err(
                        self.err(*pos, "type mismatch: numbers and strings in one attribute")
                    )
                }
            }
        }
        let t = match float {
            Some(true) => NcType::Float,
            Some(false) => NcType::Double,
            None => {
                // ncgen's type where it holds every value; where it does not, ncgen would
                // wrap them (`3000000000, 1` as int), so the narrowest type that holds them.
                let t = ncgen_int_type(&ints);
                let fits = values.iter().all(|(c, _)| match c {
                    Const::Num(Number::Int { value, suffix, .. }) => {
                        suffixed_int(*value, *suffix, t).is_some_and(|v| in_range(v, t))
                    }
                    _ => true,
                });
                if fits {
                    t
                } else {
                    unify_ints(&ints)
                }
            }
        };
        self.typed_attr(values, t)
    }

    fn to_string_value(&self, c: &Const, pos: Pos) -> Result<String> {
        let bytes = match c {
            Const::Str(s) => s.clone(),
            Const::Char(b) => vec![*b],
            Const::Num(_) => return Err(self.err(pos, "type mismatch: a number for a string")),
            // NCZarr has no null string: netcdf-c stores one as "" (in data and in attribute
            // JSON alike), and reads it back as "".
            Const::Nil => Vec::new(),
        };
        String::from_utf8(bytes).map_err(|_| self.err(pos, "string constant is not valid UTF-8"))
    }

    /// Appends constant `c` converted to numeric type `t` in native little-endian form.
    fn to_native(&self, c: &Const, t: NcType, pos: Pos, out: &mut Vec<u8>) -> Result<()> {
        let mismatch = |what: &str| {
            self.err(
                pos,
                format!("type mismatch: {what} for type {}", t.cdl_name()),
            )
        };
        let int_constant = |value: i128, suffix: Option<NcType>| {
            suffixed_int(value, suffix, t).ok_or_else(|| {
                let named = suffix.map_or(t, |s| s);
                self.err(
                    pos,
                    format!("value {value} out of range for type {}", named.cdl_name()),
                )
            })
        };
        if matches!(t, NcType::Float | NcType::Double) {
            let v = match c {
                Const::Num(Number::Int { value, suffix, .. }) => {
                    int_constant(*value, *suffix)? as f64
                }
                Const::Num(Number::Float { value, .. }) => *value,
                // ncgen stores a character's code, as it does for the integer types.
                Const::Char(b) => f64::from(*b),
                Const::Str(_) => return Err(mismatch("a string")),
                Const::Nil => return Err(self.err(pos, NIL_NOT_STRING)),
            };
            if t == NcType::Float {
                // Rounded to the nearest float, as ncgen does: FLT_MAX written with more
                // digits (3.40282347e+38f) is FLT_MAX, and beyond it is an infinity.
                out.extend_from_slice(&(v as f32).to_le_bytes());
            } else {
                out.extend_from_slice(&v.to_le_bytes());
            }
            return Ok(());
        }
        if t == NcType::Char {
            match c {
                Const::Char(b) => out.push(*b),
                Const::Nil => return Err(self.err(pos, NIL_NOT_STRING)),
                _ => return Err(mismatch("a number")),
            }
            return Ok(());
        }
        let v: i128 = match c {
            Const::Num(Number::Int { value, suffix, .. }) => int_constant(*value, *suffix)?,
            // Truncated toward zero, as ncgen converts (a C cast): `1.7` is 1, `-2.5` is -2.
            Const::Num(Number::Float { value, .. }) => {
                if !value.is_finite() {
                    return Err(mismatch(&format!("the value {value}")));
                }
                value.trunc() as i128
            }
            Const::Char(b) => *b as i128,
            Const::Str(_) => return Err(mismatch("a string")),
            Const::Nil => return Err(self.err(pos, NIL_NOT_STRING)),
        };
        if !in_range(v, t) {
            return Err(self.err(
                pos,
                format!("value {v} out of range for type {}", t.cdl_name()),
            ));
        }
        let size = t.size();
        out.extend_from_slice(&v.to_le_bytes()[..size]);
        Ok(())
    }

    /// `v = values ;` in a data section: its values are converted as they are read.
    fn data_decl(&mut self, g: GroupId) -> Result<()> {
        let pos = self.pos();
        let var = match self.next().tok {
            Tok::Ident(n) => self.ds.find_var_in(g, &n).ok_or_else(|| n.clone()),
            Tok::Path(p) => self.ds.find_var(&p).ok_or_else(|| p.clone()),
            _ => return Err(self.err(pos, "syntax error: expected a variable name")),
        };
        let var = var.map_err(|n| self.err(pos, format!("data for undefined variable {n:?}")))?;
        self.expect(&Tok::Eq)?;
        let target = DataTarget {
            nctype: self.ds.var(var).nctype,
            dims: self.ds.var(var).dims.clone(),
        };
        let list = self.data_list(0, self.list_level(&target, 0), &target)?;
        // Data given again replaces the earlier values whole, as in ncgen.
        self.data.retain(|d| d.var != var);
        self.data.push(DataSection { var, pos, list });
        Ok(())
    }

    /// How a data list of `target` whose values start at dimension `i` is read: values
    /// along the dimensions up to the last, unless an unlimited one comes after `i`.
    fn list_level(&self, target: &DataTarget, i: usize) -> ListLevel {
        let k = next_unlimited(&self.ds, &target.dims, i);
        if k < target.dims.len() {
            return ListLevel::Braces(k);
        }
        ListLevel::Values(match target.nctype {
            NcType::Char if target.dims.is_empty() => ValueKind::Chars { row: 1 },
            NcType::Char => ValueKind::Chars {
                row: char_row(&self.ds, &target.dims, i),
            },
            NcType::String => ValueKind::Strings,
            t => ValueKind::Fixed(t.size()),
        })
    }

    /// A comma-separated list of data items ending at `;` (top level, `depth` 0) or `}` (not
    /// consumed; inside `depth` braces), read as `level` says. Braces nested deeper than a
    /// variable can have dimensions are refused: the lists are read recursively.
    fn data_list(
        &mut self,
        depth: usize,
        level: ListLevel,
        target: &DataTarget,
    ) -> Result<DataList> {
        let top = depth == 0;
        let mut list = DataList {
            items: match level {
                ListLevel::Values(kind) => DataItems::Values(ValueList::new(kind)),
                ListLevel::Braces(_) | ListLevel::Skipped => DataItems::Braces(Vec::new()),
            },
            misplaced: None,
            last: Pos::default(),
        };
        let mut count = 0u64;
        loop {
            let pos = self.pos();
            match self.next().tok.into_value() {
                tok if is_data_value(&tok) => match &mut list.items {
                    DataItems::Values(values) => self.push_value(values, tok, pos, target),
                    DataItems::Braces(_) => {
                        if matches!(level, ListLevel::Braces(_)) {
                            list.misplaced.get_or_insert(pos);
                        }
                    }
                },
                Tok::LBrace if depth == MAX_DATA_BRACES => {
                    return Err(self.err(
                        pos,
                        format!(
                            "data braces nested more than {MAX_DATA_BRACES} deep (the most \
                             dimensions a netCDF variable can have)"
                        ),
                    ))
                }
                Tok::LBrace => {
                    let inner = match level {
                        ListLevel::Braces(k) if list.misplaced.is_none() => {
                            self.list_level(target, k)
                        }
                        ListLevel::Values(_) => {
                            list.misplaced.get_or_insert(pos);
                            ListLevel::Skipped
                        }
                        _ => ListLevel::Skipped,
                    };
                    let child = self.data_list(depth + 1, inner, target)?;
                    self.expect(&Tok::RBrace)?;
                    if let (false, DataItems::Braces(children)) =
                        (matches!(inner, ListLevel::Skipped), &mut list.items)
                    {
                        children.push(child);
                    }
                }
                Tok::Semi if top && count == 0 => {
                    list.finish();
                    return Ok(list);
                }
                _ => return Err(self.err(pos, "syntax error: expected a data value")),
            }
            list.last = pos;
            count += 1;
            match self.peek() {
                Tok::Comma => {
                    self.next();
                }
                Tok::Semi if top => {
                    self.next();
                    list.finish();
                    return Ok(list);
                }
                Tok::RBrace if !top => {
                    list.finish();
                    return Ok(list);
                }
                _ => {
                    return Err(self.syntax(if top {
                        "\",\" or \";\""
                    } else {
                        "\",\" or \"}\""
                    }))
                }
            }
        }
    }

    /// Appends one value (or `_`) to a list of values of `target`'s type, converted; a value
    /// that does not convert is kept as the list's error, reported if the value is stored.
    fn push_value(&self, values: &mut ValueList, tok: Tok, pos: Pos, target: &DataTarget) {
        let t = target.nctype;
        let c = match tok {
            Tok::Num(n) => Const::Num(n),
            Tok::Str(s) => Const::Str(s),
            Tok::Char(b) => Const::Char(b),
            Tok::Ident(_) => Const::Nil,
            _ if t == NcType::Char => return values.char_fill(),
            _ => return values.push_fill(1),
        };
        match t {
            NcType::Char => match (char_constant(&c), &c) {
                (Some(b), _) => values.char_constant(b),
                // A scalar's `""` is the NUL, as ncgen stores it and ncdump prints a scalar
                // holding a NUL (whatever its fill), so that such a dump reads back as it was.
                (None, Const::Str(s)) if s.is_empty() && target.dims.is_empty() => {
                    values.char_constant(0)
                }
                (None, Const::Str(s)) => values.char_string(s),
                (None, Const::Nil) => values.push_error(self.err(pos, NIL_NOT_STRING)),
                // Any other number is no character.
                (None, _) => values.push_error(self.err(
                    pos,
                    format!("type mismatch: a number for type {}", t.cdl_name()),
                )),
            },
            NcType::String => match self.to_string_value(&c, pos) {
                Ok(s) => values.push_string(s.as_bytes()),
                Err(e) => values.push_error(e),
            },
            _ => match self.to_native(&c, t, pos, values.bytes_mut()) {
                Ok(()) => values.value_appended(),
                Err(e) => values.push_error(e),
            },
        }
    }
}

impl DataList {
    /// Ends the list (see [`ValueList::finish`]).
    fn finish(&mut self) {
        if let DataItems::Values(values) = &mut self.items {
            values.finish();
        }
    }
}

/// The characters of char data that its variable does not hold: how many, and the first
/// few for the warning.
#[derive(Debug, Default)]
struct DroppedChars {
    count: u64,
    sample: Vec<u8>,
}

impl DroppedChars {
    /// How many characters of the warning show what was dropped.
    const SAMPLE_LEN: usize = 40;

    /// Counts the characters of `values` from element `start` on.
    fn count_from(&mut self, values: &ValueList, start: u64) {
        self.count += values.chars_from(start, &mut self.sample, Self::SAMPLE_LEN);
    }

    /// Counts every character of `list`, braces included.
    fn count_all(&mut self, list: &DataList) {
        match &list.items {
            DataItems::Values(values) => self.count_from(values, 0),
            DataItems::Braces(children) => children.iter().for_each(|c| self.count_all(c)),
        }
    }
}

/// Whether a token of a data list is a value: a constant, `_` or `NIL`.
fn is_data_value(tok: &Tok) -> bool {
    match tok {
        Tok::Num(_) | Tok::Str(_) | Tok::Char(_) | Tok::Fill => true,
        Tok::Ident(name) => is_nil(name),
        _ => false,
    }
}

/// Index of the first unlimited dimension after `i`, or `dims.len()`.
fn next_unlimited(ds: &Dataset, dims: &[DimId], i: usize) -> usize {
    (i + 1..dims.len())
        .find(|j| ds.dim(dims[*j]).unlimited)
        .unwrap_or(dims.len())
}

/// The length strings are padded to a multiple of for a char variable whose values start
/// at dimension `i`: the last dimension's length, or 1 (no padding: strings are
/// concatenated) when the values run along the last dimension alone. (Values never start
/// before an unlimited last dimension, whose length the data sets.)
fn char_row(ds: &Dataset, dims: &[DimId], i: usize) -> u64 {
    let last = dims.len() - 1;
    if last == i {
        1
    } else {
        ds.dim(dims[last]).len.max(1)
    }
}

impl Declared<'_> {
    fn err(&self, pos: Pos, reason: impl Into<String>) -> Error {
        pos.error(self.file, reason)
    }

    /// Sizes the unlimited dimensions from the data, then builds every variable's values;
    /// the rows of one variable may take `row_budget` bytes.
    fn finish(mut self, row_budget: u64) -> Result<ParsedCdl> {
        let data = std::mem::take(&mut self.data);
        let mut ext: HashMap<DimId, u64> = HashMap::new();
        let mut cut = Vec::new();
        for section in &data {
            let var = self.ds.var(section.var);
            let dims = var.dims.clone();
            let is_char = var.nctype == NcType::Char;
            let mut dropped = DroppedChars::default();
            if dims.is_empty() {
                if let DataItems::Values(values) = &section.list.items {
                    self.refuse_braces(&section.list)?;
                    if values.len() > 1 && !is_char {
                        return Err(self.err(section.pos, "too many values for a scalar variable"));
                    }
                    if is_char {
                        dropped.count_from(values, 1);
                    }
                }
            } else {
                self.measure(&dims, 0, &section.list, is_char, &mut ext, &mut dropped)?;
            }
            if dropped.count > 0 {
                cut.push((section, dropped));
            }
        }
        for (d, n) in &ext {
            self.ds.dims[d.0].len = *n;
        }
        let mut warnings = std::mem::take(&mut self.warnings);
        warnings.extend(
            cut.iter()
                .map(|(section, dropped)| self.dropped_warning(section, dropped)),
        );
        for section in &data {
            let shape = self.ds.var_shape(section.var);
            if element_count(&shape).is_none() {
                return Err(self.err(
                    section.pos,
                    format!(
                        "variable {}: its shape {shape:?} overflows 64-bit sizes",
                        self.ds.var_fqn(section.var)
                    ),
                ));
            }
        }
        for section in data {
            let v = section.var;
            let (bytes, width) = self.materialize(section, row_budget)?;
            if let Some(w) = width {
                self.ds.vars[v.0].string_width = w;
            }
            self.extras[v.0].data = Some(bytes);
        }
        // Every variable's fill value, and the width of strings without data.
        for i in 0..self.ds.vars.len() {
            let fill = self.fill_bytes(VarId(i))?;
            let var = &mut self.ds.vars[i];
            if var.nctype == NcType::String {
                var.string_width = var.string_width.max(fill.len()).max(1);
            }
            let mut fill = fill;
            fill.resize(var.element_size(), 0);
            var.storage.fill_value = Some(fill);
            let shape = self.ds.var_shape(VarId(i));
            self.ds.vars[i].storage.shape = shape;
        }
        Ok(ParsedCdl {
            name: self.name,
            dataset: self.ds,
            vars: self.extras,
            globals: self.globals,
            warnings,
        })
    }

    /// The warning that char data of `section` is cut: the ncgen man page's rule for
    /// character data ("if S is longer than the variable, truncate and generate a warning").
    fn dropped_warning(&self, section: &DataSection, dropped: &DroppedChars) -> String {
        let shape = self.ds.var_shape(section.var);
        let mut text = Vec::new();
        super::fmt::escape_text(&dropped.sample, &mut text);
        let more = match dropped.count > dropped.sample.len() as u64 {
            true => "…",
            false => "",
        };
        format!(
            "{}:{}:{}: char data longer than variable {} ({} characters): dropped {}: \"{}\"{more}",
            self.file,
            section.pos.line,
            section.pos.column,
            crate::error::quoted(&self.ds.var_fqn(section.var)),
            shape.iter().product::<u64>(),
            dropped.count,
            String::from_utf8_lossy(&text),
        )
    }

    /// Refuses braces among values (misplaced in a list of values), as ncgen does
    /// ("Expected primitive found {..}"): braces stand for the records of an unlimited
    /// dimension after the first, and nowhere else.
    fn refuse_braces(&self, list: &DataList) -> Result<()> {
        match list.misplaced {
            Some(brace) => Err(self.err(
                brace,
                "expected a value, found \"{\": braces enclose the values of an unlimited \
                 dimension other than the first, and nothing else",
            )),
            None => Ok(()),
        }
    }

    /// The product of fixed lengths, which declaration checked against overflow.
    fn fixed_product(&self, dims: &[DimId]) -> u64 {
        dims.iter().map(|d| self.ds.dim(*d).len).product()
    }

    /// Pass 1: how many indices of `dims[i]` the list fills; records unlimited extents. Char
    /// data beyond a fixed dimension is counted in `dropped` (and extends no unlimited
    /// dimension); other values beyond it are an error.
    fn measure(
        &self,
        dims: &[DimId],
        i: usize,
        list: &DataList,
        is_char: bool,
        ext: &mut HashMap<DimId, u64>,
        dropped: &mut DroppedChars,
    ) -> Result<()> {
        let k = next_unlimited(&self.ds, dims, i);
        let p = self.fixed_product(&dims[i + 1..k]).max(1);
        let d = self.ds.dim(dims[i]);
        // The first element (or braced list) beyond a fixed dimension.
        let held = match d.unlimited {
            true => u64::MAX,
            false => d.len.saturating_mul(p),
        };
        let m = match &list.items {
            DataItems::Values(values) => {
                self.refuse_braces(list)?;
                if is_char {
                    dropped.count_from(values, held);
                }
                values.len()
            }
            DataItems::Braces(children) => {
                for (e, child) in children.iter().enumerate() {
                    if is_char && e as u64 >= held {
                        dropped.count_all(child);
                    } else {
                        self.measure(dims, k, child, is_char, ext, dropped)?;
                    }
                }
                if let Some(at) = list.misplaced {
                    return Err(self.err(
                        at,
                        format!(
                            "expected \"{{\" around the values of unlimited dimension {:?}",
                            self.ds.dim(dims[k]).name
                        ),
                    ));
                }
                children.len() as u64
            }
        };
        let n = m.div_ceil(p);
        if d.unlimited {
            let e = ext.entry(dims[i]).or_insert(0);
            *e = (*e).max(n);
        } else if n > d.len && !is_char {
            return Err(self.err(
                list.last,
                format!(
                    "too many values for dimension {:?} of length {}",
                    d.name, d.len
                ),
            ));
        }
        Ok(())
    }

    /// Pass 2: the variable's values as native bytes (see [`VarExtras::data`]: the rows its
    /// data section reaches), and for strings the width they are padded to. The rows take
    /// their element size each (for strings, the width): more than `row_budget` bytes is
    /// refused before anything is built.
    fn materialize(
        &self,
        section: DataSection,
        row_budget: u64,
    ) -> Result<(Vec<u8>, Option<usize>)> {
        let v = section.var;
        let var = self.ds.var(v);
        let shape = self.ds.var_shape(v);
        let described = || {
            format!(
                "data of {} elements for {} in CDL",
                shape
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(" x "),
                self.ds.var_fqn(v)
            )
        };
        let Some(total) = element_count(&shape) else {
            return Err(Error::Unsupported(format!("{} (overflows)", described())));
        };
        // The lists of values the data section gives: the element each starts at, how many
        // of its elements the variable holds, and the values.
        let mut lists: Vec<(u64, u64, ValueList)> = Vec::new();
        if var.dims.is_empty() {
            if let DataItems::Values(values) = section.list.items {
                lists.push((0, 1, values));
            }
        } else if total > 0 {
            let mut strides = vec![1u64; shape.len()];
            for j in (0..shape.len().saturating_sub(1)).rev() {
                strides[j] = strides[j + 1] * shape[j + 1];
            }
            self.place(&var.dims, &shape, &strides, 0, 0, section.list, &mut lists);
        }
        // Built: the rows along the first dimension up to the last value given (all of a
        // scalar); the rows after them are left to read as fill, as ncgen leaves them.
        let row = element_count(shape.get(1..).unwrap_or_default())
            .unwrap_or(1)
            .max(1);
        let extent = lists
            .iter()
            .map(|(base, held, values)| match values.values_before(*held) {
                0 => 0,
                n => base + n,
            })
            .max()
            .unwrap_or(0);
        let built = if var.dims.is_empty() {
            1
        } else {
            extent.div_ceil(row).saturating_mul(row).min(total)
        };
        if built > 1 << 31 {
            return Err(Error::Unsupported(format!(
                "{}: its values reach element {extent}, and at most 2^31 are built",
                described()
            )));
        }
        let fill = self.fill_bytes(v)?;
        let width = match var.nctype {
            NcType::String => lists
                .iter()
                .map(|(_, _, values)| values.longest())
                .max()
                .unwrap_or(0)
                .max(fill.len())
                .max(1),
            t => t.size(),
        };
        // Refused with the reason rather than left to fail the allocation (an abort) or to
        // the OOM killer.
        let needed = built.saturating_mul(width as u64);
        if needed > row_budget {
            let whose = match row_budget == memory_budget() {
                true => " (half of this machine's memory)",
                false => "",
            };
            return Err(Error::Unsupported(format!(
                "{}: building the rows its values reach would take {} MiB, more than the {} \
                 MiB one variable's rows may take{whose}; give the values of a smaller \
                 variable, or write them with `put`",
                described(),
                needed >> 20,
                row_budget >> 20
            )));
        }
        for (_, held, values) in &mut lists {
            if let Some(e) = values.take_error_before(*held) {
                return Err(e);
            }
        }
        let mut cell = fill;
        cell.resize(width, 0);
        if var.nctype != NcType::String && lists.len() == 1 && lists[0].0 == 0 {
            if let Some((_, held, values)) = lists.pop() {
                return Ok((values.into_rows(held, built, &cell), None));
            }
        }
        let mut out = cell.repeat(built as usize);
        for (base, held, values) in lists {
            values.write_into(&mut out, base, held, width);
        }
        Ok((out, (var.nctype == NcType::String).then_some(width)))
    }

    /// Collects the lists of values of `list`, whose values start at dimension `i` and
    /// element `base`, with where each starts and how many of its elements the variable holds.
    #[allow(clippy::too_many_arguments)]
    fn place(
        &self,
        dims: &[DimId],
        shape: &[u64],
        strides: &[u64],
        i: usize,
        base: u64,
        list: DataList,
        lists: &mut Vec<(u64, u64, ValueList)>,
    ) {
        let k = next_unlimited(&self.ds, dims, i);
        let p: u64 = shape[i + 1..k].iter().product::<u64>().max(1);
        match list.items {
            // Along the dimensions from `i` to the last, row-major: contiguous from `base`.
            DataItems::Values(values) => lists.push((base, shape[i].saturating_mul(p), values)),
            DataItems::Braces(children) => {
                // Offset of brace number `e` of this level: index e/p on dim i, then e%p
                // spread row-major over dims i+1..k.
                let offset = |e: u64| -> Option<u64> {
                    let idx = e / p;
                    if idx >= shape[i] {
                        return None;
                    }
                    let mut off = base + idx * strides[i];
                    let mut rest = e % p;
                    for j in (i + 1..k).rev() {
                        off += (rest % shape[j]) * strides[j];
                        rest /= shape[j];
                    }
                    Some(off)
                };
                for (e, child) in children.into_iter().enumerate() {
                    if let Some(off) = offset(e as u64) {
                        self.place(dims, shape, strides, k, off, child, lists);
                    }
                }
            }
        }
    }

    /// The fill value of a variable as native bytes (strings: the fill string's bytes).
    fn fill_bytes(&self, v: VarId) -> Result<Vec<u8>> {
        let var = self.ds.var(v);
        let Some(a) = var.attr("_FillValue") else {
            return Ok(var.nctype.default_fill());
        };
        Ok(match &a.value {
            AttrValue::Str(s) => s.first().cloned().unwrap_or_default().into_bytes(),
            AttrValue::Char(c) => vec![c.first().copied().unwrap_or(0)],
            other => attr_to_native(other),
        })
    }
}

/// The values ncgen takes for `_Format` (its `-k` names, case as written), among them the
/// names ncdump prints: `classic`, `64-bit offset`, `64-bit data`, `netCDF-4`,
/// `netCDF-4 classic model`.
const FORMAT_NAMES: [&str; 26] = [
    "classic",
    "nc3",
    "1",
    "64-bit offset",
    "64-bit-offset",
    "nc6",
    "2",
    "netCDF-4",
    "netCDF4",
    "netcdf-4",
    "netcdf4",
    "hdf5",
    "enhanced",
    "nc4",
    "3",
    "netCDF-4 classic model",
    "netCDF-4_classic",
    "enhanced-nc3",
    "nc7",
    "4",
    "64-bit data",
    "64-bit-data",
    "cdf5",
    "cdf-5",
    "nc5",
    "5",
];

/// The text of string/character constants, `None` if a number is among them.
fn join_text(values: &[(Const, Pos)]) -> Option<String> {
    let mut s = Vec::new();
    for (c, _) in values {
        match c {
            Const::Str(b) => s.extend_from_slice(b),
            Const::Char(b) => s.push(*b),
            Const::Num(_) | Const::Nil => return None,
        }
    }
    String::from_utf8(s).ok()
}

fn int_range(t: NcType) -> (i128, i128) {
    match t {
        NcType::Byte => (i8::MIN as i128, i8::MAX as i128),
        NcType::UByte => (0, u8::MAX as i128),
        NcType::Short => (i16::MIN as i128, i16::MAX as i128),
        NcType::UShort => (0, u16::MAX as i128),
        NcType::Int => (i32::MIN as i128, i32::MAX as i128),
        NcType::UInt => (0, u32::MAX as i128),
        NcType::Int64 => (i64::MIN as i128, i64::MAX as i128),
        _ => (0, u64::MAX as i128),
    }
}

/// Whether `v` is a value of integer type `t`. A byte also takes 128 to 255, as in ncgen
/// (CDL's `255b` is the byte -1): the bit pattern of the unsigned value.
fn in_range(v: i128, t: NcType) -> bool {
    let (lo, hi) = match t {
        NcType::Byte => (i8::MIN as i128, u8::MAX as i128),
        t => int_range(t),
    };
    (lo..=hi).contains(&v)
}

/// The value of an integer constant with type suffix `suffix`, converted to type `t`;
/// `None` when it is out of the range of its suffix. As ncgen.l documents it, "values that
/// fit as unsigned are acceptable for the signed tag": `65535s` is the short -1, and
/// `18446744073709551615LL` the int64 -1 (converted to the unsigned type of the same size,
/// the value stays 65535, as in ncgen). Byte constants of 128 to 255 are the exception, as
/// in ncgen: they keep their value (`int x:a = 255b` is 255), and [`in_range`] makes them
/// bytes of that bit pattern.
fn suffixed_int(value: i128, suffix: Option<NcType>, t: NcType) -> Option<i128> {
    let Some(tag) = suffix else {
        return Some(value);
    };
    if tag == NcType::Byte {
        return in_range(value, tag).then_some(value);
    }
    let unsigned = match tag {
        NcType::Byte => NcType::UByte,
        NcType::Short => NcType::UShort,
        NcType::Int => NcType::UInt,
        NcType::Int64 => NcType::UInt64,
        other => other,
    };
    let (lo, signed_hi) = int_range(tag);
    let (_, hi) = int_range(unsigned);
    if !(lo..=hi).contains(&value) {
        return None;
    }
    if value > signed_hi && t != unsigned {
        Some(value - (1i128 << (8 * tag.size())))
    } else {
        Some(value)
    }
}

/// The type ncgen infers for an attribute of integer constants of these types: going
/// through the list, the next constant's type replaces the type so far unless the latter's
/// signed counterpart comes later in netcdf-c's numbering (`1U, 2` is int, `2, 1U` uint,
/// `1ULL, 2` uint64).
fn ncgen_int_type(types: &[NcType]) -> NcType {
    fn signed_rank(t: NcType) -> u8 {
        match t {
            NcType::Byte | NcType::UByte => 1,
            NcType::Short | NcType::UShort => 3,
            NcType::Int | NcType::UInt => 4,
            _ => 10,
        }
    }
    types
        .iter()
        .copied()
        .reduce(|prior, next| {
            if signed_rank(prior) <= signed_rank(next) {
                next
            } else {
                prior
            }
        })
        .unwrap_or(NcType::Int)
}

/// The type ncgen gives an unsuffixed integer literal: `int` if it fits, else `uint` if it
/// fits, else `int64` for a negative value and `uint64` for a positive one (4294967296 is
/// uint64, as in ncgen).
fn natural_int_type(v: i128) -> NcType {
    let fits = |t: NcType| {
        let (lo, hi) = int_range(t);
        (lo..=hi).contains(&v)
    };
    if fits(NcType::Int) {
        NcType::Int
    } else if fits(NcType::UInt) {
        NcType::UInt
    } else if v < 0 {
        NcType::Int64
    } else {
        NcType::UInt64
    }
}

/// The narrowest integer type holding values of all the given types (where ncgen's would
/// not hold them).
fn unify_ints(types: &[NcType]) -> NcType {
    let any_signed = types.iter().any(|t| {
        matches!(
            t,
            NcType::Byte | NcType::Short | NcType::Int | NcType::Int64
        )
    });
    let mut size = 1;
    for t in types {
        let unsigned = matches!(
            t,
            NcType::UByte | NcType::UShort | NcType::UInt | NcType::UInt64
        );
        // Mixing signed and unsigned needs the next signed size to hold both.
        let s = if any_signed && unsigned {
            (t.size() * 2).min(8)
        } else {
            t.size()
        };
        size = size.max(s);
    }
    match (any_signed, size) {
        (true, 1) => NcType::Byte,
        (true, 2) => NcType::Short,
        (true, 4) => NcType::Int,
        (true, _) => NcType::Int64,
        (false, 1) => NcType::UByte,
        (false, 2) => NcType::UShort,
        (false, 4) => NcType::UInt,
        (false, _) => NcType::UInt64,
    }
}

fn attr_from_native(t: NcType, b: &[u8]) -> AttrValue {
    fn chunks<const N: usize>(b: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
        b.chunks_exact(N).map(|c| {
            let mut a = [0u8; N];
            a.copy_from_slice(c);
            a
        })
    }
    match t {
        NcType::Byte => AttrValue::Byte(b.iter().map(|x| *x as i8).collect()),
        NcType::UByte => AttrValue::UByte(b.to_vec()),
        NcType::Short => AttrValue::Short(chunks(b).map(i16::from_le_bytes).collect()),
        NcType::UShort => AttrValue::UShort(chunks(b).map(u16::from_le_bytes).collect()),
        NcType::Int => AttrValue::Int(chunks(b).map(i32::from_le_bytes).collect()),
        NcType::UInt => AttrValue::UInt(chunks(b).map(u32::from_le_bytes).collect()),
        NcType::Int64 => AttrValue::Int64(chunks(b).map(i64::from_le_bytes).collect()),
        NcType::UInt64 => AttrValue::UInt64(chunks(b).map(u64::from_le_bytes).collect()),
        NcType::Float => AttrValue::Float(chunks(b).map(f32::from_le_bytes).collect()),
        NcType::Double => AttrValue::Double(chunks(b).map(f64::from_le_bytes).collect()),
        NcType::Char => AttrValue::Char(b.to_vec()),
        NcType::String => AttrValue::Str(Vec::new()),
    }
}

/// The first value of a numeric attribute as native bytes.
fn attr_to_native(a: &AttrValue) -> Vec<u8> {
    match a {
        AttrValue::Byte(v) => v.first().map(|x| x.to_le_bytes().to_vec()),
        AttrValue::UByte(v) => v.first().map(|x| x.to_le_bytes().to_vec()),
        AttrValue::Short(v) => v.first().map(|x| x.to_le_bytes().to_vec()),
        AttrValue::UShort(v) => v.first().map(|x| x.to_le_bytes().to_vec()),
        AttrValue::Int(v) => v.first().map(|x| x.to_le_bytes().to_vec()),
        AttrValue::UInt(v) => v.first().map(|x| x.to_le_bytes().to_vec()),
        AttrValue::Int64(v) => v.first().map(|x| x.to_le_bytes().to_vec()),
        AttrValue::UInt64(v) => v.first().map(|x| x.to_le_bytes().to_vec()),
        AttrValue::Float(v) => v.first().map(|x| x.to_le_bytes().to_vec()),
        AttrValue::Double(v) => v.first().map(|x| x.to_le_bytes().to_vec()),
        AttrValue::Char(v) => v.first().map(|x| vec![*x]),
        AttrValue::Str(v) => v.first().map(|s| s.clone().into_bytes()),
    }
    .unwrap_or_default()
}

/// Half of the machine's physical memory: what `gen` lets one variable's data section take.
fn memory_budget() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    match (u64::try_from(pages), u64::try_from(page)) {
        (Ok(pages), Ok(page)) if pages > 0 && page > 0 => pages.saturating_mul(page) / 2,
        _ => u64::MAX,
    }
}

/// The byte a constant stands for in char data: a character constant, or a byte constant
/// (`65b` is `A`), which ncgen takes there as a character too.
fn char_constant(c: &Const) -> Option<u8> {
    match c {
        Const::Char(b) => Some(*b),
        Const::Num(Number::Int {
            value,
            suffix: Some(NcType::Byte),
            ..
        }) if in_range(*value, NcType::Byte) => Some(*value as u8),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> ParsedCdl {
        parse_cdl(text, "t.cdl").unwrap()
    }

    /// The values over the variable's whole shape: the rows given, then fill.
    fn data(p: &ParsedCdl, var: &str) -> Vec<u8> {
        let id = p.dataset.find_var(var).unwrap();
        let mut values = p.vars[id.0].data.clone().unwrap();
        let fill = p.dataset.var(id).storage.fill_value.clone().unwrap();
        let total: u64 = p.dataset.var_shape(id).iter().product();
        while (values.len() as u64) < total * fill.len() as u64 {
            values.extend_from_slice(&fill);
        }
        values
    }

    fn ints(b: &[u8]) -> Vec<i32> {
        b.chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    #[test]
    fn only_the_rows_the_values_reach_are_built() {
        // 2^31 doubles of which the first two are given, in rows of 3 (x) or 1 (y).
        let text = "netcdf t {\ndimensions:\n r = 715827883 ;\n c = 3 ;\n n = 2147483648 ;\n\
                    variables:\n double x(r, c) ;\n double y(n) ;\ndata:\n x = 1, 2 ;\n y = 1, 2 ;\n}";
        let p = parse(text);
        let x = p.dataset.find_var("x").unwrap();
        let y = p.dataset.find_var("y").unwrap();
        let fill = NcType::Double.default_fill();
        let values = |v: &[f64]| v.iter().flat_map(|x| x.to_ne_bytes()).collect::<Vec<u8>>();
        let mut row = values(&[1.0, 2.0]);
        row.extend_from_slice(&fill);
        assert_eq!(p.vars[x.0].data, Some(row));
        assert_eq!(p.vars[y.0].data, Some(values(&[1.0, 2.0])));
    }

    #[test]
    fn a_data_section_larger_than_memory_allows_is_refused() {
        // One string of 100 bytes in a row of 2^30 strings: 100 GiB to build, refused on a
        // machine with less than twice that.
        let text = format!(
            "netcdf t {{\ndimensions:\n r = 2 ;\n c = 1073741824 ;\nvariables:\n\
             string v(r, c) ;\ndata:\n v = \"{}\" ;\n}}",
            "x".repeat(100)
        );
        let err = parse_cdl(&text, "t.cdl").expect_err("refused").to_string();
        assert!(
            err.contains("/v") && err.contains("machine's memory"),
            "{err}"
        );
    }

    #[test]
    fn special_value_words_are_names_where_a_name_is_expected() {
        // As ncdump prints a dataset with these names (bare); values stay numbers.
        let p = parse(
            "netcdf t {\ndimensions:\n\tInfinity = 2 ;\nvariables:\n\tfloat nan(Infinity) ;\n\
             \t\tnan:NaN = NaN ;\n\t\tnan:Infinity = Infinity, -Infinity ;\n\
             \t\tnan:_FillValue = NaNf ;\n\tdouble NaNf(Infinity) ;\n\t\tNaNf:nanf = 1. ;\n\
             \tint Infinityf ;\n\t\tInfinityf:DoubleInf = 1 ;\n\
             \n// global attributes:\n\t\t:Inff = \"x\" ;\ndata:\n\n nan = nan, Infinityf ;\n\n\
             NaNf = -Infinity, _ ;\n\n Infinityf = 3 ;\n}\n",
        );
        let ds = &p.dataset;
        let nan = ds.find_var("nan").unwrap();
        assert_eq!(ds.dim(ds.var(nan).dims[0]).name, "Infinity");
        let attrs = &ds.var(nan).attrs;
        let names: Vec<&str> = attrs.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["NaN", "Infinity", "_FillValue"]);
        match &attrs[1].value {
            AttrValue::Double(v) => assert_eq!(v, &[f64::INFINITY, f64::NEG_INFINITY]),
            other => panic!("{other:?}"),
        }
        let floats: Vec<f32> = data(&p, "nan")
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert!(
            floats[0].is_nan() && floats[1] == f32::INFINITY,
            "{floats:?}"
        );
        let nanf = ds.find_var("NaNf").unwrap();
        assert_eq!(ds.var(nanf).attrs[0].name, "nanf");
        assert_eq!(
            f64::from_le_bytes(data(&p, "NaNf")[..8].try_into().unwrap()),
            f64::NEG_INFINITY
        );
        let infinityf = ds.find_var("Infinityf").unwrap();
        assert_eq!(ds.var(infinityf).attrs[0].name, "DoubleInf");
        assert_eq!(ints(&data(&p, "Infinityf")), [3]);
        assert_eq!(ds.group(Dataset::ROOT).attrs[0].name, "Inff");
    }

    #[test]
    fn byte_constants_are_characters_in_char_data() {
        // ncgen's genchar takes byte constants as characters: 65b is 'A', -1b is 0xFF.
        let p = parse(
            "netcdf t {\ndimensions: d = 3 ;\nvariables: char c(d) ; char s ;\n\
             data: c = 65b, 66b, -1b ; s = 67b ;\n}",
        );
        assert_eq!(data(&p, "c"), b"AB\xff");
        assert_eq!(data(&p, "s"), b"C");
    }

    #[test]
    fn a_fill_marker_in_char_data_is_a_row_of_fill() {
        let p = parse(
            "netcdf t {\ndimensions: a = 3 ; s = 4 ;\nvariables: char d(a, s) ; char e(a, s) ;\n\
             char c(s) ;\n d:_FillValue = \"x\" ; e:_FillValue = \"x\" ; c:_FillValue = \"x\" ;\n\
             data: d = _, \"ab\" ; e = 'a', _, 'b' ; c = \"a\", _, \"b\" ;\n}",
        );
        assert_eq!(data(&p, "d"), b"xxxxabxxxxxx");
        assert_eq!(data(&p, "e"), b"axxxxxxxbxxx");
        // Along the last dimension alone, strings are concatenated and `_` is one character.
        assert_eq!(data(&p, "c"), b"axbx");
    }

    #[test]
    fn char_data_longer_than_its_variable_is_cut_with_a_warning() {
        // The ncgen man page: each string is padded to a multiple of the last dimension, and
        // "if S is longer than Dx * Dn, then truncate and generate a warning".
        let p = parse(
            "netcdf t {\ndimensions: d = 3 ; e = 2 ; u = unlimited ;\n\
             variables: char c(d) ; char m(e, d) ; char s ; char f(e, d) ; char b(e, u) ;\n\
             data: c = \"abcde\" ;\n m = \"ab\", \"cdef\" ;\n s = \"xy\" ;\n\
             f = \"abc\", \"def\", \"\", _ ;\n b = {\"p\"}, {\"q\"}, {\"rst\"} ;\n}",
        );
        assert_eq!(data(&p, "c"), b"abc");
        assert_eq!(data(&p, "m"), b"ab\0cde");
        assert_eq!(data(&p, "s"), b"x");
        assert_eq!(data(&p, "f"), b"abcdef");
        // The braced list beyond `e` is dropped, and does not lengthen `u`.
        assert_eq!(data(&p, "b"), b"pq");
        assert_eq!(
            p.warnings,
            [
                "t.cdl:4:7: char data longer than variable \"/c\" (3 characters): dropped 2: \"de\"",
                "t.cdl:5:2: char data longer than variable \"/m\" (6 characters): dropped 1: \"f\"",
                "t.cdl:6:2: char data longer than variable \"/s\" (1 characters): dropped 1: \"y\"",
                "t.cdl:8:2: char data longer than variable \"/b\" (2 characters): dropped 3: \"rst\"",
            ]
        );
        // Rows of fill beyond the variable (`f`) lose nothing, and warn of nothing; the
        // warning shows the first 40 characters dropped.
        let long = format!(
            "netcdf t {{\ndimensions: d = 2 ;\nvariables: char c(d) ;\ndata: c = \"{}\" ;\n}}",
            "z".repeat(100)
        );
        let w = &parse(&long).warnings;
        assert!(
            w.len() == 1 && w[0].ends_with(&format!("dropped 98: \"{}\"…", "z".repeat(40))),
            "{w:?}"
        );
    }

    #[test]
    fn an_empty_string_is_a_nul_in_a_scalar_char() {
        // As Debian ncgen 4.9.0 stores it, whatever the fill: ncdump prints a scalar holding
        // a NUL as `""`, which must read back as that NUL.
        let p = parse(
            "netcdf t {\nvariables: char s ; char f ;\n s:_FillValue = \"x\" ;\n\
             f:_FillValue = \"x\" ;\ndata: s = \"\" ; f = _ ;\n}",
        );
        assert_eq!(data(&p, "s"), b"\0");
        assert_eq!(data(&p, "f"), b"x");
    }

    #[test]
    fn nil_is_the_empty_string_in_string_data_and_attributes() {
        // netcdf-c stores a null string as "" in NCZarr, data and attribute JSON alike.
        let p = parse(
            "netcdf t {\ndimensions: d = 3 ;\nvariables: string s(d) ; string t ;\n\
             string s:a = NIL, \"x\" ; t:_FillValue = nil ; int NIL ;\n\
             data: s = NIL, \"a\", Nil ; NIL = 1 ;\n}",
        );
        let s = p.dataset.find_var("s").unwrap();
        assert_eq!(data(&p, "s"), b"\0a\0");
        assert_eq!(
            p.dataset.var(s).attr("a").unwrap().value,
            AttrValue::Str(vec![String::new(), "x".into()])
        );
        let t = p.dataset.find_var("t").unwrap();
        assert_eq!(
            p.dataset.var(t).attr("_FillValue").unwrap().value,
            AttrValue::Str(vec![String::new()])
        );
        // Where a name is expected, NIL is a name.
        assert_eq!(ints(&data(&p, "NIL")), [1]);
    }

    #[test]
    fn nil_is_refused_but_for_strings() {
        // As ncgen refuses them ("NIL data can only be assigned to variables or attributes of
        // type string", "Non-simple list of values for untyped attribute").
        for (decl, reason) in [
            ("char c(d) ; data: c = NIL ;", "NIL (a null string)"),
            ("int i(d) ; data: i = 1, NIL ;", "NIL (a null string)"),
            ("char c(d) ; char c:a = NIL ;", "NIL (a null string)"),
            ("int i(d) ; int i:a = NIL ;", "NIL (a null string)"),
            (
                "int i(d) ; i:a = \"x\", NIL ;",
                "untyped attribute cannot hold NIL",
            ),
            (
                "string s(d) ; s:a = NIL ;",
                "untyped attribute cannot hold NIL",
            ),
        ] {
            let text = format!("netcdf t {{\ndimensions: d = 2 ;\nvariables: {decl}\n}}");
            let err = parse_cdl(&text, "t.cdl").expect_err(decl).to_string();
            assert!(err.contains(reason), "{decl}: {err}");
        }
    }

    #[test]
    fn char_rows_are_padded_to_the_last_dimension() {
        let p = parse(
            "netcdf t {\ndimensions:\n r = 3 ;\n n = 4 ;\nvariables:\n char c(r, n) ;\ndata:\n c = \"ab\", \"cdefg\" ;\n}",
        );
        // "ab" fills one row of 4, "cdefg" two rows; the third row stays NUL.
        assert_eq!(data(&p, "c"), b"ab\0\0cdefg\0\0\0".to_vec());
    }

    #[test]
    fn empty_strings_are_one_row_of_nuls() {
        // Expected values: Debian ncgen 4.9.0 on the same CDL, read back with netCDF4-python.
        let p = parse(
            "netcdf t {\ndimensions:\n c = 3 ;\n b = 2 ;\n l = 1 ;\nvariables:\n char v(c, b, l) ;\n char w(c, b) ;\n char x(c) ;\ndata:\n v = \"O\", \"\", \"L\", \"{\", \"o\", \"\" ;\n w = \"\", \"c\" ;\n x = \"a\", \"\", \"c\" ;\n}",
        );
        assert_eq!(data(&p, "v"), b"O\0L{o\0".to_vec());
        assert_eq!(data(&p, "w"), b"\0\0c\0\0\0".to_vec());
        assert_eq!(data(&p, "x"), b"a\0c".to_vec());
    }

    #[test]
    fn char_padding_is_the_fill_character() {
        // Expected values: Debian ncgen 4.9.0 on the same CDL, read back with netCDF4-python.
        let p = parse(
            "netcdf t {\ndimensions:\n w = 3 ;\n r = 3 ;\nvariables:\n char x(r, w) ;\n x:_FillValue = \"M\" ;\n char z(w) ;\n z:_FillValue = \"M\" ;\ndata:\n x = \"\", \"c\" ;\n z = \"a\", \"\", \"b\" ;\n}",
        );
        assert_eq!(data(&p, "x"), b"MMMcMMMMM".to_vec());
        assert_eq!(data(&p, "z"), b"aMb".to_vec());
    }

    #[test]
    fn is_netcdf4_takes_what_ncdump_prints_and_ncgen_accepts() {
        let flag = |v: &str| {
            parse_cdl(&format!("netcdf t {{\n:_IsNetcdf4 = {v} ;\n}}"), "t.cdl")
                .map(|p| p.globals.is_netcdf4)
        };
        // `ncdump -s` prints `:_IsNetcdf4 = 1 ;`; Debian ncgen takes these and refuses the rest.
        assert_eq!(flag("1").unwrap(), Some(true));
        assert_eq!(flag("0").unwrap(), Some(false));
        assert_eq!(flag("\"true\"").unwrap(), Some(true));
        assert_eq!(flag("\"0\"").unwrap(), Some(false));
        assert!(flag("\"abc\"").is_err());
        assert!(flag("1.5").is_err());
    }

    #[test]
    fn unsuffixed_integers_take_ncgen_types() {
        let types: Vec<NcType> = [
            2147483647,
            2147483648,
            4294967295,
            4294967296,
            9223372036854775807,
            -2147483648,
            -2147483649,
        ]
        .into_iter()
        .map(natural_int_type)
        .collect();
        use NcType::*;
        assert_eq!(types, [Int, UInt, UInt, UInt64, UInt64, Int, Int64]);
    }

    #[test]
    fn short_records_leave_fill_holes() {
        let p = parse(
            "netcdf t {\ndimensions:\n f = 2 ;\n u = UNLIMITED ;\nvariables:\n int v(f, u) ;\ndata:\n v = {1, 2, 3}, {4} ;\n}",
        );
        let u = p.dataset.find_dim("/u").unwrap();
        assert_eq!(p.dataset.dim(u).len, 3);
        let fill = -2147483647;
        assert_eq!(ints(&data(&p, "v")), vec![1, 2, 3, 4, fill, fill]);
    }

    #[test]
    fn escaped_names_and_scoped_dimensions() {
        let p = parse(
            "netcdf t {\ndimensions:\n d = 2 ;\ngroup: g {\n dimensions:\n  d = 3 ;\n variables:\n  int a\\ b(d) ;\n  int c(/d) ;\n  a\\ b:x\\:y = 1 ;\n }\n}",
        );
        let ds = &p.dataset;
        let ab = ds.find_var("/g/a b").unwrap();
        assert_eq!(ds.var_shape(ab), vec![3]);
        assert_eq!(ds.var(ab).attrs[0].name, "x:y");
        let c = ds.find_var("/g/c").unwrap();
        assert_eq!(ds.var_shape(c), vec![2]);
    }

    /// `ncgen -k nc4` then `ncdump` (4.9.0): `v:f = 97.f`, `v:d = 97., 1.5`,
    /// `:g = 1.5f, 97.f`, `:n = NaN, 97.`, data `v = 97`.
    #[test]
    fn a_character_constant_is_its_code_in_floats() {
        let p = parse(
            "netcdf t {\nvariables:\n double v ;\n  float v:f = 'a' ;\n  double v:d = 'a', 1.5 ;\n\
             :g = 1.5f, 'a' ;\n :n = NaN, 'a' ;\ndata:\n v = 'a' ;\n}",
        );
        let v = &p.dataset.vars[0];
        assert_eq!(v.attrs[0].value, AttrValue::Float(vec![97.0]));
        assert_eq!(v.attrs[1].value, AttrValue::Double(vec![97.0, 1.5]));
        let global = &p.dataset.group(Dataset::ROOT).attrs;
        assert_eq!(global[0].value, AttrValue::Float(vec![1.5, 97.0]));
        let AttrValue::Double(n) = &global[1].value else {
            panic!("NaN, 'a' is double: {:?}", global[1].value)
        };
        assert!(n[0].is_nan() && n[1] == 97.0, "{n:?}");
        assert_eq!(p.vars[0].data, Some(97.0f64.to_le_bytes().to_vec()));
    }

    #[test]
    fn fill_value_is_converted_to_the_variable_type() {
        let p = parse("netcdf t {\nvariables:\n double x ;\n  x:_FillValue = 1 ;\n}");
        let x = &p.dataset.vars[0];
        assert_eq!(x.attrs[0].value, AttrValue::Double(vec![1.0]));
        assert_eq!(x.storage.fill_value, Some(1.0f64.to_le_bytes().to_vec()));
        assert_eq!(p.vars[0].data, None);
    }

    #[test]
    fn strings_are_padded_to_the_longest_value() {
        let p = parse(
            "netcdf t {\ndimensions:\n n = 3 ;\nvariables:\n string s(n) ;\ndata:\n s = \"a\", \"abc\", _ ;\n}",
        );
        assert_eq!(p.dataset.vars[0].string_width, 3);
        assert_eq!(data(&p, "s"), b"a\0\0abc\0\0\0".to_vec());
    }

    /// The error message of CDL `body` inside `netcdf t { }`, the header on line 1.
    fn refusal(body: &str) -> String {
        parse_cdl(&format!("netcdf t {{\n{body}}}\n"), "t.cdl")
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn attributes_are_refused_in_data_sections() {
        let head = "dimensions:\n d = 2 ;\nvariables:\n int v(d) ;\n int c(d) ;\ndata:\n";
        for (line, column) in [
            (" :c = 1, 2 ;\n", 2),
            (" v:c = 1, 2 ;\n", 2),
            (" double v:c = 1 ;\n", 2),
            (" double :c = 1 ;\n", 2),
            ("  /v:c = 1 ;\n", 3),
        ] {
            let e = refusal(&format!("{head} v = 1, 2 ;\n{line}"));
            assert_eq!(
                e,
                format!(
                    "t.cdl:9:{column}: syntax error: an attribute in the \"data:\" section \
                     (attributes go before it; a variable's data is \"name = values ;\")"
                ),
                "{line}"
            );
        }
        // Before the sections, among dimensions and variables, and after a subgroup (as
        // the group's own), attributes are where ncgen takes them.
        let p = parse(
            "netcdf t {\n:a = 1 ;\ntypes:\n :b = 2 ;\ndimensions:\n d = 2 ;\n :c = 3 ;\n\
             variables:\n int v(d) ;\n  v:u = 4 ;\n :e = 5 ;\n int w ;\ndata:\n v = 1, 2 ;\n\
             group: g {\n :f = 6 ;\n}\n :h = 7 ;\n v:x = 8 ;\n}\n",
        );
        let ds = &p.dataset;
        let names: Vec<&str> = ds.groups[0].attrs.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "e", "h"]);
        let v = ds.find_var("/v").unwrap();
        let names: Vec<&str> = ds.var(v).attrs.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["u", "x"]);
        assert_eq!(data(&p, "v"), [1i32, 2].map(i32::to_ne_bytes).concat());
    }

    #[test]
    fn sections_come_once_each_in_their_order() {
        assert_eq!(
            refusal("dimensions:\n d = 2 ; dimensions: e = 3 ;\nvariables:\n int v(d, e) ;\n"),
            "t.cdl:3:10: syntax error: a second \"dimensions:\" section"
        );
        let order = "after the sections it comes before (a group's sections come in the order \
                     types, dimensions, variables, data)";
        for (body, at, section) in [
            (
                "variables:\n int v ;\ndimensions:\n d = 2 ;\n",
                "4:1",
                "dimensions",
            ),
            (
                "variables:\n int v ;\ndata:\n v = 1 ;\nvariables:\n int w ;\n",
                "6:1",
                "variables",
            ),
            ("dimensions:\n d = 2 ;\ntypes:\n", "4:1", "types"),
        ] {
            assert_eq!(
                refusal(body),
                format!("t.cdl:{at}: syntax error: \"{section}:\" {order}")
            );
        }
        for section in ["types", "variables", "data"] {
            let e = refusal(&format!("{section}:\n{section}:\n"));
            assert_eq!(
                e,
                format!("t.cdl:3:1: syntax error: a second \"{section}:\" section")
            );
        }
        // Each group has its own sections.
        let p = parse(
            "netcdf t {\ntypes:\ndimensions:\n d = 2 ;\nvariables:\n int v(d) ;\ndata:\n\
             group: g {\ndimensions:\n d = 3 ;\nvariables:\n int w(d) ;\n}\n\
             group: h {\ndimensions:\n d = 4 ;\n}\n}\n",
        );
        let lens: Vec<u64> = p.dataset.dims.iter().map(|d| d.len).collect();
        assert_eq!(lens, [2, 3, 4]);
    }

    #[test]
    fn a_dimension_length_must_fit_its_suffix_type() {
        for (length, tag) in [
            ("4294967296u", "uint"),
            ("4294967296UL", "uint"),
            ("2147483648L", "int"),
            ("4294967295L", "int"),
            ("4294967296L", "int"),
            ("9223372036854775808LL", "int64"),
        ] {
            let value = length.trim_end_matches(['u', 'U', 'l', 'L']);
            assert_eq!(
                refusal(&format!("dimensions:\n d = {length} ;\n")),
                format!(
                    "t.cdl:3:6: dimension length {value} out of range for its suffix's type {tag}"
                )
            );
        }
        let p = parse(
            "netcdf t {\ndimensions:\n a = 4294967295u ;\n b = 2147483647L ;\n\
             c = 9223372036854775807LL ;\n e = 4294967296 ;\n}\n",
        );
        let lens: Vec<u64> = p.dataset.dims.iter().map(|d| d.len).collect();
        assert_eq!(
            lens,
            [4294967295, 2147483647, 9223372036854775807, 4294967296]
        );
    }
}
