use super::*;

const GO: &str = "E1127 run.go:72] \"command failed\" err=\"failed to listen on 127.0.0.1:42757: listen tcp 127.0.0.1:42757: bind: address already in use\"\n";
const RUST: &str =
    "meshhub-sink-agent: error: sink port 127.0.0.1:20001: Address already in use (os error 98)\n";

#[test]
fn a_lost_port_is_told_from_other_exits() {
    assert!(port_taken(GO));
    assert!(port_taken(RUST));
    assert!(!port_taken("panic: no kubeconfig\n"));
    assert!(!port_taken(""));
}

#[test]
fn lost_ports_are_retried_a_bounded_number_of_times() {
    let mut a = PortAttempts::new("etcd");
    for _ in 1..PORT_ATTEMPTS {
        a.again(&"exit status: 1", GO).expect("another attempt");
    }
    let last = a.again(&"exit status: 1", GO).unwrap_err();
    assert!(
        last.contains(&format!("{PORT_ATTEMPTS} times in a row")),
        "{last}"
    );
    assert!(last.contains("bind: address already in use"), "{last}");
}

#[test]
fn other_exits_and_fixed_ports_are_not_retried() {
    let why = PortAttempts::new("etcd")
        .again(&"exit status: 2", "panic: bad flag\n")
        .unwrap_err();
    assert!(
        why.contains("etcd exited (exit status: 2) before it was ready"),
        "{why}"
    );
    assert!(why.contains("panic: bad flag"), "{why}");
    let why = PortAttempts::fixed("agent-east", "a restart keeps its addresses")
        .again(&"exit status: 1", RUST)
        .unwrap_err();
    assert!(
        why.contains("cannot move (a restart keeps its addresses)"),
        "{why}"
    );
}

#[test]
fn listening_is_read_from_the_process_own_sockets() {
    let me = std::process::id();
    // A port off the kernel's range: once dropped, no other test thread's
    // bind(0) can take it back before the last check.
    let listener = std::net::TcpListener::bind(meshhub_testkit::ports::free_addr()).unwrap();
    let port = listener.local_addr().unwrap().port();
    assert!(listens_on(me, port));
    // A connection's local port is not a listening one.
    let conn = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    assert!(!listens_on(me, conn.local_addr().unwrap().port()));
    drop((conn, listener));
    assert!(!listens_on(me, port));
    // Another process's listener is not this one's.
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    assert!(!listens_on(1, other.local_addr().unwrap().port()));
}
