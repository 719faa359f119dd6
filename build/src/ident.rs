//! Rust identifiers from kernel, tensor, scalar and operator names.

const KEYWORDS: &[&str] = &[
    "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum", "extern", "false", "fn",
    "for", "gen", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref", "return", "self",
    "Self", "static", "struct", "super", "trait", "true", "type", "unsafe", "use", "where", "while", "abstract",
    "become", "box", "do", "final", "macro", "override", "priv", "try", "typeof", "unsized", "virtual", "yield",
];

/// Words of a name: split at non-alphanumerics and at lower->upper case changes (`maxSeqlenQ`, `cu_seqlens`).
fn words(name: &str) -> Vec<String> {
    let mut out: Vec<String> = vec![];
    let mut cur = String::new();
    let mut prev_lower = false;
    for ch in name.chars() {
        if !ch.is_ascii_alphanumeric() {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            prev_lower = false;
            continue;
        }
        if ch.is_ascii_uppercase() && prev_lower && !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
        prev_lower = ch.is_ascii_lowercase() || ch.is_ascii_digit();
        cur.push(ch);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn fix(mut s: String, fallback: &str) -> String {
    if s.is_empty() {
        s = fallback.to_string();
    }
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '_');
    }
    if KEYWORDS.contains(&s.as_str()) {
        s.push('_');
    }
    s
}

/// `snake_case` (for modules, functions, fields and parameters).
pub fn snake(name: &str) -> String {
    fix(words(name).iter().map(|w| w.to_ascii_lowercase()).collect::<Vec<_>>().join("_"), "x")
}

/// `CamelCase` (for types).
pub fn camel(name: &str) -> String {
    let s: String = words(name)
        .iter()
        .map(|w| {
            let w = w.to_ascii_lowercase();
            let mut c = w.chars();
            c.next().map(|f| f.to_ascii_uppercase().to_string() + c.as_str()).unwrap_or_default()
        })
        .collect();
    fix(s, "Kernel")
}

/// `SCREAMING_SNAKE_CASE` (for statics).
pub fn screaming(name: &str) -> String {
    fix(words(name).iter().map(|w| w.to_ascii_uppercase()).collect::<Vec<_>>().join("_"), "X")
}

/// Make each name unique (and different from `reserved`) by appending `_2`, `_3`, ... in order.
pub fn unique(names: Vec<String>, reserved: &[&str]) -> Vec<String> {
    let mut seen: Vec<String> = reserved.iter().map(|s| s.to_string()).collect();
    names
        .into_iter()
        .map(|n| {
            let mut cand = n.clone();
            let mut i = 2;
            while seen.contains(&cand) {
                cand = format!("{n}_{i}");
                i += 1;
            }
            seen.push(cand.clone());
            cand
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases() {
        assert_eq!(snake("MAX_SEQLEN_Q"), "max_seqlen_q");
        assert_eq!(snake("cu_seqlens_q"), "cu_seqlens_q");
        assert_eq!(snake("type"), "type_");
        assert_eq!(snake("hist_quantile.qb"), "hist_quantile_qb");
        assert_eq!(snake("3x"), "_3x");
        assert_eq!(camel("gemm_grouped_p_situ_glu_in8_out2"), "GemmGroupedPSituGluIn8Out2");
        assert_eq!(camel("hq_alpha_epl28"), "HqAlphaEpl28");
        assert_eq!(screaming("kda.decode"), "KDA_DECODE");
        assert_eq!(unique(vec!["x".into(), "gpu".into(), "x".into()], &["gpu"]), vec!["x", "gpu_2", "x_2"]);
    }
}
