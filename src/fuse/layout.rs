//! The directory layout of a mount (the contract documented in docs/mount.md): which names a
//! directory holds and what each name resolves to. Nodes are named by path, not by model
//! index, so that they survive a metadata reload; nothing here knows about inodes.

use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use percent_encoding::{percent_decode_str, percent_encode_byte};

use crate::model::{Dataset, GroupId, VarId};

/// The file that holds a group's or variable's CDL.
pub const HEADER: &str = "@header.cdl";
/// The file that holds a group's or variable's JSON description.
pub const METADATA: &str = "@metadata.json";
/// The directory of attribute files.
pub const ATTRIBUTES: &str = "@attributes";
/// A variable's values.
pub const DATA: &str = "data";

/// The names of the groups from the root group down to a group (none for the root): a chain
/// of links, each sharing its parent's path. A mount makes a node for every entry it lists
/// and looks every node up by its path; as a list of names copied and hashed whole, each of
/// these cost the depth of the group, and listing groups nested thousands deep cost the
/// square of it. A child's path, a clone, a hash and (for paths made from the same parent)
/// a comparison now cost the same at any depth.
#[derive(Clone, Default)]
pub struct GroupPath(Option<Arc<PathLink>>);

/// The last name of a [`GroupPath`] and the path before it.
struct PathLink {
    parent: GroupPath,
    name: String,
    /// How many names the path has.
    len: usize,
    /// The hash of the whole path, made from the parent's.
    hash: u64,
}

impl GroupPath {
    /// The root group's path.
    pub fn root() -> Self {
        GroupPath(None)
    }

    /// The path of the subgroup `name` of this group.
    pub fn child(&self, name: &str) -> Self {
        // Fixed keys: equal paths hash alike wherever they were made.
        let mut hasher = std::hash::DefaultHasher::new();
        self.hash_value().hash(&mut hasher);
        name.hash(&mut hasher);
        GroupPath(Some(Arc::new(PathLink {
            parent: self.clone(),
            name: name.to_string(),
            len: self.len() + 1,
            hash: hasher.finish(),
        })))
    }

    /// The parent group's path (the root's own for the root).
    pub fn parent(&self) -> Self {
        self.0
            .as_ref()
            .map_or_else(GroupPath::root, |link| link.parent.clone())
    }

    /// The group's own name; `None` for the root.
    pub fn last(&self) -> Option<&str> {
        self.0.as_ref().map(|link| link.name.as_str())
    }

    /// How many names the path has (the group's depth).
    fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |link| link.len)
    }

    /// The names from the root down.
    pub fn names(&self) -> Vec<&str> {
        let mut names = Vec::with_capacity(self.len());
        let mut at = self;
        while let Some(link) = &at.0 {
            names.push(link.name.as_str());
            at = &link.parent;
        }
        names.reverse();
        names
    }

    fn hash_value(&self) -> u64 {
        self.0.as_ref().map_or(0, |link| link.hash)
    }
}

/// The groups at or below one group: tells whether paths lie there, remembering the answer
/// for every link it walks up, so that a sweep over the paths of every node looked up so
/// far costs each link once, however deep the groups nest (walking each path up to the
/// group's depth would cost the square of the depth).
pub struct Subtree {
    top: GroupPath,
    /// Answers by link; the path kept with each keeps its link (and so its address) alive.
    known: HashMap<*const PathLink, (GroupPath, bool)>,
}

impl Subtree {
    /// The groups at or below `top`.
    pub fn new(top: &GroupPath) -> Self {
        Subtree {
            top: top.clone(),
            known: HashMap::new(),
        }
    }

    /// Whether `path` is the top group or lies below it.
    pub fn contains(&mut self, path: &GroupPath) -> bool {
        let depth = self.top.len();
        let mut walked = Vec::new();
        let mut at = path;
        let inside = loop {
            if at.len() <= depth {
                // Paths of equal depth compare in one step when they share links.
                break at.len() == depth && *at == self.top;
            }
            let Some(link) = &at.0 else {
                break false;
            };
            if let Some((_, known)) = self.known.get(&Arc::as_ptr(link)) {
                break *known;
            }
            walked.push(at.clone());
            at = &link.parent;
        };
        for path in walked {
            if let Some(id) = path.0.as_ref().map(Arc::as_ptr) {
                self.known.insert(id, (path, inside));
            }
        }
        inside
    }
}

impl<S: AsRef<str>> FromIterator<S> for GroupPath {
    fn from_iter<I: IntoIterator<Item = S>>(names: I) -> Self {
        names
            .into_iter()
            .fold(GroupPath::root(), |path, name| path.child(name.as_ref()))
    }
}

impl PartialEq for GroupPath {
    /// Name by name from the end, until both reach a link they share.
    fn eq(&self, other: &Self) -> bool {
        let (mut a, mut b) = (self, other);
        loop {
            match (&a.0, &b.0) {
                (None, None) => return true,
                (Some(x), Some(y)) if Arc::ptr_eq(x, y) => return true,
                (Some(x), Some(y)) if x.len == y.len && x.hash == y.hash && x.name == y.name => {
                    a = &x.parent;
                    b = &y.parent;
                }
                _ => return false,
            }
        }
    }
}

impl Eq for GroupPath {}

impl Hash for GroupPath {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash_value());
    }
}

impl fmt::Debug for GroupPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

impl Drop for PathLink {
    /// Lets go of the links above one at a time: dropping a chain thousands long link by
    /// link from inside each other's drop would take a stack frame per link.
    fn drop(&mut self) {
        let mut next = self.parent.0.take();
        while let Some(link) = next {
            next = match Arc::try_unwrap(link) {
                Ok(mut last_owner) => last_owner.parent.0.take(),
                // Still someone else's: it goes with them.
                Err(_) => None,
            };
        }
    }
}

/// A group or a variable, by path from the root group.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Owner {
    /// A group: the names of the groups from the root down (empty for the root).
    Group(GroupPath),
    /// A variable: its group's path and its name.
    Var(GroupPath, String),
}

/// The kinds of regular file in the layout.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// A variable's `data`.
    Data,
    /// `@header.cdl`.
    Header,
    /// `@metadata.json`.
    Metadata,
    /// `@attributes/NAME` (the attribute's real name, not the file name).
    Attr(String),
}

/// Everything a path in the mount can name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Node {
    /// A group's or variable's directory.
    Dir(Owner),
    /// The `@attributes` directory of a group or variable.
    AttrDir(Owner),
    /// A regular file.
    File(Owner, FileKind),
}

/// The model object behind an [`Owner`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolved {
    /// A group.
    Group(GroupId),
    /// A variable.
    Var(VarId),
}

/// The directory-entry name of a group or variable: a name starting with `@` (possible in pure
/// Zarr) gets one more `@` so that it cannot be taken for one of the layout's own files.
pub fn object_entry(name: &str) -> String {
    if name.starts_with('@') {
        format!("@{name}")
    } else {
        name.to_string()
    }
}

/// Reverses [`object_entry`]; `None` for a layout file name (one leading `@`).
pub fn object_name(entry: &str) -> Option<&str> {
    match entry.strip_prefix('@') {
        Some(rest) if rest.starts_with('@') => Some(rest),
        Some(_) => None,
        None => Some(entry),
    }
}

/// The file name of an attribute: `/`, `%` and control characters percent-encoded (the NUL
/// character as `%00`), and the names `""`, `.` and `..` spelled `%`, `%2E`, `%2E%2E`. A
/// lone `%` is no other name's spelling: every other `%` is followed by two hexadecimal
/// digits.
pub fn attr_entry(name: &str) -> String {
    match name {
        "" => "%".to_string(),
        "." => "%2E".to_string(),
        ".." => "%2E%2E".to_string(),
        // Other characters, non-ASCII ones too, are file name characters as they are.
        _ => name
            .chars()
            .map(|c| match u8::try_from(c) {
                Ok(b) if b == b'/' || b == b'%' || b.is_ascii_control() => {
                    percent_encode_byte(b).to_string()
                }
                _ => c.to_string(),
            })
            .collect(),
    }
}

/// The longest file name, in bytes, that a directory of the mount lists or looks up (Linux's
/// `NAME_MAX`, which `statfs` reports): the kernel refuses a longer entry in a listing, which
/// would fail the whole listing, and `open`, `mkdir` and `rename` to a longer name fail with
/// `ENAMETOOLONG` on any local file system.
pub const NAME_MAX: usize = 255;

/// Reverses [`attr_entry`]: the attribute name that file name `entry` stands for, or `None`
/// when `attr_entry` gives no name that entry: a `%` not followed by two hexadecimal digits
/// (`50%`) other than the lone `%` of the empty name, escapes of bytes that are not UTF-8
/// (`%FF`), or another spelling than its own (`%41` for `A`, `%2f` for `%2F`). So two file names never stand for one attribute, and a
/// file is listed under the name it was created with.
pub fn attr_name(entry: &str) -> Option<String> {
    if entry == "%" {
        return Some(String::new());
    }
    let name = percent_decode_str(entry).decode_utf8().ok()?;
    (attr_entry(&name) == entry).then(|| name.into_owned())
}

impl Owner {
    /// Finds the object in `ds`.
    pub fn resolve(&self, ds: &Dataset) -> Option<Resolved> {
        match self {
            Owner::Group(path) => group_at(ds, path).map(Resolved::Group),
            Owner::Var(path, name) => {
                let g = group_at(ds, path)?;
                ds.find_var_in(g, name).map(Resolved::Var)
            }
        }
    }

    /// The path of the object's directory below the mount point, for log lines.
    pub fn display(&self) -> String {
        match self {
            Owner::Group(path) => format!("/{}", path.names().join("/")),
            Owner::Var(path, name) => {
                let mut parts = path.names();
                parts.push(name);
                format!("/{}", parts.join("/"))
            }
        }
    }
}

fn group_at(ds: &Dataset, path: &GroupPath) -> Option<GroupId> {
    let mut g = Dataset::ROOT;
    for name in path.names() {
        g = ds.find_group_in(g, name)?;
    }
    Some(g)
}

/// Whether `node` names something that exists in `ds`.
pub fn exists(ds: &Dataset, node: &Node) -> bool {
    match node {
        Node::Dir(o) | Node::AttrDir(o) => o.resolve(ds).is_some(),
        Node::File(o, kind) => match (o.resolve(ds), kind) {
            (None, _) => false,
            (Some(Resolved::Group(_)), FileKind::Data) => false,
            (Some(r), FileKind::Attr(name)) => attrs_of(ds, r).iter().any(|a| &a.name == name),
            (Some(_), _) => true,
        },
    }
}

/// The attributes of a group or variable.
pub fn attrs_of(ds: &Dataset, r: Resolved) -> &[crate::model::Attribute] {
    match r {
        Resolved::Group(g) => &ds.group(g).attrs,
        Resolved::Var(v) => &ds.var(v).attrs,
    }
}

/// The name of `node` in its directory (see [`child`]); `None` for the root group.
pub fn entry_of(node: &Node) -> Option<String> {
    Some(match node {
        Node::Dir(Owner::Group(path)) => object_entry(path.last()?),
        Node::Dir(Owner::Var(_, name)) => object_entry(name),
        Node::AttrDir(_) => ATTRIBUTES.to_string(),
        Node::File(_, FileKind::Data) => DATA.to_string(),
        Node::File(_, FileKind::Header) => HEADER.to_string(),
        Node::File(_, FileKind::Metadata) => METADATA.to_string(),
        Node::File(_, FileKind::Attr(name)) => attr_entry(name),
    })
}

/// Looks `entry` up in directory `dir`.
pub fn child(ds: &Dataset, dir: &Node, entry: &str) -> Option<Node> {
    let node = match dir {
        Node::Dir(owner) => match (owner, entry) {
            (_, HEADER) => Node::File(owner.clone(), FileKind::Header),
            (_, METADATA) => Node::File(owner.clone(), FileKind::Metadata),
            (_, ATTRIBUTES) => Node::AttrDir(owner.clone()),
            (Owner::Var(..), DATA) => Node::File(owner.clone(), FileKind::Data),
            (Owner::Var(..), _) => return None,
            (Owner::Group(path), _) => {
                let name = object_name(entry)?;
                let g = group_at(ds, path)?;
                if ds.find_var_in(g, name).is_some() {
                    Node::Dir(Owner::Var(path.clone(), name.to_string()))
                } else if ds.find_group_in(g, name).is_some() {
                    Node::Dir(Owner::Group(path.child(name)))
                } else {
                    return None;
                }
            }
        },
        Node::AttrDir(owner) => Node::File(owner.clone(), FileKind::Attr(attr_name(entry)?)),
        Node::File(..) => return None,
    };
    exists(ds, &node).then_some(node)
}

/// The entries of directory `dir` in listing order, with the nodes they name; `None` if `dir`
/// is not a directory of `ds`.
pub fn list(ds: &Dataset, dir: &Node) -> Option<Vec<(String, Node)>> {
    let mut out = Vec::new();
    match dir {
        Node::Dir(owner) => {
            let r = owner.resolve(ds)?;
            if let Owner::Var(..) = owner {
                out.push((DATA.to_string(), Node::File(owner.clone(), FileKind::Data)));
            }
            out.push((
                HEADER.to_string(),
                Node::File(owner.clone(), FileKind::Header),
            ));
            out.push((
                METADATA.to_string(),
                Node::File(owner.clone(), FileKind::Metadata),
            ));
            out.push((ATTRIBUTES.to_string(), Node::AttrDir(owner.clone())));
            if let (Resolved::Group(g), Owner::Group(path)) = (r, owner) {
                for v in &ds.group(g).vars {
                    let name = &ds.var(*v).name;
                    out.push((
                        object_entry(name),
                        Node::Dir(Owner::Var(path.clone(), name.clone())),
                    ));
                }
                for sub in &ds.group(g).groups {
                    let name = &ds.group(*sub).name;
                    out.push((
                        object_entry(name),
                        Node::Dir(Owner::Group(path.child(name))),
                    ));
                }
            }
        }
        Node::AttrDir(owner) => {
            let r = owner.resolve(ds)?;
            for a in attrs_of(ds, r) {
                out.push((
                    attr_entry(&a.name),
                    Node::File(owner.clone(), FileKind::Attr(a.name.clone())),
                ));
            }
        }
        Node::File(..) => return None,
    }
    Some(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::{AttrValue, Attribute, NcType, VarStorage, Variable};

    /// A small dataset: root dims x(3) and t(unlimited, 2); root var `v(t,x)` float with two
    /// attributes, a var named `@odd`, group `g` with var `s` (scalar int) and subgroup `h`.
    pub(crate) fn sample() -> Dataset {
        let mut ds = Dataset::new();
        let t = ds.add_dim(Dataset::ROOT, "t", 2, true);
        let x = ds.add_dim(Dataset::ROOT, "x", 3, false);
        ds.groups[0].attrs.push(Attribute {
            name: "title".into(),
            value: AttrValue::Char(b"hello".to_vec()),
        });
        let var = |name: &str, group, nctype, dims| Variable {
            name: name.into(),
            group,
            nctype,
            dims,
            string_width: 0,
            attrs: Vec::new(),
            storage: VarStorage::default(),
        };
        let mut v = var("v", Dataset::ROOT, NcType::Float, vec![t, x]);
        v.attrs.push(Attribute {
            name: "units".into(),
            value: AttrValue::Char(b"m/s".to_vec()),
        });
        v.attrs.push(Attribute {
            name: "a/b".into(),
            value: AttrValue::Int(vec![1, 2]),
        });
        ds.add_var(v);
        ds.add_var(var("@odd", Dataset::ROOT, NcType::Byte, vec![x]));
        let g = ds.add_group(Dataset::ROOT, "g");
        ds.add_var(var("s", g, NcType::Int, vec![]));
        ds.add_group(g, "h");
        ds
    }

    /// A path thousands deep: a child's path and its parent's share their links (no name is
    /// copied), equal paths made apart are equal and hash alike, and the last owner lets go
    /// of the chain without a stack frame per link (on a 256 KiB stack here).
    #[test]
    fn group_paths_share_their_links_at_any_depth() {
        use std::hash::BuildHasher;
        const DEPTH: usize = 100_000;
        std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(|| {
                let deep: GroupPath = std::iter::repeat_n("g", DEPTH).collect();
                let child = deep.child("h");
                let parent = child.parent();
                assert!(Arc::ptr_eq(
                    parent.0.as_ref().unwrap(),
                    deep.0.as_ref().unwrap()
                ));
                assert_eq!(child.last(), Some("h"));
                assert_eq!(child.names().len(), DEPTH + 1);
                let apart: GroupPath = std::iter::repeat_n("g", DEPTH).collect();
                let state = std::hash::RandomState::new();
                assert_eq!(apart, deep);
                assert_eq!(state.hash_one(&apart), state.hash_one(&deep));
                assert_ne!(apart.child("i"), child);
                assert_ne!(deep.parent(), deep);
                assert_eq!(GroupPath::root().parent(), GroupPath::root());
                drop((deep, apart, parent));
                drop(child);
            })
            .unwrap()
            .join()
            .unwrap();
    }

    /// Which paths lie in a subtree, among paths made apart or sharing links; and a sweep
    /// over every group of a chain 100,000 deep is quick (walking each path up to the top of
    /// the subtree would take 5 * 10^9 steps).
    #[test]
    fn subtrees_hold_their_top_and_what_lies_below_it() {
        let g = GroupPath::root().child("g");
        let mut below_g = Subtree::new(&g);
        for inside in [g.clone(), g.child("h"), g.child("h").child("g")] {
            assert!(below_g.contains(&inside), "{inside:?}");
        }
        let apart: GroupPath = ["g", "h", "i"].into_iter().collect();
        assert!(below_g.contains(&apart));
        for outside in [
            GroupPath::root(),
            GroupPath::root().child("gg"),
            GroupPath::root().child("h").child("g"),
            ["h", "g", "x"].into_iter().collect(),
        ] {
            assert!(!below_g.contains(&outside), "{outside:?}");
        }
        let mut everything = Subtree::new(&GroupPath::root());
        assert!(everything.contains(&GroupPath::root()) && everything.contains(&apart));

        const DEPTH: usize = 100_000;
        std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(|| {
                let mut chain = vec![GroupPath::root()];
                for _ in 0..DEPTH {
                    let next = chain.last().unwrap().child("g");
                    chain.push(next);
                }
                let mut below = Subtree::new(&chain[2]);
                let inside = chain.iter().filter(|p| below.contains(p)).count();
                assert_eq!(inside, DEPTH - 1);
                // Made apart from the chain: compared, not found by its links.
                let apart: GroupPath = std::iter::repeat_n("g", 3).collect();
                assert!(below.contains(&apart.child("g")));
                let beside: GroupPath = ["g", "h", "g"].into_iter().collect();
                assert!(!below.contains(&beside));
                drop(below);
                // The last owner lets go of a link at a time.
                while chain.pop().is_some() {}
            })
            .unwrap()
            .join()
            .unwrap();
    }

    fn names(ds: &Dataset, dir: &Node) -> Vec<String> {
        list(ds, dir).unwrap().into_iter().map(|(n, _)| n).collect()
    }

    #[test]
    fn listing_follows_the_layout() {
        let ds = sample();
        let root = Node::Dir(Owner::Group(GroupPath::root()));
        assert_eq!(
            names(&ds, &root),
            [
                "@header.cdl",
                "@metadata.json",
                "@attributes",
                "v",
                "@@odd",
                "g"
            ]
        );
        let v = child(&ds, &root, "v").unwrap();
        assert_eq!(v, Node::Dir(Owner::Var(GroupPath::root(), "v".into())));
        assert_eq!(
            names(&ds, &v),
            ["data", "@header.cdl", "@metadata.json", "@attributes"]
        );
        let attrs = child(&ds, &v, "@attributes").unwrap();
        assert_eq!(names(&ds, &attrs), ["units", "a%2Fb"]);
        assert_eq!(
            child(&ds, &attrs, "a%2Fb"),
            Some(Node::File(
                Owner::Var(GroupPath::root(), "v".into()),
                FileKind::Attr("a/b".into())
            ))
        );
        let g = child(&ds, &root, "g").unwrap();
        assert_eq!(
            names(&ds, &g),
            ["@header.cdl", "@metadata.json", "@attributes", "s", "h"]
        );
        assert!(child(&ds, &g, "h").is_some());
        assert!(child(&ds, &g, "data").is_none());
    }

    #[test]
    fn escaped_and_missing_names() {
        let ds = sample();
        let root = Node::Dir(Owner::Group(GroupPath::root()));
        assert_eq!(
            child(&ds, &root, "@@odd"),
            Some(Node::Dir(Owner::Var(GroupPath::root(), "@odd".into())))
        );
        assert_eq!(child(&ds, &root, "@odd"), None);
        assert_eq!(child(&ds, &root, "nope"), None);
        assert_eq!(child(&ds, &root, "data"), None);
        let attrs = Node::AttrDir(Owner::Group(GroupPath::root()));
        assert!(child(&ds, &attrs, "title").is_some());
        assert!(child(&ds, &attrs, "units").is_none());
    }

    #[test]
    fn every_node_knows_the_name_it_is_listed_under() {
        let ds = sample();
        let mut dirs = vec![Node::Dir(Owner::Group(GroupPath::root()))];
        while let Some(dir) = dirs.pop() {
            for (name, node) in list(&ds, &dir).unwrap() {
                assert_eq!(entry_of(&node).as_deref(), Some(name.as_str()), "{node:?}");
                if !matches!(node, Node::File(..)) {
                    dirs.push(node);
                }
            }
        }
        assert_eq!(entry_of(&Node::Dir(Owner::Group(GroupPath::root()))), None);
    }

    #[test]
    fn entry_names_round_trip() {
        for name in ["plain", "@x", "@@y", "a b"] {
            assert_eq!(object_name(&object_entry(name)), Some(name));
        }
        assert_eq!(object_name("@header.cdl"), None);
        for name in [
            "",
            "\0",
            "\0\0",
            ".",
            "..",
            "a/b",
            "100%",
            "tab\there",
            "ünï",
            "%41",
        ] {
            let e = attr_entry(name);
            assert!(!e.contains('/') && e != "." && e != ".." && !e.is_empty());
            assert_eq!(attr_name(&e).as_deref(), Some(name));
        }
        // As docs/mount.md says: only `/`, `%` and control characters are encoded.
        assert_eq!(attr_entry("ünï µ"), "ünï µ");
        assert_eq!(attr_entry("a/b%\n"), "a%2Fb%25%0A");
        // The empty name and the NUL character are two names: two spellings.
        assert_eq!(attr_entry(""), "%");
        assert_eq!(attr_entry("\0"), "%00");
    }

    #[test]
    fn only_the_canonical_spelling_names_an_attribute() {
        // Not UTF-8 once decoded: %FF and %FE would both be U+FFFD.
        for entry in ["%FF", "%FE", "a%C3", "%C3%28"] {
            assert_eq!(attr_name(entry), None, "{entry}");
        }
        // Not the spelling attr_entry gives: a bare %, an escape of a character that stays
        // as it is, lower-case hex digits.
        for entry in [
            "50%",
            "%%",
            "%4",
            "%zz",
            "%41",
            "glob%20al",
            "%2e",
            "%2f",
            "a%2fb",
            "%C3%A9",
            "%2Ex",
        ] {
            assert_eq!(attr_name(entry), None, "{entry}");
        }
        assert_eq!(attr_name("50%25").as_deref(), Some("50%"));
        assert_eq!(attr_name("a%2Fb").as_deref(), Some("a/b"));
        assert_eq!(attr_name("é").as_deref(), Some("é"));
        let ds = sample();
        let attrs = Node::AttrDir(Owner::Var(GroupPath::root(), "v".into()));
        assert!(child(&ds, &attrs, "a%2Fb").is_some());
        assert_eq!(child(&ds, &attrs, "a%2fb"), None);
        assert_eq!(child(&ds, &attrs, "%75nits"), None);
    }
}
