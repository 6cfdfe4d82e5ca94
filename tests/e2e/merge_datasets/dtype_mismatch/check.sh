# A failed merge leaves nothing under the output name.
[[ ! -e "$1/merged.bin" && ! -e "$1/merged.idx" ]]
