//! The Terraform example (examples/terraform): its plan, apply and outputs
//! scripts, run by the real `wavegate plan` in the sandbox (and, to deploy
//! `main` and to apply, as wavegate runs them: the config's argv, the
//! component's directory, a cleared environment): once against the real
//! Terraform on PATH, and otherwise against the fake `terraform` of
//! examples/terraform/fake, which keeps the real CLI's contract and refuses
//! what it does not model (a stale plan, a state it cannot see). A change
//! to the scripts that breaks that contract fails here.

use super::common::{copy_tree, Run};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use tempfile::TempDir;
use wavegate::config::RepoConfig;

fn example_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/terraform")
}

fn fake_dir() -> PathBuf {
    example_dir().join("fake")
}

fn wavegate_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_wavegate"))
        .parent()
        .unwrap()
        .to_owned()
}

/// Which `terraform` the commands run.
#[derive(Clone, Copy, PartialEq)]
enum Terraform {
    /// examples/terraform/fake: the CLI's contract, and what it refuses.
    Fake,
    /// The real one on PATH (Terraform 1.11 on these machines): the
    /// built-in `terraform_data` and a local backend need no download.
    Real,
}

impl Terraform {
    /// PATH as the commands see it: `wavegate`, and the fake `terraform`
    /// first where it is the one.
    fn path(self) -> String {
        let wavegate = wavegate_dir().display().to_string();
        match self {
            Terraform::Fake => format!(
                "{}:{wavegate}:/usr/local/bin:/usr/bin:/bin",
                fake_dir().display()
            ),
            Terraform::Real => format!("{wavegate}:/usr/local/bin:/usr/bin:/bin"),
        }
    }

    /// The real Terraform, which these machines have. Where it is missing
    /// the test fails saying so, rather than passing without it.
    fn real() -> Self {
        let version = Command::new("terraform").arg("version").output();
        match version {
            Ok(out) if out.status.success() => Terraform::Real,
            _ => panic!(
                "the real Terraform is not on PATH: these tests run the example against it \
                 (install Terraform >= 1.4; its built-in terraform_data needs no download)"
            ),
        }
    }
}

/// The name of the directory-per-environment component's member in `stage`.
fn dns(stage: &str) -> String {
    format!("dns@{stage}")
}

/// The example's wavegate.toml, as shipped.
fn config_text() -> String {
    std::fs::read_to_string(example_dir().join("repo/wavegate.toml")).unwrap()
}

fn check(output: Output, what: &str) -> Output {
    assert!(
        output.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

struct TfExample {
    dir: TempDir,
    repo: PathBuf,
    state: PathBuf,
    terraform: Terraform,
}

impl TfExample {
    /// The example as a git repository (`main`), nothing deployed.
    fn new() -> Self {
        Self::with(Terraform::Fake)
    }

    /// The example as a git repository, its commands running `terraform`.
    fn with(terraform: Terraform) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        let state = dir.path().join("state");
        std::fs::create_dir(&state).unwrap();
        copy_tree(&example_dir().join("repo"), &repo);
        std::fs::write(repo.join("wavegate.toml"), config_text()).unwrap();
        let example = Self {
            dir,
            repo,
            state,
            terraform,
        };
        check(
            example.git(&["-c", "init.defaultBranch=main", "init", "-q"]),
            "git init",
        );
        example.commit("main");
        check(example.git(&["checkout", "-q", "--detach"]), "git checkout");
        example
    }

    /// The example with `main` deployed by its own scripts.
    fn deployed() -> Self {
        let example = Self::new();
        example.deploy("main");
        example
    }

    fn git(&self, args: &[&str]) -> Output {
        super::common::git_in(&self.repo, args)
    }

    fn commit(&self, message: &str) {
        check(self.git(&["add", "-A"]), "git add");
        check(
            self.git(&["-c", "commit.gpgsign=false", "commit", "-q", "-m", message]),
            "git commit",
        );
    }

    /// Commits `files` (path → content) on a new branch `name` made from `main`.
    fn branch(&self, name: &str, files: &[(&str, &str)]) {
        check(
            self.git(&["checkout", "-q", "-B", name, "main"]),
            "git checkout",
        );
        for (path, content) in files {
            let full = self.repo.join(path);
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            std::fs::write(&full, content).unwrap();
            if path.ends_with(".sh") {
                std::fs::set_permissions(
                    &full,
                    std::os::unix::fs::PermissionsExt::from_mode(0o755),
                )
                .unwrap();
            }
        }
        self.commit(name);
        check(
            self.git(&["checkout", "-q", "--detach", "main"]),
            "git checkout",
        );
    }

    /// `rev`'s files in a fresh directory (as wavegate checks a commit out).
    fn export(&self, rev: &str) -> PathBuf {
        let tree = tempfile::Builder::new()
            .prefix("tree-")
            .tempdir_in(self.dir.path())
            .unwrap()
            .keep();
        let archive = check(self.git(&["archive", rev]), "git archive");
        let mut tar = Command::new("tar")
            .args(["-xf", "-", "-C"])
            .arg(&tree)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(tar.stdin.as_mut().unwrap(), &archive.stdout).unwrap();
        assert!(tar.wait().unwrap().success());
        tree
    }

    /// Plans and applies every member of `rev` in order, running the
    /// config's own commands as wavegate does (unsandboxed: the state is
    /// written); answers each member's outputs file.
    fn deploy(&self, rev: &str) -> Vec<(String, Value)> {
        let tree = self.export(rev);
        let config = RepoConfig::parse(
            "wavegate.toml",
            &std::fs::read_to_string(tree.join("wavegate.toml")).unwrap(),
        )
        .unwrap();
        let mut applied: Vec<(String, Value)> = Vec::new();
        for stage in config.stages.iter().map(|s| s.name.clone()) {
            for component in config
                .components
                .iter()
                .filter(|c| c.stages.contains(&stage))
            {
                let member = format!("{}@{stage}", component.name);
                let files = self.dir.path().join("deploy").join(&member);
                std::fs::create_dir_all(&files).unwrap();
                let known: serde_json::Map<String, Value> = component
                    .inputs
                    .iter()
                    .map(|input| {
                        let upstream = format!("{}@{stage}", input.upstream);
                        let (_, outputs) = applied.iter().find(|(m, _)| *m == upstream).unwrap();
                        (input.name.clone(), outputs[&input.output].clone())
                    })
                    .collect();
                std::fs::write(
                    files.join("inputs.json"),
                    json!({"known": known, "unknown": []}).to_string(),
                )
                .unwrap();
                let run = |template: &[String]| {
                    self.command(&tree, component, stage.as_str(), template, &files)
                };
                check(run(&component.plan), &format!("the plan of {member}"));
                check(
                    run(component.apply.as_ref().unwrap()),
                    &format!("the apply of {member}"),
                );
                let outputs: Value =
                    serde_json::from_slice(&std::fs::read(files.join("outputs.json")).unwrap())
                        .unwrap();
                applied.push((member, outputs));
            }
        }
        applied
    }

    /// Runs a command of `component` as wavegate does: argv from the
    /// template, in its directory, with only what wavegate passes on.
    fn command(
        &self,
        tree: &Path,
        component: &wavegate::config::repo::Component,
        stage: &str,
        template: &[String],
        files: &Path,
    ) -> Output {
        let file = |name: &str| files.join(name).display().to_string();
        let argv: Vec<String> = template
            .iter()
            .map(|arg| {
                arg.replace("{component}", &component.name)
                    .replace("{stage}", stage)
                    .replace("{dir}", &component.dir)
                    .replace("{root}", &tree.display().to_string())
                    .replace("{plan_file}", &file("plan.json"))
                    .replace("{outputs_file}", &file("outputs.json"))
                    .replace("{inputs_file}", &file("inputs.json"))
            })
            .collect();
        let program = if argv[0].contains('/') {
            tree.join(&argv[0])
        } else {
            PathBuf::from(&argv[0])
        };
        let home = files.join("home");
        std::fs::create_dir_all(&home).unwrap();
        Command::new(program)
            .args(&argv[1..])
            .current_dir(tree.join(component.dir.replace("{stage}", stage)))
            .env_clear()
            .env("PATH", self.terraform.path())
            .env("HOME", &home)
            .env("WAVEGATE_COMPONENT", &component.name)
            .env("WAVEGATE_STAGE", stage)
            .env("WAVEGATE_MEMBER", format!("{}@{stage}", component.name))
            .env("TF_STATE_DIR", &self.state)
            .output()
            .unwrap()
    }

    /// The recipe's profiles file (docs/terraform.md): the tool directory
    /// read-only, the state directory read-only to plans and writable to
    /// applies. wavegate itself is in every sandbox by its own doing.
    fn profiles(&self) -> PathBuf {
        let file = self.dir.path().join("profiles.toml");
        // The real terraform is under /usr, which every sandbox shows.
        let read = match self.terraform {
            Terraform::Fake => format!("read = [\"{}\"]\n", fake_dir().display()),
            Terraform::Real => String::new(),
        };
        std::fs::write(
            &file,
            format!(
                "[profile.default]\n{read}state = [\"{}\"]\n",
                self.state.display()
            ),
        )
        .unwrap();
        file
    }

    /// `wavegate ARGS` as the bot runs commands: sandboxed with the
    /// recipe's profiles file, the state read-only to plans, the fake
    /// terraform on PATH (the only tool directory the sandbox shows).
    fn wavegate(&self, args: &[&str], stdin: Option<&[u8]>) -> Run {
        self.wavegate_with(args, stdin, Some(&self.profiles()))
    }

    fn wavegate_with(&self, args: &[&str], stdin: Option<&[u8]>, profiles: Option<&Path>) -> Run {
        let mut command = Command::new(env!("CARGO_BIN_EXE_wavegate"));
        if let Some(profiles) = profiles {
            command.env("WAVEGATE_PROFILES", profiles);
        }
        let mut child = command
            .args(args)
            .env("PATH", self.terraform.path())
            .env("TF_STATE_DIR", &self.state)
            .env("WAVEGATE_LOG", "info")
            .env("WAVEGATE_SANDBOX", "bwrap")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = child.stdin.take().unwrap();
        std::io::Write::write_all(&mut input, stdin.unwrap_or_default()).unwrap();
        drop(input);
        let output = child.wait_with_output().unwrap();
        Run {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    fn plan(&self, head: &str) -> Run {
        let repo = self.repo.display().to_string();
        self.wavegate(
            &[
                "plan", "--repo", &repo, "--base", "main", "--head", head, "--json",
            ],
            None,
        )
    }

    /// Plans a branch `bigger` that changes app's dev instance type:
    /// app@dev plans one update. The run and its JSON report.
    fn plan_bigger_app(&self) -> (Run, Value) {
        self.branch(
            "bigger",
            &[("infra/app/dev.tfvars", "instance_type = \"t3.medium\"\n")],
        );
        let run = self.plan("bigger");
        assert_eq!(run.code, 0, "{}", run.stderr);
        let report = run.json();
        let dev = Run::member(&report, "app@dev");
        assert_eq!(dev["status"], "planned", "{dev:#}");
        assert_eq!(
            dev["counts"],
            json!({"create": 0, "update": 1, "delete": 0, "replace": 0}),
            "{dev:#}"
        );
        (run, report)
    }

    /// The fake terraform, run in `dir` with the example's state.
    fn terraform(&self, dir: &Path, args: &[&str]) -> Output {
        Command::new(fake_dir().join("terraform"))
            .args(args)
            .current_dir(dir)
            .env("TF_STATE_DIR", &self.state)
            .output()
            .unwrap()
    }
}

fn outputs_of<'a>(applied: &'a [(String, Value)], member: &str) -> &'a Value {
    &applied.iter().find(|(m, _)| m == member).unwrap().1
}

#[test]
fn the_example_config_passes_config_check() {
    let example = TfExample::new();
    let repo = example.repo.display().to_string();
    let run = example.wavegate(&["config", "check", "--repo", &repo], None);
    assert_eq!(run.code, 0, "{}", run.stderr);
}

#[test]
fn deploying_the_example_applies_each_binary_plan_and_writes_flat_outputs() {
    let example = TfExample::new();
    let applied = example.deploy("main");
    let network = outputs_of(&applied, "network@dev");
    assert_eq!(network["cidr"], "10.1.0.0/16");
    let vpc_id = network["vpc_id"].as_str().unwrap();
    assert!(!vpc_id.is_empty());
    let app = outputs_of(&applied, "app@prod");
    assert_eq!(
        app,
        &json!({"hostname": "app-prod.example.com"}),
        "flat, and the sensitive db_password left out"
    );
    assert_eq!(
        outputs_of(&applied, &dns("prod")),
        &json!({"fqdn": "www.prod.example.com"})
    );
    // The workspaces hold what each stage applied: app@dev read network@dev's vpc_id.
    let state: Value = serde_json::from_slice(
        &std::fs::read(example.state.join("app/workspaces/dev/terraform.tfstate")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        state["resources"][1]["instances"][0]["attributes"]["input"]["vpc_id"], vpc_id,
        "{state:#}"
    );
}

#[test]
fn wavegate_plan_runs_the_terraform_scripts_in_the_sandbox() {
    let example = TfExample::deployed();
    let (run, report) = example.plan_bigger_app();
    let dev = Run::member(&report, "app@dev");
    assert_eq!(
        dev["inputs"]["vpc_id"]["source"], "deployed",
        "network is not in the change: outputs.sh read its state, flattened: {dev:#}"
    );
    let state = std::fs::read_to_string(
        example
            .state
            .join("network/workspaces/dev/terraform.tfstate"),
    )
    .unwrap();
    let vpc_id = dev["inputs"]["vpc_id"]["value"].as_str().unwrap();
    assert!(state.contains(vpc_id), "{vpc_id} is network@dev's id");
    let prod = Run::member(&report, "app@prod");
    assert_eq!(
        prod["counts"],
        json!({"create": 0, "update": 0, "delete": 0, "replace": 0})
    );
    let dns_dev = Run::member(&report, &dns("dev"));
    assert_eq!(
        dns_dev["inputs"]["hostname"]["source"], "planned",
        "{dns_dev:#}"
    );
    assert_eq!(
        dns_dev["inputs"]["hostname"]["value"],
        "app-dev.example.com"
    );
    assert!(
        run.stderr.contains("[plan] app@dev | Saved the plan to: "),
        "the binary plan is saved beside the plan file: {}",
        run.stderr
    );
    assert!(
        !run.stderr.contains("terraform apply \"")
            && !run.stderr.contains("successfully initialized"),
        "no advice to apply a path the job removes, no init chatter: {}",
        run.stderr
    );
    let repo = example.repo.display().to_string();
    let markdown = example.wavegate(
        &[
            "plan",
            "--repo",
            &repo,
            "--base",
            "main",
            "--head",
            "bigger",
            "--markdown",
        ],
        None,
    );
    assert!(
        !markdown.stdout.contains("Saved the plan to")
            && markdown
                .stdout
                .contains("quiet under `quiet` in wavegate.toml left out"),
        "`quiet = \"terraform\"` leaves the chatter out of what the report shows: {}",
        markdown.stdout
    );
    assert!(
        !run.stdout.contains("example-only"),
        "the sensitive output's value is bound, never shown"
    );
    let again = example.plan("bigger").json();
    assert_eq!(report["digest"], again["digest"], "plans are reproducible");
}

/// The recipe with the real Terraform: `main` deployed by `wavegate apply
/// --local` (no script of the user's own), a change planned by `wavegate
/// plan` in the sandbox with the state read-only, and a change to the
/// library every script sources planning every member.
#[test]
fn the_recipe_deploys_and_plans_with_the_real_terraform() {
    let example = TfExample::with(Terraform::real());
    let repo = example.repo.display().to_string();
    let run = example.wavegate(
        &["apply", "--local", "--repo", &repo, "--ref", "main"],
        None,
    );
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr
            .contains("WARNING: apply --local deploys every member of this revision with no gate"),
        "{}",
        run.stderr
    );
    let applied: Vec<&str> = run
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("applied ")?.split(' ').next())
        .collect();
    assert_eq!(
        applied,
        [
            "network@dev",
            "app@dev",
            "dns@dev",
            "network@prod",
            "app@prod",
            "dns@prod"
        ],
        "{}",
        run.stdout
    );
    let ledger =
        std::fs::read_to_string(example.repo.join(".git/wavegate-local-ledger.jsonl")).unwrap();
    assert_eq!(ledger.lines().count(), 6, "{ledger}");
    let network: Value = serde_json::from_slice(
        &std::fs::read(
            example
                .state
                .join("network/workspaces/dev/terraform.tfstate"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(network["outputs"]["cidr"]["value"], "10.1.0.0/16");
    let vpc_id = network["outputs"]["vpc_id"]["value"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(vpc_id.len(), 36, "an id terraform_data made: {vpc_id}");
    let state: Value = serde_json::from_slice(
        &std::fs::read(
            example
                .state
                .join("network/workspaces/dev/terraform.tfstate"),
        )
        .unwrap(),
    )
    .unwrap();
    let real = String::from_utf8(
        Command::new("terraform")
            .args(["version", "-json"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let real: Value = serde_json::from_str(&real).unwrap();
    assert_eq!(
        state["terraform_version"], real["terraform_version"],
        "the state is the real Terraform's"
    );

    let (_, report) = example.plan_bigger_app();
    let dev = Run::member(&report, "app@dev");
    assert_eq!(
        dev["inputs"]["vpc_id"]["value"], vpc_id,
        "read from network@dev's state by outputs.sh"
    );
    let prod = Run::member(&report, "app@prod");
    assert_eq!(
        prod["counts"],
        json!({"create": 0, "update": 0, "delete": 0, "replace": 0}),
        "{prod:#}"
    );
    let again = example.plan("bigger").json();
    assert_eq!(report["digest"], again["digest"], "plans are reproducible");

    // ci/lib.sh is in `shared`: a change to it alone plans every member,
    // each with nothing to change.
    let lib = std::fs::read_to_string(example.repo.join("ci/lib.sh")).unwrap();
    example.branch("library", &[("ci/lib.sh", &format!("{lib}\n# reviewed\n"))]);
    let run = example.plan("library");
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains("ci/lib.sh changed"), "{}", run.stderr);
    let report = run.json();
    for member in ["network@dev", "app@dev", "network@prod", "app@prod"] {
        let planned = Run::member(&report, member);
        assert_eq!(
            planned["counts"],
            json!({"create": 0, "update": 0, "delete": 0, "replace": 0}),
            "{member}: {planned:#}"
        );
    }
}

#[test]
fn a_plan_that_cannot_see_its_state_fails_loudly_instead_of_planning_to_create_everything() {
    let example = TfExample::deployed();
    example.branch(
        "bigger",
        &[("infra/app/dev.tfvars", "instance_type = \"t3.medium\"\n")],
    );
    let repo = example.repo.display().to_string();
    // No profiles file: the state directory is not in the sandbox.
    let run = example.wavegate_with(
        &[
            "plan", "--repo", &repo, "--base", "main", "--head", "bigger", "--json",
        ],
        None,
        None,
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    let report = run.json();
    let dev = Run::member(&report, "app@dev");
    assert_eq!(dev["status"], "plan-failed", "{dev:#}");
    let error = dev["error"].as_str().unwrap();
    assert!(
        error.contains("is not a directory this command can see, so it cannot read the state"),
        "{error}"
    );
}

#[test]
fn a_new_stage_is_planned_only_once_its_workspace_exists() {
    // Nothing deployed: the plan may not create the workspace (the state is
    // read-only to plans), and says so.
    let example = TfExample::new();
    example.branch(
        "touch",
        &[("infra/network/dev.tfvars", "cidr = \"10.2.0.0/16\"\n")],
    );
    let run = example.plan("touch");
    assert_eq!(run.code, 1, "{}", run.stderr);
    let report = run.json();
    let network = Run::member(&report, "network@dev");
    assert_eq!(network["status"], "plan-failed", "{network:#}");
    assert!(
        run.stderr.contains("Failed to create workspace directory"),
        "{}",
        run.stderr
    );
}

#[test]
fn an_outputs_command_writing_terraform_output_json_unflattened_is_refused() {
    let example = TfExample::deployed();
    // outputs.sh without its last step, on main already: a change to it
    // would plan every member, so only a main that has it runs it for a
    // member outside the change (network, whose outputs app reads).
    let shipped = std::fs::read_to_string(example_dir().join("repo/ci/outputs.sh")).unwrap();
    let raw = shipped.replace(
        "\"$TERRAFORM\" output -json > \"$dir/output.json\"\nwavegate adapt terraform-outputs < \"$dir/output.json\" > \"$outputs_file\"",
        "\"$TERRAFORM\" output -json > \"$outputs_file\"",
    );
    assert_ne!(raw, shipped);
    example.branch("main", &[("ci/outputs.sh", &raw)]);
    example.branch(
        "raw",
        &[("infra/app/dev.tfvars", "instance_type = \"t3.medium\"\n")],
    );
    let run = example.plan("raw");
    let report = run.json();
    let app = Run::member(&report, "app@dev");
    let why = app["inputs"]["vpc_id"]["why"].as_str().unwrap_or_default();
    assert_eq!(app["inputs"]["vpc_id"]["source"], "unknown", "{app:#}");
    assert!(
        why.contains("`terraform output -json` as it prints it")
            && why.contains("wavegate adapt terraform-outputs"),
        "{why}"
    );
}

#[test]
fn a_plan_made_stale_by_another_apply_answers_replan() {
    let example = TfExample::deployed();
    example.branch(
        "bigger",
        &[("infra/app/dev.tfvars", "instance_type = \"t3.medium\"\n")],
    );
    let tree = example.export("bigger");
    let config = RepoConfig::parse(
        "wavegate.toml",
        &std::fs::read_to_string(tree.join("wavegate.toml")).unwrap(),
    )
    .unwrap();
    let app = config.component("app").unwrap();
    let files = example.dir.path().join("stale");
    std::fs::create_dir_all(&files).unwrap();
    std::fs::write(
        files.join("inputs.json"),
        r#"{"known": {"vpc_id": "vpc-by-hand"}, "unknown": []}"#,
    )
    .unwrap();
    let apply = app.apply.as_ref().unwrap();
    // A first plan and apply in this member's directory (as a replan would leave it).
    check(
        example.command(&tree, app, "dev", &app.plan, &files),
        "plan.sh",
    );
    assert!(
        files.join("tfplan").is_file(),
        "the binary plan sits beside the plan file"
    );
    check(
        example.command(&tree, app, "dev", apply, &files),
        "apply.sh",
    );
    std::fs::write(
        files.join("inputs.json"),
        r#"{"known": {"vpc_id": "vpc-2"}, "unknown": []}"#,
    )
    .unwrap();
    check(
        example.command(&tree, app, "dev", &app.plan, &files),
        "plan.sh",
    );
    // Someone applies app@dev in between: the saved plan is stale.
    let other = example.dir.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(
        other.join("inputs.json"),
        r#"{"known": {"vpc_id": "vpc-3"}, "unknown": []}"#,
    )
    .unwrap();
    check(
        example.command(&tree, app, "dev", &app.plan, &other),
        "plan.sh",
    );
    check(
        example.command(&tree, app, "dev", apply, &other),
        "apply.sh",
    );
    std::fs::remove_file(files.join("outputs.json")).unwrap();
    let stale = check(
        example.command(&tree, app, "dev", apply, &files),
        "apply.sh of a stale plan",
    );
    assert!(String::from_utf8_lossy(&stale.stdout).contains("Saved plan is stale"));
    let outcome: Value =
        serde_json::from_slice(&std::fs::read(files.join("outputs.json")).unwrap()).unwrap();
    assert_eq!(outcome["outcome"], "replan", "{outcome}");
}

#[test]
fn adapt_terraform_outputs_flattens_what_terraform_prints() {
    let example = TfExample::deployed();
    let tree = example.export("main");
    let app = tree.join("infra/app");
    check(
        example.terraform(
            &app,
            &[
                "init",
                "-input=false",
                &format!(
                    "-backend-config=workspace_dir={}",
                    example.state.join("app/workspaces").display()
                ),
            ],
        ),
        "terraform init",
    );
    check(
        example.terraform(&app, &["workspace", "select", "prod"]),
        "terraform workspace select",
    );
    let printed = check(example.terraform(&app, &["output", "-json"]), "output").stdout;
    let wrapped: Value = serde_json::from_slice(&printed).unwrap();
    assert_eq!(
        wrapped["db_password"],
        json!({"sensitive": true, "type": "string", "value": "example-only"})
    );

    let run = example.wavegate(&["adapt", "terraform-outputs"], Some(&printed));
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.json(), json!({"hostname": "app-prod.example.com"}));
    assert!(
        run.stderr
            .contains("left out sensitive outputs db_password"),
        "{}",
        run.stderr
    );
    let kept = example.wavegate(
        &["adapt", "terraform-outputs", "--keep-sensitive"],
        Some(&printed),
    );
    assert_eq!(kept.json()["db_password"], "example-only");

    let flat = example.wavegate(
        &["adapt", "terraform-outputs"],
        Some(br#"{"hostname": "app-prod.example.com"}"#),
    );
    assert_eq!(flat.code, 1);
    assert!(
        flat.stderr.contains("output `hostname` is not wrapped"),
        "{}",
        flat.stderr
    );
    let vars = example.wavegate(
        &["adapt", "terraform-vars"],
        Some(br#"{"known": {"vpc_id": "vpc-1"}, "unknown": ["hostname"]}"#),
    );
    assert_eq!(vars.json(), json!({"vpc_id": "vpc-1"}));
    assert!(vars.stderr.contains("inputs hostname are known only after"));
}

/// What the fake prints must keep the shape of real `terraform show -json`
/// (the fixtures), and it must refuse what the real CLI refuses.
#[test]
fn the_fake_terraform_keeps_the_real_contract() {
    let example = TfExample::deployed();
    let tree = example.export("main");
    let network = tree.join("infra/network");
    let tf = |args: &[&str]| example.terraform(&network, args);
    let plan_file = example.dir.path().join("contract.tfplan");
    let out = format!("-out={}", plan_file.display());

    let e = tf(&["plan", "-input=false"]);
    assert_eq!(e.status.code(), Some(1), "init comes first");
    assert!(String::from_utf8_lossy(&e.stderr).contains("terraform init"));
    let state_dir = format!(
        "-backend-config=workspace_dir={}",
        example.state.join("network/workspaces").display()
    );
    check(
        tf(&["init", "-input=false", "-no-color", &state_dir]),
        "init",
    );
    check(tf(&["workspace", "select", "dev"]), "workspace select");
    let e = tf(&["plan", "-input=false", "-lock=false"]);
    assert_eq!(e.status.code(), Some(1), "cidr has no default");
    assert!(String::from_utf8_lossy(&e.stderr).contains("No value for required variable"));

    let same = tf(&["plan", "-detailed-exitcode", "-var-file=dev.tfvars"]);
    assert_eq!(same.status.code(), Some(0), "deployed: no changes");
    check(
        tf(&[
            "plan",
            "-var-file=dev.tfvars",
            "-var",
            "cidr=10.9.0.0/16",
            &out,
        ]),
        "plan -out",
    );
    let changed = tf(&[
        "plan",
        "-detailed-exitcode",
        "-var-file=dev.tfvars",
        "-var=cidr=10.9.0.0/16",
    ]);
    assert_eq!(changed.status.code(), Some(2), "changes");

    let e = tf(&["plan", "-out", "x", "-target=terraform_data.vpc"]);
    assert_eq!(e.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&e.stderr).contains("flag provided but not defined: -target"));
    let e = tf(&["apply", "-var-file=dev.tfvars", plan_file.to_str().unwrap()]);
    assert_eq!(e.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&e.stderr)
        .contains("Can't set variables when applying a saved plan"));
    check(tf(&["workspace", "select", "prod"]), "workspace select");
    let e = tf(&["apply", plan_file.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&e.stderr).contains("different workspace"));
    check(tf(&["workspace", "select", "dev"]), "workspace select");

    let shown: Value = serde_json::from_slice(
        &check(tf(&["show", "-json", plan_file.to_str().unwrap()]), "show").stdout,
    )
    .unwrap();
    // Every key the fake writes is one real terraform writes (the fixtures).
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|dir| dir.join("shared/fixtures/terraform/show-json"))
        .find(|dir| dir.is_dir())
        .expect("shared/fixtures/terraform/show-json next to the crate or above it");
    let mut top = std::collections::BTreeSet::new();
    let mut change = std::collections::BTreeSet::new();
    let mut resource = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(&fixtures).unwrap() {
        let fixture: Value =
            serde_json::from_slice(&std::fs::read(entry.unwrap().path()).unwrap()).unwrap();
        top.extend(fixture.as_object().unwrap().keys().cloned());
        for rc in fixture["resource_changes"].as_array().into_iter().flatten() {
            resource.extend(rc.as_object().unwrap().keys().cloned());
            change.extend(rc["change"].as_object().unwrap().keys().cloned());
        }
    }
    // Real terraform also writes these; the fixtures were trimmed of them.
    top.extend(
        [
            "variables",
            "timestamp",
            "applyable",
            "complete",
            "relevant_attributes",
        ]
        .map(String::from),
    );
    for key in shown.as_object().unwrap().keys() {
        assert!(top.contains(key), "show -json: `{key}` is in no fixture");
    }
    let rc = &shown["resource_changes"][0];
    for key in rc.as_object().unwrap().keys() {
        assert!(resource.contains(key), "resource_changes: `{key}`");
    }
    for key in rc["change"].as_object().unwrap().keys() {
        assert!(change.contains(key), "change: `{key}`");
    }
    assert_eq!(rc["change"]["actions"], json!(["update"]));
    assert_eq!(rc["change"]["after_unknown"], json!({"output": true}));

    let adapted = example.wavegate(&["adapt", "terraform"], Some(shown.to_string().as_bytes()));
    assert_eq!(adapted.code, 0, "{}", adapted.stderr);
    let plan = adapted.json();
    assert_eq!(plan["entries"][0]["action"], "update");
    assert_eq!(plan["entries"][0]["before"]["input"]["cidr"], "10.1.0.0/16");
    assert_eq!(plan["outputs"]["known"]["cidr"], "10.9.0.0/16");

    check(
        tf(&["apply", "-input=false", plan_file.to_str().unwrap()]),
        "apply",
    );
    let e = tf(&["apply", "-input=false", plan_file.to_str().unwrap()]);
    assert_eq!(e.status.code(), Some(1), "a plan applies once");
    assert!(String::from_utf8_lossy(&e.stderr).contains("Saved plan is stale"));
}

/// docs/atlantis.md's worked example, as written: its `wavegate.toml` over
/// the file tree it shows (with the shipped scripts) passes `config check`
/// with every member where the doc says and nothing unclaimed.
#[test]
fn the_atlantis_migration_example_passes_config_check_as_written() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/atlantis.md"))
            .unwrap();
    let example = &doc[doc
        .find("## A worked example")
        .expect("the doc has its example")..];
    let block = |opening: &str| {
        let start = example.find(opening).expect(opening) + opening.len();
        example[start..][..example[start..].find("\n```").unwrap()].to_owned()
    };
    let tree = block("```\n");
    let config = block("```toml\n");
    let dir = tempfile::tempdir().unwrap();
    for line in tree.lines() {
        let mut words = line.split_whitespace();
        let folder = words.next().unwrap();
        for file in words.take_while(|w| !w.starts_with('#')) {
            let path = dir.path().join(folder).join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let shipped = example_dir().join("repo").join(folder).join(file);
            let text = if folder == "ci/" {
                std::fs::read_to_string(shipped).unwrap()
            } else {
                String::new()
            };
            std::fs::write(path, text).unwrap();
        }
    }
    std::fs::write(dir.path().join("wavegate.toml"), &config).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_wavegate"))
        .args(["config", "check", "--repo"])
        .arg(dir.path())
        .output()
        .unwrap();
    let run = Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    };
    assert_eq!(run.code, 0, "{}\n{config}", run.stderr);
    assert!(!run.stdout.contains("warning"), "{}", run.stdout);
    for member in [
        "staging · wave 1: network@staging (network)",
        "staging · wave 2: app@staging (envs/staging/app)",
        "prod · wave 1: network@prod (network)",
        "prod · wave 2: app@prod (envs/prod/app)",
        "prod · wave 3: dns@prod (dns)",
    ] {
        assert!(run.stdout.contains(member), "{member} in {}", run.stdout);
    }
}
