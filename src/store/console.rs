//! The commands run for each pull request and apply run, and their output
//! (`command_logs`): written in batches while a command runs (the live
//! console's [`Keeper`]), a row of `command_output_parts` each so nothing
//! written is written again, and whole once it ended; read by the pages,
//! and followed by a replica whose watcher asks for a command running on
//! another.

use super::db::{to_i64, to_u64};
use super::Store;
use crate::model::{PrNumber, RepoId, UnixMs};
use crate::plan::live::{CommandId, Ending, Keeper, NewCommand};
use anyhow::{Context, Result};
use futures_util::future::BoxFuture;
use sqlx::Row;

/// A kept command, without its output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CommandRow {
    pub(crate) id: CommandId,
    pub(crate) pr: PrNumber,
    pub(crate) run: Option<i64>,
    pub(crate) label: String,
    pub(crate) kind: String,
    pub(crate) started_at: UnixMs,
    pub(crate) updated_at: UnixMs,
    pub(crate) finished_at: Option<UnixMs>,
    /// `None` while it runs (or its server stopped before it ended).
    pub(crate) ending: Option<Ending>,
    /// Its output went past the cap: while it runs, what came after waits
    /// for its end; once it ended, some was not kept (the output marks
    /// the cut).
    pub(crate) truncated: bool,
}

/// Where a watcher following a command in the store is: the parts read
/// while it ran, and the characters of its output read in all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Cursor {
    pub(crate) part: i64,
    pub(crate) chars: u64,
}

/// Output of a command past a cursor, and whether it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OutputFrom {
    pub(crate) text: String,
    /// Where a next read goes on from.
    pub(crate) cursor: Cursor,
    pub(crate) ending: Option<Ending>,
    pub(crate) updated_at: UnixMs,
}

const COLUMNS: &str = "id, number, run_id, label, kind, started_at, updated_at, finished_at, \
                       ending, truncated";

fn command_row(row: &sqlx::any::AnyRow) -> Result<CommandRow> {
    let id: i64 = row.try_get("id")?;
    let ending = ending_of(id, row.try_get("ending")?)?;
    Ok(CommandRow {
        id,
        pr: PrNumber(to_u64(row.try_get("number")?, "pull request number")?),
        run: row.try_get("run_id")?,
        label: row.try_get("label")?,
        kind: row.try_get("kind")?,
        started_at: UnixMs::from_millis(row.try_get("started_at")?),
        updated_at: UnixMs::from_millis(row.try_get("updated_at")?),
        finished_at: row
            .try_get::<Option<i64>, _>("finished_at")?
            .map(UnixMs::from_millis),
        ending,
        truncated: row.try_get::<i64, _>("truncated")? != 0,
    })
}

fn ending_of(id: CommandId, key: Option<String>) -> Result<Option<Ending>> {
    key.map(|key| {
        Ending::from_key(&key)
            .with_context(|| format!("command {id} ended in a way wavegate does not know: {key}"))
    })
    .transpose()
}

impl Store {
    /// Records that a command started; answers its id.
    pub(crate) async fn open_command(&self, command: &NewCommand) -> Result<CommandId> {
        let owner = &command.owner;
        let now = self.now().millis();
        let _writer = self.writer.lock().await;
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO command_logs (forge, repo, number, run_id, label, kind, started_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $7) RETURNING id",
        )
        .bind(owner.repo.forge.as_str())
        .bind(&owner.repo.full_name)
        .bind(to_i64(owner.pr.0, "pull request number")?)
        .bind(owner.run)
        .bind(&command.label)
        .bind(command.kind)
        .bind(now)
        .fetch_one(&self.pool)
        .await
        .with_context(|| format!("recording that {} started", command.label))?;
        Ok(id)
    }

    /// Adds `text` to command `id`'s output, unless it ended, and notes
    /// it still runs.
    pub(crate) async fn append_output(&self, id: CommandId, text: &str, cut: bool) -> Result<()> {
        let now = self.now().millis();
        let _writer = self.writer.lock().await;
        let mut tx = self.pool.begin().await?;
        if !text.is_empty() {
            sqlx::query(
                "INSERT INTO command_output_parts (command_id, seq, text)
                 SELECT $1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM command_output_parts
                             WHERE command_id = $1), $2
                 FROM command_logs WHERE id = $1 AND ending IS NULL",
            )
            .bind(id)
            .bind(text)
            .execute(&mut *tx)
            .await
            .with_context(|| format!("writing the output of command {id}"))?;
        }
        sqlx::query(
            "UPDATE command_logs SET updated_at = $1,
                    truncated = CASE WHEN $2 = 1 THEN 1 ELSE truncated END
             WHERE id = $3 AND ending IS NULL",
        )
        .bind(now)
        .bind(i64::from(cut))
        .bind(id)
        .execute(&mut *tx)
        .await
        .with_context(|| format!("noting that command {id} still runs"))?;
        tx.commit().await?;
        Ok(())
    }

    /// Command `id` ended; `output` (its whole kept output), when given,
    /// is kept, and otherwise what was written as it ran.
    pub(crate) async fn finish_command(
        &self,
        id: CommandId,
        output: Option<&str>,
        cut: bool,
        ending: Ending,
    ) -> Result<()> {
        let now = self.now().millis();
        let _writer = self.writer.lock().await;
        let mut tx = self.pool.begin().await?;
        let output = match output {
            Some(output) => output.to_owned(),
            None => parts_of(&mut tx, id).await?,
        };
        sqlx::query(
            "UPDATE command_logs SET output = $1, updated_at = $2, finished_at = $2, ending = $3,
                    truncated = $4
             WHERE id = $5 AND ending IS NULL",
        )
        .bind(&output)
        .bind(now)
        .bind(ending.key())
        .bind(i64::from(cut))
        .bind(id)
        .execute(&mut *tx)
        .await
        .with_context(|| format!("writing how command {id} ended"))?;
        sqlx::query("DELETE FROM command_output_parts WHERE command_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await
            .with_context(|| format!("removing the parts of command {id}'s output"))?;
        tx.commit().await?;
        Ok(())
    }

    /// The last `limit` commands of `repo`'s pull request `pr`, oldest
    /// first, each with its output when `with_output`.
    pub(crate) async fn commands_of(
        &self,
        repo: &RepoId,
        pr: PrNumber,
        limit: u32,
        with_output: bool,
    ) -> Result<Vec<(CommandRow, Option<String>)>> {
        let output = if with_output { ", output" } else { "" };
        let sql = format!(
            "SELECT {COLUMNS}{output} FROM command_logs
             WHERE forge = $1 AND repo = $2 AND number = $3
             ORDER BY id DESC LIMIT $4"
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(repo.forge.as_str())
            .bind(&repo.full_name)
            .bind(to_i64(pr.0, "pull request number")?)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .with_context(|| format!("listing the commands of {repo}{pr}"))?;
        let mut commands = Vec::with_capacity(rows.len());
        for row in rows.iter().rev() {
            let command = command_row(row)?;
            let output = match with_output {
                false => None,
                true => Some(self.output_of(&command, row).await?),
            };
            commands.push((command, output));
        }
        Ok(commands)
    }

    /// Command `id` of `repo`'s pull request `pr`, with its output when
    /// `with_output`.
    pub(crate) async fn command(
        &self,
        repo: &RepoId,
        pr: PrNumber,
        id: CommandId,
        with_output: bool,
    ) -> Result<Option<(CommandRow, Option<String>)>> {
        let output = if with_output { ", output" } else { "" };
        let sql = format!(
            "SELECT {COLUMNS}{output} FROM command_logs
             WHERE forge = $1 AND repo = $2 AND number = $3 AND id = $4"
        );
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(repo.forge.as_str())
            .bind(&repo.full_name)
            .bind(to_i64(pr.0, "pull request number")?)
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .with_context(|| format!("reading command {id} of {repo}{pr}"))?;
        let Some(row) = row else {
            return Ok(None);
        };
        let command = command_row(&row)?;
        let output = match with_output {
            false => None,
            true => Some(self.output_of(&command, &row).await?),
        };
        Ok(Some((command, output)))
    }

    /// A command's output: its parts while it runs, whole once it ended.
    async fn output_of(&self, command: &CommandRow, row: &sqlx::any::AnyRow) -> Result<String> {
        match command.ending {
            Some(_) => Ok(row.try_get("output")?),
            None => {
                let mut conn = self.pool.acquire().await?;
                parts_of(&mut conn, command.id).await
            }
        }
    }

    /// Command `id`'s output past `cursor`, for a watcher following a
    /// command another replica runs.
    pub(crate) async fn output_from(
        &self,
        id: CommandId,
        cursor: Cursor,
    ) -> Result<Option<OutputFrom>> {
        let Some(row) = sqlx::query("SELECT ending, updated_at FROM command_logs WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .with_context(|| format!("reading command {id}"))?
        else {
            return Ok(None);
        };
        let ending = ending_of(id, row.try_get("ending")?)?;
        let updated_at = UnixMs::from_millis(row.try_get("updated_at")?);
        let (text, part) = match ending {
            // Its parts are gone: its whole output goes on from the
            // characters read (it begins with what the parts held).
            Some(_) => {
                let text: String = sqlx::query_scalar(
                    "SELECT substr(output, CAST($1 AS INTEGER)) FROM command_logs WHERE id = $2",
                )
                .bind(to_i64(cursor.chars + 1, "output offset")?)
                .bind(id)
                .fetch_one(&self.pool)
                .await
                .with_context(|| format!("reading the output of command {id}"))?;
                (text, cursor.part)
            }
            None => {
                let parts: Vec<(i64, String)> = sqlx::query_as(
                    "SELECT seq, text FROM command_output_parts
                     WHERE command_id = $1 AND seq > $2 ORDER BY seq",
                )
                .bind(id)
                .bind(cursor.part)
                .fetch_all(&self.pool)
                .await
                .with_context(|| format!("reading the output of command {id}"))?;
                let part = parts.last().map_or(cursor.part, |(seq, _)| *seq);
                (parts.into_iter().map(|(_, text)| text).collect(), part)
            }
        };
        let chars = cursor.chars + text.chars().count() as u64;
        Ok(Some(OutputFrom {
            text,
            cursor: Cursor { part, chars },
            ending,
            updated_at,
        }))
    }
}

/// What a running command's parts hold, in order.
async fn parts_of(conn: &mut sqlx::AnyConnection, id: CommandId) -> Result<String> {
    let parts: Vec<(String,)> =
        sqlx::query_as("SELECT text FROM command_output_parts WHERE command_id = $1 ORDER BY seq")
            .bind(id)
            .fetch_all(&mut *conn)
            .await
            .with_context(|| format!("reading the output of command {id}"))?;
    Ok(parts.into_iter().map(|(text,)| text).collect())
}

impl Keeper for Store {
    fn open<'a>(&'a self, command: &'a NewCommand) -> BoxFuture<'a, Result<CommandId>> {
        Box::pin(self.open_command(command))
    }

    fn append<'a>(&'a self, id: CommandId, text: &'a str, cut: bool) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.append_output(id, text, cut))
    }

    fn finish<'a>(
        &'a self,
        id: CommandId,
        output: Option<&'a str>,
        cut: bool,
        ending: Ending,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.finish_command(id, output, cut, ending))
    }
}
