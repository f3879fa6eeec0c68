//! What every check of `wavegate.toml` speaks: the error that names the
//! file, the field and the fix; durations, names and paths as the file
//! writes them; and the argv templates of its commands with their
//! placeholders.

use std::fmt;

/// A config mistake: where, what, and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    pub(crate) file: String,
    pub(crate) field: String,
    pub(crate) problem: String,
    pub(crate) fix: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}: {}; fix: {}", self.file, self.problem, self.fix)
        } else {
            write!(
                f,
                "{}: `{}`: {}; fix: {}",
                self.file, self.field, self.problem, self.fix
            )
        }
    }
}

pub(crate) use crate::model::time::parse_duration;

pub(crate) fn check_name(
    name: &str,
    field: &str,
    err: &impl Fn(String, String, &str) -> ConfigError,
) -> Result<(), ConfigError> {
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err(err(
            field.into(),
            format!("`{name}` is not a valid name"),
            "use letters, digits, `-`, `_` and `.` only (no `@`, no spaces)",
        ));
    }
    Ok(())
}

/// `dir/relative` as a path from the repository root, with `.` and `..`
/// resolved; `None` when it leaves the repository.
pub(crate) fn join_path(dir: &str, relative: &str) -> Option<String> {
    let mut parts: Vec<&str> = dir.split('/').filter(|s| !s.is_empty()).collect();
    for segment in relative.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            name => parts.push(name),
        }
    }
    Some(parts.join("/"))
}

/// The `{name}`s an argv element uses, in order.
pub(crate) fn placeholders(arg: &str) -> impl Iterator<Item = &str> {
    let mut rest = arg;
    std::iter::from_fn(move || {
        let open = rest.find('{')?;
        let close = rest[open..].find('}')?;
        let name = &rest[open + 1..open + close];
        rest = &rest[open + close + 1..];
        Some(name)
    })
}

/// What an argv template of one kind may hold: the shape of every command
/// in `wavegate.toml` (a member's, a hook's, a discovery's, a cost's, a
/// group's) is checked by [`Template::check`].
pub(crate) struct Template<'a> {
    /// `a hook`, `a cost command`…, for the unknown-placeholder problem
    /// (`None`: a member's command, which says nothing more).
    pub(crate) what: Option<&'a str>,
    pub(crate) allowed: &'a [&'a str],
    /// An example of the command, for the fix of an empty one.
    pub(crate) example: &'a str,
    /// Said after the list of placeholders in the fix, if anything.
    pub(crate) also: &'a str,
    /// A placeholder it must use, with the problem and fix when it does not.
    pub(crate) needs: Option<(&'a str, &'a str, &'a str)>,
}

impl Template<'_> {
    /// The problem and its fix, if `argv` is empty, uses a placeholder not
    /// allowed, or misses the one needed.
    pub(crate) fn check(&self, argv: &[String]) -> Result<(), (String, String)> {
        if argv.is_empty() || argv[0].trim().is_empty() {
            return Err((
                "the command is empty".into(),
                format!(
                    "give the program and its arguments as a list, e.g. {}",
                    self.example
                ),
            ));
        }
        if let Some(name) = argv
            .iter()
            .flat_map(|arg| placeholders(arg))
            .find(|name| !self.allowed.contains(name))
        {
            let known: Vec<String> = self.allowed.iter().map(|p| format!("{{{p}}}")).collect();
            let problem = match self.what {
                Some(what) => format!("unknown placeholder `{{{name}}}` in {what}"),
                None => format!("unknown placeholder `{{{name}}}`"),
            };
            return Err((
                problem,
                format!("use one of: {}{}", known.join(" "), self.also),
            ));
        }
        if let Some((needed, problem, fix)) = self.needs {
            let written = format!("{{{needed}}}");
            if !argv.iter().any(|arg| arg.contains(&written)) {
                return Err((problem.to_owned(), fix.to_owned()));
            }
        }
        Ok(())
    }
}
