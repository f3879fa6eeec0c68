//! The components' dependency graph: who depends on whom, a cycle as the
//! path that closes it, everything upstream of a component, and the order
//! that plans and applies upstreams first. The config checks it, fan-out
//! layers waves with it; both read it from here.

use std::collections::{BTreeSet, HashMap};

/// Components by index, with their `depends_on` edges both ways. Every
/// dependency must name a component of the graph (the config refuses any
/// other before building one).
#[derive(Debug)]
pub(crate) struct DependencyGraph<'a> {
    names: Vec<&'a str>,
    index: HashMap<&'a str, usize>,
    upstream: Vec<Vec<usize>>,
    downstream: Vec<Vec<usize>>,
}

impl<'a> DependencyGraph<'a> {
    /// The graph of `components`, each a name and the names it depends on.
    ///
    /// # Panics
    /// When a dependency names no component of the graph.
    pub(crate) fn new<D>(components: impl IntoIterator<Item = (&'a str, D)>) -> Self
    where
        D: IntoIterator<Item = &'a str>,
    {
        let (names, deps): (Vec<&'a str>, Vec<Vec<&'a str>>) = components
            .into_iter()
            .map(|(name, deps)| (name, deps.into_iter().collect()))
            .unzip();
        let index: HashMap<&'a str, usize> =
            names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        let mut upstream = vec![Vec::new(); names.len()];
        let mut downstream = vec![Vec::new(); names.len()];
        for (i, deps) in deps.iter().enumerate() {
            for d in deps {
                let j = *index
                    .get(d)
                    .unwrap_or_else(|| panic!("`{}` depends on unknown `{d}`", names[i]));
                upstream[i].push(j);
                downstream[j].push(i);
            }
        }
        Self {
            names,
            index,
            upstream,
            downstream,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.names.len()
    }

    pub(crate) fn index_of(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    pub(crate) fn name(&self, i: usize) -> &'a str {
        self.names[i]
    }

    /// What component `i` depends on, in `depends_on` order.
    pub(crate) fn upstream(&self, i: usize) -> &[usize] {
        &self.upstream[i]
    }

    /// What depends on component `i`, in declaration order.
    pub(crate) fn downstream(&self, i: usize) -> &[usize] {
        &self.downstream[i]
    }

    /// A dependency cycle as the path that closes it (`a → b → a`), if
    /// there is one: the first found from the first component declared.
    pub(crate) fn find_cycle(&self) -> Option<Vec<&'a str>> {
        #[derive(Clone, Copy, PartialEq)]
        enum Mark {
            New,
            Open,
            Done,
        }
        let mut marks = vec![Mark::New; self.len()];
        let mut stack: Vec<usize> = Vec::new();
        for start in 0..self.len() {
            if marks[start] != Mark::New {
                continue;
            }
            // Iterative depth-first search: (node, next edge to try).
            let mut work = vec![(start, 0usize)];
            marks[start] = Mark::Open;
            stack.push(start);
            while let Some((node, edge)) = work.last_mut() {
                let deps = &self.upstream[*node];
                if *edge < deps.len() {
                    let next = deps[*edge];
                    *edge += 1;
                    match marks[next] {
                        Mark::Open => {
                            let from = stack.iter().position(|n| *n == next).unwrap_or(0);
                            let mut cycle: Vec<&'a str> =
                                stack[from..].iter().map(|n| self.names[*n]).collect();
                            cycle.push(self.names[next]);
                            return Some(cycle);
                        }
                        Mark::New => {
                            marks[next] = Mark::Open;
                            stack.push(next);
                            work.push((next, 0));
                        }
                        Mark::Done => {}
                    }
                } else {
                    marks[*node] = Mark::Done;
                    stack.pop();
                    work.pop();
                }
            }
        }
        None
    }

    /// Every component `i` depends on, directly or not.
    pub(crate) fn upstream_closure(&self, i: usize) -> BTreeSet<&'a str> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![i];
        while let Some(i) = todo.pop() {
            for &j in &self.upstream[i] {
                if seen.insert(self.names[j]) {
                    todo.push(j);
                }
            }
        }
        seen
    }

    /// A path of dependencies that leaves `members` and comes back: from a
    /// member, through at least one component outside them, to a member (as
    /// `[from, outside…, to]`, each depending on the one before). `None`
    /// when there is none, so the members can sit in one wave.
    pub(crate) fn path_outside(&self, members: &BTreeSet<usize>) -> Option<Vec<usize>> {
        // Breadth first from the outsiders the members feed, so the path
        // named is a shortest one; `came_from` leads back to a member.
        let mut came_from: HashMap<usize, usize> = HashMap::new();
        let mut todo = std::collections::VecDeque::new();
        for &m in members {
            for &j in &self.downstream[m] {
                if !members.contains(&j) && !came_from.contains_key(&j) {
                    came_from.insert(j, m);
                    todo.push_back(j);
                }
            }
        }
        while let Some(i) = todo.pop_front() {
            for &j in &self.downstream[i] {
                if came_from.contains_key(&j) {
                    continue;
                }
                came_from.insert(j, i);
                if members.contains(&j) {
                    let mut path = vec![j];
                    let mut at = j;
                    while let Some(&before) = came_from.get(&at) {
                        path.push(before);
                        if members.contains(&before) {
                            break;
                        }
                        at = before;
                    }
                    path.reverse();
                    return Some(path);
                }
                todo.push_back(j);
            }
        }
        None
    }

    /// Components in dependency order (upstreams first), ties broken by
    /// name. A graph with a cycle leaves the cycle's components out.
    pub(crate) fn topological_order(&self) -> Vec<usize> {
        let mut pending: Vec<usize> = self.upstream.iter().map(Vec::len).collect();
        let mut ready: BTreeSet<(&str, usize)> = (0..self.len())
            .filter(|&i| pending[i] == 0)
            .map(|i| (self.names[i], i))
            .collect();
        let mut order = Vec::with_capacity(self.len());
        while let Some((_, i)) = ready.pop_first() {
            order.push(i);
            for &j in &self.downstream[i] {
                pending[j] -= 1;
                if pending[j] == 0 {
                    ready.insert((self.names[j], j));
                }
            }
        }
        order
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph<'a>(edges: &'a [(&'a str, &'a [&'a str])]) -> DependencyGraph<'a> {
        DependencyGraph::new(edges.iter().map(|(n, d)| (*n, d.iter().copied())))
    }

    #[test]
    fn a_path_that_leaves_the_members_and_comes_back_is_named() {
        let g = graph(&[
            ("a", &[]),
            ("x", &["a"]),
            ("b", &["x"]),
            ("c", &["a"]),
            ("y", &["c"]),
        ]);
        let set = |names: &[&str]| names.iter().map(|n| g.index_of(n).unwrap()).collect();
        let named = |path: Vec<usize>| path.into_iter().map(|i| g.name(i)).collect::<Vec<_>>();
        assert_eq!(
            g.path_outside(&set(&["a", "b"])).map(named),
            Some(vec!["a", "x", "b"])
        );
        assert_eq!(
            g.path_outside(&set(&["a", "c"])),
            None,
            "a direct edge stays inside"
        );
        assert_eq!(g.path_outside(&set(&["a", "x", "b"])), None);
        assert_eq!(g.path_outside(&set(&["b", "y"])), None, "unrelated members");
    }

    #[test]
    fn upstreams_come_first_and_ties_go_by_name() {
        let g = graph(&[
            ("dns", &["app"]),
            ("app", &["network", "database"]),
            ("database", &["network"]),
            ("network", &[]),
            ("cdn", &[]),
        ]);
        let order: Vec<&str> = g.topological_order().iter().map(|&i| g.name(i)).collect();
        assert_eq!(order, ["cdn", "network", "database", "app", "dns"]);
        let app = g.index_of("app").unwrap();
        assert_eq!(
            g.upstream_closure(app).into_iter().collect::<Vec<_>>(),
            ["database", "network"]
        );
        let dns = g.index_of("dns").unwrap();
        assert_eq!(g.downstream(app), [dns]);
        assert_eq!(g.find_cycle(), None);
    }

    #[test]
    fn a_cycle_is_the_path_that_closes_it() {
        let g = graph(&[
            ("network", &["app"]),
            ("database", &["network"]),
            ("app", &["database"]),
        ]);
        assert_eq!(
            g.find_cycle().unwrap(),
            ["network", "app", "database", "network"]
        );
        assert!(g.topological_order().is_empty());
        let self_loop = graph(&[("a", &["a"])]);
        assert_eq!(self_loop.find_cycle().unwrap(), ["a", "a"]);
    }
}
