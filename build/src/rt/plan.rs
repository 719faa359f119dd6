//! Operator plans recorded at build time, and their runner.

use super::{AsStream, Error, KernelImage, Loaded, pick};
use k3k_ir::{DType, HostTensor, SymValue};
use k3k_runtime::{ArgRef, DeviceTensor, Gpu};

/// What a plan buffer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufRole {
    /// Given by the caller at every run.
    Input,
    /// A table that depends only on the shape (chunk tables, bin edges): embedded, uploaded once at load.
    Const,
    /// Written by the plan; given by the caller (see the generated `Outputs`).
    Output,
    /// Workspace between steps; allocated once at load.
    Scratch,
}

/// One buffer of a recorded plan.
#[derive(Debug)]
pub struct BufferSpec {
    pub name: &'static str,
    pub role: BufRole,
    pub dtype: DType,
    pub shape: &'static [usize],
    /// Contents of a [`BufRole::Const`] buffer (little-endian storage bytes).
    pub data: &'static [u8],
}

/// One launch of a recorded plan.
#[derive(Debug)]
pub struct StepSpec {
    /// Index into [`PlanSpec::kernels`].
    pub kernel: usize,
    /// Buffer indices in kernel argument order.
    pub args: &'static [usize],
    pub scalars: &'static [(&'static str, SymValue)],
}

/// An operator's plan for one shape on one GPU, recorded at build time.
#[derive(Debug)]
pub struct PlanSpec {
    pub name: &'static str,
    pub gpu: &'static str,
    pub kernels: &'static [&'static KernelImage],
    pub buffers: &'static [BufferSpec],
    pub steps: &'static [StepSpec],
}

/// A recorded plan loaded on one GPU: its kernels, its constant tables and its scratch buffers.
pub struct PlanRunner {
    spec: &'static PlanSpec,
    kernels: Vec<Loaded>,
    /// Per buffer: the plan's own tensor (constants and scratch).
    owned: Vec<Option<DeviceTensor>>,
}

impl PlanRunner {
    /// Load the variant of `plans` built for `gpu` (else the first): its kernels (once per context), and its
    /// constant tables and scratch buffers, allocated here once (on `gpu`'s stream; make the `Gpu` from your own
    /// stream with [`Gpu::from_stream`]) so that a run allocates nothing.
    pub fn load(gpu: &Gpu, plans: &'static [PlanSpec]) -> Result<Self, Error> {
        let spec = pick(plans, &gpu.info);
        let kernels = spec
            .kernels
            .iter()
            .map(|im| Loaded::load_image_in(&gpu.ctx, &gpu.info, im, &[]))
            .collect::<Result<_, _>>()?;
        let owned = spec
            .buffers
            .iter()
            .map(|b| match b.role {
                BufRole::Const => Ok(Some(gpu.upload(&HostTensor::from_bytes(b.dtype, b.shape, b.data.to_vec()))?)),
                BufRole::Scratch => Ok(Some(gpu.poisoned(b.dtype, b.shape)?)),
                BufRole::Input | BufRole::Output => Ok(None),
            })
            .collect::<Result<_, Error>>()?;
        Ok(PlanRunner { spec, kernels, owned })
    }

    /// The recorded plan.
    pub fn spec(&self) -> &'static PlanSpec {
        self.spec
    }

    /// The buffer specs of one role, in plan order.
    pub fn buffers(&self, role: BufRole) -> impl Iterator<Item = &'static BufferSpec> + use<> {
        self.spec.buffers.iter().filter(move |b| b.role == role)
    }

    /// A poisoned device tensor for output buffer `name`.
    pub fn alloc_output(&self, gpu: &Gpu, name: &str) -> Result<DeviceTensor, Error> {
        let b = self.spec.buffers.iter().find(|b| b.name == name && b.role == BufRole::Output).ok_or_else(|| {
            Error::Embedded { kernel: self.spec.name.into(), why: format!("plan has no output `{name}`") }
        })?;
        Ok(gpu.poisoned(b.dtype, b.shape)?)
    }

    /// Enqueue every step on `stream` (a stream of the context the plan was loaded in): `inputs` and `outputs`
    /// in plan order of their role (as the generated structs list them). Nothing is allocated or copied.
    pub fn run(
        &self,
        stream: &(impl AsStream + ?Sized),
        inputs: &[ArgRef<'_>],
        outputs: &[ArgRef<'_>],
    ) -> Result<(), Error> {
        let (mut ii, mut oi) = (0usize, 0usize);
        let mut bufs: Vec<ArgRef<'_>> = Vec::with_capacity(self.spec.buffers.len());
        for (b, own) in self.spec.buffers.iter().zip(&self.owned) {
            let given = match b.role {
                BufRole::Input => {
                    ii += 1;
                    inputs.get(ii - 1).copied()
                }
                BufRole::Output => {
                    oi += 1;
                    outputs.get(oi - 1).copied()
                }
                BufRole::Const | BufRole::Scratch => own.as_ref().map(DeviceTensor::arg),
            };
            let t = given.ok_or_else(|| Error::Embedded {
                kernel: self.spec.name.into(),
                why: format!("no tensor given for buffer `{}`", b.name),
            })?;
            if t.dtype() != b.dtype {
                return Err(Error::DType {
                    what: format!("plan `{}`: buffer `{}`", self.spec.name, b.name),
                    expected: b.dtype,
                    got: t.dtype(),
                });
            }
            if t.shape() != b.shape {
                return Err(Error::Shape {
                    plan: self.spec.name.into(),
                    buffer: b.name.into(),
                    expected: b.shape.to_vec(),
                    got: t.shape().to_vec(),
                });
            }
            bufs.push(t);
        }
        for s in self.spec.steps {
            let args: Vec<ArgRef<'_>> = s.args.iter().map(|&i| bufs[i]).collect();
            let scalars: Vec<(&str, SymValue)> = s.scalars.iter().map(|(n, v)| (*n, *v)).collect();
            self.kernels[s.kernel].launch(stream, &args, &scalars)?;
        }
        Ok(())
    }
}
