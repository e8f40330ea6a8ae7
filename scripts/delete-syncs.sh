#!/usr/bin/env bash
# Deletes each sync of the durable crates in turn and runs that crate's own tests: every sync
# must be needed by a test (docs/testing.md, "Mutation testing"). cargo-mutants never deletes a
# statement, so this covers what it cannot.
#
#   scripts/delete-syncs.sh [crate ...]        # default: wal superblock segments snapshot metadata recovery
#
# A deletion keeps the types: `x.sync_data()` and `x.sync_all()` become `x.write_all_at(0, &[])`
# (a write of nothing; `WriteFile`, which has both, is in scope wherever a sync is called),
# `x.sync_dir(p)` becomes `x.exists(p).map(|_| ())`, and `x.write_all_and_sync_data(..)` becomes
# `x.write_all_at(..)` (the write stays, its sync goes). Prints one line per site (KILLED: a test
# failed; SURVIVED: every test passed; UNBUILT: the deletion did not compile) and a summary.
# Runs the tests in release (the crash enumerations are slow in debug). Restores every file it
# touches, also when interrupted. Set SYNC_SITES_ONLY=1 to list the sites without testing.
set -u
cd "$(dirname "$0")/.."
crates=("$@")
[ ${#crates[@]} -gt 0 ] || crates=(wal superblock segments snapshot metadata recovery)
pattern='\.(sync_data\(\)|sync_all\(\)|sync_dir\(|write_all_and_sync_data\()'

current=""
restore() { [ -n "$current" ] && git checkout --quiet -- "$current"; }
trap 'restore; exit 130' INT TERM

killed=0 survived=0 unbuilt=0
for crate in "${crates[@]}"; do
  for file in "$crate"/src/*.rs "$crate"/src/*/*.rs; do
    [ -f "$file" ] || continue
    # Code lines only: not comments, not the trait's own definitions.
    grep -nE "$pattern" "$file" | grep -vE '^[0-9]+:\s*(//|\*)|fn (sync_data|sync_all|sync_dir|write_all_and_sync_data)' |
      cut -d: -f1 |
      while read -r line; do
        site="$file:$line"
        if [ -n "${SYNC_SITES_ONLY:-}" ]; then
          echo "$site: $(sed -n "${line}p" "$file" | sed 's/^ *//')"
          continue
        fi
        current="$file"
        perl -i -pe 'if ($. == '"$line"') {
            s/\.sync_data\(\)/.write_all_at(0, &[])/ or
            s/\.sync_all\(\)/.write_all_at(0, &[])/ or
            s/\.write_all_and_sync_data\(/.write_all_at(/ or
            s/\.sync_dir(\((?:[^()]++|(?1))*\))/.exists$1.map(|_| ())/;
        }' "$file"
        if ! cargo build --quiet --release -p "iggy-$crate" --tests >/dev/null 2>&1; then
          echo "UNBUILT   $site"
          echo unbuilt >>"${SYNC_RESULTS:-/dev/null}"
        elif cargo test --quiet --release -p "iggy-$crate" >/dev/null 2>&1; then
          echo "SURVIVED  $site: $(git diff --unified=0 -- "$file" | grep '^+ ' | sed 's/^+ *//')"
          echo survived >>"${SYNC_RESULTS:-/dev/null}"
        else
          echo "KILLED    $site"
          echo killed >>"${SYNC_RESULTS:-/dev/null}"
        fi
        restore
        current=""
      done
  done
done
if [ -n "${SYNC_RESULTS:-}" ] && [ -f "$SYNC_RESULTS" ]; then
  echo "killed $(grep -c killed "$SYNC_RESULTS"), survived $(grep -c survived "$SYNC_RESULTS"), unbuilt $(grep -c unbuilt "$SYNC_RESULTS")"
fi
