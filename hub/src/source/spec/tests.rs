use crate::config::testing::err;

#[test]
fn sources_are_checked() {
    let e = err("clusters: []\n");
    assert!(e.contains("sources: at least one source"), "{e}");
    let e = err("sources:\n  - file: {path: missing}\n");
    assert!(
        e.contains("sources[0].file.path") && e.contains("not a directory"),
        "{e}"
    );
    let e = err("sources:\n  - name: x\n");
    assert!(e.contains("sources[0]"), "{e}");
    let e = err(
        "sources:\n  - {name: a, file: {path: objects}}\n  - {name: a, file: {path: objects}}\n",
    );
    assert!(e.contains("sources[1].name: duplicate source name"), "{e}");
}
