//! The model's unit tests: the plans it reads from the backends, pinned.

use super::predict::crossing_puts;
use super::*;

fn by<'a>(p: &'a [Prediction], name: &str) -> &'a Prediction {
    p.iter().find(|x| x.backend == name).unwrap()
}

#[test]
fn flat_dissemination_pays_a_put_per_round_and_hierarchical_only_the_roots_rounds() {
    let m = Machine::builtin();
    let net = Network::parse("custom:1us,0", &m).unwrap();
    let p = predict(Shape { nodes: 4096, ppn: 48 }, &net, &m);
    // 196,608 ranks: 18 rounds of a put; 4,096 roots: 12.
    assert_eq!(by(&p, "dissemination").ns(), 18_000.0);
    let hier = by(&p, "hierarchical (dissemination among roots)");
    assert_eq!(hier.parts[1].ns, 12_000.0);
    // 48 ranks, radix 8: two levels up and two down.
    assert_eq!(hier.parts[0].ns, 2.0 * m.flag_ns);
    assert!(hier.declined.is_none());
}

#[test]
fn crossing_puts_are_counted_exactly() {
    for (nodes, per_node) in [(2, 48), (3, 5), (4, 1), (5, 3), (2, 2), (7, 13)] {
        let n = nodes * per_node;
        for k in 0..barrier::rounds(n) {
            let d = 1 << k;
            let brute = (0..n).filter(|&j| j / per_node != ((j + d) % n) / per_node).count();
            assert_eq!(crossing_puts(n, per_node, d), brute, "{nodes} x {per_node}, distance {d}");
        }
    }
}

#[test]
fn devices_decline_what_their_group_tree_cannot_hold() {
    let m = Machine::builtin();
    let mut net = Network::parse("ib-hdr", &m).unwrap();
    net.devices = vec!["switch", "gba"];
    let p = predict(Shape { nodes: 4096, ppn: 48 }, &net, &m);
    assert!(by(&p, "switch").declined.as_deref().unwrap().contains("leaders in its root group"));
    assert!(by(&p, "gba").declined.as_deref().unwrap().contains("groups as a tree"));
    // Among 4,096 node roots a GBA needs 6 chunks, 13 groups: three stages.
    let hier = by(&p, "hierarchical (gba among roots)");
    assert!(hier.declined.is_none(), "{hier:?}");
    assert_eq!(hier.parts[2].ns, 3.0 * (net.put_ns + net.device_ns));
    assert_eq!(selected(&p).unwrap().backend, "hierarchical (gba among roots)");
    // 128 ranks fit one switch group: one stage.
    let p = predict(Shape { nodes: 128, ppn: 1 }, &net, &m);
    assert_eq!(by(&p, "switch").parts[1].ns, net.put_ns + net.device_ns);
}

#[test]
fn profiles_and_durations_parse_and_bad_ones_say_what_to_use() {
    let m = Machine::builtin();
    assert_eq!(parse_ns("1.5us").unwrap(), 1500.0);
    assert_eq!(parse_ns("20").unwrap(), 20.0);
    assert!(parse_ns("fast").is_err());
    let c = Network::parse("custom:2us,10ns", &m).unwrap();
    assert_eq!((c.put_ns, c.gap_ns), (2000.0, 10.0));
    let e = Network::parse("warp", &m).unwrap_err();
    assert!(e.contains("ib-hdr") && e.contains("custom:PUT,GAP"), "{e}");
    for name in PROFILES {
        assert!(Network::parse(name, &m).is_ok());
    }
}

#[test]
fn a64fx_on_one_node_is_two_syncs_around_the_cmg_leaders_rounds() {
    let m = Machine::builtin();
    let net = Network::parse("tofu-d", &m).unwrap();
    let p = predict(Shape { nodes: 1, ppn: 48 }, &net, &m);
    let a = by(&p, "a64fx");
    assert!(a.declined.is_none());
    assert_eq!(a.parts[0].ns, 2.0 * net.a64fx_sync_ns);
    assert_eq!(a.parts[1].ns, 2.0 * m.flag_ns, "4 CMG leaders: 2 rounds");
    let one_cmg = predict(Shape { nodes: 1, ppn: 12 }, &net, &m);
    assert_eq!(by(&one_cmg, "a64fx").ns(), net.a64fx_sync_ns);
    assert!(by(&predict(Shape { nodes: 2, ppn: 48 }, &net, &m), "a64fx").declined.is_some());
}

#[test]
fn the_sweep_covers_1_to_4096_nodes() {
    let m = Machine::builtin();
    let net = Network::parse("ib-hdr", &m).unwrap();
    // How fast it is, is measured (docs/model.md), not asserted here.
    let (text, rows) = sweep(48, &net, &m);
    assert_eq!(text.lines().count(), 2 + 13);
    assert!(rows.iter().any(|r| r.ranks == 4096));
}

#[test]
fn calibration_round_trips_through_its_file() {
    let dir = std::env::temp_dir().join(format!("barrier-model-{}", std::process::id()));
    let path = dir.join("model-calibration");
    let m =
        Machine { flag_ns: 42.5, wake_ns: 3000.0, yield_ns: 800.0, device_ns: 70.0, cores: 2, source: "test".into() };
    m.save(&path).unwrap();
    assert_eq!(Machine::load(&path).unwrap(), m);
    std::fs::write(&path, "flag_ns = lots\n").unwrap();
    assert!(Machine::load(&path).unwrap_err().contains("not a positive number"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 40 item 9: a case that stayed off is judged only when its launches agree; launches far
/// apart (a machine whose speed moved) are printed and not judged.
#[test]
fn a_check_is_judged_only_on_launches_that_agree() {
    let case = |launches: &[f64]| {
        let best = launches.iter().copied().fold(f64::MAX, |b, m| {
            if (m / 200.0 - 1.0).abs() < (b / 200.0 - 1.0).abs() {
                m
            } else {
                b
            }
        });
        Check {
            backend: "dissemination",
            shape: Shape { nodes: 2, ppn: 1 },
            wire_ns: 200e3,
            predicted_ns: 200.0,
            measured_ns: best,
            attempts: launches.len(),
            launches: launches.to_vec(),
            others_cores: Some(0.02),
        }
    };
    assert_eq!(case(&[240.0]).verdict(), Verdict::Within);
    assert_eq!(case(&[367.0, 240.0]).verdict(), Verdict::Within, "the best launch is judged");
    assert_eq!(case(&[367.0, 360.0, 371.0, 365.0, 362.0]).verdict(), Verdict::Off, "a stable figure off by 80%");
    assert_eq!(case(&[140.0, 139.0, 141.0]).verdict(), Verdict::Off, "too fast counts as well");
    assert_eq!(case(&[367.0, 290.0, 420.0, 300.0, 510.0]).verdict(), Verdict::Unstable);
    // Off and stable, but other programs kept a core busy meanwhile: not judged.
    let busy = Check { others_cores: Some(1.0), ..case(&[399.8, 399.8]) };
    assert_eq!(busy.verdict(), Verdict::Busy);
    let quiet = Check { others_cores: Some(0.1), ..case(&[399.8, 399.8]) };
    assert_eq!(quiet.verdict(), Verdict::Off);
    let unread = Check { others_cores: None, ..case(&[399.8, 399.8]) };
    assert_eq!(unread.verdict(), Verdict::Off, "without /proc/stat a stable figure is judged");
}
