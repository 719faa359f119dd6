//! The plans of `kda`: the two chunked kernels of a problem, the one-part plan ([`chunk_plan`]) and the plan
//! split along time (`TSPLIT > 1`, [`time_parts`], [`part_seq_table`]).

use super::*;

/// The two chunked kernels of a problem at resolved knobs.
pub fn chunk_kernels(pb: &KdaProblem, l: &Launch) -> Result<(Kernel, Kernel), OpError> {
    let spec = pb.spec();
    Ok((
        intra::build_intra(
            &spec,
            l.chunk,
            l.w1,
            l.op_dt,
            l.lvl_dt,
            intra::IntraOpts {
                arena: l.arena,
                slim: l.slim,
                xdiag: l.xdiag,
                ex2_ftz: l.ex2_ftz,
                midoff: l.midoff,
                g_pairs: l.g_pairs,
                full_chunks: l.full_chunks,
                fast_gate_sigmoid: l.fast_gate_sigmoid,
                l2_unrolled: l.l2_unrolled,
                u_state: l.u_state,
                rows_qk: l.rows_qk,
                rows_ops: l.rows_ops,
                rows_gate: l.rows_gate,
                fold: l.fold,
                r_rows: l.r_rows,
                solve_wide: l.solve_wide,
                solve_early: l.solve_early,
                solo: l.solo,
                mma_origins: l.mma_origins,
                wide_wu: l.wide_wu,
                pinned_stores: l.pinned_stores,
            },
        )?,
        state_kernel(&spec, l)?,
    ))
}

/// The state pass of a variant at resolved knobs.
pub fn state_kernel(spec: &KdaSpec, l: &Launch) -> Result<Kernel, OpError> {
    let variant = state::StateVariant {
        chunk: l.chunk,
        bv: l.bv,
        warps: l.w2,
        op_dt: l.op_dt,
        stages: l.stages,
        two_bars: l.two_bars,
        order: l.state_grid,
        u_state: l.u_state,
    };
    if l.tma_loads { state_tma::build_state_tma(spec, variant, l.u_tma) } else { state::build_state_in(spec, variant) }
}

/// The scratch between the kernels for `m` chunks (buffer names end in `tag`), in the kernels' argument order:
/// `[W | U]` (or W alone with `USTATE=1`), Qbar, Kbar, P, gamma, and with `USTATE=1` the factors of U (N_ii, the
/// strictly lower blocks of L, beta).
fn scratch(plan: &mut Plan, pb: &KdaProblem, l: &Launch, m: usize, tag: &str) -> Vec<usize> {
    let (hv, dk, dv, c) = (pb.hv, pb.dk, pb.dv, l.chunk as usize);
    let wcols = if l.u_state { dk } else { dk + dv };
    let mut v = vec![
        plan.scratch(&format!("wu{tag}"), l.op_dt, &[hv, m, c, wcols]),
        plan.scratch(&format!("qbar{tag}"), l.op_dt, &[hv, m, c, dk]),
        plan.scratch(&format!("kbar{tag}"), l.op_dt, &[hv, m, c, dk]),
        plan.scratch(&format!("p{tag}"), l.op_dt, &[hv, m, c, c]),
        plan.scratch(&format!("gamma{tag}"), DType::F32, &[hv, m, dk]),
    ];
    if l.u_state {
        v.extend([
            plan.scratch(&format!("nf{tag}"), l.op_dt, &[hv, m, c, 16]),
            plan.scratch(&format!("lf{tag}"), l.op_dt, &[hv, m, (c - 16) * (c - 16)]),
            plan.scratch(&format!("betaf{tag}"), DType::F32, &[hv, m, c]),
        ]);
    }
    v
}

/// The state pass's leading arguments: the scratch, then v (`USTATE=1`).
fn state_args(scratch: &[usize], v: usize, l: &Launch) -> Vec<usize> {
    let mut a = scratch.to_vec();
    if l.u_state {
        a.push(v);
    }
    a
}

/// The chunk ranges `[lo, hi)` of the parts of a `TSPLIT = parts` plan over `nch` chunks: part p is
/// `[p*nch/P, (p+1)*nch/P)` of the global chunk table with `P = min(parts, nch)`, so no part is empty (no parts
/// when there is no chunk).
pub fn time_parts(nch: usize, parts: u32) -> Vec<(usize, usize)> {
    let p = (parts as usize).min(nch);
    (0..p).map(|i| (i * nch / p, (i + 1) * nch / p)).collect()
}

/// The per-sequence `[first, count]` rows of a part `[lo, hi)` of the chunk table from the whole table's `stab`:
/// each sequence's chunks inside the part, `first` counted from `lo`; `[0, 0]` for a sequence with no chunk there
/// (the state pass then passes its state through unchanged: the chunk loop runs zero times between the state's
/// load from `h0` or zeros and its store to `ht`).
pub fn part_seq_table(stab: &[i64], lo: usize, hi: usize) -> Vec<i64> {
    stab.chunks_exact(2)
        .flat_map(|e| {
            let (a, b) = ((e[0] as usize).max(lo), ((e[0] + e[1]) as usize).min(hi));
            if a < b { [(a - lo) as i64, (b - a) as i64] } else { [0, 0] }
        })
        .collect()
}

/// The plan of a chunked problem: checks the inputs (safe-path gates on the host), then intra + state pass.
///
/// `TSPLIT = P > 1` (with at least two chunks): the chunk table is cut along time into P parts of consecutive
/// chunks (see [`time_parts`]; chunk boundaries, so the kernels are unchanged and a sequence may span parts).
/// Part p has its own chunk table (absolute token rows, so every part writes its own rows of the one `o`), its own
/// sequence table ([`part_seq_table`]), its own scratch (its chunks only: the scratch totals that of one part),
/// and its state pass starts from the state the previous part's pass ended with (`h{p-1}`, a `[N, HV, K, V]` f32
/// scratch; part 0 from `h0`, or zeros through the no-`h0` kernel) and the last part's writes `ht`. Steps:
/// intra(p) on the main stream; state(p) on the side stream, waiting for intra(p) (state(p-1) precedes it on the
/// side stream), so on a GPU the state pass of part p can run while intra(p+1) does. The arithmetic of every
/// chunk step is that of the one-part plan, in the same order, so `o` and `ht` are the same bits.
pub fn chunk_plan(pb: &KdaProblem, d: &KdaData, knobs: &Knobs) -> Result<Plan, OpError> {
    pb.validate()?;
    if pb.safe && pb.gate == GateForm::Pre {
        check_gates(&d.g, LOWER_BOUND)?;
    }
    let l = Launch::resolve(knobs, pb)?;
    let (k1, k2) = chunk_kernels(pb, &l)?;
    let (ctab, stab) = pb.chunk_tables(l.chunk as usize);
    let nch = ctab.len() / 2;
    let parts = time_parts(nch, l.tsplit);
    if parts.len() > 1 {
        return split_plan(pb, d, &l, k1, &ctab, &stab, &parts);
    }
    let (tt, hv, dk, dv, n) = (pb.tokens(), pb.hv, pb.dk, pb.dv, pb.num_seqs());
    let mut plan = Plan::default();
    let mut a1 = token_inputs(&mut plan, d);
    let ct = plan.input("ctab", HostTensor::from_i64(DType::I32, &[nch, 2], &ctab));
    let st = plan.input("stab", HostTensor::from_i64(DType::I32, &[n, 2], &stab));
    let sc = scratch(&mut plan, pb, &l, nch, "");
    a1.push(ct);
    a1.extend(&sc);
    let sc1 = intra_scalars(pb);
    let mut a2 = state_args(&sc, a1[2], &l);
    a2.extend([ct, st]);
    if let Some(h0) = &d.h0 {
        a2.push(plan.input("h0", h0.clone()));
    }
    let o = plan.output("o", DType::Bf16, &[tt, hv, dv]);
    let ht = plan.output("ht", DType::F32, &[n, hv, dk, dv]);
    a2.extend([o, ht]);
    if nch > 0 {
        plan.step(k1, &a1, &sc1);
    }
    plan.step(k2, &a2, &[]);
    Ok(plan)
}

/// The per-token inputs of the intra kernel, added to `plan` in its argument order: q, k, v, g, beta, then the
/// gate's bias and A_log where the problem has them.
fn token_inputs(plan: &mut Plan, d: &KdaData) -> Vec<usize> {
    let mut a = vec![
        plan.input("q", d.q.clone()),
        plan.input("k", d.k.clone()),
        plan.input("v", d.v.clone()),
        plan.input("g", d.g.clone()),
        plan.input("beta", d.beta.clone()),
    ];
    if let Some(b) = &d.bias {
        a.push(plan.input("bias", b.clone()));
    }
    if let Some(l) = &d.a_log {
        a.push(plan.input("a_log", l.clone()));
    }
    a
}

/// The scalars of the intra kernel.
pub fn intra_scalars(pb: &KdaProblem) -> Vec<(&'static str, SymValue)> {
    let mut sc1 = vec![("scale", SymValue::Float(pb.scale()))];
    if matches!(pb.gate, GateForm::Safe { .. }) {
        sc1.push(("lb", SymValue::Float(LOWER_BOUND)));
    }
    sc1
}

/// The `TSPLIT > 1` plan of [`chunk_plan`] over at least two parts.
fn split_plan(
    pb: &KdaProblem,
    d: &KdaData,
    l: &Launch,
    k1: Kernel,
    ctab: &[i64],
    stab: &[i64],
    parts: &[(usize, usize)],
) -> Result<Plan, OpError> {
    let (tt, hv, dk, dv, n) = (pb.tokens(), pb.hv, pb.dk, pb.dv, pb.num_seqs());
    // The state pass from zeros (part 0 without h0) and from a given state (every other part).
    let spec = pb.spec();
    let k2_from = state_kernel(&KdaSpec { h0: true, ..spec }, l)?;
    let k2_zero = if pb.h0 { None } else { Some(state_kernel(&KdaSpec { h0: false, ..spec }, l)?) };
    let mut plan = Plan::default();
    let a1_common = token_inputs(&mut plan, d);
    let mut prev_state = d.h0.as_ref().map(|h0| plan.input("h0", h0.clone()));
    let o = plan.output("o", DType::Bf16, &[tt, hv, dv]);
    let ht = plan.output("ht", DType::F32, &[n, hv, dk, dv]);
    let sc1 = intra_scalars(pb);
    for (p, &(lo, hi)) in parts.iter().enumerate() {
        let m = hi - lo;
        let ct = plan.input(&format!("ctab@{p}"), HostTensor::from_i64(DType::I32, &[m, 2], &ctab[2 * lo..2 * hi]));
        let st =
            plan.input(&format!("stab@{p}"), HostTensor::from_i64(DType::I32, &[n, 2], &part_seq_table(stab, lo, hi)));
        let sc = scratch(&mut plan, pb, l, m, &format!("@{p}"));
        let mut a1 = a1_common.clone();
        a1.push(ct);
        a1.extend(&sc);
        let intra = plan.step_on(k1.clone(), &a1, &sc1, 0, &[]);
        let out_state =
            if p + 1 == parts.len() { ht } else { plan.scratch(&format!("h@{p}"), DType::F32, &[n, hv, dk, dv]) };
        let mut a2 = state_args(&sc, a1_common[2], l);
        a2.extend([ct, st]);
        let kernel = match prev_state {
            Some(h) => {
                a2.push(h);
                k2_from.clone()
            }
            None => k2_zero.clone().expect("the no-h0 state kernel"),
        };
        a2.extend([o, out_state]);
        plan.step_on(kernel, &a2, &[], 1, &[intra]);
        prev_state = Some(out_state);
    }
    Ok(plan)
}
