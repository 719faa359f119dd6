//! Global memory: bounds-checked loads and stores of tensor elements (`HostTensor::{get,set}_{f32,i64}`).

use super::*;

impl<'a, 'f> Lower<'a, 'f> {
    /// Bounds-check a flat element index of a tensor.
    pub(super) fn check_index(&mut self, t: TensorId, i: Value, what: i64) -> Value {
        let len = self.tensors[t.0 as usize].1;
        let bad = self.b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, i, len);
        let (tid, w) = (self.iconst(t.0 as i64), self.iconst(what));
        self.fail_if(bad, Fail::OutOfBounds, &[tid, i, w]);
        i
    }

    pub(super) fn addr(&mut self, t: TensorId, i: Value, size: i64) -> Value {
        let base = self.tensors[t.0 as usize].0;
        let off = self.b.ins().imul_imm_s(i, size);
        self.b.ins().iadd(base, off)
    }

    pub(super) fn load_f32(&mut self, t: TensorId, i: Value) -> Value {
        let dt = self.k.tensors[t.0 as usize].dtype;
        let f = self.plain;
        match dt {
            DType::F32 => {
                let a = self.addr(t, i, 4);
                self.b.ins().load(types::F32, f, a, 0)
            }
            DType::Bf16 => {
                let a = self.addr(t, i, 2);
                let h = self.b.ins().uload16(types::I32, f, a, 0);
                let w = self.b.ins().ishl_imm_s(h, 16);
                self.b.ins().bitcast(types::F32, self.plain, w)
            }
            DType::F16 | DType::E4m3 | DType::E8m0 => {
                let (size, fun): (i64, *const u8) = match dt {
                    DType::F16 => (2, host_f16_to_f32 as *const u8),
                    DType::E4m3 => (1, host_e4m3_to_f32 as *const u8),
                    _ => (1, host_e8m0_to_f32 as *const u8),
                };
                let a = self.addr(t, i, size);
                let bits = if size == 2 {
                    self.b.ins().uload16(types::I64, f, a, 0)
                } else {
                    self.b.ins().uload8(types::I64, f, a, 0)
                };
                self.call(fun, &[types::I64], types::F32, &[bits])
            }
            _ => {
                let v = self.load_i64(t, i);
                self.b.ins().fcvt_from_sint(types::F32, v)
            }
        }
    }

    pub(super) fn load_i64(&mut self, t: TensorId, i: Value) -> Value {
        let dt = self.k.tensors[t.0 as usize].dtype;
        let f = self.plain;
        match dt {
            DType::U8 | DType::E2m1 => {
                let a = self.addr(t, i, 1);
                self.b.ins().uload8(types::I64, f, a, 0)
            }
            DType::I32 => {
                let a = self.addr(t, i, 4);
                self.b.ins().sload32(f, a, 0)
            }
            DType::U32 => {
                let a = self.addr(t, i, 4);
                self.b.ins().uload32(f, a, 0)
            }
            DType::I64 | DType::U64 => {
                let a = self.addr(t, i, 8);
                self.b.ins().load(types::I64, f, a, 0)
            }
            _ => {
                let v = self.load_f32(t, i);
                self.b.ins().fcvt_to_sint_sat(types::I64, v)
            }
        }
    }

    pub(super) fn store_f32(&mut self, t: TensorId, i: Value, v: Value) {
        let dt = self.k.tensors[t.0 as usize].dtype;
        let f = self.plain;
        match dt {
            DType::F32 => {
                let a = self.addr(t, i, 4);
                self.b.ins().store(f, v, a, 0);
            }
            DType::Bf16 => {
                let bits = self.f32_to_bf16_bits(v);
                let a = self.addr(t, i, 2);
                self.b.ins().istore16(f, bits, a, 0);
            }
            DType::F16 => {
                let bits = self.call(host_f32_to_f16 as *const u8, &[types::F32], types::I64, &[v]);
                let a = self.addr(t, i, 2);
                self.b.ins().istore16(f, bits, a, 0);
            }
            DType::E4m3 => {
                let bits = self.call(host_f32_to_e4m3 as *const u8, &[types::F32], types::I64, &[v]);
                let a = self.addr(t, i, 1);
                self.b.ins().istore8(f, bits, a, 0);
            }
            DType::E8m0 | DType::E2m1 => unreachable!("checked: no float stores into {dt}"),
            _ => {
                let iv = self.b.ins().fcvt_to_sint_sat(types::I64, v);
                self.store_i64(t, i, iv);
            }
        }
    }

    pub(super) fn store_i64(&mut self, t: TensorId, i: Value, v: Value) {
        let dt = self.k.tensors[t.0 as usize].dtype;
        let f = self.plain;
        match dt {
            DType::U8 | DType::E2m1 | DType::E8m0 => {
                let a = self.addr(t, i, 1);
                self.b.ins().istore8(f, v, a, 0);
            }
            DType::I32 | DType::U32 => {
                let a = self.addr(t, i, 4);
                self.b.ins().istore32(f, v, a, 0);
            }
            DType::I64 | DType::U64 => {
                let a = self.addr(t, i, 8);
                self.b.ins().store(f, v, a, 0);
            }
            _ => {
                let fv = self.b.ins().fcvt_from_sint(types::F32, v);
                self.store_f32(t, i, fv);
            }
        }
    }
}
