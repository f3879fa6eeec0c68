//! Fan-out derivation: from the paths a change touches, which components run,
//! which members (component × stage), in which waves, and what nobody claims.
//!
//! Pure and deterministic: the same config and paths always give the same
//! derivation and the same digest, so it can be shown, approved and re-derived.

use crate::config::glob::PatternIndex;
use crate::config::groups::{Batch, Fallback};
use crate::config::{RepoConfig, CONFIG_FILE};
use crate::model::canonical::digest_value;
use crate::model::{DependencyGraph, MemberId, StageName};
use serde::Serialize;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// `component@stage`, as [`MemberId`] spells it.
pub(crate) fn member_name(component: &str, stage: &str) -> String {
    MemberId::name_of(component, stage)
}

/// Why a component is not running.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum SkipReason {
    /// Nothing it claims changed, and nothing upstream of it runs.
    Unaffected,
    /// An upstream failed to plan, so its plan could not be made.
    Blocked,
    /// Selected, but `--stage` leaves out every stage it runs in.
    NotInStage,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Skipped {
    pub(crate) component: String,
    pub(crate) reason: SkipReason,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) member: Option<MemberId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) blocked_by: Option<String>,
}

/// What a change must run, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Derivation {
    /// Selected components with why each was selected, by name.
    pub(crate) selected: BTreeMap<String, String>,
    /// Members in wave order.
    pub(crate) members: Vec<MemberId>,
    /// Stages in order, dependency layers within each: lists of members.
    pub(crate) waves: Vec<Vec<MemberId>>,
    /// Components that do not run, by name.
    pub(crate) skipped: Vec<Skipped>,
    /// Changed paths no component claims and no ignore pattern covers.
    pub(crate) indeterminate: Vec<String>,
    /// The groups that plan and apply as one, each in one wave of its stage.
    pub(crate) groups: Vec<WaveGroup>,
    /// Members of groups that plan on their own, with why.
    pub(crate) fallbacks: Vec<Fallback>,
    pub(crate) digest: crate::model::Digest,
}

/// A group's members in one stage, planned with one call in one wave.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct WaveGroup {
    pub(crate) group: String,
    pub(crate) stage: StageName,
    /// Sorted.
    pub(crate) members: Vec<MemberId>,
    /// Which of the stage's waves (from 1).
    pub(crate) wave: usize,
}

impl Derivation {
    /// Every member that runs, in wave order.
    pub fn member_names(&self) -> impl ExactSizeIterator<Item = &str> {
        self.members.iter().map(MemberId::as_str)
    }

    /// Only `kept` of what runs (a drift run applies exactly the members
    /// its approval names), in the same waves; a group runs as one only
    /// when all of its members are kept.
    pub(crate) fn keep_only(&mut self, kept: &BTreeSet<MemberId>) {
        self.members.retain(|m| kept.contains(m));
        for wave in &mut self.waves {
            wave.retain(|m| kept.contains(m));
        }
        self.waves.retain(|wave| !wave.is_empty());
        self.groups
            .retain(|g| g.members.iter().all(|m| kept.contains(m)));
        self.selected
            .retain(|component, _| self.members.iter().any(|m| m.component() == component));
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FanOutError {
    #[error("unknown stage `{0}`; the config defines: {1}")]
    UnknownStage(String, String),
}

/// Everything the derivation reads.
pub struct FanOutInput<'a> {
    pub config: &'a RepoConfig,
    pub changed_paths: &'a [String],
    /// Components a change to `wavegate.toml` itself touches (see
    /// [`crate::config::repo::config_changed_components`]); empty when it did not change.
    pub config_changed: &'a BTreeSet<String>,
    /// Only this stage's members (`--stage`).
    pub stage: Option<&'a str>,
}

pub fn derive(input: &FanOutInput<'_>) -> Result<Derivation, FanOutError> {
    let config = input.config;
    if let Some(stage) = input.stage {
        if config.stage(stage).is_none() {
            let known: Vec<&str> = config.stages.iter().map(|s| s.name.as_str()).collect();
            return Err(FanOutError::UnknownStage(
                stage.to_owned(),
                known.join(", "),
            ));
        }
    }
    let graph = DependencyGraph::new(
        config
            .components
            .iter()
            .map(|c| (c.name.as_str(), c.depends_on.iter().map(String::as_str))),
    );

    // A claim selects its component in every stage, or (written with
    // `{stage}`) only in its own.
    let mut claims: PatternIndex<(usize, Option<&str>)> = PatternIndex::new();
    for (i, c) in config.components.iter().enumerate() {
        for p in &c.paths {
            claims.insert(p, (i, None));
        }
        for (stage, p) in &c.stage_paths {
            claims.insert(p, (i, Some(stage.as_str())));
        }
        // The files its commands run or read claim it too.
        for p in &c.files {
            claims.insert(p, (i, None));
        }
        for (stage, p) in &c.stage_files {
            claims.insert(p, (i, Some(stage.as_str())));
        }
    }
    let mut ignored = PatternIndex::new();
    for p in &config.ignore {
        ignored.insert(p, ());
    }

    // A component is selected by the least of the changed paths it claims, so
    // each keeps its least path so far: no need to sort every changed path.
    let mut least_path: Vec<Option<&str>> = vec![None; config.components.len()];
    // Members selected in one stage only, by (component, stage).
    let mut least_stage_path: BTreeMap<(usize, &str), &str> = BTreeMap::new();
    let mut indeterminate: Vec<&String> = Vec::new();
    for path in input.changed_paths {
        if path == CONFIG_FILE {
            continue;
        }
        let mut claimed = false;
        claims.for_each_match(path, |&(i, stage)| {
            claimed = true;
            match stage {
                None => {
                    if least_path[i].is_none_or(|least| path.as_str() < least) {
                        least_path[i] = Some(path);
                    }
                }
                Some(stage) => {
                    let least = least_stage_path.entry((i, stage)).or_insert(path);
                    if path.as_str() < *least {
                        *least = path.as_str();
                    }
                }
            }
        });
        if !claimed && !ignored.is_match(path) {
            indeterminate.push(path);
        }
    }
    indeterminate.sort();
    indeterminate.dedup();
    let indeterminate: Vec<String> = indeterminate.into_iter().cloned().collect();
    let mut reason: Vec<Option<String>> = least_path
        .iter()
        .map(|path| path.map(|path| format!("{path} changed")))
        .collect();
    let mut stage_reason: BTreeMap<(usize, &str), String> = least_stage_path
        .into_iter()
        .map(|(key, path)| (key, format!("{path} changed")))
        .collect();
    for name in input.config_changed {
        if let Some(i) = graph.index_of(name) {
            reason[i].get_or_insert_with(|| format!("its {CONFIG_FILE} entry changed"));
        }
    }

    // Everything downstream of a selected component runs too.
    let mut roots: Vec<usize> = (0..reason.len()).filter(|&i| reason[i].is_some()).collect();
    roots.sort_by_key(|&i| &config.components[i].name);
    let mut queue: VecDeque<(usize, usize)> = roots.iter().map(|&i| (i, i)).collect();
    while let Some((i, root)) = queue.pop_front() {
        for &j in graph.downstream(i) {
            if reason[j].is_none() {
                reason[j] = Some(format!("downstream of {}", config.components[root].name));
                queue.push_back((j, root));
            }
        }
    }
    // A member selected in one stage selects its downstream in that stage.
    let stage_roots: Vec<(usize, &str)> = stage_reason.keys().copied().collect();
    let mut queue: VecDeque<((usize, &str), usize)> =
        stage_roots.iter().map(|&(i, s)| ((i, s), i)).collect();
    while let Some(((i, stage), root)) = queue.pop_front() {
        for &j in graph.downstream(i) {
            if reason[j].is_none() && !stage_reason.contains_key(&(j, stage)) {
                stage_reason.insert(
                    (j, stage),
                    format!(
                        "downstream of {}",
                        member_name(&config.components[root].name, stage)
                    ),
                );
                queue.push_back(((j, stage), root));
            }
        }
    }

    let order = graph.topological_order();
    let mut groups = Vec::new();
    let mut fallbacks = Vec::new();
    let mut waves = Vec::new();
    let mut members = Vec::new();
    let mut in_some_stage = vec![false; config.components.len()];
    for stage in &config.stages {
        if input.stage.is_some_and(|s| s != stage.name) {
            continue;
        }
        let here = |i: usize| {
            (reason[i].is_some() || stage_reason.contains_key(&(i, stage.name.as_str())))
                && config.components[i].stages.contains(&stage.name)
        };
        let mut layer_of: Vec<Option<usize>> = vec![None; config.components.len()];
        for &i in &order {
            if !here(i) {
                continue;
            }
            in_some_stage[i] = true;
            let layer = graph
                .upstream(i)
                .iter()
                .filter_map(|&j| layer_of[j])
                .map(|l| l + 1)
                .max()
                .unwrap_or(0);
            layer_of[i] = Some(layer);
        }
        let mut stage_groups = Vec::new();
        if !config.groups.is_empty() {
            let present: Vec<MemberId> = order
                .iter()
                .filter(|&&i| layer_of[i].is_some())
                .map(|&i| MemberId::of(&config.components[i].name, stage.name.as_str()))
                .collect();
            fallbacks.extend(config.groups.fallbacks(&present));
            for batch in config.groups.batches(&present) {
                if let Batch::Group { group, members, .. } = batch {
                    stage_groups.push((group.name.clone(), members));
                }
            }
            if !stage_groups.is_empty() {
                layer_together(&graph, &stage_groups, &mut layer_of);
            }
        }
        let depth = layer_of.iter().flatten().max().map_or(0, |m| m + 1);
        let mut layers: Vec<Vec<MemberId>> = vec![Vec::new(); depth];
        for (i, layer) in layer_of.iter().enumerate() {
            if let Some(layer) = layer {
                layers[*layer].push(MemberId::of(
                    &config.components[i].name,
                    stage.name.as_str(),
                ));
            }
        }
        for (group, members) in stage_groups {
            let first = graph
                .index_of(members[0].component())
                .expect("grouped members are components");
            groups.push(WaveGroup {
                group,
                stage: stage.name.clone(),
                members,
                wave: layer_of[first].expect("grouped members are here") + 1,
            });
        }
        for mut layer in layers {
            layer.sort();
            members.extend(layer.iter().cloned());
            waves.push(layer);
        }
    }

    let mut selected = BTreeMap::new();
    let mut skipped = Vec::new();
    for (i, c) in config.components.iter().enumerate() {
        let why = reason[i].clone().or_else(|| {
            let by_stage: Vec<String> = stage_reason
                .range((i, "")..)
                .take_while(|((j, _), _)| *j == i)
                .map(|((_, stage), why)| format!("{why} ({stage})"))
                .collect();
            (!by_stage.is_empty()).then(|| by_stage.join("; "))
        });
        match &why {
            Some(why) if in_some_stage[i] => {
                selected.insert(c.name.clone(), why.clone());
            }
            Some(_) => skipped.push(Skipped {
                component: c.name.clone(),
                reason: SkipReason::NotInStage,
                member: None,
                blocked_by: None,
            }),
            None => skipped.push(Skipped {
                component: c.name.clone(),
                reason: SkipReason::Unaffected,
                member: None,
                blocked_by: None,
            }),
        }
    }
    skipped.sort_by(|a, b| a.component.cmp(&b.component));
    let mut bound = json!({
        "selected": selected,
        "waves": waves,
        "skipped": skipped,
        "indeterminate": indeterminate,
    });
    // What discoveries found, only where there are any: every other
    // derivation digests as before.
    let discovered: BTreeMap<&str, &serde_json::Value> = config
        .components
        .iter()
        .filter_map(|c| Some((c.name.as_str(), c.discovered.as_ref()?)))
        .collect();
    if !discovered.is_empty() {
        bound["discovered"] = json!(discovered);
    }
    if !groups.is_empty() || !fallbacks.is_empty() {
        bound["groups"] = json!(groups);
        bound["fallbacks"] = json!(fallbacks);
    }
    let digest = digest_value(&bound);
    Ok(Derivation {
        selected,
        members,
        waves,
        skipped,
        indeterminate,
        groups,
        fallbacks,
        digest,
    })
}

/// Layers a stage again so that each group's members (`groups`, as member
/// names) share one layer: the groups are taken as one node each (their
/// dependencies leave no group and come back, so that is still a DAG) and
/// every node sits one layer below its deepest upstream. `layer_of` has a
/// layer for exactly the components here, and gets the new ones.
fn layer_together(
    graph: &DependencyGraph<'_>,
    groups: &[(String, Vec<MemberId>)],
    layer_of: &mut [Option<usize>],
) {
    let n = layer_of.len();
    let mut node: Vec<usize> = (0..n).collect();
    let mut parts: Vec<Vec<usize>> = (0..n).map(|i| vec![i]).collect();
    for (_, members) in groups {
        let indices: Vec<usize> = members
            .iter()
            .filter_map(|m| graph.index_of(m.component()))
            .collect();
        let lead = indices[0];
        for &i in &indices[1..] {
            node[i] = lead;
            parts[i].clear();
        }
        parts[lead] = indices;
    }
    let present: Vec<bool> = layer_of.iter().map(Option::is_some).collect();
    let here = |i: usize| present[i];
    let mut pending = vec![0usize; n];
    for i in (0..n).filter(|&i| here(i)) {
        for &u in graph.upstream(i) {
            if here(u) && node[u] != node[i] {
                pending[node[i]] += 1;
            }
        }
    }
    let mut layer = vec![0usize; n];
    let mut ready: VecDeque<usize> = (0..n)
        .filter(|&i| here(i) && node[i] == i && pending[i] == 0)
        .collect();
    while let Some(at) = ready.pop_front() {
        for &i in &parts[at] {
            for &d in graph.downstream(i) {
                if !here(d) || node[d] == at {
                    continue;
                }
                let next = node[d];
                layer[next] = layer[next].max(layer[at] + 1);
                pending[next] -= 1;
                if pending[next] == 0 {
                    ready.push_back(next);
                }
            }
        }
    }
    for i in (0..n).filter(|&i| here(i)) {
        layer_of[i] = Some(layer[node[i]]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"
[defaults]
plan = ["./plan", "{component}", "{stage}", "{plan_file}"]
[[stage]]
name = "dev"
[[stage]]
name = "prod"
[[component]]
name = "network"
dir = "infra/network"
paths = ["infra/network/**", "modules/net/**"]
[[component]]
name = "database"
dir = "infra/database"
depends_on = ["network"]
[[component]]
name = "app"
dir = "infra/app"
depends_on = ["network", "database"]
inputs = { vpc_id = "network.vpc_id" }
[[component]]
name = "dns"
dir = "infra/dns"
depends_on = ["app"]
stages = ["prod"]
[[component]]
name = "monitoring"
dir = "infra/monitoring"
"#;

    fn config() -> RepoConfig {
        RepoConfig::parse("wavegate.toml", CONFIG).unwrap()
    }

    fn derive_paths(paths: &[&str], stage: Option<&str>) -> Derivation {
        derive_in(&config(), paths, stage)
    }

    fn derive_in(config: &RepoConfig, paths: &[&str], stage: Option<&str>) -> Derivation {
        let paths: Vec<String> = paths.iter().map(|p| p.to_string()).collect();
        derive(&FanOutInput {
            config,
            changed_paths: &paths,
            config_changed: &BTreeSet::new(),
            stage,
        })
        .unwrap()
    }

    #[test]
    fn a_directory_per_environment_selects_only_that_environments_member() {
        let config = RepoConfig::parse(
            "wavegate.toml",
            r#"
[defaults]
plan = ["./plan", "{component}", "{stage}", "{plan_file}"]
[[stage]]
name = "dev"
[[stage]]
name = "prod"
[[component]]
name = "app"
dir = "envs/{stage}/{component}"
[[component]]
name = "dns"
dir = "envs/{stage}/dns"
paths = ["envs/{stage}/dns/**", "modules/dns/**"]
depends_on = ["app"]
"#,
        )
        .unwrap();
        let derive_for = |changed: &[&str]| derive_in(&config, changed, None);
        let d = derive_for(&["envs/prod/app/main.tf"]);
        assert_eq!(d.waves, vec![vec!["app@prod"], vec!["dns@prod"]]);
        assert!(d.indeterminate.is_empty());
        assert_eq!(d.selected["app"], "envs/prod/app/main.tf changed (prod)");
        assert_eq!(d.selected["dns"], "downstream of app@prod (prod)");
        let d = derive_for(&[
            "envs/prod/app/b.tf",
            "envs/dev/app/b.tf",
            "envs/prod/app/a.tf",
            "envs/dev/app/b.tf",
        ]);
        assert_eq!(
            d.selected["app"], "envs/dev/app/b.tf changed (dev); envs/prod/app/a.tf changed (prod)",
            "each stage's member is selected by the least path that claims it"
        );
        let d = derive_for(&["modules/dns/zone.tf"]);
        assert_eq!(
            d.waves,
            vec![vec!["dns@dev"], vec!["dns@prod"]],
            "a shared path selects every stage"
        );
        let d = derive_for(&["envs/{stage}/app/main.tf"]);
        assert_eq!(
            d.indeterminate,
            ["envs/{stage}/app/main.tf"],
            "the placeholder is never literal"
        );
    }

    #[test]
    fn a_group_sits_in_one_wave_below_the_deepest_upstream_of_any_member() {
        let config = RepoConfig::parse(
            "wavegate.toml",
            r#"
[defaults]
plan = ["./plan", "{component}", "{plan_file}"]
[[stage]]
name = "dev"
[[stage]]
name = "prod"
[[group]]
name = "stack"
components = ["vpc", "db", "app"]
plan = ["./stack", "{members_file}"]
[[component]]
name = "base"
dir = "base"
[[component]]
name = "iam"
dir = "iam"
depends_on = ["base"]
[[component]]
name = "vpc"
dir = "vpc"
[[component]]
name = "db"
dir = "db"
depends_on = ["vpc"]
[[component]]
name = "app"
dir = "app"
depends_on = ["db", "iam"]
[[component]]
name = "dns"
dir = "dns"
depends_on = ["app"]
stages = ["prod"]
[[component]]
name = "lone"
dir = "lone"
group = "stack"
stages = ["prod"]
"#,
        )
        .unwrap();
        let derive_for = |changed: &[&str]| derive_in(&config, changed, None);
        let d = derive_for(&["base/main.tf", "vpc/main.tf", "lone/main.tf"]);
        assert_eq!(
            d.waves,
            vec![
                vec!["base@dev"],
                vec!["iam@dev"],
                vec!["app@dev", "db@dev", "vpc@dev"],
                vec!["base@prod"],
                vec!["iam@prod"],
                vec!["app@prod", "db@prod", "lone@prod", "vpc@prod"],
                vec!["dns@prod"],
            ],
            "the group waits for iam, which app reads; db reads vpc inside the group"
        );
        assert_eq!(
            d.groups,
            vec![
                WaveGroup {
                    group: "stack".into(),
                    stage: "dev".into(),
                    members: vec![
                        "app@dev".parse().unwrap(),
                        "db@dev".parse().unwrap(),
                        "vpc@dev".parse().unwrap()
                    ],
                    wave: 3,
                },
                WaveGroup {
                    group: "stack".into(),
                    stage: "prod".into(),
                    members: vec![
                        "app@prod".parse().unwrap(),
                        "db@prod".parse().unwrap(),
                        "lone@prod".parse().unwrap(),
                        "vpc@prod".parse().unwrap()
                    ],
                    wave: 3,
                },
            ]
        );
        assert!(d.fallbacks.is_empty());

        let d = derive_for(&["app/main.tf"]);
        assert_eq!(d.groups, vec![]);
        assert_eq!(
            d.fallbacks
                .iter()
                .map(|f| (f.member.as_str(), f.why.as_str()))
                .collect::<Vec<_>>(),
            [
                (
                    "app@dev",
                    "no other component of group `stack` is in this change in dev"
                ),
                (
                    "app@prod",
                    "no other component of group `stack` is in this change in prod"
                ),
            ]
        );
        let ungrouped = derive_paths(&["modules/net/vpc.tf"], None);
        assert_ne!(d.digest, ungrouped.digest);
    }

    #[test]
    fn a_change_selects_its_component_and_everything_downstream() {
        let d = derive_paths(&["modules/net/vpc.tf"], None);
        assert_eq!(
            d.waves,
            vec![
                vec!["network@dev"],
                vec!["database@dev"],
                vec!["app@dev"],
                vec!["network@prod"],
                vec!["database@prod"],
                vec!["app@prod"],
                vec!["dns@prod"],
            ]
        );
        assert_eq!(d.selected["network"], "modules/net/vpc.tf changed");
        assert_eq!(d.selected["dns"], "downstream of network");
        assert_eq!(
            d.skipped,
            vec![Skipped {
                component: "monitoring".into(),
                reason: SkipReason::Unaffected,
                member: None,
                blocked_by: None
            }]
        );
        assert!(d.indeterminate.is_empty());
    }

    #[test]
    fn independent_components_share_a_wave() {
        let d = derive_paths(
            &["infra/app/main.tf", "infra/monitoring/x.tf"],
            Some("prod"),
        );
        assert_eq!(
            d.waves,
            vec![vec!["app@prod", "monitoring@prod"], vec!["dns@prod"]]
        );
        assert_eq!(d.members, vec!["app@prod", "monitoring@prod", "dns@prod"]);
    }

    #[test]
    fn unclaimed_paths_are_indeterminate_unless_ignored() {
        let d = derive_paths(
            &[
                "README.md",
                "docs/a.png",
                "scripts/deploy.sh",
                "Makefile",
                "wavegate.toml",
            ],
            None,
        );
        assert_eq!(d.indeterminate, vec!["Makefile", "scripts/deploy.sh"]);
        assert!(d.members.is_empty());
        assert_eq!(d.skipped.len(), 5);
    }

    #[test]
    fn a_file_the_commands_run_or_read_selects_every_member_that_uses_it() {
        let config = RepoConfig::parse(
            "wavegate.toml",
            &CONFIG
                .replace(
                    "plan = [\"./plan\",",
                    "shared = [\"ci/lib/**\"]\nplan = [\"{root}/ci/plan.sh\",",
                )
                .replace(
                    "name = \"dns\"\n",
                    "name = \"dns\"\napply = [\"python3\", \"../../ci/zones/{stage}.py\", \"--root={root}/x\"]\nshared = [\"ci/dns.conf\"]\n",
                ),
        )
        .unwrap();
        let all = ["network", "database", "app", "dns", "monitoring"];
        for path in ["ci/plan.sh", "ci/lib/common.sh"] {
            let d = derive_in(&config, &[path], None);
            assert_eq!(d.selected.len(), all.len(), "{path}: {d:?}");
            assert_eq!(d.selected["monitoring"], format!("{path} changed"));
            assert!(d.indeterminate.is_empty(), "{path}");
        }
        // dns's own: its apply's script, per stage, and its `shared`.
        let d = derive_in(&config, &["ci/zones/prod.py"], None);
        assert_eq!(d.members, ["dns@prod"]);
        let d = derive_in(&config, &["ci/dns.conf"], None);
        assert_eq!(d.members, ["dns@prod"]);
        // A word that is no path, or one above the root, claims nothing.
        let d = derive_in(&config, &["x", "ci/other.sh"], None);
        assert_eq!(d.indeterminate, ["ci/other.sh", "x"]);
    }

    #[test]
    fn a_stage_filter_that_excludes_a_component_says_so() {
        let d = derive_paths(&["infra/dns/zone.tf"], Some("dev"));
        assert!(d.members.is_empty());
        assert_eq!(
            d.skipped
                .iter()
                .find(|s| s.component == "dns")
                .unwrap()
                .reason,
            SkipReason::NotInStage
        );
        let config = config();
        let err = derive(&FanOutInput {
            config: &config,
            changed_paths: &[],
            config_changed: &BTreeSet::new(),
            stage: Some("qa"),
        })
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown stage `qa`; the config defines: dev, prod"
        );
    }

    #[test]
    fn config_changes_select_the_touched_components() {
        let config = config();
        let changed = BTreeSet::from(["database".to_owned()]);
        let paths = vec!["wavegate.toml".to_owned()];
        let d = derive(&FanOutInput {
            config: &config,
            changed_paths: &paths,
            config_changed: &changed,
            stage: Some("dev"),
        })
        .unwrap();
        assert_eq!(d.waves, vec![vec!["database@dev"], vec!["app@dev"]]);
        assert_eq!(d.selected["database"], "its wavegate.toml entry changed");
    }

    #[test]
    fn the_derivation_is_deterministic_and_digested() {
        let a = derive_paths(&["infra/app/b.tf", "infra/app/a.tf", "x"], None);
        let b = derive_paths(
            &["x", "infra/app/a.tf", "infra/app/b.tf", "infra/app/a.tf"],
            None,
        );
        assert_eq!(a, b);
        assert_eq!(a.selected["app"], "infra/app/a.tf changed");
        let c = derive_paths(&["infra/app/a.tf"], None);
        assert_ne!(
            a.digest, c.digest,
            "an indeterminate path is part of the derivation"
        );
    }
}
