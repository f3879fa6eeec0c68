//! Where the server's ledger key lives (docs/approvals-and-applying.md,
//! docs/operations.md): the file
//! `WAVEGATE_LEDGER_KEY_FILE` names (PKCS#8 PEM, e.g. from `openssl genpkey
//! -algorithm ed25519`), or else `ledger/key.pem` in the data dir, which the
//! server generates at first start: mode 0600 in a 0700 directory. Only the
//! server reads it: no command is given it, the sandbox binds neither the
//! data dir nor this file, and `wavegate ledger key` prints its public half
//! for `wavegate ledger verify --key`.

use crate::model::signing::{LedgerKey, PublicKey};
use anyhow::{bail, Context, Result};
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

/// The variable naming the key file.
pub(crate) const VAR: &str = "WAVEGATE_LEDGER_KEY_FILE";

/// Where in the data dir the server keeps the key it generated.
pub fn in_data_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("ledger").join("key.pem")
}

/// The key `WAVEGATE_LEDGER_KEY_FILE` names, checked: readable, an Ed25519
/// key, readable by its owner and group only. Every error names the
/// variable and the fix.
pub(crate) fn read_named(path: &Path) -> Result<LedgerKey> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "{VAR} names `{shown}`, which cannot be read; give the path of the ledger key \
             (create one with `openssl genpkey -algorithm ed25519 -out {shown}`), or unset {VAR} \
             to let wavegate keep one in its data dir"
        )
    })?;
    let mode = std::fs::metadata(path)?.permissions().mode() & 0o777;
    if mode & 0o007 != 0 {
        bail!(
            "{VAR}: `{shown}` can be read or written by every user (mode {mode:04o}); make it \
             readable by wavegate alone: `chmod 0400 {shown}` (0440 for a group of its own)"
        );
    }
    LedgerKey::from_pkcs8_pem(&text).with_context(|| {
        format!(
            "{VAR}: `{shown}` is not the ledger key; create one with `openssl genpkey -algorithm \
             ed25519 -out {shown}`, or unset {VAR} to let wavegate keep one in its data dir"
        )
    })
}

/// The key in the data dir, generated there when there is none yet; `true`
/// when it was generated now.
pub fn load_or_generate(data_dir: &Path) -> Result<(LedgerKey, bool)> {
    let path = in_data_dir(data_dir);
    let dir = path.parent().expect("the key is in a directory");
    private_dir(dir)?;
    match read_private(&path)? {
        Some(key) => Ok((key, false)),
        None => {
            let key = LedgerKey::from_seed(&random_seed()?);
            write_new(&path, key.to_pkcs8_pem().as_bytes())?;
            // Another process may have written its key first: use the one
            // on disk.
            let key = read_private(&path)?.context("the ledger key vanished as it was written")?;
            Ok((key, true))
        }
    }
}

/// The public half of the key at `path` (a private key file).
pub fn public_of(path: &Path) -> Result<PublicKey> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the ledger key {}", path.display()))?;
    let key = LedgerKey::from_pkcs8_pem(&text)
        .with_context(|| format!("{} is not a ledger key", path.display()))?;
    Ok(key.public())
}

/// Where the server's key is: the file `WAVEGATE_LEDGER_KEY_FILE` names,
/// else the one in `WAVEGATE_DATA_DIR`.
pub fn server_key_path(key_file: Option<&Path>, data_dir: &Path) -> PathBuf {
    key_file.map_or_else(|| in_data_dir(data_dir), Path::to_owned)
}

/// Creates `dir` (0700) or makes it 0700 when others could enter it.
fn private_dir(dir: &Path) -> Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create {} for the ledger key", dir.display()))?;
    let mode = std::fs::metadata(dir)?.permissions().mode() & 0o777;
    if mode != 0o700 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("cannot make {} private (mode 0700)", dir.display()))?;
        tracing::warn!(
            "{} was mode {mode:04o}; it holds the ledger key and is 0700 now",
            dir.display()
        );
    }
    Ok(())
}

/// The key at `path` (made 0600 if it was looser), or `None` if there is none.
fn read_private(path: &Path) -> Result<Option<LedgerKey>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(e).with_context(|| format!("cannot read the ledger key {}", path.display()))
        }
    };
    let mode = std::fs::metadata(path)?.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("cannot make {} private (mode 0600)", path.display()))?;
        tracing::warn!(
            "the ledger key {} was mode {mode:04o}; it is 0600 now",
            path.display()
        );
    }
    let key = LedgerKey::from_pkcs8_pem(&text).with_context(|| {
        format!(
            "{} is not a ledger key; restore it from a backup (facts it signed verify with no \
             other key), or give the key with {VAR}",
            path.display()
        )
    })?;
    Ok(Some(key))
}

/// Writes `bytes` to `path` (mode 0600) unless a file is there already:
/// written in full to a temporary file first, then linked into place, so a
/// crash never leaves half a key and two writers never replace each other's.
fn write_new(path: &Path, bytes: &[u8]) -> Result<()> {
    let temp = path.with_extension(format!("tmp{}", std::process::id()));
    let _ = std::fs::remove_file(&temp);
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        match std::fs::hard_link(&temp, path) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        if let Some(dir) = path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    let _ = std::fs::remove_file(&temp);
    written.with_context(|| format!("cannot write the ledger key {}", path.display()))
}

fn random_seed() -> Result<[u8; 32]> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .context("cannot get random bytes from the kernel for a new ledger key")?;
    Ok(seed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn the_first_start_generates_a_private_key_and_the_next_reads_it_back() {
        let data = tempfile::tempdir().unwrap();
        let (key, generated) = load_or_generate(data.path()).unwrap();
        assert!(generated);
        let path = in_data_dir(data.path());
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        let (again, generated) = load_or_generate(data.path()).unwrap();
        assert!(!generated);
        assert_eq!(again.public(), key.public());
        assert_eq!(public_of(&path).unwrap(), key.public());
        let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers, ["key.pem"]);
    }

    #[test]
    fn a_key_dir_and_file_left_open_to_others_are_made_private() {
        let data = tempfile::tempdir().unwrap();
        let (key, _) = load_or_generate(data.path()).unwrap();
        let path = in_data_dir(data.path());
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::set_permissions(
            path.parent().unwrap(),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        let (again, _) = load_or_generate(data.path()).unwrap();
        assert_eq!(again.public(), key.public());
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
    }

    #[test]
    fn a_damaged_key_in_the_data_dir_is_an_error_not_a_new_key() {
        let data = tempfile::tempdir().unwrap();
        load_or_generate(data.path()).unwrap();
        let path = in_data_dir(data.path());
        std::fs::write(&path, "not a key").unwrap();
        let error = format!("{:#}", load_or_generate(data.path()).err().unwrap());
        assert!(error.contains("restore it from a backup"), "{error}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "not a key");
    }

    #[test]
    fn a_named_key_file_is_checked_and_every_error_names_the_variable_and_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let missing = format!(
            "{:#}",
            read_named(&dir.path().join("nope.pem")).err().unwrap()
        );
        assert!(
            missing.contains(VAR) && missing.contains("openssl genpkey"),
            "{missing}"
        );

        let path = dir.path().join("ledger.pem");
        let key = LedgerKey::from_seed(&[5; 32]);
        std::fs::write(&path, key.to_pkcs8_pem().as_bytes()).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let open = format!("{:#}", read_named(&path).err().unwrap());
        assert!(open.contains(VAR) && open.contains("chmod 0400"), "{open}");

        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o440)).unwrap();
        assert_eq!(read_named(&path).unwrap().public(), key.public());

        let pem = dir.path().join("app.pem");
        std::fs::write(
            &pem,
            "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n",
        )
        .unwrap();
        std::fs::set_permissions(&pem, std::fs::Permissions::from_mode(0o600)).unwrap();
        let wrong = format!("{:#}", read_named(&pem).err().unwrap());
        assert!(
            wrong.contains(VAR) && wrong.contains("is not the ledger key"),
            "{wrong}"
        );
    }

    #[test]
    fn the_server_key_path_follows_the_variable_then_the_data_dir() {
        let path = |pairs: &[(&str, &str)]| {
            let vars = crate::config::vars::ServerVars::from_lookup(|name| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            });
            server_key_path(vars.ledger_key_file.as_deref(), &vars.data_dir)
        };
        assert_eq!(
            path(&[
                (VAR, "/run/secrets/ledger.pem"),
                ("WAVEGATE_DATA_DIR", "/d")
            ]),
            PathBuf::from("/run/secrets/ledger.pem")
        );
        assert_eq!(
            path(&[(VAR, " "), ("WAVEGATE_DATA_DIR", "/d")]),
            PathBuf::from("/d/ledger/key.pem")
        );
        assert_eq!(path(&[]), PathBuf::from("wavegate-data/ledger/key.pem"));
    }
}
