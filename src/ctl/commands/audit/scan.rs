//! Byte-level checks that need no key: ciphertext entropy, and the leak scan that looks for
//! known plaintext (names, subjects, payload prefixes, canaries) in raw file bytes and paths.

/// Shannon entropy of `data` in bits per byte, with the Miller–Madow correction for sample
/// size: a few hundred random bytes measure well below 8 bits/byte uncorrected (a 500-byte
/// sample of perfect ciphertext averages ~7.6), which would flag small sealed blocks falsely.
pub fn entropy_bits_per_byte(data: &[u8]) -> f64 {
    if data.is_empty() {
        return 0.0;
    }
    let mut counts = [0u64; 256];
    for b in data {
        if let Some(c) = counts.get_mut(usize::from(*b)) {
            *c += 1;
        }
    }
    let n = data.len() as f64;
    let distinct = counts.iter().filter(|c| **c > 0).count() as f64;
    let h: f64 = counts
        .iter()
        .filter(|c| **c > 0)
        .map(|c| {
            let p = *c as f64 / n;
            -p * p.log2()
        })
        .sum();
    (h + (distinct - 1.0) / (2.0 * n * std::f64::consts::LN_2)).min(8.0)
}

/// Needles to look for: each at least 4 bytes, deduplicated, searched for all at once (an
/// Aho–Corasick automaton, built at the first search after the last addition: one pass over
/// a file finds every needle in it, however many there are).
#[derive(Debug, Default, Clone)]
pub struct Needles {
    items: Vec<Vec<u8>>,
    seen: std::collections::HashSet<Vec<u8>>,
    matcher: std::cell::OnceCell<Option<aho_corasick::AhoCorasick>>,
}

impl Needles {
    /// Adds a needle (ignored when shorter than 4 bytes: too likely by chance in ciphertext).
    pub fn add(&mut self, needle: &[u8]) {
        if needle.len() >= 4 && self.seen.insert(needle.to_vec()) {
            self.items.push(needle.to_vec());
            self.matcher = std::cell::OnceCell::new();
        }
    }

    /// Adds a subject and each of its tokens of at least 4 bytes.
    pub fn add_subject(&mut self, subject: &str) {
        self.add(subject.as_bytes());
        for t in subject.split('.') {
            self.add(t.as_bytes());
        }
    }

    /// Number of needles.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when there is nothing to look for.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The needles found in `haystack`, in the order they were added.
    pub fn found_in(&self, haystack: &[u8]) -> Vec<String> {
        let matcher = self
            .matcher
            .get_or_init(|| aho_corasick::AhoCorasick::new(&self.items).ok());
        let Some(ac) = matcher else {
            // The automaton could not be built (too large): one search per needle.
            return self
                .items
                .iter()
                .filter(|n| memchr::memmem::find(haystack, n).is_some())
                .map(|n| String::from_utf8_lossy(n).into_owned())
                .collect();
        };
        let mut hit = std::collections::BTreeSet::new();
        for m in ac.find_overlapping_iter(haystack) {
            hit.insert(m.pattern().as_usize());
        }
        hit.into_iter()
            .filter_map(|i| self.items.get(i))
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_bytes_have_high_entropy_and_text_low() {
        for len in [300usize, 500, 4096] {
            let mut r = vec![0u8; len];
            crate::crypto::random_bytes(&mut r);
            assert!(entropy_bits_per_byte(&r) > 7.5, "{len} random bytes");
        }
        assert!(entropy_bits_per_byte(&b"orders.eu.created ".repeat(200)) < 5.0);
    }

    #[test]
    fn needles_find_subject_tokens() {
        let mut n = Needles::default();
        n.add_subject("orders.europe.x");
        assert_eq!(n.found_in(b"....europe...."), vec!["europe".to_owned()]);
        assert!(n.found_in(b"nothing here").is_empty());
    }

    #[test]
    fn many_needles_are_found_in_one_pass_overlapping_ones_too() {
        let mut n = Needles::default();
        for i in 0..20_000 {
            n.add(format!("needle-{i:05}").as_bytes());
        }
        n.add(b"dle-0001");
        n.add(b"needle-00017"); // a duplicate: kept once
        assert_eq!(n.len(), 20_001);
        let found = n.found_in(b"xx needle-00017 yy needle-19999 zz");
        assert_eq!(found, vec!["needle-00017", "needle-19999", "dle-0001"]);
        // Added after a search: the next search sees it.
        n.add(b" zzz");
        assert!(n.found_in(b"a zzz").contains(&" zzz".to_owned()));
    }
}
