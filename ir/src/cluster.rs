//! Thread-block clusters (sm_90): a kernel's blocks launched in groups of `Kernel::cluster` blocks that run
//! at the same time on one GPC and may touch each other's shared memory.
//!
//! What the IR offers ([`crate::Kernel::cluster`], the CUDA `__cluster_dims__`):
//! - the block's rank in its cluster, [`rank_expr`] (`%cluster_ctarank`: x fastest, from the block index:
//!   clusters tile the grid, so the rank is `bx % cx + cx * (by % cy + cy * (bz % cz))`) and its cluster,
//!   the block index divided by the cluster shape;
//! - a multicast [`crate::TmaLoad`] (`.multicast::cluster`): one copy lands the box in every CTA of a rank
//!   mask, at the same shared offset, completing its bytes on the same barrier of each of those CTAs;
//! - [`crate::Stmt::MbarArriveCluster`]: lane 0 of each warp arrives on a barrier of any CTA of the cluster
//!   (`mapa` + `mbarrier.arrive.shared::cluster`, release at CTA scope as CUTLASS's `ClusterBarrier::arrive`: it
//!   says the warp's reads of a slot are done; writes a peer must see need a `ClusterSync`); every mbarrier wait
//!   is at CTA scope, as CUTLASS's;
//! - [`crate::Stmt::ClusterSync`]: every thread of the cluster meets (`barrier.cluster.arrive.release` +
//!   `barrier.cluster.wait.acquire`).
//!
//! The protocol a multicast pipeline follows (as CUTLASS's `PipelineTmaAsync`): barriers are initialized by
//! `MbarInit` (whose `fence.mbarrier_init.release.cluster` makes the initialization visible to the cluster),
//! then a `ClusterSync` before any peer may arrive on them or multicast into them. A slot's empty barrier
//! counts the releases of the consumers of *every* CTA the slot's multicasts come from or go to, since a
//! producer refilling the slot writes into its peers' shared memory too. Before a CTA exits, a `ClusterSync`,
//! so that no peer still arrives on its barriers or copies into its shared memory.
//!
//! The CPU backends run the CTAs of one cluster concurrently (one OS thread each, one at a time: a CTA runs
//! until a barrier wait cannot return, then hands over to a CTA that can go on); a wait no CTA of the cluster
//! can ever satisfy is a deadlock, reported as an error (the GPU would hang).

use crate::expr::Expr;

/// No cluster: `[1, 1, 1]`.
pub fn no_cluster() -> [u32; 3] {
    [1, 1, 1]
}

/// True for `[1, 1, 1]`.
pub fn is_no_cluster(c: &[u32; 3]) -> bool {
    *c == [1, 1, 1]
}

/// The largest portable cluster (blocks).
pub const MAX_CLUSTER: u32 = 8;

/// The block's rank in a cluster of shape `c`, from the block index.
pub fn rank_expr(c: [u32; 3]) -> Expr {
    let part = |i: usize| -> Expr { if c[i] == 1 { Expr::Int(0) } else { Expr::block_idx(i as u8) % c[i] as i64 } };
    match c {
        [_, 1, 1] => part(0),
        _ => part(0) + (part(1) + part(2) * c[1] as i64) * c[0] as i64,
    }
}

/// The block's rank in a cluster of shape `c` for a concrete block index.
pub fn rank_of(c: [u32; 3], block: [u32; 3]) -> u32 {
    block[0] % c[0] + c[0] * (block[1] % c[1] + c[1] * (block[2] % c[2]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{KernelBuilder, stable_hash};

    #[test]
    fn no_cluster_keeps_the_serialized_kernel_and_its_hash() {
        let mut b = KernelBuilder::new("k", 32);
        b.barrier();
        let k = b.finish().unwrap();
        let json = serde_json::to_string(&k).unwrap();
        assert!(!json.contains("cluster"), "{json}");
        let back: crate::Kernel = serde_json::from_str(&json).unwrap();
        assert_eq!(back.cluster, [1, 1, 1]);
        let mut c = k.clone();
        c.cluster = [2, 1, 1];
        assert_ne!(stable_hash(&c), stable_hash(&k));
        assert!(serde_json::to_string(&c).unwrap().contains("cluster"));
    }

    #[test]
    fn ranks_are_x_fastest() {
        assert_eq!(rank_of([2, 1, 1], [5, 0, 0]), 1);
        assert_eq!(rank_of([2, 2, 1], [3, 1, 0]), 3);
        assert_eq!(rank_of([2, 2, 2], [2, 3, 5]), 6);
        assert_eq!(rank_expr([1, 1, 1]), Expr::Int(0));
    }
}
