//! CPU backends built on the Cranelift JIT of the IR (`k3k_codegen::cpu::jit`).
//!
//! [`JitBackend`] runs each kernel of a plan compiled when the JIT lowers it, else on the interpreter (the
//! documented fallback), and counts which engine ran how many launches. [`DiffBackend`] runs every plan on
//! both the interpreter and the JIT backend and fails unless every output agrees bit for bit, so fuzzing it
//! checks JIT == interpreter on random operator cases as well as both against the f64 reference.

use crate::runner::Backend;
use k3k_codegen::cpu::interp::InterpOptions;
use k3k_codegen::cpu::jit::{self, Engine};
use k3k_ops::OpError;
use k3k_ops::plan::{Executor, Outputs, Plan};
use std::collections::BTreeMap;

/// The JIT, with the interpreter for kernels it does not lower yet.
#[derive(Default)]
pub struct JitBackend {
    /// Launches run compiled.
    pub jit_launches: usize,
    /// Launches that fell back to the interpreter.
    pub interp_launches: usize,
    /// The kernels that fell back, with the JIT's reason.
    pub fallbacks: BTreeMap<String, String>,
}

impl JitBackend {
    /// Launch counts and fallback kernels since the last call, then reset them.
    pub fn take_summary(&mut self) -> Option<String> {
        let mut s = format!(
            "{} launch(es) compiled by the JIT, {} on the interpreter",
            self.jit_launches, self.interp_launches
        );
        for (k, why) in &self.fallbacks {
            s += &format!("\n  fallback: kernel `{k}`: {why}");
        }
        *self = JitBackend::default();
        Some(s)
    }
}

impl Backend for JitBackend {
    fn name(&self) -> String {
        "cpu-jit".into()
    }

    fn take_summary(&mut self) -> Option<String> {
        JitBackend::take_summary(self)
    }

    fn run(&mut self, plan: &Plan) -> Result<Outputs, OpError> {
        let bufs = plan.run_host(|kernel, args, scalars| {
            match jit::run(kernel, args, scalars, InterpOptions::default())? {
                Engine::Jit => self.jit_launches += 1,
                Engine::Interpreter => {
                    self.interp_launches += 1;
                    if !self.fallbacks.contains_key(&kernel.name) {
                        let why = jit::supports(kernel).err().map_or("the JIT failed".into(), |e| e.to_string());
                        self.fallbacks.insert(kernel.name.clone(), why);
                    }
                }
            }
            Ok(())
        })?;
        Ok(plan.outputs(bufs))
    }
}

/// Runs every plan on the interpreter and on [`JitBackend`]; any output byte that differs is an error.
#[derive(Default)]
pub struct DiffBackend {
    pub jit: JitBackend,
}

impl Backend for DiffBackend {
    fn name(&self) -> String {
        "jit==interp".into()
    }

    fn take_summary(&mut self) -> Option<String> {
        self.jit.take_summary()
    }

    fn run(&mut self, plan: &Plan) -> Result<Outputs, OpError> {
        let want = Executor::Cpu.run(plan)?;
        let got = self.jit.run(plan)?;
        for (name, w) in &want.0 {
            let g = got.get(name)?;
            if let Some(i) = g.data.iter().zip(&w.data).position(|(a, b)| a != b) {
                return Err(OpError::Internal(format!(
                    "output `{name}`: the JIT and the interpreter differ at byte {i} ({:#04x} vs {:#04x})",
                    g.data[i], w.data[i]
                )));
            }
            if g.data.len() != w.data.len() {
                return Err(OpError::Internal(format!("output `{name}`: sizes differ")));
            }
        }
        Ok(got)
    }
}
