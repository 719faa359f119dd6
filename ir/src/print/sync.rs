//! Barriers and copies: block and cluster barriers, `cp.async` copies, mbarriers, the TMA's bulk copies.

use super::*;

/// Print one barrier or copy statement.
pub(super) fn sync_stmt(k: &Kernel, st: &Stmt, pad: &str, s: &mut String) {
    match st {
        Stmt::Barrier => {
            let _ = writeln!(s, "{pad}barrier");
        }
        Stmt::CopyAsync { dst, src } => {
            let _ = writeln!(s, "{pad}{} <~ {}", shared_ref(k, dst), global_view(k, src));
        }
        Stmt::MbarInit { bar, count } => {
            let _ = writeln!(s, "{pad}mbar_init {} count={count}", mbar_name(k, bar.0));
        }
        Stmt::MbarArriveExpectTx { bar, bytes } => {
            let _ = writeln!(s, "{pad}mbar_arrive_expect_tx {} bytes={bytes}", mbar_ref(k, bar));
        }
        Stmt::MbarArrive { bar } => {
            let _ = writeln!(s, "{pad}mbar_arrive {}", mbar_ref(k, bar));
        }
        Stmt::MbarWait { bar, parity, elected } => {
            let who = if *elected { " (thread 0)" } else { "" };
            let _ = writeln!(s, "{pad}mbar_wait {} parity={}{who}", mbar_ref(k, bar), expr(k, parity));
        }
        Stmt::TmaLoad(t) => {
            let coords: Vec<String> = t.coords.iter().map(|c| expr(k, c)).collect();
            let map = k.tensor_maps.get(t.map.0 as usize).map_or("?", |m| &m.name);
            let mc = t.multicast.as_ref().map_or(String::new(), |m| format!(" multicast={}", expr(k, m)));
            let _ = writeln!(
                s,
                "{pad}{} <~tma {map}[{}] on {}{mc}",
                shared_ref(k, &t.dst),
                coords.join(", "),
                mbar_ref(k, &t.bar)
            );
        }
        Stmt::TmaStore(t) => {
            let coords: Vec<String> = t.coords.iter().map(|c| expr(k, c)).collect();
            let map = k.tensor_maps.get(t.map.0 as usize).map_or("?", |m| &m.name);
            let _ = writeln!(
                s,
                "{pad}{map}[{}] <~tma {} (fence, consumer barrier)",
                coords.join(", "),
                shared_ref(k, &t.src)
            );
        }
        Stmt::TmaStoreWait { pending } => {
            let _ = writeln!(s, "{pad}tma_store_wait reads pending<={pending} (consumer barrier)");
        }
        Stmt::MbarArriveCluster { bar, cta } => {
            let _ =
                writeln!(s, "{pad}mbar_arrive_cluster {} cta={} (lane 0 of each warp)", mbar_ref(k, bar), expr(k, cta));
        }
        Stmt::ClusterSync => {
            let _ = writeln!(s, "{pad}cluster_sync");
        }
        Stmt::GridDep(GridDep::Wait) => {
            let _ = writeln!(s, "{pad}grid_dep_wait (the grid before this one complete)");
        }
        Stmt::GridDep(GridDep::LaunchDependents) => {
            let _ = writeln!(s, "{pad}grid_dep_launch_dependents");
        }
        Stmt::AsyncCommit => {
            let _ = writeln!(s, "{pad}commit");
        }
        Stmt::AsyncWait { pending } => {
            let _ = writeln!(s, "{pad}wait pending<={pending}");
        }
        _ => unreachable!("not a barrier or copy statement"),
    }
}
