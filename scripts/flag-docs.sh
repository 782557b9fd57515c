#!/usr/bin/env bash
# Writes docs/flags/<program>.md from each program's --help, and docs/flags/README.md
# listing them, so that the manual's flag pages are the programs' own text.
#
#   scripts/flag-docs.sh [BINDIR]           regenerate docs/flags/ (BINDIR: build/apps)
#   scripts/flag-docs.sh --check [BINDIR]   regenerate into a temporary folder and compare
#                                           with docs/flags/; exit 1 naming the difference
#                                           (the CTest docs_flag_pages runs this)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
check=0
if [[ "${1:-}" == "--check" ]]; then
  check=1
  shift
fi
bindir="${1:-$root/build/apps}"
programs=(implicit-compare implicit-hopfield implicit-et implicit-bench implicit-graph)

write_pages() {
  local out="$1" program help
  mkdir -p "$out"
  {
    echo "# The programs' flags"
    echo
    echo "Each page is the program's \`--help\`, written by \`scripts/flag-docs.sh\` from the built"
    echo "program; do not edit them by hand (\`ctest -L docs\` fails when they differ from the"
    echo "programs). What the programs do, with examples, is in [programs.md](../programs.md)."
    echo
    for program in "${programs[@]}"; do
      echo "- [$program]($program.md)"
    done
  } > "$out/README.md"
  for program in "${programs[@]}"; do
    if [[ ! -x "$bindir/$program" ]]; then
      echo "flag-docs.sh: $bindir/$program is not a built program" >&2
      exit 1
    fi
    help="$("$bindir/$program" --help)"
    {
      echo "# $program --help"
      echo
      echo "Written by \`scripts/flag-docs.sh\` from the built program; do not edit by hand."
      echo "What the program does: [programs.md](../programs.md)."
      echo
      echo '```text'
      printf '%s\n' "$help"
      echo '```'
    } > "$out/$program.md"
  done
}

if [[ $check == 0 ]]; then
  write_pages "$root/docs/flags"
  echo "flag-docs.sh: wrote $root/docs/flags/ from $bindir"
  exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
write_pages "$tmp/flags"
if ! diff -ru "$root/docs/flags" "$tmp/flags"; then
  echo "flag-docs.sh: docs/flags/ differs from the programs' --help (diff above, - checked in," \
       "+ the programs). Rerun scripts/flag-docs.sh $bindir and commit docs/flags/." >&2
  exit 1
fi
echo "flag-docs.sh: docs/flags/ matches the programs' --help"
