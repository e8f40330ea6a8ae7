#!/usr/bin/env bash
# Regenerates protocol/golden/*.bin with the pinned Iggy crates' own encoders (iggy_binary_protocol
# and iggy_common 0.11.0, the versions of iggy 0.11.0 and iggy-cli 0.14.0). The generator is not a
# workspace member; its first build takes about two minutes. protocol/tests/golden.rs checks the
# codec against these files in the default test run, so a regeneration that changes a byte shows
# up as a failing test and a diff under protocol/golden/.
#
#   scripts/protocol-golden.sh
set -eu
cd "$(dirname "$0")/../protocol/golden-gen"
cargo run --quiet --release -- ../golden
