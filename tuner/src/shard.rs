//! `--shard i/n`: split the candidates of a tuning run over several GPUs or hosts.
//!
//! The candidates of one list are ranked by `stable_hash(id)` (the first 8 bytes of the SHA-256 of the id,
//! ties by id) and dealt round-robin: rank `r` belongs to shard `r % n`. The split therefore depends only on
//! the set of ids, not on the order they are listed in, the platform or the Rust version; every shard gets
//! `len / n` or one more (a shard of a short list is never left empty by chance, which a plain
//! `hash % n` did: 6 first-round candidates all landed in shard 0 of 2 on the H200, so shard 1 measured
//! nothing and had no leader for its second round); and each shard's results merge back with
//! `k3k results merge`. Shards are 0-based: `0/4` .. `3/4`.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fmt;
use std::str::FromStr;

/// Shard `index` of `count` (0-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid shard `{input}`: {reason} (expected `i/n` with 0 <= i < n, e.g. `0/4` .. `3/4`)")]
pub struct ShardParseError {
    pub input: String,
    pub reason: String,
}

impl Shard {
    /// The whole run as one shard.
    pub const ALL: Shard = Shard { index: 0, count: 1 };

    pub fn new(index: u32, count: u32) -> Result<Self, ShardParseError> {
        let err = |reason: String| ShardParseError { input: format!("{index}/{count}"), reason };
        if count == 0 {
            return Err(err("the shard count must be at least 1".into()));
        }
        if index >= count {
            return Err(err(format!(
                "shard index {index} is out of range for {count} shards (shards are numbered from 0)"
            )));
        }
        Ok(Self { index, count })
    }

    /// The items of this shard, in their original order (see the module doc for the split).
    pub fn select<'a, T>(&self, items: &'a [T], id_of: impl Fn(&T) -> &str) -> Vec<&'a T> {
        let mut ranked: Vec<(u64, &str, usize)> =
            items.iter().enumerate().map(|(i, t)| (stable_hash(id_of(t)), id_of(t), i)).collect();
        ranked.sort_unstable();
        let n = self.count as usize;
        let mut mine: Vec<usize> =
            ranked.iter().enumerate().filter(|(r, _)| r % n == self.index as usize).map(|(_, x)| x.2).collect();
        mine.sort_unstable();
        mine.into_iter().map(|i| &items[i]).collect()
    }
}

impl Default for Shard {
    fn default() -> Self {
        Self::ALL
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl FromStr for Shard {
    type Err = ShardParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason: &str| ShardParseError { input: s.to_string(), reason: reason.to_string() };
        let (i, n) = s.trim().split_once('/').ok_or_else(|| err("missing `/`"))?;
        let i: u32 = i.trim().parse().map_err(|_| err("the shard index is not a non-negative whole number"))?;
        let n: u32 = n.trim().parse().map_err(|_| err("the shard count is not a positive whole number"))?;
        Shard::new(i, n).map_err(|e| ShardParseError { input: s.to_string(), reason: e.reason })
    }
}

/// First 8 bytes of SHA-256, big-endian: stable across processes, hosts and versions.
pub fn stable_hash(id: &str) -> u64 {
    let digest = Sha256::digest(id.as_bytes());
    u64::from_be_bytes(digest[..8].try_into().expect("sha256 has 32 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        assert_eq!("2/4".parse::<Shard>().unwrap(), Shard { index: 2, count: 4 });
        assert_eq!(" 0 / 1 ".parse::<Shard>().unwrap(), Shard::ALL);
        assert_eq!(Shard::new(3, 8).unwrap().to_string(), "3/8");
    }

    #[test]
    fn bad_input_gets_a_clear_message() {
        let msg = |s: &str| s.parse::<Shard>().unwrap_err().to_string();
        assert!(msg("4/4").contains("out of range for 4 shards (shards are numbered from 0)"));
        assert!(msg("1/0").contains("at least 1"));
        assert!(msg("3").contains("missing `/`"));
        assert!(msg("-1/4").contains("index is not"));
        assert!(msg("1/x").contains("count is not"));
        assert!(msg("4/4").contains("expected `i/n` with 0 <= i < n"));
    }

    #[test]
    fn every_candidate_lands_in_exactly_one_shard_whatever_the_order() {
        let ids: Vec<String> = (0..200).map(|i| format!("bm={},stages={}", 16 << (i % 4), i)).collect();
        let n = 3;
        let shards: Vec<Shard> = (0..n).map(|i| Shard::new(i, n).unwrap()).collect();
        let picked: Vec<Vec<&String>> = shards.iter().map(|s| s.select(&ids, |x| x)).collect();
        for id in &ids {
            assert_eq!(picked.iter().filter(|p| p.contains(&id)).count(), 1, "{id}");
        }
        let sizes: Vec<usize> = picked.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![67, 67, 66], "balanced to one");
        // Original order kept within a shard.
        let pos = |id: &String| ids.iter().position(|x| x == id).unwrap();
        assert!(picked[1].windows(2).all(|w| pos(w[0]) < pos(w[1])));
        let mut reversed = ids.clone();
        reversed.reverse();
        let a: std::collections::BTreeSet<_> = shards[1].select(&ids, |x| x).into_iter().collect();
        let b: std::collections::BTreeSet<_> = shards[1].select(&reversed, |x| x).into_iter().collect();
        assert_eq!(a, b);
        assert_eq!(Shard::ALL.select(&ids, |x| x).len(), ids.len());
    }

    #[test]
    fn a_short_list_leaves_no_shard_empty() {
        // The H200 case: six first-round candidates whose hashes are all even went to shard 0 of 2 under
        // `hash % n`. Whatever the hashes, each of n shards gets len / n or one more.
        for len in 1..=12usize {
            let ids: Vec<String> = (0..len).map(|i| format!("HT={},HU=8", 64 * (i + 1))).collect();
            for n in 1..=4u32 {
                let sizes: Vec<usize> = (0..n).map(|i| Shard::new(i, n).unwrap().select(&ids, |x| x).len()).collect();
                assert_eq!(sizes.iter().sum::<usize>(), len);
                assert!(
                    sizes.iter().all(|&k| k == len / n as usize || k == len / n as usize + 1),
                    "{len}/{n}: {sizes:?}"
                );
            }
        }
    }

    #[test]
    fn hash_is_pinned() {
        // sha256("abc") = ba7816bf8f01cfea...
        assert_eq!(stable_hash("abc"), 0xba78_16bf_8f01_cfea);
    }
}
