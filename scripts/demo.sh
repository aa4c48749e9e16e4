#!/bin/sh
# The main job on the bundled model: take a session (real text the model never saw in
# training: held-out KJV books), store its KV cache with both codecs, restore each one
# and verify the regenerated KV bit for bit, and show what each representation costs.
set -eu
build=${1:-build}
cd "$(dirname "$0")/.."
seqkv="$build/seqkv"
text=tests/data/model_ref/heldout.txt
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
head -c 3600 "$text" >"$work/session.txt"
echo "== session: first 3600 bytes of $text (KJV books held out from training)"
echo
"$seqkv" info | sed -n '1,8p'
echo
echo "== compress, codec model (tokens arithmetic-coded under the model)"
"$seqkv" compress -f "$work/session.txt" -o "$work/model.skv" --codec model
echo
echo "== compress, codec tokens (raw token ids, zstd)"
"$seqkv" compress -f "$work/session.txt" -o "$work/tokens.skv" --codec tokens | sed -n '4,5p'
echo
echo "== restore both, regenerating the KV cache and checking it against the stored digest"
"$seqkv" restore "$work/model.skv" --verify -o "$work/model.txt"
"$seqkv" restore "$work/tokens.skv" --verify -o "$work/tokens.txt"
cmp "$work/session.txt" "$work/model.txt" && cmp "$work/session.txt" "$work/tokens.txt" &&
    echo "restored texts are identical to the input"
