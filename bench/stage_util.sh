# Shared by the bench/*-stage.sh scripts (sourced): wall-clock stamps and sizes.
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }  # seconds since a now() stamp
gib() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 2^30 }'; }
# random_model B DIR: a fresh DIR holding a folder of the released sizes with random bf16 weights (DIR/model).
random_model() { rm -rf "$2" && mkdir -p "$2" && "$1" random-model -o "$2/model" -q; }
# convert_fp8 B DIR FILE [ARGS...]: DIR/model converted to an fp8 file DIR/FILE (no prompt enhancer), timed.
convert_fp8() {
  local b=$1 d=$2 f=$3 t
  shift 3
  t=$(now)
  "$b" convert -m "$d/model" -o "$d/$f" --dtype fp8 --no-pe -q "$@" || { echo "error: convert --dtype fp8 $*"; return 1; }
  echo "convert --dtype fp8 $*: $(since "$t") s"
}
