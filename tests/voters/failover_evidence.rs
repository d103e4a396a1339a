//! Failover evidence: a single master with an async replica loses a lock on failover; five
//! independent masters do not, until the lost keys reach f ≥ q − N + k.

use quorumlock_testkit::failover::{independent_masters_failover, single_master_failover};

#[tokio::test(flavor = "multi_thread")]
async fn a_single_master_with_an_async_replica_hands_the_lock_to_a_second_holder_on_failover() {
    let report = single_master_failover().await.unwrap();
    println!("{report}");
    let case = &report.cases[0];
    assert!(case.second_holder, "{case}");
    assert_eq!(case.overlaps, 1, "the checker sees both holders: {case}");
    assert!(case.as_predicted(), "{case}");
}

#[tokio::test(flavor = "multi_thread")]
async fn five_masters_keep_the_lock_through_two_failovers_but_not_a_lock_held_on_only_three() {
    let report = independent_masters_failover().await.unwrap();
    println!("{report}");
    let [one, two, boundary] = &report.cases[..] else {
        panic!("expected three cases:\n{report}");
    };
    for case in [one, two] {
        assert_eq!((case.locked, case.overlaps), (5, 0), "{case}");
        assert!(!case.second_holder, "{case}");
        assert!(case.second_outcome.contains("refused"), "{case}");
    }
    assert_eq!((one.failed_over, two.failed_over), (1, 2));
    assert_eq!(
        (boundary.locked, boundary.failed_over),
        (3, 1),
        "{boundary}"
    );
    assert!(boundary.second_holder, "{boundary}");
    assert_eq!(boundary.overlaps, 1, "{boundary}");
    assert!(report.as_predicted(), "{report}");
}
