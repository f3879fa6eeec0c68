//! wavegate's own Terraform commands, which `[terraform]` runs in the
//! sandbox like any command (`wavegate terraform discover|plan|apply|outputs`;
//! docs/terraform.md): what `examples/terraform/repo/ci/*.sh` do, with no
//! script of the repository's own.
//!
//! - `discover` reads the commit's `.tf` files and writes the root modules
//!   it finds (src/config/terraform.rs) as a units file.
//! - `plan` inits quietly, selects the stage's workspace (a directory per
//!   stage uses the default one), passes the known inputs and the stage's
//!   `<stage>.tfvars`, plans to a binary plan beside the plan file with the
//!   state unlocked (plans never write it), and writes the plan file from
//!   `show -json` through the adapter.
//! - `apply` applies exactly that binary plan and writes every output,
//!   flattened; a stale plan answers `replan`.
//! - `outputs` writes what is deployed now (`{}` where nothing is).
//!
//! A local backend keeps its state under `TF_STATE_DIR` (an execution
//! profile's `env` and `state`), at the member's directory: a workspace per
//! stage keeps them under its `workspaces/`, a directory per stage has one
//! of its own. A stage whose workspace
//! does not exist yet (nothing is deployed there) is planned against an
//! empty state of the plan's own, since plans may not create it; its apply
//! creates the workspace and answers `replan`, so what applies is a plan
//! made against the real workspace and checked against the approval.

use crate::config::terraform::{self, TfTree};
use crate::model::StageName;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// What every command is told: the program, the member's stage and
/// directory, and where a directory per stage lives (`stage_dirs`,
/// filled in for the stage).
#[derive(Debug, Clone)]
pub struct TfOptions {
    pub binary: String,
    pub stage: StageName,
    pub dir: String,
    pub stage_dir: Option<String>,
}

/// The override file that points a never-deployed workspace's plan at a
/// state of its own.
const SCRATCH_OVERRIDE: &str = "zz_wavegate_scratch_override.tf";
/// The override file that gives a root with no backend block the local
/// backend `TF_STATE_DIR` keys.
const BACKEND_OVERRIDE: &str = "zz_wavegate_backend_override.tf";
/// Beside the plan file: the stage whose workspace the plan found missing.
const SCRATCH_MARK: &str = "scratch-workspace";

impl TfOptions {
    /// The workspace the member runs in; `None` for a directory per stage.
    fn workspace(&self) -> Option<&str> {
        let per_dir = self
            .stage_dir
            .as_deref()
            .is_some_and(|d| self.dir == d || self.dir.starts_with(&format!("{d}/")));
        (!per_dir).then_some(self.stage.as_str())
    }
}

/// Every `.tf` file under `root` and the paths of the other files, as the
/// discovery reads them: hidden directories (`.git`, `.terraform`) skipped.
pub fn read_tree(root: &Path) -> Result<TfTree, String> {
    let mut tree = TfTree::default();
    let mut dirs = vec![PathBuf::new()];
    while let Some(relative) = dirs.pop() {
        let dir = root.join(&relative);
        let entries =
            std::fs::read_dir(&dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
        for entry in entries {
            let entry = entry.map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            let path = relative.join(&name);
            let kind = entry
                .file_type()
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            let key = path.to_string_lossy().into_owned();
            if kind.is_dir() {
                dirs.push(path);
            } else if name.ends_with(".tf") {
                if tree.tf.len() >= terraform::MAX_TF_FILES {
                    return Err(format!(
                        "the commit has more than {} .tf files, more than one discovery reads",
                        terraform::MAX_TF_FILES
                    ));
                }
                let text = std::fs::read_to_string(root.join(&path))
                    .map_err(|e| format!("cannot read {key}: {e}"))?;
                tree.tf.insert(key, text);
            } else {
                tree.files.insert(key);
            }
        }
    }
    Ok(tree)
}

/// `config` with the root modules its `[terraform]` finds in the checkout
/// at `root` in the place of the component the section stands for (as a
/// plan would find them); `config` itself without the section.
pub fn with_roots(
    config: &crate::config::RepoConfig,
    root: &Path,
) -> Result<crate::config::RepoConfig, String> {
    if config.raw.terraform.is_none() {
        return Ok(config.clone());
    }
    let found = [(terraform::COMPONENT.to_owned(), discover_in(root)?)].into();
    config
        .with_units(crate::config::CONFIG_FILE, &found)
        .map_err(|e| e.to_string())
}

/// The units `[terraform]` finds in the checkout at `root`, read with the
/// `wavegate.toml` there.
pub(crate) fn discover_in(root: &Path) -> Result<Vec<crate::config::discover::Unit>, String> {
    let file = root.join(crate::config::CONFIG_FILE);
    let text = std::fs::read_to_string(&file)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let raw = crate::config::RepoConfig::parse_raw(crate::config::CONFIG_FILE, &text)
        .map_err(|e| e.to_string())?;
    let Some(settings) = &raw.terraform else {
        return Err(format!(
            "{} has no `[terraform]` section, so there is nothing for `wavegate terraform discover` to find",
            file.display()
        ));
    };
    let stages: Vec<String> = raw.stages.iter().map(|s| s.name.clone()).collect();
    terraform::discover_roots(&read_tree(root)?, settings, &stages)
}

/// `wavegate terraform discover UNITS_FILE --root ROOT`.
pub fn discover(units_file: &Path, root: &Path) -> Result<(), String> {
    let units = discover_in(root)?;
    let json = serde_json::Value::Array(units.iter().map(terraform::unit_json).collect());
    for unit in &units {
        eprintln!(
            "wavegate: root module `{}` ({}){}",
            unit.name,
            unit.dir,
            if unit.depends_on.is_empty() {
                String::new()
            } else {
                format!(", after {}", unit.depends_on.join(", "))
            }
        );
    }
    std::fs::write(units_file, json.to_string())
        .map_err(|e| format!("cannot write {}: {e}", units_file.display()))
}

/// `binary args`, run under automation with no input.
fn terraform(options: &TfOptions, args: &[&str]) -> Command {
    let mut command = Command::new(&options.binary);
    command
        .args(args)
        .env("TF_IN_AUTOMATION", "1")
        .stdin(Stdio::null());
    command
}

fn cannot_start(options: &TfOptions, e: std::io::Error) -> String {
    format!(
        "cannot run `{}` ({e}): it must be on the commands' PATH and visible in the sandbox (under /usr, or a profile's `read` path)",
        options.binary
    )
}

fn failed(options: &TfOptions, args: &[&str], status: std::process::ExitStatus) -> String {
    format!("`{} {}` failed ({status})", options.binary, args.join(" "))
}

/// Runs `binary args` in the current directory, its output streamed
/// through; the error names the command.
fn run(options: &TfOptions, args: &[&str]) -> Result<(), String> {
    let status = terraform(options, args)
        .status()
        .map_err(|e| cannot_start(options, e))?;
    if status.success() {
        Ok(())
    } else {
        Err(failed(options, args, status))
    }
}

/// Runs `binary args` and answers its standard output; what it printed is
/// shown (on standard error) only when it fails.
fn capture(options: &TfOptions, args: &[&str]) -> Result<Vec<u8>, String> {
    let out = terraform(options, args)
        .output()
        .map_err(|e| cannot_start(options, e))?;
    if out.status.success() {
        return Ok(out.stdout);
    }
    let _ = std::io::stderr().write_all(&out.stdout);
    let _ = std::io::stderr().write_all(&out.stderr);
    Err(failed(options, args, out.status))
}

/// Runs `binary args` quietly: what it printed is shown only when it fails.
fn quietly(options: &TfOptions, args: &[&str]) -> Result<(), String> {
    capture(options, args).map(drop)
}

/// The `-backend-config` arguments of the member's state: under
/// `TF_STATE_DIR` for a local backend, else none (the backend block says).
fn backend_config(options: &TfOptions) -> Result<Vec<String>, String> {
    let here = read_tree(Path::new("."))?;
    let own: TfTree = TfTree {
        tf: here
            .tf
            .into_iter()
            .filter(|(path, _)| !path.contains('/') && !path.starts_with("zz_wavegate_"))
            .collect(),
        files: Default::default(),
    };
    let backend = terraform::backend_of(&own)?;
    // A local backend that names absolute paths for all the states this
    // member uses keeps them where it says.
    let absolute = |key: &str| {
        backend
            .as_ref()
            .and_then(|b| b.attrs.get(key))
            .is_some_and(|p| p.starts_with('/'))
    };
    let local = match &backend {
        None => true,
        Some(declared) => {
            declared.kind == "local"
                && !(absolute("path")
                    && (options.workspace().is_none() || absolute("workspace_dir")))
        }
    };
    if !local {
        return Ok(Vec::new());
    }
    let Some(state_dir) = std::env::var_os("TF_STATE_DIR").filter(|d| !d.is_empty()) else {
        return Err(format!(
            "`{}` keeps its state in a local backend, which would be written inside the job's copy of the commit and lost: set TF_STATE_DIR (an execution profile's `env`, with the directory among its `state` paths), give the backend an absolute `path` (and an absolute `workspace_dir` for a workspace per stage), or use a remote backend",
            options.dir
        ));
    };
    let state_dir = PathBuf::from(state_dir);
    if !state_dir.is_dir() {
        return Err(format!(
            "TF_STATE_DIR={} is not a directory this command can see, so it cannot read the state; under wavegate's sandbox the operator lists it as a state path (`state` in an execution profile, or WAVEGATE_SANDBOX_APPLY_WRITE)",
            state_dir.display()
        ));
    }
    if backend.is_none() {
        std::fs::write(BACKEND_OVERRIDE, "terraform {\n  backend \"local\" {}\n}\n")
            .map_err(|e| format!("cannot write {BACKEND_OVERRIDE}: {e}"))?;
    }
    // Keyed by the member's directory, which no other root shares and no
    // new root renames (a component's name may grow when one is added).
    let key = state_dir.join(&options.dir);
    Ok(vec![
        format!(
            "-backend-config=path={}",
            key.join("terraform.tfstate").display()
        ),
        format!(
            "-backend-config=workspace_dir={}",
            key.join("workspaces").display()
        ),
    ])
}

fn init(options: &TfOptions, reconfigure: bool) -> Result<(), String> {
    let config = backend_config(options)?;
    let mut args = vec!["init", "-input=false", "-no-color"];
    if reconfigure {
        args.push("-reconfigure");
    }
    args.extend(config.iter().map(String::as_str));
    quietly(options, &args)
}

/// Whether the member's workspace exists (always, in the default one).
fn workspace_exists(options: &TfOptions) -> Result<bool, String> {
    let Some(workspace) = options.workspace() else {
        return Ok(true);
    };
    let listed = capture(options, &["workspace", "list", "-no-color"])?;
    Ok(String::from_utf8_lossy(&listed)
        .lines()
        .any(|l| l.trim_start_matches(['*', ' ']).trim() == workspace))
}

fn select_workspace(options: &TfOptions, create: bool) -> Result<(), String> {
    let Some(workspace) = options.workspace() else {
        return Ok(());
    };
    let mut args = vec!["workspace", "select", "-no-color"];
    if create {
        args.push("-or-create=true");
    }
    args.push(workspace);
    quietly(options, &args)
}

fn dir_of(file: &Path) -> PathBuf {
    file.parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), String> {
    std::fs::write(path, bytes).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// `wavegate terraform plan PLAN_FILE INPUTS_FILE …`.
pub fn plan(plan_file: &Path, inputs_file: &Path, options: &TfOptions) -> Result<(), String> {
    let files = dir_of(plan_file);
    let _ = std::fs::remove_file(SCRATCH_OVERRIDE);
    let _ = std::fs::remove_file(files.join(SCRATCH_MARK));
    init(options, true)?;
    if workspace_exists(options)? {
        select_workspace(options, false)?;
    } else {
        // Nothing is deployed in a workspace that does not exist, and a
        // plan may not create it: plan against an empty state of its own.
        let scratch = files.join("scratch");
        let scratch = std::path::absolute(&scratch).unwrap_or(scratch);
        std::fs::create_dir_all(&scratch)
            .map_err(|e| format!("cannot create {}: {e}", scratch.display()))?;
        write(
            Path::new(SCRATCH_OVERRIDE),
            format!(
                "terraform {{\n  backend \"local\" {{\n    path          = \"{0}/terraform.tfstate\"\n    workspace_dir = \"{0}/workspaces\"\n  }}\n}}\n",
                scratch.display()
            )
            .as_bytes(),
        )?;
        quietly(
            options,
            &["init", "-input=false", "-no-color", "-reconfigure"],
        )?;
        select_workspace(options, true)?;
        write(&files.join(SCRATCH_MARK), options.stage.as_str().as_bytes())?;
        eprintln!(
            "wavegate: the workspace `{}` does not exist yet, so nothing is deployed there: planned against an empty state; the apply creates the workspace and plans again against it",
            options.stage
        );
    }
    let inputs = std::fs::read(inputs_file)
        .map_err(|e| format!("cannot read {}: {e}", inputs_file.display()))?;
    let (vars, unknown) =
        super::terraform::adapt_terraform_vars(&inputs).map_err(|e| e.to_string())?;
    if !unknown.is_empty() {
        eprintln!(
            "wavegate: inputs {} are known only after their upstream applies; Terraform cannot plan with an unknown variable, so each keeps its default",
            unknown.join(", ")
        );
    }
    let vars_file = files.join("inputs.tfvars.json");
    write(
        &vars_file,
        serde_json::Value::Object(vars).to_string().as_bytes(),
    )?;
    let binary_plan = files.join("tfplan");
    let mut args = vec![
        "plan".to_owned(),
        "-input=false".into(),
        "-no-color".into(),
        "-lock=false".into(),
        format!("-out={}", binary_plan.display()),
    ];
    let stage_vars = format!("{}.tfvars", options.stage);
    if Path::new(&stage_vars).is_file() {
        args.push(format!("-var-file={stage_vars}"));
    }
    args.push(format!("-var-file={}", vars_file.display()));
    run(
        options,
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    )?;
    let show = capture(
        options,
        &["show", "-json", &binary_plan.display().to_string()],
    )?;
    let adapted = super::terraform::adapt_terraform(&show).map_err(|e| e.to_string())?;
    write(plan_file, adapted.to_string().as_bytes())
}

/// Copies `from` to `to` as it comes, and answers what went through.
fn tee(mut from: impl Read, mut to: impl Write) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut chunk = [0u8; 8192];
    while let Ok(n) = from.read(&mut chunk) {
        if n == 0 {
            break;
        }
        let _ = to.write_all(&chunk[..n]);
        kept.extend_from_slice(&chunk[..n]);
    }
    kept
}

/// Runs `terraform apply` of `binary_plan`, streamed through and kept:
/// whether it succeeded, and what it printed.
fn apply_streamed(options: &TfOptions, binary_plan: &Path) -> Result<(bool, String), String> {
    let plan = binary_plan.display().to_string();
    let mut child = terraform(options, &["apply", "-input=false", "-no-color", &plan])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| cannot_start(options, e))?;
    let stderr = child.stderr.take().expect("piped");
    let errors = std::thread::spawn(move || tee(stderr, std::io::stderr()));
    let mut kept = tee(child.stdout.take().expect("piped"), std::io::stdout());
    kept.extend(errors.join().unwrap_or_default());
    let status = child
        .wait()
        .map_err(|e| format!("waiting for apply: {e}"))?;
    Ok((
        status.success(),
        String::from_utf8_lossy(&kept).into_owned(),
    ))
}

fn write_outputs(options: &TfOptions, outputs_file: &Path) -> Result<(), String> {
    let printed = capture(options, &["output", "-json", "-no-color"])?;
    let flat =
        super::terraform::adapt_terraform_outputs(&printed, false).map_err(|e| e.to_string())?;
    if !flat.left_out.is_empty() {
        eprintln!(
            "wavegate: left out sensitive outputs {}: an outputs file cannot mark a value sensitive",
            flat.left_out.join(", ")
        );
    }
    write(
        outputs_file,
        serde_json::Value::Object(flat.outputs)
            .to_string()
            .as_bytes(),
    )
}

fn replan(outputs_file: &Path, reason: &str) -> Result<(), String> {
    write(
        outputs_file,
        serde_json::json!({"outcome": "replan", "reason": reason})
            .to_string()
            .as_bytes(),
    )
}

/// `wavegate terraform apply PLAN_FILE OUTPUTS_FILE …`.
pub fn apply(plan_file: &Path, outputs_file: &Path, options: &TfOptions) -> Result<(), String> {
    let files = dir_of(plan_file);
    let binary_plan = files.join("tfplan");
    if !binary_plan.is_file() {
        return Err(format!(
            "no {}: `wavegate terraform plan` saves it beside the plan file",
            binary_plan.display()
        ));
    }
    if files.join(SCRATCH_MARK).is_file() {
        let _ = std::fs::remove_file(SCRATCH_OVERRIDE);
        init(options, true)?;
        select_workspace(options, true)?;
        let _ = std::fs::remove_file(files.join(SCRATCH_MARK));
        return replan(
            outputs_file,
            &format!(
                "terraform: the workspace `{}` did not exist when planned; it does now, so the plan is made again against it",
                options.stage
            ),
        );
    }
    init(options, false)?;
    select_workspace(options, false)?;
    let (applied, printed) = apply_streamed(options, &binary_plan)?;
    if !applied {
        if printed.contains("Saved plan is stale") {
            return replan(outputs_file, "terraform: the state changed since the plan");
        }
        return Err(format!("`{} apply` failed", options.binary));
    }
    write_outputs(options, outputs_file)
}

/// `wavegate terraform outputs OUTPUTS_FILE …`.
pub fn outputs(outputs_file: &Path, options: &TfOptions) -> Result<(), String> {
    init(options, true)?;
    if !workspace_exists(options)? {
        return write(outputs_file, b"{}");
    }
    select_workspace(options, false)?;
    write_outputs(options, outputs_file)
}
