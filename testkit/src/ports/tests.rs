use std::collections::BTreeSet;

use super::*;

#[test]
fn ports_are_distinct_and_below_the_kernels_ephemeral_range() {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok();
    let range = choose_range(text.as_deref());
    let ephemeral = text
        .as_deref()
        .and_then(|t| t.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(EPHEMERAL_START);
    let ports: Vec<u16> = (0..500).map(|_| free_port()).collect();
    let distinct: BTreeSet<u16> = ports.iter().copied().collect();
    assert_eq!(distinct.len(), ports.len(), "{ports:?}");
    for p in ports {
        assert!(range.contains(&u32::from(p)), "{p} outside {range:?}");
        if range.end <= ephemeral {
            assert!(u32::from(p) < ephemeral, "{p} in the ephemeral range");
        }
    }
}

#[test]
fn a_port_someone_holds_is_skipped() {
    let range = FLOOR..EPHEMERAL_START;
    // A port of the range held by this test, and the walk about to reach it.
    let (held, _listener) = (range.clone())
        .find_map(|p| {
            let p = u16::try_from(p).unwrap();
            TcpListener::bind((Ipv4Addr::LOCALHOST, p))
                .ok()
                .map(|l| (p, l))
        })
        .expect("a free port");
    let ports = Ports::new(range.clone(), u32::from(held) - range.start);
    let next = ports.next();
    assert_ne!(next, held);
    assert!(next > held, "{next} before {held}: the walk went back");
    TcpListener::bind((Ipv4Addr::LOCALHOST, next)).expect("the port handed out is free");
}

#[test]
fn the_range_avoids_the_kernels() {
    // Linux's default: everything from the floor to 32768.
    assert_eq!(choose_range(Some("32768\t60999\n")), 10_000..32768);
    assert_eq!(choose_range(None), 10_000..32768);
    assert_eq!(choose_range(Some("garbage")), 10_000..32768);
    // Too little room below: above the end instead.
    assert_eq!(choose_range(Some("10500 60999")), 61000..65536);
    // No room anywhere: everything from the floor (only retries help).
    assert_eq!(choose_range(Some("1024 65000")), 10_000..65536);
}

#[test]
fn processes_started_one_after_another_start_far_apart() {
    let len = EPHEMERAL_START - FLOOR;
    let mut starts: Vec<u32> = (40_000..40_032).map(|pid| spread(pid, len)).collect();
    starts.sort_unstable();
    let gaps = starts.windows(2).map(|w| w[1] - w[0]);
    let wrap = starts[0] + len - starts[starts.len() - 1];
    let closest = gaps.chain([wrap]).min().unwrap();
    // 32 processes spread evenly would be len/32 ≈ 711 apart.
    assert!(closest >= 200, "{closest}: {starts:?}");
    assert!(starts.iter().all(|&s| s < len));
}
