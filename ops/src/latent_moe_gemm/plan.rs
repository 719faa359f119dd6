//! One problem with its seeded inputs ([`GemmInstance`]) and its launch plan: one kernel, inputs `x`, `w`,
//! `offs` (grouped) and `p` (routing weights), output `y`.

use super::{GemmProblem, build_kernel};
use crate::OpError;
use crate::data;
use crate::op::{CheckReport, Instance, Work};
use crate::plan::{Outputs, Plan};
use k3k_ir::{DType, HostTensor, Knobs};

/// A problem and its inputs: bf16-rounded normal activations and weights (the weights scaled by `K^-1/2`) and
/// routing weights in [0.1, 1).
pub(super) struct GemmInstance {
    pub pb: GemmProblem,
    pub x: Vec<f32>,
    pub w: Vec<f32>,
    pub p: Option<Vec<f32>>,
    plan_inputs: Vec<(String, HostTensor)>,
    pub seed: u64,
}

impl GemmInstance {
    /// Draw the inputs of `pb` for `seed`.
    pub fn new(pb: GemmProblem, seed: u64) -> Self {
        let (m, k, n, g) = (pb.m(), pb.k, pb.n, pb.counts.len());
        let mut x = data::normal(m * k, 1.0, seed);
        data::round_bf16(&mut x);
        let mut w = data::normal(g * n * k, (k as f32).powf(-0.5), seed ^ 0x5151);
        data::round_bf16(&mut w);
        let p = pb.row_scale.then(|| data::uniform(m, 0.1, 1.0, seed ^ 0x7a7a));
        let mut plan_inputs = vec![("x".to_string(), data::tensor(DType::Bf16, &[m, k], &x))];
        if pb.grouped {
            plan_inputs.push(("w".into(), data::tensor(DType::Bf16, &[g, n, k], &w)));
            plan_inputs.push(("offs".into(), HostTensor::from_i64(DType::I32, &[g], &pb.offs())));
        } else {
            plan_inputs.push(("w".into(), data::tensor(DType::Bf16, &[n, k], &w)));
        }
        if let Some(p) = &p {
            plan_inputs.push(("p".into(), data::tensor(DType::F32, &[m], p)));
        }
        GemmInstance { pb, x, w, p, plan_inputs, seed }
    }
}

impl Instance for GemmInstance {
    fn describe(&self) -> String {
        let pb = &self.pb;
        format!(
            "{} M={} K={} N={} groups={} epilogue={} p={} seed={}",
            if pb.grouped { "grouped" } else { "dense" },
            pb.m(),
            pb.k,
            pb.n,
            if pb.counts.len() <= 8 { format!("{:?}", pb.counts) } else { format!("{} groups", pb.counts.len()) },
            pb.epilogue.name(),
            pb.row_scale,
            self.seed
        )
    }

    fn plan(&self, knobs: &Knobs) -> Result<Plan, OpError> {
        let pb = &self.pb;
        let kernel = build_kernel(&pb.spec(), knobs)?;
        let mut plan = Plan::default();
        let mut args = vec![];
        for (name, t) in &self.plan_inputs {
            args.push(plan.input(name, t.clone()));
        }
        args.push(plan.output("y", DType::Bf16, &[pb.m(), pb.n_out()]));
        plan.step(kernel, &args, &[]);
        Ok(plan)
    }

    fn check(&self, out: &Outputs) -> Result<CheckReport, OpError> {
        super::check::check(self, out)
    }

    fn work(&self) -> Work {
        let pb = &self.pb;
        let (m, k, n) = (pb.m() as f64, pb.k as f64, pb.n as f64);
        let groups_used = pb.counts.iter().filter(|c| **c > 0).count() as f64;
        Work {
            flops: 2.0 * m * n * k,
            bytes: 2.0 * (m * k + groups_used * n * k + m * pb.n_out() as f64)
                + if pb.row_scale { 4.0 * m } else { 0.0 },
        }
    }

    fn problem(&self) -> serde_json::Value {
        let pb = &self.pb;
        serde_json::json!({
            "grouped": pb.grouped, "counts": pb.counts, "K": pb.k, "N": pb.n,
            "epilogue": pb.epilogue.name(), "p": pb.row_scale, "M": pb.m(),
        })
    }
}
