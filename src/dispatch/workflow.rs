//! `wavegate init actions`: the workflow file that runs dispatched jobs
//! (its inputs are the ones [`super::inputs`] names), and what the forge
//! must allow for it.

use super::inputs;
use crate::model::ForgeKind;

/// The workflow file for `forge`, running `image` (the wavegate image of
/// this version unless told otherwise), its runs reaching wavegate at
/// `server`. The server is written into the file, never taken from an
/// input: whoever may dispatch the workflow could otherwise point a run,
/// with its environment's credentials, at a server of their own.
pub fn render(forge: ForgeKind, image: &str, server: &str) -> String {
    let (path, auth_permission, auth_env, token_input) = match forge {
        ForgeKind::GitHub => (
            ".github/workflows/wavegate.yml",
            "  # The run proves to wavegate that it is the run it dispatched with\n  # its OIDC token, and mints the `id_tokens` a profile asks for.\n  id-token: write\n",
            "",
            "",
        ),
        ForgeKind::Forgejo => (
            ".forgejo/workflows/wavegate.yml",
            "",
            "          # Claims the job once; useless after.\n          WAVEGATE_JOB_TOKEN: ${{ inputs.token }}\n          # Proves the claim is a run's: anyone who reads the run reads its\n          # token, and only runs read this secret (wavegate sets it).\n          WAVEGATE_RUN_KEY: ${{ secrets.WAVEGATE_RUN_KEY }}\n",
            "      token:\n        description: The single-use token that claims the job\n        required: true\n",
        ),
    };
    format!(
        r#"# {path}: wavegate runs the jobs of profiles with `executor = "actions"`
# here (docs/deployment.md). wavegate dispatches it from the default
# branch, so a pull request cannot change what its own jobs run; keep it
# there, and give each stage's credentials to its environment.
# Written by `wavegate init actions --forge {forge}`.
name: wavegate
run-name: wavegate job ${{{{ inputs.{job} }}}}
on:
  workflow_dispatch:
    inputs:
      {job}:
        description: wavegate's job
        required: true
      {timeout}:
        description: The run's time limit, in minutes
        required: true
      {sha}:
        description: The commit the job runs on
        required: true
      {runner}:
        description: The runner labels, as JSON
        required: true
      {environment}:
        description: The environment whose secrets the job gets
        required: false
        default: ""
{token_input}permissions:
  contents: read
{auth_permission}jobs:
  job:
    runs-on: ${{{{ fromJSON(inputs.{runner}) }}}}
    environment: ${{{{ inputs.{environment} }}}}
    timeout-minutes: ${{{{ fromJSON(inputs.{timeout}) }}}}
    container:
      image: {image}
      # The job runs its command in bubblewrap, which makes namespaces.
      options: --security-opt seccomp=unconfined --security-opt apparmor=unconfined
    steps:
      - uses: actions/checkout@v4
        with:
          ref: ${{{{ inputs.{sha} }}}}
          persist-credentials: false
      - name: wavegate job run
        run: wavegate job run
        env:
          WAVEGATE_SERVER: {server}
          WAVEGATE_JOB: ${{{{ inputs.{job} }}}}
{auth_env}"#,
        forge = match forge {
            ForgeKind::GitHub => "github",
            ForgeKind::Forgejo => "forgejo",
        },
        job = inputs::JOB,
        timeout = inputs::TIMEOUT,
        sha = inputs::SHA,
        runner = inputs::RUNNER,
        environment = inputs::ENVIRONMENT,
    )
}

/// What the forge must allow wavegate for the workflow, for `init actions`.
pub fn permissions(forge: ForgeKind) -> &'static str {
    match forge {
        ForgeKind::GitHub => {
            "The GitHub App needs the repository permission Actions: Read and write (to dispatch the workflow, follow its run and cancel it); app-manifest.json asks for it. Set WAVEGATE_PUBLIC_URL to where runners reach wavegate."
        }
        ForgeKind::Forgejo => {
            "wavegate's Forgejo token needs the write:repository scope (to dispatch the workflow, follow its run and cancel it, and set the repository's Actions secret WAVEGATE_RUN_KEY, which proves a claim is a run's), its user the right to administer the repository (Forgejo lets no one else set its secrets), and Actions enabled on the repository. Set WAVEGATE_PUBLIC_URL to where runners reach wavegate."
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workflow_declares_every_input_wavegate_dispatches_and_passes_none_to_a_shell() {
        for forge in [ForgeKind::GitHub, ForgeKind::Forgejo] {
            let text = render(forge, "wavegate:0.1.0", "https://wavegate.example.com");
            for input in [
                inputs::JOB,
                inputs::TIMEOUT,
                inputs::SHA,
                inputs::RUNNER,
                inputs::ENVIRONMENT,
            ] {
                assert!(
                    text.contains(&format!("      {input}:\n")),
                    "{input}: {text}"
                );
            }
            assert_eq!(
                text.contains("      token:\n"),
                forge == ForgeKind::Forgejo,
                "{text}"
            );
            assert_eq!(text.contains("id-token: write"), forge == ForgeKind::GitHub);
            assert_eq!(
                text.contains(&format!(
                    "          {name}: ${{{{ secrets.{name} }}}}\n",
                    name = crate::dispatch::run_key::SECRET_NAME
                )),
                forge == ForgeKind::Forgejo,
                "{text}"
            );
            assert!(text.contains("image: wavegate:0.1.0"));
            assert!(text.contains("WAVEGATE_SERVER: https://wavegate.example.com\n"));
            // Inputs reach the step through its environment, never spliced
            // into its script.
            let script = text.split("run: ").nth(1).unwrap().lines().next().unwrap();
            assert_eq!(script, "wavegate job run");
        }
    }
}
