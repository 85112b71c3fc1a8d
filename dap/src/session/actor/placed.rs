//! The adapter's breakpoint table as stepd placed it: which stepd
//! breakpoints each adapter breakpoint stands for, on which line each
//! landed, and which adapter ids stepd took back. No I/O: the actor sends
//! the breakpoints; this remembers what came of it and answers which stepd
//! breakpoints a stop names.

use std::collections::{HashMap, HashSet};

#[derive(Debug, Default)]
pub(super) struct Placed {
    /// Adapter breakpoint id → the stepd breakpoints sharing that entry.
    by_id: HashMap<i64, Vec<String>>,
    /// (path, placed line) → stepd breakpoint ids, for adapters whose stops
    /// do not name the breakpoint (lldb-vscode 14 sends no hitBreakpointIds).
    by_line: HashMap<(String, u32), Vec<String>>,
    /// Adapter breakpoint ids stepd had and took back: a stop naming only
    /// these raced their removal.
    retired: HashSet<i64>,
}

impl Placed {
    /// Takes back everything placed, before the breakpoints are sent anew.
    pub fn retire_all(&mut self) {
        self.retired.extend(self.by_id.drain().map(|(id, _)| id));
        self.by_line.clear();
    }

    /// The adapter placed stepd breakpoint `bp` as its breakpoint `id` (when
    /// it gave one), on `line` of a source file (for a source breakpoint).
    pub fn note(&mut self, bp: &str, id: Option<i64>, line: Option<(&str, u32)>) {
        if let Some(id) = id {
            self.retired.remove(&id);
            add(self.by_id.entry(id).or_default(), bp);
        }
        if let Some((path, line)) = line {
            add(self.by_line.entry((path.to_owned(), line)).or_default(), bp);
        }
    }

    /// The stepd breakpoints adapter breakpoint `id` stands for.
    pub fn of(&self, id: i64) -> &[String] {
        self.by_id.get(&id).map_or(&[], Vec::as_slice)
    }

    /// The stepd breakpoints a stop names: those of the adapter's ids it
    /// gives; when it gives none that are stepd's and `by_line` (a
    /// breakpoint stop, or a step that landed on a line), those placed on
    /// the line it stopped at.
    pub fn named_by(&self, hit_ids: &[i64], at: Option<(&str, u32)>, by_line: bool) -> Vec<String> {
        let named: Vec<String> = hit_ids
            .iter()
            .flat_map(|id| self.of(*id))
            .cloned()
            .collect();
        if !named.is_empty() || !by_line {
            return named;
        }
        at.and_then(|(path, line)| self.by_line.get(&(path.to_owned(), line)))
            .cloned()
            .unwrap_or_default()
    }

    /// Whether a stop names adapter breakpoints, all of which stepd took
    /// back: a hit that raced their removal.
    pub fn only_retired(&self, hit_ids: &[i64]) -> bool {
        !hit_ids.is_empty() && hit_ids.iter().all(|id| self.retired.contains(id))
    }

    /// Adapter breakpoints in place.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether the adapter has none of stepd's.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

fn add(ids: &mut Vec<String>, bp: &str) {
    if !ids.iter().any(|id| id == bp) {
        ids.push(bp.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_names_the_breakpoints_of_the_adapters_ids_else_of_its_line() {
        let mut placed = Placed::default();
        placed.note("a", Some(1), Some(("/app/main.py", 3)));
        placed.note("b", Some(1), Some(("/app/main.py", 3)));
        placed.note("c", None, Some(("/app/main.py", 7)));
        placed.note("a", Some(1), Some(("/app/main.py", 3)));
        assert_eq!(
            placed.of(1),
            ["a", "b"],
            "one entry for two breakpoints, each once"
        );
        assert_eq!(
            placed.named_by(&[1], Some(("/app/main.py", 7)), true),
            ["a", "b"]
        );
        assert_eq!(
            placed.named_by(&[], Some(("/app/main.py", 7)), true),
            ["c"],
            "an adapter that names none: the line's"
        );
        assert!(
            placed
                .named_by(&[], Some(("/app/main.py", 7)), false)
                .is_empty(),
            "not for a stop that is no breakpoint's"
        );
        assert!(placed.named_by(&[9], None, true).is_empty());
    }

    #[test]
    fn what_was_taken_back_is_known_as_such_until_placed_again() {
        let mut placed = Placed::default();
        placed.note("a", Some(1), Some(("/app/main.py", 3)));
        placed.note("b", Some(2), None);
        placed.retire_all();
        assert!(placed.is_empty());
        assert!(
            placed
                .named_by(&[1], Some(("/app/main.py", 3)), true)
                .is_empty()
        );
        assert!(placed.only_retired(&[1, 2]));
        assert!(!placed.only_retired(&[1, 3]), "an id stepd never had");
        assert!(!placed.only_retired(&[]), "a stop that names none");
        placed.note("a", Some(1), None);
        assert!(!placed.only_retired(&[1]), "placed again");
        assert_eq!(placed.len(), 1);
    }
}
