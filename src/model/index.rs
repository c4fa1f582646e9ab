//! A name index of the variables, so that finding one by name does not scan its group (a
//! mount resolves names at every request, and groups of thousands of variables exist).

use std::collections::HashMap;
use std::sync::RwLock;

use super::{GroupId, VarId, Variable};

/// Variables by group and name. The arena's fields are public and change without telling the
/// index, so it is only a hint: every hit is checked against the arena, and an index found out
/// of date is dropped and rebuilt at the next lookup.
#[derive(Default)]
pub(super) struct NameIndex(RwLock<Option<HashMap<GroupId, HashMap<String, VarId>>>>);

/// What the index knows about a name.
pub(super) enum Hint {
    /// The index points here (still to be checked).
    At(VarId),
    /// The index has no such name.
    Absent,
}

impl NameIndex {
    /// The index's answer for `name` in `group`, building the index first if needed.
    pub(super) fn hint(&self, vars: &[Variable], group: GroupId, name: &str) -> Hint {
        {
            let map = self.0.read().unwrap_or_else(|e| e.into_inner());
            if let Some(map) = map.as_ref() {
                return match map.get(&group).and_then(|g| g.get(name)) {
                    Some(v) => Hint::At(*v),
                    None => Hint::Absent,
                };
            }
        }
        let mut built: HashMap<GroupId, HashMap<String, VarId>> = HashMap::new();
        for (i, v) in vars.iter().enumerate() {
            built
                .entry(v.group)
                .or_default()
                .insert(v.name.clone(), VarId(i));
        }
        let hint = match built.get(&group).and_then(|g| g.get(name)) {
            Some(v) => Hint::At(*v),
            None => Hint::Absent,
        };
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Some(built);
        hint
    }

    /// Records that `name` in `group` is `var` (a variable added, or one found that the index
    /// did not know), if there is an index to keep: rebuilding it would cost a pass over every
    /// variable, once per variable when they are added one by one.
    pub(super) fn learn(&self, group: GroupId, name: &str, var: VarId) {
        let mut map = self.0.write().unwrap_or_else(|e| e.into_inner());
        if let Some(map) = map.as_mut() {
            map.entry(group).or_default().insert(name.to_string(), var);
        }
    }

    /// Forgets the index (it disagreed with the arena).
    pub(super) fn invalidate(&self) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

impl Clone for NameIndex {
    /// A copy starts without an index: the copy's arena may diverge.
    fn clone(&self) -> Self {
        NameIndex::default()
    }
}

impl PartialEq for NameIndex {
    /// The index is derived data: it never makes two datasets differ.
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for NameIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NameIndex")
    }
}

#[cfg(test)]
mod tests {
    use crate::model::{Dataset, GroupId, NcType, VarId, VarStorage, Variable};

    fn add(ds: &mut Dataset, group: GroupId, name: &str) -> VarId {
        ds.add_var(Variable {
            name: name.into(),
            group,
            nctype: NcType::Int,
            dims: vec![],
            string_width: 0,
            attrs: vec![],
            storage: VarStorage::default(),
        })
    }

    #[test]
    fn finds_variables_and_follows_changes_made_behind_its_back() {
        let mut ds = Dataset::new();
        let g = ds.add_group(Dataset::ROOT, "g");
        let a = add(&mut ds, Dataset::ROOT, "a");
        let b = add(&mut ds, g, "a");
        assert_eq!(ds.find_var_in(Dataset::ROOT, "a"), Some(a));
        assert_eq!(ds.find_var_in(g, "a"), Some(b));
        assert_eq!(ds.find_var_in(g, "b"), None);
        // A rename through the public fields: the old name is gone, the new one found.
        ds.vars[a.0].name = "renamed".into();
        assert_eq!(ds.find_var_in(Dataset::ROOT, "a"), None);
        assert_eq!(ds.find_var_in(Dataset::ROOT, "renamed"), Some(a));
        // A variable added after the index was built.
        let c = add(&mut ds, Dataset::ROOT, "c");
        assert_eq!(ds.find_var_in(Dataset::ROOT, "c"), Some(c));
        // A copy answers alike and compares equal.
        let copy = ds.clone();
        assert_eq!(copy.find_var_in(g, "a"), Some(b));
        assert_eq!(copy, ds);
    }
}
