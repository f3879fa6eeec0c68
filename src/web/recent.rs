//! What the pages were told lately and believe for a while: a map whose
//! entries expire after a time and whose size is bounded (past the bound,
//! expired entries go first, then all). The forges' answers about visitors
//! and the ledgers' verifications are kept in one each.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug)]
pub(crate) struct Recent<K, V> {
    known: Mutex<HashMap<K, (Instant, V)>>,
    believed_for: Duration,
    limit: usize,
}

impl<K: Eq + Hash, V: Clone> Recent<K, V> {
    pub(crate) fn new(believed_for: Duration, limit: usize) -> Self {
        Self {
            known: Mutex::new(HashMap::new()),
            believed_for,
            limit,
        }
    }

    /// What was put for `key`, if it is still believed.
    pub(crate) fn get(&self, key: &K) -> Option<V> {
        let known = self.known.lock().expect("recent answers lock");
        known
            .get(key)
            .filter(|(at, _)| at.elapsed() < self.believed_for)
            .map(|(_, value)| value.clone())
    }

    pub(crate) fn put(&self, key: K, value: V) {
        let mut known = self.known.lock().expect("recent answers lock");
        if known.len() >= self.limit {
            known.retain(|_, (at, _)| at.elapsed() < self.believed_for);
            if known.len() >= self.limit {
                known.clear();
            }
        }
        known.insert(key, (Instant::now(), value));
    }
}
