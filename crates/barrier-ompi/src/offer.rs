//! The choice among the offers of kept barriers that every rank gathered (see `reuse.rs`, which
//! is built with the `ompi` feature; this part is plain arithmetic, tested without MPI).
#![cfg_attr(not(feature = "ompi"), allow(dead_code))]

/// Parked barriers a rank offers to one communicator, at most.
pub const OFFERS: usize = 4;
/// Words of one rank's offers in the exchange: (context id + 1, calls) per offer, 0 for none.
pub const OFFER_WORDS: usize = 2 * OFFERS;

/// The offer (context id + 1, calls) that every rank made, the smallest if several: the same
/// on every rank, which all read the same words.
pub fn choose(all: &[u64]) -> Option<(u64, u64)> {
    let everyone = |offer: &[u64]| all.chunks(OFFER_WORDS).all(|row| row.chunks(2).any(|o| o == offer));
    all.chunks(OFFER_WORDS)
        .next()?
        .chunks(2)
        .filter(|offer| offer[0] != 0 && everyone(offer))
        .map(|offer| (offer[0], offer[1]))
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(offers: &[(u64, u64)]) -> Vec<u64> {
        let mut r = vec![0; OFFER_WORDS];
        for (i, &(id, n)) in offers.iter().enumerate() {
            r[2 * i] = id;
            r[2 * i + 1] = n;
        }
        r
    }

    #[test]
    fn only_an_offer_of_every_rank_with_the_same_count_is_adopted() {
        let all = [row(&[(5, 3), (9, 1)]), row(&[(9, 1), (5, 3)])].concat();
        assert_eq!(choose(&all), Some((5, 3)));
        let all = [row(&[(5, 3)]), row(&[(5, 4)])].concat();
        assert_eq!(choose(&all), None, "counts differ: the states differ");
        let all = [row(&[(5, 3)]), row(&[])].concat();
        assert_eq!(choose(&all), None, "one rank has nothing to offer");
        let all = [row(&[]), row(&[])].concat();
        assert_eq!(choose(&all), None);
    }
}
