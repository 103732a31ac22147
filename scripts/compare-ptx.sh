#!/usr/bin/env bash
# Emits the PTX of every program (examples/**/*.tsl, tests/programs/**/*.tsl) with two
# `tessel` binaries and compares them: a refactoring that must not change a kernel shows
# here as "identical" everywhere. Each file is built at its own `// dims:` line when it has
# one, and at a few shared dim sets (a dim a program does not name is ignored; a program
# whose dims are not all bound fails to compile with both binaries, which is compared as
# an error message), in every profile, for the h200 preset.
#
#   scripts/compare-ptx.sh [--header-only-ok] BEFORE_BINARY AFTER_BINARY [OUT_DIR]
#
# With --header-only-ok, a module whose only differing lines are its `.version`/`.target`
# header counts as "header only" rather than different (for a change of the header).
# Exit status: 0 when nothing else differs, 1 otherwise. The per-case summary is written to
# OUT_DIR/summary.txt.
set -u
header_ok=0
if [ "${1:-}" = --header-only-ok ]; then
  header_ok=1
  shift
fi
before=$(realpath "$1")
after=$(realpath "$2")
out=${3:-/tmp/compare-ptx}
root=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$out" && mkdir -p "$out"

# Shared dim sets: odd small shapes, the Qwen3-14B golden sizes (GQA 40/8 heads of 128),
# decode sizes, and odd shapes with 128-wide heads (the fused attention's rings).
sets=(
  "T=37 D=64 B=2 N=24 K=72 M=40 R=16 S=130 E=48 F=96 V=100 L=2 H=8 KV=2"
  "T=4096 M=8192 K=4096 N=4096 R=16 B=1 S=4096 D=128 H=40 KV=8"
  "T=8 B=8 S=4096 M=8 N=4096 K=4096 R=16 D=33 H=4 KV=4"
  "T=130 S=257 D=128 H=16 KV=4 B=3 N=5 R=7 M=70 K=100 E=24 F=40"
)
profiles=(exact invariant fast)

# Files whose dims are tied (N = H·D, M = T·D), as their tests bind them.
extra_sets() {
  case "$1" in
    tests/programs/row_epilogue.tsl)
      echo "T=37 H=8 D=64 K=72 N=512 M=2368"
      echo "T=4096 H=40 D=128 K=5120 N=5120 M=524288"
      echo "T=130 H=3 D=256 K=100 N=768 M=33280" ;;
  esac
}

same=0 header=0 diff=0 errors=0 cases=0 modules=0
: >"$out/summary.txt"
while IFS= read -r f; do
  rel=${f#"$root"/}
  own=$(sed -n 's|^// dims: *||p' "$f" | head -1)
  file_sets=("${sets[@]}")
  [ -n "$own" ] && file_sets=("$own" "${sets[@]}")
  while IFS= read -r extra; do
    [ -n "$extra" ] && file_sets+=("$extra")
  done < <(extra_sets "$rel")
  for si in "${!file_sets[@]}"; do
    dims=()
    for d in ${file_sets[$si]}; do dims+=(--dim "$d"); done
    for p in "${profiles[@]}"; do
      cases=$((cases + 1))
      tag=$(echo "$rel" | tr '/' '_')__${si}_$p
      for side in before after; do
        bin=$before
        [ $side = after ] && bin=$after
        dir="$out/$side/$tag"
        mkdir -p "$dir"
        (cd "$root" && "$bin" build "$rel" "${dims[@]}" --profile "$p" --target h200 \
          --emit ptx -o "$dir") >"$dir.log" 2>&1
        echo $? >"$dir.rc"
      done
      b="$out/before/$tag" a="$out/after/$tag"
      if [ "$(cat "$b.rc")" != 0 ] || [ "$(cat "$a.rc")" != 0 ]; then
        # Both must fail alike: the same status and the same message, once the binary
        # path and the "target:" line (which names the PTX target) are left out.
        if [ "$(cat "$b.rc")" = "$(cat "$a.rc")" ] &&
          diff -q <(grep -v '^target:' "$b.log") <(grep -v '^target:' "$a.log") >/dev/null; then
          errors=$((errors + 1))
          echo "error-both $tag" >>"$out/summary.txt"
        else
          diff=$((diff + 1))
          echo "DIFFERENT-STATUS $tag" >>"$out/summary.txt"
        fi
        continue
      fi
      for m in "$b"/*.ptx; do
        name=$(basename "$m")
        modules=$((modules + 1))
        if [ ! -f "$a/$name" ]; then
          diff=$((diff + 1))
          echo "MISSING $tag/$name" >>"$out/summary.txt"
        elif cmp -s "$m" "$a/$name"; then
          same=$((same + 1))
        elif [ $header_ok = 1 ] &&
          [ -z "$(diff "$m" "$a/$name" | grep '^[<>]' | grep -vE '^[<>] \.(version|target) ')" ]; then
          header=$((header + 1))
          echo "header-only $tag/$name" >>"$out/summary.txt"
        else
          diff=$((diff + 1))
          echo "DIFFERENT $tag/$name" >>"$out/summary.txt"
        fi
      done
      if [ "$(ls "$a"/*.ptx 2>/dev/null | wc -l)" != "$(ls "$b"/*.ptx 2>/dev/null | wc -l)" ]; then
        diff=$((diff + 1))
        echo "MODULE-COUNT $tag" >>"$out/summary.txt"
      fi
    done
  done
done < <(find "$root/examples" "$root/tests/programs" -name '*.tsl' | sort)

echo "cases (file × dims × profile): $cases; PTX modules compared: $modules"
echo "identical: $same; header lines only: $header; different: $diff; failing alike in both: $errors"
echo "details: $out/summary.txt"
[ $diff = 0 ]
