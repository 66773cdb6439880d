# Shared by the bench/*-stage.sh scripts (sourced): wall-clock stamps and sizes.
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }  # seconds since a now() stamp
gib() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 2^30 }'; }
