# bench/run.sh's report: the per-workload table, per-sample figures, back-pressure lines, profile
# comparison and the write throttle. Sourced by run.sh (it uses run.sh's WORK, RESULTS, PERF, NOTES,
# THROTTLE_MBPS); not meant to run on its own.

print_table() {  # print_table WL TITLE
    local wl=$1 title=$2
    echo
    echo "workload: $title   runs: $RUNS each (median)"
    awk -F'\t' -v wl="$wl" -v dur="$DURATION" -v raw="$RAW" "$MEDIAN_AWK"'
        function row(name, s, l, lp, lr, c, w, b, m, x, ok) {
            printf "  %-8s %10s %9s %7s %9s %7s %7s %11s %7s %9s  %s\n", name, s, l, lp, lr, c, w, b, m, x, ok
        }
        function ratio(a, b) {
            if (a == "" || b == "") return "-"
            if (b + 0 == 0) return (a + 0 == 0) ? "-" : "inf"
            return sprintf("%.3f", a / b)
        }
        $1 == wl {
            t = $2; n[t]++; k = n[t]
            C[t, k] = $8; W[t, k] = $9; B[t, k] = $10; R[t, k] = $11 / 1024; M[t, k] = $10 / dur / 1e6
            okc[t] += $12; if ($4 != 0) failed[t]++
            P[t, k] = $14
            line[t, k] = $0
            if ($12 == 1) {  # sample counts only from files perf read to the end
                nr[t]++; j = nr[t]
                S[t, j] = $5; L[t, j] = $6; LR[t, j] = $7
                LP[t, j] = ($5 + $6) > 0 ? 100 * $6 / ($5 + $6) : 0
            }
        }
        function fmt(t, f, spec) { return (med[t, f] == "") ? "n/a" : sprintf(spec, med[t, f]) }
        END {
            row("tool", "samples", "lost", "lost%", "lostrec", "cpu_s", "wall_s", "bytes", "MB/s", "maxrss_MB", "ok")
            split("perf ringcap", tools, " ")
            nf = split("s l lp lr c w b m x", F, " ")
            for (ti = 1; ti <= 2; ti++) {
                t = tools[ti]
                if (!n[t]) continue
                for (fi = 1; fi <= nf; fi++) {
                    f = F[fi]
                    cnt = (f == "s" || f == "l" || f == "lp" || f == "lr") ? nr[t] + 0 : n[t]
                    for (k = 1; k <= cnt; k++) {
                        v[k] = (f == "s") ? S[t,k] : (f == "l") ? L[t,k] : (f == "lp") ? LP[t,k] : (f == "lr") ? LR[t,k] : \
                               (f == "c") ? C[t,k] : (f == "w") ? W[t,k] : (f == "b") ? B[t,k] : (f == "m") ? M[t,k] : R[t,k]
                        v[k] += 0
                    }
                    med[t, f] = median(v, cnt)
                }
                ok = okc[t] "/" n[t] (failed[t] ? " (" failed[t] " failed)" : "")
                row(t, fmt(t, "s", "%d"), fmt(t, "l", "%d"), fmt(t, "lp", "%.2f"), fmt(t, "lr", "%d"),
                    fmt(t, "c", "%.3f"), fmt(t, "w", "%.2f"), fmt(t, "b", "%d"), fmt(t, "m", "%.2f"), fmt(t, "x", "%.1f"), ok)
            }
            if (n["perf"] && n["ringcap"]) {
                row("ratio", ratio(med["ringcap","s"], med["perf","s"]), ratio(med["ringcap","l"], med["perf","l"]),
                    ratio(med["ringcap","lp"], med["perf","lp"]), ratio(med["ringcap","lr"], med["perf","lr"]),
                    ratio(med["ringcap","c"], med["perf","c"]), ratio(med["ringcap","w"], med["perf","w"]),
                    ratio(med["ringcap","b"], med["perf","b"]), ratio(med["ringcap","m"], med["perf","m"]),
                    ratio(med["ringcap","x"], med["perf","x"]), "(ringcap/perf)")
            }
            if (n["perf"] && n["ringcap"] && med["perf","c"] > 0 && med["ringcap","b"] > 0 && med["perf","b"] > 0)
                printf "  CPU per captured byte, ringcap/perf: %.3f (median cpu_s / median bytes of each)\n",
                    (med["ringcap","c"] / med["ringcap","b"]) / (med["perf","c"] / med["perf","b"])
            for (ti = 1; ti <= 2; ti++) {
                t = tools[ti]
                if (!n[t]) continue
                lps = ""; maxlp = 0
                for (k = 1; k <= nr[t]; k++) { lps = lps sprintf(" %.2f", LP[t,k]); if (LP[t,k] > maxlp) maxlp = LP[t,k] }
                ps = ""
                for (k = 1; k <= n[t]; k++) ps = ps " " P[t,k]
                printf "  %-8s per run: lost%%%s (max %.2f); punted writes%s\n", t, lps, maxlp, ps
            }
            if (okc["perf"] < n["perf"] || okc["ringcap"] < n["ringcap"])
                print "  (samples, lost, lost% and lostrec are medians over the files perf could read: column ok)"
            if (raw == 1) {
                print "    per run: tool run exit samples lost lostrec cpu_s wall_s bytes maxrss_kB perf_ok ringcap_selfcheck"
                for (ti = 1; ti <= 2; ti++) { t = tools[ti]; for (k = 1; k <= n[t]; k++) {
                    split(line[t,k], c, "\t")
                    printf "    %-7s %s %s %s %s %s %s %s %s %s %s %s\n", c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10], c[11], c[12], c[13]
                } }
            }
        }' "$RESULTS"
}

per_sample() {  # per_sample WL: medians of bytes/sample and cpu_s/sample per tool, and their ratio
    awk -F'\t' -v wl="$1" "$MEDIAN_AWK"'
        $1 == wl && $12 == 1 && $5 > 0 { t = $2; k = ++n[t]; B[t, k] = $10 / $5; C[t, k] = 1e6 * $8 / $5; R[t, $3] = C[t, k] }
        END {
            # Run r of each tool ran back to back (run_workload): their ratio cancels the drift of
            # this machine between minutes, which the medians of each tool do not.
            for (r = 1; (("perf", r) in R) || (("ringcap", r) in R); r++)
                if ((("perf", r) in R) && (("ringcap", r) in R) && R["perf", r] > 0) { q[++nq] = R["ringcap", r] / R["perf", r]; ql = ql sprintf(" %.2f", q[nq]) }
            for (ti = split("perf ringcap", T, " "); ti >= 1; ti--) {
                t = T[ti]; if (!n[t]) continue
                for (k = 1; k <= n[t]; k++) { b[k] = B[t, k]; c[k] = C[t, k] }
                mb[t] = median(b, n[t]); mc[t] = median(c, n[t])
            }
            if (n["perf"] && n["ringcap"])
                printf "  per captured sample (medians of each run): bytes perf %.1f, ringcap %.1f (ratio %.3f); CPU us perf %.2f, ringcap %.2f (ratio %.3f)\n",
                    mb["perf"], mb["ringcap"], mb["ringcap"] / mb["perf"], mc["perf"], mc["ringcap"], mc["ringcap"] / mc["perf"]
            if (nq) {
                for (i = 1; i <= nq; i++) qs[i] = q[i]
                printf "  CPU per captured sample, ringcap / perf of the same run (back to back):%s; median %.3f, worst %.3f\n", ql, median(qs, nq), qs[nq]
            }
        }' "$RESULTS"
}

zstd_share() {  # zstd_share WL: ringcap's compression CPU alone per sample, against perf's whole CPU per sample
    local z
    z=$(grep -h '^ringcap: samples=' "$WORK/$1"-ringcap-*.log 2>/dev/null |
        sed -n 's/.*samples=\([0-9]*\) .*compress_cpu_s=\([0-9.]*\).*/\1 \2/p' |
        awk '$1 > 0 { print 1e6 * $2 / $1 }' | sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2 }')
    [ -n "$z" ] || return 0
    awk -F'\t' -v wl="$1" -v z="$z" '
        $1 == wl && $2 == "perf" && $12 == 1 && $5 > 0 { c[++n] = 1e6 * $8 / $5 }
        END {
            for (i = 2; i <= n; i++) { t = c[i]; j = i - 1; while (j >= 1 && c[j] > t) { c[j+1] = c[j]; j-- } c[j+1] = t }
            m = n ? ((n % 2) ? c[(n+1)/2] : (c[n/2] + c[n/2+1]) / 2) : 0
            printf "  of which ringcap'"'"'s zstd alone (encoder thread CPU / samples, median): %.2f us per captured sample", z
            if (m > 0) printf " = %.3f x perf'"'"'s whole CPU per captured sample", z / m
            printf "\n"
        }' "$RESULTS"
}

pressure_lines() {  # pressure_lines WL: per ringcap run, what back-pressure did and what a sample cost
    local log run line
    for log in "$WORK/$1"-ringcap-*.log; do
        [ -f "$log" ] || continue
        run=${log##*-}; run=${run%.log}
        line=$(grep -E '^ringcap: samples=' "$log" | tail -1 || true)
        [ -n "$line" ] || continue
        awk -F'\t' -v wl="$1" -v run="$run" -v line="$line" -v bp="$(grep -m1 '^ringcap: back-pressure (' "$log" | sed 's/ A faster disk.*//' | cut -c1-240)" '
            function val(k,   m) { return match(line, " " k "=[0-9]+") ? substr(line, RSTART + length(k) + 2, RLENGTH - length(k) - 2) + 0 : 0 }
            $1 == wl && $2 == "ringcap" && $3 == run {
                s = val("samples"); l = val("lost"); d = val("dropped"); c = val("cut")
                printf "  ringcap run %s: lost %d (%.2f %%), dropped %d, cut %d (%.1f %% of samples); %.2f us CPU and %.0f bytes per captured sample\n",
                    run, l, 100 * l / (s + l + d + (s + l + d == 0)), d, c, 100 * c / (s + (s == 0)), 1e6 * $8 / (s + (s == 0)), $10 / (s + (s == 0))
                if (bp != "") printf "      %s\n", bp
            }' "$RESULTS"
    done
}

# The largest difference, in points, in the self % of the top 10 symbols of two sets of runs.
top10_diff() {  # top10_diff "A FILES" "B FILES": A's top 10 symbols by mean self % over its files, largest |A - B|
    local a b
    a=$(for f in $1; do [ -s "$f" ] && echo "$f"; done)
    b=$(for f in $2; do [ -s "$f" ] && echo "$f"; done)
    [ -n "$a" ] && [ -n "$b" ] || return 0
    # A symbol missing from a run's list (top 30) counts as 0 % there.
    awk -v na="$(wc -l <<<"$a")" -v nb="$(wc -l <<<"$b")" '
        FNR == 1 { side = (FILENAME in isa) ? "a" : "b" }
        BEGIN { split(ARGV[1], la, "\n"); for (k in la) isa[la[k]] = 1; ARGV[1] = "" }
        { sub(/%/, "", $1); if (side == "a") A[$2] += $1 / na; else B[$2] += $1 / nb }
        END {
            for (k = 1; k <= 10; k++) {  # the 10 largest of A, largest first
                best = ""; for (s in A) if (!(s in done) && (best == "" || A[s] > A[best])) best = s
                if (best == "") break
                done[best] = 1; d = A[best] - B[best]; if (d < 0) d = -d
                if (d > m) { m = d; w = best }
            }
            printf "%.2f points (%s)\n", m, w
        }' "$a" $a $b
}

# A cgroup whose processes write at most MBPS MB/s to the disk under $WORK (v2 io.max or v1 blkio,
# as /proc/self/mountinfo shows the machine's layout). Sets THROTTLE_CG, or prints why not.
THROTTLE_CG=""
throttle_on() {
    local d maj min dev v1="" v2="" name="ringcap-bench-$$"
    d=$((16#$(stat -c %D "$WORK")))
    maj=$(( (d >> 8) & 0xfff )); min=$(( (d & 0xff) | ((d >> 12) & 0xfff00) ))
    dev="$maj:$min"
    [ -e "/sys/dev/block/$dev/partition" ] && dev=$(cat "/sys/dev/block/$dev/../dev")
    [ -e "/sys/dev/block/$dev" ] || { echo "  workload 14 skipped: $WORK is not on a block device"; return 1; }
    while read -r _ _ _ _ mnt _ rest; do
        case " $rest " in *" - cgroup2 "*) v2=$mnt ;; *" - cgroup "*blkio*) v1=$mnt ;; esac
    done </proc/self/mountinfo
    if [ -n "$v2" ] && grep -qw io "$v2/cgroup.controllers" 2>/dev/null && echo +io >"$v2/cgroup.subtree_control" 2>/dev/null \
            && mkdir -p "$v2/$name" && echo "$dev wbps=$((THROTTLE_MBPS * 1000000))" >"$v2/$name/io.max"; then
        THROTTLE_CG="$v2/$name"
    elif [ -n "$v1" ] && mkdir -p "$v1/$name" && echo "$dev $((THROTTLE_MBPS * 1000000))" >"$v1/$name/blkio.throttle.write_bps_device"; then
        THROTTLE_CG="$v1/$name"
    else
        echo "  workload 14 skipped: no cgroup io controller to throttle $dev (needs root)"; return 1
    fi
}
throttle_off() { [ -n "$THROTTLE_CG" ] && rmdir "$THROTTLE_CG" 2>/dev/null; THROTTLE_CG=""; }

flush_notes() {
    if [ -s "$NOTES" ]; then cat "$NOTES"; : >"$NOTES"; fi
}
