//! `k3k fingerprint --dims`: kernel variants that no benchmark preset builds (e.g. kda's in-kernel gate forms) can
//! be fingerprinted before and after a change.

mod common;
use common::{k3k_command, run};
use std::time::Duration;

#[test]
fn dims_fingerprint_the_variants_they_name() {
    let mut c = k3k_command();
    c.args(["fingerprint", "--op", "kda", "--dims", "B=1,T=64,H=2,K=128,gate=1,bias=1; B=1,T=64,H=2,K=128"]);
    let r = run(c, "fingerprint --dims", Duration::from_secs(60));
    assert_eq!(r.code, Some(0), "{}", r.all());
    let rows: Vec<Vec<&str>> =
        r.stdout.lines().filter(|l| !l.starts_with('#')).map(|l| l.split('\t').collect()).collect();
    let gated: Vec<_> = rows.iter().filter(|f| f[1] == "custom B=1,T=64,H=2,K=128,gate=1,bias=1").collect();
    let plain: Vec<_> = rows.iter().filter(|f| f[1] == "custom B=1,T=64,H=2,K=128").collect();
    assert!(!gated.is_empty() && !plain.is_empty(), "{}", r.stdout);
    // The gate form with its bias is in the intra kernel's name (`lbsigb`), the pre-computed gate's (`pre`) not.
    assert!(gated.iter().any(|f| f[4].contains("_lbsigb")), "{}", r.stdout);
    assert!(plain.iter().all(|f| !f[4].contains("_lbsig")), "{}", r.stdout);
    assert_eq!(rows.len(), gated.len() + plain.len(), "no benchmark preset besides the dims");

    let mut c = k3k_command();
    c.args(["fingerprint", "--op", "kda", "--dims", "B=1,T=64,H=2,K=128", "--preset", "B1 T8192 H96 K128 safe"]);
    let r = run(c, "fingerprint --dims --preset", Duration::from_secs(60));
    assert_ne!(r.code, Some(0), "--dims and --preset together are refused: {}", r.all());
}
