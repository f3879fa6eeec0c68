//! People: users as each forge shows them, what each may do in a
//! repository (a collaborator's permission, asked the same way on both
//! forges and answered in each one's words), GitHub's team memberships and
//! Forgejo's token owner.

use super::*;

/// `login` as `forge` shows a user (GitHub: `type` Bot for a `[bot]` login).
pub(super) fn user_json(state: &mut State, forge: ForgeKind, login: &str) -> Value {
    let id = state.user_id(login);
    match forge {
        ForgeKind::GitHub => github_user(login, id),
        ForgeKind::Forgejo => json!({
            "id": id,
            "login": login,
            "login_name": "",
            "full_name": "",
            "email": format!("{login}@noreply.forge.example"),
            "username": login,
            "is_admin": false,
        }),
    }
}

/// A GitHub user (or organisation) with a known id.
pub(super) fn github_user(login: &str, id: u64) -> Value {
    json!({
        "login": login,
        "id": id,
        "node_id": format!("U_{id}"),
        "type": if login.ends_with("[bot]") { "Bot" } else { "User" },
        "site_admin": false,
        "html_url": format!("https://github.com/{login}"),
    })
}

/// A repository's routes about people: `GET collaborators/{user}/permission`.
pub(super) fn route(state: &mut State, call: &Call, path: &[&str]) -> Option<Answer> {
    match (call.req.method, path) {
        ("GET", ["collaborators", user, "permission"]) => Some(permission(state, call, user)),
        _ => None,
    }
}

/// What `user` may do in the repository: the role set with
/// `set_permission`, `none` without one. GitHub answers the permission it
/// folds the role into (`maintain` writes, `triage` reads) and the role;
/// Forgejo answers only a repository admin, with the permission as is.
fn permission(state: &mut State, call: &Call, user: &str) -> Answer {
    if call.forge == ForgeKind::Forgejo && !state.forgejo_bot_admin {
        return Err(forbidden("user is not an admin of this repository"));
    }
    let shown = user_json(state, call.forge, user);
    let role = state
        .repo_at(call.forge, call.full_name)
        .permissions
        .get(user)
        .cloned()
        .unwrap_or_else(|| "none".into());
    let permission = match (call.forge, role.as_str()) {
        (ForgeKind::GitHub, "maintain") => "write",
        (ForgeKind::GitHub, "triage") => "read",
        (_, other) => other,
    };
    Ok(answer(
        200,
        json!({ "permission": permission, "role_name": role, "user": shown }),
    ))
}

/// `GET /orgs/{org}/teams/{team}/memberships/{user}` (GitHub): 404 unless
/// `user` is on the team.
pub(super) fn team_membership(state: &State, org: &str, team: &str, user: &str) -> Answer {
    let members = state
        .teams
        .get(&(org.to_owned(), team.to_owned()))
        .ok_or_else(not_found)?;
    if !members.iter().any(|m| m == user) {
        return Err(not_found());
    }
    Ok(answer(
        200,
        json!({ "state": "active", "role": "member", "url": format!("https://api.github.com/orgs/{org}/teams/{team}/memberships/{user}") }),
    ))
}

/// Who a Forgejo token belongs to (401 without a known one).
pub(super) fn forgejo_login(state: &State, req: &Request) -> Result<String, Response> {
    match req.authorization() {
        Some(("token", token)) => state
            .forgejo_tokens
            .get(token)
            .cloned()
            .ok_or_else(|| unauthorized("user does not exist")),
        Some(("Bearer" | "bearer", token)) => state
            .oauth
            .owner(ForgeKind::Forgejo, token)
            .map(str::to_owned)
            .ok_or_else(|| unauthorized("invalid token")),
        _ => Err(unauthorized("token is required")),
    }
}

impl FakeForge {
    /// `permission`: `admin`, `write`, `read` (GitHub also `maintain`,
    /// `triage`; Forgejo also `owner`).
    pub fn set_permission(&self, repo: &RepoHandle, login: &str, permission: &str) {
        self.with(|s| {
            s.user_id(login);
            s.repo_of(repo)
                .permissions
                .insert(login.to_owned(), permission.to_owned());
        })
    }

    /// `login` joins the team `slug` of the organisation `org`.
    pub fn add_team_member(&self, org: &str, slug: &str, login: &str) {
        self.with(|s| {
            s.user_id(login);
            s.teams
                .entry((org.to_owned(), slug.to_owned()))
                .or_default()
                .push(login.to_owned());
        })
    }

    /// `login` leaves the team `slug` of the organisation `org`.
    pub fn remove_team_member(&self, org: &str, slug: &str, login: &str) {
        self.with(|s| {
            if let Some(members) = s.teams.get_mut(&(org.to_owned(), slug.to_owned())) {
                members.retain(|m| m != login);
            }
        })
    }

    /// Whether the bot's Forgejo user is an admin of the repository (only
    /// an admin may read collaborators' permissions).
    pub fn set_forgejo_bot_admin(&self, admin: bool) {
        self.with(|s| s.forgejo_bot_admin = admin)
    }
}
