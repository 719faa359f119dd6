//! `k3k report`: a markdown summary of the committed benchmark reports and an SVG roofline that places every
//! kernel and its peer against the bandwidth and tensor-core ceilings measured in the same run.

use crate::bench::BenchReport;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// Every benchmark report under `dir` (`<gpu-slug>/<op>.json`); a file that cannot be read as one is named in a
/// warning on stderr (see [`load_reports_checked`]).
pub fn load_reports(dir: &Path) -> anyhow::Result<Vec<BenchReport>> {
    let (reports, unreadable) = load_reports_checked(dir)?;
    for (f, why) in &unreadable {
        eprintln!("warning: {} is not a benchmark report ({why}); left out", f.display());
    }
    Ok(reports)
}

/// A file that should be a benchmark report but cannot be read: its path and why.
pub type Unreadable = (PathBuf, String);

/// Every benchmark report under `dir`, and the files that should be one but cannot be read (path, why). The peer
/// timings of `scripts/peers.py` (`*peers.json`) beside the reports are not reports and are skipped.
pub fn load_reports_checked(dir: &Path) -> anyhow::Result<(Vec<BenchReport>, Vec<Unreadable>)> {
    let (mut out, mut bad) = (vec![], vec![]);
    if !dir.is_dir() {
        return Ok((out, bad));
    }
    for f in crate::bench::report_files(dir).map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))? {
        if f.file_name().is_some_and(|n| n.to_string_lossy().ends_with("peers.json")) {
            continue;
        }
        match std::fs::read(&f).map_err(|e| e.to_string()).and_then(|b| {
            serde_json::from_slice::<BenchReport>(&b).map_err(|e| format!("does not parse as a report: {e}"))
        }) {
            Ok(r) => out.push(r),
            Err(e) => bad.push((f, e)),
        }
    }
    Ok((out, bad))
}

/// The summary table: one row per benchmark preset and peer (a preset timed against several peers in the same run,
/// e.g. kda's FlashKDA and FLA, has a row for each).
pub fn markdown(reports: &[BenchReport]) -> String {
    let mut s = String::from(
        "# k3k benchmark summary\n\nSpeedup = peer ms / k3k ms, both measured in the same device call; floor = max(flops / \
         tensor-core rate, bytes / HBM bandwidth) with the ceilings measured in that call.\n\n\
         | GPU | op | preset | k3k ms | peer | peer ms | speedup | % of floor | rel err | date | commit |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in reports {
        for (row, (peer, peer_ms)) in r.rows.iter().flat_map(|row| row.peer_figures().map(move |p| (row, p))) {
            let (pm, sp) = match peer_ms {
                Some(p) => (format!("{p:.4}"), format!("{:.2}x", p / row.k3k_ms)),
                None => ("-".into(), "-".into()),
            };
            // A row kept from an earlier run (`k3k bench --publish`) carries that run's date and commit.
            let (date, commit) = match &row.earlier_run {
                Some(e) => (e.date.as_str(), e.k3k_commit.as_str()),
                None => (r.date.as_str(), r.k3k_commit.as_str()),
            };
            s.push_str(&format!(
                "| {} | {} | {} | {:.4} | {} | {} | {} | {:.0}% | {:.1e} | {} | `{}` |\n",
                r.gpu,
                r.op,
                row.preset,
                row.k3k_ms,
                peer,
                pm,
                sp,
                100.0 * row.floor_ms / row.k3k_ms,
                row.max_rel_err,
                date,
                commit
            ));
        }
    }
    s
}

/// Draw the roofline (log-log: arithmetic intensity in flop/byte against TFLOP/s) into an SVG file.
pub fn roofline_svg(reports: &[BenchReport], path: &Path) -> anyhow::Result<()> {
    // One roof per GPU, from that GPU's first report (each report's ceilings were measured in its own run).
    let mut gpus: Vec<(&str, f64, f64)> = vec![];
    for r in reports {
        if !gpus.iter().any(|(g, _, _)| *g == r.gpu) {
            gpus.push((&r.gpu, r.ceilings.hbm_gbps, r.ceilings.bf16_tflops));
        }
    }
    let multi_gpu = gpus.len() > 1;
    let root = SVGBackend::new(path, (1000, 640)).into_drawing_area();
    root.fill(&WHITE)?;
    let caption = match gpus.as_slice() {
        [(g, bw, peak)] => format!("k3k vs peers on {g}, roofline ({bw:.0} GB/s, {peak:.0} TFLOP/s bf16)"),
        _ => "k3k vs peers, roofline per GPU".to_string(),
    };
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 20))
        .margin(20)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d((1.0f64..4000.0).log_scale(), (1.0f64..1000.0).log_scale())?;
    chart.configure_mesh().x_desc("arithmetic intensity (flop / byte of HBM traffic)").y_desc("TFLOP/s").draw()?;
    // Ceiling: bandwidth-bound slope up to the ridge, then flat at the tensor-core rate.
    let roof_colours = [BLACK, RGBColor(128, 128, 128), RGBColor(120, 70, 20), RGBColor(0, 100, 100)];
    for (i, (gpu, bw, peak)) in gpus.iter().enumerate() {
        let (bw, peak) = (*bw, *peak);
        let ceiling: Vec<(f64, f64)> = (0..=200)
            .map(|i| {
                let ai = 10f64.powf(i as f64 * (4000f64.log10()) / 200.0);
                (ai, (ai * bw / 1000.0).min(peak))
            })
            .collect();
        let c = roof_colours[i % roof_colours.len()];
        chart
            .draw_series(LineSeries::new(ceiling, c.stroke_width(2)))?
            .label(format!("ceiling {gpu} ({bw:.0} GB/s, {peak:.0} TFLOP/s)"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    let palette = [RED, BLUE, GREEN, MAGENTA, CYAN, RGBColor(255, 140, 0)];
    for (i, r) in reports.iter().enumerate() {
        let c = palette[i % palette.len()];
        let pts: Vec<(f64, f64)> = r
            .rows
            .iter()
            .filter(|row| row.bytes > 0.0 && row.flops > 0.0)
            .map(|row| (row.flops / row.bytes, row.tflops.max(1.0)))
            .collect();
        chart
            .draw_series(pts.iter().map(|p| Circle::new(*p, 6, c.filled())))?
            .label(if multi_gpu { format!("{} on {} (k3k)", r.op, r.gpu) } else { format!("{} (k3k)", r.op) })
            .legend(move |(x, y)| Circle::new((x + 10, y), 5, c.filled()));
        let peer: Vec<(f64, f64)> = r
            .rows
            .iter()
            .filter_map(|row| {
                let p = row.peer_ms?;
                (row.bytes > 0.0 && row.flops > 0.0).then(|| (row.flops / row.bytes, (row.flops / p / 1e9).max(1.0)))
            })
            .collect();
        chart
            .draw_series(peer.iter().map(|p| Cross::new(*p, 6, c.stroke_width(2))))?
            .label(if multi_gpu { format!("{} on {} (peer)", r.op, r.gpu) } else { format!("{} (peer)", r.op) })
            .legend(move |(x, y)| Cross::new((x + 10, y), 5, c.stroke_width(2)));
    }
    chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw()?;
    root.present()?;
    Ok(())
}
