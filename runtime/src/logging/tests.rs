use super::*;

#[test]
fn module_directives_replace_earlier_ones_for_the_same_module() {
    let modules = BTreeMap::from([("a::b".to_owned(), "trace".to_owned())]);
    assert_eq!(
        with_modules("info, a::b=warn ,c=debug", &modules).unwrap(),
        "info,c=debug,a::b=trace"
    );
    let empty = BTreeMap::from([("a".to_owned(), String::new())]);
    assert!(with_modules("info", &empty).is_err());
}
