//! `k3k report`.

use std::path::PathBuf;

/// Arguments of `k3k report`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Folder of benchmark reports.
    #[arg(long, default_value = "results/bench")]
    pub bench: PathBuf,
    /// Where to write SUMMARY.md and roofline.svg.
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
}

pub fn run(mut a: Args) -> anyhow::Result<i32> {
    a.bench = k3k::paths::resolve(&a.bench, "--bench")?;
    a.out = k3k::paths::resolve(&a.out, "--out")?;
    let (reports, unreadable) = k3k::report::load_reports_checked(&a.bench)?;
    for (f, why) in &unreadable {
        eprintln!("error: {}: {why}; left out of the summary", f.display());
    }
    if reports.is_empty() {
        anyhow::bail!("no benchmark reports under {} (run `k3k bench` on a GPU first)", a.bench.display());
    }
    std::fs::create_dir_all(&a.out)?;
    let md = a.out.join("SUMMARY.md");
    let svg = a.out.join("roofline.svg");
    std::fs::write(&md, format!("{}\n![roofline](roofline.svg)\n", k3k::report::markdown(&reports)))?;
    k3k::report::roofline_svg(&reports, &svg)?;
    println!("wrote {} and {} ({} reports)", md.display(), svg.display(), reports.len());
    if !unreadable.is_empty() {
        eprintln!("{} report file(s) could not be read (named above)", unreadable.len());
        return Ok(1);
    }
    Ok(0)
}
