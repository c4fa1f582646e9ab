//! The inode table: a stable number for every path ever looked up.

use std::collections::HashMap;

use super::layout::{FileKind, Node, Owner};

/// Maps inode numbers to layout nodes and back. Numbers are never reused during a mount, so a
/// node that disappears after a metadata reload keeps its number and simply stops resolving.
#[derive(Debug)]
pub struct InodeTable {
    by_ino: HashMap<u64, Node>,
    by_node: HashMap<Node, u64>,
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
            next: Self::ROOT + 1,
        };
        let root = Node::Dir(Owner::Group(Vec::new()));
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
        Node::Dir(Owner::Group(path)) => {
            let mut p = path.clone();
            p.pop();
            Node::Dir(Owner::Group(p))
        }
        Node::Dir(Owner::Var(path, _)) => Node::Dir(Owner::Group(path.clone())),
        Node::AttrDir(o) => Node::Dir(o.clone()),
        Node::File(o, FileKind::Attr(_)) => Node::AttrDir(o.clone()),
        Node::File(o, _) => Node::Dir(o.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_is_stable() {
        let mut t = InodeTable::new();
        let v = Node::Dir(Owner::Var(vec![], "v".into()));
        let a = t.intern(&v);
        assert_ne!(a, InodeTable::ROOT);
        assert_eq!(t.intern(&v), a);
        assert_eq!(t.node(a), Some(&v));
        let root = Node::Dir(Owner::Group(vec![]));
        assert_eq!(t.intern(&root), InodeTable::ROOT);
        assert_eq!(t.node(999), None);
    }

    #[test]
    fn data_inodes_are_only_data_files() {
        let mut t = InodeTable::new();
        let owner = Owner::Var(vec![], "v".into());
        t.intern(&Node::Dir(owner.clone()));
        t.intern(&Node::File(owner.clone(), FileKind::Header));
        let data = t.intern(&Node::File(owner, FileKind::Data));
        assert_eq!(t.data_inodes(), vec![data]);
    }

    #[test]
    fn parents() {
        let g = Owner::Group(vec!["g".into()]);
        assert_eq!(
            parent(&Node::Dir(g.clone())),
            Node::Dir(Owner::Group(vec![]))
        );
        let attr = Node::File(g.clone(), FileKind::Attr("a".into()));
        assert_eq!(parent(&attr), Node::AttrDir(g.clone()));
        let v = Owner::Var(vec!["g".into()], "v".into());
        assert_eq!(parent(&Node::Dir(v.clone())), Node::Dir(g.clone()));
        assert_eq!(parent(&Node::File(v.clone(), FileKind::Data)), Node::Dir(v));
    }
}
