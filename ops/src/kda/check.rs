//! The checks of `kda` and `kda.decode` against the f64 recurrence: which (sequence, value head) pairs
//! ([`check_scope`]) and the comparison ([`check_pairs`]).

use super::*;

/// Compare `o: [rows, HV, V]` and `ht: [N, HV, K, V]` with the f64 recurrence on (sequence, value head) pairs.
pub fn check_pairs(
    pb: &KdaProblem,
    d: &KdaData,
    out: &Outputs,
    pairs: &[(usize, usize)],
    scope: String,
) -> Result<CheckReport, OpError> {
    let o = out.get("o")?;
    let ht = out.get("ht")?;
    let seqs = pb.seqs();
    let (dk, dv, hvn) = (pb.dk, pb.dv, pb.hv);
    type Quad = (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>);
    let per: Vec<Result<Quad, OpError>> = pairs
        .par_iter()
        .map(|&(n, hv)| {
            let rows = seqs[n];
            let x = d.pair_inputs(pb, rows, n, hv);
            let r = rk::kda_recurrent(&x).map_err(|e| OpError::Internal(format!("reference: {e}")))?;
            let mut got_o = Vec::with_capacity(r.o.len());
            for row in rows.0..rows.1 {
                let base = (row * hvn + hv) * dv;
                got_o.extend((0..dv).map(|j| o.get_f32(base + j) as f64));
            }
            let sb = (n * hvn + hv) * dk * dv;
            let got_s: Vec<f64> = (0..dk * dv).map(|i| ht.get_f32(sb + i) as f64).collect();
            Ok((r.o, got_o, r.final_state, got_s))
        })
        .collect();
    let (mut wo, mut go, mut ws, mut gs) = (vec![], vec![], vec![], vec![]);
    for p in per {
        let (a, b, c, e) = p?;
        wo.extend(a);
        go.extend(b);
        ws.extend(c);
        gs.extend(e);
    }
    let ro = crate::check::compare("o", &go, &wo, Tolerance::Bf16, scope.clone());
    let rs = crate::check::compare("final state", &gs, &ws, Tolerance::Bf16, scope);
    Ok(ro.merge(rs))
}

/// Which (sequence, value head) pairs a check covers: all of them while the f64 recurrence stays cheap (about
/// 2^28 multiply-adds), else the first and last pair plus seeded others, at most 8 (fewer for long sequences).
pub fn check_scope(pb: &KdaProblem, seed: u64) -> (Vec<(usize, usize)>, String) {
    let n = pb.num_seqs();
    let all: Vec<(usize, usize)> = (0..n).flat_map(|s| (0..pb.hv).map(move |h| (s, h))).collect();
    let cost = pb.tokens() * pb.hv * pb.dk * pb.dv;
    if cost <= 1 << 28 {
        return (all, format!("all {} (sequence, value head) pairs: every o and state element", n * pb.hv));
    }
    let seqs = pb.seqs();
    let longest = seqs.iter().map(|(s, e)| e - s).max().unwrap_or(0).max(1);
    let budget = ((1usize << 31) / (longest * pb.dk * pb.dv)).clamp(2, 8);
    let mut pick = vec![(0, 0), (n - 1, pb.hv - 1)];
    let mut s = seed | 1;
    while pick.len() < budget.min(all.len()) {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let p = all[(s >> 33) as usize % all.len()];
        if !pick.contains(&p) {
            pick.push(p);
        }
    }
    pick.sort();
    pick.dedup();
    let scope = format!(
        "{} sampled (sequence, value head) pairs of {} {:?}: every o row and state element of each",
        pick.len(),
        all.len(),
        pick
    );
    (pick, scope)
}
