//! `k3k report`: a markdown summary of the committed benchmark reports and an SVG roofline that places every
//! kernel and its peer against the bandwidth and tensor-core ceilings measured in the same run.

use crate::bench::BenchReport;
use plotters::prelude::*;
use std::path::Path;

/// Every benchmark report under `dir` (`<gpu-slug>/<op>.json`).
pub fn load_reports(dir: &Path) -> anyhow::Result<Vec<BenchReport>> {
    let mut out = vec![];
    if !dir.is_dir() {
        return Ok(out);
    }
    // Other JSON files beside the reports (peer timings) do not parse as reports and are skipped.
    for f in crate::bench::report_files(dir)? {
        if let Ok(r) = serde_json::from_slice::<BenchReport>(&std::fs::read(&f)?) {
            out.push(r);
        }
    }
    Ok(out)
}

/// The summary table: one row per benchmark preset.
pub fn markdown(reports: &[BenchReport]) -> String {
    let mut s = String::from(
        "# k3k benchmark summary\n\nSpeedup = peer ms / k3k ms, both measured in the same device call; floor = max(flops / \
         tensor-core rate, bytes / HBM bandwidth) with the ceilings measured in that call.\n\n\
         | GPU | op | preset | k3k ms | peer | peer ms | speedup | % of floor | rel err | date | commit |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in reports {
        for row in &r.rows {
            let (pm, sp) = match row.peer_ms {
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
                row.peer,
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
    let (bw, peak) = reports.first().map(|r| (r.ceilings.hbm_gbps, r.ceilings.bf16_tflops)).unwrap_or((4282.0, 790.0));
    let root = SVGBackend::new(path, (1000, 640)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("k3k vs peers, roofline ({:.0} GB/s, {:.0} TFLOP/s bf16)", bw, peak), ("sans-serif", 20))
        .margin(20)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d((1.0f64..4000.0).log_scale(), (1.0f64..1000.0).log_scale())?;
    chart.configure_mesh().x_desc("arithmetic intensity (flop / byte of HBM traffic)").y_desc("TFLOP/s").draw()?;
    // Ceiling: bandwidth-bound slope up to the ridge, then flat at the tensor-core rate.
    let ceiling: Vec<(f64, f64)> = (0..=200)
        .map(|i| {
            let ai = 10f64.powf(i as f64 * (4000f64.log10()) / 200.0);
            (ai, (ai * bw / 1000.0).min(peak))
        })
        .collect();
    chart
        .draw_series(LineSeries::new(ceiling, BLACK.stroke_width(2)))?
        .label("ceiling")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.stroke_width(2)));
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
            .label(format!("{} (k3k)", r.op))
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
            .label(format!("{} (peer)", r.op))
            .legend(move |(x, y)| Cross::new((x + 10, y), 5, c.stroke_width(2)));
    }
    chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw()?;
    root.present()?;
    Ok(())
}
