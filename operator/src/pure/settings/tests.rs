use super::*;

#[test]
fn protected_service_accounts_parse_or_name_what_is_wrong() {
    assert_eq!(
        "ns/sa".parse::<ProtectedServiceAccount>(),
        Ok(ProtectedServiceAccount {
            namespace: Some("ns".into()),
            name: "sa".into()
        })
    );
    assert_eq!(
        "sa".parse::<ProtectedServiceAccount>().unwrap().namespace,
        None
    );
    for bad in ["", "ns/", "/sa", "a/b/c"] {
        let e = bad.parse::<ProtectedServiceAccount>().unwrap_err();
        assert!(e.contains("expected <namespace>/<name>"), "{e}");
    }
}
