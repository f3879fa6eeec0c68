//! The run key: how a Forgejo Actions run proves, besides its job's
//! single-use token, that it is a run of the repository, where only runs
//! read the key. A run's inputs are in its event payload, which anyone who
//! may read the repository's runs can read; the repository's Actions secret
//! [`SECRET_NAME`] is not. So each repository has a key of its own, derived
//! from the ledger key (every replica derives the same; none is stored),
//! which the bot sets as that secret before it dispatches there; the
//! workflow hands it to `wavegate job run`, which sends with its token a
//! proof made with it ([`PROOF_HEADER`]): HMAC-SHA256 of the job and the
//! token. A claim without a proof that verifies uses nothing up.

use crate::model::RepoId;
use hmac::{Hmac, Mac as _};
use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The repository's Actions secret that holds its run key.
pub const SECRET_NAME: &str = "WAVEGATE_RUN_KEY";
/// What the run keys are derived for, from the ledger key.
pub(crate) const KEY_PURPOSE: &str = "wavegate: the run keys of Forgejo Actions runs";
/// The claim's header that carries the proof, in hex.
pub(crate) const PROOF_HEADER: &str = "x-wavegate-run-proof";

type HmacSha256 = Hmac<sha2::Sha256>;

/// How long a secret this process set is taken to still hold its key:
/// someone may delete or change it, and its runs then fail to claim.
const SET_AGAIN_AFTER: Duration = Duration::from_secs(3600);

/// The secret every repository's run key is derived from, and when this
/// process last set each repository's. Shows nothing of the secret.
pub struct RunKeys {
    secret: [u8; 32],
    set: Mutex<HashMap<RepoId, Instant>>,
}

impl RunKeys {
    /// The run keys derived from `secret` (the ledger key's, for
    /// [`KEY_PURPOSE`]).
    pub(crate) fn new(secret: [u8; 32]) -> Self {
        Self {
            secret,
            set: Mutex::default(),
        }
    }

    /// `repo`'s run key: HMAC-SHA256 of its ledger key (`forgejo:acme/infra`).
    pub(crate) fn of(&self, repo: &RepoId) -> RunKey {
        let mut mac = HmacSha256::new_from_slice(&self.secret).expect("HMAC takes any key");
        mac.update(repo.ledger_key().as_bytes());
        RunKey(mac.finalize().into_bytes().into())
    }

    /// Whether this process set `repo`'s secret already.
    pub(crate) fn is_set(&self, repo: &RepoId) -> bool {
        self.set
            .lock()
            .expect("not poisoned")
            .get(repo)
            .is_some_and(|at| at.elapsed() < SET_AGAIN_AFTER)
    }

    /// Remembers that `repo`'s secret holds its key.
    pub(crate) fn mark_set(&self, repo: &RepoId) {
        self.set
            .lock()
            .expect("not poisoned")
            .insert(repo.clone(), Instant::now());
    }
}

impl fmt::Debug for RunKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RunKeys(..)")
    }
}

/// One repository's run key: 32 bytes, held by the forge as hex.
pub(crate) struct RunKey([u8; 32]);

impl RunKey {
    /// The key as a run reads it from [`SECRET_NAME`]; `None` unless it is
    /// the hex of 32 bytes.
    pub(crate) fn from_hex(text: &str) -> Option<Self> {
        hex::decode(text.trim())
            .ok()
            .and_then(|bytes| bytes.try_into().ok())
            .map(Self)
    }

    /// The value of the secret.
    pub(crate) fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    fn mac(&self, job: &str, token: &str) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.0).expect("HMAC takes any key");
        mac.update(job.as_bytes());
        mac.update(b"\n");
        mac.update(token.as_bytes());
        mac
    }

    /// The proof a run sends with `token` to claim `job`, in hex.
    pub(crate) fn proof(&self, job: &str, token: &str) -> String {
        hex::encode(self.mac(job, token).finalize().into_bytes())
    }

    /// Whether `proof` (hex) is this key's for `job` and `token`, compared
    /// in constant time.
    pub(crate) fn verifies(&self, job: &str, token: &str, proof: &str) -> bool {
        hex::decode(proof.trim())
            .is_ok_and(|bytes| self.mac(job, token).verify_slice(&bytes).is_ok())
    }
}

impl fmt::Debug for RunKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RunKey(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ForgeKind;

    fn repo(full_name: &str) -> RepoId {
        RepoId {
            forge: ForgeKind::Forgejo,
            full_name: full_name.into(),
        }
    }

    #[test]
    fn a_proof_verifies_with_its_key_job_and_token_only() {
        let keys = RunKeys::new([7; 32]);
        let key = keys.of(&repo("acme/infra"));
        let proof = key.proof("job-1", "token-1");
        assert!(key.verifies("job-1", "token-1", &proof));
        assert!(!key.verifies("job-2", "token-1", &proof), "another job");
        assert!(!key.verifies("job-1", "token-2", &proof), "another token");
        assert!(
            !keys
                .of(&repo("acme/other"))
                .verifies("job-1", "token-1", &proof),
            "another repository's key"
        );
        assert!(
            !RunKeys::new([8; 32])
                .of(&repo("acme/infra"))
                .verifies("job-1", "token-1", &proof),
            "another ledger key's"
        );
        assert!(!key.verifies("job-1", "token-1", ""), "no proof");
        assert!(!key.verifies("job-1", "token-1", "not hex"));
        assert!(!key.verifies("job-1", "token-1", &proof[..32]), "a prefix");
    }

    #[test]
    fn a_key_reads_back_from_its_secret_and_shows_nothing() {
        let keys = RunKeys::new([7; 32]);
        let key = keys.of(&repo("acme/infra"));
        let text = key.to_hex();
        assert_eq!(text.len(), 64);
        assert_eq!(text, RunKeys::new([7; 32]).of(&repo("acme/infra")).to_hex());
        let read = RunKey::from_hex(&format!("{text}\n")).unwrap();
        assert_eq!(read.proof("j", "t"), key.proof("j", "t"));
        assert!(RunKey::from_hex("abcd").is_none());
        assert!(!format!("{key:?}{keys:?}").contains(&text));
        assert!(!keys.is_set(&repo("acme/infra")));
        keys.mark_set(&repo("acme/infra"));
        assert!(keys.is_set(&repo("acme/infra")) && !keys.is_set(&repo("acme/other")));
    }
}
