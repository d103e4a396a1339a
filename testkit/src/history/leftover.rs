//! The leak checker: after a lock's last hold is released, no master that confirmed the release
//! still holds the lock for its holder.
//!
//! A release returns once a quorum of masters has confirmed it; the others may still hold the
//! key until their own release lands or the key expires. So right after the release, at most
//! `masters − confirmed` masters may still hold the key with the holder's token. More means a
//! master confirmed a release yet kept the key — as a per-master reentrancy counter does when one
//! master missed an increment's matching decrement: its count stays above zero after the holder
//! released every hold.

use std::time::Instant;

use super::{TokenFingerprint, Violation};

/// What the masters held for a lock just after the release of its last hold, as an auditor read
/// them directly.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReleaseAudit {
    /// The holder.
    pub client: usize,
    /// The resource.
    pub resource: String,
    /// The holder's token (or owner id) fingerprint.
    pub token: TokenFingerprint,
    /// When the release returned.
    pub released: Instant,
    /// How many masters there are.
    pub masters: usize,
    /// How many answered the release (deleted the key, or found it gone).
    pub confirmed: usize,
    /// The masters (by index) that still held the key for this holder when audited.
    pub holding: Vec<usize>,
}

impl ReleaseAudit {
    /// The audit of `client`'s release of `resource` under `token`, returned at `released`
    /// after `confirmed` of `masters` masters answered, the masters in `holding` still holding
    /// it for `token` when read.
    pub fn new(
        client: usize,
        resource: &str,
        token: &str,
        released: Instant,
        (confirmed, masters): (usize, usize),
        holding: Vec<usize>,
    ) -> Self {
        ReleaseAudit {
            client,
            resource: resource.to_owned(),
            token: TokenFingerprint::of(token),
            released,
            masters,
            confirmed,
            holding,
        }
    }
}

/// Checks every audit: no more masters still hold a released lock for its holder than did not
/// confirm the release (`masters − confirmed`).
///
/// Returns one [`Violation::LeftBehind`] per audit that fails.
///
/// ```
/// use std::time::Instant;
/// use quorumlock_testkit::history::{check_left_behind, ReleaseAudit};
///
/// let now = Instant::now();
/// // Three of five confirmed: two may still hold the key for a while.
/// let fine = ReleaseAudit::new(0, "ledger", "token-a", now, (3, 5), vec![1, 4]);
/// // All three confirmed, yet one still holds it.
/// let leaked = ReleaseAudit::new(1, "ledger", "token-b", now, (3, 3), vec![2]);
/// assert_eq!(check_left_behind(&[fine.clone()]), vec![]);
/// assert_eq!(check_left_behind(&[fine, leaked]).len(), 1);
/// ```
pub fn check_left_behind(audits: &[ReleaseAudit]) -> Vec<Violation> {
    audits
        .iter()
        .filter(|a| a.holding.len() > a.masters.saturating_sub(a.confirmed))
        .map(|a| Violation::LeftBehind { audit: a.clone() })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masters_that_did_not_answer_may_still_hold_the_key() {
        let now = Instant::now();
        let audits = [
            ReleaseAudit::new(0, "r", "t0", now, (5, 5), vec![]),
            ReleaseAudit::new(1, "r", "t1", now, (3, 5), vec![0, 4]),
        ];
        assert_eq!(check_left_behind(&audits), vec![]);
    }

    #[test]
    fn a_key_kept_by_a_master_that_confirmed_is_reported() {
        let now = Instant::now();
        let audits = [ReleaseAudit::new(
            3,
            "ledger",
            "secret-t",
            now,
            (4, 5),
            vec![1, 2],
        )];
        let violations = check_left_behind(&audits);
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert_eq!(violations[0].resource(), "ledger");
        assert_eq!(violations[0].window(), Some((now, Some(now))));
        let text = violations[0].to_string();
        assert!(
            text.contains("masters [1, 2] still held \"ledger\" for client 3"),
            "{text}"
        );
        assert!(text.contains("4 of 5 masters confirmed"), "{text}");
        assert!(!text.contains("secret"), "a token was printed: {text}");
    }
}
