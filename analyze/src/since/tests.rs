//! The since table's parser, index and walk.

use serde_json::json;

use super::*;

#[test]
fn the_shipped_table_parses() {
    let rows = parse_table(TABLE_TEXT).unwrap();
    assert!(rows.len() > 50, "{}", rows.len());
    assert!(
        rows.iter()
            .any(|r| r.kind == "TrafficExtension" && r.path.is_empty())
    );
}

#[test]
fn bad_lines_are_named() {
    let e = parse_table("# c\n1.30\tX\n").unwrap_err();
    assert_eq!(e.line, 2);
    assert!(
        parse_table("1.20\tX\tspec.a\n").is_err(),
        "older than the oldest"
    );
    assert!(parse_table("1.30\tX\tmetadata.a\n").is_err());
}

#[test]
fn versions_parse_as_istio_writes_them() {
    let v = IstioVersion::parse("1.28.3").unwrap();
    assert_eq!((v.major, v.minor, v.patch), (1, 28, Some(3)));
    assert_eq!(IstioVersion::parse("v1.23").unwrap().to_string(), "1.23");
    assert_eq!(
        IstioVersion::parse("1.28.3-distroless")
            .unwrap()
            .to_string(),
        "1.28.3"
    );
    assert!(
        IstioVersion::parse("65536.65536.65536")
            .unwrap()
            .is_placeholder()
    );
    for bad in ["", "1", "x.y", "1.x", "1.2.3.4"] {
        assert!(IstioVersion::parse(bad).is_err(), "{bad}");
    }
    let v = IstioVersion::parse("1.28.3").unwrap();
    assert!(v.knows(28) && !v.knows(29));
}

#[test]
fn an_object_needs_what_it_uses() {
    let spec = json!({
        "host": "reviews",
        "trafficPolicy": {"connectionPool": {"http": {"http2KeepAlive": {"interval": "1s"}}}},
        "subsets": [{"name": "v1", "trafficPolicy": {"retryBudget": {"percent": 10}}}]
    });
    let n = needs("DestinationRule", &spec);
    let got: Vec<(u32, &str)> = n.iter().map(|n| (n.since, n.path.as_str())).collect();
    assert!(
        got.contains(&(31, "spec.trafficPolicy.connectionPool.http.http2KeepAlive")),
        "{got:?}"
    );
    assert!(
        got.contains(&(27, "spec.subsets[0].trafficPolicy.retryBudget")),
        "{got:?}"
    );
    assert!(needs("DestinationRule", &json!({"host": "r"})).is_empty());
}

#[test]
fn a_crd_knows_up_to_the_first_row_it_lacks() {
    let crd = json!({"spec": {"names": {"kind": "DestinationRule"}, "versions": [{
        "served": true,
        "schema": {"openAPIV3Schema": {"properties": {"spec": {"properties": {
            "host": {"type": "string"},
            "trafficPolicy": {"properties": {"loadBalancer": {"properties": {
                "simple": {"enum": ["ROUND_ROBIN"]}}}}}
        }}}}}
    }]}});
    let (kind, paths) = crd_paths(&crd).unwrap();
    assert_eq!(kind, "DestinationRule");
    assert!(paths.contains("spec.trafficPolicy.loadBalancer.simple=ROUND_ROBIN"));
    // It lacks `warmup` (1.24): it knows 1.23.
    assert_eq!(crd_knows(&kind, &paths), 23);
    // A kind the table has nothing new for is known up to the newest.
    assert_eq!(
        crd_knows("PeerAuthentication", &BTreeSet::new()),
        newest_minor()
    );
    assert!(crd_paths(&json!({"kind": "x"})).is_none());
}

#[test]
fn enum_values_kinds_and_map_values_are_needs() {
    let ef = json!({"configPatches": [{"applyTo": "LISTENER", "match": {"context": "WAYPOINT"}}]});
    let n = needs("EnvoyFilter", &ef);
    assert_eq!(n.len(), 1, "{n:?}");
    assert_eq!(n[0].path, "spec.configPatches[0].match.context");
    assert_eq!(n[0].value.as_deref(), Some("WAYPOINT"));
    assert!(
        needs(
            "EnvoyFilter",
            &json!({"configPatches": [{"match": {"context": "SIDECAR_INBOUND"}}]})
        )
        .is_empty()
    );

    let te = needs("TrafficExtension", &json!({}));
    assert_eq!(te.len(), 1);
    assert_eq!((te[0].since, te[0].path.as_str()), (30, ""));

    let t = json!({"tracing": [{"customTags": {"my-tag": {"formatter": {"value": "x"}}}}]});
    let n = needs("Telemetry", &t);
    assert_eq!(n.len(), 1, "{n:?}");
    assert_eq!(n[0].path, "spec.tracing[0].customTags.my-tag.formatter");
}

#[test]
fn value_rows_parse_and_print_as_written() {
    let rows = parse_table(
        "1.31\tX\tspec.a in (0,1)\n1.30\tX\tspec.k in {a.b, c}\n1.30\tX\tspec.n in [2,)\n",
    )
    .unwrap();
    assert_eq!(rows[0].to_string(), "1.31\tX\tspec.a in (0,1)");
    assert_eq!(rows[1].to_string(), "1.30\tX\tspec.k in {a.b,c}");
    assert_eq!(rows[2].to_string(), "1.30\tX\tspec.n in [2,)");
    assert!(rows.iter().all(|r| !r.in_crds()));
    for bad in [
        "1.31\tX\tspec.a in 0..1",
        "1.31\tX\tspec.a in (1,0)",
        "1.31\tX\tspec.a in (1,1]",
        "1.31\tX\tspec.a in (,)",
        "1.31\tX\tspec.a in (x,1)",
        "1.31\tX\tspec.a in {a,,b}",
        "1.31\tX\t in {a}",
    ] {
        assert!(parse_table(bad).is_err(), "{bad}");
    }
    assert!(parse_table("1.31\tX\tspec.a in [1,1]").is_ok());
}

#[test]
fn a_value_in_a_value_row_is_a_need() {
    let dr = |aggression: Value| {
        json!({"host": "r", "subsets": [{"name": "v1", "trafficPolicy": {"portLevelSettings": [
            {"loadBalancer": {"warmup": {"duration": "60s", "aggression": aggression}}}]}}]})
    };
    // The values only (the field `warmup` itself is a need too: 1.24).
    let values = |spec: &Value| -> Vec<Need> {
        needs("DestinationRule", spec)
            .into_iter()
            .filter(|n| n.within.is_some())
            .collect()
    };
    let n = values(&dr(json!(0.5)));
    assert_eq!(n.len(), 1, "{n:?}");
    assert_eq!(
        n[0],
        Need {
            since: 31,
            path:
                "spec.subsets[0].trafficPolicy.portLevelSettings[0].loadBalancer.warmup.aggression"
                    .into(),
            value: Some("0.5".into()),
            within: Some("(0,1)".into()),
        }
    );
    // A wrapper's value counts; the bounds are open.
    assert_eq!(values(&dr(json!({"value": 0.25}))).len(), 1);
    for outside in [json!(0), json!(1), json!(2.5), json!(-1), json!("0.5")] {
        assert!(values(&dr(outside.clone())).is_empty(), "{outside}");
    }

    let ap = json!({"rules": [{"when": [
        {"key": "source.namespace", "values": ["a"]},
        {"key": "source.trustDomain", "values": ["td"]}]}]});
    let n = needs("AuthorizationPolicy", &ap);
    assert_eq!(n.len(), 1, "{n:?}");
    assert_eq!(n[0].path, "spec.rules[0].when[1].key");
    assert_eq!(n[0].value.as_deref(), Some("\"source.trustDomain\""));
    assert_eq!(n[0].since, 30);
}

#[test]
fn value_rows_are_no_crd_row() {
    // A CRD lacking nothing but a value row's values knows the newest.
    let rows = parse_table(TABLE_TEXT).unwrap();
    let paths: BTreeSet<String> = rows
        .iter()
        .filter(|r| r.kind == "DestinationRule" && r.in_crds())
        .map(|r| match &r.what {
            What::Enum(v) => format!("{}={v}", r.path),
            _ => r.path.clone(),
        })
        .collect();
    assert_eq!(crd_knows("DestinationRule", &paths), newest_minor());
}
