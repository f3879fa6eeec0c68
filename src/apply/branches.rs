//! Which merges start an apply run: those into a branch `branches` names in
//! the default branch's config (the default branch alone when it names
//! none). A merge into the default branch is judged by that branch as it
//! stood before the merge, any other by the default branch as it stands,
//! so no pull request, and no broken file, widens where changes apply.

/// Why a merge starts no apply run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NotApplied {
    /// The pull request's base is not a branch whose merges apply.
    NotListed {
        base: String,
        default_branch: String,
        /// `branches` as written (`None`: not written, so the default branch).
        listed: Option<Vec<String>>,
    },
    /// The default branch's config does not read, so no branch applies.
    Unreadable {
        base: String,
        default_branch: String,
        why: String,
    },
}

/// Whether a merge into `base` applies, given the default branch and the
/// `branches` its config writes (or why that config does not read).
pub(crate) fn merge_applies(
    base: &str,
    default_branch: &str,
    listed: Result<Option<Vec<String>>, String>,
) -> Result<(), NotApplied> {
    match listed {
        Ok(None) if base == default_branch => Ok(()),
        Ok(Some(branches)) if branches.iter().any(|b| b == base) => Ok(()),
        Ok(listed) => Err(NotApplied::NotListed {
            base: base.to_owned(),
            default_branch: default_branch.to_owned(),
            listed,
        }),
        Err(why) => Err(NotApplied::Unreadable {
            base: base.to_owned(),
            default_branch: default_branch.to_owned(),
            why,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(names: &[&str]) -> Result<Option<Vec<String>>, String> {
        Ok(Some(names.iter().map(|n| (*n).to_owned()).collect()))
    }

    #[test]
    fn without_a_list_merges_into_the_default_branch_apply() {
        assert_eq!(merge_applies("main", "main", Ok(None)), Ok(()));
        assert_eq!(
            merge_applies("release", "main", Ok(None)),
            Err(NotApplied::NotListed {
                base: "release".into(),
                default_branch: "main".into(),
                listed: None,
            })
        );
    }

    #[test]
    fn with_a_list_merges_into_the_branches_it_names_apply() {
        assert_eq!(
            merge_applies("release", "main", listed(&["main", "release"])),
            Ok(())
        );
        assert!(merge_applies("hotfix", "main", listed(&["main", "release"])).is_err());
        // A list leaves the default branch out unless it names it too.
        assert_eq!(
            merge_applies("main", "main", listed(&["release"])),
            Err(NotApplied::NotListed {
                base: "main".into(),
                default_branch: "main".into(),
                listed: Some(vec!["release".into()]),
            })
        );
    }

    #[test]
    fn a_default_branch_config_that_does_not_read_applies_nothing() {
        assert_eq!(
            merge_applies("main", "main", Err("line 3: bad".into())),
            Err(NotApplied::Unreadable {
                base: "main".into(),
                default_branch: "main".into(),
                why: "line 3: bad".into(),
            })
        );
    }
}
