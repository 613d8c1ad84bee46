use meshhub_proto::upward::{GatewayAddress, ServiceExport, ServicePort};

use super::*;

/// An export the hub first saw `seen`-th (and that its agent says was
/// created at `seen`).
fn export(seen: i64, ports: &[(&str, u32)], gw: &str) -> Contribution {
    let created = seen;
    let export = ServiceExport {
        namespace: "shop".into(),
        name: "cart".into(),
        r#type: "ClusterSetIP".into(),
        ports: ports
            .iter()
            .map(|(n, p)| ServicePort {
                name: (*n).into(),
                port: *p,
                protocol: "TCP".into(),
                app_protocol: String::new(),
            })
            .collect(),
        gateways: vec![GatewayAddress {
            address: gw.into(),
            port: 15443,
        }],
        created: Some(prost_types::Timestamp {
            seconds: created,
            nanos: 0,
        }),
        problem: String::new(),
    };
    Contribution {
        export,
        first_seen: FirstSeen {
            seq: u64::try_from(seen).unwrap(),
            at: std::time::SystemTime::UNIX_EPOCH,
        },
    }
}

fn clusters() -> Vec<String> {
    ["east", "west", "north"].map(str::to_owned).to_vec()
}

#[test]
fn a_sole_exporter_does_not_consume_its_own_service() {
    let west = export(1, &[("http", 80)], "192.0.2.1");
    let a = aggregate("shop", "cart", &[("west", &west)], &clusters());
    let o = a.object.expect("generated");
    assert_eq!(o.metadata.annotations[CLUSTERS_ANNOTATION], "east,north");
    assert_eq!(
        o.metadata.annotations[GENERATED_FROM],
        "ServiceExport west/shop/cart"
    );
    let spec = &o.content["spec"];
    assert_eq!(spec["hosts"][0], "cart.shop.svc.clusterset.local");
    assert_eq!(spec["resolution"], "STATIC");
    assert_eq!(spec["ports"][0]["protocol"], "HTTP");
    assert_eq!(spec["endpoints"][0]["address"], "192.0.2.1");
    assert_eq!(spec["endpoints"][0]["ports"]["http"], 15443);
    assert!(a.conflicts.is_empty());
    // Only exporter, only cluster: nobody consumes it.
    let a = aggregate("shop", "cart", &[("west", &west)], &["west".to_owned()]);
    assert!(a.object.is_none());
}

#[test]
fn ports_merge_and_the_oldest_export_wins_a_conflict() {
    let west = export(1, &[("http", 80)], "192.0.2.1");
    let east = export(2, &[("grpc", 80), ("metrics", 9090)], "gw.east.example");
    let a = aggregate(
        "shop",
        "cart",
        &[("east", &east), ("west", &west)],
        &clusters(),
    );
    assert!(a.conflicts["east"].contains("port 80"), "{:?}", a.conflicts);
    assert!(!a.conflicts.contains_key("west"));
    let o = a.object.unwrap();
    let spec = &o.content["spec"];
    assert_eq!(spec["ports"].as_array().unwrap().len(), 2, "{spec}");
    assert_eq!(spec["ports"][0]["name"], "http", "the oldest's name");
    assert_eq!(spec["resolution"], "DNS", "a host name gateway");
    assert_eq!(spec["endpoints"].as_array().unwrap().len(), 2);
    // Two exporters: every cluster consumes it.
    assert_eq!(
        o.metadata.annotations[CLUSTERS_ANNOTATION],
        "east,west,north"
    );
}

#[test]
fn an_export_with_a_problem_is_left_out() {
    let mut west = export(1, &[("http", 80)], "192.0.2.1");
    west.export.problem = "ServiceNotFound".into();
    assert!(
        aggregate("shop", "cart", &[("west", &west)], &clusters())
            .object
            .is_none()
    );
}

#[test]
fn the_hub_orders_by_first_sight_not_by_the_agents_created() {
    // West was seen first; east claims an export created in 1970.
    let west = export(1, &[("http", 80)], "192.0.2.1");
    let mut east = export(2, &[("grpc", 80)], "192.0.2.2");
    east.export.created = Some(prost_types::Timestamp {
        seconds: 0,
        nanos: 0,
    });
    let a = aggregate(
        "shop",
        "cart",
        &[("east", &east), ("west", &west)],
        &clusters(),
    );
    assert!(a.conflicts.contains_key("east"), "{:?}", a.conflicts);
    let o = a.object.unwrap();
    assert_eq!(o.content["spec"]["ports"][0]["name"], "http");
}

#[test]
fn a_newer_export_reusing_a_port_name_for_another_number_is_a_conflict_not_a_broken_entry() {
    let west = export(1, &[("http", 80)], "192.0.2.1");
    // east names 8080 `http` too; north's unnamed 9090 would be
    // `port-9090`, the name west2 gives its port 9091.
    let east = export(2, &[("http", 8080)], "192.0.2.2");
    let a = aggregate(
        "shop",
        "cart",
        &[("east", &east), ("west", &west)],
        &clusters(),
    );
    assert!(
        a.conflicts["east"].contains("the name of port 80"),
        "{:?}",
        a.conflicts
    );
    let spec = &a.object.expect("the entry stands").content["spec"];
    let ports = spec["ports"].as_array().unwrap();
    assert_eq!(ports.len(), 1, "{spec}");
    assert_eq!(ports[0]["number"], 80);

    let named = export(1, &[("port-9090", 9091)], "192.0.2.1");
    let unnamed = export(2, &[("", 9090)], "192.0.2.3");
    let a = aggregate(
        "shop",
        "cart",
        &[("north", &unnamed), ("west", &named)],
        &clusters(),
    );
    assert!(a.conflicts.contains_key("north"), "{:?}", a.conflicts);
    let spec = &a.object.unwrap().content["spec"];
    assert_eq!(spec["ports"].as_array().unwrap().len(), 1, "{spec}");
}
