# shellcheck shell=bash
# The median of a[1..n] for the bench's awk programs (it sorts a in place; "" when n is 0):
#   awk "$MEDIAN_AWK"'{ ... median(a, n) ... }'
# Sourced by run.sh and flight.sh.
# shellcheck disable=SC2034  # used by the scripts that source this
MEDIAN_AWK='
function median(a, n,   i, j, t) {
    for (i = 2; i <= n; i++) { t = a[i]; j = i - 1; while (j >= 1 && a[j] > t) { a[j+1] = a[j]; j-- } a[j+1] = t }
    if (n == 0) return ""
    return (n % 2) ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
}'
