//! The kernels users get (each operator's defaults and the tuned records' knobs at every benchmark preset)
//! against `results/nvidia-h200/fingerprints.txt` (see `k3k::fingerprint`): a renderer change without a
//! `CODEGEN_VERSION` bump, or a changed tuned kernel whose record would still be handed out, fails here.
//! `K3K_BLESS=1 cargo test --test fingerprints` rewrites the file after an intended change.
use k3k::fingerprint::{collect, compare, parse, to_text};
use k3k_codegen::CODEGEN_VERSION;
use k3k_tuner::ResultsStore;
use std::path::Path;

#[test]
fn kernels_match_their_fingerprints() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("results");
    let gpu = "nvidia-h200";
    let store = ResultsStore::open_read_only(&root);
    let now = collect(&k3k_ops::registry::all(), &store, gpu).expect("fingerprints of this build");
    let tuned = now.iter().filter(|f| f.source == k3k::fingerprint::Source::Tuned).count();
    eprintln!("{} kernels ({tuned} at tuned knobs)", now.len());
    assert!(now.len() > 20, "every operator's preset kernels are fingerprinted");
    let path = root.join(gpu).join("fingerprints.txt");
    if std::env::var("K3K_BLESS").is_ok_and(|v| v == "1") {
        // Written whole, then renamed over the old file (an interrupted bless leaves the old file intact).
        let tmp = path.with_extension("txt.tmp");
        std::fs::write(&tmp, to_text(CODEGEN_VERSION, &now)).expect("write the fingerprint file");
        std::fs::rename(&tmp, &path).expect("replace the fingerprint file");
        eprintln!("wrote {}", path.display());
        return;
    }
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (version, old) = parse(&text).unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
    let c = compare(version, &old, &now);
    eprintln!("{} kernels not in the file, {} with a changed IR at default knobs", c.unlisted, c.ir_changed);
    assert!(
        c.violations.is_empty(),
        "{} fingerprint violations (K3K_BLESS=1 rewrites the file once intended):\n{}",
        c.violations.len(),
        c.violations.join("\n")
    );
}
