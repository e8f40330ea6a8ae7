//! Latency samples and their percentiles.

use std::time::Duration;

use serde::Serialize;

/// Percentiles of a set of latency samples, in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Percentiles {
    pub count: usize,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

/// Computes exact percentiles (nearest rank) of `samples`.
#[must_use]
pub fn percentiles(samples: &mut [Duration]) -> Percentiles {
    if samples.is_empty() {
        return Percentiles::default();
    }
    samples.sort_unstable();
    // Nearest rank: the smallest sample with at least `per_mille`/1000 of the samples at or below.
    let rank = |per_mille: usize| {
        let index = (samples.len() * per_mille)
            .div_ceil(1000)
            .clamp(1, samples.len())
            - 1;
        samples[index].as_secs_f64() * 1e6
    };
    Percentiles {
        count: samples.len(),
        p50_us: rank(500),
        p99_us: rank(990),
        p999_us: rank(999),
        max_us: rank(1000),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut samples: Vec<Duration> = (1..=1000).map(Duration::from_micros).rev().collect();
        let p = percentiles(&mut samples);
        assert_eq!(p.count, 1000);
        assert!((p.p50_us - 500.0).abs() < 1e-6);
        assert!((p.p99_us - 990.0).abs() < 1e-6);
        assert!((p.p999_us - 999.0).abs() < 1e-6);
        assert!((p.max_us - 1000.0).abs() < 1e-6);
        assert_eq!(percentiles(&mut []).count, 0);
    }
}
