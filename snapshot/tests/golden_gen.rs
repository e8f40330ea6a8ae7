//! Regenerates `tests/fixtures/snapshot-v1.bin` when run with `IGGY_REGENERATE_GOLDEN=1`
//! (only when the format version changes: the golden test exists to catch silent changes).
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

#[test]
fn regenerate_golden_snapshot() {
    if std::env::var_os("IGGY_REGENERATE_GOLDEN").is_none() {
        return;
    }
    let bytes = iggy_snapshot::encode(
        960,
        0x0123_4567_89AB_CDEF_FEDC_BA98_7654_3210,
        1,
        b"golden payload: streams=3 topics=7",
    );
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/snapshot-v1.bin");
    let root = iggy_io::OsStorage::open(path.parent().unwrap()).unwrap();
    let file = iggy_io::Storage::open(&root, "snapshot-v1.bin", iggy_io::OpenMode::Create).unwrap();
    iggy_io::WriteFile::set_len(&file, 0).unwrap();
    iggy_io::WriteFile::write_all_at(&file, 0, &bytes).unwrap();
    iggy_io::WriteFile::sync_data(&file).unwrap();
}
