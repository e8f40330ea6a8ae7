//! `iggy-bench snapshot`: the metadata snapshot at scale.

use std::path::Path;
use std::time::Instant;

use iggy_io::OsStorage;
use iggy_metadata::codec::{self, PAYLOAD_VERSION};
use iggy_metadata::{Durability, Op, Retention, State};
use serde::Serialize;

/// How big a state to build.
#[derive(Clone, Debug)]
pub struct Sizes {
    pub streams: u32,
    pub partitions_per_topic: u32,
    pub clients: u32,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub streams: usize,
    pub partitions: usize,
    pub clients: usize,
    pub build_seconds: f64,
    pub encode_seconds: f64,
    pub write_seconds: f64,
    pub load_seconds: f64,
    pub file_bytes: u64,
}

fn build(sizes: &Sizes) -> Result<State, String> {
    let mut state = State::new(3);
    for index in 0..sizes.streams {
        let op = Op::CreateStream {
            name: format!("stream-{index:06}"),
        };
        state.apply(&op).map_err(|e| e.to_string())?;
        let topic = Op::CreateTopic {
            stream: index + 1,
            name: "events".into(),
            partitions: sizes.partitions_per_topic,
            durability: Durability::Replicated,
            segment_size_bytes: 1 << 30,
            retention: Retention {
                max_age_seconds: 604_800,
                max_bytes: 0,
            },
            replication_factor: 3,
        };
        state.apply(&topic).map_err(|e| e.to_string())?;
    }
    for index in 0..sizes.clients {
        let client = u128::from(index) << 64 | 0xC11E;
        let op_number = 2 * u64::from(index);
        state.execute(
            op_number,
            client,
            0,
            &Op::RegisterClient { client, session: 1 },
        );
        // A request answered: the session keeps its reply bytes.
        let request = Op::CreateStream {
            name: "stream-000000".into(),
        };
        state.execute(op_number + 1, client, 42, &request);
    }
    Ok(state)
}

/// Builds the state, writes snapshot.bin into `dir` and loads it back, timing each step.
pub fn run(dir: &Path, sizes: &Sizes) -> Result<Report, String> {
    let started = Instant::now();
    let state = build(sizes)?;
    let build_seconds = started.elapsed().as_secs_f64();
    let storage = OsStorage::create(dir).map_err(|e| e.to_string())?;

    let started = Instant::now();
    let payload = codec::encode(&state);
    let encode_seconds = started.elapsed().as_secs_f64();
    let started = Instant::now();
    iggy_snapshot::write(
        &storage,
        Path::new(""),
        1_000_000,
        0xABCD,
        PAYLOAD_VERSION,
        &payload,
    )
    .map_err(|e| e.to_string())?;
    let write_seconds = started.elapsed().as_secs_f64();

    let started = Instant::now();
    let (header, body) = iggy_snapshot::read(&storage, Path::new(""))
        .map_err(|e| e.to_string())?
        .ok_or("snapshot.bin vanished")?;
    let loaded = codec::decode(header.payload_version, &body).map_err(|e| e.to_string())?;
    let load_seconds = started.elapsed().as_secs_f64();
    if loaded != state {
        return Err("the loaded state differs from the written one".into());
    }
    let file_bytes = (iggy_snapshot::HEADER_SIZE + body.len() + iggy_snapshot::TRAILER_SIZE) as u64;
    iggy_io::Storage::unlink(&storage, iggy_snapshot::FILE_NAME).map_err(|e| e.to_string())?;
    Ok(Report {
        streams: state.streams.len(),
        partitions: state.partition_count,
        clients: state.clients.len(),
        build_seconds,
        encode_seconds,
        write_seconds,
        load_seconds,
        file_bytes,
    })
}

#[must_use]
pub fn render(report: &Report) -> String {
    format!(
        "state: {} streams, {} partitions, {} clients (built by apply in {:.3}s)\n\
         snapshot.bin: {} bytes ({:.1} MB)\n\
         encode {:.1} ms; write (write, fdatasync, rename, dir fsync) {:.1} ms; \
         load (read, verify, decode) {:.1} ms\n",
        report.streams,
        report.partitions,
        report.clients,
        report.build_seconds,
        report.file_bytes,
        report.file_bytes as f64 / 1e6,
        report.encode_seconds * 1e3,
        report.write_seconds * 1e3,
        report.load_seconds * 1e3,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_run_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let sizes = Sizes {
            streams: 20,
            partitions_per_topic: 3,
            clients: 5,
        };
        let report = run(dir.path(), &sizes).unwrap();
        assert_eq!(
            (report.streams, report.partitions, report.clients),
            (20, 60, 5)
        );
        assert!(report.file_bytes > 144);
        assert!(render(&report).contains("60 partitions"));
    }
}
