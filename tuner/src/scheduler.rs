//! Which shard a tuning process measures when `--shard` is not given: the one its job scheduler names.
//!
//! - **Slurm job arrays** (`sbatch --array=0-3`): every task has `SLURM_ARRAY_TASK_ID`, `SLURM_ARRAY_TASK_COUNT`,
//!   `SLURM_ARRAY_TASK_MIN`, `SLURM_ARRAY_TASK_MAX` and `SLURM_ARRAY_TASK_STEP`. Task ids need not start at 0
//!   (`--array=1-4`) nor be consecutive (`--array=0-6:2`), so the shard index is `(ID - MIN) / STEP` of `COUNT`.
//!   An array whose ids are not `MIN, MIN + STEP, ..., MAX` (a list such as `--array=1,2,9`) is refused: its
//!   ids do not number the shards.
//! - **Kubernetes Indexed Jobs** (`completionMode: Indexed`): every pod has `JOB_COMPLETION_INDEX` (0-based).
//!   Kubernetes does not export the Job's `completions`, so the count comes from `--shard-count N` or
//!   `K3K_SHARD_COUNT` (set it equal to `completions` in the manifest).
//!
//! An explicit `--shard i/n` wins, and [`ShardChoice`]'s text says so when the environment names a shard too.
//! A count with no index to go with it, two schedulers at once, or values that disagree are errors naming the
//! variable: a process that silently tuned everything would duplicate every other shard's work.

use crate::shard::{Shard, ShardParseError};
use std::fmt;

pub const SLURM_TASK_ID: &str = "SLURM_ARRAY_TASK_ID";
pub const SLURM_TASK_COUNT: &str = "SLURM_ARRAY_TASK_COUNT";
pub const SLURM_TASK_MIN: &str = "SLURM_ARRAY_TASK_MIN";
pub const SLURM_TASK_MAX: &str = "SLURM_ARRAY_TASK_MAX";
pub const SLURM_TASK_STEP: &str = "SLURM_ARRAY_TASK_STEP";
pub const K8S_COMPLETION_INDEX: &str = "JOB_COMPLETION_INDEX";
pub const SHARD_COUNT_VAR: &str = "K3K_SHARD_COUNT";
/// The flag that gives the count with `JOB_COMPLETION_INDEX`.
pub const SHARD_COUNT_FLAG: &str = "--shard-count";

/// Every variable read here (for `k3k doctor`).
pub const SCHEDULER_VARS: [&str; 7] = [
    SLURM_TASK_ID,
    SLURM_TASK_COUNT,
    SLURM_TASK_MIN,
    SLURM_TASK_MAX,
    SLURM_TASK_STEP,
    K8S_COMPLETION_INDEX,
    SHARD_COUNT_VAR,
];

/// Why no shard could be chosen. Each names the flag or variable at fault and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchedulerError {
    #[error("--shard: {0}")]
    Flag(#[from] ShardParseError),
    #[error("{name}=`{value}`: expected {expected}")]
    BadValue { name: String, value: String, expected: String },
    #[error("{name} is set but {missing} is not: {hint}")]
    Missing { name: String, missing: String, hint: String },
    #[error("{what}: {reason}")]
    Inconsistent { what: String, reason: String },
}

/// Where the shard came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShardSource {
    /// `--shard i/n`; `overridden` holds the scheduler variables (name, value) that were set too.
    Flag { overridden: Vec<(String, String)> },
    /// A Slurm array task; `min` and `step` as read (`None`: unset, taken as 0 and 1).
    Slurm { id: u32, min: Option<u32>, step: Option<u32>, count: u32 },
    /// A Kubernetes Indexed Job's pod; `count_from` is `--shard-count` or `K3K_SHARD_COUNT`.
    Kubernetes { index: u32, count: u32, count_from: &'static str },
    /// Nothing named a shard: the whole run.
    None,
}

impl ShardSource {
    /// `--shard`, `Slurm`, `Kubernetes` or `none`.
    pub fn name(&self) -> &'static str {
        match self {
            ShardSource::Flag { .. } => "--shard",
            ShardSource::Slurm { .. } => "Slurm",
            ShardSource::Kubernetes { .. } => "Kubernetes",
            ShardSource::None => "none",
        }
    }
}

/// The shard a run measures and where it came from; its text is the line `k3k tune` prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardChoice {
    pub shard: Shard,
    pub source: ShardSource,
}

impl fmt::Display for ShardChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.shard;
        match &self.source {
            ShardSource::Flag { overridden } if overridden.is_empty() => write!(f, "shard {s} from --shard"),
            ShardSource::Flag { overridden } => {
                let vars: Vec<String> = overridden.iter().map(|(k, v)| format!("{k}={v}")).collect();
                write!(f, "shard {s} from --shard (overrides {} of the environment)", vars.join(", "))
            }
            ShardSource::Slurm { id, min, step, count } => {
                write!(f, "shard {s} from Slurm ({SLURM_TASK_ID}={id}")?;
                match min {
                    Some(m) => write!(f, ", {SLURM_TASK_MIN}={m}")?,
                    None => write!(f, ", {SLURM_TASK_MIN} unset: 0")?,
                }
                if let Some(st) = step.filter(|&st| st != 1) {
                    write!(f, ", {SLURM_TASK_STEP}={st}")?;
                }
                write!(f, ", {SLURM_TASK_COUNT}={count})")
            }
            ShardSource::Kubernetes { index, count, count_from } => {
                write!(
                    f,
                    "shard {s} from Kubernetes ({K8S_COMPLETION_INDEX}={index}, {})",
                    count_named(count_from, *count)
                )
            }
            ShardSource::None => write!(
                f,
                "no shard: the whole run (no --shard, no {SLURM_TASK_ID} of a Slurm array, no {K8S_COMPLETION_INDEX} of \
                 a Kubernetes Indexed Job)"
            ),
        }
    }
}

/// The shard of this run from `--shard`, `--shard-count` and the variables `env` returns (`env(name)`: the
/// value, `None` when unset). See the module doc for the rules.
pub fn choose(
    shard_flag: Option<&str>,
    count_flag: Option<u32>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<ShardChoice, SchedulerError> {
    if count_flag == Some(0) {
        return Err(bad(SHARD_COUNT_FLAG, "0", "a shard count of at least 1"));
    }
    if let Some(flag) = shard_flag {
        let shard: Shard = flag.parse()?;
        if let Some(n) = count_flag.filter(|&n| n != shard.count) {
            return Err(SchedulerError::Inconsistent {
                what: format!("--shard {flag} and {SHARD_COUNT_FLAG} {n}"),
                reason: "the two shard counts differ (give one of them)".into(),
            });
        }
        let overridden = [SLURM_TASK_ID, K8S_COMPLETION_INDEX, SHARD_COUNT_VAR]
            .into_iter()
            .filter_map(|k| env(k).map(|v| (k.to_string(), v)))
            .collect();
        return Ok(ShardChoice { shard, source: ShardSource::Flag { overridden } });
    }
    // The count given besides the scheduler's index: the flag, else the variable; both must agree.
    let count_var = env(SHARD_COUNT_VAR).map(|v| count(SHARD_COUNT_VAR, &v)).transpose()?;
    let given_count: Option<(u32, &'static str)> = match (count_flag, count_var) {
        (Some(a), Some(b)) if a != b => {
            return Err(SchedulerError::Inconsistent {
                what: format!("{SHARD_COUNT_FLAG} {a} and {SHARD_COUNT_VAR}={b}"),
                reason: "the two shard counts differ (give one of them)".into(),
            });
        }
        (Some(a), _) => Some((a, SHARD_COUNT_FLAG)),
        (None, Some(b)) => Some((b, SHARD_COUNT_VAR)),
        (None, None) => None,
    };
    let slurm_id = env(SLURM_TASK_ID);
    let k8s_index = env(K8S_COMPLETION_INDEX);
    match (slurm_id, k8s_index) {
        (Some(_), Some(_)) => Err(SchedulerError::Inconsistent {
            what: format!("{SLURM_TASK_ID} and {K8S_COMPLETION_INDEX}"),
            reason: "both are set, so it is not clear which scheduler started this process; pass --shard i/n".into(),
        }),
        (Some(id), None) => slurm(&id, given_count, &env),
        (None, Some(index)) => kubernetes(&index, given_count),
        (None, None) => match given_count {
            Some((n, from)) => Err(SchedulerError::Missing {
                name: count_named(from, n),
                missing: format!("a shard index ({K8S_COMPLETION_INDEX} or {SLURM_TASK_ID})"),
                hint: "run it in a Kubernetes Indexed Job (completionMode: Indexed) or a Slurm job array, or pass \
                       --shard i/n; without an index this process would tune every shard"
                    .into(),
            }),
            None => Ok(ShardChoice { shard: Shard::ALL, source: ShardSource::None }),
        },
    }
}

/// [`choose`] with the variables of this process.
pub fn choose_from_process_env(
    shard_flag: Option<&str>,
    count_flag: Option<u32>,
) -> Result<ShardChoice, SchedulerError> {
    choose(shard_flag, count_flag, |k| std::env::var_os(k).map(|v| v.to_string_lossy().into_owned()))
}

/// `--shard-count 4` or `K3K_SHARD_COUNT=4`.
fn count_named(from: &str, n: u32) -> String {
    if from.starts_with('-') { format!("{from} {n}") } else { format!("{from}={n}") }
}

fn bad(name: &str, value: &str, expected: &str) -> SchedulerError {
    SchedulerError::BadValue { name: name.into(), value: value.into(), expected: expected.into() }
}

/// A non-negative whole number.
fn number(name: &str, value: &str) -> Result<u32, SchedulerError> {
    value.trim().parse().map_err(|_| bad(name, value, "a non-negative whole number"))
}

/// A shard count: a whole number of at least 1.
fn count(name: &str, value: &str) -> Result<u32, SchedulerError> {
    match value.trim().parse::<u32>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(bad(name, value, "a shard count: a whole number of at least 1")),
    }
}

fn slurm(
    id_s: &str,
    given_count: Option<(u32, &'static str)>,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<ShardChoice, SchedulerError> {
    let id = number(SLURM_TASK_ID, id_s)?;
    let count_s = env(SLURM_TASK_COUNT).ok_or_else(|| SchedulerError::Missing {
        name: SLURM_TASK_ID.into(),
        missing: SLURM_TASK_COUNT.into(),
        hint: "Slurm sets both for every task of a job array (Slurm 18.08 or newer); pass --shard i/n otherwise".into(),
    })?;
    let n = count(SLURM_TASK_COUNT, &count_s)?;
    let min = env(SLURM_TASK_MIN).map(|v| number(SLURM_TASK_MIN, &v)).transpose()?;
    let step = match env(SLURM_TASK_STEP) {
        Some(v) => Some(count(SLURM_TASK_STEP, &v).map_err(|_| bad(SLURM_TASK_STEP, &v, "a step of at least 1"))?),
        None => None,
    };
    let (lo, st) = (min.unwrap_or(0), step.unwrap_or(1));
    let inconsistent = |reason: String| SchedulerError::Inconsistent {
        what: format!("{SLURM_TASK_ID}={id}, {SLURM_TASK_MIN}={lo}, {SLURM_TASK_STEP}={st}, {SLURM_TASK_COUNT}={n}"),
        reason,
    };
    if let Some(max_s) = env(SLURM_TASK_MAX) {
        let max = number(SLURM_TASK_MAX, &max_s)?;
        if u64::from(lo) + u64::from(n - 1) * u64::from(st) != u64::from(max) {
            return Err(inconsistent(format!(
                "with {SLURM_TASK_MAX}={max} the array's task ids are not MIN, MIN + STEP, .., MAX (a list such as \
                 --array=1,2,9?); number the tasks as a range, e.g. --array=0-{}, or pass --shard i/n",
                n - 1
            )));
        }
    }
    if id < lo || (id - lo) % st != 0 || (id - lo) / st >= n {
        return Err(inconsistent(format!(
            "the task id is not one of the array's {n} ids {lo}, {}, .. (expected (ID - MIN) / STEP a whole number \
             below the count)",
            u64::from(lo) + u64::from(st)
        )));
    }
    let index = (id - lo) / st;
    if let Some((c, from)) = given_count.filter(|(c, _)| *c != n) {
        return Err(SchedulerError::Inconsistent {
            what: format!("{} and {SLURM_TASK_COUNT}={n}", count_named(from, c)),
            reason: "the shard count differs from the job array's task count (give one of them)".into(),
        });
    }
    let shard = Shard::new(index, n)?;
    Ok(ShardChoice { shard, source: ShardSource::Slurm { id, min, step, count: n } })
}

fn kubernetes(index_s: &str, given_count: Option<(u32, &'static str)>) -> Result<ShardChoice, SchedulerError> {
    let index = number(K8S_COMPLETION_INDEX, index_s)?;
    let Some((n, count_from)) = given_count else {
        return Err(SchedulerError::Missing {
            name: K8S_COMPLETION_INDEX.into(),
            missing: format!("a shard count ({SHARD_COUNT_FLAG} N or {SHARD_COUNT_VAR})"),
            hint: format!(
                "Kubernetes does not export the Job's completions; set {SHARD_COUNT_VAR} to spec.completions in the \
                 manifest, or pass --shard i/n"
            ),
        });
    };
    if index >= n {
        return Err(SchedulerError::Inconsistent {
            what: format!("{K8S_COMPLETION_INDEX}={index} with {}", count_named(count_from, n)),
            reason: format!(
                "the completion index is out of range for {n} shards (expected 0 to {}; is the shard count the Job's \
                 completions?)",
                n - 1
            ),
        });
    }
    let shard = Shard::new(index, n)?;
    Ok(ShardChoice { shard, source: ShardSource::Kubernetes { index, count: n, count_from } })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// [`choose`] over a fixed map of variables (the process environment is never touched).
    fn pick(flag: Option<&str>, count: Option<u32>, vars: &[(&str, &str)]) -> Result<ShardChoice, SchedulerError> {
        let env: BTreeMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        choose(flag, count, |k| env.get(k).cloned())
    }

    fn shard(i: u32, n: u32) -> Shard {
        Shard::new(i, n).unwrap()
    }

    fn err(flag: Option<&str>, count: Option<u32>, vars: &[(&str, &str)]) -> String {
        pick(flag, count, vars).unwrap_err().to_string()
    }

    #[test]
    fn nothing_set_is_the_whole_run() {
        let c = pick(None, None, &[("SLURM_JOB_ID", "77"), ("HOME", "/root")]).unwrap();
        assert_eq!(c, ShardChoice { shard: Shard::ALL, source: ShardSource::None });
        assert_eq!(c.source.name(), "none");
        assert!(c.to_string().starts_with("no shard: the whole run"), "{c}");
    }

    #[test]
    fn slurm_array_from_zero() {
        let vars = [
            (SLURM_TASK_ID, "2"),
            (SLURM_TASK_COUNT, "4"),
            (SLURM_TASK_MIN, "0"),
            (SLURM_TASK_MAX, "3"),
            (SLURM_TASK_STEP, "1"),
        ];
        let c = pick(None, None, &vars).unwrap();
        assert_eq!(c.shard, shard(2, 4));
        assert_eq!(c.source.name(), "Slurm");
        assert_eq!(
            c.to_string(),
            "shard 2/4 from Slurm (SLURM_ARRAY_TASK_ID=2, SLURM_ARRAY_TASK_MIN=0, SLURM_ARRAY_TASK_COUNT=4)"
        );
    }

    #[test]
    fn slurm_ids_that_start_above_zero_or_step_are_offset() {
        // --array=1-4: ids 1..4 are shards 0..3.
        for id in 1..=4u32 {
            let id_s = id.to_string();
            let vars =
                [(SLURM_TASK_ID, id_s.as_str()), (SLURM_TASK_COUNT, "4"), (SLURM_TASK_MIN, "1"), (SLURM_TASK_MAX, "4")];
            assert_eq!(pick(None, None, &vars).unwrap().shard, shard(id - 1, 4));
        }
        // --array=10-16:3: ids 10, 13, 16 are shards 0..2.
        for (id, i) in [("10", 0), ("13", 1), ("16", 2)] {
            let vars = [
                (SLURM_TASK_ID, id),
                (SLURM_TASK_COUNT, "3"),
                (SLURM_TASK_MIN, "10"),
                (SLURM_TASK_MAX, "16"),
                (SLURM_TASK_STEP, "3"),
            ];
            let c = pick(None, None, &vars).unwrap();
            assert_eq!(c.shard, shard(i, 3));
            assert!(c.to_string().contains("SLURM_ARRAY_TASK_STEP=3"), "{c}");
        }
        // Without MIN (not a Slurm that sets it): taken as 0, and said.
        let c = pick(None, None, &[(SLURM_TASK_ID, "1"), (SLURM_TASK_COUNT, "2")]).unwrap();
        assert_eq!(c.shard, shard(1, 2));
        assert!(c.to_string().contains("SLURM_ARRAY_TASK_MIN unset: 0"), "{c}");
    }

    #[test]
    fn bad_slurm_values_name_the_variable() {
        let e = err(None, None, &[(SLURM_TASK_ID, "x"), (SLURM_TASK_COUNT, "4")]);
        assert_eq!(e, "SLURM_ARRAY_TASK_ID=`x`: expected a non-negative whole number");
        let e = err(None, None, &[(SLURM_TASK_ID, "-1"), (SLURM_TASK_COUNT, "4")]);
        assert!(e.starts_with("SLURM_ARRAY_TASK_ID=`-1`: expected"), "{e}");
        let e = err(None, None, &[(SLURM_TASK_ID, "0"), (SLURM_TASK_COUNT, "0")]);
        assert_eq!(e, "SLURM_ARRAY_TASK_COUNT=`0`: expected a shard count: a whole number of at least 1");
        let e = err(None, None, &[(SLURM_TASK_ID, "0"), (SLURM_TASK_COUNT, "")]);
        assert!(e.starts_with("SLURM_ARRAY_TASK_COUNT=``: expected"), "{e}");
        let e = err(None, None, &[(SLURM_TASK_ID, "0")]);
        assert!(e.starts_with("SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT is not"), "{e}");
        let e = err(None, None, &[(SLURM_TASK_ID, "1"), (SLURM_TASK_COUNT, "2"), (SLURM_TASK_STEP, "0")]);
        assert_eq!(e, "SLURM_ARRAY_TASK_STEP=`0`: expected a step of at least 1");
        let e = err(None, None, &[(SLURM_TASK_ID, "1"), (SLURM_TASK_COUNT, "2"), (SLURM_TASK_MIN, "one")]);
        assert!(e.starts_with("SLURM_ARRAY_TASK_MIN=`one`"), "{e}");
    }

    #[test]
    fn slurm_ids_outside_the_array_are_refused() {
        // id 5 of --array=1-4 (MIN 1, COUNT 4): index 4 of 4.
        let e = err(None, None, &[(SLURM_TASK_ID, "5"), (SLURM_TASK_COUNT, "4"), (SLURM_TASK_MIN, "1")]);
        assert!(e.contains("SLURM_ARRAY_TASK_ID=5") && e.contains("is not one of the array's 4 ids 1, 2"), "{e}");
        // Below MIN.
        let e = err(None, None, &[(SLURM_TASK_ID, "0"), (SLURM_TASK_COUNT, "4"), (SLURM_TASK_MIN, "1")]);
        assert!(e.contains("is not one of the array's 4 ids"), "{e}");
        // Between two steps.
        let vars = [(SLURM_TASK_ID, "11"), (SLURM_TASK_COUNT, "3"), (SLURM_TASK_MIN, "10"), (SLURM_TASK_STEP, "3")];
        assert!(err(None, None, &vars).contains("is not one of the array's 3 ids 10, 13"));
        // --array=1,2,9: MIN 1, MAX 9, COUNT 3 is no range.
        let vars = [(SLURM_TASK_ID, "2"), (SLURM_TASK_COUNT, "3"), (SLURM_TASK_MIN, "1"), (SLURM_TASK_MAX, "9")];
        let e = err(None, None, &vars);
        assert!(e.contains("SLURM_ARRAY_TASK_MAX=9") && e.contains("--array=0-2"), "{e}");
    }

    #[test]
    fn kubernetes_index_with_a_count_from_the_flag_or_the_variable() {
        let c = pick(None, None, &[(K8S_COMPLETION_INDEX, "3"), (SHARD_COUNT_VAR, "8")]).unwrap();
        assert_eq!(c.shard, shard(3, 8));
        assert_eq!(c.to_string(), "shard 3/8 from Kubernetes (JOB_COMPLETION_INDEX=3, K3K_SHARD_COUNT=8)");
        let c = pick(None, Some(8), &[(K8S_COMPLETION_INDEX, "0")]).unwrap();
        assert_eq!(c.shard, shard(0, 8));
        assert_eq!(c.to_string(), "shard 0/8 from Kubernetes (JOB_COMPLETION_INDEX=0, --shard-count 8)");
        assert_eq!(c.source.name(), "Kubernetes");
        // Both, agreeing: the flag is named.
        let c = pick(None, Some(8), &[(K8S_COMPLETION_INDEX, "7"), (SHARD_COUNT_VAR, "8")]).unwrap();
        assert_eq!(c.shard, shard(7, 8));
        assert!(matches!(c.source, ShardSource::Kubernetes { count_from: SHARD_COUNT_FLAG, .. }));
    }

    #[test]
    fn bad_kubernetes_values_name_the_variable() {
        let e = err(None, None, &[(K8S_COMPLETION_INDEX, "2")]);
        assert!(
            e.starts_with("JOB_COMPLETION_INDEX is set but a shard count (--shard-count N or K3K_SHARD_COUNT)"),
            "{e}"
        );
        assert!(e.contains("does not export the Job's completions"), "{e}");
        let e = err(None, None, &[(K8S_COMPLETION_INDEX, "4"), (SHARD_COUNT_VAR, "4")]);
        assert!(
            e.starts_with("JOB_COMPLETION_INDEX=4 with K3K_SHARD_COUNT=4: the completion index is out of range"),
            "{e}"
        );
        assert!(e.contains("expected 0 to 3"), "{e}");
        let e = err(None, None, &[(K8S_COMPLETION_INDEX, "two"), (SHARD_COUNT_VAR, "4")]);
        assert_eq!(e, "JOB_COMPLETION_INDEX=`two`: expected a non-negative whole number");
        let e = err(None, None, &[(K8S_COMPLETION_INDEX, "0"), (SHARD_COUNT_VAR, "0")]);
        assert!(e.starts_with("K3K_SHARD_COUNT=`0`: expected a shard count"), "{e}");
        let e = err(None, Some(0), &[(K8S_COMPLETION_INDEX, "0")]);
        assert!(e.starts_with("--shard-count=`0`: expected a shard count"), "{e}");
        let e = err(None, Some(4), &[(K8S_COMPLETION_INDEX, "0"), (SHARD_COUNT_VAR, "3")]);
        assert!(e.starts_with("--shard-count 4 and K3K_SHARD_COUNT=3: the two shard counts differ"), "{e}");
    }

    #[test]
    fn a_count_without_an_index_is_refused() {
        // An Indexed Job manifest that forgot `completionMode: Indexed`: every pod would tune everything.
        let e = err(None, None, &[(SHARD_COUNT_VAR, "4")]);
        assert!(
            e.starts_with("K3K_SHARD_COUNT=4 is set but a shard index (JOB_COMPLETION_INDEX or SLURM_ARRAY_TASK_ID)")
        );
        assert!(e.contains("would tune every shard"), "{e}");
        let e = err(None, Some(4), &[]);
        assert!(e.starts_with("--shard-count 4 is set but a shard index"), "{e}");
    }

    #[test]
    fn a_count_given_with_slurm_must_match_the_array() {
        let vars = [(SLURM_TASK_ID, "1"), (SLURM_TASK_COUNT, "4"), (SLURM_TASK_MIN, "0")];
        assert_eq!(pick(None, Some(4), &vars).unwrap().shard, shard(1, 4));
        let e = err(None, Some(3), &vars);
        assert!(e.starts_with("--shard-count 3 and SLURM_ARRAY_TASK_COUNT=4: the shard count differs"), "{e}");
        let mut with_var = vars.to_vec();
        with_var.push((SHARD_COUNT_VAR, "2"));
        assert!(err(None, None, &with_var).starts_with("K3K_SHARD_COUNT=2 and SLURM_ARRAY_TASK_COUNT=4"));
    }

    #[test]
    fn two_schedulers_at_once_are_refused() {
        let vars = [(SLURM_TASK_ID, "0"), (SLURM_TASK_COUNT, "2"), (K8S_COMPLETION_INDEX, "1"), (SHARD_COUNT_VAR, "2")];
        let e = err(None, None, &vars);
        assert!(e.starts_with("SLURM_ARRAY_TASK_ID and JOB_COMPLETION_INDEX: both are set"), "{e}");
        // --shard settles it.
        assert_eq!(pick(Some("1/2"), None, &vars).unwrap().shard, shard(1, 2));
    }

    #[test]
    fn the_flag_wins_and_says_what_it_overrides() {
        let c = pick(Some("1/3"), None, &[]).unwrap();
        assert_eq!(c, ShardChoice { shard: shard(1, 3), source: ShardSource::Flag { overridden: vec![] } });
        assert_eq!(c.to_string(), "shard 1/3 from --shard");
        let vars = [(SLURM_TASK_ID, "5"), (SLURM_TASK_COUNT, "8"), (SLURM_TASK_MIN, "0")];
        let c = pick(Some("1/3"), None, &vars).unwrap();
        assert_eq!(c.shard, shard(1, 3));
        assert_eq!(c.to_string(), "shard 1/3 from --shard (overrides SLURM_ARRAY_TASK_ID=5 of the environment)");
        // Even variables that would be refused on their own: the flag is what the user asked for.
        let vars = [(K8S_COMPLETION_INDEX, "9"), (SHARD_COUNT_VAR, "none")];
        let c = pick(Some("0/1"), None, &vars).unwrap();
        assert_eq!(c.shard, Shard::ALL);
        assert!(c.to_string().contains("overrides JOB_COMPLETION_INDEX=9, K3K_SHARD_COUNT=none"), "{c}");
        // A bad flag is the flag's error; a count that contradicts it is refused.
        assert!(err(Some("3/3"), None, &[]).starts_with("--shard: invalid shard `3/3`"));
        assert!(err(Some("1/3"), Some(4), &[]).starts_with("--shard 1/3 and --shard-count 4: the two shard counts"));
        assert_eq!(pick(Some("1/3"), Some(3), &[]).unwrap().shard, shard(1, 3));
    }

    #[test]
    fn every_variable_read_is_listed_for_doctor() {
        // `choose` reads exactly these: a variable missing from the list would not show in `k3k doctor`.
        let read = std::cell::RefCell::new(std::collections::BTreeSet::new());
        let vars = [
            (SLURM_TASK_ID, "1"),
            (SLURM_TASK_COUNT, "2"),
            (SLURM_TASK_MIN, "0"),
            (SLURM_TASK_MAX, "1"),
            (SLURM_TASK_STEP, "1"),
        ];
        let env: BTreeMap<&str, &str> = vars.into_iter().collect();
        let _ = choose(None, None, |k| {
            read.borrow_mut().insert(k.to_string());
            env.get(k).map(|v| v.to_string())
        });
        let _ = choose(None, None, |k| {
            read.borrow_mut().insert(k.to_string());
            None
        });
        let listed: std::collections::BTreeSet<String> = SCHEDULER_VARS.iter().map(|s| s.to_string()).collect();
        assert_eq!(read.into_inner(), listed);
    }
}
