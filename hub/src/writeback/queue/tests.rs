use super::*;

fn at(secs: u64) -> Instant {
    // Tests compare offsets from one base.
    thread_local!(static BASE: Instant = Instant::now());
    BASE.with(|b| *b + Duration::from_secs(secs))
}

#[test]
fn a_newer_value_replaces_a_queued_one_and_keys_go_in_order() {
    let mut q = Queue::default();
    q.push("a", 1);
    q.push("b", 1);
    q.push("a", 2);
    assert_eq!(q.len(), 2);
    assert_eq!(q.pop(at(0)), Some(("a", 2)));
    assert_eq!(q.pop(at(0)), Some(("b", 1)));
    assert_eq!(q.pop(at(0)), None);
    assert_eq!(q.flying(), 2);
}

#[test]
fn removed_keys_are_not_written() {
    let mut q = Queue::default();
    q.push("a", 1);
    q.push("b", 1);
    q.remove(&"a");
    assert!(q.has_ready(at(0)));
    assert_eq!(q.pop(at(0)), Some(("b", 1)));
    assert!(!q.has_ready(at(0)));
    assert!(q.is_empty());
}

#[test]
fn one_write_per_key_in_flight_and_a_newer_value_follows_it() {
    let mut q = Queue::default();
    q.push("a", 1);
    assert_eq!(q.pop(at(0)), Some(("a", 1)));
    q.push("a", 2);
    assert_eq!(q.waiting(&"a"), Some(&2));
    assert_eq!(q.in_flight(&"a"), Some(&1));
    assert!(!q.has_ready(at(0)), "waits for the write in flight");
    assert_eq!(q.pop(at(0)), None);
    q.done(&"a", true, at(0));
    assert_eq!(q.pop(at(0)), Some(("a", 2)));
    q.done(&"a", true, at(0));
    assert!(q.is_empty());
    assert_eq!(q.flying(), 0);
}

#[test]
fn a_failed_write_goes_again_after_a_growing_delay() {
    let mut q = Queue::default();
    q.push("a", 1);
    assert_eq!(q.pop(at(0)), Some(("a", 1)));
    q.done(&"a", false, at(0));
    assert_eq!(q.len(), 1);
    assert!(!q.has_ready(at(0)));
    assert_eq!(q.next_due(), Some(at(1)));
    assert_eq!(q.pop(at(1)), Some(("a", 1)));
    q.done(&"a", false, at(1));
    assert_eq!(q.next_due(), Some(at(3)), "2 s after the second failure");
    // A newer value keeps the delay of its key.
    q.push("a", 2);
    assert!(!q.has_ready(at(2)));
    assert_eq!(q.pop(at(3)), Some(("a", 2)));
    q.done(&"a", true, at(3));
    assert!(q.is_empty());
}

#[test]
fn retry_delays_grow_to_a_cap() {
    assert_eq!(retry_delay(1), Duration::from_secs(1));
    assert_eq!(retry_delay(2), Duration::from_secs(2));
    assert_eq!(retry_delay(4), Duration::from_secs(8));
    assert_eq!(retry_delay(30), RETRY_MAX);
}

#[test]
fn clear_drops_what_waits() {
    let mut q = Queue::default();
    q.push("a", 1);
    q.push("b", 1);
    assert_eq!(q.pop(at(0)), Some(("a", 1)));
    q.done(&"a", false, at(0));
    q.clear();
    assert!(q.is_empty());
    assert!(!q.has_ready(at(5)));
    assert_eq!(q.next_due(), None);
}

#[test]
fn a_removed_delayed_write_sets_no_timer() {
    let mut q = Queue::default();
    q.push("a", 1);
    assert_eq!(q.pop(at(0)), Some(("a", 1)));
    q.done(&"a", false, at(0));
    assert_eq!(q.next_due(), Some(at(1)));
    q.remove(&"a");
    assert_eq!(q.next_due(), None, "nothing waits for that time any more");
    assert_eq!(q.pop(at(5)), None);
}
