use super::*;

#[test]
fn failures_are_summed_up_in_one_nack_message() {
    let failures: Vec<String> = (0..8)
        .map(|i| format!("VirtualService bookinfo/v{i}: no"))
        .collect();
    let s = summary(&failures);
    assert!(
        s.starts_with("applying to Kubernetes failed: VirtualService bookinfo/v0: no; "),
        "{s}"
    );
    assert!(s.ends_with("; and 3 more"), "{s}");
    assert!(!s.contains("v5"), "{s}");
}
