//! "Did you mean": the closest known name to a misspelt one.

/// Names longer than this are not compared: a name in a configuration file is short, and the
/// comparison costs the product of the two lengths.
const MAX_COMPARED: usize = 64;

/// The known name closest to `wrong`, when it is close enough to be what was meant: at most a
/// third of its letters changed (and at least one allowed).
pub(crate) fn did_you_mean<'a>(
    wrong: &str,
    known: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    if wrong.len() > MAX_COMPARED {
        return None;
    }
    let allowed = (wrong.chars().count() / 3).max(1);
    known
        .into_iter()
        .filter(|name| name.len() <= MAX_COMPARED)
        .map(|name| (edit_distance(wrong, name), name))
        .filter(|&(distance, _)| distance <= allowed)
        .min_by_key(|&(distance, _)| distance)
        .map(|(_, name)| name)
}

/// The optimal-string-alignment distance: insertions, deletions, substitutions and swaps of
/// two neighbouring letters (`rerty` is one slip from `retry`) each count one.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let width = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * width];
    for (i, cell) in d.iter_mut().step_by(width).enumerate() {
        *cell = i;
    }
    for (j, cell) in d.iter_mut().take(width).enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[(i - 1) * width + j] + 1)
                .min(d[i * width + j - 1] + 1)
                .min(d[(i - 1) * width + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[(i - 2) * width + j - 2] + 1);
            }
            d[i * width + j] = best;
        }
    }
    d[a.len() * width + b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_name_one_slip_away_and_nothing_far() {
        let keys = ["transient", "timeout", "execution"];
        assert_eq!(did_you_mean("transiant", keys), Some("transient"));
        assert_eq!(did_you_mean("timout", keys), Some("timeout"));
        assert_eq!(did_you_mean("banana", keys), None);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("rerty", "retry"), 1);
        assert_eq!(did_you_mean(&"x".repeat(100), keys), None);
    }
}
