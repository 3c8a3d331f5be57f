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

/// Needles to look for: each at least 4 bytes, deduplicated, searched for all at once, built
/// at the first search after the last addition, so that one pass over a file finds every
/// needle in it, however many there are: the long ones by their aligned windows
/// ([`Windows`]), the short ones by an Aho–Corasick automaton.
#[derive(Debug, Default, Clone)]
pub struct Needles {
    items: Vec<Vec<u8>>,
    seen: std::collections::HashSet<Vec<u8>>,
    matcher: std::sync::OnceLock<Matcher>,
    /// Payload prefixes: a uniform sample of at most [`PAYLOAD_SAMPLES`] (reservoir).
    samples: Vec<Vec<u8>>,
    offered: u64,
    rng: u64,
}

/// How many payload prefixes the leak scan looks for. Payloads leak wholesale or not at all
/// (a store either seals its blocks or it does not): a uniform sample this large finds a
/// leak of even 0.01 % of the messages with near certainty, while one needle per message
/// would make the search of a store of ten million messages cost gigabytes.
pub const PAYLOAD_SAMPLES: usize = 65_536;

impl Needles {
    /// Adds a needle (ignored when shorter than 4 bytes: too likely by chance in ciphertext).
    pub fn add(&mut self, needle: &[u8]) {
        if needle.len() >= 4 && self.seen.insert(needle.to_vec()) {
            self.items.push(needle.to_vec());
            self.matcher = std::sync::OnceLock::new();
        }
    }

    /// Offers a payload prefix to the sample (see [`PAYLOAD_SAMPLES`]).
    pub fn add_payload(&mut self, prefix: &[u8]) {
        if prefix.len() < 4 {
            return;
        }
        self.offered += 1;
        if self.samples.len() < PAYLOAD_SAMPLES {
            self.samples.push(prefix.to_vec());
            return;
        }
        // xorshift64*: a reservoir needs no cryptographic randomness.
        if self.rng == 0 {
            self.rng = 0x9E37_79B9_7F4A_7C15;
        }
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let j = self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D) % self.offered;
        if let Some(slot) = self
            .samples
            .get_mut(usize::try_from(j).unwrap_or(usize::MAX))
        {
            *slot = prefix.to_vec();
        }
    }

    /// Adds a subject and each of its tokens of at least 4 bytes.
    pub fn add_subject(&mut self, subject: &str) {
        self.add(subject.as_bytes());
        for t in subject.split('.') {
            self.add(t.as_bytes());
        }
    }

    /// The needles long enough that finding one in `haystack_bytes` of ciphertext by chance
    /// is unlikely (fewer than one chance hit in a thousand audits, over every needle), and
    /// how many were left out. A short token (`eu`, `00123`) is searched for only in a small
    /// store: a random 5-byte string turns up once in about a terabyte, so 20,000 of them
    /// turn up in a gigabyte of ciphertext — not a leak.
    pub fn significant(&self, haystack_bytes: u64) -> (Needles, usize) {
        let expected = (haystack_bytes.max(1) as f64) * (self.items.len().max(1) as f64) * 1000.0;
        // 256^len > expected  <=>  len > log256(expected)
        let min_len = ((expected.log2() / 8.0).floor() as usize + 1).max(4);
        let mut out = Needles::default();
        let mut dropped = 0;
        for n in self.items.iter().chain(&self.samples) {
            if n.len() >= min_len {
                out.add(n);
            } else {
                dropped += 1;
            }
        }
        (out, dropped)
    }

    /// The needles that could betray something in a path: not made of hex digits alone (every
    /// name the store writes is hex — ids, pseudonyms — so a numeric subject token "matches"
    /// them by chance).
    pub fn for_paths(&self) -> Needles {
        let mut out = Needles::default();
        for n in &self.items {
            if !n.iter().all(u8::is_ascii_hexdigit) {
                out.add(n);
            }
        }
        out
    }

    /// Number of needles (sampled payload prefixes included).
    pub fn len(&self) -> usize {
        self.items.len() + self.samples.len()
    }

    /// True when there is nothing to look for.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty() && self.samples.is_empty()
    }

    /// The needles found in `haystack`, in the order they were added.
    pub fn found_in(&self, haystack: &[u8]) -> Vec<String> {
        let m = self.matcher.get_or_init(|| Matcher::new(&self.items));
        let mut hit = std::collections::BTreeSet::new();
        m.windows.find(haystack, &mut hit);
        match &m.short {
            Some(ac) => {
                for found in ac.find_overlapping_iter(haystack) {
                    if let Some(i) = m.short_items.get(found.pattern().as_usize()) {
                        hit.insert(*i);
                    }
                }
            }
            // The automaton could not be built (too large): one search per needle.
            None => {
                for i in &m.short_items {
                    if self
                        .items
                        .get(*i)
                        .is_some_and(|n| memchr::memmem::find(haystack, n).is_some())
                    {
                        hit.insert(*i);
                    }
                }
            }
        }
        hit.into_iter()
            .filter_map(|i| self.items.get(i))
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .collect()
    }
}

/// Needles at least this long are found through their windows ([`Windows`]).
const WINDOWED_LEN: usize = 15;

/// The search structures of a set of needles.
#[derive(Debug, Clone)]
struct Matcher {
    /// The needles of at least [`WINDOWED_LEN`] bytes.
    windows: Windows,
    /// An automaton of the shorter needles (`None`: too large to build).
    short: Option<aho_corasick::AhoCorasick>,
    /// The automaton's patterns' indexes among the needles.
    short_items: Vec<usize>,
}

impl Matcher {
    fn new(items: &[Vec<u8>]) -> Self {
        let (long, short): (Vec<_>, Vec<_>) = items
            .iter()
            .enumerate()
            .partition(|(_, n)| n.len() >= WINDOWED_LEN);
        let short_items: Vec<usize> = short.iter().map(|(i, _)| *i).collect();
        let short = if short.is_empty() {
            None
        } else {
            aho_corasick::AhoCorasick::new(short.iter().map(|(_, n)| n)).ok()
        };
        Matcher {
            windows: Windows::new(&long),
            short,
            short_items,
        }
    }
}

/// Long needles, found by looking at the haystack only every 8 bytes.
///
/// Why: an automaton over 65,536 sampled payload prefixes (32 bytes each) is a large NFA
/// that steps through every byte of every file — an audit of an 11 GB store of ten million
/// distinct payloads spent 86 % of its time there (~170 MB/s; a DFA that size would not fit
/// in memory).
///
/// How: an occurrence of a needle of at least 15 bytes covers a whole 8-byte window of the
/// haystack that starts at a multiple of 8, and that window is the needle's window at one of
/// its offsets 0–7. Those eight windows of every long needle are indexed; each aligned window
/// of the haystack is looked up in a bit filter (at most 1 MiB, so it stays in cache) and
/// only a filter hit goes to the index, which names the (length, offset) pairs of needles
/// having that window there; each pair is one lookup of those haystack bytes among the whole
/// needles. So a needle is reported only where it really occurs, and needles sharing their
/// first bytes (payloads that all start alike) cost one lookup per pair, not one per needle.
#[derive(Debug, Clone, Default)]
struct Windows {
    /// One bit per bucket of [`Windows::bucket`]: set when some indexed window falls in it.
    filter: Vec<u64>,
    /// log2 of the filter's bits.
    bits: u32,
    /// Window → the (needle length, window offset) pairs it occurs at, each once.
    at: std::collections::HashMap<u64, Vec<(usize, usize)>>,
    /// Every long needle → its index.
    whole: std::collections::HashMap<Vec<u8>, usize>,
}

/// The haystack's stride and the window's width.
const WINDOW: usize = 8;

impl Windows {
    fn new(long: &[(usize, &Vec<u8>)]) -> Self {
        if long.is_empty() {
            return Windows::default();
        }
        let entries = long.len() * WINDOW;
        // About 16 bits per entry (a filter hit by chance at 1 aligned window in 16), capped
        // at 1 MiB.
        let bits = (entries * 16)
            .next_power_of_two()
            .trailing_zeros()
            .clamp(10, 23);
        let mut w = Windows {
            filter: vec![0u64; 1usize << (bits - 6)],
            bits,
            at: Default::default(),
            whole: Default::default(),
        };
        for (i, n) in long {
            for off in 0..WINDOW {
                let Some(win) = window(n, off) else { continue };
                let b = w.bucket(win);
                if let Some(word) = w.filter.get_mut(b >> 6) {
                    *word |= 1 << (b & 63);
                }
                w.at.entry(win).or_default().push((n.len(), off));
            }
            w.whole.insert((*n).clone(), *i);
        }
        for pairs in w.at.values_mut() {
            pairs.sort_unstable();
            pairs.dedup();
        }
        w
    }

    fn bucket(&self, window: u64) -> usize {
        (window.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - self.bits)) as usize
    }

    /// Adds to `hit` the index (among the needles) of every long needle found in `haystack`.
    fn find(&self, haystack: &[u8], hit: &mut std::collections::BTreeSet<usize>) {
        if self.at.is_empty() {
            return;
        }
        for (k, chunk) in haystack.chunks_exact(WINDOW).enumerate() {
            let Ok(bytes) = <[u8; WINDOW]>::try_from(chunk) else {
                continue;
            };
            let win = u64::from_le_bytes(bytes);
            let b = self.bucket(win);
            if self
                .filter
                .get(b >> 6)
                .is_none_or(|word| word >> (b & 63) & 1 == 0)
            {
                continue;
            }
            let Some(candidates) = self.at.get(&win) else {
                continue;
            };
            let q = k * WINDOW;
            for (len, off) in candidates {
                let there = q.checked_sub(*off).and_then(|p| haystack.get(p..p + len));
                if let Some(i) = there.and_then(|bytes| self.whole.get(bytes)) {
                    hit.insert(*i);
                }
            }
        }
    }
}

/// The 8 bytes of `needle` at `offset`, as a number.
fn window(needle: &[u8], offset: usize) -> Option<u64> {
    let bytes = needle.get(offset..offset + WINDOW)?;
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
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
    fn short_needles_are_left_out_of_big_scans_and_hex_ones_out_of_paths() {
        let mut n = Needles::default();
        n.add(b"00123");
        n.add(b"orders");
        n.add(b"a-long-canary-string");
        let (small, dropped) = n.significant(1 << 20);
        assert_eq!(
            (small.len(), dropped),
            (3, 0),
            "a megabyte: every needle counts"
        );
        let (big, dropped) = n.significant(10 << 30);
        assert_eq!(
            dropped, 1,
            "ten gigabytes: a 5-byte token turns up by chance"
        );
        assert_eq!(
            big.found_in(b"..a-long-canary-string.."),
            vec!["a-long-canary-string"]
        );
        let paths = n.for_paths();
        assert!(paths.found_in(b"s/00123abc/seg-1.log").is_empty());
        assert_eq!(paths.found_in(b"s/orders/x"), vec!["orders"]);
    }

    #[test]
    fn payload_prefixes_are_sampled_uniformly_up_to_the_cap() {
        let mut n = Needles::default();
        for i in 0..(PAYLOAD_SAMPLES as u64 * 3) {
            n.add_payload(format!("payload-prefix-{i:08}").as_bytes());
        }
        assert_eq!(n.len(), PAYLOAD_SAMPLES);
        let (all, _) = n.significant(1 << 20);
        // Every third of the offers is about equally represented.
        let late = all.found_in(
            (PAYLOAD_SAMPLES as u64 * 2..PAYLOAD_SAMPLES as u64 * 3)
                .map(|i| format!("payload-prefix-{i:08}|"))
                .collect::<String>()
                .as_bytes(),
        );
        let share = late.len() as f64 / PAYLOAD_SAMPLES as f64;
        assert!((0.30..0.37).contains(&share), "{share}");
    }

    /// Long needles are found through their aligned windows wherever they start (every
    /// offset modulo 8, at the very start and end of the haystack), never where only part
    /// of one is, and alongside short ones.
    #[test]
    fn long_needles_are_found_at_every_alignment_and_only_whole() {
        let long = b"a-sampled-payload-prefix-of-32-b".to_vec();
        let mut n = Needles::default();
        n.add(&long);
        n.add(b"token");
        for pad in 0..24 {
            for tail in [0usize, 3, 8] {
                let mut hay = vec![0xAAu8; pad];
                hay.extend_from_slice(&long);
                hay.extend(std::iter::repeat_n(0xBBu8, tail));
                assert_eq!(
                    n.found_in(&hay),
                    vec![String::from_utf8(long.clone()).unwrap()],
                    "at offset {pad}, {tail} bytes after"
                );
            }
        }
        // All but its last byte, or its first: not found.
        assert!(n.found_in(&long[..long.len() - 1]).is_empty());
        assert!(n.found_in(&long[1..]).is_empty());
        // A long and a short needle, each found.
        let mut hay = b"xx token yy ".to_vec();
        hay.extend_from_slice(&long);
        assert_eq!(n.found_in(&hay).len(), 2);
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
