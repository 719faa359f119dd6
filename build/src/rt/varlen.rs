//! Chunked KDA over a batch whose sequence lengths come at run time (`cu_seqlens`): the chunk tables are
//! computed on the host into a buffer the runner keeps (nothing is allocated per call), copied into the
//! caller's workspace on the caller's stream, and the intra-chunk kernel and the state pass run on that
//! workspace's scratch.
//!
//! A batch of N sequences (`cu_seqlens`: N + 1 row offsets, starting at 0) is cut into chunks of `chunk`
//! tokens that never cross a sequence. The chunk table `ctab: [nch, 2]` i32 holds each chunk's first row and
//! length; the sequence table `stab: [N, 2]` each sequence's first chunk and chunk count. The intra kernel
//! reads the tokens and `ctab` and writes four operand tensors and the gate sums per chunk; the state pass
//! reads them with both tables, from zeros or from `h0`, and writes `o` and the final states `ht`.

use super::{AsContext, AsStream, Error, HasGpu, KernelImage, Loaded, pick};
use k3k_ir::{DType, SymValue};
use k3k_runtime::{ArgRef, GpuInfo, RuntimeError};

/// What `k3k-build` records of a varlen KDA request for one GPU.
#[derive(Debug)]
pub struct KdaVarlenSpec {
    pub name: &'static str,
    pub gpu: &'static str,
    /// Tokens per chunk.
    pub chunk: usize,
    /// Value heads, key and value head dims.
    pub hv: usize,
    pub dk: usize,
    pub dv: usize,
    /// The dtype of the intra kernel's operand scratch.
    pub op_dt: DType,
    /// The largest batch the workspace is sized for.
    pub max_tokens: usize,
    pub max_seqs: usize,
    /// The intra kernel's per-token inputs (q, k, v, g, beta, and the gate's bias and A_log where it has them),
    /// its first arguments.
    pub token_inputs: usize,
    pub intra: &'static KernelImage,
    /// The state pass from zeros, and from a given state `h0`.
    pub state: &'static KernelImage,
    pub state_h0: &'static KernelImage,
    /// The intra kernel's scalars (the query scale, the safe gate's lower bound).
    pub scalars: &'static [(&'static str, SymValue)],
}

impl HasGpu for KdaVarlenSpec {
    fn gpu(&self) -> &str {
        self.gpu
    }
}

/// Where each table and scratch tensor of a batch lives in the workspace: byte offsets, each 256-byte aligned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VarlenLayout {
    pub ctab: usize,
    pub stab: usize,
    pub wu: usize,
    pub qbar: usize,
    pub kbar: usize,
    pub p: usize,
    pub gamma: usize,
    /// Bytes in all.
    pub bytes: usize,
}

impl KdaVarlenSpec {
    /// The scratch shapes of a batch of `nch` chunks, in the state pass's argument order: `wu`, `qbar`, `kbar`,
    /// `p` (operand dtype), `gamma` (f32, three dims).
    pub fn scratch_shapes(&self, nch: usize) -> [[usize; 4]; 5] {
        let (hv, c, dk, dv) = (self.hv, self.chunk, self.dk, self.dv);
        [[hv, nch, c, dk + dv], [hv, nch, c, dk], [hv, nch, c, dk], [hv, nch, c, c], [hv, nch, dk, 1]]
    }

    /// The workspace layout of a batch of `nch` chunks over `n` sequences.
    pub fn layout(&self, nch: usize, n: usize) -> VarlenLayout {
        let align = |x: usize| x.div_ceil(256) * 256;
        let mut at = 0usize;
        let mut take = |bytes: usize| {
            let o = at;
            at = align(at + bytes);
            o
        };
        let (ctab, stab) = (take(nch * 2 * 4), take(n * 2 * 4));
        let [wu, qb, kb, pm, gam] = self.scratch_shapes(nch);
        let el = |s: [usize; 4]| self.op_dt.storage_bytes(s.iter().product());
        let (wu, qbar, kbar, p) = (take(el(wu)), take(el(qb)), take(el(kb)), take(el(pm)));
        let gamma = take(DType::F32.storage_bytes(gam.iter().product()));
        VarlenLayout { ctab, stab, wu, qbar, kbar, p, gamma, bytes: at }
    }

    /// The most chunks a batch within the limits has.
    pub fn max_chunks(&self) -> usize {
        self.max_tokens / self.chunk + self.max_seqs
    }

    /// Workspace bytes for any batch within the limits (`max_tokens`, `max_seqs`).
    pub fn workspace_bytes(&self) -> usize {
        self.layout(self.max_chunks(), self.max_seqs).bytes
    }
}

/// Fill the chunk table then the sequence table (`[row0, len]*`, then `[first chunk, count]*`, i32) into `out`
/// from the row offsets `cu_seqlens` (`[0, l0, l0 + l1, ...]`); returns (chunks, sequences). `out` is cleared
/// first and grows only past its capacity. Offsets that do not start at 0 or decrease are refused, naming the
/// entry.
pub fn chunk_tables(cu_seqlens: &[i32], chunk: usize, out: &mut Vec<i32>) -> Result<(usize, usize), Error> {
    let bad = |why: String| Error::Varlen { what: "cu_seqlens".into(), why };
    if cu_seqlens.first() != Some(&0) {
        return Err(bad(format!("must start with 0 (N + 1 row offsets), got {:?}", cu_seqlens.first())));
    }
    if chunk == 0 || chunk > i32::MAX as usize {
        return Err(bad(format!("chunk size {chunk}")));
    }
    for (i, w) in cu_seqlens.windows(2).enumerate() {
        if w[1] < w[0] {
            return Err(bad(format!(
                "entry {} ({}) is below entry {i} ({}): offsets never decrease",
                i + 1,
                w[1],
                w[0]
            )));
        }
    }
    out.clear();
    for w in cu_seqlens.windows(2) {
        let mut r = w[0];
        while r < w[1] {
            let len = (chunk as i32).min(w[1] - r);
            out.extend([r, len]);
            r += len;
        }
    }
    let nch = out.len() / 2;
    let mut first = 0i32;
    for w in cu_seqlens.windows(2) {
        let count = ((w[1] - w[0]) as usize).div_ceil(chunk) as i32;
        out.extend([first, count]);
        first += count;
    }
    Ok((nch, cu_seqlens.len() - 1))
}

/// A varlen KDA request loaded in one context: its three kernels and the host buffer its tables are built in.
pub struct KdaVarlen {
    spec: &'static KdaVarlenSpec,
    intra: Loaded,
    state: Loaded,
    state_h0: Loaded,
    host: Vec<i32>,
}

impl KdaVarlen {
    /// Load the variant of `specs` built for the device of `ctx` (else the first), once per context.
    pub fn load(ctx: &(impl AsContext + ?Sized), specs: &'static [KdaVarlenSpec]) -> Result<Self, Error> {
        let ctx = ctx.context();
        let info = GpuInfo::query(ctx)?;
        let spec = pick(specs, &info);
        let load = |im: &'static KernelImage| Loaded::load_image_in(ctx, &info, im, &[]);
        Ok(KdaVarlen {
            spec,
            intra: load(spec.intra)?,
            state: load(spec.state)?,
            state_h0: load(spec.state_h0)?,
            host: Vec::with_capacity(2 * (spec.max_chunks() + spec.max_seqs)),
        })
    }

    /// The recorded request.
    pub fn spec(&self) -> &'static KdaVarlenSpec {
        self.spec
    }

    /// Enqueue the batch on `stream`: `tokens` are the intra kernel's per-token inputs in its order (q, k, v, g,
    /// beta, ...), `h0` the initial states `[N, HV, K, V]` (zeros when `None`), `o: [T, HV, V]` and
    /// `ht: [N, HV, K, V]` the outputs, `workspace` a u8 buffer of at least
    /// [`KdaVarlenSpec::workspace_bytes`], 256-byte aligned. The tables are copied into the workspace on
    /// `stream` (from this runner's host buffer, so `stream` must not be capturing a graph), then the two
    /// kernels are enqueued; nothing waits.
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        &mut self,
        stream: &(impl AsStream + ?Sized),
        cu_seqlens: &[i32],
        tokens: &[ArgRef<'_>],
        h0: Option<ArgRef<'_>>,
        o: ArgRef<'_>,
        ht: ArgRef<'_>,
        workspace: ArgRef<'_>,
    ) -> Result<(), Error> {
        let s = self.spec;
        let bad = |what: &str, why: String| Error::Varlen { what: what.into(), why };
        if tokens.len() != s.token_inputs {
            return Err(bad("tokens", format!("{} per-token inputs, expected {}", tokens.len(), s.token_inputs)));
        }
        let (nch, n) = chunk_tables(cu_seqlens, s.chunk, &mut self.host)?;
        let total = *cu_seqlens.last().expect("checked non-empty") as usize;
        if n > s.max_seqs || total > s.max_tokens {
            return Err(bad(
                "cu_seqlens",
                format!(
                    "{n} sequences of {total} tokens; this request was built for at most {} sequences and {} tokens",
                    s.max_seqs, s.max_tokens
                ),
            ));
        }
        let rows = tokens[0].shape().first().copied().unwrap_or(0);
        if rows != total {
            return Err(bad("q", format!("{rows} rows, but cu_seqlens ends at {total}")));
        }
        let lay = s.layout(nch, n);
        if workspace.dtype() != DType::U8 || workspace.shape().len() != 1 {
            return Err(bad(
                "workspace",
                format!("expected a 1-d u8 buffer, got {} {:?}", workspace.dtype(), workspace.shape()),
            ));
        }
        if workspace.shape()[0] < lay.bytes {
            return Err(bad(
                "workspace",
                format!(
                    "{} bytes; this batch needs {} (any batch within the limits: {})",
                    workspace.shape()[0],
                    lay.bytes,
                    s.workspace_bytes()
                ),
            ));
        }
        if workspace.ptr() % 256 != 0 {
            return Err(bad("workspace", format!("address {:#x} is not 256-byte aligned", workspace.ptr())));
        }
        let base = workspace.ptr();
        if !self.host.is_empty() {
            // SAFETY: the destination lies inside the workspace (checked above), the source is this runner's host
            // buffer, which the driver has read when the call returns (pageable memory); `stream` is valid by
            // `AsStream`'s contract.
            let r = unsafe {
                k3k_runtime::cudarc::driver::sys::cuMemcpyHtoDAsync_v2(
                    base + lay.ctab as u64,
                    self.host.as_ptr() as *const std::ffi::c_void,
                    nch * 2 * 4,
                    stream.cu_stream(),
                )
                .result()
                .and_then(|()| {
                    k3k_runtime::cudarc::driver::sys::cuMemcpyHtoDAsync_v2(
                        base + lay.stab as u64,
                        self.host[2 * nch..].as_ptr() as *const std::ffi::c_void,
                        n * 2 * 4,
                        stream.cu_stream(),
                    )
                    .result()
                })
            };
            r.map_err(|e| RuntimeError::Cuda { what: "copy the chunk tables".into(), err: format!("{e:?}") })?;
        }
        let ctab_shape = [nch, 2];
        let stab_shape = [n, 2];
        let shapes = s.scratch_shapes(nch);
        let offs = [lay.wu, lay.qbar, lay.kbar, lay.p];
        // SAFETY (every `ArgRef::new` below): the region lies inside the workspace, which `layout` sized for
        // these shapes and the caller's view vouches for.
        let scratch: Vec<ArgRef<'_>> = (0..4)
            .map(|i| unsafe { ArgRef::new(base + offs[i] as u64, s.op_dt, &shapes[i]) })
            .chain(std::iter::once(unsafe { ArgRef::new(base + lay.gamma as u64, DType::F32, &shapes[4][..3]) }))
            .collect();
        let ctab = unsafe { ArgRef::new(base + lay.ctab as u64, DType::I32, &ctab_shape) };
        let stab = unsafe { ArgRef::new(base + lay.stab as u64, DType::I32, &stab_shape) };
        if nch > 0 {
            let mut a1: Vec<ArgRef<'_>> = tokens.to_vec();
            a1.push(ctab);
            a1.extend(&scratch);
            self.intra.launch(stream, &a1, s.scalars)?;
        }
        let mut a2: Vec<ArgRef<'_>> = scratch.clone();
        a2.extend([ctab, stab]);
        let state = match h0 {
            Some(h) => {
                a2.push(h);
                &self.state_h0
            }
            None => &self.state,
        };
        a2.extend([o, ht]);
        state.launch(stream, &a2, &[])
    }
}
