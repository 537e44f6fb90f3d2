//! The runner's journal: an append-only file in the state dir, one JSON line per Plan
//! transition, fsync'd *before* the transition is acted on. After a crash (kill -9 at
//! any point) the restarted runner replays it to know, for every Plan it touched, how
//! far it got — and so never applies a step twice. See `RECOVERY.md` for the rules.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};

use outpost_api::PlanDiff;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// File name of the journal in the state dir.
pub const JOURNAL_FILE: &str = "journal.jsonl";

/// How far the runner got with one Plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "stage", rename_all = "lowercase")]
pub enum Stage {
    /// About to send the claim (a status update fenced by `resourceVersion`).
    Claiming {
        /// The resourceVersion the claim is conditioned on.
        resource_version: String,
    },
    /// The claim succeeded: the Plan is ours; nothing was applied yet.
    Claimed,
    /// About to call the executor's apply: live state may change from here on.
    Applying {
        /// The summary of the diff being applied.
        summary: String,
        /// The diff the Plan was cleared to apply: the one a person approved, or the one
        /// the policies passed when no approval was needed. A resumed apply keeps the
        /// first attempt's, so that after any number of kills the re-plan is held to
        /// what was cleared (`RECOVERY.md`). `None` in journals of older runners.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cleared: Option<Box<PlanDiff>>,
        /// Whether a person approved `cleared`.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        approved: bool,
    },
    /// Apply finished with these outputs (or the diff had no changes: nothing was
    /// applied, reason `NoChanges`); not yet reported.
    Applied {
        /// The outputs to report.
        outputs: BTreeMap<String, Value>,
        /// What the executor printed (reported as `status.log`).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        log: String,
        /// The real diff, reported with the result (`status.diff`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        diff: Option<Box<PlanDiff>>,
        /// `NoChanges` when nothing was applied.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// The Plan failed locally with this reason; not yet reported.
    Failed {
        /// The reason, reported as `status.message`.
        message: String,
    },
    /// The diff needs a person's approval; the executor's diff is saved in the entity's
    /// work dir under its hash. `AwaitingApproval` with the diff is not yet reported.
    Awaiting {
        /// The diff to report.
        diff: Box<PlanDiff>,
        /// `Replanned` when live state moved after an approval.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// `AwaitingApproval` is on the control plane and the claim released: the runner
    /// takes the Plan again once it is `Approved` (of `diff_hash`, saved in the work dir).
    Released {
        /// The hash of the saved diff.
        diff_hash: String,
    },
    /// The final phase is on the control plane. Nothing more to do.
    Reported,
    /// Another runner claimed the Plan (or it went away) first. Nothing to do.
    Lost,
}

impl Stage {
    /// This stage with the secret values `masker` knows masked in what is reported from
    /// it (outputs, log, message, summary).
    pub fn masked(self, masker: &crate::mask::Masker) -> Stage {
        if masker.is_empty() {
            return self;
        }
        match self {
            Stage::Applying {
                summary,
                cleared,
                approved,
            } => Stage::Applying {
                summary: masker.mask(&summary),
                cleared: cleared.map(|d| mask_diff(masker, &d)),
                approved,
            },
            Stage::Applied {
                outputs,
                log,
                diff,
                reason,
            } => Stage::Applied {
                outputs: masker.mask_map(&outputs),
                log: masker.mask(&log),
                diff: diff.map(|d| mask_diff(masker, &d)),
                reason,
            },
            Stage::Awaiting { diff, reason } => Stage::Awaiting {
                diff: mask_diff(masker, &diff),
                reason,
            },
            Stage::Failed { message } => Stage::Failed {
                message: masker.mask(&message),
            },
            other => other,
        }
    }
}

/// `diff` with every secret value masked in its text (addresses, fields, verdict
/// messages); its hash stays, so that an approval still binds to what will be applied.
pub(crate) fn mask_diff(masker: &crate::mask::Masker, diff: &PlanDiff) -> Box<PlanDiff> {
    let value = serde_json::to_value(diff).expect("a PlanDiff is JSON");
    let mut masked: PlanDiff = serde_json::from_value(masker.mask_json(&value))
        .expect("masking changes only the text of strings");
    masked.hash.clone_from(&diff.hash);
    Box::new(masked)
}

/// One journal line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The Plan's name.
    pub plan: String,
    /// The Plan's uid (names can be reused after a delete; uids cannot).
    pub uid: String,
    /// The stage reached.
    #[serde(flatten)]
    pub stage: Stage,
}

/// Why the journal could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("journal {path}")]
pub struct JournalError {
    path: PathBuf,
    #[source]
    source: std::io::Error,
}

/// The open journal and the last stage of every Plan in it.
pub struct Journal {
    path: PathBuf,
    file: File,
    /// uid → (first appearance, last record).
    latest: BTreeMap<String, (usize, Record)>,
}

impl Journal {
    /// Opens (or creates) the journal in `dir` and replays it. A torn last line (the
    /// process died mid-write, before the fsync returned, so nothing acted on it) is
    /// ignored.
    pub fn open(dir: &Path) -> Result<Self, JournalError> {
        let path = dir.join(JOURNAL_FILE);
        let err = |source| JournalError {
            path: path.clone(),
            source,
        };
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&path)
            .map_err(err)?;
        let mut latest = BTreeMap::new();
        let mut ends_with_newline = true;
        for line in BufReader::new(&file).split(b'\n') {
            let line = line.map_err(err)?;
            ends_with_newline = true;
            match serde_json::from_slice::<Record>(&line) {
                Ok(record) => {
                    let order = latest.len();
                    latest
                        .entry(record.uid.clone())
                        .and_modify(|(_, r)| *r = record.clone())
                        .or_insert((order, record));
                }
                Err(_) if !line.is_empty() => ends_with_newline = false,
                Err(_) => {}
            }
        }
        if !ends_with_newline {
            // Seal a torn line so the next record starts on its own line.
            file.write_all(b"\n").map_err(err)?;
        }
        Ok(Self { path, file, latest })
    }

    /// Appends `stage` for the Plan and fsyncs before returning: once this returns, a
    /// restarted runner knows the Plan reached `stage`.
    pub fn record(&mut self, plan: &str, uid: &str, stage: Stage) -> Result<(), JournalError> {
        let record = Record {
            plan: plan.to_owned(),
            uid: uid.to_owned(),
            stage,
        };
        let mut line = serde_json::to_vec(&record).expect("journal records serialise");
        line.push(b'\n');
        let err = |source| JournalError {
            path: self.path.clone(),
            source,
        };
        self.file.write_all(&line).map_err(err)?;
        self.file.sync_data().map_err(err)?;
        let order = self.latest.len();
        self.latest
            .entry(uid.to_owned())
            .and_modify(|(_, r)| *r = record.clone())
            .or_insert((order, record));
        Ok(())
    }

    /// The last stage the Plan with `uid` reached, if the journal knows it.
    pub fn stage(&self, uid: &str) -> Option<&Stage> {
        self.latest.get(uid).map(|(_, r)| &r.stage)
    }

    /// Plans not yet `Reported` (nor `Lost`, nor `Released` to a person's decision), in
    /// the order the runner first touched them.
    pub fn unfinished(&self) -> Vec<Record> {
        let mut open: Vec<&(usize, Record)> = self
            .latest
            .values()
            .filter(|(_, r)| {
                !matches!(
                    r.stage,
                    Stage::Reported | Stage::Lost | Stage::Released { .. }
                )
            })
            .collect();
        open.sort_by_key(|(order, _)| *order);
        open.into_iter().map(|(_, r)| r.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn replay_returns_the_last_stage_of_each_unfinished_plan() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut journal = Journal::open(dir.path()).unwrap();
            journal.record("a", "ua", Stage::Claimed).unwrap();
            journal.record("b", "ub", Stage::Claimed).unwrap();
            let applying = Stage::Applying {
                summary: "1 change".into(),
                cleared: None,
                approved: false,
            };
            journal.record("a", "ua", applying).unwrap();
            journal
                .record(
                    "b",
                    "ub",
                    Stage::Applying {
                        summary: "x".into(),
                        cleared: None,
                        approved: false,
                    },
                )
                .unwrap();
            let outputs = BTreeMap::from([("endpoint".to_owned(), json!("db:5432"))]);
            journal
                .record(
                    "b",
                    "ub",
                    Stage::Applied {
                        outputs,
                        log: String::new(),
                        diff: None,
                        reason: None,
                    },
                )
                .unwrap();
            journal.record("c", "uc", Stage::Claimed).unwrap();
            journal.record("c", "uc", Stage::Reported).unwrap();
        }
        let journal = Journal::open(dir.path()).unwrap();
        let open = journal.unfinished();
        assert_eq!(
            open.iter().map(|r| r.plan.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert!(matches!(open[0].stage, Stage::Applying { .. }));
        match &open[1].stage {
            Stage::Applied { outputs, .. } => assert_eq!(outputs["endpoint"], json!("db:5432")),
            other => panic!("b should be applied, is {other:?}"),
        }
        assert_eq!(journal.stage("uc"), Some(&Stage::Reported));
        assert_eq!(journal.stage("unknown"), None);
    }

    #[test]
    fn applying_keeps_what_the_apply_was_cleared_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let cleared = PlanDiff::new("sha256:c".into(), 3, 0, 0);
        {
            let mut journal = Journal::open(dir.path()).unwrap();
            let applying = Stage::Applying {
                summary: "1 to add, 0 to change, 0 to destroy".into(),
                cleared: Some(Box::new(cleared.clone())),
                approved: true,
            };
            journal.record("a", "ua", applying).unwrap();
        }
        // A line an older runner wrote: no clearance, nothing approved.
        let path = dir.path().join(JOURNAL_FILE);
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(
            b"{\"plan\":\"b\",\"uid\":\"ub\",\"stage\":\"applying\",\"summary\":\"x\"}\n",
        )
        .unwrap();
        drop(file);
        let journal = Journal::open(dir.path()).unwrap();
        match journal.stage("ua") {
            Some(Stage::Applying {
                cleared: Some(c),
                approved: true,
                ..
            }) => assert_eq!(**c, cleared),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            journal.stage("ub"),
            Some(&Stage::Applying {
                summary: "x".into(),
                cleared: None,
                approved: false,
            })
        );
    }

    #[test]
    fn a_torn_last_line_is_ignored_and_sealed() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut journal = Journal::open(dir.path()).unwrap();
            journal.record("a", "ua", Stage::Claimed).unwrap();
        }
        // kill -9 in the middle of writing the `applying` line.
        let path = dir.path().join(JOURNAL_FILE);
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(br#"{"plan":"a","uid":"ua","stage":"appl"#)
            .unwrap();
        drop(file);
        let mut journal = Journal::open(dir.path()).unwrap();
        assert_eq!(journal.stage("ua"), Some(&Stage::Claimed));
        journal.record("a", "ua", Stage::Reported).unwrap();
        let journal = Journal::open(dir.path()).unwrap();
        assert_eq!(journal.stage("ua"), Some(&Stage::Reported));
        assert!(journal.unfinished().is_empty());
    }
}
