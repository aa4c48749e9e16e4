#!/bin/sh
# check_layers.sh [ROOT [BUILD]] - fails when a source file includes a header of a higher
# layer or a private header of another folder, or (with BUILD, a build directory holding
# BUILD/obj/<layer>/*.o) when an object calls a function defined at a higher layer.
#
# Layers, lowest first (README "Layout"); a file may include headers of its own
# folder and of strictly lower ranks; tokenizer, quant and coder share a rank and
# do not include one another:
#   0 core   1 tokenizer quant coder grammar cuda   2 engine   3 container   4 store   5 server   6 tools
# Only quoted includes of the form "layer/name.h" are layered; "seqkv.h" (the public
# header) may be included anywhere. Prints each violation as FILE:LINE: message.
#
# Private headers: *_int.h, engine/model.h and engine/gguf.h are included only inside
# their own folder (the layers above use engine/engine.h and the public API).
#
# The symbol pass (nm): every undefined symbol of a layer's objects that some object of
# the library defines must be defined at the same layer or a strictly lower rank (the
# include check cannot see a call made through a declaration copied by hand).
root=${1:-.}
build=${2:-}
case "$build" in /*|'') ;; *) build=$(pwd)/$build ;; esac
cd "$root" || exit 2
rank() {
    case "$1" in
        core) echo 0 ;; tokenizer|quant|coder|grammar|cuda) echo 1 ;; engine) echo 2 ;;
        container) echo 3 ;; store) echo 4 ;; server) echo 5 ;; tools) echo 6 ;; *) echo -1 ;;
    esac
}
# Privacy exceptions still to fix, one "FILE HEADER" a line, each with its way out (none now).
allow_private="
"
private_header() {
    case "$1" in *_int.h|engine/model.h|engine/gguf.h) return 0 ;; esac
    return 1
}
# Folders whose files form a one-way chain (no cycle of calls between their files).
acyclic="store"
bad=0
files=$(find src tools -name '*.[ch]' 2>/dev/null | sort)
for f in $files; do
    case "$f" in
        src/*/*) layer=$(echo "$f" | cut -d/ -f2) ;;
        tools/*) layer=tools ;;
        *) echo "$f: source file outside a layer folder (src/<layer>/)"; bad=1; continue ;;
    esac
    me=$(rank "$layer")
    if [ "$me" -lt 0 ]; then echo "$f: unknown layer '$layer'"; bad=1; continue; fi
    # Every quoted include: LINE:layer/name.h or LINE:name.h
    grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" |
        sed 's/^\([0-9]*\):[^"]*"\([^"]*\)".*/\1 \2/' > "${TMPDIR:-/tmp}/skv_layers.$$"
    while read -r line inc; do
        case "$inc" in
            seqkv.h) continue ;;
            */*) dep=${inc%%/*} ;;
            *) # unqualified: only a tools-local header (tools/cli/cli.h) is allowed
               if [ "$layer" = tools ] && { [ -f "tools/$inc" ] || [ -f "$(dirname "$f")/$inc" ] ||
                   [ -n "$(find tools -name "$inc" -print -quit)" ]; }; then continue; fi
               echo "$f:$line: include \"$inc\" does not name its layer (write \"layer/$inc\")"; bad=1; continue ;;
        esac
        r=$(rank "$dep")
        if [ "$dep" != "$layer" ] && private_header "$inc" && ! echo "$allow_private" | grep -qx "$f $inc"; then
            echo "$f:$line: \"$inc\" is private to src/$dep/ (use its public header, e.g. engine/engine.h)"; bad=1
        fi
        if [ "$r" -lt 0 ]; then echo "$f:$line: include \"$inc\": unknown layer '$dep'"; bad=1
        elif [ "$dep" != "$layer" ] && [ "$r" -ge "$me" ]; then
            echo "$f:$line: $layer (rank $me) must not include \"$inc\" ($dep, rank $r)"; bad=1
        fi
    done < "${TMPDIR:-/tmp}/skv_layers.$$"
    rm -f "${TMPDIR:-/tmp}/skv_layers.$$"
done
# ---- one error channel (docs/architecture.md, "Errors: one channel") ----
# Below the public API an error travels in one skv_err (core/util.h); a (char *err, size_t
# errcap) pair is the public compatibility boundary only: a function that takes one must
# hand its work over at once, returning skv_err_out(...) within its first lines.
errpairs=$(find src -name '*.[ch]' | sort | xargs awk '
    /char \*[a-z_]*(err|msg|why)[a-z_]*,[[:space:]]*size_t [a-z_]+[,)]/ || /size_t [a-z_]*errcap/ { at[++m] = FILENAME SUBSEP FNR }
    /return skv_err_out\(/ { for (k = FNR - 4; k < FNR; k++) ok[FILENAME, k] = 1 }
    END {
        for (i = 1; i <= m; i++) if (!(at[i] in ok)) {
            split(at[i], p, SUBSEP)
            printf "%s:%d: an error buffer and its capacity below the public API: take one skv_err *err (core/util.h)\n", p[1], p[2]
        }
    }
')
if [ -n "$errpairs" ]; then echo "$errpairs"; bad=1; fi
# ---- the symbol pass ----
nobj=0
if [ -n "$build" ]; then
    objs=$(find "$build/obj" -name '*.o' 2>/dev/null | sort)
    if [ -z "$objs" ]; then echo "check-layers: no objects in $build/obj (build the library first)"; exit 2; fi
    nobj=$(echo "$objs" | wc -l)
    # nm -A: "PATH:ADDR TYPE NAME" (defined) and "PATH:  U NAME" (undefined)
    # shellcheck disable=SC2086
    nm -A $objs 2>/dev/null | awk -v base="$build/obj/" '
        function layer(path) { sub(base, "", path); sub("/.*", "", path); return path }
        function rank(l) {
            if (l == "core") return 0
            if (l == "tokenizer" || l == "quant" || l == "coder" || l == "grammar" || l == "cuda") return 1
            if (l == "engine") return 2
            if (l == "container") return 3
            if (l == "store") return 4
            if (l == "server") return 5
            return 9
        }
        {
            split($0, a, ":"); path = a[1]; sym = $NF; type = $(NF - 1)
            if (type == "U") { use[++n] = path; name[n] = sym }
            else if (type ~ /^[TDBRCVWGS]$/) def[sym] = layer(path)
        }
        END {
            bad = 0
            for (i = 1; i <= n; i++) {
                if (!(name[i] in def)) continue # libc, LMDB, zstd...: below every layer
                me = layer(use[i]); at = def[name[i]]
                if (at == me || rank(at) < rank(me)) continue
                f = use[i]; sub(base, "", f)
                printf "%s: calls %s, defined in %s (rank %d) above %s (rank %d)\n", f, name[i], at, rank(at), me, rank(me)
                bad = 1
            }
            exit bad
        }' || bad=1
fi
# ---- one-way chains: folders whose files must not call one another in a cycle ----
# (src/store/: store_tx.c at the bottom, store.c, which opens the store, at the top;
# scripts/file_cycles.py BUILD/obj/store --order prints the chain)
if [ -n "$build" ]; then
    for d in $acyclic; do
        python3 scripts/file_cycles.py "$build/obj/$d" || bad=1
    done
fi
if [ $bad -ne 0 ]; then echo "check-layers: FAILED (see docs: README Layout, docs/architecture.md)"; exit 1; fi
echo "check-layers: ok ($(echo "$files" | wc -l) files${build:+, $nobj objects})"
