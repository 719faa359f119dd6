//! The CUDA C backend: renderer and device prelude.
pub mod render;
