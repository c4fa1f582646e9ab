//! The inode table: a stable number for every path ever looked up.

use std::collections::HashMap;

use super::layout::{FileKind, GroupPath, Node, Owner, Subtree};

/// Maps inode numbers to layout nodes and back. Numbers are never reused during a mount, so a
/// node that disappears after a metadata reload keeps its number and simply stops resolving.
///
/// A `data` file whose bytes change meaning at a reload (another type or shape of its
/// variable) is given a new number: the kernel keeps one page cache and one size per number,
/// and a file opened before must not read pages cached by opens of the new layout. The old
/// number is *retired*: it still names the node, with the size the file had.
#[derive(Debug)]
pub struct InodeTable {
    by_ino: HashMap<u64, Node>,
    /// The current number of each node.
    by_node: HashMap<Node, u64>,
    /// Retired numbers, with the size of their file when they were retired.
    retired: HashMap<u64, u64>,
    next: u64,
}

impl Default for InodeTable {
    fn default() -> Self {
        Self::new()
    }
}

impl InodeTable {
    /// The root group's inode (FUSE's fixed root number).
    pub const ROOT: u64 = fuser::INodeNo::ROOT.0;

    /// A table holding only the root group.
    pub fn new() -> Self {
        let mut t = InodeTable {
            by_ino: HashMap::new(),
            by_node: HashMap::new(),
            retired: HashMap::new(),
            next: Self::ROOT + 1,
        };
        let root = Node::Dir(Owner::Group(GroupPath::root()));
        t.by_ino.insert(Self::ROOT, root.clone());
        t.by_node.insert(root, Self::ROOT);
        t
    }

    /// The inode of `node`, allocating one on first sight.
    pub fn intern(&mut self, node: &Node) -> u64 {
        if let Some(ino) = self.by_node.get(node) {
            return *ino;
        }
        let ino = self.next;
        self.next += 1;
        self.by_ino.insert(ino, node.clone());
        self.by_node.insert(node.clone(), ino);
        ino
    }

    /// Gives `node` a new number from now on (see [`InodeTable`]); its current one, if any,
    /// is retired with `size`, the size the kernel was told for it.
    pub fn retire(&mut self, node: &Node, size: u64) {
        if let Some(ino) = self.by_node.remove(node) {
            self.retired.insert(ino, size);
        }
    }

    /// Makes every number handed out for `owner` and what lies in it (its directory, files,
    /// `@attributes` and attribute files; for a group, every group and variable below it
    /// too) stop resolving, and returns them. The next lookup of a name there gets a new
    /// number. A rename needs this for the old name and the new: numbers name paths, so a
    /// directory held open or a page cache of the old object would otherwise reach whatever
    /// takes the name next (`mv a old; mv b a`).
    pub fn forget_within(&mut self, owner: &Owner) -> Vec<u64> {
        let mut below = match owner {
            Owner::Group(path) => Some(Subtree::new(path)),
            Owner::Var(..) => None,
        };
        let mut forgotten = Vec::new();
        for (ino, node) in &self.by_ino {
            let (Node::Dir(o) | Node::AttrDir(o) | Node::File(o, _)) = node;
            let inside = match (&mut below, o) {
                (None, _) => o == owner,
                (Some(below), Owner::Group(path) | Owner::Var(path, _)) => below.contains(path),
            };
            if inside && *ino != Self::ROOT {
                forgotten.push(*ino);
            }
        }
        for ino in &forgotten {
            if let Some(node) = self.by_ino.remove(ino) {
                if self.by_node.get(&node) == Some(ino) {
                    self.by_node.remove(&node);
                }
            }
            self.retired.remove(ino);
        }
        forgotten
    }

    /// The size `ino` had when it was retired; `None` for a current number.
    pub fn retired_size(&self, ino: u64) -> Option<u64> {
        self.retired.get(&ino).copied()
    }

    /// The current numbers of the `data` files handed out so far, with their nodes.
    pub fn current_data_files(&self) -> Vec<(u64, Node)> {
        self.by_node
            .iter()
            .filter(|(node, _)| matches!(node, Node::File(_, FileKind::Data)))
            .map(|(node, ino)| (*ino, node.clone()))
            .collect()
    }

    /// Number of inodes handed out so far (the root included).
    pub fn count(&self) -> u64 {
        self.by_ino.len() as u64
    }

    /// The inodes of every `data` file handed out so far.
    pub fn data_inodes(&self) -> Vec<u64> {
        self.by_ino
            .iter()
            .filter(|(_, node)| matches!(node, Node::File(_, FileKind::Data)))
            .map(|(ino, _)| *ino)
            .collect()
    }

    /// Every inode handed out so far, with its node.
    pub fn known(&self) -> Vec<(u64, Node)> {
        self.by_ino
            .iter()
            .map(|(ino, node)| (*ino, node.clone()))
            .collect()
    }

    /// The inode of `node`, if one was handed out.
    pub fn ino_of(&self, node: &Node) -> Option<u64> {
        self.by_node.get(node).copied()
    }

    /// The node behind `ino`.
    pub fn node(&self, ino: u64) -> Option<&Node> {
        self.by_ino.get(&ino)
    }
}

/// The directory that holds `node` (the root is its own parent).
pub fn parent(node: &Node) -> Node {
    match node {
        Node::Dir(Owner::Group(path)) => Node::Dir(Owner::Group(path.parent())),
        Node::Dir(Owner::Var(path, _)) => Node::Dir(Owner::Group(path.clone())),
        Node::AttrDir(o) => Node::Dir(o.clone()),
        Node::File(o, FileKind::Attr(_)) => Node::AttrDir(o.clone()),
        Node::File(o, _) => Node::Dir(o.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn interning_is_stable() {
        let mut t = InodeTable::new();
        let v = Node::Dir(Owner::Var(GroupPath::root(), "v".into()));
        let a = t.intern(&v);
        assert_ne!(a, InodeTable::ROOT);
        assert_eq!(t.intern(&v), a);
        assert_eq!(t.node(a), Some(&v));
        let root = Node::Dir(Owner::Group(GroupPath::root()));
        assert_eq!(t.intern(&root), InodeTable::ROOT);
        assert_eq!(t.node(999), None);
    }

    #[test]
    fn data_inodes_are_only_data_files() {
        let mut t = InodeTable::new();
        let owner = Owner::Var(GroupPath::root(), "v".into());
        t.intern(&Node::Dir(owner.clone()));
        t.intern(&Node::File(owner.clone(), FileKind::Header));
        let data = t.intern(&Node::File(owner, FileKind::Data));
        assert_eq!(t.data_inodes(), vec![data]);
    }

    #[test]
    fn a_retired_number_keeps_its_node_and_size_and_the_node_gets_a_new_one() {
        let mut t = InodeTable::new();
        let data = Node::File(Owner::Var(GroupPath::root(), "v".into()), FileKind::Data);
        let old = t.intern(&data);
        assert_eq!(t.current_data_files(), vec![(old, data.clone())]);
        t.retire(&data, 96);
        let new = t.intern(&data);
        assert_ne!(new, old);
        assert_eq!(t.node(old), Some(&data));
        assert_eq!(t.retired_size(old), Some(96));
        assert_eq!(t.retired_size(new), None);
        assert_eq!(t.ino_of(&data), Some(new));
        assert_eq!(t.current_data_files(), vec![(new, data)]);
        let mut all = t.data_inodes();
        all.sort();
        assert_eq!(all, vec![old, new]);
    }

    #[test]
    fn a_renamed_object_and_its_new_name_lose_their_numbers_and_nothing_else_does() {
        let mut t = InodeTable::new();
        let root = GroupPath::root();
        let g = root.child("g");
        let var = |group: &GroupPath, name: &str| Owner::Var(group.clone(), name.into());
        let nodes_of = |owner: Owner| {
            vec![
                Node::Dir(owner.clone()),
                Node::AttrDir(owner.clone()),
                Node::File(owner.clone(), FileKind::Attr("units".into())),
                Node::File(owner, FileKind::Header),
            ]
        };
        let mut numbers = HashMap::new();
        for owner in [
            var(&root, "v"),
            var(&root, "vv"),
            var(&root, "v2"),
            Owner::Group(g.clone()),
            var(&g, "v"),
            Owner::Group(g.child("h")),
            var(&g.child("h"), "w"),
            Owner::Group(root.child("g2")),
            Owner::Group(root.child("gg")),
        ] {
            for node in nodes_of(owner) {
                numbers.insert(node.clone(), t.intern(&node));
            }
        }
        let data = Node::File(var(&root, "v"), FileKind::Data);
        let retired = t.intern(&data);
        t.retire(&data, 8);
        numbers.insert(data.clone(), t.intern(&data));
        let forgotten = |t: &mut InodeTable, owner: &Owner| {
            let mut inos = t.forget_within(owner);
            inos.sort();
            inos
        };
        let numbers_of = |owners: &[Owner]| {
            let mut inos: Vec<u64> = numbers
                .iter()
                .filter(|(node, _)| {
                    let (Node::Dir(o) | Node::AttrDir(o) | Node::File(o, _)) = node;
                    owners.contains(o)
                })
                .map(|(_, ino)| *ino)
                .collect();
            inos.push(retired);
            inos.sort();
            inos
        };
        // `mv v vv`: a variable, its files, attributes and retired numbers; not `v2`, not the
        // `v` of group `g`.
        let mut both = forgotten(&mut t, &var(&root, "v"));
        both.extend(forgotten(&mut t, &var(&root, "vv")));
        both.sort();
        assert_eq!(both, numbers_of(&[var(&root, "v"), var(&root, "vv")]));
        assert_eq!(t.node(retired), None);
        assert_eq!(t.retired_size(retired), None);
        assert_eq!(t.ino_of(&data), None);
        let fresh = t.intern(&data);
        assert!(numbers.values().all(|ino| *ino != fresh));
        // `mv g g3`: everything below `g`, not `g2` or `gg`.
        let mut inos = forgotten(&mut t, &Owner::Group(g.clone()));
        inos.retain(|ino| *ino != retired);
        let mut want = numbers_of(&[
            Owner::Group(g.clone()),
            var(&g, "v"),
            Owner::Group(g.child("h")),
            var(&g.child("h"), "w"),
        ]);
        want.retain(|ino| *ino != retired);
        assert_eq!(inos, want);
        for owner in [var(&root, "v2"), Owner::Group(root.child("gg"))] {
            let dir = Node::Dir(owner);
            assert_eq!(t.ino_of(&dir), numbers.get(&dir).copied());
            assert_eq!(t.node(numbers[&dir]), Some(&dir));
        }
        assert_eq!(
            t.node(InodeTable::ROOT),
            Some(&Node::Dir(Owner::Group(root)))
        );
    }

    #[test]
    fn parents() {
        let g = Owner::Group(GroupPath::root().child("g"));
        assert_eq!(
            parent(&Node::Dir(g.clone())),
            Node::Dir(Owner::Group(GroupPath::root()))
        );
        let attr = Node::File(g.clone(), FileKind::Attr("a".into()));
        assert_eq!(parent(&attr), Node::AttrDir(g.clone()));
        let v = Owner::Var(GroupPath::root().child("g"), "v".into());
        assert_eq!(parent(&Node::Dir(v.clone())), Node::Dir(g.clone()));
        assert_eq!(parent(&Node::File(v.clone(), FileKind::Data)), Node::Dir(v));
    }
}
