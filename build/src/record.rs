//! Recording an operator's plan at build time from two seeded instances.

use crate::builder::{BuildError, MAX_CONST_BYTES, RecordedBuffer, RecordedPlan, write};
use k3k_ir::{Kernel, stable_hash};
use k3k_ops::plan::{Plan, Role};
use std::path::Path;

/// Record a plan from two instances that differ only in their random data: buffers and launches must match;
/// inputs with equal bytes are shape-only tables (embedded), the others are run-time inputs.
#[allow(clippy::too_many_arguments)]
pub(crate) fn record_plan(
    module: &str,
    gpu: &str,
    a: &Plan,
    b: &Plan,
    kernels: &mut Vec<Kernel>,
    seen: &mut std::collections::HashSet<String>,
    runtime_inputs: &[String],
    kdir: &Path,
) -> Result<RecordedPlan, BuildError> {
    use crate::rt::BufRole;
    let bad = |why: String| BuildError::Inconsistent {
        request: module.into(),
        why: format!("{why}: its plan depends on the input data, so it cannot be recorded; use the kernel launchers"),
    };
    if a.buffers.len() != b.buffers.len() || a.steps.len() != b.steps.len() {
        return Err(bad("the number of buffers or launches changes with the data".into()));
    }
    let mut buffers = vec![];
    for (x, y) in a.buffers.iter().zip(&b.buffers) {
        if x.name != y.name || x.role != y.role || x.tensor.dtype != y.tensor.dtype || x.tensor.shape != y.tensor.shape
        {
            return Err(bad(format!("buffer `{}` changes with the data", x.name)));
        }
        let role = match x.role {
            Role::Input
                if x.tensor.data == y.tensor.data
                    && x.tensor.data.len() <= MAX_CONST_BYTES
                    && !runtime_inputs.contains(&x.name) =>
            {
                BufRole::Const
            }
            Role::Input => BufRole::Input,
            Role::Output => BufRole::Output,
            Role::Scratch => BufRole::Scratch,
        };
        let data_file = if role == BufRole::Const {
            let p = kdir.join(format!("{module}.{gpu}.{}.bin", crate::ident::snake(&x.name)));
            write(&p, &x.tensor.data)?;
            Some(p)
        } else {
            None
        };
        buffers.push(RecordedBuffer {
            name: x.name.clone(),
            role,
            dtype: x.tensor.dtype,
            shape: x.tensor.shape.clone(),
            data_file,
        });
    }
    let mut steps = vec![];
    for (s, t) in a.steps.iter().zip(&b.steps) {
        let h = stable_hash(&s.kernel);
        if h != stable_hash(&t.kernel) || s.args != t.args || s.scalars != t.scalars {
            return Err(bad(format!("launch of `{}` changes with the data", s.kernel.name)));
        }
        if seen.insert(h.clone()) {
            kernels.push(s.kernel.clone());
        }
        let role = kernels.iter().position(|k| stable_hash(k) == h).expect("kernel recorded");
        steps.push((role, s.args.clone(), s.scalars.clone()));
    }
    Ok(RecordedPlan { buffers, steps })
}
