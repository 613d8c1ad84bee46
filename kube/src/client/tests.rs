use super::*;

/// A kubeconfig with contexts `east` (current) and `west`.
fn kubeconfig(dir: &Path) -> PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: east\n  cluster: {server: 'http://127.0.0.1:1'}\n- name: west\n  cluster: {server: 'http://127.0.0.1:2'}\nusers:\n- name: u\n  user: {token: t}\ncontexts:\n- name: east\n  context: {cluster: east, user: u}\n- name: west\n  context: {cluster: west, user: u}\ncurrent-context: east\n",
    )
    .unwrap();
    path
}

#[test]
fn configured_connections_resolve_relative_files_and_refuse_typos() {
    let dir = tempfile::tempdir().unwrap();
    let file = kubeconfig(dir.path());
    let c = Connection::from_config(Some("kubeconfig".into()), Some("west".into()), dir.path())
        .unwrap();
    assert_eq!(c.kubeconfig.as_deref(), Some(file.as_path()));
    assert_eq!(c.context.as_deref(), Some("west"));
    let absolute = Connection::from_config(Some(file.clone()), None, Path::new("/elsewhere"));
    assert_eq!(absolute.unwrap().kubeconfig, Some(file));
    assert_eq!(
        Connection::from_config(None, None, dir.path()).unwrap(),
        Connection::default()
    );

    let missing = Connection::from_config(Some("nope".into()), None, dir.path()).unwrap_err();
    assert_eq!(missing.field(), "kubeconfig");
    assert_eq!(
        missing.to_string(),
        format!("{} is not a file", dir.path().join("nope").display())
    );
    let empty = Connection::from_config(None, Some(" ".into()), dir.path()).unwrap_err();
    assert_eq!(empty, ConnectionInvalid::EmptyContext);
    assert_eq!(empty.field(), "context");
}

#[tokio::test]
async fn a_connection_picks_its_context_and_an_unknown_context_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = kubeconfig(dir.path());
    let current = Connection {
        kubeconfig: Some(file.clone()),
        context: None,
    };
    assert_eq!(
        current.config().await.unwrap().cluster_url.to_string(),
        "http://127.0.0.1:1/"
    );
    let west = Connection {
        kubeconfig: Some(file.clone()),
        context: Some("west".to_owned()),
    };
    assert_eq!(
        west.config().await.unwrap().cluster_url.to_string(),
        "http://127.0.0.1:2/"
    );
    let unknown = Connection {
        kubeconfig: Some(file),
        context: Some("north".to_owned()),
    };
    assert!(matches!(
        unknown.client().await,
        Err(ClientError::Kubeconfig(_))
    ));
}

#[tokio::test]
async fn equal_connections_share_one_client() {
    let dir = tempfile::tempdir().unwrap();
    let file = kubeconfig(dir.path());
    let east = Connection {
        kubeconfig: Some(file.clone()),
        context: None,
    };
    let west = Connection {
        kubeconfig: Some(file),
        context: Some("west".to_owned()),
    };
    let mut clients = Clients::default();
    assert!(clients.is_empty());
    clients.get(&east).await.unwrap();
    clients.get(&east.clone()).await.unwrap();
    assert_eq!(clients.len(), 1);
    clients.get(&west).await.unwrap();
    assert_eq!(clients.len(), 2);
    let broken = Connection {
        context: Some("north".to_owned()),
        ..east
    };
    assert!(clients.get(&broken).await.is_err());
    assert_eq!(clients.len(), 2, "a failed client is not kept");
}
