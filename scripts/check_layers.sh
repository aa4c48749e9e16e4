#!/bin/sh
# check_layers.sh [ROOT] - fails when a source file includes a header of a higher layer.
#
# Layers, lowest first (README "Layout"); a file may include headers of its own
# folder and of strictly lower ranks; tokenizer, quant and coder share a rank and
# do not include one another:
#   0 core   1 tokenizer quant coder   2 engine   3 container   4 store   5 server   6 tools
# Only quoted includes of the form "layer/name.h" are layered; "seqkv.h" (the public
# header) may be included anywhere. Prints each violation as FILE:LINE: message.
root=${1:-.}
cd "$root" || exit 2
rank() {
    case "$1" in
        core) echo 0 ;; tokenizer|quant|coder) echo 1 ;; engine) echo 2 ;;
        container) echo 3 ;; store) echo 4 ;; server) echo 5 ;; tools) echo 6 ;; *) echo -1 ;;
    esac
}
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
            *) # unqualified: only a tools-local header (tools/cli.h) is allowed
               if [ "$layer" = tools ] && [ -f "tools/$inc" ]; then continue; fi
               echo "$f:$line: include \"$inc\" does not name its layer (write \"layer/$inc\")"; bad=1; continue ;;
        esac
        r=$(rank "$dep")
        if [ "$r" -lt 0 ]; then echo "$f:$line: include \"$inc\": unknown layer '$dep'"; bad=1
        elif [ "$dep" != "$layer" ] && [ "$r" -ge "$me" ]; then
            echo "$f:$line: $layer (rank $me) must not include \"$inc\" ($dep, rank $r)"; bad=1
        fi
    done < "${TMPDIR:-/tmp}/skv_layers.$$"
    rm -f "${TMPDIR:-/tmp}/skv_layers.$$"
done
if [ $bad -ne 0 ]; then echo "check-layers: FAILED (see docs: README Layout)"; exit 1; fi
echo "check-layers: ok ($(echo "$files" | wc -l) files)"
