//! Unit tests of the offload backend's plans.

use super::*;

#[test]
fn a_communicator_that_fits_uses_one_group() {
    let t = TreeShape::new(100, 128);
    assert_eq!((t.chunks, t.groups(), t.members_of(0)), (1, 1, 100));
    assert_eq!(t.roles(37), vec![(0, 37)]);
    assert_eq!(t.plan(37), vec![Step::Arrive(0), Step::Wait(0)]);
}

#[test]
fn shapes_beyond_a_two_level_tree_are_declined_with_the_limit() {
    let t = TreeShape::new(128 * 128 + 1, 128);
    let why = t.fits(&barrier_hw::SWITCH, "switch").unwrap_err();
    assert!(why.contains("16385 members > 16384") && why.contains("129 leaders"), "{why}");
    // 128 chunks would need 2 * 128 + 1 = 257 of the switch's 256 groups; 127 chunks fit.
    let why = TreeShape::new(128 * 128, 128).fits(&barrier_hw::SWITCH, "switch").unwrap_err();
    assert!(why.contains("257 switch groups"), "{why}");
    assert!(TreeShape::new(127 * 128, 128).fits(&barrier_hw::SWITCH, "switch").is_ok());
    // The GBA has only 32 groups: 16 chunks would need 33.
    let why = TreeShape::new(708 * 16, 708).fits(&barrier_hw::GBA, "gba").unwrap_err();
    assert!(why.contains("33 gba groups"), "{why}");
}

#[test]
fn a_thousand_ranks_form_a_tree_whose_groups_cover_every_rank_once() {
    let t = TreeShape::new(1000, 128);
    assert_eq!((t.chunks, t.groups()), (8, 17));
    let mut seen = vec![Vec::new(); t.groups()];
    for r in 0..1000 {
        for (k, m) in t.roles(r) {
            seen[k].push(m);
        }
    }
    for (k, members) in seen.iter().enumerate() {
        let expect: Vec<usize> = (0..t.members_of(k)).collect();
        assert_eq!(members, &expect, "group {k}");
        assert!(members.len() <= 128);
    }
    assert_eq!(t.members_of(16), 8, "the root holds one leader per chunk");
    // Leaders wait for their chunk, then the root, then release their chunk.
    assert_eq!(
        t.plan(0),
        vec![Step::Arrive(0), Step::Wait(0), Step::Arrive(2), Step::Wait(2), Step::Arrive(1), Step::Wait(1)]
    );
    assert_eq!(t.plan(1), vec![Step::Arrive(0), Step::Arrive(1), Step::Wait(1)]);
}
