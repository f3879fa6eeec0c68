//! The sandbox tried for real: bubblewrap must be installed (scripts/test.sh
//! installs it), as in production.

use super::*;
use std::collections::HashMap;

fn settings(vars: &[(&str, &str)]) -> Result<SandboxSettings> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    SandboxSettings::from_lookup(|name| map.get(name).cloned())
}

#[test]
fn bubblewrap_with_no_network_is_the_default() {
    assert_eq!(settings(&[]).unwrap(), SandboxSettings::default());
    let s = settings(&[
        ("WAVEGATE_SANDBOX", " NONE "),
        ("WAVEGATE_SANDBOX_NETWORK", "egress"),
        ("WAVEGATE_SANDBOX_READ", "/usr/share:/etc/ssl:"),
        ("WAVEGATE_SANDBOX_APPLY_WRITE", "/tmp"),
    ])
    .unwrap();
    assert_eq!(s.mode, Mode::None);
    assert_eq!(s.network, Network::Egress);
    assert_eq!(
        s.read,
        [PathBuf::from("/usr/share"), PathBuf::from("/etc/ssl")]
    );
    assert_eq!(s.apply_write, [PathBuf::from("/tmp")]);
}

#[test]
fn a_bad_setting_names_the_variable_and_the_fix() {
    let e = |vars: &[(&str, &str)]| settings(vars).unwrap_err().to_string();
    assert!(e(&[("WAVEGATE_SANDBOX", "docker")])
        .starts_with("WAVEGATE_SANDBOX=`docker` is not a sandbox; use `bwrap`"));
    assert!(e(&[("WAVEGATE_SANDBOX_NETWORK", "open")])
        .starts_with("WAVEGATE_SANDBOX_NETWORK=`open` is not a network; use `none`"));
    assert_eq!(
        e(&[("WAVEGATE_SANDBOX_READ", "opt/tools")]),
        "WAVEGATE_SANDBOX_READ: `opt/tools` is not an absolute path; list absolute host paths separated by `:`"
    );
    assert_eq!(
        e(&[("WAVEGATE_SANDBOX_APPLY_WRITE", "/no/such/state")]),
        "WAVEGATE_SANDBOX_APPLY_WRITE: `/no/such/state` does not exist on this host; create it or take it off the list"
    );
}

#[test]
fn operator_paths_that_would_show_a_secret_or_another_job_are_refused() {
    let host = tempfile::tempdir().unwrap();
    let data = host.path().join("data");
    let tools = host.path().join("tools");
    let jobs = host.path().join("tmp");
    for dir in [&data, &tools, &jobs] {
        std::fs::create_dir(dir).unwrap();
    }
    let with_read = |read: &Path| SandboxSettings {
        read: vec![read.to_owned()],
        ..SandboxSettings::default()
    };
    let secrets = [("the data dir", data.as_path())];
    with_read(&tools).check_exposure(&secrets, &jobs).unwrap();
    let above = with_read(host.path())
        .check_exposure(&secrets, &jobs)
        .unwrap_err();
    assert!(
        above
            .to_string()
            .contains("would let every command see the data dir"),
        "{above}"
    );
    let inside = with_read(&data.join("mirrors"))
        .check_exposure(&secrets, &jobs)
        .unwrap_err();
    assert!(inside.to_string().contains("the data dir"), "{inside}");
    let jobs_too = SandboxSettings {
        apply_write: vec![host.path().to_owned()],
        ..SandboxSettings::default()
    }
    .check_exposure(&[], &jobs)
    .unwrap_err();
    assert!(
        jobs_too
            .to_string()
            .starts_with("WAVEGATE_SANDBOX_APPLY_WRITE:")
            && jobs_too.to_string().contains("holds every job's checkout"),
        "{jobs_too}"
    );
}
