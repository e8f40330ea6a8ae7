//! Latency samples and their percentiles, recorded in an HDR histogram (bounded memory,
//! three significant digits) from 1 microsecond to 100 seconds.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Percentiles of a set of latency samples, in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Percentiles {
    pub count: u64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

/// A latency recorder.
#[derive(Clone, Debug)]
pub struct Latencies {
    histogram: Histogram<u64>,
}

impl Default for Latencies {
    fn default() -> Self {
        Self::new()
    }
}

impl Latencies {
    #[must_use]
    pub fn new() -> Self {
        // 1 us to 100 s at 3 significant digits: a few tens of KiB, whatever the sample count.
        let histogram = Histogram::new_with_bounds(1, 100_000_000, 3)
            .unwrap_or_else(|error| panic!("histogram bounds: {error}"));
        Self { histogram }
    }

    /// Records one latency (clamped into the histogram's range).
    pub fn record(&mut self, latency: Duration) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.histogram.saturating_record(us.max(1));
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: &Self) {
        // Same bounds on both sides: adding cannot fail.
        let _ = self.histogram.add(&other.histogram);
    }

    #[must_use]
    pub fn count(&self) -> u64 {
        self.histogram.len()
    }

    #[must_use]
    pub fn percentiles(&self) -> Percentiles {
        if self.histogram.is_empty() {
            return Percentiles::default();
        }
        let at = |q: f64| self.histogram.value_at_quantile(q) as f64;
        Percentiles {
            count: self.histogram.len(),
            p50_us: at(0.5),
            p90_us: at(0.9),
            p99_us: at(0.99),
            p999_us: at(0.999),
            max_us: self.histogram.max() as f64,
        }
    }

    /// The cumulative distribution at `points` evenly spaced quantiles: (latency us, quantile).
    #[must_use]
    pub fn cdf(&self, points: usize) -> Vec<(f64, f64)> {
        if self.histogram.is_empty() || points == 0 {
            return Vec::new();
        }
        (0..=points)
            .map(|i| {
                let q = i as f64 / points as f64;
                (self.histogram.value_at_quantile(q) as f64, q)
            })
            .collect()
    }
}

/// Percentiles of `samples` (a convenience over [`Latencies`]).
#[must_use]
pub fn percentiles(samples: &[Duration]) -> Percentiles {
    let mut latencies = Latencies::new();
    for sample in samples {
        latencies.record(*sample);
    }
    latencies.percentiles()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_follow_the_samples() {
        let samples: Vec<Duration> = (1..=1000).map(Duration::from_micros).collect();
        let p = percentiles(&samples);
        assert_eq!(p.count, 1000);
        assert!((p.p50_us - 500.0).abs() <= 1.0, "{p:?}");
        assert!((p.p99_us - 990.0).abs() <= 1.0, "{p:?}");
        assert!((p.max_us - 1000.0).abs() <= 1.0, "{p:?}");
        let cdf = Latencies {
            histogram: {
                let mut l = Latencies::new();
                samples.iter().for_each(|s| l.record(*s));
                l.histogram
            },
        }
        .cdf(10);
        assert_eq!(cdf.len(), 11);
        assert!(cdf.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 < w[1].1));
    }
}
