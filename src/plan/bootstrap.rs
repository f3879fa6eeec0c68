//! `wavegate apply --local`: deploys every member of one revision of a
//! local checkout, wave by wave, with no gate, no approval and no forge, so
//! that a new estate has state for the bot's plans to read. Each member is
//! planned with its upstreams' fresh outputs, then applied with that plan,
//! by the same commands in the same sandbox as the bot's; the first member
//! that does not apply stops what comes after it. Every apply is appended
//! to a local ledger of its own (JSON lines, each hashing the one before),
//! never to the bot's.

use super::engine::{prepare, PlanError, PlanOptions};
use super::outcome::ApplyOutcome;
use crate::model::MemberId;
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest as _, Sha256};
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// What became of one member.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "outcome")]
pub enum Applied {
    Applied {
        plan_digest: String,
    },
    /// Its plan or its apply failed, or an upstream of it did.
    Failed {
        error: String,
    },
    /// Not tried: something before it failed.
    NotTried,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Bootstrap {
    /// The revision deployed, resolved.
    pub commit: String,
    /// Every member, in wave order, with what became of it.
    pub members: Vec<(MemberId, Applied)>,
}

impl Bootstrap {
    pub fn succeeded(&self) -> bool {
        self.members
            .iter()
            .all(|(_, applied)| matches!(applied, Applied::Applied { .. }))
    }
}

/// Deploys `options.head` (base and head alike) member by member, in
/// waves, appending each apply to `ledger`.
pub async fn apply_local(options: &PlanOptions, ledger: &Path) -> Result<Bootstrap, PlanError> {
    let mut options = options.clone();
    options.bootstrap = true;
    options.merged = true;
    let mut prepared = prepare(&options)?;
    let mut bench = prepared.workbench(&options)?;
    prepared.discover(&options, &mut bench).await?;
    let mut ledger = LocalLedger::open(ledger)?;
    let mut members = Vec::new();
    let mut stopped = false;
    for wave in &prepared.derivation.waves {
        if stopped {
            members.extend(wave.iter().map(|m| (m.clone(), Applied::NotTried)));
            continue;
        }
        bench.plan_wave(wave).await?;
        for member in wave {
            let mut applied = None;
            // An apply that asks to be planned again (a stale plan, a
            // workspace it had to create) is planned and applied again:
            // nothing here waits for an approval of the new plan.
            for round in 0..=MAX_REPLANS {
                if round > 0 {
                    bench.plan_wave(std::slice::from_ref(member)).await?;
                }
                let (outcome, replan) = apply_planned(&mut bench, member).await;
                applied = Some(outcome);
                if !replan {
                    break;
                }
            }
            let applied = applied.expect("tried at least once");
            stopped |= !matches!(applied, Applied::Applied { .. });
            ledger.append(&prepared.head, member, &applied)?;
            members.push((member.clone(), applied));
        }
    }
    Ok(Bootstrap {
        commit: prepared.head,
        members,
    })
}

/// How often one member's apply may ask to be planned again.
const MAX_REPLANS: usize = 2;

/// Applies `member` as planned: what became of it, and whether its apply
/// asked to be planned again.
async fn apply_planned(bench: &mut super::engine::Workbench, member: &MemberId) -> (Applied, bool) {
    match bench.outcome(member).map(|o| (o.plan.as_ref(), o)) {
        Some((Some(plan), _)) => {
            let plan_digest = plan.plan_digest.to_string();
            tracing::info!(target: "wavegate::apply", %member, "applying");
            match bench.apply(member, None).await.outcome {
                ApplyOutcome::Applied(outputs) => {
                    bench.record_applied(member, outputs);
                    (Applied::Applied { plan_digest }, false)
                }
                other => {
                    let replan = matches!(other, ApplyOutcome::Replan(_));
                    (
                        Applied::Failed {
                            error: not_applied(other),
                        },
                        replan,
                    )
                }
            }
        }
        Some((None, outcome)) => (
            Applied::Failed {
                error: outcome
                    .error
                    .clone()
                    .unwrap_or_else(|| "it did not plan".into()),
            },
            false,
        ),
        None => (
            Applied::Failed {
                error: "it was not planned".into(),
            },
            false,
        ),
    }
}

/// Why an apply that did not answer with outputs did not apply, in words.
fn not_applied(outcome: ApplyOutcome) -> String {
    match outcome {
        ApplyOutcome::Applied(_) => "it applied".into(),
        ApplyOutcome::Failed(why) | ApplyOutcome::NotReached(why) => why,
        ApplyOutcome::Replan(why) => format!(
            "its apply asked to be planned again{}, more often than `apply --local` plans again: run it again",
            why.map(|w| format!(" ({w})")).unwrap_or_default()
        ),
        ApplyOutcome::Held(holder) => {
            format!("its apply answered that {holder} holds it: run again once it lets go")
        }
        ApplyOutcome::StoodDown(why) => format!("its apply stood down: {why}"),
    }
}

/// The local ledger: one JSON object a line, each with the hash of the
/// line before it (`prev`), so an edit or a removed line shows.
struct LocalLedger {
    file: std::fs::File,
    path: PathBuf,
    last: String,
}

impl LocalLedger {
    fn open(path: &Path) -> Result<Self, PlanError> {
        let context = |what: &str| format!("{what} the local ledger {}", path.display());
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                PlanError::Usage(format!("{}: {e}", context("creating the folder of")))
            })?;
        }
        let last = match std::fs::read_to_string(path) {
            Ok(text) => text
                .lines()
                .last()
                .map(|line| hex::encode(Sha256::digest(line.as_bytes())))
                .unwrap_or_default(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(PlanError::Usage(format!("{}: {e}", context("reading")))),
        };
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| PlanError::Usage(format!("{}: {e}", context("opening"))))?;
        Ok(Self {
            file,
            path: path.to_owned(),
            last,
        })
    }

    fn append(
        &mut self,
        commit: &str,
        member: &MemberId,
        applied: &Applied,
    ) -> Result<(), PlanError> {
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let mut entry = serde_json::to_value(applied).expect("an outcome serialises");
        let fields = entry.as_object_mut().expect("an object");
        fields.insert("member".into(), Value::from(member.as_str()));
        fields.insert("commit".into(), Value::from(commit));
        fields.insert("at".into(), Value::from(at.to_string()));
        fields.insert("prev".into(), Value::from(self.last.clone()));
        let line = entry.to_string();
        writeln!(self.file, "{line}").map_err(|e| {
            PlanError::Usage(format!(
                "writing the local ledger {}: {e}",
                self.path.display()
            ))
        })?;
        self.last = hex::encode(Sha256::digest(line.as_bytes()));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_line_of_the_local_ledger_hashes_the_one_before_across_runs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/ledger.jsonl");
        let applied = Applied::Applied {
            plan_digest: "sha256:ab".into(),
        };
        let mut ledger = LocalLedger::open(&path).unwrap();
        ledger
            .append("c0ffee", &"net@dev".into(), &applied)
            .unwrap();
        drop(ledger);
        let mut ledger = LocalLedger::open(&path).unwrap();
        let failed = Applied::Failed {
            error: "boom".into(),
        };
        ledger.append("c0ffee", &"app@dev".into(), &failed).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0]["prev"], "");
        assert_eq!(lines[0]["member"], "net@dev");
        assert_eq!(lines[0]["outcome"], "applied");
        assert_eq!(lines[0]["plan_digest"], "sha256:ab");
        let first = text.lines().next().unwrap();
        assert_eq!(
            lines[1]["prev"],
            hex::encode(Sha256::digest(first.as_bytes()))
        );
        assert_eq!(
            (&lines[1]["outcome"], &lines[1]["error"]),
            (&Value::from("failed"), &Value::from("boom"))
        );
    }
}
