//! The benchmark presets (the DeepSeek-style expert shapes the reports time) and the random check cases (edge
//! sizes around the tile widths, empty groups, dense products, every epilogue).

use crate::op::Preset;
use rand::Rng;
use rand::rngs::StdRng;

/// The presets `k3k bench` and the tuner time.
pub fn bench_presets() -> Vec<Preset> {
    vec![
        Preset::new("G28 mean256 K3584 N6144", &[("G", 28), ("mean", 256), ("K", 3584), ("N", 6144)]),
        Preset::new("G28 mean1024 K3584 N6144", &[("G", 28), ("mean", 1024), ("K", 3584), ("N", 6144)]),
        Preset::new("G28 mean1024 K3072 N3584", &[("G", 28), ("mean", 1024), ("K", 3072), ("N", 3584)]),
        Preset::new("G56 mean64 K3584 N6144", &[("G", 56), ("mean", 64), ("K", 3584), ("N", 6144)]),
        Preset::new(
            "G28 mean256 K3584 N6144 situ_glu+p",
            &[("G", 28), ("mean", 256), ("K", 3584), ("N", 6144), ("epilogue", 1), ("p", 1)],
        ),
    ]
}

/// A random check case: K, N and the group sizes at tile edges or uniform in 1..=160, empty groups, a dense
/// product one time in seven, any epilogue (N made even for a GLU), routing weights or not.
pub fn random_case(rng: &mut StdRng) -> Preset {
    const EDGE: [i64; 9] = [1, 15, 16, 17, 31, 63, 64, 65, 130];
    let pick = |rng: &mut StdRng| -> i64 {
        if rng.random_bool(0.5) { EDGE[rng.random_range(0..EDGE.len())] } else { rng.random_range(1..=160) }
    };
    let k = pick(rng);
    let epilogue = rng.random_range(0..3i64);
    let mut n = pick(rng);
    if epilogue != 0 && n % 2 == 1 {
        n += 1;
    }
    let p = rng.random_bool(0.5) as i64;
    if rng.random_bool(0.15) {
        let m = pick(rng);
        return Preset::new(
            &format!("dense M{m} K{k} N{n} epi{epilogue} p{p}"),
            &[("M", m), ("K", k), ("N", n), ("epilogue", epilogue), ("p", p)],
        );
    }
    let g = rng.random_range(1..=6i64);
    let mut dims = vec![
        ("G".to_string(), g),
        ("K".to_string(), k),
        ("N".to_string(), n),
        ("epilogue".to_string(), epilogue),
        ("p".to_string(), p),
    ];
    let mut desc = String::new();
    for i in 0..g {
        let c = if rng.random_bool(0.25) { 0 } else { pick(rng) };
        dims.push((format!("c{i}"), c));
        desc.push_str(&format!("{c},"));
    }
    Preset { name: format!("G{g} [{desc}] K{k} N{n} epi{epilogue} p{p}"), dims: dims.into_iter().collect() }
}
