//! Benchmark harness shared by `iggy-bench` and the criterion benches.
