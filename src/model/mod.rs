//! The vocabulary every other module speaks, with no I/O and no import of
//! the rest of the crate: who and where ([`RepoId`], [`PrNumber`],
//! [`CommitSha`], [`User`], [`ForgeKind`]), what was planned ([`Digest`],
//! canonical JSON, [`MemberId`] `component@stage`, [`StageName`]) and where
//! approvals are recorded ([`GateId`]), and the components' dependency
//! graph ([`DependencyGraph`]). Each has one `Display`/`FromStr`, so a
//! name is spelled and read in one place.

pub mod canonical;
mod digest;
mod gate_id;
mod graph;
mod ids;
mod member;

pub use digest::Digest;
pub use gate_id::GateId;
pub use graph::DependencyGraph;
pub use ids::{CommitSha, ForgeKind, PrNumber, RepoId, User};
pub use member::{MemberId, StageName};

#[cfg(test)]
mod tests {
    /// `model` is the leaf: nothing in it imports the rest of the crate.
    #[test]
    fn model_imports_nothing_of_the_crate() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/model");
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            let imports: Vec<&str> = text
                .lines()
                .filter(|l| l.contains("crate::") && !l.contains("crate::model"))
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect();
            assert!(
                imports.is_empty(),
                "{} imports outside model: {imports:?}",
                path.display()
            );
        }
    }
}
