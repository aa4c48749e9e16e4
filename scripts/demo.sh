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
echo
echo "== the same KV cache as TurboQuant-3.5 (k=tq4, v=tq3), the per-vector baseline (lossy)"
"$seqkv" compress -f "$work/session.txt" -o "$work/tq35.skv" --codec kvq --kv-quant k=tq4,v=tq3 |
    grep -E '^(file|bits per position|vs f16 KV|KV relative MSE)'
echo
echo "== a store of sessions sharing a prefix: two conversations that start with the same passage"
head -c 2400 "$text" >"$work/chat-a.txt"
{ head -c 2400 "$text"; tail -c +20000 "$text" | head -c 600; } >"$work/chat-b.txt"
"$seqkv" store init "$work/store" --budget 8M
"$seqkv" store put "$work/store" -f "$work/chat-a.txt"
"$seqkv" store put "$work/store" -f "$work/chat-b.txt"
"$seqkv" store get "$work/store" chat-b.txt --verify -o "$work/chat-b.back"
cmp "$work/chat-b.txt" "$work/chat-b.back" && echo "restored chat-b.txt is identical to the input"
"$seqkv" store stats "$work/store"
