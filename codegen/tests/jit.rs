//! The Cranelift JIT (`cpu::jit`) against the interpreter, bit for bit, on every primitive case: kernels the JIT
//! lowers run compiled (and also meet each case's own check); the rest take the documented interpreter fallback.

mod common;

use k3k_codegen::cpu::interp::{self, InterpOptions};
use k3k_codegen::cpu::jit::{self, Engine};

#[test]
fn jit_matches_the_interpreter_bit_for_bit_on_every_primitive_case() {
    let mut compiled = vec![];
    for c in common::cases::all() {
        let mut want = c.tensors.clone();
        interp::run(&c.kernel, &mut want, &c.scalars, InterpOptions::default()).unwrap();
        let mut got = c.tensors.clone();
        let engine = jit::run(&c.kernel, &mut got, &c.scalars, InterpOptions::default()).unwrap();
        match jit::supports(&c.kernel) {
            Ok(()) => {
                assert_eq!(engine, Engine::Jit, "{}", c.name);
                compiled.push(c.name);
            }
            Err(why) => {
                assert_eq!(engine, Engine::Interpreter, "{}", c.name);
                eprintln!("{}: interpreter fallback ({why})", c.name);
            }
        }
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let at = g.data.iter().zip(&w.data).position(|(a, b)| a != b);
            assert!(
                at.is_none() && g.data.len() == w.data.len(),
                "{}: tensor {i} differs between the JIT and the interpreter (first at byte {at:?})",
                c.name
            );
        }
        (c.check)(&got);
    }
    eprintln!("compiled by the JIT: {compiled:?}");
    assert!(!compiled.is_empty());
}

/// Out-of-bounds accesses and integer division by zero end a JIT run with the interpreter's error.
#[test]
fn jit_reports_the_interpreters_errors() {
    use k3k_ir::*;
    let mut b = KernelBuilder::new("jit_errors", 32);
    let n = b.dim("N");
    let x = b.tensor("x", DType::F32, &[n], Access::ReadWrite);
    let d = b.int_arg("D");
    b.grid(1i64, 1i64, 1i64);
    b.threads(|b| {
        let t = Expr::thread_idx();
        b.store_scalar(x, t.clone(), Expr::load(x, t.clone() / d.clone()) + 1.0);
    });
    let k = b.finish().unwrap();
    for (len, dv, frag) in [(16usize, 1i64, "outside tensor `x`"), (64, 0, "division by zero")] {
        let t = HostTensor::from_f32(DType::F32, &[len], &vec![1.0; len]);
        let (mut a, mut c) = (vec![t.clone()], vec![t]);
        let e1 = interp::run(&k, &mut a, &[("D", SymValue::Int(dv))], InterpOptions::default()).unwrap_err();
        let e2 =
            jit::compile(&k).unwrap().run(&mut c, &[("D", SymValue::Int(dv))], InterpOptions::default()).unwrap_err();
        assert_eq!(e1.to_string(), e2.to_string());
        assert!(e2.to_string().contains(frag), "{e2}");
    }
}
