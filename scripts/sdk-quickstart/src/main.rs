//! The SDK README's quick start, grown into a check (issue #47): an `IggyProducer` sends
//! `MESSAGES` numbered messages, balanced over a topic of three partitions, through one node; a
//! consumer group with auto-commit `IntervalOrWhen(1s, ConsumingAllMessages)` reads them through
//! another; a second member joins when a third is read; when two thirds are read, the node the
//! consumers are connected to is killed (`kill -9 KILL_PID`). Every message sent must be
//! consumed, at least once for the group, in order per partition within each member's reads.
//!
//!   iggy-sdk-quickstart PRODUCER_ADDR CONSUMER_ADDR MESSAGES KILL_PID
//!
//! Sends are paced at about 4,000 messages a second. Prints what each member read, the duplicates (a message read twice: after a rebalance or a
//! reconnect, before the group's commit) and exits 1 if a message was never consumed.

use std::collections::{BTreeMap, BTreeSet};
use std::error::Error;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use iggy::prelude::*;

const STREAM: &str = "telemetry";
const TOPIC: &str = "device-events";
const CONSUMER_GROUP: &str = "telemetry-ingester";

/// What the members read: per member, per partition, the offsets in the order read, and the
/// message numbers seen.
#[derive(Default)]
struct Reads {
    by_member: BTreeMap<usize, BTreeMap<u32, Vec<u64>>>,
    numbers: BTreeMap<u64, u32>,
}

async fn member(
    id: usize,
    address: String,
    reads: Arc<Mutex<Reads>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> Result<(), Box<dyn Error + Send + Sync>> {
    let client = IggyClient::from_connection_string(&format!("iggy://iggy:iggy@{address}"))?;
    client.connect().await?;
    let mut consumer = client
        .consumer_group(CONSUMER_GROUP, STREAM, TOPIC)?
        .auto_commit(AutoCommit::IntervalOrWhen(
            NonZeroIggyDuration::from_str("1s")?,
            AutoCommitWhen::ConsumingAllMessages,
        ))
        .create_consumer_group_if_not_exists()
        .auto_join_consumer_group()
        .polling_strategy(PollingStrategy::next())
        .poll_interval(IggyDuration::from_str("1ms")?)
        .batch_length(1000)
        .build();
    consumer.init().await?;
    eprintln!("member {id}: joined through {address}");
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let next = tokio::time::timeout(Duration::from_millis(500), consumer.next()).await;
        let Ok(Some(message)) = next else { continue };
        match message {
            Ok(message) => {
                let payload = std::str::from_utf8(&message.message.payload).unwrap_or("");
                let number = payload
                    .strip_prefix("message-")
                    .and_then(|n| n.parse::<u64>().ok());
                let mut reads = reads.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                reads
                    .by_member
                    .entry(id)
                    .or_default()
                    .entry(message.partition_id)
                    .or_default()
                    .push(message.message.header.offset);
                if let Some(number) = number {
                    *reads.numbers.entry(number).or_default() += 1;
                }
            }
            Err(error) => eprintln!("member {id}: poll error: {error}"),
        }
    }
    let _ = consumer.shutdown().await;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error + Send + Sync>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, producer_address, consumer_address, messages, kill_pid] = args.as_slice() else {
        return Err(
            "usage: iggy-sdk-quickstart PRODUCER_ADDR CONSUMER_ADDR MESSAGES KILL_PID".into(),
        );
    };
    let messages: u64 = messages.parse()?;

    let client =
        IggyClient::from_connection_string(&format!("iggy://iggy:iggy@{producer_address}"))?;
    client.connect().await?;
    client.create_stream(STREAM).await?;
    client
        .create_topic(
            &Identifier::named(STREAM)?,
            TOPIC,
            &TopicCreateOptions {
                partitions_count: Some(3),
                ..Default::default()
            },
        )
        .await?;

    // The README's producer: direct, batches of up to 1000 lingering 1 ms, balanced.
    let producer = client
        .producer(STREAM, TOPIC)?
        .direct(
            DirectConfig::builder()
                .batch_length(1000)
                .linger_time(IggyDuration::from_str("1ms")?)
                .build(),
        )
        .partitioning(Partitioning::balanced())
        .build();
    producer.init().await?;

    let reads = Arc::new(Mutex::new(Reads::default()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let first = tokio::spawn(member(
        1,
        consumer_address.clone(),
        reads.clone(),
        stop.clone(),
    ));

    // Sent in batches of 100 while the members read, so that the join and the kill land
    // mid-stream.
    let started = Instant::now();
    let mut sent = 0u64;
    let mut second = None;
    let mut killed = false;
    // The longest time the group read nothing new while sent messages waited, after the kill.
    let mut last_done = 0;
    let mut last_progress = Instant::now();
    let mut longest_stall = Duration::ZERO;
    let consumed = |reads: &Arc<Mutex<Reads>>| {
        reads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .numbers
            .len() as u64
    };
    while consumed(&reads) < messages && started.elapsed() < Duration::from_secs(180) {
        if sent < messages {
            let batch: Vec<IggyMessage> = (sent..(sent + 100).min(messages))
                .map(|n| IggyMessage::from_str(&format!("message-{n}")))
                .collect::<Result<_, _>>()?;
            let count = batch.len() as u64;
            producer.send(batch).await?;
            sent += count;
            // Paced (about 4,000 messages a second), so that the kill lands with a third of
            // the stream still to send and read.
            tokio::time::sleep(Duration::from_millis(25)).await;
        } else {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let done = consumed(&reads);
        if done > last_done {
            last_done = done;
            last_progress = Instant::now();
        } else if killed && done < sent {
            longest_stall = longest_stall.max(last_progress.elapsed());
        }
        if second.is_none() && done >= messages / 3 {
            eprintln!("{done} read: a second member joins");
            second = Some(tokio::spawn(member(
                2,
                consumer_address.clone(),
                reads.clone(),
                stop.clone(),
            )));
        }
        if !killed && done >= messages * 2 / 3 {
            eprintln!("{done} read: kill -9 {kill_pid}, the node the members use");
            std::process::Command::new("kill")
                .args(["-9", kill_pid])
                .status()?;
            killed = true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // A moment for duplicates in flight to show, then the members stop.
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = first.await;
    if let Some(second) = second {
        let _ = second.await;
    }

    let reads = reads.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let missing: BTreeSet<u64> = (0..messages)
        .filter(|n| !reads.numbers.contains_key(n))
        .collect();
    let duplicates: u64 = reads.numbers.values().map(|c| u64::from(c - 1)).sum();
    let mut out_of_order = 0;
    for (id, partitions) in &reads.by_member {
        for (partition, offsets) in partitions {
            let backwards = offsets.windows(2).filter(|w| w[1] <= w[0]).count();
            out_of_order += backwards;
            println!(
                "member {id} partition {partition}: {} messages, offsets {}..={}, {} re-reads",
                offsets.len(),
                offsets.first().copied().unwrap_or(0),
                offsets.last().copied().unwrap_or(0),
                backwards
            );
        }
    }
    println!(
        "sent {sent}, consumed {} distinct, {duplicates} read more than once, {out_of_order} \
         steps back within a member's partition, missing {}, killed: {killed}, {:.1} s; \
         longest stall of the group after the kill: {:.1} s",
        reads.numbers.len(),
        missing.len(),
        started.elapsed().as_secs_f64(),
        longest_stall.as_secs_f64()
    );
    if !missing.is_empty() || sent < messages {
        eprintln!(
            "FAILED: missing {:?}",
            missing.iter().take(20).collect::<Vec<_>>()
        );
        std::process::exit(1);
    }
    Ok(())
}
