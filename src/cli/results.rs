//! `k3k results`: work with tuning results files.

use k3k::tuner::{merge, read_results_file, write_results_file};
use std::path::PathBuf;

/// Arguments of `k3k results`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(clap::Subcommand, Debug)]
pub enum Cmd {
    /// Combine results files of one GPU and operator (e.g. shards tuned by different jobs) into one.
    Merge {
        /// The files to merge.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Where to write the merged file (atomically).
        #[arg(long, short)]
        out: PathBuf,
    },
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    match a.cmd {
        Cmd::Merge { files, out } => {
            let parsed = files.iter().map(|f| read_results_file(f)).collect::<Result<Vec<_>, _>>()?;
            let merged = merge(&parsed)?;
            write_results_file(&out, &merged)?;
            let cands: usize = merged.entries.iter().map(|e| e.candidates.len()).sum();
            println!(
                "merged {} files: {} entries, {} candidates -> {}",
                files.len(),
                merged.entries.len(),
                cands,
                out.display()
            );
            Ok(0)
        }
    }
}
