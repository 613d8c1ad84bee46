use bytes::Bytes;

use super::*;
use crate::history::{StoredCollection, StoredResource};

/// A version of group `east` with `n` resources of `size` bytes each
/// (random: gzip can't shrink them).
fn exported(n: usize, size: usize) -> Exported {
    let mut bodies = BTreeMap::new();
    let mut resources = Vec::new();
    for i in 0..n {
        let body: Vec<u8> = (0..size).map(|_| rand::random::<u8>()).collect();
        let body = Bytes::from(body);
        let digest = body_digest(&body);
        resources.push(StoredResource {
            name: format!("bookinfo/r{i}"),
            version: format!("v{i}"),
            digest: digest.clone(),
        });
        bodies.insert(digest, body);
    }
    let version = StoredVersion {
        cluster: "east".into(),
        seq: 7,
        id: "0123456789ab".into(),
        time: "2026-11-27T23:00:00Z".into(),
        origins: Vec::new(),
        more_origins: 0,
        resources: n,
        collections: BTreeMap::from([(
            "istio/networking/v1alpha3/virtualservices".to_owned(),
            StoredCollection {
                version: "c1".into(),
                resources,
            },
        )]),
        held_back: Vec::new(),
        from_archive: false,
    };
    Exported { version, bodies }
}

#[test]
fn a_version_reads_back_as_written_across_chunks() {
    // About 2.3 MB of incompressible bodies: three chunks.
    let e = exported(30, 80_000);
    let blob = encode(&e).unwrap();
    let cms = chunks("east", "0123456789ab", &blob).unwrap();
    assert_eq!(cms.len(), blob.len().div_ceil(CHUNK));
    assert!(cms.len() >= 3, "{} chunks", cms.len());
    for (i, cm) in cms.iter().enumerate() {
        assert_eq!(cm.immutable, Some(true));
        assert_eq!(
            cm.metadata.name.as_deref(),
            Some(format!("meshhub-archive-east-0123456789ab-{i}").as_str())
        );
        let labels = cm.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[GROUP_LABEL], "east");
        assert_eq!(labels[VERSION_LABEL], "0123456789ab");
        let data = &cm.binary_data.as_ref().unwrap()[DATA_KEY].0;
        assert!(data.len() <= CHUNK);
    }
    // The API lists them in any order.
    let mut listed = cms.clone();
    listed.reverse();
    let back = decode(&join(listed).unwrap(), "east", "0123456789ab").unwrap();
    assert_eq!(back, e);
}

#[test]
fn a_missing_or_foreign_chunk_is_incomplete_not_imported() {
    let e = exported(30, 80_000);
    let blob = encode(&e).unwrap();
    let mut cms = chunks("east", "0123456789ab", &blob).unwrap();
    let last = cms.pop().unwrap();
    assert!(matches!(
        join(cms.clone()),
        Err(ArchiveError::Incomplete(_))
    ));
    // A chunk of another write of the same version (another SHA-256).
    let other = encode(&exported(30, 80_000)).unwrap();
    let foreign = chunks("east", "0123456789ab", &other)
        .unwrap()
        .pop()
        .unwrap();
    cms.push(foreign);
    assert!(matches!(
        join(cms.clone()),
        Err(ArchiveError::Incomplete(_))
    ));
    cms.pop();
    cms.push(last);
    assert!(join(cms).is_ok());
    assert!(matches!(join(Vec::new()), Err(ArchiveError::Incomplete(_))));
}

#[test]
fn damaged_bytes_are_refused_with_the_reason() {
    let e = exported(3, 100);
    let blob = encode(&e).unwrap();
    // A flipped byte in a chunk: its SHA-256 no longer matches.
    let mut cms = chunks("east", "0123456789ab", &blob).unwrap();
    let data = &mut cms[0]
        .binary_data
        .as_mut()
        .unwrap()
        .get_mut(DATA_KEY)
        .unwrap()
        .0;
    let at = data.len() / 2;
    data[at] ^= 0xff;
    assert!(matches!(join(cms), Err(ArchiveError::Damaged(m)) if m.contains("SHA-256")));
    // Not gzip.
    assert!(
        matches!(decode(b"not gzip", "east", "0123456789ab"), Err(ArchiveError::Damaged(m)) if m.contains("gzip"))
    );
    // Another version than the one asked for.
    assert!(
        matches!(decode(&blob, "east", "ffffffffffff"), Err(ArchiveError::Damaged(m)) if m.contains("not ffffffffffff"))
    );
    assert!(matches!(
        decode(&blob, "west", "0123456789ab"),
        Err(ArchiveError::Damaged(_))
    ));
    // A body that does not match its digest.
    let mut bad = e.clone();
    let (d, _) = bad.bodies.pop_first().unwrap();
    bad.bodies.insert(d, Bytes::from_static(b"other"));
    let blob = encode(&bad).unwrap();
    assert!(
        matches!(decode(&blob, "east", "0123456789ab"), Err(ArchiveError::Damaged(m)) if m.contains("does not match"))
    );
    // A body missing.
    let mut short = e.clone();
    short.bodies.pop_first();
    let blob = encode(&short).unwrap();
    assert!(
        matches!(decode(&blob, "east", "0123456789ab"), Err(ArchiveError::Damaged(m)) if m.contains("missing"))
    );
}

#[test]
fn a_newer_format_is_refused() {
    let message = ArchivedVersion {
        schema: SCHEMA + 1,
        version: String::new(),
        bodies: Vec::new(),
    };
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(&message.encode_to_vec()).unwrap();
    let blob = gz.finish().unwrap();
    assert!(
        matches!(decode(&blob, "east", "0123456789ab"), Err(ArchiveError::Newer(n)) if n == SCHEMA + 1)
    );
}

#[test]
fn a_version_too_large_for_the_archive_is_an_error_not_a_partial_write() {
    let blob = vec![0u8; CHUNK * MAX_CHUNKS + 1];
    assert!(matches!(
        chunks("east", "0123456789ab", &blob),
        Err(ArchiveError::TooLarge { .. })
    ));
}

#[test]
fn a_chunk_count_from_outside_is_bounded_before_anything_is_allocated() {
    let e = exported(3, 100);
    let blob = encode(&e).unwrap();
    let mut cms = chunks("east", "0123456789ab", &blob).unwrap();
    for n in ["0/1099511627776", "0/18446744073709551615", "0/0"] {
        cms[0]
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(CHUNK_ANNOTATION.to_owned(), n.to_owned());
        assert!(
            matches!(join(cms.clone()), Err(ArchiveError::Damaged(_))),
            "{n}"
        );
    }
}

#[test]
fn only_every_chunk_of_one_write_lists_as_complete() {
    let c = |i: usize, n: usize, sha: &str| (format!("c{i}"), format!("{i}/{n}"), sha.to_owned());
    assert!(complete(&[c(0, 2, "a"), c(1, 2, "a")]));
    assert!(complete(&[c(1, 2, "a"), c(0, 2, "a")]));
    // A write cut short, chunks of two writes, a chunk twice, a foreign count.
    assert!(!complete(&[c(0, 2, "a")]));
    assert!(!complete(&[c(0, 2, "a"), c(1, 2, "b")]));
    assert!(!complete(&[c(0, 2, "a"), c(0, 2, "a")]));
    assert!(!complete(&[c(0, 3, "a"), c(1, 3, "a")]));
    assert!(!complete(&[]));
    assert!(!complete(&[("x".into(), "junk".into(), "a".into())]));
}
